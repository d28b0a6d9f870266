// Drives a Troupe node with the @a2a-js/sdk 1.x client over A2A 0.3 (the SDK picks
// its legacy JSON-RPC transport from the card's protocolVersion): send, stream, get.
// Usage: node a2a-js-client.mjs BASE_URL; prints one JSON object.
import { ClientFactory, DefaultAgentCardResolver, JsonRpcTransportFactory } from '@a2a-js/sdk/client';
import { randomUUID } from 'node:crypto';

const base = process.argv[2];
// legacyCompat reads a 0.3 card (url, preferredTransport) and speaks 0.3 JSON-RPC to it.
const client = await new ClientFactory({
  cardResolver: new DefaultAgentCardResolver({ legacyCompat: { enabled: true } }),
  transports: [new JsonRpcTransportFactory({ legacyCompat: { enabled: true } })],
}).createFromUrl(base);

const message = (text) => ({
  messageId: randomUUID(), contextId: '', taskId: '', role: 1 /* ROLE_USER */,
  parts: [{ content: { $case: 'text', value: text } }],
  metadata: undefined, extensions: [], referenceTaskIds: [],
});
const text = (parts) => (parts || []).map((p) => (p.content && p.content.$case === 'text' ? p.content.value : '')).join('');
const unwrap = (r) => (r && r.payload ? r.payload : r && r.id ? { $case: 'task', value: r } : { $case: 'message', value: r });

const out = {};
const sent = unwrap(await client.sendMessage({ tenant: '', message: message('echo hello from js'), configuration: undefined, metadata: undefined }));
out.send = { kind: sent.$case, id: sent.value.id, contextId: sent.value.contextId, state: sent.value.status && sent.value.status.state,
  answer: sent.$case === 'task' ? sent.value.artifacts.map((a) => text(a.parts)).join('\n') : text(sent.value.parts) };

out.stream = [];
for await (const ev of client.sendMessageStream({ tenant: '', message: message('What is 6 * 7?'), configuration: undefined, metadata: undefined })) {
  const p = ev.payload;
  if (!p) continue;
  if (p.$case === 'task') out.stream.push('task:' + p.value.status.state);
  else if (p.$case === 'statusUpdate') out.stream.push('status:' + p.value.status.state + (p.value.status.message ? ':' + text(p.value.status.message.parts) : ''));
  else if (p.$case === 'artifactUpdate') out.stream.push('artifact:' + text(p.value.artifact.parts));
  else out.stream.push(p.$case);
}

const got = await client.getTask({ tenant: '', id: out.send.id, historyLength: undefined });
out.get = { id: got.id, state: got.status.state, answer: got.artifacts.map((a) => text(a.parts)).join('\n') };
console.log(JSON.stringify(out));

// Drives a Troupe node with the @a2a-js/sdk 1.x client. Usage:
//   node a2a-js-client.mjs BASE_URL MODE (BASE_URL, or the URL of an agent's card)
// MODE default: the SDK as it comes, speaking A2A 1.0 to the card's 1.0 interface:
//   send, stream, get, push notification configs (create, get, list, delete).
// MODE legacy: the SDK's 0.3 compatibility (legacyCompat) on a card without 1.0's
//   supportedInterfaces, as from a 0.3-only server: send, stream, get.
// MODE deltas: default, one streamed message; each artifact event as
//   {append, last, text}, and the final state and answer.
// Prints one JSON object.
// MODE subscribe TASK_ID: default, SubscribeToTask (resubscribeTask) of the task;
//   prints a JSON line per event as it comes ({"event": "task:<state>",
//   "status:<state>[:<message>]" or "artifact:<text>"}), then {"end": true} or
//   {"error": "<message>"}.
import { ClientFactory, DefaultAgentCardResolver, JsonRpcTransportFactory } from '@a2a-js/sdk/client';
import { randomUUID } from 'node:crypto';

const [base, mode = 'default', taskId = ''] = process.argv.slice(2);

let client;
if (mode === 'legacy') {
  const card = await (await fetch(new URL('/.well-known/agent-card.json', base))).json();
  delete card.supportedInterfaces;
  client = await new ClientFactory({
    cardResolver: new DefaultAgentCardResolver({ legacyCompat: { enabled: true } }),
    transports: [new JsonRpcTransportFactory({ legacyCompat: { enabled: true } })],
  }).createFromAgentCard(card);
} else {
  // A BASE_URL that names a card (an agent's, …/a2a/NAME/.well-known/agent-card.json)
  // is read as it is.
  client = await new ClientFactory().createFromUrl(base, base.endsWith('.json') ? '' : undefined);
}

const message = (text) => ({
  messageId: randomUUID(), contextId: '', taskId: '', role: 1 /* ROLE_USER */,
  parts: [{ content: { $case: 'text', value: text }, metadata: undefined, filename: '', mediaType: '' }],
  metadata: undefined, extensions: [], referenceTaskIds: [],
});
const request = (text) => ({ tenant: '', message: message(text), configuration: undefined, metadata: undefined });
const text = (parts) => (parts || []).map((p) => (p.content && p.content.$case === 'text' ? p.content.value : '')).join('');
// The default transport returns the task or message; the legacy one the response.
const unwrap = (r) => (r && r.payload ? r.payload : r && r.id ? { $case: 'task', value: r } : { $case: 'message', value: r });

const out = { protocol: client.protocolVersion };

if (mode === 'subscribe') {
  try {
    for await (const ev of client.resubscribeTask({ tenant: '', id: taskId })) {
      const p = ev.payload;
      if (!p) continue;
      let line = p.$case;
      if (p.$case === 'task') line = 'task:' + p.value.status.state;
      else if (p.$case === 'statusUpdate') line = 'status:' + p.value.status.state + (p.value.status.message ? ':' + text(p.value.status.message.parts) : '');
      else if (p.$case === 'artifactUpdate') line = 'artifact:' + text(p.value.artifact.parts);
      console.log(JSON.stringify({ event: line }));
    }
    console.log(JSON.stringify({ end: true }));
  } catch (e) {
    console.log(JSON.stringify({ error: String((e && e.message) || e) }));
  }
  process.exit(0);
}

if (mode === 'deltas') {
  out.artifacts = [];
  for await (const ev of client.sendMessageStream(request('count to 100'))) {
    const p = ev.payload;
    if (p && p.$case === 'artifactUpdate') {
      out.artifacts.push({ append: p.value.append, last: p.value.lastChunk, text: text(p.value.artifact.parts) });
    } else if (p && p.$case === 'statusUpdate') {
      out.state = p.value.status.state;
      out.answer = p.value.status.message ? text(p.value.status.message.parts) : '';
    }
  }
  console.log(JSON.stringify(out));
  process.exit(0);
}

const sent = unwrap(await client.sendMessage(request('echo hello from js')));
out.send = { kind: sent.$case, id: sent.value.id, contextId: sent.value.contextId, state: sent.value.status && sent.value.status.state,
  answer: sent.$case === 'task' ? sent.value.artifacts.map((a) => text(a.parts)).join('\n') : text(sent.value.parts) };

out.stream = [];
for await (const ev of client.sendMessageStream(request('What is 6 * 7?'))) {
  const p = ev.payload;
  if (!p) continue;
  if (p.$case === 'task') out.stream.push('task:' + p.value.status.state);
  else if (p.$case === 'statusUpdate') out.stream.push('status:' + p.value.status.state + (p.value.status.message ? ':' + text(p.value.status.message.parts) : ''));
  else if (p.$case === 'artifactUpdate') out.stream.push('artifact:' + text(p.value.artifact.parts));
  else out.stream.push(p.$case);
}

const got = await client.getTask({ tenant: '', id: out.send.id, historyLength: undefined });
out.get = { id: got.id, state: got.status.state, answer: got.artifacts.map((a) => text(a.parts)).join('\n') };

if (mode === 'default') {
  const cfg = { tenant: '', id: 'hook-1', taskId: out.send.id, url: 'https://hooks.example.com/a2a', token: 'tok',
    authentication: { scheme: 'Bearer', credentials: 'secret' } };
  const made = await client.createTaskPushNotificationConfig(cfg);
  const one = await client.getTaskPushNotificationConfig({ tenant: '', taskId: out.send.id, id: 'hook-1' });
  const list = await client.listTaskPushNotificationConfig({ tenant: '', taskId: out.send.id, pageSize: 0, pageToken: '' });
  await client.deleteTaskPushNotificationConfig({ tenant: '', taskId: out.send.id, id: 'hook-1' });
  const after = await client.listTaskPushNotificationConfig({ tenant: '', taskId: out.send.id, pageSize: 0, pageToken: '' });
  out.push = { made: [made.id, made.taskId, made.url, made.token, made.authentication && made.authentication.scheme].join(' '),
    got: [one.id, one.url].join(' '), listed: list.configs.length, after: after.configs.length };
}
console.log(JSON.stringify(out));

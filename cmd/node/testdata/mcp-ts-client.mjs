// Drives a Troupe node's MCP server with the official TypeScript SDK
// (@modelcontextprotocol/sdk), with its default settings unless a mode says
// otherwise, the way a user's program does. Usage:
//   node mcp-ts-client.mjs URL MODE [ARG...]
// URL is the node's /mcp endpoint (Streamable HTTP), or stdio:JSON to start the
// node with {"command", "args", "env"} and speak to it over stdio. MODE:
//   basic [INPUT]   list tools, resources and prompts; run_task with a fast task
//   slow            run_task "slow ..." with the SDK's defaults
//   progress MS     run_task "slow ..." with a request timeout of MS ms that
//                   progress notifications reset (onprogress, resetTimeoutOnProgress)
//   cancel          run_task "block ...", aborted (AbortSignal) once the model is asked
//   timeout MS      run_task "block ..." with a request timeout of MS ms (the SDK's
//                   default is 60 s), then a fast one
//   hostile         bad calls; then a good one
//   reconnect       run_task, then (after a line on stdin: the server restarted)
//                   run_task and calculator; then a new client's run_task
//   follow          run_task "slow ..." (the server dies under it; "session ID" on
//                   stderr once progress names it), then (after a line on stdin: the
//                   server restarted) a new client's task_result of that session
//   survive         run_task "slow ..." with the SDK's defaults while the server
//                   restarts under it
//   tool NAME JSON  call tool NAME with the arguments JSON ("calling" on stderr first)
//   idle SECONDS    run_task, nothing for SECONDS, run_task again
//   concurrent N    N clients at once, each with a run_task
// Prints one JSON object on stdout.
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { createInterface } from 'node:readline';

const [url, mode, ...args] = process.argv.slice(2);

function err(e) {
  const out = { type: e?.constructor?.name ?? typeof e, message: String(e?.message ?? e) };
  if (typeof e?.code === 'number') out.code = e.code;
  return out;
}

function outcome(r) {
  const text = (r.content ?? []).filter((c) => c.type === 'text').map((c) => c.text).join('\n');
  return { text, is_error: Boolean(r.isError), session: r._meta?.['troupe/session_id'] ?? '' };
}

async function call(client, name, args, options) {
  try {
    return outcome(await client.callTool({ name, arguments: args }, undefined, options));
  } catch (e) {
    return { error: err(e) };
  }
}

async function connect() {
  const client = new Client({ name: 'troupe-test', version: '1' });
  const transport = url.startsWith('stdio:')
    ? new StdioClientTransport(JSON.parse(url.slice('stdio:'.length)))
    : new StreamableHTTPClientTransport(new URL(url));
  await client.connect(transport);
  return { client, transport };
}

const modes = {
  async basic([input = 'fast: hello from typescript']) {
    const { client, transport } = await connect();
    const tools = await client.listTools();
    const resources = await client.listResources();
    const prompts = await client.listPrompts();
    const out = {
      protocol: transport.protocolVersion ?? client.getNegotiatedProtocolVersion?.() ?? '',
      tools: tools.tools.map((t) => t.name).sort(),
      resources: resources.resources.map((r) => r.uri).sort(),
      prompts: prompts.prompts.map((p) => p.name).sort(),
      run: await call(client, 'run_task', { input }),
    };
    await client.close();
    return out;
  },
  async slow() {
    const { client, transport } = await connect();
    const out = { protocol: transport.protocolVersion ?? '', run: await call(client, 'run_task', { input: 'slow: take your time' }) };
    await client.close();
    return out;
  },
  async progress([ms]) {
    const { client } = await connect();
    let progress = 0;
    const run = await call(client, 'run_task', { input: 'slow: take your time' },
      { timeout: Number(ms), resetTimeoutOnProgress: true, onprogress: () => { progress++; } });
    await client.close();
    return { run, progress };
  },
  async cancel() {
    const { client, transport } = await connect();
    const abort = new AbortController();
    const run = await call(client, 'run_task', { input: 'block: until cancelled' }, {
      signal: abort.signal,
      onprogress: (p) => { if (String(p.message ?? '').includes('model is asked')) abort.abort('the user cancelled'); },
    });
    const out = { protocol: transport.protocolVersion ?? '', run, cancelled: abort.signal.aborted };
    out.after = await call(client, 'run_task', { input: 'fast: after the cancel' });
    await client.close();
    return out;
  },
  async timeout([ms]) {
    const { client } = await connect();
    const run = await call(client, 'run_task', { input: 'block: past the timeout' }, { timeout: Number(ms) });
    const after = await call(client, 'run_task', { input: 'fast: after the timeout' });
    await client.close();
    return { run, after };
  },
  async hostile() {
    const big = 'x'.repeat(1 << 20) + 'y'.repeat(10);
    const cases = [
      ['unknown tool', 'no_such_tool', {}],
      ['input is a number', 'run_task', { input: 42 }],
      ['input is an object', 'run_task', { input: { a: 1 } }],
      ['input missing', 'run_task', {}],
      ['extra field', 'run_task', { input: 'fast: x', extra: true }],
      ['session_id with control characters', 'run_task', { input: 'fast: x', session_id: 'a\u0000b\nc' }],
      ['control characters and escapes', 'run_task', { input: 'fast: \u0000\u0001\u001b[31m\\"\ud7ff\u2028 end' }],
      ['1 MiB input', 'run_task', { input: 'fast: ' + big }],
      ['3 MiB input', 'run_task', { input: 'fast: ' + big.repeat(3) }],
      ['calculator with a wrong type', 'calculator', { expression: ['1', '+'] }],
      ['max_tokens is a string', 'run_task', { input: 'fast: x', max_tokens: 'ten' }],
    ];
    const { client } = await connect();
    const out = {};
    for (const [label, name, a] of cases) out[label] = await call(client, name, a);
    out.after = await call(client, 'run_task', { input: 'fast: still up' });
    await client.close();
    return out;
  },
  async reconnect() {
    const out = {};
    const { client } = await connect();
    out.before = await call(client, 'run_task', { input: 'fast: before the restart' });
    process.stderr.write('ready\n');
    const rl = createInterface({ input: process.stdin });
    await new Promise((resolve) => rl.once('line', resolve));
    rl.close();
    out.same_client = await call(client, 'run_task', { input: 'fast: after the restart' });
    out.same_client_tool = await call(client, 'calculator', { expression: '6*7' });
    await client.close().catch(() => {});
    const second = await connect();
    out.new_client = await call(second.client, 'run_task', { input: 'fast: a new client' });
    await second.client.close();
    return out;
  },
  async follow() {
    const { client } = await connect();
    let named = '';
    const out = {};
    // The SDK does not fail a call whose stream it could not resume: the call ends
    // at its request timeout (60 s by default; 10 s here).
    out.run = await call(client, 'run_task', { input: 'slow: through the restart' }, {
      timeout: 10000,
      onprogress: (p) => {
        const m = /\(session (\S+), event/.exec(String(p.message ?? ''));
        if (m && !named) {
          named = m[1];
          process.stderr.write(`session ${named}\n`);
        }
      },
    });
    await client.close().catch(() => {});
    out.session = out.run.session || named;
    process.stderr.write('ready\n');
    const rl = createInterface({ input: process.stdin });
    await new Promise((resolve) => rl.once('line', resolve));
    rl.close();
    const second = await connect();
    out.result = await call(second.client, 'task_result', { session_id: out.session });
    await second.client.close();
    return out;
  },
  async survive() {
    const { client } = await connect();
    const out = { run: await call(client, 'run_task', { input: 'slow: through the restart' }) };
    await client.close().catch(() => {});
    return out;
  },
  async tool([name, json]) {
    const { client } = await connect();
    process.stderr.write('calling\n');
    const out = { run: await call(client, name, JSON.parse(json)) };
    await client.close().catch(() => {});
    return out;
  },
  async idle([seconds]) {
    const { client } = await connect();
    const out = { before: await call(client, 'run_task', { input: 'fast: before idling' }) };
    await new Promise((resolve) => setTimeout(resolve, Number(seconds) * 1000));
    out.after = await call(client, 'run_task', { input: 'fast: after idling' });
    await client.close();
    return out;
  },
  async concurrent([n]) {
    const results = await Promise.all(Array.from({ length: Number(n) }, async (_, i) => {
      try {
        const { client } = await connect();
        const r = await call(client, 'run_task', { input: `fast: client ${i}` });
        await client.close();
        return r;
      } catch (e) {
        return { error: err(e) };
      }
    }));
    return { results };
  },
};

let out;
try {
  out = await modes[mode](args);
} catch (e) {
  out = { fatal: err(e) };
}
process.stdout.write(JSON.stringify(out) + '\n');
process.exit(0);

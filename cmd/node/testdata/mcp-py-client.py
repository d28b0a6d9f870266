"""Drives a Troupe node's MCP server with the official Python SDK (mcp on PyPI), with
its default settings unless a mode says otherwise, the way a user's program does.

Usage: python mcp-py-client.py URL MODE [ARG...]
URL is the node's /mcp endpoint (Streamable HTTP), or stdio:JSON to start the node
with {"command", "args", "env"} and speak to it over stdio. MODE:
  basic [INPUT]   list tools, resources and prompts; run_task with a fast task
  slow            run_task "slow ..." with the SDK's defaults
  cancel          run_task "block ...", cancelled once the model is asked
  hostile         bad calls; then a good one
  reconnect       run_task, then (after a line on stdin: the server restarted) run_task
                  and calculator; then a new client's run_task
  follow          run_task "slow ..." (the server dies under it; "session ID" on stderr
                  once progress names it), then (after a line on stdin: the server
                  restarted) a new client's task_result of that session
  survive         run_task "slow ..." with the SDK's defaults while the server
                  restarts under it
  tool NAME JSON  call tool NAME with the arguments JSON ("calling" on stderr first)
  idle SECONDS    run_task, nothing for SECONDS, run_task again
  concurrent N    N clients at once, each with a run_task
  token TOKEN     list tools with Authorization: Bearer TOKEN ("": no header)
Prints one JSON object on stdout.
"""

import json
import re
import sys

import os

import anyio
import mcp.shared._httpx_utils
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

# MCP_SSE_READ_TIMEOUT scales down the SDK's default read timeout of a response
# stream (MCP_DEFAULT_SSE_READ_TIMEOUT, 300 s), which the default HTTP client reads
# when it is made: a test cannot wait five minutes.
if os.environ.get("MCP_SSE_READ_TIMEOUT"):
    mcp.shared._httpx_utils.MCP_DEFAULT_SSE_READ_TIMEOUT = float(os.environ["MCP_SSE_READ_TIMEOUT"])


def err(e):
    """Describes an exception, through exception groups."""
    while isinstance(e, BaseExceptionGroup) and len(e.exceptions) == 1:
        e = e.exceptions[0]
    out = {"type": type(e).__name__, "message": str(e)}
    if isinstance(e, MCPError):
        out["code"] = e.code
        out["message"] = e.message
    return out


def connect(url):
    """A client of the server at url (see the usage)."""
    if url.startswith("stdio:"):
        spec = json.loads(url[len("stdio:"):])
        return Client(StdioServerParameters(command=spec["command"], args=spec["args"], env=spec["env"]))
    return Client(url)


def text(result):
    return "\n".join(c.text for c in result.content if getattr(c, "type", "") == "text")


def outcome(result):
    return {"text": text(result), "is_error": bool(result.is_error),
            "session": (result.meta or {}).get("troupe/session_id", "")}


async def call(client, name, args, **kw):
    try:
        return outcome(await client.call_tool(name, args, **kw))
    except Exception as e:  # noqa: BLE001 - the test reads what happened
        return {"error": err(e)}


async def basic(url, args):
    async with connect(url) as c:
        tools = await c.list_tools()
        resources = await c.list_resources()
        prompts = await c.list_prompts()
        return {"protocol": c.protocol_version,
                "tools": sorted(t.name for t in tools.tools),
                "resources": sorted(str(r.uri) for r in resources.resources),
                "prompts": sorted(p.name for p in prompts.prompts),
                "run": await call(c, "run_task", {"input": args[0] if args else "fast: hello from python"})}


async def slow(url, _):
    async with connect(url) as c:
        return {"protocol": c.protocol_version, "run": await call(c, "run_task", {"input": "slow: take your time"})}


async def cancel(url, _):
    asked = anyio.Event()

    async def progress(p, total, message):
        if message and "model is asked" in message:
            asked.set()

    async with connect(url) as c:
        out = {"protocol": c.protocol_version}
        async with anyio.create_task_group() as tg:
            async def run():
                out["run"] = await call(c, "run_task", {"input": "block: until cancelled"}, progress_callback=progress)
            tg.start_soon(run)
            with anyio.fail_after(60):
                await asked.wait()
            tg.cancel_scope.cancel()
        out["cancelled"] = True
        # The connection still serves.
        out["after"] = await call(c, "run_task", {"input": "fast: after the cancel"})
        return out


async def hostile(url, _):
    big = "x" * (1 << 20) + "y" * 10
    cases = [
        ("unknown tool", "no_such_tool", {}),
        ("input is a number", "run_task", {"input": 42}),
        ("input is an object", "run_task", {"input": {"a": 1}}),
        ("input missing", "run_task", {}),
        ("extra field", "run_task", {"input": "fast: x", "extra": True}),
        ("session_id with control characters", "run_task", {"input": "fast: x", "session_id": "a\u0000b\nc"}),
        ("control characters and escapes", "run_task", {"input": "fast: \u0000\u0001\u001b[31m\\\"\ud7ff\u2028 end"}),
        ("1 MiB input", "run_task", {"input": "fast: " + big}),
        ("3 MiB input", "run_task", {"input": "fast: " + big * 3}),
        ("calculator with a wrong type", "calculator", {"expression": ["1", "+"]}),
        ("max_tokens is a string", "run_task", {"input": "fast: x", "max_tokens": "ten"}),
    ]
    out = {}
    async with connect(url) as c:
        for label, name, args in cases:
            out[label] = await call(c, name, args)
        out["after"] = await call(c, "run_task", {"input": "fast: still up"})
    return out


async def reconnect(url, _):
    out = {}
    async with connect(url) as c:
        out["before"] = await call(c, "run_task", {"input": "fast: before the restart"})
        print("ready", file=sys.stderr, flush=True)
        await anyio.to_thread.run_sync(sys.stdin.readline)
        out["same_client"] = await call(c, "run_task", {"input": "fast: after the restart"})
        out["same_client_tool"] = await call(c, "calculator", {"expression": "6*7"})
    async with connect(url) as c:
        out["new_client"] = await call(c, "run_task", {"input": "fast: a new client"})
    return out


async def follow(url, _):
    out = {}
    named = {}

    async def progress(p, total, message):
        m = re.search(r"\(session (\S+), event", message or "")
        if m and "session" not in named:
            named["session"] = m.group(1)
            print("session " + named["session"], file=sys.stderr, flush=True)

    try:
        async with connect(url) as c:
            out["run"] = await call(c, "run_task", {"input": "slow: through the restart"}, progress_callback=progress)
    except Exception as e:  # noqa: BLE001 - the node went away under the call
        out["run"] = {"error": err(e)}
    out["session"] = out["run"].get("session") or named.get("session", "")
    print("ready", file=sys.stderr, flush=True)
    await anyio.to_thread.run_sync(sys.stdin.readline)
    async with connect(url) as c:
        out["result"] = await call(c, "task_result", {"session_id": out["session"]})
    return out


async def survive(url, _):
    async with connect(url) as c:
        return {"run": await call(c, "run_task", {"input": "slow: through the restart"})}


async def tool(url, args):
    out = {}
    try:
        async with connect(url) as c:
            print("calling", file=sys.stderr, flush=True)
            out["run"] = await call(c, args[0], json.loads(args[1]))
    except Exception as e:  # noqa: BLE001 - closing the session, the node may be down
        out["close"] = err(e)
    return out


async def idle(url, args):
    async with connect(url) as c:
        out = {"before": await call(c, "run_task", {"input": "fast: before idling"})}
        await anyio.sleep(float(args[0]))
        out["after"] = await call(c, "run_task", {"input": "fast: after idling"})
        return out


async def concurrent(url, args):
    n = int(args[0])
    results = [None] * n

    async def one(i):
        try:
            async with connect(url) as c:
                results[i] = await call(c, "run_task", {"input": f"fast: client {i}"})
        except Exception as e:  # noqa: BLE001
            results[i] = {"error": err(e)}

    async with anyio.create_task_group() as tg:
        for i in range(n):
            tg.start_soon(one, i)
    return {"results": results}


async def token(url, args):
    headers = {"Authorization": "Bearer " + args[0]} if args[0] else None
    transport = streamable_http_client(url, http_client=mcp.shared._httpx_utils.create_mcp_http_client(headers=headers))
    try:
        async with Client(transport) as c:
            return {"tools": [t.name for t in (await c.list_tools()).tools]}
    except Exception as e:  # noqa: BLE001
        return {"error": err(e)}


MODES = {"basic": basic, "slow": slow, "cancel": cancel, "hostile": hostile,
         "reconnect": reconnect, "follow": follow, "survive": survive, "tool": tool, "idle": idle, "concurrent": concurrent,
         "token": token}


def main():
    url, mode, args = sys.argv[1], sys.argv[2], sys.argv[3:]
    try:
        out = anyio.run(MODES[mode], url, args)
    except Exception as e:  # noqa: BLE001
        out = {"fatal": err(e)}
    print(json.dumps(out))


main()

"""Drives the MCP server at URL with the official Python SDK (mcp on PyPI), with its
default settings, across a restart of the server: it sets its log level to debug,
subscribes to notes://a and notes://b and unsubscribes from notes://b, says
"subscribed" on stderr, waits for an update (of notes://a alone), says "ready", and after a line on stdin (the server restarted) calls calculator and
waits (up to 30 s) for an update of a resource. Prints one JSON object on stdout:
{"calc", "logs", "updates"} or {"fatal"}.

Usage: python mcp-py-state.py URL
"""

import json
import sys

import anyio
from mcp import Client


async def main(url):
    logs, updates = [], []

    async def on_log(params):
        logs.append(str(params.data))

    async def on_message(message):
        n = getattr(message, "root", message)
        if getattr(n, "method", "") == "notifications/resources/updated":
            updates.append(n.params.uri)

    async with Client(url, logging_callback=on_log, message_handler=on_message) as c:
        await c.set_logging_level("debug")
        await c.subscribe_resource("notes://a")
        await c.subscribe_resource("notes://b")
        await c.unsubscribe_resource("notes://b")
        # An update before the restart: the client's stream of notifications has
        # events, with IDs, which it names when it reconnects.
        print("subscribed", file=sys.stderr, flush=True)
        with anyio.move_on_after(30):
            while not updates:
                await anyio.sleep(0.05)
        if updates != ["notes://a"] * len(updates) or not updates:
            return {"fatal": "updates before the restart: %r" % updates}
        updates.clear()
        print("ready", file=sys.stderr, flush=True)
        await anyio.to_thread.run_sync(sys.stdin.readline)
        logs.clear()
        result = await c.call_tool("calculator", {"expression": "6*7"})
        calc = "\n".join(x.text for x in result.content if getattr(x, "type", "") == "text")
        with anyio.move_on_after(30):
            while not updates:
                await anyio.sleep(0.05)
        return {"calc": calc, "logs": logs, "updates": updates}


try:
    out = anyio.run(main, sys.argv[1])
except BaseException as e:  # noqa: BLE001 - the test reads what happened
    out = {"fatal": repr(e)}
print(json.dumps(out))

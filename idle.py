import sys, time, anyio, warnings; warnings.simplefilter("ignore")
from mcp import Client
async def main():
    async with Client(sys.argv[1]) as c:
        r = await c.call_tool("run_task", {"input": "What is 2+2?"}); print(time.strftime("%T"), "before", r.content[0].text, r.is_error, flush=True)
        await anyio.sleep(float(sys.argv[2]))
        for name, a in [("run_task", {"input": "What is 3+3?"}), ("calculator", {"expression": "6*7"})]:
            try:
                r = await c.call_tool(name, a); print(time.strftime("%T"), "after", r.content[0].text, r.is_error, flush=True)
            except Exception as e: print(time.strftime("%T"), "ERROR", type(e).__name__, e, flush=True)
anyio.run(main)

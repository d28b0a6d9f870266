# Reads a Server-Sent Events stream with httpx-sse (what the A2A and MCP Python
# SDKs read streams with), at its default settings, for a number of seconds, and
# prints the events it gave as JSON: [{"event", "data", "id"}].
import json
import os
import sys
import threading
import time

import httpx
from httpx_sse import connect_sse

url, seconds = sys.argv[1], float(sys.argv[2])
events = []
lock = threading.Lock()


def read():
    with httpx.Client() as client:
        with connect_sse(client, "GET", url) as source:
            for sse in source.iter_sse():
                with lock:
                    events.append({"event": sse.event, "data": sse.data, "id": sse.id})


threading.Thread(target=read, daemon=True).start()
time.sleep(seconds)
with lock:
    sys.stdout.write(json.dumps(events) + "\n")
sys.stdout.flush()
os._exit(0)

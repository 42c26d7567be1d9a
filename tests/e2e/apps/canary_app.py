"""A replica for canary tests: answers its version, and misbehaves as told.

FAIL_PERCENT: that share of GET / answers 500 (counter-based, so exact), never
/health. DELAY_S: every GET / waits that long first. The answer carries the
X-Steady-Version header the replica received, if any (it never should).
STARTUP_S: wait that long before listening (a slow start, to pause an update mid-way).
START_GATE: a path; listen only once that file exists (bounded): a test holds an
update at its first step until its command has arrived, whatever the machine's load.
"""

import itertools
import json
import os
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

VERSION = os.environ.get("STEADY_SERVICE_VERSION", "?")
FAIL_PERCENT = int(os.environ.get("FAIL_PERCENT", "0"))
DELAY_S = float(os.environ.get("DELAY_S", "0"))
COUNTER = itertools.count()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        status = 200
        if self.path != "/health":
            if DELAY_S:
                time.sleep(DELAY_S)
            if next(COUNTER) * FAIL_PERCENT % 100 < FAIL_PERCENT:  # spread evenly
                status = 500
        body = json.dumps(
            {"version": VERSION, "pin_seen": self.headers.get("X-Steady-Version")}
        ).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


time.sleep(float(os.environ.get("STARTUP_S", "0")))
GATE = os.environ.get("START_GATE", "")
for _ in range(1200):  # at most 120 s: a test that never opens the gate ends anyway
    if not GATE or os.path.exists(GATE):
        break
    time.sleep(0.1)
ThreadingHTTPServer(("127.0.0.1", int(os.environ["PORT"])), Handler).serve_forever()

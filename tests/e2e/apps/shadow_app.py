"""A replica for shadow-step tests: a JSON order whose fields a version may get wrong.

DROP_PERCENT: that share of the GET answers (counter-based, so exact; never /health)
leave out "total". STAMP=1: every answer carries the time it was made ("at"), which
differs between any two answers (noise). The answer names the replica's version
("version": the service file ignores that path).
"""

import itertools
import json
import os
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

VERSION = os.environ.get("STEADY_SERVICE_VERSION", "?")
DROP_PERCENT = int(os.environ.get("DROP_PERCENT", "0"))
STAMP = os.environ.get("STAMP") == "1"
COUNTER = itertools.count(1)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        body = {"version": VERSION, "items": [{"sku": "a", "qty": 2}], "total": 12.5}
        if self.path != "/health":
            if DROP_PERCENT and next(COUNTER) * DROP_PERCENT % 100 < DROP_PERCENT:
                del body["total"]
            if STAMP:
                body["at"] = time.time_ns()
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("X-Version", VERSION)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: object) -> None:
        pass


ThreadingHTTPServer(("127.0.0.1", int(os.environ["PORT"])), Handler).serve_forever()

"""A small HTTP server for SteadyServe's example: it says which replica answered.

Standard library only. Endpoints:
  GET  /         -> JSON {replica_id, version, pid, message}
  GET  /health   -> 200 "ok" (the readiness probe)
  POST /echo     -> the request body back
  POST /-/reconfigure -> takes {"message": "..."} (the service's user_config) without
       a restart; anything else is refused with 400, which fails the update
  GET  /stream?n=5&interval=0.1&gate=/path -> an SSE stream of n tokens; with
       ``gate``, it sends the first token and waits for that file to exist
       before the rest (tests use this to prove the stream is not buffered).
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

REPLICA_ID = os.environ.get("STEADY_REPLICA_ID", "?")
VERSION = os.environ.get("STEADY_SERVICE_VERSION", "?")
MESSAGE = os.environ.get("MESSAGE", "hello from SteadyServe")
CONFIG: dict[str, str] = {"message": MESSAGE}


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body go out as separate writes

    def log_message(
        self, format: str, *args: object
    ) -> None:  # quiet: one line per request is noise
        pass

    def _send(self, status: int, body: bytes, content_type: str = "application/json") -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def do_GET(self) -> None:
        url = urlparse(self.path)
        if url.path == "/health":
            self._send(200, b"ok\n", "text/plain")
        elif url.path == "/stream":
            self._stream(parse_qs(url.query))
        else:
            info = {
                "replica_id": REPLICA_ID,
                "version": VERSION,
                "pid": os.getpid(),
                "message": CONFIG["message"],
            }
            self._send(200, json.dumps(info).encode() + b"\n")

    do_HEAD = do_GET

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length)
        if urlparse(self.path).path == "/-/reconfigure":
            self._reconfigure(body)
            return
        self._send(200, body, self.headers.get("Content-Type", "application/octet-stream"))

    def _reconfigure(self, body: bytes) -> None:
        try:
            config = json.loads(body)
        except ValueError:
            config = None
        if not isinstance(config, dict) or not isinstance(config.get("message"), str):
            self._send(400, b'{"error": "user_config must be {\\"message\\": str}"}\n')
            return
        CONFIG["message"] = config["message"]
        self._send(200, b'{"ok": true}\n')

    def _stream(self, query: dict[str, list[str]]) -> None:
        count = int(query.get("n", ["5"])[0])
        interval = float(query.get("interval", ["0.1"])[0])
        gate = query.get("gate", [None])[0]
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for i in range(count):
            event = f"data: token-{i} replica-{REPLICA_ID}\n\n".encode()
            self.wfile.write(b"%x\r\n%s\r\n" % (len(event), event))
            self.wfile.flush()
            if i == 0 and gate:
                deadline = time.monotonic() + 30
                while not os.path.exists(gate) and time.monotonic() < deadline:
                    time.sleep(0.01)
            elif i < count - 1:
                time.sleep(interval)
        self.wfile.write(b"0\r\n\r\n")


def main() -> None:
    port = int(os.environ.get("PORT", "8080"))
    host = os.environ.get("HOST", "127.0.0.1")  # the node's address on the Ray backend
    server = ThreadingHTTPServer((host, port), Handler)
    server.daemon_threads = True
    print(f"replica {REPLICA_ID} (version {VERSION}) listening on {host}:{port}", flush=True)
    with contextlib.suppress(KeyboardInterrupt):
        server.serve_forever()


if __name__ == "__main__":
    main()

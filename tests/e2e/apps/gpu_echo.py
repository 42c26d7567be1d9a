"""A replica that says which GPUs it was given: GET / answers its CUDA_VISIBLE_DEVICES
and NVIDIA_VISIBLE_DEVICES as JSON, GET /health is its readiness probe.

Standard library only, so it starts in a blink (the GPU tests start many)."""

from __future__ import annotations

import json
import os
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: object) -> None:  # quiet
        pass

    def do_GET(self) -> None:
        if self.path == "/health":
            body = b"ok"
        else:
            body = json.dumps(
                {
                    "replica": os.environ.get("STEADY_REPLICA_ID"),
                    "version": os.environ.get("STEADY_SERVICE_VERSION"),
                    "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
                    "nvidia_visible_devices": os.environ.get("NVIDIA_VISIBLE_DEVICES"),
                }
            ).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


if __name__ == "__main__":
    ThreadingHTTPServer(("127.0.0.1", int(os.environ["PORT"])), Handler).serve_forever()

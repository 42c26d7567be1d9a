"""SkyServe's http_server shape: ``python3 server.py --port 8080``, the port its own.

Besides ``/`` and ``/health``, it says what its network lets it do, for the
isolation tests: ``/reach?port=P`` tries the host's loopback (and slirp4netns's
gateway, the host as seen from a namespace) on port P; ``/pip`` runs
``pip download`` of a small package from the package index pip uses by default;
a POST to ``/-/reconfigure`` (``service.reconfigure_path``) sets the config ``/``
shows.
"""

import argparse
import http.server
import json
import os
import socket
import socketserver
import subprocess
import sys
import tempfile
from urllib.parse import parse_qs, urlparse

MESSAGE = os.environ.get("MESSAGE", "v1")
REPLICA = os.environ.get("SKYPILOT_SERVE_REPLICA_ID", "?")
CONFIG: dict[str, object] = {}


def reach(port: int) -> dict[str, str]:
    found = {}
    for host in ("127.0.0.1", "10.0.2.2"):
        try:
            with socket.create_connection((host, port), timeout=2) as sock:
                sock.sendall(b"GET /api/v1/services HTTP/1.0\r\n\r\n")
                found[host] = sock.recv(64).decode(errors="replace") or "connected"
        except OSError as exc:
            found[host] = f"no: {type(exc).__name__}"
    return found


def pip_download() -> dict[str, object]:
    with tempfile.TemporaryDirectory() as dest:
        done = subprocess.run(
            [
                *(sys.executable, "-m", "pip", "download", "--isolated", "--no-deps"),
                *("--only-binary=:all:", "--no-cache-dir", "-d", dest, "six"),
                *("--cert", "/etc/ssl/certs/ca-certificates.crt"),
            ],
            capture_output=True,
            text=True,
            timeout=60,
        )
        return {"code": done.returncode, "files": os.listdir(dest), "err": done.stderr[-300:]}


class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        url = urlparse(self.path)
        if url.path == "/reach":
            answer: object = reach(int(parse_qs(url.query)["port"][0]))
        elif url.path == "/pip":
            answer = pip_download()
        else:
            answer = {"message": MESSAGE, "replica": REPLICA, "config": CONFIG.get("user")}
        self._send(answer)

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if urlparse(self.path).path == "/-/reconfigure":
            CONFIG["user"] = json.loads(body)
        self._send({"ok": True})

    def _send(self, answer: object) -> None:
        data = json.dumps(answer).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        pass


class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, default=8080)
    args = parser.parse_args()
    with Server(("0.0.0.0", args.port), Handler) as httpd:
        print("serving at port", args.port, flush=True)
        httpd.serve_forever()

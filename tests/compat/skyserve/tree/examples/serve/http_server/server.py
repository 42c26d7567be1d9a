"""A stdlib HTTP server shaped like SkyServe's http_server example: --port, 200 everywhere."""

import argparse
import http.server
import os
import socketserver


class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = f"Hi, SkyServe here! replica {os.environ.get('SKYPILOT_SERVE_REPLICA_ID')}\n"
        data = body.encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.do_GET()

    def log_message(self, *args: object) -> None:
        pass


class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="SkyServe-style test server")
    parser.add_argument("--port", type=int, default=8081)
    args = parser.parse_args()
    with Server(("127.0.0.1", args.port), Handler) as httpd:
        print("serving at port", args.port, flush=True)
        httpd.serve_forever()

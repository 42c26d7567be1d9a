"""The new version of SkyServe's update test server: answers 'new'."""

import argparse
import http.server
import socketserver


class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", "3")
        self.end_headers()
        self.wfile.write(b"new")

    def log_message(self, *args: object) -> None:
        pass


class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, default=8081)
    with Server(("127.0.0.1", parser.parse_args().port), Handler) as httpd:
        httpd.serve_forever()

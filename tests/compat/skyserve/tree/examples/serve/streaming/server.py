"""Streams numbered chunks (chunked transfer encoding), like SkyServe's streaming example."""

import http.server
import os
import socketserver
import time


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        if self.path == "/health":
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"ok")
            return
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for i in range(5):
            data = f"chunk {i}\n".encode()
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            self.wfile.flush()
            time.sleep(0.05)
        self.wfile.write(b"0\r\n\r\n")

    def log_message(self, *args: object) -> None:
        pass


class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True


if __name__ == "__main__":
    with Server(("127.0.0.1", int(os.environ["PORT"])), Handler) as httpd:
        httpd.serve_forever()

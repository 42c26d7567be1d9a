"""A hostile replica: every way out of its sandbox it can think of, tried on request.

``GET /climb?key=PATH&pid=PID&home=PATH`` answers what each attempt got: reading
the home's ``control.key``, seeing the controller's process, entering the
controller's network and mount namespaces (``nsenter``, and ``setns(2)`` itself on
whatever namespace file it can open), making namespaces of its own, mounting,
and its own capabilities, seccomp mode and ``no_new_privs``. It binds the port
its file names (80 in the test: below 1024) and sets no SIGTERM handler.
"""

import argparse
import ctypes
import http.server
import json
import os
import socketserver
import subprocess
from urllib.parse import parse_qs, urlparse

CLONE_NEWNET = 0x40000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWNS = 0x00020000
libc = ctypes.CDLL(None, use_errno=True)


def attempt(work):
    try:
        return f"yes: {work()}"[:300]
    except Exception as exc:  # what stopped it is the answer
        return f"no: {type(exc).__name__}: {exc}"[:300]


def run(*argv):
    done = subprocess.run(argv, capture_output=True, text=True, timeout=10)
    if done.returncode != 0:
        raise OSError(done.returncode, (done.stderr or done.stdout).strip()[-200:])
    return done.stdout.strip()[-100:] or "ran"


def syscall_ok(result):
    if result != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    return "done"


def setns_path(path, kind):
    fd = os.open(path, os.O_RDONLY)
    try:
        return syscall_ok(libc.setns(fd, kind))
    finally:
        os.close(fd)


def status():
    wanted = ("CapEff", "CapPrm", "CapBnd", "CapAmb", "NoNewPrivs", "Seccomp", "Uid")
    found = {}
    with open("/proc/self/status") as f:
        for line in f:
            name, _, value = line.partition(":")
            if name in wanted:
                found[name] = value.split()[0]
    return found


def climb(query):
    key, pid, home = query["key"][0], query["pid"][0], query["home"][0]
    pids = sorted(int(p) for p in os.listdir("/proc") if p.isdigit())
    return {
        "read control.key": attempt(lambda: open(key).read()),
        "list the home": attempt(lambda: os.listdir(home)),
        "see the controller": attempt(lambda: open(f"/proc/{pid}/cmdline").read()),
        "signal the controller": attempt(lambda: os.kill(int(pid), 0)),
        "nsenter its network": attempt(lambda: run("nsenter", f"--net=/proc/{pid}/ns/net", "id")),
        "nsenter its mounts": attempt(lambda: run("nsenter", f"--mount=/proc/{pid}/ns/mnt", "id")),
        "nsenter pid 1's network": attempt(lambda: run("nsenter", "--net=/proc/1/ns/net", "true")),
        "setns pid 1's network": attempt(lambda: setns_path("/proc/1/ns/net", CLONE_NEWNET)),
        "setns a /run/netns file": attempt(
            lambda: setns_path("/run/netns/" + os.listdir("/run/netns")[0], CLONE_NEWNET)
        ),
        "unshare a user namespace": attempt(lambda: syscall_ok(libc.unshare(CLONE_NEWUSER))),
        "unshare -U": attempt(lambda: run("unshare", "-U", "true")),
        "unshare a mount namespace": attempt(lambda: syscall_ok(libc.unshare(CLONE_NEWNS))),
        "mount a tmpfs": attempt(
            lambda: syscall_ok(libc.mount(b"none", b"/tmp", b"tmpfs", 0, None))
        ),
        "write /usr": attempt(lambda: open("/usr/steady-was-here", "w").write("x")),
        "read /etc/shadow": attempt(lambda: open("/etc/shadow").read()),
        "pids": pids,
        "status": status(),
        "home": os.environ.get("HOME", ""),
        "write HOME": attempt(lambda: open(os.path.join(os.environ["HOME"], "x"), "w").write("x")),
        "write /tmp": attempt(lambda: open("/tmp/x", "w").write("x")),
        "write /dev/shm": attempt(lambda: open("/dev/shm/x", "w").write("x")),
    }


class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        url = urlparse(self.path)
        answer = climb(parse_qs(url.query)) if url.path == "/climb" else {"ok": True}
        body = json.dumps(answer).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    Server(("127.0.0.1", parser.parse_args().port), Handler).serve_forever()

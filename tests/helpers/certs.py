"""Self-signed certificates for the TLS tests, made with ``openssl`` on PATH."""

from __future__ import annotations

import subprocess
from pathlib import Path


def make_pair(folder: Path, stem: str) -> tuple[Path, Path]:
    """``(keyfile, certfile)``: a fresh RSA key and a certificate for 127.0.0.1."""
    key, cert = folder / f"{stem}-key.pem", folder / f"{stem}-cert.pem"
    subprocess.run(
        [
            "openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
            "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
            "-keyout", str(key), "-out", str(cert),
        ],
        check=True,
        capture_output=True,
        timeout=60,
    )  # fmt: skip
    return key, cert

"""Loopback helpers the benchmarks share: a free port, and waiting until a server listens on it."""

from __future__ import annotations

import socket
import time


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_listening(port: int, tries: int = 100, pause_s: float = 0.1) -> None:
    """Return once something accepts connections on 127.0.0.1:`port` (or after `tries` attempts)."""
    for _ in range(tries):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(pause_s)

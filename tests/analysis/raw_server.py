"""A tiny HTTP server on a loopback port that answers every request with one fixed body, sent as slowly as a
test asks (a byte at a time, ``gap`` seconds apart), recording how much of the body each connection took.

For what a framework would not send: a body trickling one byte at a time (every read well within a read
timeout, the whole answer far beyond it), or JSON that breaks a parser.
"""

from __future__ import annotations

import socketserver
import threading
import time
from dataclasses import dataclass, field


@dataclass
class RawAnswers:
    """What the server answers and what it saw.

    :param body: the body of every answer.
    :param gap: seconds between two bytes of the body (0: the body at once).
    """

    body: bytes
    gap: float = 0.0
    content_type: str = "application/json"
    sent: list[int] = field(default_factory=list)
    """Bytes of the body each finished connection took (in order of finishing)."""
    stopping: threading.Event = field(default_factory=threading.Event)


class _Handler(socketserver.BaseRequestHandler):
    server: _Server

    def handle(self) -> None:
        answers = self.server.answers
        request = b""
        while b"\r\n\r\n" not in request:
            chunk = self.request.recv(4096)
            if not chunk:
                return
            request += chunk
        head = (
            f"HTTP/1.1 200 OK\r\nContent-Type: {answers.content_type}\r\nContent-Length: {len(answers.body)}\r\n"
            "Connection: close\r\n\r\n"
        )
        sent = 0
        try:
            self.request.sendall(head.encode())
            if not answers.gap:
                self.request.sendall(answers.body)
                sent = len(answers.body)
            for index in range(len(answers.body) if answers.gap else 0):
                if answers.stopping.wait(answers.gap):
                    break
                self.request.sendall(answers.body[index : index + 1])
                sent += 1
        except OSError:  # the client went away
            pass
        answers.sent.append(sent)


class _Server(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, answers: RawAnswers) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.answers = answers


class RawServer:
    """Serve :class:`RawAnswers` from a thread; use as a context manager."""

    def __init__(self, answers: RawAnswers) -> None:
        self.answers = answers
        self._server = _Server(answers)
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def __enter__(self) -> RawServer:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.answers.stopping.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)

    def wait_for_connections(self, count: int, timeout: float = 10.0) -> list[int]:
        """The bytes each of the first ``count`` finished connections took; fails after ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while len(self.answers.sent) < count:
            assert time.monotonic() < deadline, f"{len(self.answers.sent)} connection(s) finished, {count} expected"
            time.sleep(0.02)
        return self.answers.sent[:count]


def deeply_nested_json(depth: int = 100_000) -> bytes:
    """Valid JSON nested deeper than Python's ``json`` module can parse (it raises ``RecursionError``)."""
    return b"[" * depth + b"]" * depth


__all__ = ["RawAnswers", "RawServer", "deeply_nested_json"]

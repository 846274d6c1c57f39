"""A TCP proxy between psycopg and a real PostgreSQL that can lose the answer to a COMMIT: the
COMMIT reaches the server and completes there, and the client's connection is then cut before
the answer gets back — the one failure whose outcome a client cannot know by itself.

`lose_next_commit()` arms it for one COMMIT; with `refuse_after=True` it then also cuts every
other connection and refuses new ones, so the client cannot ask the server what happened.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator

# psycopg ends a transaction block with a simple query: 'Q', length 11, "COMMIT\0".
_COMMIT = b"Q\x00\x00\x00\x0bCOMMIT\x00"


class CommitProxy:
    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._armed = False
        self._refuse_after = False
        self.refusing = False
        self._open: list[socket.socket] = []
        self.lost = threading.Event()  # set once a COMMIT's answer was dropped
        threading.Thread(target=self._accept, daemon=True).start()

    def url(self, server_url: str) -> str:
        return server_url.replace(f":{self.target_port}/", f":{self.port}/")

    def lose_next_commit(self, *, refuse_after: bool = False) -> None:
        self._refuse_after = refuse_after
        self._armed = True

    def close(self) -> None:
        self._listener.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            if self.refusing:
                client.close()
                continue
            server = socket.create_connection(("127.0.0.1", self.target_port))
            self._open += [client, server]
            committing = threading.Event()
            threading.Thread(
                target=self._to_server, args=(client, server, committing), daemon=True
            ).start()
            threading.Thread(
                target=self._to_client, args=(server, client, committing), daemon=True
            ).start()

    def _to_server(
        self, client: socket.socket, server: socket.socket, committing: threading.Event
    ) -> None:
        with contextlib.suppress(OSError):
            while data := client.recv(65536):
                if self._armed and _COMMIT in data:
                    self._armed = False
                    committing.set()
                server.sendall(data)
        _close(client, server)

    def _to_client(
        self, server: socket.socket, client: socket.socket, committing: threading.Event
    ) -> None:
        with contextlib.suppress(OSError):
            while data := server.recv(65536):
                if committing.is_set():
                    # The server answered the COMMIT, so it is done there: lose the answer.
                    self.refusing = self._refuse_after
                    _close(*(self._open if self.refusing else (client, server)))
                    self.lost.set()
                    return
                client.sendall(data)
        _close(client, server)


def _close(*sockets: socket.socket) -> None:
    for sock in sockets:
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)
        sock.close()


@contextlib.contextmanager
def commit_proxy(target_port: int) -> Iterator[CommitProxy]:
    proxy = CommitProxy(target_port)
    try:
        yield proxy
    finally:
        proxy.close()

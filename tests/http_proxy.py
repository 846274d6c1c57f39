"""A tiny forward proxy on loopback, as a worker's `HTTP(S)_PROXY` names one: plain HTTP
requests in absolute form are sent on to the server and their answers relayed; `CONNECT`
opens a tunnel (TLS then runs end to end through it). It records what it carried, and may
require credentials (407 without them).
"""

from __future__ import annotations

import http.client
import http.server
import select
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from urllib.parse import urlsplit

_HOP = {"proxy-authorization", "proxy-connection", "connection", "keep-alive"}


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, format: str, *args: object) -> None:  # quiet
        pass

    def _allowed(self) -> bool:
        got = self.headers.get("Proxy-Authorization")
        self.server.seen.append((self.command, self.path, got))
        if self.server.authorization is None or got == self.server.authorization:
            return True
        self.send_response(407)
        self.send_header("Proxy-Authenticate", 'Basic realm="proxy"')
        self.send_header("Content-Length", "0")
        self.end_headers()
        return False

    def do_CONNECT(self) -> None:
        if not self._allowed():
            return
        host, _, port = self.path.rpartition(":")
        upstream = socket.create_connection((host.strip("[]"), int(port)))
        self.send_response(200, "Connection established")
        self.end_headers()
        pair = {self.connection: upstream, upstream: self.connection}
        try:
            while True:
                ready, _, _ = select.select(list(pair), [], [], 30)
                if not ready:
                    return
                for sock in ready:
                    data = sock.recv(65536)
                    if not data:
                        return
                    pair[sock].sendall(data)
        finally:
            upstream.close()
            self.close_connection = True

    def _forward(self) -> None:
        if not self._allowed():
            return
        target = urlsplit(self.path)
        if target.scheme != "http" or not target.netloc:
            self.send_error(400, "a proxy is asked for an absolute http:// URL")
            return
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else None
        headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP}
        upstream = http.client.HTTPConnection(target.netloc, timeout=30)
        path = target.path + (f"?{target.query}" if target.query else "")
        upstream.request(self.command, path, body, headers)
        answer = upstream.getresponse()
        content = answer.read()
        upstream.close()
        self.send_response(answer.status, answer.reason)
        for name, value in answer.getheaders():
            if name.lower() not in _HOP | {"content-length"}:
                self.send_header(name, value)
        self.send_header("Content-Length", str(len(content)))
        self.end_headers()
        self.wfile.write(content)

    do_GET = do_PUT = do_PATCH = do_DELETE = do_POST = do_HEAD = _forward


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    seen: list[tuple[str, str, str | None]]
    authorization: str | None


@contextmanager
def running_proxy(authorization: str | None = None) -> Iterator[_Server]:
    """The proxy on a free loopback port (`.server_port`); `.seen` lists (method, target,
    Proxy-Authorization) of each request it was asked to carry."""
    server = _Server(("127.0.0.1", 0), _Handler)
    server.seen, server.authorization = [], authorization
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()

"""A TCP forwarder on 127.0.0.1 that a test can cut: what it carries is then lost, in both directions, and new
connections are accepted and hear nothing, as through a network partition that drops packets (connects and
requests time out; nothing is refused or reset). ``heal()`` closes what was held: the two sides reconnect.

``oncelog.testing.cluster`` puts one in front of etcd for each broker (``ClusterProcess(etcd_proxies=True)``), so
that a test can cut one broker from the cluster's metadata without root (``oncelog.testing.netns`` does whole
network partitions, as root).
"""

from __future__ import annotations

import selectors
import socket
import threading

__all__ = ["TcpProxy"]


class TcpProxy:
    def __init__(self, target: tuple[str, int], host: str = "127.0.0.1", port: int = 0) -> None:
        self.target = target
        self._listener = socket.create_server((host, port), reuse_port=False)
        self._listener.setblocking(False)
        self.host, self.port = self._listener.getsockname()[:2]
        self._selector = selectors.DefaultSelector()
        self._peer: dict[socket.socket, socket.socket | None] = {}  # each side -> the other (None: held, cut)
        self._cut = False
        self._closing = False
        self._wake_r, self._wake_w = socket.socketpair()
        self._selector.register(self._listener, selectors.EVENT_READ, "accept")
        self._selector.register(self._wake_r, selectors.EVENT_READ, "wake")
        self._thread = threading.Thread(target=self._run, name=f"tcp-proxy-{self.port}", daemon=True)
        self._thread.start()

    @property
    def endpoint(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def is_cut(self) -> bool:
        return self._cut

    def cut(self) -> None:
        """From now on nothing passes: bytes either way are read and dropped, new connections are held."""
        self._cut = True

    def heal(self) -> None:
        """Forward again; the connections held while cut are closed (their owners reconnect)."""
        self._cut = False
        self._wake_w.send(b"h")

    def close(self) -> None:
        self._closing = True
        self._wake_w.send(b"c")
        self._thread.join(5)

    def __enter__(self) -> TcpProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the forwarding thread --------------------------------------------------------------------------------
    def _drop(self, s: socket.socket) -> None:
        other = self._peer.pop(s, None)
        for sock in (s, other):
            if sock is None:
                continue
            self._peer.pop(sock, None)
            try:
                self._selector.unregister(sock)
            except (KeyError, ValueError):
                pass
            sock.close()

    def _accept(self) -> None:
        try:
            client, _ = self._listener.accept()
        except OSError:
            return
        client.setblocking(False)
        upstream: socket.socket | None = None
        if not self._cut:
            try:
                upstream = socket.create_connection(self.target, timeout=5)
                upstream.setblocking(False)
            except OSError:
                client.close()
                return
            self._peer[upstream] = client
            self._selector.register(upstream, selectors.EVENT_READ, "data")
        self._peer[client] = upstream
        self._selector.register(client, selectors.EVENT_READ, "data")

    def _forward(self, s: socket.socket) -> None:
        try:
            data = s.recv(65536)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:
            self._drop(s)
            return
        other = self._peer.get(s)
        if self._cut or other is None:
            return  # lost on the way
        try:
            other.setblocking(True)
            other.sendall(data)
            other.setblocking(False)
        except OSError:
            self._drop(s)

    def _run(self) -> None:
        was_cut = False
        while not self._closing:
            for key, _ in self._selector.select(0.5):
                what = key.data
                sock = key.fileobj
                assert isinstance(sock, socket.socket)
                if what == "accept":
                    self._accept()
                elif what == "wake":
                    sock.recv(64)
                else:
                    self._forward(sock)
            if was_cut and not self._cut:  # healed: what lived through the cut lost bytes; start afresh
                for s in list(self._peer):
                    if s in self._peer:
                        self._drop(s)
            was_cut = self._cut
        for s in list(self._peer):
            if s in self._peer:
                self._drop(s)
        self._selector.close()
        self._listener.close()
        self._wake_r.close()
        self._wake_w.close()

"""A TCP relay in front of a ZooKeeper server that can swallow connections: accept
them, read what the client sends, never answer and never close. That is what
ZooKeeper 3.8 does to a connection made while it loads its database on start
(ZOOKEEPER-5051), made to happen on demand instead of by chance."""
from __future__ import annotations

import socket
import threading


class Relay:
    def __init__(self, upstream_port):
        self.upstream = ("127.0.0.1", upstream_port)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.hosts = f"127.0.0.1:{self._listener.getsockname()[1]}"
        self._lock = threading.Lock()
        self._to_swallow = 0
        self.swallowed = []  # [Event set when the client gave that connection up]
        self._pairs = []  # relayed (client, server) sockets
        self._held = []  # swallowed sockets
        self._threads = []
        self._closed = False
        self._spawn(self._accept)

    def _spawn(self, fn, *args):
        t = threading.Thread(target=fn, args=args, daemon=True)
        self._threads.append(t)
        t.start()

    def swallow(self, n):
        """Swallow the next ``n`` connections; relay the ones after."""
        with self._lock:
            self._to_swallow += n

    def cut(self):
        """Close every relayed connection, as a server that went away would."""
        with self._lock:
            pairs, self._pairs = self._pairs, []
        for pair in pairs:
            for s in pair:
                _close(s)

    def _accept(self):
        while True:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return  # closed
            with self._lock:
                swallow = self._to_swallow > 0
                if swallow:
                    self._to_swallow -= 1
                    gone = threading.Event()
                    self.swallowed.append(gone)
                    self._held.append(conn)
            if swallow:
                self._spawn(self._sink, conn, gone)
                continue
            try:
                up = socket.create_connection(self.upstream, timeout=5)
            except OSError:
                _close(conn)
                continue
            with self._lock:
                self._pairs.append((conn, up))
            self._spawn(self._pump, conn, up)
            self._spawn(self._pump, up, conn)

    @staticmethod
    def _sink(conn, gone):
        try:
            while conn.recv(65536):
                pass
        except OSError:
            pass
        gone.set()  # the client closed it (or reset it), or close() did

    @staticmethod
    def _pump(src, dst):
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        _close(src)
        _close(dst)

    def close(self):
        """Stop accepting and close every connection; prove the relay's threads ended."""
        _close(self._listener)
        self.cut()
        with self._lock:
            held, self._held = self._held, []
        for s in held:
            _close(s)
        for t in self._threads:
            t.join(timeout=10)
        assert not any(t.is_alive() for t in self._threads), "relay threads left running"


def _close(s):
    try:
        s.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    s.close()

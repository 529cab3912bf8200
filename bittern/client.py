"""Request/reply to a topology master (used by the CLI)."""
from __future__ import annotations

import time
import uuid

import zmq

from . import wire
from .errors import BitternError


class TMClient:
    """``curve``: ``(server public key, own public key, own secret key)`` for a topology
    master that is a CURVE server (cluster mode: nimbus is its only client); None in
    local mode, where its ipc socket is in a directory only this user can enter."""

    def __init__(self, endpoint, curve=None):
        self.endpoint = endpoint
        self._ctx = zmq.Context()
        self.sock = self._ctx.socket(zmq.DEALER)
        self.sock.setsockopt(zmq.IDENTITY, b"q" + uuid.uuid4().hex[:12].encode())
        self.sock.setsockopt(zmq.LINGER, 0)
        if curve is not None:
            from . import curve as _curve
            _curve.client_options(self.sock, *curve)
        self.sock.connect(endpoint)
        self._req = 0

    def request(self, op, timeout=15.0, **fields):
        self._req += 1
        req = self._req
        self.sock.send_multipart(wire.ctrl(op, req=req, **fields))
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not self.sock.poll(int(left * 1000) + 1):
                raise BitternError(f"the topology master at {self.endpoint} did not answer {op!r} "
                                   f"within {timeout:.0f}s")
            frames = self.sock.recv_multipart()
            msg = wire.decode_ctrl(frames[1])
            if msg.get("req") == req:
                if msg.get("error"):
                    raise BitternError(f"topology master: {msg['error']}")
                return msg

    def close(self):
        self.sock.close(linger=0)
        self._ctx.term()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

"""Request/reply to a topology master (used by the CLI, and by nimbus's API and web UI)."""
from __future__ import annotations

import time
import uuid

import zmq
from zmq.utils.monitor import recv_monitor_message

from . import wire
from .errors import BitternError

# A CURVE server that refused our key (ZAP) never lets this connection through, even once
# it admits the key (libzmq does not try the handshake again): a topology master reads
# the registered nimbus keys every few seconds, so a nimbus that registered just now is
# refused until then. The request goes out again on a fresh socket this long after a
# refusal, until the request's own timeout.
REFUSED_RETRY_SECS = 0.5
REFUSED = zmq.EVENT_HANDSHAKE_FAILED_AUTH | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL


class TMClient:
    """``curve``: ``(server public key, own public key, own secret key)`` for a topology
    master that is a CURVE server (cluster mode: nimbus is its only client); None in
    local mode, where its ipc socket is in a directory only this user can enter."""

    def __init__(self, endpoint, curve=None):
        self.endpoint, self.curve = endpoint, curve
        self._ctx = zmq.Context()
        self.sock = self._monitor = None
        self._open()
        self._req = 0

    def _open(self):
        self.sock = self._ctx.socket(zmq.DEALER)
        self.sock.setsockopt(zmq.IDENTITY, b"q" + uuid.uuid4().hex[:12].encode())
        self.sock.setsockopt(zmq.LINGER, 0)
        if self.curve is not None:
            from . import curve as _curve
            _curve.client_options(self.sock, *self.curve)
            self._monitor = self.sock.get_monitor_socket(REFUSED)
        self.sock.connect(self.endpoint)

    def _shut(self):
        if self._monitor is not None:
            self.sock.disable_monitor()
            self._monitor.close(linger=0)
            self._monitor = None
        self.sock.close(linger=0)

    def _refused(self):
        """True if the server refused our handshake since the last look."""
        out = False
        while self._monitor is not None and self._monitor.poll(0):
            event = recv_monitor_message(self._monitor, zmq.NOBLOCK)
            out = out or bool(event["event"] & REFUSED)
        return out

    def request(self, op, timeout=15.0, **fields):
        self._req += 1
        req = self._req
        frames = wire.ctrl(op, req=req, **fields)
        deadline = time.monotonic() + timeout
        refusals = 0
        sent = False
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                if refusals:
                    raise BitternError(f"the topology master at {self.endpoint} refused our key "
                                       f"({refusals} CURVE handshakes refused within {timeout:.0f}s)")
                raise BitternError(f"the topology master at {self.endpoint} did not answer {op!r} "
                                   f"within {timeout:.0f}s")
            if not sent:
                # never a blocking send: a DEALER with no connection to queue on (a refused
                # handshake can leave it so) would wait in send for good, past any timeout
                try:
                    self.sock.send_multipart(frames, zmq.NOBLOCK)
                    sent = True
                except zmq.Again:
                    pass
            ready = self._wait(left, sending=not sent)
            if ready == "refused":
                refusals += 1
                time.sleep(min(REFUSED_RETRY_SECS, max(0.0, deadline - time.monotonic())))
                # again, on a connection that will handshake anew (also when the time is up:
                # the next request must not start on a connection that was refused)
                self._shut()
                self._open()
                sent = False
                continue
            if not ready or not sent:
                continue  # (not sent: the socket can take the request now, or the time is up)
            reply = self.sock.recv_multipart()
            msg = wire.decode_ctrl(reply[1])
            if msg.get("req") == req:
                if msg.get("error"):
                    raise BitternError(f"topology master: {msg['error']}")
                return msg

    def _wait(self, secs, sending=False):
        """Up to ``secs``: True when the socket is ready (for the request when
        ``sending``, else with a reply), "refused" when the server refused our key,
        False when neither happened."""
        flag = zmq.POLLOUT if sending else zmq.POLLIN
        if self._monitor is None:
            return bool(self.sock.poll(int(secs * 1000) + 1, flag))
        poller = zmq.Poller()
        poller.register(self.sock, flag)
        poller.register(self._monitor, zmq.POLLIN)
        events = dict(poller.poll(int(secs * 1000) + 1))
        if self.sock in events:
            return True
        if self._monitor in events and self._refused():
            return "refused"
        return False

    def close(self):
        self._shut()
        self._ctx.term()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

"""Which connections to a CURVE server port were refused, from its socket monitor (pure).

libzmq reports a handshake that fails on the protocol or on authentication
(``EVENT_HANDSHAKE_FAILED_*``), but bytes that are not ZMTP at all (an HTTP request,
random garbage) only show as a connection accepted and then disconnected. So a refusal
is counted when a connection ends without having completed its handshake, whatever the
reason, and the failure events only say why (for the log).

Attribution: ``EVENT_ACCEPTED`` and ``EVENT_DISCONNECTED`` carry the connection's file
descriptor, ``EVENT_HANDSHAKE_SUCCEEDED`` does not. A success is credited to the newest
connection still in its handshake: a peer of the topology completes its handshake in
milliseconds, while a stranger that holds a connection open without finishing one is
older by then. Two handshakes finishing out of order can only swap which of two
connections is counted, never change how many are.
"""
from __future__ import annotations

import zmq

#: the events :class:`HandshakeLedger` needs from the monitor
EVENTS = (zmq.EVENT_ACCEPTED | zmq.EVENT_DISCONNECTED | zmq.EVENT_HANDSHAKE_SUCCEEDED
          | zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL
          | zmq.EVENT_HANDSHAKE_FAILED_AUTH)
_PROTOCOL_ERRORS = {getattr(zmq, n): n[len("PROTOCOL_ERROR_"):].lower()
                    for n in dir(zmq) if n.startswith("PROTOCOL_ERROR_")}
_PENDING_MAX = 4096  # connections tracked in their handshake (libzmq times them out)


class HandshakeLedger:
    def __init__(self, curve=True):
        self.curve = curve
        self.pending = []  # fds accepted, handshake not (known) complete, oldest first
        self.denied = 0
        self.why = None  # the reason of the latest failure event, until its connection ends

    def event(self, event, value):
        """Feed one monitor event; returns the reason if it ended a refused connection."""
        if event == zmq.EVENT_ACCEPTED:
            self.pending.append(value)
            if len(self.pending) > _PENDING_MAX:
                del self.pending[0]
        elif event == zmq.EVENT_HANDSHAKE_SUCCEEDED:
            if self.pending:
                self.pending.pop()
        elif event == zmq.EVENT_HANDSHAKE_FAILED_AUTH:
            self.why = f"its CURVE key is not one of this topology's (ZAP status {value})"
        elif event == zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL:
            self.why = f"protocol error: {_PROTOCOL_ERRORS.get(value, hex(value))}"
            if self.curve and value in (zmq.PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH,
                                        zmq.PROTOCOL_ERROR_ZMTP_CRYPTOGRAPHIC):
                self.why += " (a client without CURVE, or with the wrong server key)"
        elif event == zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL:
            self.why = "the handshake failed"
        elif event == zmq.EVENT_DISCONNECTED and value in self.pending:
            self.pending.remove(value)
            self.denied += 1
            why, self.why = self.why or "it closed before completing a handshake (not ZMTP, or gave up)", None
            return why
        return None

"""Refused connections counted from a CURVE port's monitor events (streammgr/handshakes.py)."""
from __future__ import annotations

import socket
import struct
import time

import zmq

from streammgr.handshakes import EVENTS, HandshakeLedger

A, D, OK = zmq.EVENT_ACCEPTED, zmq.EVENT_DISCONNECTED, zmq.EVENT_HANDSHAKE_SUCCEEDED


def feed(ledger, events):
    return [ledger.event(e, v) for e, v in events]


def test_garbage_failures_and_successes():
    led = HandshakeLedger()
    # a peer that completes its handshake, then leaves: not a refusal
    assert feed(led, [(A, 10), (OK, 0), (D, 10)]) == [None, None, None] and led.denied == 0
    # bytes that are not ZMTP: accepted, then gone without any handshake event
    out = feed(led, [(A, 11), (D, 11)])
    assert led.denied == 1 and "closed before completing a handshake" in out[1]
    # a key not admitted: the failure says why, the disconnect counts it, once
    out = feed(led, [(A, 12), (zmq.EVENT_HANDSHAKE_FAILED_AUTH, 400), (D, 12)])
    assert led.denied == 2 and "CURVE key" in out[2]
    # a stranger holding its connection open while a peer connects and succeeds: the success
    # is the newer connection's, so the stranger's end counts and the peer's does not
    feed(led, [(A, 13), (A, 14), (OK, 0)])
    assert led.event(D, 13) is not None and led.denied == 3
    assert led.event(D, 14) is None and led.denied == 3
    # a disconnect of an fd never seen accepted (a connect of this socket, say) is not counted
    assert led.event(D, 99) is None and led.denied == 3


def test_a_real_curve_port_counts_every_kind_of_refusal():
    ctx = zmq.Context()
    try:
        pub, sec = zmq.curve_keypair()
        srv = ctx.socket(zmq.ROUTER)
        srv.curve_secretkey, srv.curve_publickey, srv.curve_server = sec, pub, True
        mon = srv.get_monitor_socket(EVENTS)
        port = srv.bind_to_random_port("tcp://127.0.0.1")
        good = ctx.socket(zmq.DEALER)
        cp, cs = zmq.curve_keypair()
        good.curve_serverkey, good.curve_publickey, good.curve_secretkey = pub, cp, cs
        good.connect(f"tcp://127.0.0.1:{port}")
        good.send(b"hello")
        assert srv.poll(10000) and srv.recv_multipart()[1] == b"hello"
        plain = ctx.socket(zmq.DEALER)  # no CURVE: mechanism mismatch
        plain.connect(f"tcp://127.0.0.1:{port}")
        plain.send(b"x")
        for junk in (b"GET / HTTP/1.0\r\n\r\n", b"\x00" * 64):  # not ZMTP at all
            with socket.create_connection(("127.0.0.1", port)) as s:
                s.sendall(junk)
                s.settimeout(10)
                try:
                    while s.recv(1024):
                        pass
                except OSError:
                    pass
        led, accepted = HandshakeLedger(), 0
        deadline = time.monotonic() + 20
        while led.denied < 3 and time.monotonic() < deadline:
            if mon.poll(200):
                ev, _ = mon.recv_multipart()
                e, v = struct.unpack("=HI", ev[:6])
                accepted += e == A
                led.event(e, v)
        plain.close(linger=0)  # (it retries every 100 ms: each try is one more refusal)
        while mon.poll(1000):  # until the port is quiet
            e, v = struct.unpack("=HI", mon.recv_multipart()[0][:6])
            accepted += e == A
            led.event(e, v)
        # every connection but the good peer's was refused: the plain client's (one or more
        # tries) and the two junk ones
        assert led.denied >= 3 and led.denied == accepted - 1 and not led.pending
        good.send(b"still here")
        assert srv.poll(10000) and srv.recv_multipart()[1] == b"still here"
        for s in (good, mon, srv):
            s.close(linger=0)
    finally:
        ctx.term()

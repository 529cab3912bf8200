"""CURVE between stream managers: real ROUTER/DEALER sockets over tcp on 127.0.0.1,
as the stream managers use them. The right key gets through; any other gets nothing."""
from __future__ import annotations

import logging
import re
import time

import pytest
import zmq
from conftest import wait_for
from zmq.utils.monitor import recv_monitor_message

from bittern import curve
from bittern.curve import CurveError, KeyAuthenticator, client_options, generate, server_options

pytestmark = pytest.mark.skipif(not zmq.has("curve"), reason="libzmq without CURVE")


def test_this_libzmq_has_curve():
    assert curve.available() is zmq.has("curve") is True


def test_keys_are_z85_text():
    pub, sec = generate()
    assert isinstance(pub, str) and len(pub) == 40 and len(sec) == 40
    assert curve.public_of(sec) == pub
    assert generate() != (pub, sec)


@pytest.mark.parametrize("bad", ["short", "x" * 40 + "y", 12, "\u00e9" * 40, "~" * 40])
def test_malformed_keys_are_refused_by_name(bad):
    ctx = zmq.Context()
    s = ctx.socket(zmq.DEALER)
    try:
        with pytest.raises(CurveError, match="server public key"):
            client_options(s, bad, *generate())
    finally:
        s.close(0)
        ctx.term()


class Server:
    """A CURVE ROUTER on 127.0.0.1 behind a KeyAuthenticator, with a monitor."""

    def __init__(self, allowed, authenticate=True):
        self.ctx = zmq.Context()
        self.public, self.secret = generate()
        self.auth = KeyAuthenticator(self.ctx, allowed)
        if authenticate:
            self.auth.start()  # before bind
        self.sock = self.ctx.socket(zmq.ROUTER)
        self.sock.linger = 0
        server_options(self.sock, self.secret, self.public)
        self.mon = self.sock.get_monitor_socket(zmq.EVENT_HANDSHAKE_SUCCEEDED
                                                | zmq.EVENT_HANDSHAKE_FAILED_AUTH
                                                | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL
                                                | zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL)
        self.sock.bind("tcp://127.0.0.1:*")
        self.endpoint = self.sock.last_endpoint.decode()

    def event(self, timeout_ms=5000):
        if not self.mon.poll(timeout_ms):
            return None
        return recv_monitor_message(self.mon)["event"]

    def recv(self, timeout_ms):
        return self.sock.recv_multipart() if self.sock.poll(timeout_ms) else None

    def close(self):
        self.sock.disable_monitor()
        self.mon.close(0)
        self.sock.close(0)
        self.auth.stop()
        self.ctx.term()


@pytest.fixture
def clients():
    ctx = zmq.Context()  # another "host": its own context
    made = []

    def connect(endpoint, server_public, public, secret, curve_on=True):
        s = ctx.socket(zmq.DEALER)
        s.linger = 0
        if curve_on:
            client_options(s, server_public, public, secret)
        s.connect(endpoint)
        made.append(s)
        return s

    yield connect
    for s in made:
        s.close(0)
    ctx.term()


def test_the_right_key_connects_and_messages_flow_both_ways(clients):
    cpub, csec = generate()
    srv = Server([cpub])
    try:
        c = clients(srv.endpoint, srv.public, cpub, csec)
        c.send(b"batch-1")
        assert srv.event() == zmq.EVENT_HANDSHAKE_SUCCEEDED
        msg = srv.recv(5000)
        assert msg is not None and msg[1] == b"batch-1"
        srv.sock.send_multipart([msg[0], b"ack"])
        assert c.poll(5000) and c.recv() == b"ack"
        assert srv.auth.denied == 0
    finally:
        srv.close()


def test_a_wrong_client_key_gets_nothing_through_and_the_server_lives_on(clients):
    good_pub, good_sec = generate()
    bad_pub, bad_sec = generate()
    srv = Server([good_pub])
    try:
        intruder = clients(srv.endpoint, srv.public, bad_pub, bad_sec)
        intruder.send(b"evil")
        assert srv.event() == zmq.EVENT_HANDSHAKE_FAILED_AUTH
        assert srv.recv(300) is None
        assert srv.auth.denied >= 1 and srv.auth.is_alive()
        # the server still serves its real peers afterwards
        c = clients(srv.endpoint, srv.public, good_pub, good_sec)
        c.send(b"batch")
        msg = srv.recv(5000)
        assert msg is not None and msg[1] == b"batch"
        assert srv.recv(300) is None  # and the intruder's message never arrives
    finally:
        srv.close()


def test_a_client_without_curve_or_with_the_wrong_server_key_gets_nothing(clients):
    cpub, csec = generate()
    srv = Server([cpub])
    try:
        plain = clients(srv.endpoint, None, None, None, curve_on=False)
        plain.send(b"plaintext")
        assert srv.event() in (zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL, zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL)
        other_pub, _ = generate()
        wrong = clients(srv.endpoint, other_pub, cpub, csec)  # talks to an impostor's key
        wrong.send(b"lost")
        assert srv.event() in (zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL, zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL)
        assert srv.recv(300) is None
    finally:
        srv.close()


def test_without_the_authenticator_any_key_gets_in(clients):
    """Why KeyAuthenticator exists: CURVE alone encrypts but admits every client."""
    srv = Server([], authenticate=False)
    try:
        c = clients(srv.endpoint, srv.public, *generate())
        c.send(b"anyone")
        msg = srv.recv(5000)
        assert msg is not None and msg[1] == b"anyone"
    finally:
        srv.close()


def test_allow_swaps_the_admitted_keys(clients):
    apub, asec = generate()
    bpub, bsec = generate()
    srv = Server([apub])
    try:
        assert srv.auth.allowed == {apub}
        srv.auth.allow([bpub])  # e.g. a rebalance replaced the peer
        a = clients(srv.endpoint, srv.public, apub, asec)
        a.send(b"from a")
        assert srv.event() == zmq.EVENT_HANDSHAKE_FAILED_AUTH
        b = clients(srv.endpoint, srv.public, bpub, bsec)
        b.send(b"from b")
        msg = srv.recv(5000)
        assert msg is not None and msg[1] == b"from b"
        assert srv.recv(300) is None
    finally:
        srv.close()


def test_refused_keys_are_counted_each_time_and_logged_at_most_once_a_second(caplog):
    """A peer trying keys in a loop: every refusal counted, the log not flooded."""
    ctx = zmq.Context()
    auth = KeyAuthenticator(ctx, [])
    try:
        stranger = generate()[0]
        with caplog.at_level(logging.WARNING, logger="bittern.curve"):
            assert not any(auth.callback("*", stranger.encode()) for _ in range(50))
        lines = [r.getMessage() for r in caplog.records if "unknown public key" in r.getMessage()]
        assert auth.denied == 50
        assert 1 <= len(lines) < 50 and lines[0].endswith(stranger), lines
    finally:
        auth.stop()
        ctx.term()


def test_stop_is_safe_when_never_started():
    ctx = zmq.Context()
    KeyAuthenticator(ctx, []).stop()
    ctx.term()


# -- TMClient (nimbus -> topology master) over CURVE -----------------------------------------

def _answer_one(server, timeout_ms=5000):
    """The server's side of one request: its frames sent back as they came (the request id
    with them, so the client takes it for the reply)."""
    frames = server.recv(timeout_ms)
    if frames is not None:
        server.sock.send_multipart(frames)
    return frames


def test_a_client_refused_until_its_key_is_admitted_gets_through_on_a_new_handshake():
    """A topology master admits a nimbus's key only at its next read of the registered
    keys; a refused handshake is never tried again by libzmq on the same socket, so the
    client asks again on a fresh one until the request's own timeout."""
    import threading
    import time
    from bittern.client import TMClient
    server = Server([])
    pub, sec = generate()
    client = TMClient(server.endpoint, curve=(server.public, pub, sec))
    answered = []

    def admit_after_a_refusal():  # (as the topology master does at its next read of the keys)
        deadline = time.monotonic() + 30
        while server.auth.denied < 1 and time.monotonic() < deadline:
            time.sleep(0.01)
        server.auth.allow([pub])

    try:
        threading.Thread(target=admit_after_a_refusal).start()
        t = threading.Thread(target=lambda: answered.append(_answer_one(server, timeout_ms=30_000)))
        t.start()
        reply = client.request("ping", timeout=30.0)  # (generous: a loaded machine)
        t.join()
        assert reply["op"] == "ping" and reply["req"] == 1 and answered[0] is not None
        assert server.auth.denied >= 1  # (it was refused first)
    finally:
        client.close()
        server.close()


def test_a_client_whose_key_is_never_admitted_is_told_so_by_name():
    from bittern.client import TMClient
    from bittern.errors import BitternError
    server = Server([])
    client = TMClient(server.endpoint, curve=(server.public, *generate()))
    try:
        # A refusal the client has not seen within a request's timeout (a loaded machine
        # that ran neither the ZAP thread nor the handshake in time) is an honest "did not
        # answer"; the refusal then reaches the next request on the same client.
        deadline = time.monotonic() + 120
        while True:
            with pytest.raises(BitternError) as e:
                client.request("ping", timeout=2.0)
            if "refused our key" in str(e.value):
                break
            assert "did not answer 'ping' within 2s" in str(e.value) and time.monotonic() < deadline
        assert re.search(r"refused our key \(\d+ CURVE handshakes refused within 2s\)", str(e.value))
        assert server.auth.denied >= 1  # the server's own count agrees
        assert server.recv(100) is None  # nothing got through
    finally:
        client.close()
        server.close()


def test_a_request_on_a_connection_refused_before_it_was_sent_says_so():
    """The handshake happens on connect: a refusal can come before the first request,
    which then reports it (on fresh sockets, never in a send that waits for good)."""
    from bittern.client import TMClient
    from bittern.errors import BitternError
    server = Server([])
    client = TMClient(server.endpoint, curve=(server.public, *generate()))
    try:
        # the handshake happens on connect, before any request
        wait_for(lambda: server.auth.denied >= 1, timeout=120, interval=0.01, what="the server to refuse the key")
        assert client._monitor.poll(120_000)  # the client knows too (the event is left to read)
        with pytest.raises(BitternError, match=r"refused our key \(\d+ CURVE handshakes refused within 2s\)"):
            client.request("ping", timeout=2.0)
        assert server.recv(100) is None
    finally:
        client.close()
        server.close()


@pytest.mark.parametrize("curve_on", [True, False])
def test_a_request_the_socket_cannot_take_ends_at_its_timeout(monkeypatch, tmp_path, curve_on):
    """A socket with no connection to queue on (here: ZMQ_IMMEDIATE towards an endpoint
    nobody listens on; in the field: a connection whose handshake was refused) must not
    hold a request past its timeout in a blocking send (before the fix it waited there
    for good, and pytest-timeout ended the test)."""
    from bittern.client import TMClient
    from bittern.errors import BitternError
    real_connect = zmq.Socket.connect

    def connect_immediate(sock, endpoint):
        sock.setsockopt(zmq.IMMEDIATE, 1)
        return real_connect(sock, endpoint)

    monkeypatch.setattr(zmq.Socket, "connect", connect_immediate)
    keys = (generate()[0], *generate()) if curve_on else None
    client = TMClient(f"ipc://{tmp_path}/nobody", curve=keys)
    try:
        assert client.sock.getsockopt(zmq.IMMEDIATE) == 1
        with pytest.raises(BitternError, match=r"did not answer 'ping' within 1s"):
            client.request("ping", timeout=1.0)
    finally:
        client.close()

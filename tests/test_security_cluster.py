"""Cluster mode attacked from outside (issue 18): by anyone who reaches ZooKeeper, the
topology master's tcp port or a stream manager's tcp port without the cluster's keys.

One cluster for the module (one nimbus, supervisors ``a`` and ``b``, ZooKeeper with the
cluster's digest credentials, tests/clusterkit.py) runs a paced word count spread over
both supervisors (tests/seckit.py). After each attack the topology is still RUNNING
and active, its counts keep growing, its record in ZooKeeper is unchanged, and what the
attack tried is counted as ``denied``; the last test stops the spout and checks that
every word was counted exactly. The daemon start-up checks (no credentials, a planted
token) run their own nimbus/supervisor processes on fresh ZooKeeper roots.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid

import pytest
import zmq
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError

from bittern import curve, wire
from clusterkit import Cluster, free_range
from conftest import ROOT, processes_of, wait_for
from seckit import expected_counts, final_counts, raw_tcp, stop_spout, words_of, write_topology

pytestmark = [pytest.mark.slow, pytest.mark.skipif(not curve.available(), reason="libzmq without CURVE")]

NAME = "secwc"
RATE = 150  # sentences a second
ZMTP_GREETING = b"\xff" + b"\x00" * 8 + b"\x7f" + b"\x03\x00" + b"NULL" + b"\x00" * 16 + b"\x00" + b"\x00" * 31


@pytest.fixture(scope="module")
def sc(zk_server, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("security")
    c = Cluster(zk_server, tmp, slots=2)
    try:
        c.start_nimbus()
        c.start_supervisor("a")
        c.start_supervisor("b")
        c.out = str(tmp / "out")
        os.makedirs(c.out)
        src = write_topology(str(tmp))
        c.cli("submit", src, "--name", NAME, "--config", f"sec.out={c.out}", "--config", f"sec.rate={RATE}",
              check=True)
        c.asg = c.assignment(NAME)
        assert {w["supervisor"] for w in c.asg["containers"].values()} == {"a", "b"}, c.asg["containers"]
        wait_for(lambda: executed(c) > 200, timeout=60, what="words counted")
        st_ = c.state()
        try:
            c.record = st_.topology(NAME)
        finally:
            st_.close()
        yield c
    finally:
        c.stop()


def metrics(sc):
    status, doc = sc.api(f"/api/v1/topologies/{NAME}/metrics?window=all")
    assert status == 200, (status, doc)
    return doc


def executed(sc):
    status, doc = sc.api(f"/api/v1/topologies/{NAME}/metrics?window=all")
    if status != 200:
        return -1
    return ((doc.get("components") or {}).get("count") or {}).get("executed", -1)


def counter(doc, where, name):
    """``tmaster.<name>`` (where None) or ``stmgrs[where].<name>``; None if the field is not there."""
    part = doc.get("tmaster") if where is None else (doc.get("stmgrs") or {}).get(str(where))
    return (part or {}).get(name)


def unharmed(sc, what):
    """After an attack: RUNNING and active, the record in ZooKeeper unchanged, counts growing."""
    rows = json.loads(sc.cli("list", "--json", check=True).stdout)
    assert [(r["name"], r["state"]) for r in rows] == [(NAME, "RUNNING")], (what, rows)
    doc = metrics(sc)
    assert doc["active"] is True and doc["phase"] == "RUNNING", (what, doc["active"], doc["phase"])
    st_ = sc.state()
    try:
        assert st_.topology(NAME) == sc.record, f"{what}: topologies/{NAME} changed in ZooKeeper"
        assert st_.assignment(NAME) == sc.asg, f"{what}: assignments/{NAME} changed in ZooKeeper"
    finally:
        st_.close()
    before = executed(sc)
    wait_for(lambda: executed(sc) > before + 100, timeout=30, what=f"words counted after {what}")


def denied_grew(sc, where, before, at_least, what):
    """Wait until the ``denied`` counter (tmaster: where None) grew by ``at_least``; its
    growth, or None if the metrics have no such field."""
    if before is None:
        print(f"NOTE: {what}: the metrics doc has no denied counter for "
              f"{'tmaster' if where is None else f'stmgrs[{where}]'}")
        return None
    wait_for(lambda: (counter(metrics(sc), where, "denied") or 0) >= before + at_least, timeout=20,
             what=f"{what}: denied grew by {at_least} (from {before})")
    return counter(metrics(sc), where, "denied") - before


def dealer(ctx, endpoint, identity, curve_keys=None):
    """A DEALER toward ``endpoint``; ``curve_keys``: (server public, own public, own secret)."""
    s = ctx.socket(zmq.DEALER)
    s.setsockopt(zmq.LINGER, 0)
    s.setsockopt(zmq.IDENTITY, identity)
    s.setsockopt(zmq.RECONNECT_IVL, 100)
    if curve_keys is not None:
        curve.client_options(s, *curve_keys)
    mon = s.get_monitor_socket()
    s.connect(endpoint)
    return s, mon


def hammer(sock, mon, msgs, secs=1.5):
    """Send ``msgs`` (lists of frames) and wait ``secs``: (replies, handshake succeeded)."""
    for m in msgs:
        try:
            sock.send_multipart(m, zmq.NOBLOCK)
        except zmq.Again:
            pass
    ok, replies, deadline = False, 0, time.monotonic() + secs
    while time.monotonic() < deadline:
        while mon.poll(0):
            ev = mon.recv_multipart()
            if int.from_bytes(ev[0][:2], "little") == zmq.EVENT_HANDSHAKE_SUCCEEDED:
                ok = True
        if sock.poll(50):
            sock.recv_multipart()
            replies += 1
    return replies, ok


def close(sock, mon):
    sock.disable_monitor()
    mon.close(0)
    sock.close(0)


def forged(container, version):
    """What an attacker would say: fail a task, deactivate, forge metrics and errors."""
    return [wire.ctrl("stmgr_register", container=container, pid=1, tasks={"3": {"ok": False}}),
            wire.ctrl("deactivate", req=1), wire.ctrl("heartbeat", counters={"executed": 10 ** 9}),
            wire.ctrl("error", task=3, component="count", error="forged", fatal=True),
            wire.ctrl("stmgr_register", container=[container], pid=1, tasks={"x": {}})]


# -- ZooKeeper ----------------------------------------------------------------------------------

def test_an_unauthenticated_zookeeper_client_reads_no_secret_and_writes_nothing(sc):
    zk = KazooClient(hosts=sc.zk.hosts)
    zk.start(timeout=15)
    try:
        for node in ("nimbus/token", f"assignments/{NAME}", f"topologies/{NAME}"):
            with pytest.raises(NoAuthError):
                zk.get(f"{sc.root}/{node}")
        for node in ("code/x", "topologies/evil", "assignments/evil"):
            with pytest.raises(NoAuthError):
                zk.create(f"{sc.root}/{node}", b'{"state": "RUNNING"}')
        with pytest.raises(NoAuthError):
            zk.set(f"{sc.root}/topologies/{NAME}", b"{}")
        with pytest.raises(NoAuthError):
            zk.delete(f"{sc.root}/topologies/{NAME}")
    finally:
        zk.stop()
        zk.close()
    # with the cluster's credentials: the whole tree, and no secret key anywhere in it
    zk = KazooClient(hosts=sc.zk.hosts, auth_data=[("digest", sc.auth)])
    zk.start(timeout=15)
    found, nodes = [], 0
    try:
        stack = [sc.root]
        while stack:
            zp = stack.pop()
            data, _ = zk.get(zp)
            nodes += 1
            stack.extend(f"{zp}/{k}" for k in zk.get_children(zp))
            try:
                doc = json.loads(data or b"null")
            except ValueError:
                continue
            found.extend(f"{zp}: {p}" for p in secret_keys(doc))
        asg = json.loads(zk.get(f"{sc.root}/assignments/{NAME}")[0])
    finally:
        zk.stop()
        zk.close()
    assert set(asg["keys"]) == {"0", "1"}, asg["keys"]
    for c, k in asg["keys"].items():
        assert set(k) == {"public", "sealed", "to"}, (c, sorted(k))
    assert not found, f"secret keys in ZooKeeper: {found}"
    unharmed(sc, "the ZooKeeper attempts")
    print(f"zookeeper: {nodes} nodes walked, no 'secret' in any")


def secret_keys(doc, path=""):
    if isinstance(doc, dict):
        for k, v in doc.items():
            # (a key naming the file a secret is kept in, such as spout.spark.secret.file, is no secret)
            if "secret" in str(k).lower() and not str(k).endswith(".file"):
                yield f"{path}/{k}"
            yield from secret_keys(v, f"{path}/{k}")
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            yield from secret_keys(v, f"{path}/{i}")


# -- the topology master's tcp port -------------------------------------------------------------

def test_the_topology_master_port_admits_no_stranger(sc):
    tm = sc.asg["tmaster"]
    assert tm.startswith("tcp://"), tm
    v0 = sc.asg["containers"]["0"]["since"]
    server_pub = sc.asg["keys"]["0"]["public"]
    ctx = zmq.Context()
    results = {}
    try:
        base = counter(metrics(sc), None, "denied")
        # 1. no CURVE at all, as container 0's stream manager and as a client request
        for ident in (b"s0@%d" % v0, b"q1"):
            s, mon = dealer(ctx, tm, ident)
            results[f"plain {ident!r}"] = hammer(s, mon, forged(0, v0))
            close(s, mon)
        # 2. CURVE with a fresh key of its own
        pub, sec = curve.generate()
        for ident in (b"s0@%d" % v0, b"q1"):
            s, mon = dealer(ctx, tm, ident, (server_pub, pub, sec))
            results[f"stranger key {ident!r}"] = hammer(s, mon, forged(0, v0))
            close(s, mon)
        # 3. container 1's public key, without its secret
        _, sec = curve.generate()
        s, mon = dealer(ctx, tm, b"s1@%d" % sc.asg["containers"]["1"]["since"],
                        (server_pub, sc.asg["keys"]["1"]["public"], sec))
        results["container 1's public key"] = hammer(s, mon, forged(1, v0))
        close(s, mon)
        # 4. a ZMTP greeting (NULL mechanism, or cut short) and garbage after it, over raw TCP
        for payload in (ZMTP_GREETING + os.urandom(100), ZMTP_GREETING[:10] + os.urandom(40), ZMTP_GREETING):
            results[f"raw {payload[:8]!r}...{len(payload)}"] = (raw_tcp(tm, payload, timeout=0.5), None)
    finally:
        ctx.term()
    for what, (replies, ok) in results.items():
        if ok is None:  # raw TCP: whatever came back is at most the server's greeting
            assert b"READY" not in replies, (what, replies)
        else:
            assert replies == 0 and not ok, f"{what}: {replies} replies, handshake succeeded: {ok}"
    grew = denied_grew(sc, None, base, len(results), "the topology master's strangers")
    unharmed(sc, "the topology master's strangers")
    doc = metrics(sc)
    print(f"tmaster strangers: {len(results)} attempts, tmaster.denied +{grew}, "
          f"malformed {counter(doc, None, 'malformed')}")


def test_fuzzed_bytes_and_frames_at_the_topology_master(sc):
    tm = sc.asg["tmaster"]
    server_pub = sc.asg["keys"]["0"]["public"]
    base = counter(metrics(sc), None, "denied")
    sent = {"raw": 0, "frames": 0}
    ctx = zmq.Context()
    pub, sec = curve.generate()
    stranger, smon = dealer(ctx, tm, b"s0@%d" % sc.asg["containers"]["0"]["since"], (server_pub, pub, sec))
    plain, pmon = dealer(ctx, tm, b"q-fuzz")

    @settings(max_examples=40, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(st.one_of(st.binary(min_size=1, max_size=600),
                     st.binary(max_size=200).map(lambda b: ZMTP_GREETING[:10] + b),
                     st.binary(max_size=200).map(lambda b: ZMTP_GREETING + b)))
    def raw(payload):
        sent["raw"] += 1
        sent["zmtp"] = sent.get("zmtp", 0) + payload.startswith(ZMTP_GREETING[:10])
        got = raw_tcp(tm, payload, timeout=0.5)
        assert b"READY" not in got

    @settings(max_examples=60, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(st.lists(st.one_of(st.binary(max_size=64), st.sampled_from([wire.CTRL, wire.DATA, wire.ACK]),
                              st.dictionaries(st.text(max_size=8), st.integers(-2 ** 63, 2 ** 64 - 1) | st.text(max_size=8),
                                              max_size=4).map(lambda d: wire.ctrl("stmgr_register", **{
                                                  "x" + k: v for k, v in d.items()})[1])),
                    min_size=1, max_size=4))
    def frames(msg):
        sent["frames"] += 1
        for s in (stranger, plain):
            try:
                s.send_multipart(msg, zmq.NOBLOCK)
            except zmq.Again:
                pass

    try:
        raw()
        frames()
        assert hammer(stranger, smon, [], 1.0) == (0, False)
        assert hammer(plain, pmon, [], 1.0) == (0, False)
    finally:
        close(stranger, smon)
        close(plain, pmon)
        ctx.term()
    # every connection that began a ZMTP greeting ends in a refused handshake (bytes that are
    # not ZMTP at all: test_bytes_that_are_not_zmtp_are_counted_as_denied)
    grew = denied_grew(sc, None, base, sent.get("zmtp", 0), "fuzzed connections that began a ZMTP greeting")
    unharmed(sc, "the fuzzing")
    print(f"tmaster fuzz: {sent['raw']} raw connections ({sent.get('zmtp', 0)} began a ZMTP greeting), "
          f"{sent['frames']} multipart messages; tmaster.denied +{grew}")


# -- the stream managers' tcp ports -------------------------------------------------------------

def test_the_stream_manager_ports_admit_no_stranger(sc):
    ctx = zmq.Context()
    figures = []
    try:
        for c in ("0", "1"):
            ep = sc.asg["stmgrs"][c]["tcp"]
            assert ep.startswith("tcp://"), ep
            base = counter(metrics(sc), c, "denied")
            payloads = (ZMTP_GREETING + os.urandom(64), ZMTP_GREETING[:10] + os.urandom(40))
            for p in payloads:
                raw_tcp(ep, p, timeout=0.5)
            pub, sec = curve.generate()
            s, mon = dealer(ctx, ep, b"s0@%d" % sc.asg["containers"]["0"]["since"],
                            (sc.asg["keys"][c]["public"], pub, sec))
            assert hammer(s, mon, [[wire.DATA, b"\x00\x00\x00\x03", b"x"]] * 5) == (0, False)
            close(s, mon)
            grew = denied_grew(sc, c, base, len(payloads) + 1, f"strangers at stream manager {c}")
            figures.append(f"stmgrs[{c}].denied +{grew}")
    finally:
        ctx.term()
    unharmed(sc, "the stream managers' strangers")
    print("stream manager strangers: " + ", ".join(figures))


def test_bytes_that_are_not_zmtp_are_counted_as_denied(sc):
    """An HTTP request, random bytes, zeros: each connection to the topology master's and
    each stream manager's tcp port is counted as ``denied`` (issue 18, item 6)."""
    payloads = (b"GET / HTTP/1.0\r\n\r\n", b"\x01" + os.urandom(300), b"\x00" * 64)
    ports = [(None, sc.asg["tmaster"])] + [(c, sc.asg["stmgrs"][c]["tcp"]) for c in ("0", "1")]
    base = {where: counter(metrics(sc), where, "denied") for where, _ in ports}
    for _, ep in ports:
        for p in payloads:
            raw_tcp(ep, p, timeout=0.5)
    unharmed(sc, "bytes that are not ZMTP")
    grew = {}

    def counted():  # the stream managers' counters reach the topology master with their heartbeats
        doc = metrics(sc)
        grew.update({("tmaster" if where is None else f"stmgrs[{where}]"):
                     (None if base[where] is None else counter(doc, where, "denied") - base[where])
                     for where, _ in ports})
        return all(g is None or g >= len(payloads) for g in grew.values())
    try:
        wait_for(counted, timeout=15, interval=0.3, what="the denied counters")
    except AssertionError:
        pass  # the assertion below says what grew
    print(f"non-ZMTP bytes, {len(payloads)} connections per port: denied grew by {grew}")
    assert all(g is None or g >= len(payloads) for g in grew.values()), \
        f"{len(payloads)} connections of non-ZMTP bytes per port; denied grew by {grew}"


def test_the_topology_counted_every_word_exactly(sc):
    """Last: stop the spout, wait until every word it sent was counted, kill."""
    n = stop_spout(sc.out)
    want = words_of(n)
    wait_for(lambda: executed(sc) >= want, timeout=60, what=f"all {want} words counted")
    assert executed(sc) == want
    doc = metrics(sc)
    sc.cli("kill", NAME, check=True)
    wait_for(lambda: not any(sc.topology_pids(s) for s in ("a", "b")), timeout=30, what="processes gone after kill")
    files, got = final_counts(sc.out)
    assert len(files) == 2, files
    assert got == expected_counts(n)
    print(f"exact after the attacks: {n} sentences, {want} words; tmaster denied {counter(doc, None, 'denied')} "
          f"malformed {counter(doc, None, 'malformed')}; stmgrs denied "
          f"{[counter(doc, c, 'denied') for c in ('0', '1')]}")


# -- daemons that must not start ----------------------------------------------------------------

def daemon_cmd(kind, zk, root, data, auth=()):
    if kind == "nimbus":
        return [sys.executable, "-m", "nimbus", "--zk", zk, "--zk-root", root, "--port", str(free_range(1)),
                "--data-dir", data, "--session-timeout", "4", *auth]
    base = free_range(3) + 1
    return [sys.executable, "-m", "supervisor", "--cluster", "--zk", zk, "--zk-root", root, "--host", "127.0.0.9",
            "--slots", "1", "--base-port", str(base), "--data-dir", data, "--id", "x", *auth]


def run_daemon(cmd, timeout=60):
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    for k in ("BITTERN_ZK_AUTH", "BITTERN_ZK_AUTH_FILE"):
        env.pop(k, None)
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=ROOT, env=env)


def error_lines(r):
    return [line for line in (r.stdout + r.stderr).splitlines() if "error:" in line]


@pytest.mark.parametrize("kind", ["nimbus", "supervisor"])
def test_a_planted_token_stops_the_daemon(zk_server, tmp_path, kind):
    c = Cluster(zk_server, tmp_path)  # for its credentials file; nothing started
    root = f"/planted-{uuid.uuid4().hex[:8]}"
    zk = KazooClient(hosts=zk_server.hosts)
    zk.start(timeout=15)
    try:
        zk.create(f"{root}/nimbus/token", b"planted-token", makepath=True)  # world ACL
    finally:
        zk.stop()
        zk.close()
    data = str(tmp_path / "data")
    try:
        r = run_daemon(daemon_cmd(kind, zk_server.hosts, root, data, ("--zk-auth-file", c.auth_file)))
    finally:
        zk = KazooClient(hosts=zk_server.hosts)
        zk.start(timeout=15)
        try:
            assert zk.get(f"{root}/nimbus/token")[0] == b"planted-token", "the planted node was overwritten"
            zk.delete(root, recursive=True)  # all of it world-writable: the attacker's
        finally:
            zk.stop()
            zk.close()
    assert r.returncode != 0, r.stdout + r.stderr
    lines = error_lines(r)
    assert len(lines) == 1, r.stdout + r.stderr
    assert any(n in lines[0] for n in (f"{root} ", f"{root}/nimbus ", f"{root}/nimbus/token ")), lines[0]
    assert "not protected" in lines[0] or "cannot be read" in lines[0], lines[0]
    assert not os.path.exists(os.path.join(data, "token")) or "planted" not in open(os.path.join(data, "token")).read()
    assert not processes_of(data)
    print(f"{kind} on a planted token: exit {r.returncode}: {lines[0]}")


@pytest.mark.parametrize("kind", ["nimbus", "supervisor"])
def test_a_daemon_without_credentials_refuses_unless_insecure(zk_server, tmp_path, kind):
    root = f"/open-{uuid.uuid4().hex[:8]}"
    data = str(tmp_path / "data")
    r = run_daemon(daemon_cmd(kind, zk_server.hosts, root, data))
    assert r.returncode == 2, r.stdout + r.stderr
    out = [line for line in (r.stdout + r.stderr).splitlines() if line.strip()]
    assert len(out) == 1 and "--insecure" in out[0], out
    r = run_daemon(daemon_cmd(kind, zk_server.hosts, root, data, ("--zk-auth", "bittern:pw")))
    assert r.returncode == 2 and "--zk-auth-file" in r.stderr and "bittern:pw" not in r.stderr, r.stderr
    # --insecure: it starts, and says loudly what that opens
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    log = str(tmp_path / "insecure.log")
    with open(log, "wb") as f:
        p = subprocess.Popen(daemon_cmd(kind, zk_server.hosts, root, data, ("--insecure",)), stdout=f,
                             stderr=subprocess.STDOUT, cwd=ROOT, env=env, start_new_session=True)
    try:
        wait_for(lambda: "WARNING: --insecure" in open(log).read() or p.poll() is not None, timeout=30,
                 what="the --insecure warning")
        text = open(log).read()
        assert p.poll() is None, f"the --insecure {kind} exited {p.returncode}:\n{text}"
        assert "WARNING: --insecure" in text and "WITHOUT authentication" in text, text
    finally:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
            try:
                p.wait(20)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
    wait_for(lambda: not processes_of(data), timeout=20, what=f"the {kind}'s processes gone")
    zk = KazooClient(hosts=zk_server.hosts)
    zk.start(timeout=15)
    try:
        zk.delete(root, recursive=True)  # the open root an --insecure run leaves
    finally:
        zk.stop()
        zk.close()

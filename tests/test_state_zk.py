"""The ZooKeeper state manager against a real server (the ``zk_server`` fixture):
the same contract as the local backend (both are run through it), then what only
a cluster needs: blobs over the node limit, ephemeral nodes and elections that end
with their process, surviving a server restart, session expiry, digest auth."""
from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import threading
import time
import uuid

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError
from kazoo.security import make_digest_acl

from bittern.state import LocalStateManager, open_state
from bittern.state.zk import BLOB, CHUNK_BYTES, ZkStateManager
from conftest import ROOT, wait_for
from zkrelay import Relay


@pytest.fixture
def zk(zk_server):
    """Makes managers under a root of this test's own; closes them afterwards."""
    made = []
    root = f"/test-{uuid.uuid4().hex[:8]}"

    def make(hosts=None, **kwargs):
        kwargs.setdefault("root", root)
        sm = ZkStateManager(hosts or zk_server.hosts, **kwargs)
        made.append(sm)
        return sm

    yield make
    for sm in made:
        sm.close()


@pytest.fixture(params=["local", "zk"])
def sm(request, tmp_path):
    if request.param == "local":
        return LocalStateManager(str(tmp_path / "home"))
    return request.getfixturevalue("zk")()


@pytest.fixture
def spawn(tmp_path):
    """Starts helper processes (CHILD below); kills any still running at the end and
    proves that every one of them is gone."""
    procs = []

    def start(*args):
        log = open(tmp_path / f"child-{len(procs)}.log", "w")
        p = subprocess.Popen([sys.executable, "-c", CHILD, *args], cwd=ROOT,
                             stdout=log, stderr=subprocess.STDOUT)
        log.close()
        procs.append(p)
        return p

    yield start
    for p in procs:
        if p.poll() is None:
            p.kill()
        p.wait(timeout=10)  # raises if it did not end


CHILD = r"""
import sys, time
from bittern.state.zk import ZkStateManager
hosts, root, mode, name = sys.argv[1:5]
sm = ZkStateManager(hosts, root=root, timeout=1.0)  # the server's minimum session
if mode == "ephemeral":
    assert sm.ephemeral("supervisors/" + name, {"name": name})
    time.sleep(600)
else:
    def lead(lease):
        sm.put("leader-is", {"name": name})
        lease.wait()
    sm.election("leader", name).run(lead)
"""


def kill9(p):
    p.kill()
    assert p.wait(timeout=10) == -9


def expire_session(sm, hosts):
    """Make the server expire ``sm``'s session now: a second client takes it over by
    its id and password and closes it."""
    other = KazooClient(hosts, client_id=sm.zk.client_id)
    other.start(timeout=10)
    other.stop()
    other.close()


# -- the contract, on both backends ------------------------------------------------------

def test_put_get(sm):
    assert sm.get("topologies/wc") is None
    sm.put("topologies/wc", {"name": "wc", "n": [1, 2]})
    assert sm.get("topologies/wc") == {"name": "wc", "n": [1, 2]}
    sm.put("topologies/wc", {"name": "wc", "state": "KILLED"})
    assert sm.get("topologies/wc") == {"name": "wc", "state": "KILLED"}
    assert sm.get("/topologies//wc/") == sm.get("topologies/wc")


def test_failed_write_keeps_the_old_document(sm):
    sm.put("topologies/wc", {"ok": True})
    with pytest.raises(TypeError):
        sm.put("topologies/wc", {"bad": {1, 2}})  # a set is not JSON
    assert sm.get("topologies/wc") == {"ok": True}


def test_create_is_exclusive(sm):
    assert sm.create("topologies/wc", {"v": 1}) is True
    assert sm.create("topologies/wc", {"v": 2}) is False
    assert sm.get("topologies/wc") == {"v": 1}
    sm.delete("topologies/wc")
    assert sm.create("topologies/wc", {"v": 3}) is True
    assert sm.get("topologies/wc") == {"v": 3}


def test_create_over_a_bare_parent(sm):
    sm.put("checkpoints/wc/1", {"a": 1})  # "checkpoints/wc" exists only as a parent
    assert sm.get("checkpoints/wc") is None
    assert sm.create("checkpoints/wc", {"latest": 1}) is True
    assert sm.create("checkpoints/wc", {"latest": 2}) is False
    assert sm.get("checkpoints/wc") == {"latest": 1}
    assert sm.get("checkpoints/wc/1") == {"a": 1}


def test_delete_is_recursive_and_idempotent(sm):
    sm.put("checkpoints/wc", {"latest": 3})
    sm.put("checkpoints/wc/1", {"a": 1})
    sm.put("checkpoints/wc/2/task-4", {"b": 2})
    sm.put("checkpoints/other", {"keep": True})
    sm.delete("checkpoints/wc")
    assert sm.get("checkpoints/wc") is None
    assert sm.get("checkpoints/wc/1") is None
    assert sm.get("checkpoints/wc/2/task-4") is None
    assert sm.children("checkpoints") == ["other"]
    sm.delete("checkpoints/wc")  # absent: no error
    sm.delete("never/was")


def test_children(sm):
    assert sm.children("topologies") == []
    sm.put("topologies/b", {})
    sm.put("topologies/a", {})
    sm.put("topologies/a/sub", {})  # document "a" and sub-tree "a": one name
    sm.put("topologies/c/deep", {})
    sm.put("topologies/.hidden", {})  # dot-names are the backends' own
    assert sm.children("topologies") == ["a", "b", "c"]
    assert sm.children("topologies/a") == ["sub"]
    assert sm.children("") == ["topologies"]


def test_bad_paths(sm):
    for bad in ("", "/", "a/../b", "./x"):
        with pytest.raises(ValueError, match="bad state path"):
            sm.put(bad, {})


def test_layout_helpers(sm):
    sm.put("topologies/wc", {"name": "wc"})
    sm.put("assignments/wc", {"packing": {}})
    sm.put("status/wc", {"phase": "RUNNING"})
    sm.put("processes/wc", {"procs": {}})
    sm.put("topologies/other", {"name": "other"})
    assert sm.topologies() == ["other", "wc"]
    assert sm.topology("wc") == {"name": "wc"}
    assert sm.assignment("wc") == {"packing": {}}
    assert sm.update("status/wc", error="boom") == {"phase": "RUNNING", "error": "boom"}
    assert sm.status("wc") == {"phase": "RUNNING", "error": "boom"}
    sm.remove_topology("wc")
    assert [sm.topology("wc"), sm.assignment("wc"), sm.status("wc"), sm.processes("wc")] == [None] * 4
    assert sm.topologies() == ["other"]


def test_bytes_round_trip(sm):
    big = os.urandom(3 * 1024 * 1024 + 123)  # over ZooKeeper's 1 MB node limit
    assert sm.get_bytes("archives/wc") is None
    sm.put_bytes("archives/wc", big)
    assert sm.get_bytes("archives/wc") == big
    sm.put_bytes("archives/wc", b"small")
    assert sm.get_bytes("archives/wc") == b"small"
    sm.put_bytes("archives/empty", b"")
    assert sm.get_bytes("archives/empty") == b""
    # A blob is neither a document nor children; its name is listed once.
    sm.put("archives/wc", {"doc": 1})
    assert sm.get("archives/wc") == {"doc": 1}
    assert sm.children("archives") == ["empty", "wc"]
    assert sm.children("archives/wc") == []
    sm.delete("archives/wc")
    assert sm.get_bytes("archives/wc") is None
    assert sm.get("archives/wc") is None


# -- ZooKeeper only ----------------------------------------------------------------------

def test_documents_are_json_znodes_under_the_root(zk):
    a, b = zk(), zk()  # two sessions
    a.put("topologies/wc", {"name": "wc"})
    data, _ = a.zk.get(a.root + "/topologies/wc")
    assert json.loads(data) == {"name": "wc"}
    assert b.get("topologies/wc") == {"name": "wc"}
    with pytest.raises(ValueError, match="put_bytes"):
        a.put("topologies/huge", {"x": "y" * 1_100_000})  # refused before it reaches the server
    assert a.get("topologies/huge") is None


def test_open_state(zk_server, tmp_path):
    root = f"test-{uuid.uuid4().hex[:8]}"
    sm = open_state(f"zk://{zk_server.hosts}/{root}", timeout=5.0)
    try:
        assert isinstance(sm, ZkStateManager) and sm.root == "/" + root and sm.connected
    finally:
        sm.close()
    assert isinstance(open_state(str(tmp_path)), LocalStateManager)


def test_no_server_is_a_clear_error():
    from zkfixture import free_port
    before = set(threading.enumerate())
    with pytest.raises(ConnectionError, match="no ZooKeeper server"):
        ZkStateManager(f"127.0.0.1:{free_port()}", connect_timeout=1.0)
    wait_for(lambda: set(threading.enumerate()) <= before, what="kazoo's threads to end")


def test_watches(zk):
    sm, other = zk(), zk()
    names, docs = [], []

    def on_children(n):
        names.append(n)
        if n == ["boom"]:
            raise RuntimeError("a failing callback is logged; the watch goes on")

    sm.watch_children("supervisors", on_children)  # absent: made, reported empty
    sm.watch("topologies/wc", docs.append)
    assert names == [[]] and docs == [None]
    other.ephemeral("supervisors/boom", {})
    wait_for(lambda: names[-1:] == [["boom"]], what="child added")
    other.put_bytes("supervisors/blob", b"x")  # one name: its chunks are hidden
    wait_for(lambda: names[-1:] == [["blob", "boom"]], what="second child")
    other.put("topologies/wc", {"v": 1})
    wait_for(lambda: docs[-1:] == [{"v": 1}], what="document written")
    other.close()  # its ephemeral nodes go with its session
    wait_for(lambda: names[-1:] == [["blob"]], what="ephemeral gone")
    assert docs == [None, {"v": 1}]


def test_blob_replacement_is_atomic_for_readers(zk):
    writer, reader = zk(), zk()
    versions = [bytes([i]) * (2 * CHUNK_BYTES + 17) for i in range(4)]  # 3 chunks each
    writer.put_bytes("archives/wc", versions[0])
    seen, stop = [], threading.Event()

    def read():
        while not stop.is_set():
            seen.append(hashlib.sha256(reader.get_bytes("archives/wc")).digest())

    t = threading.Thread(target=read)
    t.start()
    try:
        for v in versions[1:] * 3:
            writer.put_bytes("archives/wc", v)
    finally:
        stop.set()
        t.join(timeout=30)
    assert seen and set(seen) <= {hashlib.sha256(v).digest() for v in versions}
    # Only the current version's chunks remain.
    names = writer.zk.get_children(writer.root + "/archives/wc")
    manifest = json.loads(writer.zk.get(f"{writer.root}/archives/wc/{BLOB}")[0])
    assert sorted(names) == [BLOB] + [f"{BLOB}-{manifest['version']}-{i:05d}" for i in range(3)]


def test_ephemeral_node_of_a_killed_process_goes_away(zk, zk_server, spawn):
    sm = zk()
    p = spawn(zk_server.hosts, sm.root, "ephemeral", "s1")
    wait_for(lambda: sm.get("supervisors/s1") == {"name": "s1"}, what="child's ephemeral node")
    assert sm.ephemeral("supervisors/s1", {"name": "me"}) is False  # someone else's
    kill9(p)
    wait_for(lambda: sm.get("supervisors/s1") is None, timeout=30,
             what="ephemeral node to go with the session")
    assert sm.ephemeral("supervisors/s1", {"name": "me"}) is True
    assert sm.ephemeral("supervisors/s1", {"name": "me", "v": 2}) is True  # ours: updated
    assert sm.get("supervisors/s1") == {"name": "me", "v": 2}
    assert sm.zk.exists(sm.root + "/supervisors/s1").ephemeralOwner == sm.zk.client_id[0]


def test_election_hands_over_when_the_leader_is_killed(zk, zk_server, spawn):
    sm = zk()
    a = spawn(zk_server.hosts, sm.root, "elect", "a")
    wait_for(lambda: sm.get("leader-is") == {"name": "a"}, what="a elected")
    b = spawn(zk_server.hosts, sm.root, "elect", "b")
    observer = sm.election("leader", "observer")  # never runs: only looks
    wait_for(lambda: observer.contenders() == ["a", "b"], what="b waiting in line")
    assert sm.get("leader-is") == {"name": "a"}
    kill9(a)
    wait_for(lambda: sm.get("leader-is") == {"name": "b"}, timeout=30, what="b elected")
    assert observer.leader() == "b"
    kill9(b)


def test_election_in_process_timeout_cancel_and_release(zk):
    sm = zk()
    first, second = sm.election("leader", "first"), sm.election("leader", "second")
    leading, release = threading.Event(), threading.Event()

    def lead(lease):
        assert lease.valid and first.is_leader
        leading.set()
        release.wait(30)

    t = threading.Thread(target=first.run, args=(lead,))
    t.start()
    assert leading.wait(20)
    assert second.run(lambda lease: None, timeout=0.5) is False  # not elected in time
    result = []
    t2 = threading.Thread(target=lambda: result.append(second.run(lambda lease: None)))
    t2.start()
    wait_for(lambda: first.contenders() == ["first", "second"], what="second in line")
    second.cancel()
    t2.join(timeout=20)
    assert result == [False]
    release.set()
    t.join(timeout=20)
    assert not first.is_leader and first.contenders() == []
    # Leadership handed back by returning lets the next contender in at once.
    assert second.run(lambda lease: None, timeout=10) is True


def test_server_restart_is_survived(zk, zk_server):
    lost = []
    # A session outlives a restart if its client is back within the session timeout of the
    # server serving again. A connection made while the restarted server loads its data is
    # never answered (ZooKeeper 3.8: zkwait.py); the client gives up on it after a third of
    # the session (the next test makes that happen every time). 30 s leaves a loaded
    # machine room for the rest; writes are retried for 120 s.
    sm = zk(on_lost=lambda: lost.append(1), timeout=30.0, connect_timeout=120.0)
    sm.put("topologies/wc", {"v": 1})
    assert sm.ephemeral("supervisors/s1", {"up": True})
    session = sm.zk.client_id[0]
    seen = []
    sm.watch("topologies/wc", seen.append)
    leading, leases = threading.Event(), []

    def lead(lease):
        leases.append(lease)
        leading.set()
        lease.wait(60)

    leader = threading.Thread(target=sm.election("leader", "me").run, args=(lead,))
    leader.start()
    assert leading.wait(20)
    zk_server.restart()
    sm.put("topologies/wc", {"v": 2})  # retried until the client is back
    assert sm.get("topologies/wc") == {"v": 2}
    wait_for(lambda: seen[-1:] == [{"v": 2}], what="the watch to see the write")
    # Down for a while with a write waiting: it goes through when the server is back.
    zk_server.stop()
    wait_for(lambda: not sm.connected, what="the client to notice")
    t = threading.Thread(target=sm.put, args=("topologies/wc", {"v": 3}))
    t.start()
    time.sleep(1.0)
    zk_server.start()
    t.join(timeout=150)
    assert not t.is_alive() and sm.get("topologies/wc") == {"v": 3}
    # The same session all along: ephemeral node kept, nothing lost.
    assert sm.zk.client_id[0] == session
    assert sm.get("supervisors/s1") == {"up": True}
    assert lost == [] and not sm.lost
    assert leases[0].valid  # still the leader: the session never ended
    # Someone deletes the leader's node: the leader learns it is no more.
    other = zk()
    other.delete("leader")
    assert leases[0].wait(20) and "is gone" in leases[0].reason
    leader.join(timeout=20)
    assert not leader.is_alive()


@pytest.fixture
def relay(zk_server):
    r = Relay(zk_server.port)
    yield r
    r.close()


def test_handshakes_the_server_never_answers_do_not_cost_the_session(zk, relay):
    """A server may accept a connection and never answer it (ZooKeeper 3.8 on start,
    zkrelay.py). kazoo alone waits the whole session timeout for that answer and comes
    back to a session the server has expired; ours gives up after a third of it and
    tries again. Two such handshakes in a row: waiting out even the first is too late."""
    lost = []
    sm = zk(hosts=relay.hosts, timeout=18.0, on_lost=lambda: lost.append(1))
    assert sm.ephemeral("supervisors/s1", {"up": True})
    session = sm.zk.client_id[0]
    relay.swallow(2)
    sm.get("supervisors/s1")  # a request: the server's clock for the session starts now
    relay.cut()
    wait_for(lambda: len(relay.swallowed) == 2 and relay.swallowed[1].is_set(),
             timeout=60, what="the client to give up both unanswered handshakes")
    wait_for(lambda: sm.connected, timeout=30, what="the client to reconnect")
    sm.put("topologies/wc", {"v": 1})
    assert sm.zk.client_id[0] == session and lost == [] and not sm.lost
    # The server kept the session: its ephemeral node is still there for everyone.
    assert zk().get("supervisors/s1") == {"up": True}


def test_impatient_calls_never_wait_for_a_lost_connection(zk, zk_server):
    """kazoo holds a call made while it reconnects until the server is back (a daemon's
    loop may wait like that); inside impatient() a call fails instead (nimbus's API reads)."""
    from kazoo.exceptions import ConnectionLoss
    from kazoo.retry import RetryFailedError
    from bittern.state.zkwait import Unreachable
    sm = zk(timeout=4)
    sm.put("topologies/wc", {"v": 1})
    with sm.impatient():
        assert sm.get("topologies/wc") == {"v": 1} and sm.children("topologies") == ["wc"]
    zk_server.stop()
    results = {}

    def call(key, fn):
        try:
            results[key] = fn()
        except Exception as e:  # noqa: BLE001 - the test looks at which
            results[key] = e

    try:
        wait_for(lambda: not sm.connected, what="the client to notice")
        patient = threading.Thread(target=call, args=("patient", lambda: sm.get("topologies/wc")))
        patient.start()
        with sm.impatient():
            call("checked", lambda: sm.get("topologies/wc"))
            # the narrow race: connected when checked, lost before the call was queued
            call("raw", lambda: sm.zk.get(sm._path("topologies/wc")))
        assert isinstance(results["checked"], Unreachable), results
        assert isinstance(results["raw"], ConnectionLoss), results
        assert "within 4s" in str(results["raw"])
        assert patient.is_alive() and "patient" not in results  # the daemon's call waits
    finally:
        zk_server.start()
    patient.join(timeout=30)
    assert not patient.is_alive() and results["patient"] == {"v": 1}
    assert not isinstance(results["patient"], RetryFailedError)
    with sm.impatient():
        wait_for(lambda: sm.connected, what="the connection back")
        assert sm.get("topologies/wc") == {"v": 1}


def test_session_expiry_calls_on_lost_once_and_ends_leadership(zk, zk_server):
    lost = []
    sm = zk(on_lost=lambda: lost.append(threading.current_thread().name))
    assert sm.ephemeral("supervisors/s1", {"up": True})
    election, got = sm.election("leader", "me"), {}
    leading = threading.Event()

    def lead(lease):
        leading.set()
        got["lost"] = lease.wait(30)
        got["reason"] = lease.reason

    t = threading.Thread(target=election.run, args=(lead,))
    t.start()
    assert leading.wait(20) and election.is_leader
    expire_session(sm, zk_server.hosts)
    t.join(timeout=30)
    assert got == {"lost": True, "reason": "session lost"}
    wait_for(lambda: lost, what="on_lost")
    assert sm.lost and not election.is_leader
    wait_for(lambda: sm.connected, what="kazoo's new session")
    assert sm.get("supervisors/s1") is None  # went with the old session
    expire_session(sm, zk_server.hosts)  # lost again before reopen: not reported twice
    wait_for(lambda: sm.connected and sm.zk.client_id is not None, what="another session")
    time.sleep(0.5)  # a negative check (not reported twice): nothing to wait for but time
    assert lost == ["bittern-zk-lost"]
    assert sm.reopen() == []
    assert not sm.lost and sm.get("supervisors/s1") == {"up": True}
    owner = sm.zk.exists(sm.root + "/supervisors/s1").ephemeralOwner
    assert owner == sm.zk.client_id[0]
    expire_session(sm, zk_server.hosts)  # reopened: armed again
    wait_for(lambda: len(lost) == 2, what="on_lost after reopen")


def test_digest_auth_keeps_others_out(zk):
    owner = zk(auth="alice:secret")
    owner.put("topologies/wc", {"v": 1})
    owner.put_bytes("archives/wc", b"jar")
    acl = owner.zk.get_acls(owner.root + "/topologies/wc")[0]
    assert acl == [make_digest_acl("alice", "secret", all=True)]
    for intruder in (zk(), zk(auth="alice:wrong"), zk(auth="mallory:secret")):
        with pytest.raises(NoAuthError):
            intruder.get("topologies/wc")
        with pytest.raises(NoAuthError):
            intruder.put("topologies/wc", {"v": 666})
        with pytest.raises(NoAuthError):
            intruder.children("topologies")
        with pytest.raises(NoAuthError):
            intruder.get_bytes("archives/wc")
        with pytest.raises(NoAuthError):
            intruder.delete("topologies/wc")
    assert zk(auth="alice:secret").get("topologies/wc") == {"v": 1}
    assert owner.get_bytes("archives/wc") == b"jar"

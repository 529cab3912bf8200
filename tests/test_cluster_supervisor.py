"""The cluster supervisor (``python -m supervisor --cluster``) against a real
ZooKeeper (the ``zk_server`` fixture) and real processes. The tests play nimbus:
they write ``topologies/NAME``, ``code/DIGEST`` and ``assignments/NAME`` by hand,
as docs/CLUSTER.md lays them out, and watch what the supervisors do. Every test
proves at the end that no process it caused is left (see the ``cluster`` fixture)."""
from __future__ import annotations

import http.client
import json
import os
import random
import secrets
import signal
import socket
import stat
import subprocess
import sys
import threading
import time
import uuid
from types import SimpleNamespace

import psutil
import pytest
from kazoo.client import KazooClient

from bittern import archive, curve
from bittern.cli.launch import prepare
from bittern.client import TMClient
from bittern.packing import round_robin
from bittern.runplan import RunPlan
from bittern.state.zk import ZkStateManager
from bittern.wire import Op
from supervisor.cluster import POLL_SECS, ClusterSupervisor
from conftest import EXAMPLES, ROOT, TOPOLOGIES, processes_of, wait_for

sys.path.insert(0, EXAMPLES)
from word_count import SENTENCES  # noqa: E402

WORD_COUNT = os.path.join(EXAMPLES, "word_count.py")
FLOW = os.path.join(TOPOLOGIES, "flow.py")
HOST = "127.0.0.1"


def expected_counts(n):
    counts = {}
    for i in range(n):
        for w in SENTENCES[i % len(SENTENCES)].split():
            counts[w] = counts.get(w, 0) + 1
    return counts


def free_block(n):
    """A base port with ``base-1 .. base+n-1`` free (below Linux's ephemeral range)."""
    for _ in range(200):
        base = random.randrange(20000, 32000)
        try:
            for p in range(base - 1, base + n):
                with socket.socket() as s:
                    s.bind((HOST, p))
            return base
        except OSError:
            continue
    raise RuntimeError("no free block of ports")


def expire_session(sm, hosts):
    """Make the server expire ``sm``'s session now (a second client takes it over)."""
    other = KazooClient(hosts, client_id=sm.zk.client_id)
    other.start(timeout=10)
    other.stop()
    other.close()


def http_get(port, path, token=None):
    """``(status, body)`` of a GET to a log server (raw path: no client-side normalizing)."""
    conn = http.client.HTTPConnection(HOST, port, timeout=10)
    try:
        conn.request("GET", path, headers={"Authorization": f"Bearer {token}"} if token else {})
        r = conn.getresponse()
        return r.status, r.read().decode()
    finally:
        conn.close()


def roles(data_dir):
    """``{("tmaster", 0) | ("stmgr", C) | ("instance", T): pid}`` of the processes
    started from ``data_dir`` (their plan path is in it; the supervisor is left out)."""
    out = {}
    for p in processes_of(data_dir):
        cmd = p.info["cmdline"]
        if "streammgr.tmaster" in cmd:
            out[("tmaster", 0)] = p.pid
        elif "streammgr" in cmd:
            out[("stmgr", int(cmd[cmd.index("--container") + 1]))] = p.pid
        elif "instance" in cmd:
            out[("instance", int(cmd[cmd.index("--task") + 1]))] = p.pid
    return out


def expected_roles(packing, containers):
    keys = {("tmaster", 0)} if 0 in containers else set()
    for c in containers:
        keys.add(("stmgr", c))
        keys.update(("instance", t) for t in packing.containers[c])
    return keys


class Supervisor:
    """One ``python -m supervisor --cluster`` process with its own data dir and ports
    (``args``: more options)."""

    def __init__(self, cluster, slots, name, args=()):
        self.slots = slots
        self.base = free_block(2 * slots + 1)
        self.log_port = self.base - 1
        self.id = f"{HOST}-{self.base}"
        self.data = os.path.join(cluster.tmp, name)
        self.log_path = os.path.join(cluster.tmp, f"{name}.log")
        self.cmd = [sys.executable, "-m", "supervisor", "--cluster", "--zk", cluster.hosts,
                    "--zk-root", cluster.root, "--host", HOST, "--slots", str(slots),
                    "--base-port", str(self.base), "--data-dir", self.data, "--zk-auth-file", cluster.auth_file, *args]
        self.start()

    def start(self):
        """Start (again: same id, ports and data dir; the log is appended to)."""
        with open(self.log_path, "a") as log:
            self.proc = subprocess.Popen(self.cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
                                         env=dict(os.environ, PYTHONUNBUFFERED="1"))

    def log(self):
        with open(self.log_path) as f:
            return f.read()

    def roles(self):
        return roles(self.data)

    def terminate(self, timeout=30):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError(f"supervisor {self.id} ignored SIGTERM for {timeout}s:\n{self.log()[-3000:]}")

    def get(self, path, token=None):
        return http_get(self.log_port, path, token)


class Cluster:
    """ZooKeeper under a root of this test's own, protected by digest auth (the
    supervisors and their topology masters must all authenticate), the test's
    stand-in for nimbus (``sm``: a state manager it writes with), and the
    supervisors it started."""

    def __init__(self, zk_server, tmp):
        self.hosts = zk_server.hosts
        self.root = f"/t-{uuid.uuid4().hex[:10]}"
        self.tmp = tmp
        self.auth = f"bittern:{secrets.token_hex(8)}"
        self.auth_file = os.path.join(str(tmp), "zk-auth")
        with open(os.open(self.auth_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as f:
            f.write(self.auth + "\n")
        self.sm = ZkStateManager(self.hosts, root=self.root, auth=self.auth)
        self.token = secrets.token_urlsafe(24)
        self.sm.put("nimbus/token", {"token": self.token})
        # the stand-in nimbus's keypair: topology masters admit the keys in nimbus/hosts
        self.nimbus_key = curve.generate()
        self.sm.put("nimbus/hosts/test", {"public_key": self.nimbus_key[0]})
        self.supervisors = []
        self.packings = {}

    def supervisor(self, slots=1, name=None, args=()):
        sup = Supervisor(self, slots, name or f"sup{len(self.supervisors)}", args)
        self.supervisors.append(sup)
        return sup

    def registered(self, sup, timeout=30):
        return wait_for(lambda: self.sm.get(f"supervisors/{sup.id}") or (sup.proc.poll() is not None and
                                                                         self._died(sup)),
                        timeout, what=f"supervisor {sup.id} to register")

    def _died(self, sup):
        raise AssertionError(f"supervisor {sup.id} exited with {sup.proc.returncode}:\n{sup.log()[-3000:]}")

    def submit(self, name, path, config=(), code=None):
        """``topologies/NAME`` and ``code/DIGEST`` as the leader nimbus writes them."""
        tdef, conf = prepare(path, name, config, warn=lambda m: None)
        arch = archive.build(path)
        data, digest = arch.data, arch.digest
        if code is not None:
            data, digest = code
        self.sm.put_bytes(f"code/{digest}", data)
        self.sm.put(f"topologies/{name}", {
            "definition": tdef.to_dict(), "config": conf, "state": "RUNNING", "submitted_at": time.time(),
            "code": {"digest": digest, "entry": arch.entry, "size": len(data)}})
        self.packings[name] = round_robin({c.name: c.par for c in tdef.components.values()},
                                          conf["topology.stmgrs"])
        return self.packings[name]

    def assign(self, name, placement, version=1, keys=None):
        """``placement``: container -> (supervisor, slot); endpoints from the slots.
        ``keys``: container -> {public, secret} (CURVE between the stream managers)."""
        def port(c, extra=0):
            sup, slot = placement[c]
            return sup.base + 2 * slot + extra
        doc = {"version": version, "packing": self.packings[name].to_dict(),
               "containers": {str(c): {"supervisor": s.id, "host": HOST, "slot": slot}
                              for c, (s, slot) in placement.items()},
               "tmaster": f"tcp://{HOST}:{port(0, 1)}",
               "stmgrs": {str(c): {"tcp": f"tcp://{HOST}:{port(c)}"} for c in placement}}
        if keys:
            doc["keys"] = {str(c): k for c, k in keys.items()}
        self.sm.put(f"assignments/{name}", doc)

    def status(self, name, phase, pid=None, timeout=60):
        def ok():
            st = self.sm.get(f"status/{name}") or {}
            for sup in self.supervisors:
                if sup.proc.poll() is not None:
                    self._died(sup)
            if st.get("phase") == "FAILED" and phase != "FAILED":
                raise AssertionError(f"{name} failed: {st.get('error')}")
            return st if st.get("phase") == phase and (pid is None or st.get("pid") == pid) else None
        return wait_for(ok, timeout, what=f"status/{name} to be {phase}")


@pytest.fixture
def cluster(zk_server, tmp_path):
    c = Cluster(zk_server, str(tmp_path))
    try:
        yield c
    finally:
        for sup in c.supervisors:
            if sup.proc.poll() is None:
                sup.proc.send_signal(signal.SIGTERM)
        for sup in c.supervisors:
            try:
                sup.proc.wait(30)
            except subprocess.TimeoutExpired:
                sup.proc.kill()
                sup.proc.wait()
        leaked = processes_of(str(tmp_path))
        for p in leaked:
            try:
                p.kill()
            except psutil.NoSuchProcess:
                pass
        zk = c.sm.zk
        if zk.exists(c.root):
            zk.delete(c.root, recursive=True)
        c.sm.close()
        assert not leaked, "test left processes behind: " + ", ".join(
            f"{p.pid} {' '.join(p.info['cmdline'] or [])[:150]}" for p in leaked)


def report(tmaster, keys=None):
    """``keys``: (server public, own public, own secret) for a CURVE topology master."""
    with TMClient(tmaster, curve=keys) as client:
        return client.request(Op.REPORT)


def executed(rep, comp):
    return rep["components"].get(comp, {}).get("__execute-count", 0)


# -- the tests ----------------------------------------------------------------------------

def test_two_supervisors_split_word_count(cluster, tmp_path):
    a, b = cluster.supervisor(name="a"), cluster.supervisor(name="b")
    reg = cluster.registered(a)
    cluster.registered(b)
    assert reg["id"] == a.id and reg["host"] == HOST and reg["slots"] == 1 and reg["base_port"] == a.base
    assert reg["log_url"] == f"http://{HOST}:{a.log_port}" and reg["pid"] == a.proc.pid
    assert reg["cpu_count"] >= 1 and reg["memory_mb"] > 0 and reg["started"] > 0

    out = str(tmp_path / "wc-out")
    n = 2000
    packing = cluster.submit("wc", WORD_COUNT, [f"wordcount.sentences={n}", f"wordcount.output.dir={out}"])
    assert sorted(packing.containers) == [0, 1]
    pairs = {c: dict(zip(("public", "secret"), curve.generate())) for c in (0, 1)}
    # as nimbus does: each secret sealed to the public key its supervisor registered
    keys = {c: {"public": pairs[c]["public"], "to": s.id,
                "sealed": curve.seal(pairs[c]["secret"], cluster.sm.get(f"supervisors/{s.id}")["public_key"])}
            for c, s in ((0, a), (1, b))}
    cluster.assign("wc", {0: (a, 0), 1: (b, 0)}, keys=keys)
    st = cluster.status("wc", "RUNNING")
    assert st["tmaster"] == f"tcp://{HOST}:{a.base + 1}" and st["host"] == HOST
    for node in ("status/wc", f"supervisors/{a.id}"):  # written with the digest identity only
        acls = cluster.sm.zk.get_acls(f"{cluster.root}/{node}")[0]
        assert [acl.id.scheme for acl in acls] == ["digest"], node

    # each supervisor runs exactly its own container's processes
    assert set(a.roles()) == expected_roles(packing, [0])
    assert set(b.roles()) == expected_roles(packing, [1])
    assert a.roles()[("tmaster", 0)] == st["pid"]

    # the plan: 0600, every container's tcp endpoint, local sockets and secrets only for its own
    plan_path = os.path.join(b.data, "run", "wc", "plan.json")
    assert stat.S_IMODE(os.stat(plan_path).st_mode) == 0o600
    plan = RunPlan.load(plan_path)
    assert plan.stmgrs[0] == {"tcp": f"tcp://{HOST}:{a.base}"} and "ipc" in plan.stmgrs[1]
    assert plan.keys == {0: {"public": pairs[0]["public"], "secret": None}, 1: pairs[1]}
    assert plan.state_url == f"zk://{cluster.hosts}{cluster.root}" and plan.home == b.data
    assert plan.topology.source["file"].startswith(os.path.join(b.data, "code", ""))

    # word count end to end across the two supervisors (CURVE between them): exact
    total = sum(expected_counts(n).values())
    tm_keys = (pairs[0]["public"], *cluster.nimbus_key)  # the topology master is a CURVE server
    wait_for(lambda: executed(report(st["tmaster"], tm_keys), "count") >= total, 60, 0.3, "every word counted")
    rep = report(st["tmaster"], tm_keys)
    assert executed(rep, "split") == n and executed(rep, "count") == total

    # logs: each supervisor serves its own processes' files, with the token only
    code, body = a.get("/logs/wc", cluster.token)
    assert code == 200
    files_a = json.loads(body)
    assert {"tmaster.log", "stmgr-0.log", "console.log"} <= set(files_a) and "stmgr-1.log" not in files_a
    code, body = b.get("/logs/wc", cluster.token)
    assert code == 200 and "stmgr-1.log" in json.loads(body) and "tmaster.log" not in json.loads(body)
    code, text = a.get("/logs/wc/tmaster.log", cluster.token)
    assert code == 200 and "running" in text
    code, text = a.get("/logs/wc/tmaster.log?tail=1", cluster.token)
    assert code == 200 and text.count("\n") == 1 and text == text.strip("\n").rsplit("\n", 1)[-1] + "\n"
    assert a.get("/logs", cluster.token) == (200, '["wc"]')
    assert a.get("/logs/wc")[0] == 401
    assert a.get("/logs/wc/tmaster.log", "wrong-token")[0] == 401
    assert a.get("/logs/nope", cluster.token)[0] == 404
    assert a.get("/logs/wc/nope.log", cluster.token)[0] == 404
    for evil in ("/logs/wc/..%2f..%2fsupervisor.lock", "/logs/../run", "/logs/wc/../../supervisor.lock",
                 "/logs/%2e%2e/a/run"):
        assert a.get(evil, cluster.token)[0] in (400, 404), evil  # a bad name, or no such file

    # the assignment goes: both supervisors stop everything, close() writes the counts
    cluster.sm.delete("assignments/wc")
    wait_for(lambda: not a.roles() and not b.roles(), 30, what="every process of wc to stop")
    wait_for(lambda: not os.path.exists(os.path.join(a.data, "run", "wc"))
             and not os.listdir(os.path.join(a.data, "code")), 10, what="its plan and code to go")
    merged = {}
    for f in sorted(os.listdir(out)):
        with open(os.path.join(out, f)) as fh:
            part = json.load(fh)
        assert not set(part) & set(merged), "a word counted by two tasks"
        merged.update(part)
    assert sorted(os.listdir(out)) == ["counts-1.json", "counts-2.json"]
    assert merged == expected_counts(n)
    assert a.proc.poll() is None and b.proc.poll() is None

    # SIGTERM: exit 0, node gone
    assert a.terminate() == 0 and b.terminate() == 0
    assert cluster.sm.get(f"supervisors/{a.id}") is None and cluster.sm.get(f"supervisors/{b.id}") is None


def test_restart_after_kill_and_version_bump(cluster, tmp_path):
    a = cluster.supervisor(slots=2)
    cluster.registered(a)
    out = str(tmp_path / "flow")
    packing = cluster.submit("flow", FLOW, [f"test.out={out}", "bittern.restart.backoff.initial.secs=0.2"])
    cluster.assign("flow", {0: (a, 0), 1: (a, 1)})
    st = cluster.status("flow", "RUNNING")
    before = a.roles()
    assert set(before) == expected_roles(packing, [0, 1])

    # kill -9 of an instance: restarted (a new pid for the same task)
    victim = ("instance", packing.containers[1][0])
    os.kill(before[victim], signal.SIGKILL)
    wait_for(lambda: a.roles().get(victim) not in (None, before[victim]), 20, what="the instance restarted")
    assert "restarted instance-" in a.log()
    assert {k: v for k, v in a.roles().items() if k != victim} == {k: v for k, v in before.items() if k != victim}

    # a new version (the containers swap slots): every process replaced, with the new plan
    cluster.assign("flow", {0: (a, 1), 1: (a, 0)}, version=2)
    wait_for(lambda: (lambda r: set(r) == set(before) and not set(r.values()) & set(before.values()))(a.roles()),
             30, what="every process replaced")
    new = a.roles()
    st2 = cluster.status("flow", "RUNNING", pid=new[("tmaster", 0)])
    assert st2["tmaster"] == f"tcp://{HOST}:{a.base + 3}" != st["tmaster"]
    assert os.listdir(os.path.join(a.data, "run", "flow")) == ["plan.json"]
    assert json.load(open(os.path.join(a.data, "run", "flow", "plan.json")))["tmaster"] == st2["tmaster"]
    for pid in new.values():
        assert "/run/flow/plan.json" in " ".join(psutil.Process(pid).cmdline())
    sink = os.path.join(out, f"sink-{packing.containers[1][0]}.txt")
    wait_for(lambda: os.path.exists(sink) and int(open(sink).read().split()[1]) == new[victim], 20,
             what="tuples flowing under version 2")

    # SIGTERM with the topology still assigned: everything stops, the node goes, exit 0
    assert a.terminate() == 0
    assert not a.roles()
    assert cluster.sm.get(f"supervisors/{a.id}") is None
    assert not os.path.exists(os.path.join(a.data, "run", "flow"))


def test_supervisor_killed_takes_its_processes_and_comes_back(cluster, tmp_path):
    a = cluster.supervisor()
    cluster.registered(a)
    packing = cluster.submit("flow", FLOW, [f"test.out={tmp_path / 'flow'}", "topology.stmgrs=1"])
    cluster.assign("flow", {0: (a, 0)})
    cluster.status("flow", "RUNNING")
    before = a.roles()
    assert set(before) == expected_roles(packing, [0])

    a.proc.kill()  # kill -9: its children die with it (PR_SET_PDEATHSIG)
    a.proc.wait()
    wait_for(lambda: not a.roles(), 10, what="the dead supervisor's processes to die")

    # restarted with the same id: it takes its node back once the old session has
    # expired, and runs the assignment again
    a.start()
    reg = wait_for(lambda: (lambda d: d if d and d["pid"] == a.proc.pid else None)(
        cluster.sm.get(f"supervisors/{a.id}")), 40, 0.2, "the restarted supervisor to register")
    assert reg["id"] == a.id
    st = cluster.status("flow", "RUNNING", pid=wait_for(lambda: a.roles().get(("tmaster", 0)), 30))
    after = a.roles()
    assert set(after) == set(before) and not set(after.values()) & set(before.values())
    assert st["pid"] == after[("tmaster", 0)]
    assert a.terminate() == 0 and not a.roles()


def test_bad_archive_fails_once(cluster):
    a = cluster.supervisor(slots=4)
    cluster.registered(a)
    garbage = b"this is not a tar.gz" * 10
    cluster.submit("junk", FLOW, code=(garbage, archive.digest_of(garbage)))
    good = archive.build(FLOW)
    cluster.submit("forged", FLOW, code=(good.data + b"x", good.digest))  # bytes do not match the digest
    cluster.assign("junk", {0: (a, 0), 1: (a, 1)})
    st = cluster.status("junk", "FAILED")
    cluster.assign("forged", {0: (a, 2), 1: (a, 3)})
    st2 = cluster.status("forged", "FAILED")
    for name, s, cause in (("junk", st, "not a topology archive"), ("forged", st2, "digest mismatch")):
        line = s["error"]["error"]
        assert "\n" not in line and f"'{name}'" in line and cause in line and a.id in line, line
        assert s["error"]["traceback"] and s["host"] == HOST
    time.sleep(2.5)  # several polls: not retried, not rewritten
    assert cluster.sm.get("status/junk")["updated"] == st["updated"]
    assert a.log().count("'junk' cannot start") == 1 and a.log().count("'forged' cannot start") == 1
    assert not a.roles() and not os.listdir(os.path.join(a.data, "code"))
    assert a.terminate() == 0


def test_bad_flags_and_unreachable_zookeeper(tmp_path):
    def run(*args):
        r = subprocess.run([sys.executable, "-m", "supervisor", *args], cwd=ROOT, capture_output=True,
                           text=True, timeout=60)
        return r.returncode, r.stderr.strip().splitlines()

    d = str(tmp_path / "data")
    for args, word in ((["--cluster", "--data-dir", d], "--zk"),
                       (["--cluster", "--zk", "x:1"], "--data-dir"),
                       (["--cluster", "--zk", "x:1", "--data-dir", d, "--slots", "0"], "--slots"),
                       (["--cluster", "--zk", "x:1", "--data-dir", d, "--host", "0.0.0.0"], "wildcard"),
                       (["--cluster", "--zk", "x:1", "--data-dir", d, "--base-port", "65530"], "65535"),
                       (["--cluster", "--zk", "x:1", "--data-dir", d, "--zk-auth", "u:p"], "--zk-auth-file"),
                       (["--cluster", "--zk", "x:1", "--data-dir", d], "--insecure"),
                       (["--cluster", "--zk", "x:1", "--data-dir", d, "--session-lost-grace", "0"],
                        "--session-lost-grace"),
                       (["--cluster", "--zk", "x:1", "--data-dir", d, "--session-lost-grace", "soon"],
                        "supervisor.session.lost.grace.secs"),
                       (["--cluster", "--zk", "x:1", "--data-dir", d, "--session-timeout", "-1"],
                        "--session-timeout")):
        rc, err = run(*args)
        assert rc == 2 and len(err) == 1 and word in err[0], (args, err)
    with socket.socket() as s:
        s.bind((HOST, 0))
        port = s.getsockname()[1]
    creds = tmp_path / "zk-auth"
    creds.write_text("bittern:secret\n")
    creds.chmod(0o644)  # others may read it: refused
    rc, err = run("--cluster", "--zk", f"{HOST}:{port}", "--data-dir", d, "--zk-auth-file", str(creds))
    assert rc == 2 and len(err) == 1 and "chmod 600" in err[0], err
    creds.chmod(0o600)
    rc, err = run("--cluster", "--zk", f"{HOST}:{port}", "--data-dir", d, "--zk-connect-timeout", "1",
                  "--zk-auth-file", str(creds))
    assert rc == 1 and len(err) == 1 and "no ZooKeeper server answered" in err[0], err
    assert not processes_of(d)


def test_zookeeper_away_and_session_loss_keep_containers(cluster, zk_server, tmp_path):
    """In-process: the test needs the supervisor's session, to expire it."""
    base = free_block(3)
    data = str(tmp_path / "inproc")
    cluster.sm.delete("nimbus/token")
    sup = ClusterSupervisor(cluster.hosts, cluster.root, auth=cluster.auth, host=HOST, slots=1, base_port=base,
                            data_dir=data)
    t = threading.Thread(target=sup.run, name="supervisor")
    t.start()
    try:
        node = wait_for(lambda: cluster.sm.zk.exists(f"{cluster.root}/supervisors/{sup.id}"), 30,
                        what="registration")
        assert http_get(base - 1, "/logs", cluster.token)[0] == 503  # no token in ZooKeeper yet
        cluster.sm.put("nimbus/token", {"token": cluster.token})
        wait_for(lambda: http_get(base - 1, "/logs", cluster.token)[0] == 200, 10, what="the token read")
        packing = cluster.submit("flow", FLOW, [f"test.out={tmp_path / 'flow'}", "topology.stmgrs=1"])
        cluster.assign("flow", {0: (SimpleNamespace(id=sup.id, base=base), 0)})
        cluster.status("flow", "RUNNING")
        before = roles(data)
        assert set(before) == expected_roles(packing, [0])

        # ZooKeeper goes away for a while: the containers keep running, untouched
        zk_server.stop()
        time.sleep(3 * POLL_SECS)
        assert roles(data) == before and t.is_alive()
        zk_server.start()
        wait_for(lambda: sup.state.connected and cluster.sm.connected, 30, what="ZooKeeper back")

        # the session expires: a new one, the node re-created in it, nothing restarted
        expire_session(sup.state, cluster.hosts)
        wait_for(lambda: (lambda s: s and s.ephemeralOwner != node.ephemeralOwner)(
            cluster.sm.zk.exists(f"{cluster.root}/supervisors/{sup.id}")), 30, what="re-registration")
        assert cluster.sm.get(f"supervisors/{sup.id}")["id"] == sup.id
        assert roles(data) == before

        cluster.sm.delete("assignments/flow")  # and it reads the assignments again
        wait_for(lambda: not roles(data), 30, what="the containers to stop")
    finally:
        sup.stop()
        t.join(60)
    assert not t.is_alive()
    assert cluster.sm.get(f"supervisors/{sup.id}") is None

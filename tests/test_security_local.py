"""Local mode against a second local user (issue 18): another uid on the same host can
neither connect to a local topology's sockets nor read its home, nor squat the shared
temp directory to take over its sockets.

The tests run as root; the attacker is ``nobody`` (uid 65534), reached with
``setpriv --reuid=65534 --regid=65534 --clear-groups`` (util-linux), running a small
Python script that reports what each attempt gave (JSON on stdout). The topology is a
paced word count (tests/seckit.py) run with ``bittern submit``; at the end its counts
must be exact, so nothing the attacker did reached it. Its home sits in a directory
every user may traverse (0755), so the home's own mode is what keeps nobody out.
"""
from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile

import pytest
import zmq

from conftest import Bittern, processes_of, wait_for
from seckit import expected_counts, final_counts, stop_spout, words_of, write_topology

pytestmark = pytest.mark.slow

SETPRIV = shutil.which("setpriv")
NOBODY = 65534
AS_NOBODY = [SETPRIV or "setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"]

# What nobody tries: every endpoint (stat, a raw unix connect, a zmq DEALER that sends a
# control message and watches its monitor for a connection), every file (open for
# reading), every directory (list). One line of JSON: {thing: outcome}.
ATTACK = r'''
import errno, json, os, socket, struct, sys, time
import msgpack, zmq

todo = json.loads(sys.argv[1])
out = {"uid": os.getuid()}

def err(e):
    return errno.errorcode.get(e.errno, str(e.errno)) if isinstance(e, OSError) else type(e).__name__

ctx = zmq.Context()
for ep in todo["endpoints"]:
    path = ep[len("ipc://"):] if ep.startswith("ipc://") else None
    r = {}
    if path is not None:
        try:
            os.stat(path)
            r["stat"] = "ok"
        except OSError as e:
            r["stat"] = err(e)
        r["access"] = os.access(path, os.R_OK | os.W_OK)
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.connect(path)
            r["unix_connect"] = "ok"
        except OSError as e:
            r["unix_connect"] = err(e)
        finally:
            s.close()
    d = ctx.socket(zmq.DEALER)
    d.setsockopt(zmq.LINGER, 0)
    d.setsockopt(zmq.IDENTITY, b"q-nobody" if ep == todo["tmaster"] else b"s0")
    mon = d.get_monitor_socket()
    d.connect(ep)
    op = "deactivate" if ep == todo["tmaster"] else "stmgr_register"
    d.send_multipart([b"C", msgpack.packb({"op": op, "req": 1, "pid": 1, "container": 0})], zmq.NOBLOCK)
    events, deadline = [], time.monotonic() + 1.5
    while time.monotonic() < deadline:
        if mon.poll(100):
            ev = mon.recv_multipart()
            events.append(struct.unpack("=HI", ev[0][:6])[0])
    r["zmq_connected"] = any(e in (zmq.EVENT_CONNECTED, zmq.EVENT_HANDSHAKE_SUCCEEDED) for e in events)
    r["zmq_replied"] = bool(d.poll(200))
    d.disable_monitor()
    mon.close(0)
    d.close(0)
    out[ep] = r
ctx.term()
for f in todo["files"]:
    try:
        open(f, "rb").read(1)
        out[f] = "read"
    except OSError as e:
        out[f] = err(e)
for d in todo["dirs"]:
    try:
        os.listdir(d)
        out[d] = "listed"
    except OSError as e:
        out[d] = err(e)
print(json.dumps(out))
'''


def as_nobody(*cmd, env=None, timeout=60):
    return subprocess.run([*AS_NOBODY, *cmd], capture_output=True, text=True, timeout=timeout,
                          env=env, cwd="/")


@pytest.fixture(autouse=True)
def need_root_and_setpriv():
    if SETPRIV is None:
        pytest.skip("setpriv (util-linux) is not installed: cannot act as a second local user")
    if os.geteuid() != 0:
        pytest.skip("these tests switch to uid 65534 with setpriv, which needs root")


@pytest.fixture
def world(tmp_path):
    """A fresh directory every user may traverse (0755) for the home and the outputs,
    removed afterwards; asserts that no process naming it is left."""
    base = tempfile.mkdtemp(prefix="bittern-sec-")
    os.chmod(base, 0o755)
    try:
        yield base
    finally:
        leaked = processes_of(base)
        for p in leaked:
            try:
                p.kill()
            except Exception:  # noqa: BLE001 - gone already
                pass
        shutil.rmtree(base, ignore_errors=True)
        assert not leaked, "the test left processes behind: " + ", ".join(str(p.pid) for p in leaked)


def run_word_count(bittern, base, name, rate=150):
    src = write_topology(base)
    out = os.path.join(base, f"out-{name}")
    os.makedirs(out)
    bittern("submit", src, "--name", name, "--config", f"sec.out={out}", "--config", f"sec.rate={rate}",
            check=True)
    return out


def counted(bittern, name):
    r = bittern("metrics", name, "--json", "--window", "all")
    if r.returncode != 0:
        return -1
    return ((json.loads(r.stdout).get("components") or {}).get("count") or {}).get("executed") or 0


def state_of(bittern, name):
    rows = [r for r in bittern.json("list", "--json") if r["name"] == name]
    return rows[0]["state"] if rows else None


def finish_exact(bittern, home, name, out):
    """Stop the spout, wait until every word it sent was counted, kill the topology:
    its counts are exact and its processes gone."""
    n = stop_spout(out)
    assert n > 0, "the spout sent nothing"
    wait_for(lambda: counted(bittern, name) >= words_of(n), timeout=60, what=f"the {words_of(n)} words counted")
    assert counted(bittern, name) == words_of(n)
    bittern("kill", name, check=True)
    wait_for(lambda: not processes_of(home), timeout=30, what="every process of the topology gone after kill")
    files, got = final_counts(out)
    assert len(files) == 2, files
    assert got == expected_counts(n)
    return n


def stop(bittern, home, name):
    """Kill the topology (again: kill is idempotent) and prove its processes are gone."""
    bittern("kill", name)
    wait_for(lambda: not processes_of(home), timeout=30, what="every process of the topology gone")


def test_a_second_user_can_neither_connect_to_local_mode_nor_read_its_home(world):
    home = os.path.join(world, "home")
    bittern = Bittern(home)
    name = "secwc"
    out = run_word_count(bittern, world, name)
    try:
        wait_for(lambda: counted(bittern, name) > 100, timeout=60, what="words counted")
        asg = bittern.state("assignments", name)
        endpoints = [asg["tmaster"]] + [e for c in sorted(asg["stmgrs"]) for e in
                                        (asg["stmgrs"][c]["tcp"], asg["stmgrs"][c]["ipc"], asg["stmgrs"][c]["ctl"])]
        assert len(endpoints) == 7, asg
        assert all(e.startswith("ipc://") for e in endpoints), f"local mode left a tcp port open: {endpoints}"
        files = [os.path.join(d, f) for d, _, fs in os.walk(home) for f in fs]
        assert any("/logs/" in f for f in files) and any("/state/" in f for f in files), files
        ipc_dirs = sorted({os.path.dirname(e[len("ipc://"):]) for e in endpoints})
        dirs = [home, os.path.join(home, "logs"), os.path.join(home, "state"), *ipc_dirs,
                os.path.dirname(asg["tmaster"][len("ipc://"):])]
        before = counted(bittern, name)

        # a control: a socket and a file nobody may reach, so the script is seen to tell success
        open_dir = os.path.join(world, "open")
        os.mkdir(open_dir)
        os.chmod(open_dir, 0o777)
        control_file = os.path.join(open_dir, "readable")
        with open(control_file, "w") as f:
            f.write("x")
        os.chmod(control_file, 0o644)
        ctx = zmq.Context()
        router = ctx.socket(zmq.ROUTER)
        router.setsockopt(zmq.LINGER, 0)
        control_ep = f"ipc://{open_dir}/sock"
        router.bind(control_ep)
        os.chmod(os.path.join(open_dir, "sock"), 0o777)
        try:
            r = as_nobody(sys.executable, "-c", ATTACK, json.dumps(
                {"endpoints": endpoints + [control_ep], "tmaster": asg["tmaster"], "files": files + [control_file],
                 "dirs": dirs + [open_dir]}))
            assert r.returncode == 0, r.stderr
            got = json.loads(r.stdout)
            assert got["uid"] == NOBODY
            assert router.poll(2000), "the control socket got nothing from nobody's script"
        finally:
            router.close(0)
            ctx.term()
        ctl = got[control_ep]
        assert ctl["stat"] == "ok" and ctl["unix_connect"] == "ok" and ctl["zmq_connected"], ctl
        assert got[control_file] == "read" and got[open_dir] == "listed"
        for ep in endpoints:
            res = got[ep]
            assert res["stat"] == "EACCES" and res["unix_connect"] == "EACCES" and not res["access"], (ep, res)
            assert not res["zmq_connected"] and not res["zmq_replied"], (ep, res)
        for f in files:
            assert got[f] == "EACCES", (f, got[f])
        for d in dirs:
            assert got[d] == "EACCES", (d, got[d])

        assert state_of(bittern, name) == "RUNNING"
        wait_for(lambda: counted(bittern, name) > before + 100, timeout=30, what="words counted after the attack")
        n = finish_exact(bittern, home, name, out)
    finally:
        stop(bittern, home, name)
    print(f"local attack: {len(endpoints)} endpoints, {len(files)} files, {len(dirs)} directories "
          f"refused to uid {NOBODY}; {n} sentences counted exactly")


@pytest.mark.parametrize("squat", ["directory", "symlink"])
def test_a_squatted_runtime_directory_is_not_used(world, squat):
    """Nobody makes ``$TMPDIR/bittern-0`` first (an open directory, or a symlink to one
    of theirs): root's topology runs elsewhere, warns, and puts nothing there."""
    tmpdir = os.path.join(world, "tmp")
    os.mkdir(tmpdir)
    os.chmod(tmpdir, 0o1777)
    squatted = os.path.join(tmpdir, f"bittern-{os.geteuid()}")
    theirs = os.path.join(tmpdir, "nobodys")
    if squat == "directory":
        r = as_nobody(sys.executable, "-c", "import os,sys; os.mkdir(sys.argv[1]); os.chmod(sys.argv[1], 0o777)",
                      squatted)
        target = squatted
    else:
        r = as_nobody(sys.executable, "-c", "import os,sys; os.mkdir(sys.argv[1]); os.chmod(sys.argv[1], 0o777); "
                      "os.symlink(sys.argv[1], sys.argv[2])", theirs, squatted)
        target = theirs
    assert r.returncode == 0, r.stderr
    assert os.lstat(squatted).st_uid == NOBODY

    home = os.path.join(world, "home")
    bittern = Bittern(home)
    bittern.env["TMPDIR"] = tmpdir
    name = f"squat{squat[0]}"
    out = run_word_count(bittern, world, name)
    try:
        wait_for(lambda: counted(bittern, name) > 100, timeout=60, what="words counted")
        asg = bittern.state("assignments", name)
        tm_path = asg["tmaster"][len("ipc://"):]
        assert not os.path.realpath(tm_path).startswith(os.path.realpath(target) + os.sep), asg["tmaster"]
        assert os.listdir(target) == [], f"root's topology put files in nobody's directory: {os.listdir(target)}"
        # where it went instead: a private directory of root's
        runtime = os.path.dirname(os.path.dirname(tm_path))
        st = os.lstat(runtime)
        assert stat.S_ISDIR(st.st_mode) and st.st_uid == 0 and stat.S_IMODE(st.st_mode) == 0o700, (runtime, st)
        logs = "".join(open(os.path.join(dp, f), errors="replace").read()
                       for dp, _, fs in os.walk(os.path.join(home, "logs")) for f in fs)
        warned = [line for line in logs.splitlines() if squatted in line and "not using" in line]
        assert warned, f"no warning naming {squatted} in the logs"
        assert state_of(bittern, name) == "RUNNING"
        n = finish_exact(bittern, home, name, out)
    finally:
        stop(bittern, home, name)
    assert os.listdir(target) == []
    print(f"squat ({squat}): warned {warned[0].strip()[:200]!r}; {n} sentences counted exactly")

"""Exactly once across hosts: the shared checkpoint store in cluster mode (issue 17).

A real ZooKeeper, nimbus and two supervisors (tests/clusterkit.py), driven through
``bittern --cluster URL``:

* an exactly-once submission without a store every host reaches is refused in one
  line by nimbus, and nothing is recorded or started;
* with the store named only in nimbus's cluster config, tests/topologies/exactly_once_seq.py
  spans both supervisors and commits every number exactly once; ``kill`` removes its
  checkpoint files and metadata;
* a "host" that cannot write the store (its view of the path is read-only), or does not
  share it (a local directory mounted over the path), fails the submission in one line
  naming the container and the path, and nothing is left running. Each such host is a
  supervisor in its own mount namespace (``unshare -m``), as a host with its own mounts.

The quick tests at the end check nimbus's config file and the probe helpers alone.
"""
from __future__ import annotations

import glob
import json
import os
import shlex
import subprocess
import time

import pytest

from bittern.ckptprobe import check_probe, probe_path, probe_problem, write_probe
from bittern.errors import ConfigError
from clusterkit import all_pids, zk_view
from conftest import TOPOLOGIES, wait_for
from eokit import check_exactly_once, committed_rows

SEQ = os.path.join(TOPOLOGIES, "exactly_once_seq.py")
N, K = 6000, 7


def seq_conf(out, n=N, rate=1500, store=None):
    args = ["--config", f"test.out={out}", "--config", f"test.count={n}", "--config", f"test.rate={rate}",
            "--config", f"test.keys={K}"]
    return args + (["--config", f"bittern.checkpoint.dir={store}"] if store else [])


NOTHING = {"record": None, "assignment": None, "checkpoints": [], "code": []}


def error_lines(r):
    return [line for line in r.stderr.splitlines() if line.strip()]


def nimbus_config(tmp_path, store):
    """A cluster.toml that the CLI's keys and nimbus's share."""
    path = tmp_path / "cluster.toml"
    path.write_text(f'nimbus = "http://127.0.0.1:1"\n"bittern.checkpoint.dir" = {json.dumps(store)}\n')
    return str(path)


@pytest.mark.slow
def test_exactly_once_without_a_shared_store_is_refused_in_one_line_and_nothing_is_recorded(cluster, tmp_path):
    cluster.start_nimbus()
    cluster.start_supervisor("a")
    out = str(tmp_path / "out")

    def refused(*extra):
        r = cluster.cli("submit", SEQ, "--name", "eo", *seq_conf(out), *extra, timeout=60)
        lines = error_lines(r)
        assert r.returncode != 0 and len(lines) == 1 and lines[0].startswith("error: "), r.stderr
        assert json.loads(cluster.cli("list", "--json", check=True).stdout) == []
        assert zk_view(cluster, "eo") == NOTHING
        assert not all_pids(cluster)
        print(lines[0])
        return lines[0]

    line = refused()  # nothing in the topology, nothing in nimbus's config
    assert line.startswith("error: exactly once: topology 'eo' sets no bittern.checkpoint.dir;"), line
    assert "every host and nimbus share" in line and "nimbus's --config-file" in line
    line = refused("--config", "bittern.checkpoint.dir=relative/ckpt")
    assert "bittern.checkpoint.dir 'relative/ckpt' of topology 'eo' must be an absolute path" in line
    # a path nimbus cannot write (a file where a directory should be)
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("x")
    store = str(blocker / "ckpt")
    line = refused("--config", f"bittern.checkpoint.dir={store}")
    assert f"nimbus cannot write its probe {store}/eo/_probe/nimbus in the checkpoint store: Not a directory" \
        in line and "bittern.checkpoint.dir must be a directory every host and nimbus can write" in line
    assert not os.path.exists(tmp_path / "out")
    # at least once needs no store: accepted as before
    r = cluster.cli("submit", os.path.join(TOPOLOGIES, "reliable_seq.py"), "--name", "alo", "--config",
                    f"test.out={tmp_path / 'alo'}", "--config", "test.count=100", timeout=60)
    assert r.returncode == 0, r.stderr
    cluster.cli("kill", "alo", check=True)
    wait_for(lambda: not all_pids(cluster), timeout=30, what="every process gone after the kill")


@pytest.mark.slow
def test_store_from_nimbus_config_commits_exactly_once_across_two_hosts_and_kill_removes_it(cluster, tmp_path):
    store = str(tmp_path / "shared-ckpt")
    cluster.start_nimbus(args=["--config-file", nimbus_config(tmp_path, store)])
    cluster.start_supervisor("a")
    cluster.start_supervisor("b")
    assert cluster.cluster_info()["config"] == {"bittern.checkpoint.dir": store}
    out = str(tmp_path / "out")
    t0 = time.monotonic()
    r = cluster.cli("submit", SEQ, "--name", "eo", *seq_conf(out), check=True)
    print(f"submitted and RUNNING in {time.monotonic() - t0:.2f}s: {r.stdout.strip()}")
    view = zk_view(cluster, "eo")
    assert {w["supervisor"] for w in view["assignment"]["containers"].values()} == {"a", "b"}
    assert view["record"]["config"]["bittern.checkpoint.dir"] == store  # the cluster's, recorded
    probes = os.path.join(store, "eo", "_probe")
    assert sorted(os.listdir(probes)) == ["c0", "c1", "nimbus"]
    assert check_probe(os.path.join(probes, "nimbus"), view["record"]["store"]["probe"]) is None
    by = {n: json.load(open(os.path.join(probes, n)))["by"] for n in ("c0", "c1")}
    assert by["c0"].startswith("container 0 on 127.0.0.2") and by["c1"].startswith("container 1 on 127.0.0.3")

    wait_for(lambda: len(committed_rows(out)) >= N, timeout=120, interval=0.25, what=f"{N} committed rows")
    check_exactly_once(committed_rows(out), N, K)
    complete = zk_view(cluster, "eo")["checkpoints"]
    ids = [n for n in os.listdir(os.path.join(store, "eo")) if n.isdigit()]
    assert ids and any(c.isdigit() for c in complete), (ids, complete)
    rows = json.loads(cluster.cli("list", "--json", check=True).stdout)
    assert [(x["name"], x["state"]) for x in rows] == [("eo", "RUNNING")]

    t0 = time.monotonic()
    r = cluster.cli("kill", "eo", check=True)
    took = time.monotonic() - t0
    assert f"topology eo killed; its checkpoints in {store}/eo removed" in r.stdout, r.stdout + r.stderr
    assert not r.stderr.strip(), r.stderr
    print(f"kill (with the checkpoints' removal) took {took:.2f}s")
    wait_for(lambda: not all_pids(cluster), timeout=30, what="every process gone after the kill")
    assert not os.path.exists(os.path.join(store, "eo"))
    assert zk_view(cluster, "eo") == NOTHING
    assert sorted(os.listdir(store)) == []
    check_exactly_once(committed_rows(out), N, K)  # the sink's output is the user's: kept


def _mount_namespace_prefix():
    """``unshare`` options for a process of its own mount namespace, or None if this
    machine does not allow one."""
    for opts in (["--mount", "--propagation", "private"],
                 ["--map-root-user", "--mount", "--propagation", "private"]):
        try:
            r = subprocess.run(["unshare", *opts, "true"], capture_output=True, timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            return None
        if r.returncode == 0:
            return ["unshare", *opts]
    return None


def host_view(store, view, local):
    """A supervisor command prefix: its "host" sees ``store`` read-only, or (``unmounted``)
    sees a local directory ``local`` there instead of the shared one."""
    prefix = _mount_namespace_prefix()
    if prefix is None:
        pytest.skip("needs a mount namespace (unshare -m) to give one supervisor its own view of the store")
    s, loc = shlex.quote(store), shlex.quote(local)
    if view == "readonly":
        script = f'mount --bind {s} {s} && mount -o remount,bind,ro {s} && exec "$@"'
    else:
        script = f'mount --bind {loc} {s} && exec "$@"'
    return [*prefix, "sh", "-c", script, "sh"]


@pytest.mark.slow
@pytest.mark.parametrize("view", ["readonly", "unmounted"])
def test_a_host_that_cannot_write_or_see_the_store_fails_the_submission_in_one_line(cluster, tmp_path, view):
    store, local = str(tmp_path / "shared-ckpt"), str(tmp_path / "b-local-disk")
    os.makedirs(store)
    os.makedirs(local)
    cluster.start_nimbus(args=["--config", f"bittern.checkpoint.dir={store}"])
    cluster.start_supervisor("a")
    cluster.start_supervisor("b", wrap=host_view(store, view, local))  # 127.0.0.3: container 1 lands there
    out = str(tmp_path / "out")
    t0 = time.monotonic()
    r = cluster.cli("submit", SEQ, "--name", "eo", *seq_conf(out), timeout=90)
    took = time.monotonic() - t0
    lines = error_lines(r)
    assert r.returncode != 0 and len(lines) == 1, r.stdout + r.stderr
    print(f"refused after {took:.1f}s: {lines[0]}")
    path = f"{store}/eo/_probe/c1"
    if view == "readonly":
        assert lines[0] == (f"error: container 1 (on 127.0.0.3) cannot write the checkpoint store: {path}: "
                            f"Read-only file system (bittern.checkpoint.dir must be writable on every host)")
    else:
        assert lines[0] == (f"error: the topology master (container 0 on 127.0.0.2) cannot read {path}, which "
                            f"container 1 (on 127.0.0.3) wrote: no such file (bittern.checkpoint.dir must be "
                            f"one directory every host and nimbus share)")
        assert os.listdir(os.path.join(local, "eo", "_probe")) == ["c1"]  # it went to b's own disk
    wait_for(lambda: not all_pids(cluster), timeout=30, what="nothing of the topology left running")
    rows = json.loads(cluster.cli("list", "--json", check=True).stdout)
    assert [(x["name"], x["state"], x["error"]) for x in rows] == [("eo", "FAILED", lines[0][len("error: "):])]
    assert zk_view(cluster, "eo")["assignment"] is None
    assert not glob.glob(os.path.join(out, "sink", "*"))  # no output committed, nor staged
    r = cluster.cli("kill", "eo", check=True)
    assert f"its checkpoints in {store}/eo removed" in r.stdout, r.stdout + r.stderr
    assert zk_view(cluster, "eo") == NOTHING and os.listdir(store) == []
    assert cluster.supervisors["b"].alive(), "the supervisor itself is fine: only its view of the store is not"


# -- quick: nimbus's config and the probe helpers, no cluster --------------------------------

def test_nimbus_cluster_config_takes_the_store_and_refuses_anything_else(tmp_path):
    from nimbus.store import load_cluster_config
    f = tmp_path / "cluster.toml"
    f.write_text('nimbus = "http://n1:6627"\ntoken_file = "t"\n[bittern.checkpoint]\ndir = "/mnt/ckpt/"\n')
    assert load_cluster_config(str(f)) == {"bittern.checkpoint.dir": "/mnt/ckpt"}
    assert load_cluster_config(str(f), ["bittern.checkpoint.dir=/other"]) == {"bittern.checkpoint.dir": "/other"}
    assert load_cluster_config() == {}
    for bad, words in (([], "No such file"), (["bittern.checkpoint.dir=rel"], "must be an absolute path"),
                       (["topology.stmgrs=2"], "unknown key 'topology.stmgrs'")):
        with pytest.raises(ConfigError, match=words):
            load_cluster_config(str(tmp_path / "missing.toml") if not bad else None, bad)


def test_probes_round_trip_and_say_what_is_wrong_in_one_line(tmp_path):
    root = str(tmp_path / "store")
    p = write_probe(root, "t", "c1", by="container 1 on h2")
    assert p["path"] == probe_path(root, "t", "c1") == f"{root}/t/_probe/c1" and not p.get("error")
    assert check_probe(p["path"], p["nonce"]) is None
    assert [n for n in os.listdir(os.path.dirname(p["path"])) if n.startswith(".")] == []  # no temp left
    again = write_probe(root, "t", "c1", by="container 1 on h3")
    assert "another probe (container 1 on h3)" in check_probe(p["path"], p["nonce"])
    assert probe_problem(root, "t", "c1", again, "container 1 (on h3)", "the master") is None
    assert probe_problem(root, "t", "c2", {"nonce": "x"}, "container 2 (on h4)", "the master") == (
        f"the master cannot read {root}/t/_probe/c2, which container 2 (on h4) wrote: no such file "
        f"(bittern.checkpoint.dir must be one directory every host and nimbus share)")
    (tmp_path / "file").write_text("x")
    bad = write_probe(str(tmp_path / "file" / "store"), "t", "c0")
    assert bad["error"].startswith("Not a directory") and "nonce" not in bad
    line = probe_problem(str(tmp_path / "file" / "store"), "t", "c0", bad, "container 0 (on h1)", "m")
    assert line.startswith(f"container 0 (on h1) cannot write the checkpoint store: {bad['path']}: Not a directory")
    assert "\n" not in line

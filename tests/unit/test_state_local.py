"""The local-directory state manager."""
from __future__ import annotations

import json
import os

import pytest

from bittern.state import LocalStateManager, default_home


def all_files(root):
    out = []
    for dirpath, _, files in os.walk(root):
        out.extend(os.path.relpath(os.path.join(dirpath, f), root) for f in files)
    return sorted(out)


@pytest.fixture
def sm(tmp_path):
    return LocalStateManager(str(tmp_path / "home"))


def test_put_get(sm):
    assert sm.get("topologies/wc") is None
    sm.put("topologies/wc", {"name": "wc", "n": [1, 2]})
    assert sm.get("topologies/wc") == {"name": "wc", "n": [1, 2]}
    sm.put("topologies/wc", {"name": "wc", "state": "KILLED"})
    assert sm.get("topologies/wc") == {"name": "wc", "state": "KILLED"}
    path = os.path.join(sm.home, "state", "topologies", "wc.json")
    with open(path) as f:
        assert json.load(f) == {"name": "wc", "state": "KILLED"}
    assert sm.get("/topologies//wc/") == sm.get("topologies/wc")  # slashes are normalised


def test_atomic_write_leaves_no_temp_files(sm):
    for i in range(5):
        sm.put("assignments/wc", {"i": i})
    sm.put("status/wc", {"phase": "RUNNING"})
    assert all_files(sm.root) == ["assignments/wc.json", "status/wc.json"]


def test_failed_write_keeps_the_old_document_and_no_temp_file(sm):
    sm.put("topologies/wc", {"ok": True})
    with pytest.raises(TypeError):
        sm.put("topologies/wc", {"bad": {1, 2}})  # a set is not JSON
    assert sm.get("topologies/wc") == {"ok": True}
    assert all_files(sm.root) == ["topologies/wc.json"]


def test_create_is_exclusive(sm):
    assert sm.create("topologies/wc", {"v": 1}) is True
    assert sm.create("topologies/wc", {"v": 2}) is False
    assert sm.get("topologies/wc") == {"v": 1}
    assert all_files(sm.root) == ["topologies/wc.json"]  # no lock file left
    sm.delete("topologies/wc")
    assert sm.create("topologies/wc", {"v": 3}) is True
    assert sm.get("topologies/wc") == {"v": 3}


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
    open(os.path.join(sm.root, "topologies", ".tmp-stray"), "w").close()
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
    assert sm.processes("wc") == {"procs": {}}
    assert sm.update("status/wc", error="boom") == {"phase": "RUNNING", "error": "boom"}
    assert sm.status("wc") == {"phase": "RUNNING", "error": "boom"}
    for extra in ("checkpoints/wc/3", "checkpoints/wc/epoch", "healthmgr/wc/log", "rebalance/wc"):
        sm.put(extra, {"x": 1})
    sm.remove_topology("wc")
    assert [sm.topology("wc"), sm.assignment("wc"), sm.status("wc"), sm.processes("wc")] == [None] * 4
    assert [sm.children(d) for d in ("checkpoints", "healthmgr", "rebalance")] == [[], [], []]
    assert sm.topologies() == ["other"]


def test_default_home_from_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("BITTERN_HOME", str(tmp_path / "h"))
    assert default_home() == str(tmp_path / "h")
    sm = LocalStateManager()
    assert sm.home == str(tmp_path / "h")
    assert os.path.isdir(os.path.join(str(tmp_path / "h"), "state"))


def test_stale_create_lock_does_not_block_the_name_forever(sm):
    os.makedirs(os.path.join(sm.root, "topologies"))
    open(os.path.join(sm.root, "topologies", "wc.json.lock"), "w").close()  # crashed creator
    sm.delete("topologies/wc")  # what kill / remove_topology does
    assert sm.create("topologies/wc", {"v": 1}) is True

"""The checkpoint store: atomic saves, verified loads, completion metadata, pruning."""
from __future__ import annotations

import os

import pytest

from bittern import config
from bittern.checkpoint import (HEADER_SIZE, CheckpointCorrupt, CheckpointError, CheckpointMissing,
                                CheckpointStore, checkpoint_settings, decode_file, encode_file)
from bittern.errors import ConfigError
from bittern.state import LocalStateManager


@pytest.fixture
def sm(tmp_path):
    return LocalStateManager(str(tmp_path / "home"))


@pytest.fixture
def store(tmp_path, sm):
    return CheckpointStore(str(tmp_path / "ckpt"), sm, "wc", keep=3, clock=lambda: 1000.5)


def visible(store, cid):
    """What a reader sees in a checkpoint directory (names, dot-files included)."""
    try:
        return sorted(os.listdir(store.checkpoint_dir(cid)))
    except FileNotFoundError:
        return []


def test_save_and_load(store, tmp_path):
    path = store.save(1, 3, b"state of task 3")
    assert path == str(tmp_path / "ckpt" / "wc" / "1" / "task-3.bin")
    assert store.load(1, 3) == b"state of task 3"
    with open(path, "rb") as f:
        raw = f.read()
    assert raw[:4] == b"BTCK" and len(raw) == HEADER_SIZE + len(b"state of task 3")
    assert visible(store, 1) == ["task-3.bin"]  # no temp file left behind
    store.save(1, 3, b"saved again")  # before completion a task may save again
    assert store.load(1, 3) == b"saved again"
    store.save(1, "sys_acker", bytearray(b""))
    assert store.load(1, "sys_acker") == b""
    assert store.tasks_saved(1) == [3, "sys_acker"]
    assert store.tasks_saved(99) == []


def test_load_of_a_missing_task_names_it(store):
    store.save(2, 1, b"x")
    with pytest.raises(CheckpointMissing,
                       match=r"checkpoint 2 of 'wc' has no state for task 7 \(no file .*task-7.bin\)"):
        store.load(2, 7)


def test_crash_after_the_temp_file_before_the_rename_is_invisible(store):
    store.save(4, 1, b"old complete state")
    # the writer "crashes" between writing+syncing the temp file and the rename
    tmp = store._write_temp(4, 2, b"half of it")
    assert os.path.exists(tmp) and os.path.basename(tmp).startswith(".tmp-task-2-")
    assert store.tasks_saved(4) == [1]
    with pytest.raises(CheckpointMissing):
        store.load(4, 2)
    with pytest.raises(CheckpointMissing, match=r"no state saved for tasks \[2\]"):
        store.mark_complete(4, [1, 2])
    assert store.latest_complete() is None
    # a crashed write over an existing file leaves the old file whole
    store._write_temp(4, 1, b"new state, never renamed")
    assert store.load(4, 1) == b"old complete state"


def test_a_real_process_killed_at_the_rename_leaves_nothing_visible(store):
    pid = os.fork()
    if pid == 0:  # the writer: dies hard (no cleanup, no finally) where it would rename
        os.replace = lambda *a: os._exit(17)
        try:
            store.save(5, 1, b"x" * 100_000)
        finally:
            os._exit(3)
    _, status = os.waitpid(pid, 0)
    assert os.WEXITSTATUS(status) == 17
    names = visible(store, 5)
    assert len(names) == 1 and names[0].startswith(".tmp-")
    assert store.tasks_saved(5) == []
    with pytest.raises(CheckpointMissing):
        store.load(5, 1)
    # the dead writer's temp file goes when a later checkpoint completes
    store.save(6, 1, b"ok")
    store.mark_complete(6, [1])
    assert not os.path.exists(store.checkpoint_dir(5))


def test_a_failed_rename_removes_the_temp_file(store, monkeypatch):
    def boom(*a):
        raise OSError("disk gone")

    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(OSError, match="disk gone"):
        store.save(1, 1, b"x")
    monkeypatch.undo()
    assert visible(store, 1) == []


@pytest.mark.parametrize("damage,msg", [
    (lambda raw: raw[:-3], r"the header says 100 bytes of state, the file holds 97"),
    (lambda raw: raw[:10], r"10 bytes, shorter than its 17-byte header"),
    (lambda raw: raw[:HEADER_SIZE + 5] + bytes([raw[HEADER_SIZE + 5] ^ 1]) + raw[HEADER_SIZE + 6:],
     r"CRC-32 mismatch"),
    (lambda raw: b"XXXX" + raw[4:], r"does not start with b'BTCK'"),
    (lambda raw: raw + b"extra", r"the header says 100 bytes of state, the file holds 105"),
    (lambda raw: raw[:4] + bytes([9]) + raw[5:], r"format version 9 is not supported"),
])
def test_a_corrupt_file_is_reported_with_its_name(store, damage, msg):
    path = store.save(3, 2, bytes(range(100)))
    with open(path, "rb") as f:
        raw = f.read()
    with open(path, "wb") as f:
        f.write(damage(raw))
    with pytest.raises(CheckpointCorrupt) as ei:
        store.load(3, 2)
    assert path in str(ei.value)
    assert ei.match(msg)


def test_encode_decode_file():
    assert decode_file(encode_file(b"abc")) == b"abc"
    assert decode_file(encode_file(b"")) == b""
    with pytest.raises(CheckpointCorrupt, match="checkpoint file f.bin is corrupt"):
        decode_file(b"BTCK", "f.bin")


def test_mark_complete_writes_metadata_through_the_state_manager(store, sm):
    for t in (1, 2):
        store.save(7, t, b"s%d" % t)
    assert store.latest_complete() is None and store.complete_ids() == []
    doc = store.mark_complete(7, [2, 1, 2])
    assert doc == {"id": 7, "tasks": [1, 2], "completed_at": 1000.5}
    assert sm.get("checkpoints/wc/7") == doc
    assert store.metadata(7) == doc
    assert store.latest_complete() == 7 and store.complete_ids() == [7]
    with pytest.raises(CheckpointError, match="checkpoint 7 of 'wc' is already complete: task 1 cannot save"):
        store.save(7, 1, b"late")
    assert store.load(7, 1) == b"s1"


def test_keep_prunes_old_complete_and_stale_incomplete_checkpoints(store, sm):
    def complete(cid):
        store.save(cid, 0, b"c%d" % cid)
        store.mark_complete(cid, [0])

    for cid in (1, 2, 3):
        complete(cid)
    store.save(4, 0, b"abandoned")   # never completes
    store.save(6, 0, b"in progress")  # newer than what completes next: kept
    complete(5)
    assert store.complete_ids() == [2, 3, 5]
    assert sm.get("checkpoints/wc/1") is None
    assert not os.path.exists(store.checkpoint_dir(1))
    assert not os.path.exists(store.checkpoint_dir(4))
    assert store.load(6, 0) == b"in progress"
    complete(10)
    complete(11)
    assert store.complete_ids() == [5, 10, 11] and store.latest_complete() == 11
    assert sorted(os.listdir(store.dir)) == ["10", "11", "5"]  # ids sort as numbers, not text
    for cid in (5, 10, 11):
        assert store.load(cid, 0) == b"c%d" % cid


def test_keep_one(tmp_path, sm):
    st = CheckpointStore(str(tmp_path / "c"), sm, "t", keep=1)
    for cid in range(1, 5):
        st.save(cid, 0, b"x")
        st.mark_complete(cid, [0])
        assert st.complete_ids() == [cid]
    assert os.listdir(st.dir) == ["4"]


def test_pruning_after_a_crash_between_metadata_and_files(store, sm):
    store.save(1, 0, b"a")
    store.mark_complete(1, [0])
    sm.delete("checkpoints/wc/1")  # as if a prune died after deleting the metadata
    store.save(2, 0, b"b")
    store.mark_complete(2, [0])
    assert not os.path.exists(store.checkpoint_dir(1))


def test_topologies_are_separate_and_delete_all(tmp_path, sm):
    a = CheckpointStore(str(tmp_path / "c"), sm, "a")
    b = CheckpointStore(str(tmp_path / "c"), sm, "b")
    a.save(1, 0, b"a")
    a.mark_complete(1, [0])
    assert b.latest_complete() is None
    b.save(1, 0, b"b")
    assert a.load(1, 0) == b"a"
    a.delete_all()
    assert a.latest_complete() is None and not os.path.exists(a.dir)
    assert b.load(1, 0) == b"b"


def test_bad_arguments(tmp_path, sm):
    for name in ("", "..", "a/b", ".hidden"):
        with pytest.raises(CheckpointError, match="bad topology name"):
            CheckpointStore(str(tmp_path), sm, name)
    with pytest.raises(CheckpointError, match="keep must be a whole number >= 1, got 0"):
        CheckpointStore(str(tmp_path), sm, "t", keep=0)
    st = CheckpointStore(str(tmp_path), sm, "t")
    with pytest.raises(CheckpointError, match="checkpoint id is a whole number >= 0, got -1"):
        st.save(-1, 0, b"")
    with pytest.raises(CheckpointError, match="a task is a task id"):
        st.save(1, "../x", b"")
    with pytest.raises(CheckpointError, match="state must be bytes, got str"):
        st.save(1, 0, "text")


def test_config_keys_and_settings(tmp_path):
    d = config.defaults()
    assert d["topology.stateful.checkpoint.interval.seconds"] == 5
    assert d["bittern.checkpoint.dir"] == ""
    assert d["bittern.checkpoint.keep"] == 3
    assert d["bittern.state.key.groups"] == 128
    assert d["bittern.barrier.buffer.max.tuples"] == 100000
    out, warnings = config.check({"topology.stateful.checkpoint.interval.seconds": 0.5,
                                  "bittern.checkpoint.dir": "/shared/ckpt", "bittern.checkpoint.keep": 2,
                                  "bittern.state.key.groups": 256, "bittern.barrier.buffer.max.tuples": 10})
    assert warnings == []
    s = checkpoint_settings(config.merge(out))
    assert (s.interval_secs, s.dir, s.keep, s.key_groups, s.barrier_buffer_max_tuples) == (
        0.5, "/shared/ckpt", 2, 256, 10)
    assert checkpoint_settings(config.merge(), home=str(tmp_path)).dir == str(tmp_path / "checkpoints")
    with pytest.raises(ConfigError, match="bittern.checkpoint.keep must be a whole number >= 1, got 0"):
        checkpoint_settings(config.merge({"bittern.checkpoint.keep": 0}))
    with pytest.raises(ConfigError, match="interval.seconds must be > 0"):
        checkpoint_settings(config.merge({"topology.stateful.checkpoint.interval.seconds": 0}))

"""FileSpout with real files: order, sharding, offsets saved in State and restored."""
from __future__ import annotations

import os

import pytest

from bittern.api.state import State
from bittern.spouts import FileSpout, FileSpoutError, PositionedFileSpout, resolve_files, shard


class Ctx:
    """The parts of a TopologyContext the spout uses."""

    def __init__(self, index=0, par=1, component="lines"):
        self.component = component
        self.task_index = index
        self.task_id = 10 + index
        self._tasks = [10 + i for i in range(par)]

    def get_component_tasks(self, component):
        return list(self._tasks)


class Run:
    """A spout driven the way an instance drives it: emit and done() bound."""

    def __init__(self, files, index=0, par=1, cls=FileSpout, state=None, **conf):
        self.out, self.done = [], 0
        self.spout = cls()
        self.spout.emit = lambda values, **kw: self.out.append(values)
        self.spout._runtime_done = self._done
        conf = dict(conf, **{"spout.files": files})
        self.spout.initialize(conf, Ctx(index, par))
        if state is not None:
            self.spout.init_state(state)

    def _done(self):
        self.done += 1

    def step(self, calls=1):
        for _ in range(calls):
            self.spout.next_tuple()
        return self.out

    def drain(self, limit=100000):
        for _ in range(limit):
            if self.done:
                break
            self.spout.next_tuple()
        assert self.done, "the spout never said done()"
        return self.out


def write(path, lines, end="\n", last_newline=True):
    with open(path, "w", newline="") as f:
        f.write(end.join(lines) + (end if last_newline and lines else ""))
    return str(path)


@pytest.fixture
def corpus(tmp_path):
    """Five files b..f (and a.txt with unicode, an empty file): 10 lines each."""
    d = tmp_path / "in"
    d.mkdir()
    for name in "bcdef":
        write(d / f"{name}.txt", [f"{name}{i}" for i in range(10)])
    return d


def lines_of(out):
    return [v[0] for v in out]


def test_files_in_sorted_glob_order_each_from_start_to_end(corpus):
    r = Run(str(corpus / "*.txt"))
    assert lines_of(r.drain()) == [f"{n}{i}" for n in "bcdef" for i in range(10)]
    assert r.done == 1
    r.step(5)  # after done(), nothing more (and done() is not repeated)
    assert len(r.out) == 50 and r.done == 1


def test_order_is_deterministic_and_entries_keep_their_order(corpus, tmp_path):
    other = write(tmp_path / "z.txt", ["z0"])
    files = resolve_files(f"{other}, {corpus}/[ec].txt, {corpus}/*.txt")
    assert [os.path.basename(f) for f in files] == ["z.txt", "c.txt", "e.txt", "b.txt", "d.txt", "f.txt"]
    assert resolve_files([other, str(corpus / "c.txt"), str(corpus / "c.txt")]) == [other, str(corpus / "c.txt")]
    with pytest.raises(FileSpoutError, match="names no file"):
        resolve_files(str(tmp_path / "nothing-*.txt"))
    with pytest.raises(FileSpoutError, match="is not a file"):
        resolve_files(str(tmp_path / "missing.txt"))
    with pytest.raises(FileSpoutError, match="needs spout.files"):
        resolve_files(None)


def test_line_endings_unicode_empty_files_and_a_last_line_without_newline(tmp_path):
    a = write(tmp_path / "a.txt", ["héllo", "", "wörld"], end="\r\n", last_newline=False)
    b = write(tmp_path / "b.txt", [])
    c = tmp_path / "c.txt"
    c.write_bytes(b"ok\n\xff\xfe bad\n")
    r = Run([a, b, str(c)], cls=PositionedFileSpout)
    assert r.drain() == [[a, 1, "héllo"], [a, 2, ""], [a, 3, "wörld"], [str(c), 1, "ok"],
                         [str(c), 2, "\ufffd\ufffd bad"]]


def test_sharding_task_i_reads_files_i_mod_p(corpus):
    files = resolve_files(str(corpus / "*.txt"))
    assert shard(files, 1, 2) == files[1::2]
    seen = []
    for i in range(3):
        r = Run(str(corpus / "*.txt"), index=i, par=3)
        got = lines_of(r.drain())
        assert got == [f"{os.path.basename(f)[0]}{k}" for f in files[i::3] for k in range(10)]
        seen += got
    assert sorted(seen) == sorted(f"{n}{i}" for n in "bcdef" for i in range(10))
    # more tasks than files: the extra task has nothing and is done at once
    r = Run(str(corpus / "b.txt"), index=1, par=2)
    assert r.drain() == [] and r.done == 1


def test_batch_emits_several_lines_per_call(corpus):
    r = Run(str(corpus / "b.txt"), **{"spout.files.batch": 4})
    assert lines_of(r.step(1)) == ["b0", "b1", "b2", "b3"]
    assert lines_of(r.step(2)) == [f"b{i}" for i in range(10)] and r.done == 1


def checkpoint(spout, cid=1):
    """What the runtime does on CKPT_START: pre_save, then snapshot the state."""
    spout.pre_save(cid)
    return spout.state.snapshot()


def test_offset_saved_mid_file_and_a_restored_spout_emits_exactly_the_lines_after_it(corpus):
    glob_ = str(corpus / "*.txt")
    first = Run(glob_, state=State())
    first.step(13)  # all of b.txt, 3 lines of c.txt
    snap = checkpoint(first.spout)
    saved = State.restore(snap).get("offset")
    assert saved["index"] == 1 and saved["lineno"] == 3 and saved["path"].endswith("c.txt")
    assert saved["pos"] == len(b"c0\nc1\nc2\n")
    before = lines_of(first.out)
    after_first = lines_of(first.drain())[13:]  # what the first spout goes on to emit

    # a new process (restart) restored from the checkpoint
    second = Run(glob_, state=State.restore(snap))
    rest = lines_of(second.drain())
    assert rest == after_first == [f"c{i}" for i in range(3, 10)] + [f"{n}{i}" for n in "def" for i in range(10)]
    assert before + rest == [f"{n}{i}" for n in "bcdef" for i in range(10)]  # nothing lost, nothing twice


def test_global_rollback_rewinds_a_live_spout(corpus):
    """RESTORE at a live instance calls init_state again with the checkpoint's state."""
    r = Run(str(corpus / "*.txt"), state=State(), cls=PositionedFileSpout)
    r.step(25)
    snap = checkpoint(r.spout, 1)
    r.step(17)  # emitted after checkpoint 1: lost in the rollback, must come again
    lost = r.out[25:]
    r.spout.init_state(State.restore(snap))
    assert r.spout.offset == (2, len(b"d0\nd1\nd2\nd3\nd4\n"), 5)
    r.out.clear()
    r.step(17)
    assert r.out == lost
    # a rollback after the spout was done rewinds it too
    r.drain()
    snap2 = checkpoint(r.spout, 2)
    r.spout.init_state(State.restore(snap))
    r.out.clear()
    r.done = 0
    assert [v[2] for v in r.drain()] == [f"d{i}" for i in range(5, 10)] + [f"{n}{i}" for n in "ef" for i in range(10)]
    # a checkpoint taken at the end restores to the end: nothing more, done at once
    r.spout.init_state(State.restore(snap2))
    r.out.clear()
    r.done = 0
    assert r.drain() == [] and r.spout.offset_doc() == {"index": 5, "path": None, "pos": 0, "lineno": 0}


def test_offset_at_a_file_boundary_and_with_several_tasks(corpus):
    glob_ = str(corpus / "*.txt")
    for index in range(2):
        a = Run(glob_, index=index, par=2, state=State())
        a.step(10)  # exactly the first file of the shard
        snap = checkpoint(a.spout)
        b = Run(glob_, index=index, par=2, state=State.restore(snap))
        assert lines_of(b.drain()) == lines_of(a.drain())[10:]


def test_init_state_before_initialize_is_honoured(corpus):
    glob_ = str(corpus / "*.txt")
    a = Run(glob_, state=State())
    a.step(4)
    snap = checkpoint(a.spout)
    s = FileSpout()
    out = []
    s.emit = lambda values, **kw: out.append(values)
    s._runtime_done = lambda: None
    s.init_state(State.restore(snap))  # Heron calls initState before open
    s.initialize({"spout.files": glob_}, Ctx())
    s.next_tuple()
    assert out == [["b4"]]


def test_restore_finds_the_saved_file_when_the_list_changed_and_refuses_a_missing_one(corpus, tmp_path):
    glob_ = str(corpus / "*.txt")
    a = Run(glob_, state=State())
    a.step(23)  # 3 lines into d.txt
    snap = checkpoint(a.spout)
    write(corpus / "a.txt", ["a0"])  # a new file sorts first: indices shift by one
    b = Run(glob_, state=State.restore(snap))
    assert lines_of(b.drain())[:2] == ["d3", "d4"]
    os.unlink(corpus / "d.txt")
    with pytest.raises(FileSpoutError, match="no longer among this task's files"):
        Run(glob_, state=State.restore(snap))


def test_without_exactly_once_it_reads_from_the_start_and_pre_save_is_harmless(corpus):
    r = Run(str(corpus / "b.txt"))  # no init_state: at most once
    r.spout.pre_save(1)
    assert lines_of(r.drain()) == [f"b{i}" for i in range(10)]


def test_bad_config(corpus):
    with pytest.raises(FileSpoutError, match="spout.files.batch"):
        Run(str(corpus / "b.txt"), **{"spout.files.batch": 0})
    with pytest.raises(FileSpoutError, match="must be a string or a list"):
        Run(42)


def test_done_after_checkpoints_waits_for_checkpoints_past_the_end(corpus):
    eo = {"spout.files.done.after.checkpoints": 2, "topology.reliability.mode": "EFFECTIVELY_ONCE"}
    r = Run(str(corpus / "b.txt"), state=State(), **eo)
    r.step(12)
    assert len(r.out) == 10 and r.done == 0  # at the end, but the end is not checkpointed yet
    r.spout.pre_save(1)
    r.step(3)
    assert r.done == 0
    r.spout.pre_save(2)
    assert r.done == 1
    r.spout.pre_save(3)
    r.step(2)
    assert r.done == 1 and len(r.out) == 10
    # in the other modes no pre_save ever comes (init_state still does, with a State never
    # saved): done at the end
    for mode in ("ATMOST_ONCE", "ATLEAST_ONCE"):
        plain = Run(str(corpus / "b.txt"), state=State(),
                    **dict(eo, **{"topology.reliability.mode": mode}))
        assert len(plain.drain()) == 10

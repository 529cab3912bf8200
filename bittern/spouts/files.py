"""``FileSpout``: the lines of a set of files, replayable from a saved offset.

The files
=========
``spout.files`` (component or topology config) names them: a glob
(``"data/*.txt"``), several globs separated by commas, or a list of globs/paths
(JSON on the command line: ``--config 'spout.files=["a.txt","b/*.txt"]'``). Each
entry is expanded and sorted, entries keep the order given, and a file named
twice is read once: the order is deterministic, the same in every process and
after every restart. Relative names are resolved against the working directory
of the instance (``bittern run``'s directory); an absolute path is safer. A glob
that matches nothing is not an error, but a plain path that is not a file is, and
so is a configuration that names no file at all (``FileSpoutError``).

With parallelism *P*, task *i* (its ``context.task_index``) reads ``files[i::P]``,
one file after the other, each from its start to its end. The files are read as
they are when the spout reaches them (this is not a ``tail -f``); a last line
without a newline is still a line.

What it emits
=============
``FileSpout`` emits ``[line]`` (field ``line``): the line's text decoded as
UTF-8 (undecodable bytes replaced, see ``spout.files.encoding.errors``), without
its line ending (``\\n`` or ``\\r\\n``). ``PositionedFileSpout`` emits ``[file,
lineno, line]``: the path as expanded, the 1-based line number in that file, and
the line. Up to ``spout.files.batch`` lines (default 1) are emitted per
``next_tuple`` call. Tuples carry no ``tup_id``: they are not tracked by the
acker (there is no replay in ``ATLEAST_ONCE`` mode; at most once, as with any
spout that emits without ids). When every file of the task has been read the
spout calls ``self.done()`` (so ``bittern run --until-done`` stops).

Under exactly once the last lines are only visible at a transactional sink once a
checkpoint taken after them is complete and committed; the runtime sees to that for
every spout (a task that called ``done()`` counts as done for ``bittern run
--until-done`` once the first checkpoint it took after that is committed at every
sink). ``spout.files.done.after.checkpoints = k`` (default 0; deprecated, no longer
needed) still makes the spout wait, after its last line, for *k* more checkpoints
(``pre_save`` calls) before it calls ``done()``. A rollback rewinds the spout and it
says ``done()`` again when it reaches the end.

The offset, exactly once
========================
The offset is (file index in the task's list, byte position, line number): the
next line to emit starts at that byte of that file. Under
``topology.reliability.mode = EFFECTIVELY_ONCE`` the spout is stateful
(``init_state`` / ``pre_save``, see ``bittern.api.state``): ``pre_save(n)`` puts
the offset into its ``State`` under the plain key ``"offset"`` (a dict: ``index``,
``path``, ``pos``, ``lineno``), and ``init_state(state)`` reads it back, so after
a restore (a restart or a global rollback) the spout rewinds to the offset of
the restored checkpoint and emits again exactly the lines after it. The saved
path is checked against the file list: if the list changed (files added before
the current one), the spout finds the saved file by name; if that file is no
longer listed it raises ``FileSpoutError`` rather than emit the wrong lines.
In the other modes the runtime gives ``init_state`` an empty ``State`` that is
never saved, so the spout simply reads from the start (at most once).
"""
from __future__ import annotations

import glob
import os

from ..api.component import Spout
from ..errors import BitternError

__all__ = ["FileSpout", "FileSpoutError", "PositionedFileSpout", "resolve_files", "shard"]

OFFSET_KEY = "offset"


class FileSpoutError(BitternError):
    """A file spout without files, or with an offset that does not match its files."""


def resolve_files(spec):
    """The ordered list of files ``spec`` names (see the module docstring)."""
    if spec is None:
        raise FileSpoutError("FileSpout needs spout.files: a glob, globs separated by commas, or a list")
    if isinstance(spec, (str, os.PathLike)):
        entries = [e.strip() for e in os.fspath(spec).split(",")]
    elif isinstance(spec, (list, tuple)):
        entries = [os.fspath(e).strip() for e in spec]
    else:
        raise FileSpoutError(f"spout.files must be a string or a list of strings, got {spec!r}")
    out, seen = [], set()
    for entry in entries:
        if not entry:
            continue
        entry = os.path.expanduser(entry)
        if glob.has_magic(entry):
            matches = sorted(p for p in glob.glob(entry) if os.path.isfile(p))
        elif os.path.isfile(entry):
            matches = [entry]
        else:
            raise FileSpoutError(f"spout.files: {entry!r} is not a file")
        for p in matches:
            key = os.path.abspath(p)
            if key not in seen:
                seen.add(key)
                out.append(p)
    if not out:
        raise FileSpoutError(f"spout.files={spec!r} names no file")
    return out


def shard(files, index, parallelism):
    """The files task ``index`` of ``parallelism`` reads: ``files[index::parallelism]``."""
    if not 0 <= index < parallelism:
        raise FileSpoutError(f"task index {index} is out of range for parallelism {parallelism}")
    return list(files[index::parallelism])


class FileSpout(Spout):
    """Emits ``[line]`` for each line of its share of ``spout.files``; see the module docstring."""

    outputs = ["line"]

    #: the offset a fresh task starts from: (file index, byte position, line number)
    _START = (0, 0, 0)

    # -- lifecycle ------------------------------------------------------------------------
    def initialize(self, config, context):
        config = config or {}
        self.batch = int(config.get("spout.files.batch", 1))
        if self.batch < 1:
            raise FileSpoutError(f"spout.files.batch must be >= 1, got {self.batch!r}")
        self.encoding_errors = str(config.get("spout.files.encoding.errors", "replace"))
        self.done_after_checkpoints = int(config.get("spout.files.done.after.checkpoints", 0))
        # other modes call init_state too (with a State never saved): no pre_save will come
        self.checkpointed = config.get("topology.reliability.mode") == "EFFECTIVELY_ONCE"
        index, par = self._task_position(context)
        self.all_files = resolve_files(config.get("spout.files"))
        self.files = shard(self.all_files, index, par)
        self._f = None
        self._exhausted = self._said_done = False
        self._saves_since_end = 0
        self._restored = getattr(self, "_restored", None)
        if not hasattr(self, "_offset"):
            self._offset = self._START
        self._check_restored()

    @staticmethod
    def _task_position(context):
        if context is None:
            return 0, 1
        tasks = context.get_component_tasks(context.component) or [context.task_id]
        return context.task_index, len(tasks)

    def init_state(self, state):
        """Called by the runtime under EFFECTIVELY_ONCE, at start-up and after every
        restore: rewind to the offset ``state`` holds (the start if it holds none)."""
        self.state = state
        saved = state.get(OFFSET_KEY)
        self._close_file()
        self._exhausted = self._said_done = False
        self._saves_since_end = 0
        if saved is None:
            self._offset = self._START
            self._restored = None
        else:
            self._offset = (int(saved["index"]), int(saved["pos"]), int(saved["lineno"]))
            self._restored = saved
        if hasattr(self, "files"):  # init_state may also come before initialize
            self._check_restored()

    def pre_save(self, checkpoint_id):
        """Put the offset of the next line to emit into the state (checkpoint ``checkpoint_id``)."""
        state = getattr(self, "state", None)
        if state is not None:
            state.put(OFFSET_KEY, self.offset_doc())
        if self._exhausted:
            self._saves_since_end += 1
            self._maybe_done()

    def close(self):
        self._close_file()

    # -- the offset -----------------------------------------------------------------------
    @property
    def offset(self):
        """(file index, byte position, line number) of the next line to emit."""
        if self._f is not None:
            return (self._offset[0], self._pos, self._lineno)
        return self._offset

    def offset_doc(self):
        index, pos, lineno = self.offset
        path = self.files[index] if index < len(self.files) else None
        return {"index": index, "path": path, "pos": pos, "lineno": lineno}

    def _check_restored(self):
        saved, self._restored = self._restored, None
        if saved is None:
            return
        index, pos, lineno = self._offset
        path = saved.get("path")
        if path is None:  # saved at the end of the task's files
            if index < len(self.files):
                raise FileSpoutError(f"{type(self).__name__}: the restored offset says every file was read "
                                     f"({index} files), but the task now has {len(self.files)} files")
            return
        if index < len(self.files) and self.files[index] == path:
            return
        if path in self.files:
            new = self.files.index(path)
            self.logger.warning("the file list changed: %s, file %d at the checkpoint, is now file %d",
                                path, index, new)
            self._offset = (new, pos, lineno)
            return
        raise FileSpoutError(f"{type(self).__name__}: the restored offset is in {path} (byte {pos}), which "
                             f"is no longer among this task's files {self.files}")

    # -- reading --------------------------------------------------------------------------
    def _close_file(self):
        f = getattr(self, "_f", None)
        if f is not None:
            self._offset = (self._offset[0], self._pos, self._lineno)
            f.close()
            self._f = None

    def _open_current(self):
        """Open the file at the offset; False when every file has been read."""
        index, pos, lineno = self._offset
        if index < len(self.files):
            f = open(self.files[index], "rb")
            if pos:
                f.seek(pos)
            self._f, self._pos, self._lineno = f, pos, lineno
            self._offset = (index, pos, lineno)
            return True
        return False

    def read_line(self):
        """The next ``(path, lineno, text)`` and advance the offset; None at the end of
        the task's files."""
        while True:
            if self._f is None and not self._open_current():
                return None
            raw = self._f.readline()
            if raw:
                self._pos += len(raw)
                self._lineno += 1
                if raw.endswith(b"\n"):
                    raw = raw[:-2] if raw.endswith(b"\r\n") else raw[:-1]
                return (self.files[self._offset[0]], self._lineno,
                        raw.decode("utf-8", self.encoding_errors))
            self._f.close()
            self._f = None
            self._offset = (self._offset[0] + 1, 0, 0)

    def values(self, path, lineno, line):
        return [line]

    def next_tuple(self):
        if self._exhausted:
            return
        emit, values = self.emit, self.values
        for _ in range(self.batch):
            item = self.read_line()
            if item is None:
                self._exhausted = True
                self._saves_since_end = 0
                self._maybe_done()
                return
            emit(values(*item))

    def _maybe_done(self):
        if self._said_done or not self._exhausted:
            return
        if not self.checkpointed or self._saves_since_end >= self.done_after_checkpoints:
            self._said_done = True
            self.done()


class PositionedFileSpout(FileSpout):
    """A ``FileSpout`` that emits ``[file, lineno, line]`` (1-based line numbers)."""

    outputs = ["file", "lineno", "line"]

    def values(self, path, lineno, line):
        return [path, lineno, line]

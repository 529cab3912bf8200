"""A transactional file sink: one JSON-lines file per committed checkpoint and task.

For checkpoint *n* and task *t* in ``directory`` (the prefix is part of every name,
so several sinks can share a directory)::

    .staging-<prefix>-<n>-<t>.tmp   written by write(); lost or aborted in a crash
    .pending-<prefix>-<n>-<t>       pre_commit: fsync'd, renamed, directory fsync'd
    <prefix>-<n>-<t>.jsonl          commit: renamed (atomic), directory fsync'd

Readers see only ``<prefix>-*.jsonl`` files, each complete: one line per tuple,
the tuple's values as a JSON array (override ``encode`` for another line format).
A checkpoint in which the task wrote nothing produces no file. Every step is a
single rename or unlink, so a crash leaves each checkpoint in exactly one of the
three states, and ``recover`` finishes or undoes it.
"""
from __future__ import annotations

import json
import os
import re

from .base import Inventory, SinkError, TransactionalSink, task_of


def fsync_dir(path):
    """Make renames and unlinks in ``path`` durable (no-op where unsupported)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


class FileSink(TransactionalSink):
    def __init__(self, directory, prefix="part", task=None):
        super().__init__()
        if not prefix or "/" in prefix or os.sep in prefix or prefix.startswith("."):
            raise SinkError(f"FileSink prefix must be a plain file-name part, got {prefix!r}")
        self.directory = os.fspath(directory)
        self.prefix = prefix
        self.task = task
        self._files = {}  # n -> open staging file

    def __repr__(self):
        return f"<FileSink {self.directory}/{self.prefix} task {self.task}>"

    # -- names --------------------------------------------------------------------------
    def _path(self, name):
        return os.path.join(self.directory, name)

    def staging_path(self, n):
        return self._path(f".staging-{self.prefix}-{n}-{self.task}.tmp")

    def pending_path(self, n):
        return self._path(f".pending-{self.prefix}-{n}-{self.task}")

    def final_path(self, n):
        return self._path(f"{self.prefix}-{n}-{self.task}.jsonl")

    def encode(self, values):
        """One output line (without the newline) for a tuple's values."""
        return json.dumps(list(values), ensure_ascii=False, separators=(",", ":"))

    # -- primitives ---------------------------------------------------------------------
    def _open(self, context, config):
        self.task = task_of(context, self.task)
        os.makedirs(self.directory, exist_ok=True)
        p, t = re.escape(self.prefix), re.escape(str(self.task))
        self._patterns = (
            ("staged", re.compile(rf"^\.staging-{p}-(\d+)-{t}\.tmp$")),
            ("precommitted", re.compile(rf"^\.pending-{p}-(\d+)-{t}$")),
            ("committed", re.compile(rf"^{p}-(\d+)-{t}\.jsonl$")),
        )

    def _write(self, n, values):
        f = self._files.get(n)
        if f is None:
            # "w": a file left under this name by an earlier incarnation was aborted by recover
            f = self._files[n] = open(self.staging_path(n), "w", encoding="utf-8")
        f.write(self.encode(values))
        f.write("\n")

    def _pre_commit(self, n):
        f = self._files.pop(n, None)
        if f is None:
            return os.path.exists(self.pending_path(n))
        f.flush()
        os.fsync(f.fileno())
        f.close()
        os.replace(self.staging_path(n), self.pending_path(n))
        fsync_dir(self.directory)
        return True

    def _commit(self, n):
        pending, final = self.pending_path(n), self.final_path(n)
        if not os.path.exists(pending):
            return  # already committed, or nothing was written in n
        if os.path.exists(final):
            raise SinkError(f"{self!r}: checkpoint {n} is pending but {final} already exists")
        os.replace(pending, final)
        fsync_dir(self.directory)

    def _abort(self, n):
        f = self._files.pop(n, None)
        if f is not None:
            f.close()
        removed = False
        for path in (self.staging_path(n), self.pending_path(n)):
            try:
                os.unlink(path)
                removed = True
            except FileNotFoundError:
                pass
        if removed:
            fsync_dir(self.directory)

    def _scan(self):
        inv = Inventory()
        for name in os.listdir(self.directory):
            for state, pattern in self._patterns:
                m = pattern.match(name)
                if m:
                    getattr(inv, state).add(int(m.group(1)))
                    break
        return inv

    def _discard_volatile(self):
        for f in self._files.values():
            f.close()
        self._files.clear()

    def _close(self):
        self._discard_volatile()

    # -- reading ------------------------------------------------------------------------
    def committed_files(self):
        """This task's visible files, in checkpoint order."""
        inv = self._scan()
        return [self.final_path(n) for n in sorted(inv.committed)]

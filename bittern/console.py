"""The topology's console: what user code prints, gathered in one file.

In an instance, ``sys.stdout`` is replaced by a writer that copies each printed
line, prefixed with the component and task, to ``logs/NAME/console.log`` as well
as to the instance's own log. ``bittern run`` follows that file, so ``print()``
in a spout or bolt shows up in the terminal as it does in Storm's local mode.
"""
from __future__ import annotations

import io
import os


def console_path(home, topology):
    return os.path.join(home, "logs", topology, "console.log")


class ConsoleWriter(io.TextIOBase):
    def __init__(self, path, prefix, also):
        self._f = open(os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600), "a", buffering=1)
        self._prefix = prefix
        self._also = also
        self._partial = ""

    def writable(self):
        return True

    def write(self, s):
        self._also.write(s)
        text = self._partial + s
        lines = text.split("\n")
        self._partial = lines.pop()
        if lines:
            self._f.write("".join(f"{self._prefix}{ln}\n" for ln in lines))
        return len(s)

    def flush(self):
        self._also.flush()
        self._f.flush()


class ConsoleFollower:
    """Reads what was appended to the console file since the last call."""

    def __init__(self, path):
        self.path = path
        self.pos = 0

    def read_new(self):
        try:
            with open(self.path) as f:
                f.seek(self.pos)
                data = f.read()
                self.pos = f.tell()
                return data
        except FileNotFoundError:
            return ""

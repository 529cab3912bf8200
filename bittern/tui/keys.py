"""Keys from a real terminal, for ``bittern top``: stdin in cbreak mode (no echo, no
line buffering; Ctrl-C still interrupts), read without blocking through select()."""
from __future__ import annotations

import os
import select
import termios
import time
import tty

ARROWS = {"A": "up", "B": "down", "C": "right", "D": "left", "H": "home", "F": "end"}


def parse_keys(data):
    """Names of the keys in a chunk read from a terminal: printable characters as
    themselves, and 'up', 'down', 'left', 'right', 'enter', 'esc', 'backspace'."""
    keys = []
    i = 0
    while i < len(data):
        ch = data[i]
        if ch == "\x1b":
            if data[i + 1:i + 2] in ("[", "O") and i + 2 < len(data):
                j = i + 2  # a CSI/SS3 sequence runs to its final byte (0x40-0x7e)
                while j < len(data) and not 0x40 <= ord(data[j]) <= 0x7e:
                    j += 1
                final = data[j] if j < len(data) else ""
                if j == i + 2 and final in ARROWS:
                    keys.append(ARROWS[final])
                i = j + 1
                continue
            keys.append("esc")
        elif ch in "\r\n":
            keys.append("enter")
        elif ch in "\x7f\x08":
            keys.append("backspace")
        elif ch.isprintable():
            keys.append(ch)
        i += 1
    return keys


class KeyReader:
    """``with KeyReader(sys.stdin) as keys: keys.read(timeout)`` -> list of key names."""

    def __init__(self, stream):
        self.fd = stream.fileno()
        self.saved = None
        self.eof = False

    def __enter__(self):
        self.saved = termios.tcgetattr(self.fd)
        tty.setcbreak(self.fd)
        return self

    def __exit__(self, *exc):
        if self.saved is not None:
            try:
                termios.tcsetattr(self.fd, termios.TCSADRAIN, self.saved)
            except termios.error:
                pass  # the terminal is gone: nothing to restore
            self.saved = None

    def read(self, timeout):
        """Keys typed within ``timeout`` seconds (returns as soon as there are some)."""
        if self.eof:
            time.sleep(max(0.0, timeout))
            return []
        ready, _, _ = select.select([self.fd], [], [], max(0.0, timeout))
        if not ready:
            return []
        try:
            data = os.read(self.fd, 1024)
        except OSError:
            data = b""
        if not data:  # the terminal went away
            self.eof = True
            return ["eof"]
        return parse_keys(data.decode("utf-8", "replace"))


class NoKeys:
    """Stands in for KeyReader when stdin is not a terminal: just waits."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        pass

    def read(self, timeout):
        time.sleep(max(0.0, timeout))
        return []

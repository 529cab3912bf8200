"""Starting and stopping OS processes: every daemon and instance goes through here.

Children die with their parent: Linux's ``PR_SET_PDEATHSIG`` delivers SIGKILL to
a child when the process that started it dies (even by kill -9), and each
long-running child also watches ``getppid()`` as a second line of defence.
"""
from __future__ import annotations

import ctypes
import errno
import os
import signal
import subprocess
import sys
import time

_PR_SET_PDEATHSIG = 1

# A container process (stream manager, topology master) exits with this when it learns
# that a newer copy of its container runs elsewhere (fencing by assignment version,
# docs/CLUSTER.md): its supervisor must not restart it, only re-read the assignment.
EXIT_FENCED = 86


def _set_pdeathsig():
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except OSError:
        pass  # not Linux: the getppid() watch still applies


def module_cmd(module, *args):
    """``python -m module args`` with this interpreter."""
    return [sys.executable, "-m", module, *map(str, args)]


def spawn(cmd, log_path=None, env=None, die_with_parent=True, new_session=False, cwd=None):
    """Start ``cmd`` with stdout/stderr appended to ``log_path`` (or discarded)."""
    if log_path:
        # logs echo tuples and errors: this user's alone (0700 directories, 0600 files)
        os.makedirs(os.path.dirname(log_path), mode=0o700, exist_ok=True)
        out = open(os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600), "ab", buffering=0)
    else:
        out = subprocess.DEVNULL
    full_env = dict(os.environ)
    full_env.update(env or {})
    full_env.setdefault("PYTHONUNBUFFERED", "1")
    try:
        return subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                env=full_env, cwd=cwd, close_fds=True, start_new_session=new_session,
                                preexec_fn=_set_pdeathsig if die_with_parent else None)
    finally:
        if log_path:
            out.close()


def pid_alive(pid):
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except OSError as e:
        return e.errno == errno.EPERM
    # a zombie child still answers kill(0): look at its state
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def signal_pids(pids, sig):
    for pid in pids:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass


def wait_gone(pids, timeout):
    """Wait until none of ``pids`` is alive; returns the ones still alive."""
    deadline = time.monotonic() + timeout
    alive = [p for p in pids if pid_alive(p)]
    while alive and time.monotonic() < deadline:
        time.sleep(0.05)
        alive = [p for p in alive if pid_alive(p)]
    return alive


def stop_pids(pids, timeout=5.0):
    """SIGTERM, wait up to ``timeout``, then SIGKILL whatever is left."""
    pids = [p for p in pids if p and pid_alive(p)]
    signal_pids(pids, signal.SIGTERM)
    left = wait_gone(pids, timeout)
    if left:
        signal_pids(left, signal.SIGKILL)
        wait_gone(left, 2.0)
    return left


class ParentWatch:
    """Detects that the process that started us is gone (reparented)."""

    def __init__(self):
        self.ppid = os.getppid()

    def orphaned(self):
        return os.getppid() != self.ppid


class SignalWaker:
    """Turns SIGTERM/SIGINT into a flag *and* a readable fd, so an event loop blocked
    in ``zmq.Poller.poll`` wakes up at once instead of at its next timeout."""

    def __init__(self, on_signal=None):
        import socket
        self.stopping = False
        self._cb = on_signal
        self._r, self._w = socket.socketpair()
        self._r.setblocking(False)
        self._w.setblocking(False)
        signal.set_wakeup_fd(self._w.fileno(), warn_on_full_buffer=False)
        signal.signal(signal.SIGTERM, self._handle)
        signal.signal(signal.SIGINT, self._handle)

    @property
    def fd(self):
        return self._r.fileno()

    def _handle(self, signum, frame):
        self.stopping = True
        if self._cb:
            self._cb(signum)

    def clear(self):
        try:
            while self._r.recv(64):
                pass
        except (BlockingIOError, OSError):
            pass

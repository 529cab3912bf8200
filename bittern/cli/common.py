"""What the CLI verbs share: the state manager, finding a topology, talking to it."""
from __future__ import annotations

import re

from ..client import TMClient
from ..errors import BitternError
from ..proc import pid_alive
from ..state import LocalStateManager, default_home

NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")  # matched in full (fullmatch: no trailing newline)


def check_name(name):
    if not NAME_RE.fullmatch(name or ""):
        raise BitternError(f"topology name {name!r} must be 1-64 letters, digits, '_', '.', '-' "
                           "(starting with a letter or digit)")
    return name


def state_manager(args):
    home = getattr(args, "home", None) or default_home()
    return LocalStateManager(home)


def supervisor_pid(state, name):
    asg = state.assignment(name) or {}
    procs = state.processes(name) or {}
    return asg.get("supervisor") or procs.get("supervisor")


def liveness(state, name):
    """``(record, phase)``; phase is the topology master's, or DEAD when nothing runs it."""
    rec = state.topology(name)
    if rec is None:
        return None, None
    pid = supervisor_pid(state, name)
    if pid and not pid_alive(pid):
        return rec, "DEAD"
    status = state.status(name) or {}
    return rec, status.get("phase", "STARTING")


def require_running(state, name):
    rec, phase = liveness(state, name)
    if rec is None:
        raise BitternError(f"no topology named {name!r} is running (see `bittern list`)")
    if phase == "DEAD":
        raise BitternError(f"topology {name!r} is not running any more (its supervisor died); "
                           f"`bittern kill {name}` cleans it up")
    status = state.status(name) or {}
    if not status.get("tmaster"):
        raise BitternError(f"topology {name!r} is still starting")
    return rec, status


def tm_client(state, name):
    _, status = require_running(state, name)
    return TMClient(status["tmaster"])


def fmt_duration(secs):
    secs = int(secs)
    d, rem = divmod(secs, 86400)
    h, rem = divmod(rem, 3600)
    m, s = divmod(rem, 60)
    if d:
        return f"{d}d{h}h{m}m"
    if h:
        return f"{h}h{m}m{s}s"
    if m:
        return f"{m}m{s}s"
    return f"{s}s"


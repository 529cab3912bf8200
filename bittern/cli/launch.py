"""Starting a topology in local mode: validate, plan, record, start its supervisor,
wait until every task has initialized, or undo everything."""
from __future__ import annotations

import os
import sys
import time

from .. import config as cfg
from ..api.diskstate import disk_settings
from ..api.timedecl import check_timeouts
from ..errors import BitternError, ConfigError, StateError
from ..loader import load_class, load_topology
from ..packing import round_robin
from ..proc import module_cmd, pid_alive, spawn, stop_pids
from .common import check_name, liveness, supervisor_pid


def prepare(path, name=None, overrides=(), warn=print):
    """Load and validate the topology file and its config: ``(tdef, config)``."""
    tdef = load_topology(path, name)
    check_name(tdef.name)
    topo_conf, w1 = cfg.check(tdef.config, where=f"topology {tdef.name!r} config")
    cli_conf, w2 = cfg.check(cfg.parse_overrides(overrides), where="--config")
    warnings = w1 + w2
    for comp in tdef.components.values():
        comp.config, w = cfg.check(comp.config, where=f"component {comp.name!r} config")
        warnings += w
    for w in warnings:
        warn(f"warning: {w}")
    conf = cfg.check_merged(cfg.merge(topo_conf, cli_conf), f"topology {tdef.name!r}")
    cap_parallelism(tdef, conf["topology.max.task.parallelism"], warn)
    check_timeouts(tdef, conf, lambda c: dict(conf, **tdef.components[c].config))
    for comp in tdef.components.values():
        try:
            disk_settings(dict(conf, **comp.config))
        except ConfigError as e:
            raise ConfigError(f"component {comp.name!r}: {e}") from None
    preflight(tdef, conf)
    return tdef, conf


def cap_parallelism(tdef, cap, say=print):
    """Storm's ``topology.max.task.parallelism``: no component gets more tasks than ``cap``
    (0: no cap)."""
    if not cap:
        return
    for comp in tdef.components.values():
        if comp.par > cap:
            say(f"note: component {comp.name!r} asked for {comp.par} tasks; "
                f"topology.max.task.parallelism caps it at {cap}")
            comp.par = cap


def preflight(tdef, conf):
    """Let each component class check what it can before anything starts: a class
    with a ``preflight(config)`` classmethod (``bittern.spark.SparkSpout``: Java, its
    files, their format and columns) gets its merged config and may raise."""
    for comp in tdef.components.values():
        check = getattr(load_class(tdef, comp.class_path), "preflight", None)
        if callable(check):
            check(dict(conf, **comp.config))


def clean_stale(state, name):
    """Remove the traces of a topology whose supervisor is gone."""
    procs = (state.processes(name) or {}).get("procs", {})
    stop_pids([p.get("pid") for p in procs.values()], timeout=2.0)
    state.remove_topology(name)


def record(state, home, tdef, conf, deactivated):
    """Write the topology and its packing; refuse a name that is running."""
    name = tdef.name
    rec, phase = liveness(state, name)
    if rec is not None:
        if phase != "DEAD" and pid_alive(supervisor_pid(state, name)):
            raise StateError(f"a topology named {name!r} is already running; kill it first or choose "
                             "another --name")
        clean_stale(state, name)
    packing = round_robin({c.name: c.par for c in tdef.components.values()}, conf["topology.stmgrs"])
    doc = {"definition": tdef.to_dict(), "config": conf, "state": "PAUSED" if deactivated else "RUNNING",
           "submitted_at": time.time(), "file": tdef.source.get("file"), "home": home}
    if not state.create(f"topologies/{name}", doc):
        raise StateError(f"a topology named {name!r} is already being submitted")
    state.put(f"assignments/{name}", {"packing": packing.to_dict()})
    return packing


def start_supervisor(home, name, detached):
    log_path = os.path.join(home, "logs", name, "supervisor.log")
    os.makedirs(os.path.dirname(log_path), mode=0o700, exist_ok=True)
    for old in os.listdir(os.path.dirname(log_path)):  # a fresh run starts fresh logs
        if old.endswith(".log"):
            os.unlink(os.path.join(os.path.dirname(log_path), old))
    cmd = module_cmd("supervisor", "--local", name, "--home", home) + (["--detached"] if detached else [])
    return spawn(cmd, log_path,
                 env={"BITTERN_HOME": home}, die_with_parent=not detached, new_session=detached)


def wait_started(state, name, proc, timeout):
    """Wait for the topology master to report RUNNING; raise with the cause otherwise."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status = state.status(name) or {}
        phase = status.get("phase")
        if phase == "RUNNING":
            return status
        if phase == "FAILED":
            raise StartupError(status.get("error") or {})
        if proc.poll() is not None:
            raise StartupError({"error": f"the supervisor of {name!r} exited with {proc.returncode} "
                                         "during start-up; see `bittern logs " + name + "`"})
        time.sleep(0.05)
    raise StartupError({"error": f"topology {name!r} did not start within {timeout:.0f}s "
                                 f"(bittern.startup.timeout.secs); see `bittern logs {name}`"})


class StartupError(BitternError):
    def __init__(self, err):
        super().__init__(err.get("error") or "start-up failed")
        self.user_traceback = err.get("traceback")


def stop(state, name, proc, timeout=15.0):
    """Stop a topology started by this process and make sure its state is gone."""
    if proc.poll() is None:
        stop_pids([proc.pid], timeout)
    proc.wait()
    if state.topology(name) is not None:
        clean_stale(state, name)


def launch(state, home, path, name, overrides, deactivated, detached, grace=0.0, warn=print,
           savepoint=None, allow_non_restored=False):
    """Validate, record and start a topology; returns ``(tdef, conf, proc, status)``.
    ``savepoint``: a savepoint directory to start from (checked before anything starts).
    On any failure nothing is left running or recorded."""
    tdef, conf = prepare(path, name, overrides, warn)
    doc = None
    if savepoint is not None:
        from .savepoint import prepare_restore
        doc = prepare_restore(savepoint, tdef, conf, allow_non_restored)
    record(state, home, tdef, conf, deactivated)
    proc = None
    try:
        if doc is not None:
            from .savepoint import restore_into
            cid = restore_into(savepoint, doc, state, home, tdef.name, conf,
                               (state.topology(tdef.name) or {}).get("submitted_at"))
            warn(f"starting from savepoint {os.path.abspath(savepoint)} (checkpoint {cid} of "
                 f"{doc['topology']!r})")
        proc = start_supervisor(home, tdef.name, detached)
        status = wait_started(state, tdef.name, proc, conf["bittern.startup.timeout.secs"])
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline:  # catch failures of the very first tuples
            st = state.status(tdef.name) or {}
            if st.get("phase") == "FAILED":
                raise StartupError(st.get("error") or {})
            time.sleep(0.05)
        return tdef, conf, proc, status
    except BaseException:
        if proc is not None:
            stop(state, tdef.name, proc)
        else:
            state.remove_topology(tdef.name)
        raise


def print_error(e, file=sys.stderr):
    print(f"error: {e}", file=file)
    tb = getattr(e, "user_traceback", None)
    if tb:
        print(tb.rstrip(), file=file)


__all__ = ["prepare", "launch", "stop", "print_error", "ConfigError"]

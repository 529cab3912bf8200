"""Rebalancing a running topology: change the parallelism of components (and the
number of containers) without losing what is in flight.

The one entry point is :func:`rebalance`::

    rebalance(state, name, {"count": 4}, containers=None) -> dict

``state`` is the state manager that holds the topology (a ``LocalStateManager`` in
local mode; nimbus passes its ZooKeeper one together with its own ``deployer``).
It is stop-the-world, and atomic from the user's view:

1. **Validate** (nothing is touched when this fails): the topology runs, every
   component named exists, N >= 1, a stateful component under exactly once has
   at most ``bittern.state.key.groups`` tasks, and a spout is not split beyond what
   its source allows (:func:`split_limit`). Then take the exclusive marker
   ``rebalance/NAME`` in the state manager (``create``): a second rebalance of the
   same topology is refused while it is held.
2. **Quiesce**: deactivate through the topology master (spouts stop emitting),
   then ATLEAST_ONCE: wait until the spouts have no pending tree (or the message
   timeout passed); ATMOST_ONCE: until the executed counts stop changing and the
   stream managers' queues are empty; EFFECTIVELY_ONCE: until a checkpoint that
   started after the deactivation is complete (docs/EXACTLY_ONCE.md, "Rescaling").
3. **Re-plan**: the definition gets the new parallelism (and ``topology.stmgrs``
   the new container count), a new packing is computed and the deployer puts it
   into effect: locally the supervisor is told to restart its process group on
   the new plan (SIGHUP); in cluster mode nimbus writes a new assignment version,
   and the supervisors restart their containers since the packing changed. The
   topology record keeps its ``submitted_at``, so exactly-once checkpoints are kept
   and the new tasks restore from the last one.
4. **Resume**: wait for the topology master of the new plan to report RUNNING,
   activate it again (if it was active before).

A failure in 3-4 puts the old definition and packing back, restarts on them,
activates, and raises :class:`RebalanceError` saying what went wrong. The marker is
always removed. The topology is never left paused unless it was paused before.

Split limits of spouts: a spout class may declare how many tasks its source can be
split into, as an ``int`` attribute ``max_parallelism`` or a classmethod
``max_parallelism(config) -> int | None`` (``config``: the topology config merged with
the component's; None: no limit). ``bittern.spouts.files.FileSpout`` is limited to its
number of files. The limit is checked only where the class can be imported (local
mode; built-in classes in cluster mode).
"""
from __future__ import annotations

import logging
import os
import signal
import socket
import time

from .api.topology import TopologyDef
from .client import TMClient
from .config import ATLEAST_ONCE, EFFECTIVELY_ONCE, defaults
from .errors import BitternError
from .packing import PackingPlan, round_robin
from .wire import Op

__all__ = ["rebalance", "RebalanceError", "parse_parallelism", "split_limit", "LocalDeployer", "MARKER"]

MARKER = "rebalance/{name}"
FILE_SPOUT_KEY = "spout.files"  # FileSpout's own key (its docstring), not an engine default
POLL = 0.1

log = logging.getLogger(__name__)


class RebalanceError(BitternError):
    """A rebalance refused or failed. ``kind``: ``invalid`` (bad request, nothing
    done), ``unknown`` (no such topology), ``busy`` (another rebalance runs, or the
    topology is not running), ``failed`` (it failed and the old plan was put back),
    ``broken`` (it failed and so did putting the old plan back)."""

    def __init__(self, message, kind="invalid"):
        super().__init__(message)
        self.kind = kind


# -- the request ----------------------------------------------------------------------------
def parse_parallelism(items):
    """``["count=4", "split=2"]`` -> ``{"count": 4, "split": 2}``; raises RebalanceError."""
    out = {}
    for item in items or []:
        comp, sep, n = str(item).partition("=")
        comp = comp.strip()
        if not sep or not comp:
            raise RebalanceError(f"--parallelism wants COMPONENT=N, got {item!r}")
        try:
            out[comp] = int(n)
        except ValueError:
            raise RebalanceError(f"--parallelism {item!r}: N must be an integer") from None
    return out


def split_limit(comp, conf, tdef=None, import_user_code=True):
    """The most tasks spout ``comp`` (a ComponentDef) may have, or None (no limit, or
    its class cannot be imported here). See the module docstring for the hook."""
    cls = _spout_class(comp, tdef, import_user_code)
    if cls is None:
        return None
    merged = dict(conf or {})
    merged.update(comp.config or {})
    hook = getattr(cls, "max_parallelism", None)
    if hook is None:
        return _builtin_limit(cls, merged)
    try:
        limit = hook(merged) if callable(hook) else hook
    except Exception as e:  # noqa: BLE001 - user code: its error is the refusal's reason
        raise RebalanceError(f"spout {comp.name!r}: max_parallelism failed: {type(e).__name__}: {e}") from None
    return None if limit is None else int(limit)


def _spout_class(comp, tdef, import_user_code):
    from .loader import MODULE_NAME, import_path, load_class
    module = comp.class_path.partition(":")[0]
    try:
        if module == MODULE_NAME:
            src = (tdef.source if tdef is not None else {}) or {}
            if not import_user_code or not src.get("file") or not os.path.isfile(src["file"]):
                return None
            return load_class(tdef, comp.class_path)
        return import_path(comp.class_path)
    except Exception:  # noqa: BLE001 - cannot import it here: no limit known
        return None


def _builtin_limit(cls, conf):
    from .spouts.files import FileSpout, resolve_files
    if issubclass(cls, FileSpout):
        try:
            return len(resolve_files(conf.get(FILE_SPOUT_KEY)))
        except Exception:  # noqa: BLE001 - files unknown here: the spout will say so itself
            return None
    return None


def validate(tdef, conf, parallelism, containers=None, import_user_code=True):
    """The new ``{component: par}`` of every component; raises RebalanceError (kind
    ``invalid``) naming the first problem."""
    if not parallelism and containers is None:
        raise RebalanceError("nothing to change: give --parallelism COMPONENT=N and/or --containers K")
    new = {c.name: c.par for c in tdef.components.values()}
    mode = (conf or {}).get("topology.reliability.mode")
    groups = int((conf or {}).get("bittern.state.key.groups") or defaults()["bittern.state.key.groups"])
    cap = int((conf or {}).get("topology.max.task.parallelism") or 0)
    for name, n in sorted((parallelism or {}).items()):
        comp = tdef.components.get(name)
        if comp is None:
            raise RebalanceError(f"topology {tdef.name!r} has no component {name!r} "
                                 f"(components: {', '.join(sorted(tdef.components))})")
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise RebalanceError(f"component {name!r}: parallelism must be an integer >= 1, got {n!r}")
        if cap and n > cap:
            raise RebalanceError(f"component {name!r}: parallelism {n} is more than "
                                 f"topology.max.task.parallelism ({cap})")
        if mode == EFFECTIVELY_ONCE and n > groups:
            raise RebalanceError(f"component {name!r}: parallelism {n} is more than its "
                                 f"{groups} key groups (bittern.state.key.groups)")
        if comp.kind == "spout" and n > comp.par:
            limit = split_limit(comp, conf, tdef, import_user_code)
            if limit is not None and n > limit:
                raise RebalanceError(f"spout {name!r} cannot be split into {n} tasks: its source "
                                     f"allows at most {limit}")
        new[name] = n
    if containers is not None and (isinstance(containers, bool) or not isinstance(containers, int)
                                   or containers < 1):
        raise RebalanceError(f"--containers must be an integer >= 1, got {containers!r}")
    return new


def new_definition(rec, par, containers=None):
    """The topology record with the new parallelism (and ``topology.stmgrs``)."""
    tdef = TopologyDef.from_dict(rec["definition"])
    for name, n in par.items():
        tdef.components[name].par = n
    conf = dict(rec["config"])
    if containers is not None:
        conf["topology.stmgrs"] = containers
    return dict(rec, definition=tdef.to_dict(), config=conf), tdef, conf


# -- deployers: how a plan is put into effect ----------------------------------------------------
def plan_started(status, conf):
    """Whether the status a new plan's topology master wrote settles its start: FAILED,
    or RUNNING, and under EFFECTIVELY_ONCE also restored (every task loaded its state
    from the last checkpoint, ``resumed_epoch``). A task registers before it restores,
    and a restore can fail (a spout that cannot be rescaled): a rebalance that stopped
    at RUNNING would report success for a plan that fails a moment later."""
    phase = status.get("phase")
    if phase == "FAILED":
        return True
    if phase != "RUNNING":
        return False
    return conf.get("topology.reliability.mode") != EFFECTIVELY_ONCE or status.get("resumed_epoch") is not None


class LocalDeployer:
    """Local mode: the topology's supervisor (one process on this machine) restarts
    its whole process group on the plan in the state manager when it gets SIGHUP
    (supervisor/local.py); ``processes/NAME`` says which assignment version runs."""

    def __init__(self, state, name):
        self.state, self.name = state, name

    def pack(self, tdef, conf):
        # as bittern/cli/launch.py records it
        return round_robin({c.name: c.par for c in tdef.components.values()}, conf["topology.stmgrs"])

    def _supervisor(self):
        asg = self.state.assignment(self.name) or {}
        return asg.get("supervisor") or (self.state.processes(self.name) or {}).get("supervisor")

    def deploy(self, rec, packing):
        """Write ``rec`` and ``packing``; the supervisor restarts everything on them."""
        from .proc import pid_alive
        sup = self._supervisor()
        if not sup or not pid_alive(sup):
            raise RebalanceError(f"the supervisor of {self.name!r} is not running", "failed")
        asg = self.state.assignment(self.name) or {}
        self.version = int(asg.get("version") or 0) + 1
        self.conf = rec["config"]
        self.state.put(f"topologies/{self.name}", rec)
        self.state.put(f"assignments/{self.name}", dict(asg, packing=packing.to_dict(), version=self.version))
        self.since = time.time()
        os.kill(sup, signal.SIGHUP)

    def wait_running(self, timeout):
        from .proc import pid_alive
        sup = self._supervisor()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            procs = self.state.processes(self.name) or {}
            if procs.get("version") == self.version:
                st = self.state.status(self.name) or {}
                if st.get("updated", 0) >= self.since and plan_started(st, self.conf):
                    return st
            if sup and not pid_alive(sup):
                raise RebalanceError(f"the supervisor of {self.name!r} exited", "failed")
            time.sleep(POLL)
        raise RebalanceError(f"the new plan of {self.name!r} did not start within {timeout:.0f}s", "failed")


# -- the orchestration ------------------------------------------------------------------------------
def rebalance(state, name, parallelism, containers=None, *, deployer=None, timeout=None, say=None):
    """Rebalance topology ``name`` to ``parallelism`` ``{component: N}`` (components not
    named keep theirs) and, if given, ``containers`` stream managers. ``deployer``
    puts a plan into effect (default: :class:`LocalDeployer`); ``timeout`` bounds the
    start of each plan (default ``bittern.startup.timeout.secs``); ``say(line)`` gets
    progress lines. Returns ``{name, parallelism, containers, tasks, drained, took_secs}``.
    Raises :class:`RebalanceError` (``.kind``) when refused or failed; on ``failed`` the
    topology runs its old plan again."""
    say = say or (lambda line: None)
    t0 = time.monotonic()
    rec = state.topology(name)
    if rec is None:
        raise RebalanceError(f"no topology named {name!r}", "unknown")
    tdef = TopologyDef.from_dict(rec["definition"])
    deployer = deployer or LocalDeployer(state, name)
    par = validate(tdef, rec["config"], parallelism, containers,
                   import_user_code=isinstance(deployer, LocalDeployer))
    status = state.status(name) or {}
    if status.get("phase") != "RUNNING" or not status.get("tmaster"):
        raise RebalanceError(f"topology {name!r} is not running (phase {status.get('phase') or 'unknown'}); "
                             "only a running topology can be rebalanced", "busy")
    marker = MARKER.format(name=name)
    mine = {"pid": os.getpid(), "host": socket.gethostname(), "since": time.time(), "parallelism": par,
            "active": bool(status.get("active"))}
    if not state.create(marker, mine):
        held = state.get(marker) or {}
        if not _stale(held):
            raise RebalanceError(f"a rebalance of {name!r} is already in progress (pid {held.get('pid')} on "
                                 f"{held.get('host')})", "busy")
        state.delete(marker)
        if not state.create(marker, mine):
            raise RebalanceError(f"a rebalance of {name!r} is already in progress", "busy")
    try:
        return _run(state, name, rec, par, containers, deployer, timeout, say, t0)
    finally:
        try:
            state.delete(marker)
        except Exception as e:  # noqa: BLE001 - never mask the outcome, but say it
            # left behind, it refuses the next rebalance until a new leader (or, locally, the
            # marker's dead owner) clears it: the operator must know why
            log.warning("could not remove the rebalance marker %s of %r (the next rebalance may be "
                        "refused until it is cleared): %s", marker, name, e)


def _stale(held):
    """A marker left by a process of this host that is gone."""
    from .proc import pid_alive
    return held.get("host") == socket.gethostname() and held.get("pid") and not pid_alive(held["pid"])


def _run(state, name, rec, par, containers, deployer, timeout, say, t0):
    conf = rec["config"]
    timeout = float(timeout or conf.get("bittern.startup.timeout.secs") or 60.0)
    status = state.status(name) or {}
    was_active = bool(status.get("active"))
    old_asg = state.assignment(name) or {}
    old_packing = PackingPlan.from_dict(old_asg["packing"])
    tm = TMClient(status["tmaster"], curve=_tm_curve(deployer, name))
    deployed = False
    try:
        say(f"deactivating {name}")
        tm.request(Op.DEACTIVATE)
        drained = quiesce(tm, conf, TopologyDef.from_dict(rec["definition"]), say)
        cur = state.topology(name) or rec  # PAUSED now (the topology master wrote it)
        new_rec, new_tdef, new_conf = new_definition(cur, par, containers)
        packing = deployer.pack(new_tdef, new_conf)
        say(f"restarting {name} on the new plan: {len(packing.task_component)} tasks in "
            f"{len(packing.containers)} container(s)")
        deployed = True
        deployer.deploy(new_rec, packing)
        st = deployer.wait_running(timeout)
        if st.get("phase") != "RUNNING":
            raise RebalanceError(_status_error(st), "failed")
    except BaseException as e:
        tm.close()
        err = e if isinstance(e, BitternError) else BitternError(f"{type(e).__name__}: {e}")
        if not deployed:  # nothing changed but the activation
            _activate(state, name, was_active, say, deployer)
            raise RebalanceError(f"rebalance of {name!r} failed before the new plan was deployed: {err}",
                                 "failed") from e
        say(f"the new plan failed ({err}); putting the old plan back")
        try:
            old_rec = dict(state.topology(name) or rec, definition=rec["definition"], config=rec["config"],
                           state="PAUSED")
            deployer.deploy(old_rec, old_packing)
            st = deployer.wait_running(timeout)
            if st.get("phase") != "RUNNING":
                raise RebalanceError(_status_error(st), "broken")
        except BaseException as e2:
            raise RebalanceError(f"rebalance of {name!r} failed ({err}) and so did restarting it on the old "
                                 f"plan ({e2}); see `bittern logs {name}`", "broken") from e
        _activate(state, name, was_active, say, deployer)
        raise RebalanceError(f"rebalance of {name!r} failed, back on the old plan: {err}", "failed") from e
    tm.close()
    _activate(state, name, was_active, say, deployer)
    ntasks = {c: len(ts) for c, ts in packing.component_tasks.items()}
    return {"name": name, "parallelism": ntasks, "containers": len(packing.containers),
            "tasks": len(packing.task_component), "drained": drained,
            "took_secs": round(time.monotonic() - t0, 2)}


def _status_error(st):
    err = st.get("error")
    if isinstance(err, dict):
        err = err.get("error")
    return err or f"the topology master reports {st.get('phase')}"


def _tm_curve(deployer, name):
    """The CURVE keys to reach ``name``'s topology master, from the deployer (cluster mode:
    nimbus's; None in local mode, where its socket is a private ipc one)."""
    keys = getattr(deployer, "tm_curve", None)
    return keys(name) if keys is not None else None


def _activate(state, name, was_active, say, deployer):
    """Activate the topology's current topology master (if it was active before)."""
    if not was_active:
        return
    st = state.status(name) or {}
    if not st.get("tmaster"):
        return
    try:
        with TMClient(st["tmaster"], curve=_tm_curve(deployer, name)) as tm:
            tm.request(Op.ACTIVATE)
        say(f"{name} activated")
    except BitternError as e:
        say(f"warning: could not activate {name}: {e}")


def quiesce(tm, conf, tdef, say=lambda line: None):
    """Wait until what the (deactivated) topology has in flight is done, by reliability
    mode (module docstring). True when drained, False when the wait timed out."""
    mode = conf.get("topology.reliability.mode", ATLEAST_ONCE)
    spouts = {c.name for c in tdef.components.values() if c.kind == "spout"}
    if mode == EFFECTIVELY_ONCE:
        return _wait_checkpoint(tm, conf, say)
    if mode == ATLEAST_ONCE:
        limit = float(conf.get("topology.message.timeout.secs") or 30) + 2.0
        deadline = time.monotonic() + limit
        while True:
            rep = tm.request(Op.REPORT)
            pending = sum(int(m.get("__pending", 0) or 0) for c, m in (rep.get("components") or {}).items()
                          if c in spouts)
            if pending == 0:
                say("drained: no pending tuple trees")
                return True
            if time.monotonic() >= deadline:
                say(f"warning: {pending} tuple trees still pending after {limit:g}s; going on")
                return False
            time.sleep(0.2)
    # ATMOST_ONCE (or no acking): executed counts still and queues empty
    deadline = time.monotonic() + 10.0
    prev = None
    while True:
        rep = tm.request(Op.REPORT)
        tasks = (rep.get("tasks") or {}).values()
        executed = sum(int(m.get("__execute-count", 0) or 0) for m in tasks)
        busy = sum(int(m.get("__in-flight", 0) or 0) for m in tasks)  # inside multilang children
        if prev is not None and executed == prev and not busy and not rep.get("stmgr_queued"):
            say("drained: nothing executing, stream manager queues empty")
            return True
        if time.monotonic() >= deadline:
            return False
        prev = executed
        time.sleep(0.3)


def _wait_checkpoint(tm, conf, say):
    """EFFECTIVELY_ONCE: a checkpoint started after the deactivation is complete."""
    ck = (tm.request(Op.GET_METRICS).get("checkpoints") or {})
    mark = max(ck.get("in_flight") or 0, ck.get("last_complete") or 0)
    limit = (float(conf.get("topology.stateful.checkpoint.interval.seconds") or 5.0)
             + float(conf.get("topology.stateful.checkpoint.timeout.secs") or 30.0) + 5.0)
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        ck = tm.request(Op.GET_METRICS).get("checkpoints") or {}
        if (ck.get("last_complete") or 0) > mark and not ck.get("rolling_back"):
            say(f"checkpoint {ck['last_complete']} complete after the deactivation")
            return True
        time.sleep(0.2)
    raise RebalanceError(f"no checkpoint completed within {limit:g}s of the deactivation; "
                         "exactly-once state cannot be moved without one", "failed")

"""Real instances in one process: the topology definition, its config and its plan
made as ``bittern run`` makes them, and :class:`Task`, one spout or bolt task (the
engine's own ``SpoutInstance``/``BoltInstance``) whose sends go to a Python callback
instead of a socket, with what its component emitted, and raised, recorded.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field

from bittern import config as cfg
from bittern.api.stream import DEFAULT_STREAM
from bittern.api.timedecl import check_timeouts
from bittern.api.topology import Topology, TopologyBuilder, TopologyDef
from bittern.errors import BitternError, TopologyError
from bittern.packing import round_robin
from bittern.runplan import RunPlan
from bittern.wire import ACK, CTRL, DATA, Op, ctrl, task_of


class TopologyTestError(BitternError):
    """User code raised inside a component: ``component``, ``task``, ``where``
    (``process``, ``next_tuple``, ``on_timer``...), the input ``tuple`` when there was
    one, and the exception as ``__cause__``."""

    def __init__(self, record):
        self.record = record
        self.component, self.task, self.where = record.component, record.task, record.where
        self.tuple = record.tuple
        super().__init__(record.describe())


@dataclass
class Emitted:
    """One ``emit`` a component made: its task, the stream and the values."""
    component: str
    task: int
    stream: str
    values: list
    tup_id: object = None  # a spout's message id (None: unreliable)
    direct_task: int | None = None


@dataclass
class ErrorRecord:
    component: str
    task: int
    where: str
    error: BaseException
    tuple: object = None  # the input Tuple being processed, if any
    traceback: str = field(default="", repr=False)

    def describe(self):
        what = f"component {self.component!r} task {self.task} raised in {self.where}: " \
               f"{type(self.error).__name__}: {self.error}"
        if self.tuple is not None:
            t = self.tuple
            what += f" (input tuple {list(t.values)!r} from {t.component!r} stream {t.stream!r})"
        return what


def resolve(topology, name=None):
    """A :class:`TopologyDef` from a ``Topology`` subclass, a ``TopologyBuilder``, a
    ``TopologyDef`` or the path of a topology file (imported as ``bittern run`` does)."""
    if isinstance(topology, (str, os.PathLike)):
        from bittern.loader import load_topology
        return load_topology(os.fspath(topology), name)
    if isinstance(topology, TopologyDef):
        tdef = TopologyDef.from_dict(topology.to_dict())
        if name:
            tdef.name = name
        return tdef
    if isinstance(topology, TopologyBuilder) or (isinstance(topology, type) and issubclass(topology, Topology)):
        default = name or getattr(topology, "topology_name", None) or \
            (topology.__name__.lower() if isinstance(topology, type) else "topology")
        return topology.build(default)
    raise TopologyError(f"expected a Topology subclass, a TopologyBuilder, a TopologyDef or a topology file, "
                        f"got {topology!r}")


def merged_config(tdef, overrides=None):
    """The config every task sees, checked as ``bittern run`` checks it: defaults <
    the topology's < ``overrides`` (a dict, as ``--config``); bad values raise."""
    topo_conf, _ = cfg.check(tdef.config, where=f"topology {tdef.name!r} config")
    over, _ = cfg.check(dict(overrides or {}), where="config")
    for comp in tdef.components.values():
        comp.config, _ = cfg.check(comp.config, where=f"component {comp.name!r} config")
    conf = cfg.check_merged(cfg.merge(topo_conf, over), f"topology {tdef.name!r}")
    cap = conf["topology.max.task.parallelism"]
    for comp in tdef.components.values():
        if cap and comp.par > cap:
            comp.par = cap
    check_timeouts(tdef, conf, lambda c: dict(conf, **tdef.components[c].config))
    return conf


def make_plan(tdef, conf, home):
    """The run plan of ``tdef`` (packed round robin over ``topology.stmgrs``
    containers, as local mode packs it); its endpoints are never connected."""
    packing = round_robin({c.name: c.par for c in tdef.components.values()}, conf["topology.stmgrs"])
    # the plan goes through its JSON form, as it does to every process
    tdef = TopologyDef.from_dict(tdef.to_dict())
    stmgrs = {c: {"tcp": f"inproc://bittern-testing/p{c}", "ipc": f"inproc://bittern-testing/c{c}",
                  "ctl": f"inproc://bittern-testing/k{c}"} for c in packing.containers}
    return RunPlan(tdef.name, home, tdef, packing, "inproc://bittern-testing/tm", stmgrs, conf)


class Task:
    """One task of the plan, run by the engine's own instance class. ``deliver(kind,
    payload)`` hands it a frame as its stream manager would; everything it sends goes
    to ``route(src_task, frames)``."""

    def __init__(self, plan, task, route, on_error, emitted=None, outcomes=None):
        from instance.bolt import BoltInstance
        from instance.spout import SpoutInstance
        self.task = task
        self.component = plan.packing.task_component[task]
        self.kind = plan.topology.components[self.component].kind
        inst = (SpoutInstance if self.kind == "spout" else BoltInstance)(plan, task)
        inst.close_socket()  # never connected: frames go through ``route``
        self.inst = inst
        self.emitted = [] if emitted is None else emitted  # (a run shares one list: the order of emits)
        self.outcomes = [] if outcomes is None else outcomes  # (component, "acked"|"failed", tup_id)
        self._on_error = on_error
        self._current = None

        def send(frames, sock=None):
            route(task, frames)
            return True
        inst.send = send
        report_error, process_error = inst.report_error, getattr(inst, "_process_error", None)

        def report(where, exc, fatal=False):
            import traceback
            tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
            on_error(ErrorRecord(self.component, task, where, exc, self._current, tb))
            return report_error(where, exc, fatal)
        inst.report_error = report
        if process_error is not None:
            def process_error_with_tuple(tup, e):
                self._current = tup
                try:
                    return process_error(tup, e)
                finally:
                    self._current = None
            inst._process_error = process_error_with_tuple

    def setup(self):
        """``initialize`` (and ``init_state``) as in a process, then START."""
        inst = self.inst
        inst.setup()
        if getattr(inst.obj, "_runtime_attach", None) is not None:
            raise TopologyError(f"component {self.component!r} is a multilang component (ShellBolt/ShellSpout); "
                                "bittern.testing runs Python components in-process only: test it in real "
                                "processes (the bittern_run fixture of bittern.testing.pytest_plugin)")
        self._record_emits()
        inst.init_timers()
        inst.handle(ctrl(Op.START, active=True))

    def _record_emits(self):
        obj, out, comp, task = self.inst.obj, self.emitted, self.component, self.task
        emit = obj.emit
        if self.kind == "spout":
            def recorded(values, tup_id=None, stream=DEFAULT_STREAM, direct_task=None, need_task_ids=False):
                r = emit(values, tup_id, stream, direct_task, need_task_ids)
                out.append(Emitted(comp, task, stream, list(values), tup_id, direct_task))
                return r
        else:
            def recorded(values, stream=DEFAULT_STREAM, anchors=None, direct_task=None, need_task_ids=False):
                r = emit(values, stream, anchors, direct_task, need_task_ids)
                out.append(Emitted(comp, task, stream, list(values), None, direct_task))
                return r
        obj.emit = recorded
        if self.kind == "spout":  # the spout's ack/fail, called by the engine when a tree completes
            outcomes = self.outcomes
            for outcome in ("ack", "fail"):
                def called(tup_id, _fn=getattr(obj, outcome), _what=outcome + "ed"):
                    outcomes.append((comp, _what, tup_id))
                    return _fn(tup_id)
                setattr(obj, outcome, called)

    def deliver(self, kind, payload):
        self.inst.handle([kind, payload])
        self.inst.flush()

    def close(self):
        """Stop as a process does: the component's ``close()``, a last flush."""
        self.inst.shutdown(clean=True)


def split_frames(frames):
    """``(kind, dest task, payload)`` of a frame an instance sent, or ``(CTRL, None, msg)``."""
    kind = frames[0]
    if kind in (DATA, ACK):
        return kind, task_of(frames[1]), bytes(frames[2])
    if kind == CTRL:
        from bittern.wire import decode_ctrl
        return kind, None, decode_ctrl(frames[1])
    raise ValueError(f"unknown frame kind {kind!r}")

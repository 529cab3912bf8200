"""Exactly-once instances wired in memory: real spout and bolt instances of a keyed
counting pipeline (spout -> fields -> count -> shuffle -> file sink), a topology master
made of the real checkpoint coordinator and store (as streammgr/tmaster.py drives
them), and channels delivered in random order. Used by test_exactly_once_runtime.py
and test_rescale_restore.py."""
from __future__ import annotations

import glob
import json
import os
import random
from collections import deque

import msgpack

from bittern import Grouping, Spout, Topology
from bittern import config as cfg
from bittern import wire
from bittern.checkpoint import CheckpointStore, task_layout
from bittern.packing import round_robin
from bittern.runplan import RunPlan
from bittern.sinks import FileSink, SinkBolt
from bittern.state import LocalStateManager
from bittern.wire import CTRL, DATA, Op, task_of
from instance.bolt import BoltInstance
from instance.spout import SpoutInstance
from streammgr import checkpoints as ck
from topologies.testkit import KeyedCountBolt


class NumSpout(Spout):
    """Emits ``[n, n % keys]`` (tup_id n) for n = stride * index + i, i < ``limit``; its
    offset is its state. ``keys`` and ``stride`` come from ``test.keys``/``test.stride``."""
    outputs = ["n", "key"]

    def initialize(self, config, context):
        self.keys, self.stride = int(config["test.keys"]), int(config["test.stride"])
        self.limit = 0
        self.i = 0
        self.acked = []

    def init_state(self, state):
        self.state = state
        self.i = state.get("next", 0)

    def pre_save(self, checkpoint_id):
        self.state.put("next", self.i)

    def next_tuple(self):
        if self.i < self.limit:
            n = self.stride * self.context.task_index + self.i
            self.emit([n, n % self.keys], tup_id=n)
            self.i += 1

    def ack(self, tup_id):  # never called under EFFECTIVELY_ONCE
        self.acked.append(tup_id)


class Out(SinkBolt):
    def make_sink(self, config, context):
        return FileSink(config["test.out"], "out")


def pipeline(count_par):
    class Pipeline(Topology):
        src = NumSpout.spec(par=2)
        count = KeyedCountBolt.spec(par=count_par, inputs={src: Grouping.fields("key")})
        sink = Out.spec(par=1, inputs={count: Grouping.SHUFFLE})
    return Pipeline.build("eo")


class EOSim:
    """One run of the pipeline at a given count parallelism over the checkpoint store
    and sink directory under ``tmp``; a new EOSim over the same ``tmp`` resumes from
    the store, as a restarted (or rebalanced) topology does."""

    def __init__(self, tmp, count_par=2, seed=0, keys=5, stride=1000, **conf):
        self.rng = random.Random(seed)
        self.out = str(tmp / "out")
        tdef = pipeline(count_par)
        config = cfg.merge(tdef.config, {"topology.reliability.mode": "EFFECTIVELY_ONCE",
                                         "topology.producer.batch.size": 3,
                                         "bittern.checkpoint.dir": str(tmp / "ckpt"),
                                         "test.out": self.out, "test.keys": keys,
                                         "test.stride": stride}, conf)
        self.packing = round_robin({c.name: c.par for c in tdef.components.values()}, 1)
        self.plan = RunPlan("eo", str(tmp / "home"), tdef, self.packing, "tcp://127.0.0.1:9",
                            {0: {"tcp": "tcp://127.0.0.1:9", "ipc": "ipc:///nonexistent/eo"}}, config)
        self.layout = task_layout(self.packing)
        self.sm = LocalStateManager(str(tmp / "home"))
        self.store = CheckpointStore(str(tmp / "ckpt"), self.sm, "eo", keep=3)
        seen = self.store.complete_ids() + self.store._dir_ids()
        epoch = (self.sm.get("checkpoints/eo/epoch") or {}).get("epoch", 0)
        self.coord = ck.CheckpointCoordinator(self.packing.task_component, 5.0, 30.0,
                                              latest_complete=self.store.latest_complete(),
                                              next_id=max(seen, default=0) + 1, epoch=epoch)
        self.now = 0.0
        self.lost = set()  # (op, task): control messages that never reach that task
        self.channels = {}  # (src, dest) -> deque of payloads
        self.ctrl = []  # (task, msg) sent to the topology master
        self.log = []  # what the topology master did
        self.inst = {}
        for task, comp in sorted(self.packing.task_component.items()):
            kind = tdef.components[comp].kind
            self.inst[task] = self.make(kind, task)

    def make(self, kind, task):
        inst = (SpoutInstance if kind == "spout" else BoltInstance)(self.plan, task)

        def send(frames, sock=None, task=task):
            if frames[0] == DATA:
                src = msgpack.unpackb(frames[2], raw=False)[0]
                assert src == task
                self.channels.setdefault((src, task_of(frames[1])), deque()).append(frames[2])
            elif frames[0] == CTRL:
                self.ctrl.append((task, wire.decode_ctrl(frames[1])))
            return True
        inst.send = send
        inst.setup()
        inst.handle(wire.ctrl(Op.START, active=True))
        return inst

    def tasks(self, comp):
        return self.packing.component_tasks[comp]

    def obj(self, task):
        return self.inst[task].obj

    # -- the topology master (as streammgr/tmaster.py does it)
    def act(self, actions):
        for a in actions:
            self.log.append(a)
            if isinstance(a, ck.Start):
                self.broadcast(Op.CKPT_START, id=a.checkpoint_id, epoch=a.epoch)
            elif isinstance(a, ck.Complete):
                self.store.mark_complete(a.checkpoint_id, a.tasks, layout=self.layout)
                self.broadcast(Op.CKPT_COMMIT, id=a.checkpoint_id)
            elif isinstance(a, ck.Restore):
                self.sm.put("checkpoints/eo/epoch", {"epoch": a.epoch})
                lay = None if a.checkpoint_id is None else self.store.layout(a.checkpoint_id)
                self.broadcast(Op.RESTORE, id=a.checkpoint_id, epoch=a.epoch, layout=lay)
            elif isinstance(a, ck.Resume):
                self.broadcast(Op.RESUME, epoch=a.epoch)

    def broadcast(self, op, **fields):
        for t, inst in self.inst.items():
            if (op, t) not in self.lost:
                inst.handle(wire.ctrl(op, **fields))
        self.answer()

    def answer(self):
        while self.ctrl:
            task, msg = self.ctrl.pop(0)
            op = msg["op"]
            if op == Op.CKPT_SAVED:
                self.act(self.coord.on_saved(task, msg["id"], msg["epoch"], self.now, msg["bytes"],
                                             msg["align_ms"]))
            elif op == Op.RESTORED:
                self.act(self.coord.on_restored(task, msg["epoch"], self.now))
            elif op == Op.ERROR:
                raise AssertionError(f"task {task}: {msg['error']}\n{msg.get('traceback')}")

    def start(self):
        """The topology master's start: every task restores, then resumes."""
        self.act(self.coord.start(self.now))
        assert all(inst.epoch == self.coord.epoch for inst in self.inst.values()), "not every task restored"

    def tick(self, dt=5.0):
        self.now += dt
        self.act(self.coord.tick(self.now))

    # -- the data plane
    def emit(self, per_spout):
        for t in self.tasks("src"):
            inst = self.inst[t]
            inst.obj.limit += per_spout
            while inst.can_emit() and inst.obj.i < inst.obj.limit:
                inst.call_next_tuple(inst.emitter)
            inst.flush()

    def step(self):
        """Deliver the head of one random non-empty channel; False if none is left."""
        live = [k for k, q in self.channels.items() if q]
        if not live:
            return False
        key = self.rng.choice(live)
        inst = self.inst[key[1]]
        inst.handle([DATA, self.channels[key].popleft()])
        inst.flush()
        self.answer()
        return True

    def run(self, limit=200000):
        for _ in range(limit):
            if not self.step():
                return
        raise AssertionError("does not settle")

    def committed(self):
        rows = []
        for path in sorted(glob.glob(os.path.join(self.out, "out-*-*.jsonl"))):
            with open(path) as f:
                rows += [json.loads(line) for line in f]
        return rows

    def counts(self):
        """{key: (count, task)} over the count tasks' live keyed state; no key twice."""
        out = {}
        for t in self.tasks("count"):
            for key, c in self.inst[t].obj.counts.items():
                assert key not in out, f"key {key} on tasks {out[key][1]} and {t}"
                out[key] = (c, t)
        return out

    def close(self):
        for inst in self.inst.values():
            inst.close_socket()
            if inst.state is not None and inst.state.on_disk:
                inst.state.keyed.close()

"""A scripted multilang component for the conformance test. Its scenario is the
component config's ``fake.scenario``; it writes what it observed under ``fake.out``.
Misbehaving scenarios misbehave once (a marker file in ``fake.out``), so the
restarted instance's child behaves and the replayed tuples complete.

Bolt scenarios (input ``[n]``):
  interleave      emit [n] (waiting for its task ids while more tuples arrive), then
                  [n, task] on stream "check"; log, metrics; ack
  unknown_anchor  once: anchor an emit to an id it was never given
  garbage         once: print() a line to stdout
  exit            once: exit with code 3
  hang            once: stop reading and answering (heartbeat timeout)
  slow            20 ms per tuple
  ack_unknown     ack an id it was never given
  (otherwise: emit [n] anchored, ack)
Tick tuples are noted in tick-<task>.jsonl and acked.
Spout scenario ``spout``: emits [i] for i < fake.count with id i, one per next;
appends acked ids to acked-<task>.txt.
"""
import json
import os
import sys
import time

import storm

conf, context = storm.init_component()
scenario = conf["fake.scenario"]
out = conf["fake.out"]
os.makedirs(out, exist_ok=True)
marker = os.path.join(out, f"misbehaved-{scenario}-{context['componentid']}")
first_life = not os.path.exists(marker)
sys.stderr.write(f"fake {scenario} component starting (stderr goes to the instance log)\n")
sys.stderr.flush()


def misbehave_now():
    open(marker, "w").close()


def note(name, obj):
    with open(os.path.join(out, f"{name}-{context['taskid']}.jsonl"), "a") as f:
        f.write(json.dumps(obj) + "\n")


def run_spout():
    count = int(conf["fake.count"])
    i = 0
    while True:
        msg = storm.read_command()
        cmd = msg["command"]
        if cmd == "next" and i < count:
            tasks = storm.emit_spout([i], id=i)
            if not isinstance(tasks, list) or not tasks:
                storm.report_error(f"no task ids for emit {i}: {tasks!r}")
            i += 1
        elif cmd == "ack":
            note("acked", msg["id"])
        elif cmd == "fail":
            note("failed", msg["id"])
        elif cmd in ("activate", "deactivate"):
            note("commands", cmd)
        storm.sync()


def run_bolt():
    seen = 0
    while True:
        tup = storm.read_tuple()
        if tup.is_heartbeat():
            storm.sync()
            continue
        if tup.is_tick():
            note("tick", [tup.component, tup.stream, tup.task, tup.values])
            storm.ack(tup)
            continue
        seen += 1
        n = tup.values[0]
        if scenario == "interleave":
            if seen == 1:
                storm.log(f"interleave bolt got its first tuple: {n}")
                time.sleep(0.5)  # the host queues more tuples meanwhile
            tasks = storm.emit([n], anchors=[tup])
            if storm.pending_commands:
                note("buffered", len(storm.pending_commands))
            storm.emit([n, tasks], stream="check", anchors=[tup], need_task_ids=False)
            storm.metric("seen", 1)
            storm.ack(tup)
            continue
        if scenario == "slow":  # a slow consumer: the host's queue fills, process() waits
            time.sleep(0.02)
        elif scenario == "ack_unknown":
            storm.send_message({"command": "ack", "id": "nope"})
        if first_life and seen == 5:
            if scenario == "unknown_anchor":
                misbehave_now()
                storm.emit([n], anchors=[storm.Tuple("no-such-id", None, None, None, None)],
                           need_task_ids=False)
            elif scenario == "garbage":
                misbehave_now()
                print("hello from a stray print")
                sys.stdout.flush()
            elif scenario == "exit":
                misbehave_now()
                sys.exit(3)
            elif scenario == "hang":
                misbehave_now()
                time.sleep(3600)
        storm.emit([n], anchors=[tup], need_task_ids=False)
        storm.ack(tup)


if scenario == "spout":
    run_spout()
else:
    run_bolt()

"""``bittern run FILE``: run a topology in the foreground until a duration or Ctrl-C,
drain it, stop it, and print a per-component summary."""
from __future__ import annotations

import json
import signal
import sys
import time

from ..client import TMClient
from ..compat.flux import add_flux_args, flux_options
from ..console import ConsoleFollower, console_path
from ..errors import BitternError
from ..wire import Op
from .launch import launch, print_error, stop
from .savepoint import add_restore_args


def add_parser(sub):
    p = sub.add_parser("run", help="run a topology in the foreground")
    p.add_argument("file", help="topology file (.py, or a Storm Flux .yaml)")
    p.add_argument("--name", help="topology name (default: the builder's name or the file name)")
    p.add_argument("--duration", type=float, default=None, metavar="S",
                   help="stop after S seconds (default: until Ctrl-C)")
    p.add_argument("--config", action="append", default=[], metavar="K=V", help="override a config key")
    p.add_argument("--drain-timeout", type=float, default=30.0, metavar="S",
                   help="how long to wait for in-flight tuples when stopping")
    p.add_argument("--until-done", action="store_true",
                   help="stop when every spout task called done() and every tuple tree is complete "
                        "(a batch job run as a stream); --duration still bounds it")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    add_restore_args(p)
    add_flux_args(p)
    p.set_defaults(func=main, local_only="`bittern run` runs a topology in the foreground on this machine; "
                                         "to start it on the cluster use `bittern --cluster URL submit FILE`")


def drain(client, timeout):
    """Deactivate the spouts and wait until every tuple sent has been executed and no
    multilang child holds an input it has not acked (or, if
    a stream manager dropped batches for a dead task, until nothing moves and nothing
    is queued). Returns the last metrics report and whether it drained."""
    rep = client.request(Op.DEACTIVATE)
    deadline = time.monotonic() + timeout
    stable, last = 0, None
    while time.monotonic() < deadline:
        rep = client.request(Op.REPORT)
        comps = rep["components"]
        sent = sum(c.get("__transfer-count", 0) for c in comps.values())
        done = sum(c.get("__execute-count", 0) for c in comps.values())
        busy = sum(c.get("__in-flight", 0) for c in comps.values())  # inside multilang children
        settled = (sent <= done and not busy) or (rep.get("stmgr_dropped") and not rep.get("stmgr_queued")
                                                  and (sent, done, busy) == last)
        last = (sent, done, busy)
        if settled and not rep.get("missing"):
            stable += 1
            if stable >= 2:
                return rep, True
        else:
            stable = 0
        time.sleep(0.1)
    return rep, False


INF = float("inf")
COMMIT_TRIES = 3  # checkpoint timeouts a bounded exactly-once run waits for its end to commit


def spouts_exhausted(tdef, rep):
    comps = rep.get("components", {})
    return all(comps.get(c.name, {}).get("__exhausted", 0) >= c.par for c in tdef.spouts)


def all_done(tdef, rep):
    """Every spout task said done() and nothing is pending; with event time, every task's
    input watermark is at the end (+inf: the windows of the last events fired); under
    exactly once also: the first checkpoint each spout task took after its last emit is
    committed at every sink (so the end of the input is in the output, not only
    processed)."""
    comps = rep.get("components", {})
    for c in tdef.spouts:
        m = comps.get(c.name, {})
        if m.get("__exhausted", 0) < c.par or m.get("__pending", 0) > 0:
            return False
    if rep.get("missing"):
        return False
    for m in (rep.get("tasks") or {}).values():
        w = m.get("__input-watermark")  # event time: a task whose input has not reached its end
        if w is not None and w not in (INF, "inf"):  # yet has windows (and timers) still to fire
            return False
    ck = rep.get("checkpoints")
    if ck is None:
        return True
    return (ck.get("committed") or 0) >= max(done_after(tdef, rep) or [float("inf")])


def done_after(tdef, rep):
    """Exactly once: the checkpoint each spout task waits for, None for a task that has
    not taken one since it was done."""
    # (spout tasks, and only they, report the key under exactly once)
    return [m["__done-after"] if isinstance(m["__done-after"], int) else float("inf")
            for m in rep.get("tasks", {}).values() if "__done-after" in m] or None


def commit_stuck(tdef, rep, waited):
    """The one-line reason a bounded exactly-once run could not commit its end."""
    ck = rep.get("checkpoints") or {}
    want = [d for d in (done_after(tdef, rep) or []) if d != float("inf")]
    what = f"checkpoint {max(want)}" if want else "a checkpoint after the spouts' last emit"
    if ck.get("waiting_for"):
        held = ", ".join(f"component {c!r} task {t}" for t, c in ck["waiting_for"][:5])
        why = f"checkpoint {ck.get('in_flight')} is waiting for {held} to save it"
    elif ck.get("uncommitted_sinks"):
        held = ", ".join(f"component {c!r} task {t}" for t, c in ck["uncommitted_sinks"][:5])
        why = f"not committed by the sink {held} (see bittern errors)"
    else:
        why = f"last complete checkpoint {ck.get('last_complete')}, {ck.get('abandoned', 0)} abandoned"
    return f"the end of the input is not committed after {waited:.0f} s: {what}: {why}"


def summary_rows(tdef, rep):
    comps = rep.get("components", {})
    rows = []
    for name, c in tdef.components.items():
        m = comps.get(name, {})
        rows.append({"component": name, "kind": c.kind, "tasks": c.par,
                     "emitted": m.get("__emit-count", 0), "transferred": m.get("__transfer-count", 0),
                     "executed": m.get("__execute-count", 0), "acked": m.get("__ack-count", 0),
                     "failed": m.get("__fail-count", 0), "errors": m.get("__error-count", 0)})
    return rows


def print_summary(name, rows, elapsed, out=sys.stdout):
    print(f"\ntopology {name}: ran {elapsed:.1f}s", file=out)
    cols = ["component", "kind", "tasks", "emitted", "transferred", "executed", "acked", "failed", "errors"]
    widths = {c: max(len(c), *(len(str(r[c])) for r in rows)) for c in cols}
    print("  ".join(c.ljust(widths[c]) if c in ("component", "kind") else c.rjust(widths[c]) for c in cols),
          file=out)
    for r in rows:
        print("  ".join(str(r[c]).ljust(widths[c]) if c in ("component", "kind") else str(r[c]).rjust(widths[c])
                        for c in cols), file=out)


def main(args, state, home):
    stop_now = {"flag": False}

    def on_sigint(signum, frame):
        stop_now["flag"] = True
    signal.signal(signal.SIGINT, on_sigint)
    signal.signal(signal.SIGTERM, on_sigint)
    flux_options(args)
    tdef, conf, proc, status = launch(state, home, args.file, args.name, args.config, deactivated=False,
                                      detached=False, grace=0.0, warn=lambda m: print(m, file=sys.stderr),
                                      savepoint=args.from_savepoint,
                                      allow_non_restored=args.allow_non_restored_state)
    name = tdef.name
    console = ConsoleFollower(console_path(home, name))
    t0 = time.monotonic()
    print(f"topology {name} running: {sum(c.par for c in tdef.components.values())} tasks in "
          f"{conf['topology.stmgrs']} container(s); "
          + (f"stopping after {args.duration:g}s" if args.duration else "Ctrl-C to stop"), file=sys.stderr)
    failed = None
    rep, drained = {}, True
    next_check = 0.0
    ended_at = None
    # a few checkpoint timeouts: an abandoned checkpoint is followed by another at once
    commit_wait = COMMIT_TRIES * float(conf["topology.stateful.checkpoint.timeout.secs"]) + \
        float(conf["topology.stateful.checkpoint.interval.seconds"])
    try:
        with TMClient(status["tmaster"]) as client:
            while not stop_now["flag"]:
                sys.stdout.write(console.read_new())
                now = time.monotonic()
                if args.duration is not None and now - t0 >= args.duration:
                    break
                if args.until_done and now >= next_check:
                    next_check = now + 0.25
                    rep = client.request(Op.REPORT)
                    if all_done(tdef, rep):
                        break
                    if spouts_exhausted(tdef, rep) and rep.get("checkpoints") is not None:
                        # exactly once: the end is processed; wait (a bounded time) for its commit
                        ended_at = ended_at or now
                        if now - ended_at > commit_wait:
                            failed = {"error": commit_stuck(tdef, rep, now - ended_at)}
                            break
                    else:
                        ended_at = None
                st = state.status(name) or {}
                if st.get("phase") == "FAILED" and state.get(f"rebalance/{name}") is None:
                    failed = st.get("error") or {}
                    break
                if proc.poll() is not None:
                    raise BitternError(f"the supervisor of {name!r} died (exit {proc.returncode})")
                time.sleep(0.2)
            elapsed = time.monotonic() - t0
            if failed is None:
                rep, drained = drain(client, args.drain_timeout)
    finally:
        stop(state, name, proc)
        sys.stdout.write(console.read_new())
        sys.stdout.flush()
    if failed is not None:
        print_error(BitternErrorWithTb(failed))
        return 1
    rows = summary_rows(tdef, rep)
    if args.json:
        print(json.dumps({"topology": name, "seconds": elapsed, "drained": drained, "components": rows,
                          "stmgr_dropped": rep.get("stmgr_dropped", 0)}))
    else:
        print_summary(name, rows, elapsed)
        if not drained:
            print(f"warning: tuples were still in flight after {args.drain_timeout:g}s", file=sys.stderr)
    return 0


class BitternErrorWithTb(BitternError):
    def __init__(self, err):
        super().__init__(err.get("error") or "the topology failed")
        self.user_traceback = err.get("traceback")

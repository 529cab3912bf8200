"""Row groups: rows that are not a ``bittern run`` of the word count, each with its own
runner, its own section of the report and its own target verdicts.

A row group is a class registered in :data:`ROW_GROUPS` under its row name (what
``--only`` matches, by prefix). scripts/bench.py builds one instance per selected
group, ``Group(args, bt, workload)`` (``bt``: the :class:`benchkit.runner.BitternRunner`,
``workload``: the :class:`benchkit.workload.Workload`), and interleaves its runs with
the other rows' (run 1 of every row, then run 2...). The interface:

* ``kind``: the ``kind`` of its records (``--out`` lines, the ``[bench]`` progress lines);
* ``run(run)``: one run (``run`` counts from 0); returns a list of records, dicts with
  at least ``row``, ``ok`` (bool) and ``problems`` (list of str), and ``peer:
  "bittern"`` so that a failed one makes bench.py exit non-zero; a record may carry
  ``stderr_tail`` and ``logs`` (shown under "failed runs");
* ``render(records)``: its section of the report (every record of the benchmark is
  passed: pick yours by ``row``/``kind``), or "" for none;
* ``targets(records)``: its rows of the target table, tuples ``(name, measured (str),
  wanted (str), median value or None, verdict(median) -> bool)``.

Groups
======
* ``ckpt-1m`` (:class:`CkptGroup`): checkpoint bytes and time with 1,000,000 keys in
  keyed state and 0.1 % / 1 % / 10 % of them changed per interval, measured through
  the instance's own ``Checkpointing`` (scripts/benchkit/ckpt.py, run as
  ``scripts/ckpt_measure.py --json`` in a process of its own: it builds a large state
  and sets the GC thresholds an instance uses). Targets (issue 16): with 1 % changed a
  checkpoint writes <= 5 % of the full snapshot's bytes, and the longest processing
  pause at a checkpoint is <= 10 ms (the loop's detach + encode). The section also shows,
  as the compaction runs on a thread of the same interpreter, the longest gap of a busy
  main-thread loop while a compaction merges a chain, beside the same loop's gap alone.
* ``disk-wc`` and ``disk-10m`` (scripts/benchkit/disk.py, :class:`DiskWcGroup` and
  :class:`Disk10mGroup`; ``--only disk`` runs both): the disk keyed-state backend
  (``bittern.state.backend = disk``). ``disk-wc``: the exactly-once word count 1-1-1
  whose count bolt gets and puts ``state.keyed`` per word, on the memory and on the
  disk backend in the same run (records ``disk-wc-memory``, ``disk-wc-disk``, kind
  ``throughput``); target disk / memory words/s >= 0.5
  (:data:`benchkit.common.TARGET_DISK_OVER_MEMORY`). ``disk-10m``: a keyed count over
  ``--disk-keys`` (10,000,000) distinct keys on the disk backend; target: the count
  instance's peak RSS <= 300 MB (:data:`benchkit.common.TARGET_DISK_RSS_MB`).
* ``healthmgr`` (scripts/benchkit/healthmgr.py, :class:`HealthGroup`): auto-scaling by the
  health manager (issue 19), records ``hm-up``, ``hm-down``, ``hm-skew`` (kind
  ``healthmgr``): scale actions and seconds to converge, final / needed tasks (target 1;
  ``hm-up`` at most 2 actions).
"""
from __future__ import annotations

import json
import os
import shutil

from .common import ROOT, TARGET_CKPT_PAUSE_MS, TARGET_CKPT_SHARE_PCT, bittern_python
from .disk import Disk10mGroup, DiskWcGroup
from .healthmgr import HealthGroup
from .measure import Measured
from .report import f1, f2, fmt, median_or_none, ms, table

CKPT_SCRIPT = os.path.join(ROOT, "scripts", "ckpt_measure.py")


def _pct(v):
    return "%.2f%%" % v


def _bytes(v):
    return f"{v:,.0f}"


class CkptGroup:
    """``ckpt-1m``: checkpoint cost with a large keyed state (see the module docstring)."""

    row = "ckpt-1m"
    kind = "ckpt"

    def __init__(self, args, bt, workload):
        self.args = args
        self.bt = bt
        self.keys = args.ckpt_keys
        self.rounds = args.ckpt_rounds

    def run(self, run):
        name = self.bt.name("ckpt")
        # under BITTERN_HOME: the process's command line names the home (tests find strays by it)
        root = os.path.join(self.args.home, "ckpt-measure", name)
        cmd = [bittern_python(), CKPT_SCRIPT, "--keys", str(self.keys), "--rounds", str(self.rounds),
               "--dir", root, "--json"]
        pp = os.pathsep.join([ROOT] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])
        try:
            m = Measured(cmd, {"PYTHONPATH": pp, "PYTHONUNBUFFERED": "1"}, timeout=self.args.timeout).wait()
        finally:
            shutil.rmtree(root, ignore_errors=True)
        rec = m.base_record()
        rec.update(peer="bittern", row=self.row, keys=self.keys, rounds=self.rounds)
        problems = []
        if m.timed_out:
            problems.append(f"timed out after {m.timeout:.0f}s")
        result = None
        for line in m.out.splitlines():
            if line.startswith("CKPT {"):
                try:
                    result = json.loads(line[5:])
                except ValueError:
                    problems.append("ckpt_measure.py printed a CKPT line that is not JSON")
        if m.proc.returncode != 0:
            problems.append(f"ckpt_measure.py exited {m.proc.returncode}")
        if result is None:
            problems.append("ckpt_measure.py printed no CKPT line")
        else:
            rec.update({k: v for k, v in result.items() if k not in ("keys", "rounds")})
            if not result.get("restored_exact"):
                problems.append("the compacted base does not restore to exactly the live state")
            one = next((f for f in result.get("fractions", []) if f["changed_pct"] == 1.0), None)
            if one is not None:  # (flat, for the progress line and the --out records)
                rec.update(share_1pct=max(one["delta_bytes"]) / result["full_bytes"] * 100,
                           pause_max_1pct_ms=one["pause_max_ms"])
            gaps = [c["gap_max_ms"] for c in result.get("compactions", [])]
            if gaps:
                rec["compact_gap_max_ms"] = max(gaps)
                rec["compact_alone_max_ms"] = max(c["alone_max_ms"] for c in result["compactions"])
        rec.update(ok=not problems, problems=problems)
        if problems:
            rec["stderr_tail"] = m.err[-2000:]
        return [rec]

    def _mine(self, records):
        return [r for r in records if r.get("row") == self.row and r.get("kind") == self.kind and r.get("ok")]

    def render(self, records):
        mine = self._mine(records)
        every = [r for r in records if r.get("row") == self.row and r.get("kind") == self.kind]
        if not mine:
            return ""
        rows = []
        for i, frac in enumerate(mine[0]["fractions"]):
            runs = [r["fractions"][i] for r in mine]
            rows.append(["%g%%" % frac["changed_pct"], f"{frac['keys_changed']:,}",
                         fmt([r["delta_bytes_med"] for r in runs], _bytes),
                         fmt([r["share_pct"] for r in runs], _pct),
                         fmt([r["pause_med_ms"] for r in runs], ms), fmt([r["pause_max_ms"] for r in runs], ms),
                         fmt([r["write_med_ms"] for r in runs], ms)])
        head = (f"\ncheckpoint cost, {mine[0]['keys']:,} keys in keyed state ({self.row}: scripts/benchkit/ckpt.py "
                f"through instance/ckptwriter.py Checkpointing; {mine[0]['rounds']} checkpoints per fraction and "
                f"run, ok {len(mine)}/{len(every)}): full snapshot "
                f"{fmt([r['full_bytes'] for r in mine], _bytes)} bytes, encoded in "
                f"{fmt([r['full_encode_ms'] for r in mine], f1)} ms on the loop (what every checkpoint did before "
                "deltas); per checkpoint: the delta's bytes (median) and share of the full snapshot, the loop's "
                "pause (detach + encode; median and longest) and the writer thread's write + fsync (median)")
        out = [head, table(["changed", "keys changed", "delta bytes", "of full", "loop pause med ms",
                            "loop pause max ms", "write med ms"], rows)]
        comps = [c for r in mine for c in r.get("compactions", [])]
        if comps:
            out.append(f"compactions (chain merged into a new base on the writer thread, {len(comps)} in all): "
                       f"took {fmt([c['took_ms'] for c in comps], f1)} ms; a busy loop on the main thread "
                       f"meanwhile: longest gap {fmt([c['gap_max_ms'] for c in comps], ms)} ms, 99.9th percentile "
                       f"{fmt([c['gap_p999_ms'] for c in comps], f2)} ms; the same loop alone for as long: longest "
                       f"gap {fmt([c['alone_max_ms'] for c in comps], ms)} ms")
        return "\n".join(out)

    def targets(self, records):
        mine = self._mine(records)
        out = []
        share = [r["share_1pct"] for r in mine if r.get("share_1pct") is not None]
        if share:
            out.append((f"{self.row}, 1% changed: largest checkpoint / full snapshot (bytes)", fmt(share, _pct),
                        f"<= {TARGET_CKPT_SHARE_PCT:g}%", median_or_none(share),
                        lambda m: m <= TARGET_CKPT_SHARE_PCT))
        pause = [r["pause_max_1pct_ms"] for r in mine if r.get("pause_max_1pct_ms") is not None]
        if pause:
            out.append((f"{self.row}, 1% changed: longest loop pause at a checkpoint (ms)", fmt(pause, ms),
                        f"<= {TARGET_CKPT_PAUSE_MS:g}", median_or_none(pause), lambda m: m <= TARGET_CKPT_PAUSE_MS))
        # (the longest main-loop gap during a compaction is shown in the section, with the same
        # loop's gap alone for as long: on a loaded machine both are the scheduler's, not a verdict)
        return out


# Row groups by row name (see the module docstring).
ROW_GROUPS = {
    "ckpt-1m": CkptGroup,
    "disk-wc": DiskWcGroup,
    "disk-10m": Disk10mGroup,
    "healthmgr": HealthGroup,
}

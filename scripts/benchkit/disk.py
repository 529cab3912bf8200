"""The disk keyed-state backend's rows (issue 16): two row groups with the interface of
benchkit/groups.py (registered there in ``ROW_GROUPS``; ``--only disk`` runs both).

* ``disk-wc`` (:class:`DiskWcGroup`): the exactly-once word count 1-1-1 of ``eo-111``
  (a checkpoint every second, the counts committed through a transactional FileSink
  and checked exact) with the count bolt that keeps its counts in ``state.keyed``
  directly, a ``get`` and a ``put`` per word (``BENCH_KEYED_DIRECT=1``,
  scripts/bench_topologies/word_count.py), once with ``bittern.state.backend=memory``
  and once with ``disk``, one after the other in every run (the order alternates from
  run to run). Records: ``disk-wc-memory`` and ``disk-wc-disk``, kind ``throughput``
  (so they also appear in the main, exactly-once output and CPU tables), with
  ``count_rss_mb``, the peak RSS of the count task's process. Target: disk / memory
  words/s, per run, >= :data:`benchkit.common.TARGET_DISK_OVER_MEMORY` (the state, ~130
  words, fits in memory).
* ``disk-10m`` (:class:`Disk10mGroup`): scripts/bench_topologies/keyed_count.py, a
  keyed count over ``--disk-keys`` (10,000,000) distinct keys, exactly once, bounded
  (the spout emits 0..N-1 once each, then ``done()``; ``bittern run --until-done``),
  the count bolt doing ``state.keyed`` get + put per tuple on the disk backend, engine
  defaults otherwise. Figures: keys/s (first key emitted -> last key counted), the
  count task's peak RSS sampled every 50 ms over the whole run, its RSS over time
  (``count_rss_series``: [seconds since launch, MB], the largest sample of each of ~40
  slices of the run), and the checkpoint files' size at the end. Checked: the count
  task saw N tuples and inserted N keys (counters kept in its checkpointed state),
  and 1,000 evenly spaced keys read back at close have count 1; the state database's
  directory is gone after the run. Target: peak RSS <= :data:`TARGET_DISK_RSS_MB`.
"""
from __future__ import annotations

import os
import shutil

from .common import DISK_TOPOLOGY, ROW_CONFIG, TARGET_DISK_OVER_MEMORY, TARGET_DISK_RSS_MB
from .measure import Measured
from .report import f0, f1, f2, fmt, human, median_or_none, table

WC_SPEC = ("EFFECTIVELY_ONCE", "1,1,1", 1)  # eo-111's: reliability mode, parallelism, containers
BACKENDS = ("memory", "disk")
SERIES_SLICES = 40


def count_rss(by_role):
    """The peak RSS (MB) of the count task's process, from ``rss_by_process_mb``."""
    vals = [mb for role, mb in (by_role or {}).items() if role.startswith("count[")]
    return max(vals) if vals else None


def _ok(records, row, kind):
    return [r for r in records if r.get("row") == row and r.get("kind") == kind and r.get("ok")]


class DiskWcGroup:
    """``disk-wc``: memory vs disk backend on the word count's per-word path (see the module docstring)."""

    row = "disk-wc"
    kind = "throughput"

    def __init__(self, args, bt, workload):
        self.args = args
        self.bt = bt
        self.n = args.n

    def run(self, run):
        out = []
        for backend in BACKENDS if run % 2 == 0 else BACKENDS[::-1]:
            conf = dict(ROW_CONFIG["eo-111"], **{"bittern.state.backend": backend})
            rec = self.bt.run_wc(f"{self.row}-{backend}", "throughput", self.n, spec=WC_SPEC, row_config=conf,
                                 row_env={"BENCH_KEYED_DIRECT": "1"})
            rec.update(backend=backend, count_rss_mb=count_rss(rec.get("rss_by_process_mb")))
            out.append(rec)
        return out

    def ratios(self, records):
        """disk / memory words/s, per run (both ok in that run)."""
        mem = {r["run"]: r["words_per_s"] for r in _ok(records, f"{self.row}-memory", self.kind)
               if r.get("words_per_s")}
        disk = {r["run"]: r["words_per_s"] for r in _ok(records, f"{self.row}-disk", self.kind)
                if r.get("words_per_s")}
        return [disk[i] / mem[i] for i in sorted(set(mem) & set(disk))]

    def render(self, records):
        rows = []
        for backend in BACKENDS:
            row = f"{self.row}-{backend}"
            every = [r for r in records if r.get("row") == row and r.get("kind") == self.kind]
            if not every:
                continue
            ok = [r for r in every if r.get("ok")]
            rows.append([row, backend, f"{len(ok)}/{len(every)}", fmt([r.get("words_per_s") for r in ok], human),
                         fmt([r.get("count_rss_mb") for r in every], f1),
                         f"{sum(1 for r in every if r.get('sink_exact'))}/{len(every)}"])
        if not rows:
            return ""
        ratios = self.ratios(records)
        return "\n".join([
            f"\nstate backends on the word count's per-word path ({self.row}: eo-111, exactly once 1-1-1 with a "
            "checkpoint a second and the FileSink's output checked, but the count bolt gets and puts state.keyed "
            "per word, BENCH_KEYED_DIRECT=1; bittern.state.backend memory and disk one after the other in each run; "
            "the state, ~130 words, fits in memory):",
            table(["row", "backend", "ok", "words/s", "count instance peak RSS MB", "committed output exact"], rows),
            f"disk / memory words/s, per run: {fmt(ratios, f2)}"])

    def targets(self, records):
        ratios = self.ratios(records)
        if not ratios:
            return []
        return [(f"{self.row}: disk / memory backend words/s (EO 1-1-1, get + put per word)", fmt(ratios, f2),
                 f">= {TARGET_DISK_OVER_MEMORY:g}", median_or_none(ratios), lambda m: m >= TARGET_DISK_OVER_MEMORY)]


class Disk10mGroup:
    """``disk-10m``: the disk backend's memory with many distinct keys (see the module docstring)."""

    row = "disk-10m"
    kind = "disk"

    def __init__(self, args, bt, workload):
        self.args = args
        self.bt = bt
        self.keys = args.disk_keys

    def run(self, run):
        bt = self.bt
        name = bt.name(self.row)
        confs = {"topology.reliability.mode": "EFFECTIVELY_ONCE", "topology.stmgrs": 1, "bench.keys": self.keys}
        confs.update(bt.extra)
        confs["bittern.state.backend"] = "disk"
        # ~40-60k keys/s expected: room for a machine twice as slow, and the end's commit
        timeout = max(self.args.timeout, 120 + self.keys / 15_000)
        m = Measured(bt.cmd(name, confs, topology=DISK_TOPOLOGY), bt.env("throughput", "1,1,1", "EFFECTIVELY_ONCE"),
                     timeout=timeout).wait()
        rec = m.base_record()
        rec.update(peer="bittern", row=self.row, reliability="EFFECTIVELY_ONCE", backend="disk", keys=self.keys)
        bench, summary = bt.parse(m.out)
        spouts = [b for b in bench if b.get("bench") == "keyspout"]
        counts = [b for b in bench if b.get("bench") == "keycount"]
        problems = []
        if m.timed_out:
            problems.append(f"timed out after {m.timeout:.0f}s")
        if m.proc.returncode != 0:
            problems.append(f"bittern run exited {m.proc.returncode}")
        if len(spouts) != 1 or len(counts) != 1:
            problems.append(f"{len(spouts)}/1 spout and {len(counts)}/1 count tasks reported")
        else:
            sp, ct = spouts[0], counts[0]
            rec.update(emitted=sp["emitted"], tuples=ct["tuples"], inserted=ct["inserted"],
                       sample_checked=ct["sample_checked"], sample_bad=ct["sample_bad"])
            if (sp["emitted"], ct["tuples"], ct["inserted"]) != (self.keys,) * 3:
                problems.append(f"the spout emitted {sp['emitted']:,} keys, the count bolt saw {ct['tuples']:,} "
                                f"tuples and inserted {ct['inserted']:,} keys; expected {self.keys:,} of each")
            if ct["sample_bad"]:
                problems.append(f"{ct['sample_bad']} of {ct['sample_checked']} keys read back at close do not "
                                "have count 1")
            if sp.get("t_first") and ct.get("t_last") and ct["t_last"] > sp["t_first"]:
                rec.update(startup_s=sp["t_first"] - m.t0, proc_s=ct["t_last"] - sp["t_first"])
                rec["keys_per_s"] = ct["tuples"] / rec["proc_s"]
        if summary is not None:
            rec["drained"] = summary.get("drained")
        rec["rss_by_process_mb"] = bt._rss_by_role(m)
        rec["count_rss_mb"] = count_rss(rec["rss_by_process_mb"])
        pts = self._count_samples(m)
        rec["count_rss_series"] = self._series(m, pts)
        t_last = counts[0].get("t_last") if len(counts) == 1 else None
        before = [rss for t, rss in pts if t_last is not None and t <= t_last]
        if before:  # (the last sample before the last key was counted)
            rec["count_rss_end_mb"] = round(before[-1] / 2**20, 1)
        ckpt_dir = os.path.join(bt.home, "checkpoints", name)
        rec["ckpt_mb"] = _tree_bytes(ckpt_dir) / 2**20
        db_dir = os.path.join(bt.home, "run", name, "state-db")
        if _tree_bytes(db_dir):
            problems.append(f"the state database was left behind: {db_dir} ({_tree_bytes(db_dir) / 2**20:.0f} MB)")
        shutil.rmtree(db_dir, ignore_errors=True)
        bt.clean_checkpoints(name)  # (hundreds of MB at 10M keys, failed run or not)
        rec.update(ok=not problems, problems=problems)
        if problems:
            rec["stderr_tail"] = m.err[-2000:]
            rec["logs"] = os.path.join(bt.home, "logs", name)
        else:
            bt._clean_logs(name)
        return [rec]

    @staticmethod
    def _count_samples(m):
        """The count task's RSS samples, [(time, bytes)] (a zombie's 0 left out)."""
        pids = [pid for pid, role in m.role.items() if role.startswith("count[")]
        return sorted(p for pid in pids for p in m.rss_series.get(pid, ()) if p[1] > 0)

    @staticmethod
    def _series(m, pts):
        """The count task's RSS over the run: [seconds since launch, MB], the largest
        sample of each of ~SERIES_SLICES equal slices of the run."""
        if not pts:
            return []
        width = max(1e-9, (pts[-1][0] - m.t0) / SERIES_SLICES)
        out = {}
        for t, rss in pts:
            i = int((t - m.t0) / width)
            out[i] = max(out.get(i, 0), rss)
        return [[round((i + 1) * width, 1), round(rss / 2**20, 1)] for i, rss in sorted(out.items())]

    def render(self, records):
        every = [r for r in records if r.get("row") == self.row and r.get("kind") == self.kind]
        ok = [r for r in every if r.get("ok")]
        if not every:
            return ""
        keys = every[0]["keys"]
        out = [f"\ndisk keyed state with {keys:,} distinct keys ({self.row}: scripts/bench_topologies/keyed_count.py, "
               "exactly once, spout 0..N-1 -> fields grouping -> a count bolt doing state.keyed get + put per tuple, "
               f"bittern.state.backend=disk, engine defaults otherwise; ok {len(ok)}/{len(every)}):",
               table(["keys/s", "count instance peak RSS MB", "... at the last key counted MB", "run s", "startup s",
                      "checkpoint files at the end MB"],
                     [[fmt([r.get("keys_per_s") for r in ok], human), fmt([r.get("count_rss_mb") for r in ok], f1),
                       fmt([r.get("count_rss_end_mb") for r in ok], f1), fmt([r.get("wall_s") for r in ok], f0),
                       fmt([r.get("startup_s") for r in ok], f1), fmt([r.get("ckpt_mb") for r in ok], f0)]])]
        last = every[-1].get("count_rss_series") or []  # (the last run, failed or not: what RSS did)
        if last:
            step = max(1, len(last) // 12)
            pts = last[step - 1::step]
            if pts[-1] != last[-1]:
                pts.append(last[-1])
            out.append("count instance RSS over the last run (seconds since launch: MB, the peak of each slice): "
                       + ", ".join(f"{t:g}: {mb:.0f}" for t, mb in pts))
        return "\n".join(out)

    def targets(self, records):
        ok = _ok(records, self.row, self.kind)
        rss = [r["count_rss_mb"] for r in ok if r.get("count_rss_mb") is not None]
        if not rss:
            return []
        return [(f"{self.row}: count instance peak RSS, {ok[0]['keys']:,} keys on disk (MB)", fmt(rss, f1),
                 f"<= {TARGET_DISK_RSS_MB:g}", median_or_none(rss), lambda m: m <= TARGET_DISK_RSS_MB)]


def _tree_bytes(path):
    total = 0
    for d, _, files in os.walk(path):
        for f in files:
            try:
                total += os.path.getsize(os.path.join(d, f))
            except OSError:
                pass
    return total

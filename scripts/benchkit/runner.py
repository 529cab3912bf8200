"""Bittern's rows: ``bittern run`` of the bench topology, throughput and latency runs."""
from __future__ import annotations

import glob
import json
import os
import re
import shutil
import time
from collections import Counter

import psutil

from .common import BITTERN_ROWS, ROOT, ROW_CONFIG, ROW_SPLIT, TOPOLOGY, bittern_python
from .measure import Measured, pct, role_of


# ---------------------------------------------------------------------------------------
# Bittern
# ---------------------------------------------------------------------------------------

class BitternRunner:
    def __init__(self, args, workload):
        self.args = args
        self.workload = workload
        self.py = bittern_python()
        self.home = args.home
        os.makedirs(self.home, exist_ok=True)
        self.extra = {}
        for kv in args.config:
            k, sep, v = kv.partition("=")
            if not sep:
                raise SystemExit(f"error: --config {kv!r}: expected key=value")
            self.extra[k] = v

    def cmd(self, name, confs, until_done=True, duration=None, topology=TOPOLOGY, drain_timeout=60):
        c = [self.py, "-m", "bittern", "run", topology, "--name", name, "--json",
             "--drain-timeout", str(drain_timeout)]
        if until_done:
            c.append("--until-done")
        if duration:
            c += ["--duration", str(duration)]
        for k, v in confs.items():
            c += ["--config", f"{k}={v}"]
        return c

    def env(self, mode, par, rel=None, row=None):
        # PYTHONPATH: the engine under test is the one of this tree, whatever is installed
        pp = os.pathsep.join([ROOT] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])
        env = {"BITTERN_HOME": self.home, "BENCH_MODE": mode, "BENCH_PAR": par,
               "BENCH_STATEFUL": "1" if rel == "EFFECTIVELY_ONCE" else "0",
               "PYTHONUNBUFFERED": "1", "PYTHONPATH": pp}
        if row in ROW_SPLIT:
            env.update(BENCH_SPLIT=ROW_SPLIT[row], BENCH_PYSTORM_PYTHON=self.pystorm_python())
        return env

    def pystorm_python(self):
        """The python of a virtualenv with pystorm from PyPI (the multilang rows' split bolt)."""
        if getattr(self, "_pystorm", None) is None:
            from .peers import Peers
            peers = Peers(self.args)
            self._pystorm = peers.venv("pystorm")
            if self._pystorm is None:
                raise RuntimeError("; ".join(peers.notes) or "no pystorm virtualenv")
        return self._pystorm

    def name(self, tag):
        """A fresh topology name per run (so the logs of a failed run stay apart)."""
        self._seq = getattr(self, "_seq", 0) + 1
        return f"bench-{tag}-{os.getpid()}-{self._seq}"

    @staticmethod
    def parse(out):
        bench, summary = [], None
        for line in out.splitlines():
            i = line.find("BENCH {")
            if i >= 0:
                try:
                    bench.append(json.loads(line[i + 6:]))
                except ValueError:
                    pass
            elif line.startswith("{"):
                try:
                    summary = json.loads(line)
                except ValueError:
                    pass
        return bench, summary

    def run_wc(self, row, mode, n, rate=None, timeout=None, spec=None, row_config=None, row_env=None):
        """One run of word count in ``mode`` (throughput | latency). A row that is not in
        BITTERN_ROWS (a row group's: benchkit/disk.py) gives its ``spec`` (reliability
        mode, parallelism, containers), ``row_config`` (applied after ``--config``) and
        ``row_env`` (the topology's BENCH_* switches)."""
        rel, par, stmgrs = spec or BITTERN_ROWS.get(row) or ("ATMOST_ONCE", "1,1,1", 1)
        confs = {"topology.reliability.mode": rel, "topology.stmgrs": stmgrs, "bench.sentences": n}
        confs.update(ROW_CONFIG.get(row, {}))
        confs.update(self.extra)
        confs.update(row_config or {})
        if rate:
            confs["bench.rate"] = round(rate, 3)
        name = self.name(row)
        env = self.env(mode, par, rel, row)
        env.update(row_env or {})
        sink_dir = None
        if rel == "EFFECTIVELY_ONCE":  # the counts also go out through a transactional FileSink
            sink_dir = env["BENCH_SINK_DIR"] = os.path.join(self.home, "sink", name)
            shutil.rmtree(sink_dir, ignore_errors=True)
        m = Measured(self.cmd(name, confs), env, timeout=timeout or self.args.timeout).wait()
        rec = m.base_record()
        rec.update({"peer": "bittern", "row": row, "mode": mode, "reliability": rel, "par": par,
                    "stmgrs": stmgrs, "sentences_target": n})
        bench, summary = self.parse(m.out)
        spouts = [b for b in bench if b.get("bench") == "spout"]
        counts = [b for b in bench if b.get("bench") == "count"]
        spout_par, _, count_par = (int(x) for x in par.split(","))
        total = Counter()
        for b in counts:
            total.update(b.get("counts") or {})
        sentences = sum(b.get("sentences", 0) for b in spouts)
        words = sum(b.get("words", 0) for b in counts)
        firsts = [b["t_first"] for b in spouts if b.get("t_first")]
        lasts = [b["t_last"] for b in counts if b.get("t_last")]
        problems = []
        if m.timed_out:
            problems.append(f"timed out after {m.timeout:.0f}s")
        if m.proc.returncode != 0:
            problems.append(f"bittern run exited {m.proc.returncode}")
        if len(spouts) != spout_par or len(counts) != count_par:
            problems.append(f"{len(spouts)}/{spout_par} spout and {len(counts)}/{count_par} count tasks reported")
        if dict(total) != self.workload.expected_counts(n * spout_par):
            problems.append(f"counts differ from the expected counts ({words} words, "
                            f"expected {self.workload.expected_words(n * spout_par)})")
        if rel == "ATLEAST_ONCE":
            acked = sum(b.get("acked", 0) for b in spouts)
            failed = sum(b.get("failed", 0) for b in spouts)
            rec.update(acked=acked, failed=failed)
            if acked != n * spout_par or failed:
                problems.append(f"{acked} of {n * spout_par} trees acked, {failed} failed")
            ack_lasts = [b["t_last_ack"] for b in spouts if b.get("t_last_ack")]
            if ack_lasts and firsts:
                rec["last_ack_s"] = max(ack_lasts) - min(firsts)
        if sink_dir is not None:
            sinks = [b for b in bench if b.get("bench") == "sink"]
            problems += check_committed(rec, sink_dir, self.workload.expected_counts(n * spout_par))
            rec["sink_rows_received"] = sum(b.get("rows", 0) for b in sinks)
            commits = [b["t_commit"] for b in sinks if b.get("t_commit")]
            if commits:
                rec["t_commit"] = max(commits)
        if summary is not None:
            rec["drained"] = summary.get("drained")
            rec["stmgr_dropped"] = summary.get("stmgr_dropped")
            rec["components"] = summary.get("components")
        rec.update(sentences=sentences, words=words, ok=not problems, problems=problems)
        if firsts and lasts:
            t_first, t_end = min(firsts), max(lasts)
            rec.update(t_first=t_first, t_end=t_end, startup_s=t_first - m.t0, proc_s=t_end - t_first)
            if t_end > t_first:
                rec["sent_per_s"] = sentences / (t_end - t_first)
                rec["words_per_s"] = words / (t_end - t_first)
            if rec.get("t_commit") and rec["t_commit"] > t_first:
                # (exactly once) the last word counted -> its count committed at the sink
                rec["commit_after_s"] = rec["t_commit"] - t_end
                rec["committed_words_per_s"] = words / (rec["t_commit"] - t_first)
        rec["rss_by_process_mb"] = self._rss_by_role(m)
        if rec.get("proc_s"):
            rec["cpu_window_s"] = self._cpu_by_group(m, rec["t_first"], rec["t_end"])
        if mode == "latency":
            lat = [x for b in counts for x in (b.get("lat_ms") or [])]
            rec.update(rate=rate, lat_samples=len(lat), p50_ms=pct(lat, 0.50), p90_ms=pct(lat, 0.90),
                       p99_ms=pct(lat, 0.99), max_ms=max(lat) if lat else None)
        if problems:
            rec["stderr_tail"] = m.err[-2000:]
            rec["logs"] = os.path.join(self.home, "logs", name)
            if sink_dir is not None and os.path.isdir(sink_dir):
                rec["sink_dir"] = sink_dir  # kept to look at
        else:
            self._clean_logs(name)
            if sink_dir is not None:
                shutil.rmtree(sink_dir, ignore_errors=True)
            if rel == "EFFECTIVELY_ONCE":
                self.clean_checkpoints(name)
        return rec

    def _rss_by_role(self, m):
        out = {}
        for pid, role in m.role.items():
            out[role] = round(max(out.get(role, 0), m.rss_peak.get(pid, 0) / 2**20), 1)
        return out

    def _cpu_by_group(self, m, t_a, t_b):
        """CPU seconds each kind of process used between ``t_a`` and ``t_b`` (the tasks of
        one component, and the stream managers, are added up)."""
        out = {}
        for pid, role in m.role.items():
            group = role.split("[")[0].split("-")[0] if role != "bittern-cli" else role
            out[group] = out.get(group, 0.0) + max(0.0, m.cpu_at(pid, t_b) - m.cpu_at(pid, t_a))
        return out

    def clean_checkpoints(self, name):
        """Remove the checkpoint files of a finished run (bittern.checkpoint.dir's default,
        ``$BITTERN_HOME/checkpoints/<topology>``): with a large keyed state they are large."""
        shutil.rmtree(os.path.join(self.home, "checkpoints", name), ignore_errors=True)

    def _clean_logs(self, name):
        d = os.path.join(self.home, "logs", name)
        if os.path.isdir(d):
            for f in os.listdir(d):
                try:
                    os.unlink(os.path.join(d, f))
                except OSError:
                    pass
            try:
                os.rmdir(d)
            except OSError:
                pass

    def idle_cpu(self, settle, window):
        """An idle topology (1-1-1, the spout emits nothing): CPU % and RSS per process."""
        name = self.name("idle")
        cmd = self.cmd(name, dict(self.extra, **{"topology.stmgrs": 1}), until_done=False,
                       duration=settle + window + 60)
        m = Measured(cmd, self.env("idle", "1,1,1"), timeout=settle + window + 120)
        expected = 1 + 1 + 1 + 1 + 3  # cli, supervisor, tmaster, stmgr, 3 instances
        status = os.path.join(self.home, "state", "status", f"{name}.json")
        deadline = time.monotonic() + 60
        procs = []
        while time.monotonic() < deadline and m.proc.poll() is None:
            procs = m.tree()
            try:  # the topology master says RUNNING once every task has initialized
                with open(status) as f:
                    running = json.load(f).get("phase") == "RUNNING"
            except (OSError, ValueError):
                running = False
            if running and len(procs) >= expected:
                break
            time.sleep(0.1)
        rec = {"peer": "bittern", "row": "idle-cpu", "mode": "idle", "settle_s": settle, "window_s": window}
        problems = []
        if len(procs) < expected:
            problems.append(f"only {len(procs)} of {expected} processes came up")
        else:
            time.sleep(settle)
            procs = m.tree()
            before = {}
            for p in procs:
                try:
                    ct = p.cpu_times()
                    before[p.pid] = (p, ct.user + ct.system)
                except psutil.Error:
                    pass
            t_a = time.monotonic()
            time.sleep(window)
            dt = time.monotonic() - t_a
            plans = {}
            per = {}
            for pid, (p, c0) in before.items():
                try:
                    with p.oneshot():
                        ct = p.cpu_times()
                        rss = p.memory_info().rss
                        role = role_of(p.cmdline(), plans)
                except psutil.Error:
                    problems.append(f"process {pid} disappeared during the idle window")
                    continue
                per[role] = {"cpu_pct": (ct.user + ct.system - c0) / dt * 100, "rss_mb": rss / 2**20}
            rec["processes"] = per
            rec["total_rss_mb"] = sum(v["rss_mb"] for v in per.values())
        m.interrupt()
        m.timeout = 60
        m.wait()
        if m.timed_out or m.proc.returncode != 0:
            problems.append(f"bittern run exited {m.proc.returncode}" + (" (timed out)" if m.timed_out else ""))
            rec["stderr_tail"] = m.err[-2000:]
        rec.update(ok=not problems, problems=problems, rc=m.proc.returncode,
                   foreign_cpu_pct=m.foreign_cpu_pct)
        if not problems:
            self._clean_logs(name)
        return rec


_COMMITTED = re.compile(r"^counts-(\d+)-(\d+)\.jsonl$")


def check_committed(rec, sink_dir, expected):
    """The exactly-once rows' committed output (scripts/bench_topologies/word_count.py,
    ``BENCH_SINK_DIR``): ``counts-<checkpoint>-<task>.jsonl`` files of ``[word, running
    count]`` lines. Exact when every word's largest committed count is its expected count
    and each word's committed counts strictly increase with the checkpoint (a count is
    committed once per checkpoint it changed in: none replayed, none rolled back), and
    nothing is left pre-committed or staged (the end was committed). Adds the figures to
    ``rec``; returns the problems."""
    problems = []
    if not os.path.isdir(sink_dir):
        return [f"the sink wrote nothing: no directory {sink_dir}"]
    by_word = {}  # word -> [(checkpoint, count)]
    files = rows = 0
    checkpoints = set()
    for name in sorted(os.listdir(sink_dir)):
        m = _COMMITTED.match(name)
        if m is None:
            continue
        files += 1
        checkpoints.add(int(m.group(1)))
        with open(os.path.join(sink_dir, name), encoding="utf-8") as f:
            for line in f:
                if not line.strip():
                    continue
                try:
                    word, count = json.loads(line)
                except ValueError:
                    problems.append(f"{name}: a line that is not [word, count]: {line.strip()[:60]!r}")
                    break
                rows += 1
                by_word.setdefault(word, []).append((int(m.group(1)), count))
    final = {w: max(c for _, c in seq) for w, seq in by_word.items()}
    rec.update(sink_files=files, sink_rows=rows, sink_checkpoints=len(checkpoints))
    wrong = sorted(w for w in set(final) | set(expected) if final.get(w) != expected.get(w))
    if wrong:
        eg = ", ".join(f"{w!r} {final.get(w)} (want {expected.get(w)})" for w in wrong[:3])
        problems.append(f"committed output is not exact: {len(wrong)} of {len(expected)} words differ "
                        f"from the expected counts, e.g. {eg}")
    for w, seq in sorted(by_word.items()):
        seq.sort()
        if any(a[0] >= b[0] or a[1] >= b[1] for a, b in zip(seq, seq[1:])):
            problems.append(f"committed counts of {w!r} do not increase once per checkpoint: {seq[:6]}")
            break
    left = sorted(glob.glob(os.path.join(sink_dir, ".pending-*")) + glob.glob(os.path.join(sink_dir, ".staging-*")))
    if left:
        problems.append(f"{len(left)} sink file(s) left uncommitted at the end, e.g. {os.path.basename(left[0])}")
    rec["sink_exact"] = not problems
    return problems

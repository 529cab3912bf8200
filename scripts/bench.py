#!/usr/bin/env python3
"""Bittern's benchmark: the standard word-count workload, and its peers beside it.

    .venv/bin/python scripts/bench.py                    # the default matrix, 3 runs
    .venv/bin/python scripts/bench.py --peers            # ... with the peers in the same run
    .venv/bin/python scripts/bench.py --quick --only amo-111    # smoke test (1 run, small N)

The workload (../shared/bench/wc_common.py): sentence i is SENTENCES[i % 20]
(5-12 words), split into words, counted per word (fields grouping); the final
counts are checked against the expected counts (the ``ok`` column).

Rows (pick with ``--only``, comma-separated, a prefix matches: ``amo``, ``bittern``...):

* ``amo-111``, ``alo-111``, ``amo-122``, ``alo-122``: Bittern word count
  (scripts/bench_topologies/word_count.py) at most / at least once, parallelism
  spout-split-count 1-1-1 in one container or 1-2-2 in two. Each run is a
  throughput run (N sentences as fast as possible: sentences/s, words/s, startup,
  peak RSS of the whole process tree) followed by a latency run at half the rate
  just measured (p50/p99 end-to-end latency: spout emit -> count bolt).
* ``eo-111``: the same word count exactly once (``EFFECTIVELY_ONCE``, a checkpoint
  every second: ``topology.stateful.checkpoint.interval.seconds=1``), 1-1-1 in one
  container; the spout's position and the counts (keyed) are checkpointed state
  (``BENCH_STATEFUL=1``). Compared with ``alo-111`` (target EO / ALO >= 0.75).
* ``idle-latency``: one sentence every 200 ms; the median time a word takes to
  cross the topology.
* ``idle-cpu``: a topology whose spout emits nothing, for ~10 s: CPU % and RSS of
  every process (the bolts there are trivial bolts).
* with ``--peers``: ``plain`` (one Python process, the floor), ``zmq`` (three
  pyzmq processes, msgpack batches of 100: the transport ceiling) and ``bytewax``
  (stateful_map), run from ``--peers-dir`` in their own virtualenvs, created on
  demand under /tmp/bittern-bench/.

Bittern runs use ``bittern run scripts/bench_topologies/word_count.py --until-done``
with the engine of this tree (PYTHONPATH), engine defaults unless ``--config k=v``
says otherwise, and a private BITTERN_HOME (``--home``, default
/tmp/bittern-bench/home); every process a run starts stops with it (a run that
overstays ``--timeout`` is killed with its whole process tree). ``--out FILE``
appends one JSON line per run (raw figures, per-process peak RSS and CPU).

Every figure is the median [min-max] over ``--runs`` runs; runs of all rows are
interleaved (run 1 of every row, then run 2...), and the ratios are computed
per run, between rows measured in that same run. Peak RSS is sampled every
50 ms and summed over every live process of the tree (``bittern run`` itself,
the supervisor, topology master, stream managers and instances), as the shared
harness (../shared/bench/bench.py) does; startup = first sentence emitted -
launch. ``foreign CPU%`` is the CPU used by every other process of the machine
during the run (% of one core): a high value means the run was contaminated.
"""
from __future__ import annotations

import argparse
import ast
import importlib.util
import json
import os
import signal
import statistics as st
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VENV_PY = os.path.join(ROOT, ".venv", "bin", "python")

try:
    import psutil
except ImportError:  # run with a python that lacks psutil: use the project's virtualenv
    if os.path.exists(VENV_PY) and os.path.realpath(sys.executable) != os.path.realpath(VENV_PY):
        os.execv(VENV_PY, [VENV_PY, os.path.abspath(__file__)] + sys.argv[1:])
    raise

TOPOLOGY = os.path.join(ROOT, "scripts", "bench_topologies", "word_count.py")
WORK = "/tmp/bittern-bench"
SAMPLE_EVERY = 0.05
FOREIGN_CPU_WARN = 50.0  # % of one core used by other processes during a run

PEER_VENVS = {
    "base": ["pyzmq", "msgpack", "psutil"],
    "bytewax": ["bytewax==0.21.*", "psutil"],
}

BITTERN_ROWS = {  # key: (reliability mode, parallelism spout,split,count, containers)
    "amo-111": ("ATMOST_ONCE", "1,1,1", 1),
    "alo-111": ("ATLEAST_ONCE", "1,1,1", 1),
    "amo-122": ("ATMOST_ONCE", "1,2,2", 2),
    "alo-122": ("ATLEAST_ONCE", "1,2,2", 2),
    "eo-111": ("EFFECTIVELY_ONCE", "1,1,1", 1),
}
ROW_CONFIG = {  # extra config of a row (before --config)
    "eo-111": {"topology.stateful.checkpoint.interval.seconds": 1},
}
PROBES = ["idle-latency", "idle-cpu"]
PEER_ROWS = ["plain", "zmq", "bytewax"]

# Targets of the benchmark's issue (reported, never asserted).
TARGET_VS_BYTEWAX = 1.0
TARGET_VS_ZMQ = 0.30
TARGET_ALO_OVER_AMO = 0.60
TARGET_EO_OVER_ALO = 0.75
TARGET_P99_MS = 50.0
TARGET_IDLE_CROSS_MS = 10.0
TARGET_IDLE_CPU_PCT = 1.0
TARGET_BOLT_RSS_MB = 40.0
TARGET_WC_RSS_MB = 300.0


def bittern_python():
    """The interpreter that runs ``bittern``: this one if it can import bittern."""
    if importlib.util.find_spec("bittern") is not None:
        return sys.executable
    return VENV_PY


# ---------------------------------------------------------------------------------------
# The workload
# ---------------------------------------------------------------------------------------

def topology_sentences():
    """SENTENCES of the bench topology, read without importing it."""
    with open(TOPOLOGY) as f:
        tree = ast.parse(f.read())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "SENTENCES" for t in node.targets):
            return ast.literal_eval(node.value)
    raise RuntimeError(f"{TOPOLOGY} defines no SENTENCES")


class Workload:
    """Expected results; from ../shared/bench/wc_common.py when it is there (and then the
    topology's sentences must be identical to it)."""

    def __init__(self, peers_dir):
        self.sentences = topology_sentences()
        self.source = TOPOLOGY
        self.wc = None
        path = os.path.join(peers_dir, "wc_common.py") if peers_dir else None
        if path and os.path.exists(path):
            spec = importlib.util.spec_from_file_location("bench_wc_common", path)
            mod = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(mod)
            if list(mod.SENTENCES) != list(self.sentences):
                raise SystemExit(f"error: the SENTENCES of {TOPOLOGY} differ from {path}: "
                                 "the benchmark would not run the standard workload")
            self.wc = mod
            self.source = path

    def expected_counts(self, n):
        if self.wc is not None:  # (its Counter keeps words of unseen sentences at 0)
            return {w: c for w, c in self.wc.expected_counts(n).items() if c}
        c = Counter()
        full, rem = divmod(n, len(self.sentences))
        for j, s in enumerate(self.sentences):
            for w in s.split():
                c[w] += full + (1 if j < rem else 0)
        return {w: k for w, k in c.items() if k}

    def expected_words(self, n):
        return sum(self.expected_counts(n).values())


# ---------------------------------------------------------------------------------------
# Running one measured command (the shared harness's method: tree RSS every 50 ms)
# ---------------------------------------------------------------------------------------

def _sys_busy():
    t = psutil.cpu_times()
    return t.user + t.nice + t.system + t.irq + t.softirq + getattr(t, "steal", 0.0)


def kill_tree(pid):
    """Kill a process we started and everything below it."""
    try:
        root = psutil.Process(pid)
        procs = root.children(recursive=True) + [root]
    except psutil.Error:
        return
    for p in procs:
        try:
            p.kill()
        except psutil.Error:
            pass
    psutil.wait_procs(procs, timeout=5)


class Measured:
    """Starts ``cmd``, samples its process tree until it exits, keeps the output."""

    def __init__(self, cmd, env_extra=None, timeout=300.0, cwd=ROOT):
        self.cmd = cmd
        os.makedirs(WORK, exist_ok=True)
        fd, self.first_file = tempfile.mkstemp(prefix="wcfirst_", dir=WORK)
        os.close(fd)
        env = dict(os.environ)
        env.update(env_extra or {})
        env["WC_FIRST_FILE"] = self.first_file
        self.t0 = time.time()
        env["WC_T0"] = repr(self.t0)
        self.busy0 = _sys_busy()
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
                                     text=True, cwd=cwd)
        self.ps = psutil.Process(self.proc.pid)
        self.timeout = timeout
        self.peak = 0
        self.max_procs = 0
        self.cpu_seen = {}  # pid -> cpu seconds (user+system)
        self.cpu_series = {}  # pid -> [(time, cpu seconds)], one point per sample
        self.rss_peak = {}  # pid -> peak RSS
        self.cmdline = {}  # pid -> command line
        self.role = {}  # pid -> role (see role_of)
        self._plans = {}
        self._lock = threading.Lock()
        self.sampler_errors = []
        self._stop = threading.Event()
        self._th = threading.Thread(target=self._sampler, daemon=True)
        self._th.start()

    def tree(self):
        try:
            return [self.ps] + self.ps.children(recursive=True)
        except psutil.Error:
            return []

    def _sample(self):
        tot = n = 0
        for q in self.tree():
            try:
                with q.oneshot():
                    rss = q.memory_info().rss
                    ct = q.cpu_times()
                    cmd = q.cmdline()
                    if cmd and self.cmdline.get(q.pid) != cmd:  # (a zombie's is empty)
                        # a child is first seen between fork and exec with its parent's command line
                        self.cmdline[q.pid] = cmd
                        self.role.pop(q.pid, None)
                    if q.pid not in self.role:
                        # the role now, while the run plan it may need still exists
                        role = role_of(self.cmdline[q.pid], self._plans)
                        if not role.startswith("?"):
                            self.role[q.pid] = role
            except psutil.Error:
                continue
            tot += rss
            n += 1
            now = time.time()
            with self._lock:
                self.cpu_seen[q.pid] = max(self.cpu_seen.get(q.pid, 0.0), ct.user + ct.system)
                self.cpu_series.setdefault(q.pid, []).append((now, ct.user + ct.system))
                self.rss_peak[q.pid] = max(self.rss_peak.get(q.pid, 0), rss)
        self.peak = max(self.peak, tot)
        self.max_procs = max(self.max_procs, n)

    def _sampler(self):
        while not self._stop.is_set():
            try:
                self._sample()
            except Exception as e:  # noqa: BLE001 - a race with a dying process must not end sampling
                self.sampler_errors.append(f"{type(e).__name__}: {e}")
            self._stop.wait(SAMPLE_EVERY)

    def wait(self):
        try:
            self.out, self.err = self.proc.communicate(timeout=self.timeout)
            self.timed_out = False
        except subprocess.TimeoutExpired:
            kill_tree(self.proc.pid)
            self.out, self.err = self.proc.communicate()
            self.timed_out = True
        self.t_exit = time.time()
        self._stop.set()
        self._th.join()
        for pid, cmd in self.cmdline.items():
            self.role.setdefault(pid, role_of(cmd, self._plans))
        busy = _sys_busy() - self.busy0
        own = sum(self.cpu_seen.values())
        wall = max(1e-9, self.t_exit - self.t0)
        self.own_cpu_pct = own / wall * 100
        self.foreign_cpu_pct = max(0.0, busy - own) / wall * 100
        try:
            with open(self.first_file) as f:
                self.firsts = [float(x) for x in f.read().split()]
        except OSError:
            self.firsts = []
        try:
            os.unlink(self.first_file)
        except OSError:
            pass
        return self

    def interrupt(self):
        """Ask the command to stop (``bittern run`` stops the topology on SIGINT)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)

    def cpu_at(self, pid, t):
        """CPU seconds of ``pid`` at time ``t``, interpolated between samples."""
        pts = self.cpu_series.get(pid) or []
        if not pts or t <= pts[0][0]:
            return pts[0][1] if pts else 0.0
        for (ta, ca), (tb, cb) in zip(pts, pts[1:]):
            if ta <= t <= tb:
                return ca + (cb - ca) * (t - ta) / max(1e-9, tb - ta)
        return pts[-1][1]

    def base_record(self):
        return {"rc": self.proc.returncode, "wall_s": self.t_exit - self.t0,
                "peak_rss_mb": self.peak / 2**20, "max_procs": self.max_procs,
                "own_cpu_pct": self.own_cpu_pct, "foreign_cpu_pct": self.foreign_cpu_pct,
                "timed_out": self.timed_out, "sampler_errors": self.sampler_errors[:5]}


# ---------------------------------------------------------------------------------------
# Bittern
# ---------------------------------------------------------------------------------------

def pct(vals, q):
    if not vals:
        return None
    s = sorted(vals)
    return s[min(len(s) - 1, int(q * len(s)))]


def role_of(cmd, plans):
    """Readable role of a process of the tree, from its command line."""
    def arg(flag):
        return cmd[cmd.index(flag) + 1] if flag in cmd and cmd.index(flag) + 1 < len(cmd) else None
    if "-m" in cmd:
        mod = arg("-m")
        if mod == "bittern":
            return "bittern-cli"
        if mod == "supervisor":
            return "supervisor"
        if mod == "streammgr.tmaster":
            return "tmaster"
        if mod == "streammgr":
            return f"stmgr-{arg('--container')}"
        if mod == "instance":
            task, plan = arg("--task"), arg("--plan")
            comp = "?"
            try:
                if plan not in plans:
                    with open(plan) as f:
                        plans[plan] = json.load(f)["packing"]["tasks"]
                comp = plans[plan][task][0]
            except (OSError, KeyError, ValueError, TypeError):
                pass
            return f"{comp}[{task}]"
    return " ".join(cmd)[:40]


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

    def cmd(self, name, confs, until_done=True, duration=None):
        c = [self.py, "-m", "bittern", "run", TOPOLOGY, "--name", name, "--json",
             "--drain-timeout", "60"]
        if until_done:
            c.append("--until-done")
        if duration:
            c += ["--duration", str(duration)]
        for k, v in confs.items():
            c += ["--config", f"{k}={v}"]
        return c

    def env(self, mode, par, rel=None):
        # PYTHONPATH: the engine under test is the one of this tree, whatever is installed
        pp = os.pathsep.join([ROOT] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])
        return {"BITTERN_HOME": self.home, "BENCH_MODE": mode, "BENCH_PAR": par,
                "BENCH_STATEFUL": "1" if rel == "EFFECTIVELY_ONCE" else "0",
                "PYTHONUNBUFFERED": "1", "PYTHONPATH": pp}

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

    def run_wc(self, row, mode, n, rate=None, timeout=None):
        """One run of word count in ``mode`` (throughput | latency)."""
        rel, par, stmgrs = BITTERN_ROWS[row] if row in BITTERN_ROWS else ("ATMOST_ONCE", "1,1,1", 1)
        confs = {"topology.reliability.mode": rel, "topology.stmgrs": stmgrs, "bench.sentences": n}
        confs.update(ROW_CONFIG.get(row, {}))
        confs.update(self.extra)
        if rate:
            confs["bench.rate"] = round(rate, 3)
        name = self.name(row)
        m = Measured(self.cmd(name, confs), self.env(mode, par, rel), timeout=timeout or self.args.timeout).wait()
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
        else:
            self._clean_logs(name)
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


# ---------------------------------------------------------------------------------------
# Peers
# ---------------------------------------------------------------------------------------

class Peers:
    def __init__(self, args):
        self.args = args
        self.dir = args.peers_dir
        self.py = {}  # venv name -> python, or None
        self.notes = []

    def available(self):
        for f in ("wc_common.py", "p1_plain.py", "p2_zmq.py", "p3_bytewax.py"):
            if not os.path.exists(os.path.join(self.dir, f)):
                self.notes.append(f"peers skipped: {os.path.join(self.dir, f)} not found (--peers-dir)")
                return False
        return True

    def venv(self, name):
        """The python of peer virtualenv ``name``, created on demand; None if it cannot be."""
        if name in self.py:
            return self.py[name]
        pkgs = PEER_VENVS[name]
        d = os.path.join(WORK, f"venv-{name}")
        py = os.path.join(d, "bin", "python")
        marker = os.path.join(d, ".bench-ok")
        want = " ".join(pkgs)
        try:
            with open(marker) as f:
                ok = f.read().strip() == want
        except OSError:
            ok = False
        if not ok:
            print(f"[bench] creating the peer virtualenv {d} ({want}) ...", file=sys.stderr, flush=True)
            try:
                if not os.path.exists(py):
                    subprocess.run([sys.executable, "-m", "venv", d], check=True, capture_output=True,
                                   text=True, timeout=300)
                r = subprocess.run([py, "-m", "pip", "install", "-q", "--disable-pip-version-check", *pkgs],
                                   capture_output=True, text=True, timeout=900)
                if r.returncode != 0:
                    lines = (r.stderr or r.stdout).strip().splitlines()
                    raise RuntimeError(lines[-1] if lines else f"pip exited {r.returncode}")
                with open(marker, "w") as f:
                    f.write(want + "\n")
            except (OSError, subprocess.SubprocessError, RuntimeError) as e:
                msg = e.args[0] if isinstance(e, RuntimeError) else e
                if isinstance(e, subprocess.CalledProcessError):
                    msg = (e.stderr or "").strip()[-300:]
                self.notes.append(f"peer venv {name!r} ({want}) could not be installed: {msg}; "
                                  "its peers are skipped")
                self.py[name] = None
                return None
        self.py[name] = py
        return py

    def commands(self, row, quick):
        """[(label, cmd, env)] for a peer row, or [] (with a note) when it cannot run."""
        d = self.dir
        if row == "plain":
            py = self.venv("base")
            n = 200_000 if quick else 2_000_000
            return [("plain", [py, os.path.join(d, "p1_plain.py"), "-n", str(n)], {})] if py else []
        if row == "zmq":
            py = self.venv("base")
            n = 200_000 if quick else 1_000_000
            return [("zmq", [py, os.path.join(d, "p2_zmq.py"), "--transport", "ipc", "--ser", "msgpack",
                             "--batch", "100", "-n", str(n)], {})] if py else []
        if row == "bytewax":
            py = self.venv("bytewax")
            n = 100_000 if quick else 500_000
            flow = f"p3_bytewax:get_flow(n={n}, variant='stateful_map', batch=1000)"
            return [("bytewax", [py, "-m", "bytewax.run", flow], {"PYTHONPATH": d})] if py else []
        raise ValueError(row)

    def run(self, row, quick):
        recs = []
        for label, cmd, env in self.commands(row, quick):
            m = Measured(cmd, env, timeout=self.args.timeout, cwd=self.dir).wait()
            got = False
            for line in m.out.splitlines():
                first_variant = not got
                if not line.startswith("WCRESULT "):
                    continue
                got = True
                r = json.loads(line[9:])
                tf = r.get("t_first") or (min(m.firsts) if m.firsts else None)
                r.update(m.base_record())
                r["t_first"] = tf
                # a later variant of the same invocation started after the earlier ones ran
                r["startup_s"] = (tf - m.t0) if tf and first_variant else None
                r["proc_s"] = (r["t_end"] - tf) if tf and r.get("t_end") else None
                if r["proc_s"]:
                    r["sent_per_s"] = r["sentences"] / r["proc_s"]
                    r["words_per_s"] = r["words"] / r["proc_s"]
                r["row"] = f"{label}:{r.get('variant', '')}"
                r["ok"] = bool(r.get("ok")) and m.proc.returncode == 0
                if m.proc.returncode != 0:
                    r["stderr_tail"] = m.err[-1500:]
                recs.append(r)
            if not got:
                recs.append(dict(m.base_record(), row=f"{label}:?", ok=False, peer=label,
                                 stderr_tail=m.err[-2000:], stdout_tail=m.out[-1000:]))
        return recs


# ---------------------------------------------------------------------------------------
# Reporting
# ---------------------------------------------------------------------------------------

def human(v):
    if v is None:
        return "n/a"
    if v >= 1e6:
        return "%.2fM" % (v / 1e6)
    if v >= 1e4:
        return "%.0fk" % (v / 1e3)
    if v >= 1e3:
        return "%.1fk" % (v / 1e3)
    return "%.0f" % v


def fmt(vals, f):
    vals = [v for v in vals if v is not None]
    if not vals:
        return "-"
    if len(vals) == 1:
        return f(vals[0])
    return "%s [%s-%s]" % (f(st.median(vals)), f(min(vals)), f(max(vals)))


def f1(v):
    return "%.1f" % v


def f2(v):
    return "%.2f" % v


def f0(v):
    return "%.0f" % v


def ms(v):
    return "%.2f" % v if v < 10 else "%.1f" % v


def table(headers, rows):
    widths = [max(len(str(h)), *(len(str(r[i])) for r in rows)) if rows else len(h)
              for i, h in enumerate(headers)]
    lines = ["  ".join(str(h).ljust(w) for h, w in zip(headers, widths)),
             "  ".join("-" * w for w in widths)]
    for r in rows:
        lines.append("  ".join(str(c).ljust(w) for c, w in zip(r, widths)))
    return "\n".join(lines)


def median_or_none(vals):
    vals = [v for v in vals if v is not None]
    return st.median(vals) if vals else None


class Report:
    def __init__(self, records, runs, notes, workload_source, args):
        self.records = records
        self.runs = runs
        self.notes = notes
        self.src = workload_source
        self.args = args

    def by(self, row, kind=None):
        return [r for r in self.records if r.get("row") == row and (kind is None or r.get("kind") == kind)]

    def rows_present(self, kind):
        seen = []
        for r in self.records:
            if r.get("kind") == kind and r["row"] not in seen:
                seen.append(r["row"])
        return seen

    def words_by_run(self, row):
        return {r["run"]: r.get("words_per_s") for r in self.by(row, "throughput")
                if r.get("ok") and r.get("words_per_s")}

    def ratio(self, num, den):
        a, b = self.words_by_run(num), self.words_by_run(den)
        return [a[i] / b[i] for i in sorted(set(a) & set(b))]

    def cpu_table(self):
        groups = ["sentence", "split", "count", "stmgr", "tmaster", "supervisor", "bittern-cli"]
        rows = []
        for row in self.rows_present("throughput"):
            th = [r for r in self.by(row, "throughput") if r.get("ok") and r.get("cpu_window_s")]
            if not th:
                continue
            cells = [row]
            for g in groups + ["total"]:
                pcts, nsw = [], []
                for r in th:
                    c = r["cpu_window_s"]
                    v = sum(c.values()) if g == "total" else c.get(g)
                    if v is None:
                        continue
                    pcts.append(v / r["proc_s"] * 100)
                    nsw.append(v / r["words"] * 1e9)
                cells.append("%.0f%% %.0fns" % (st.median(pcts), st.median(nsw)) if pcts else "-")
            rows.append(cells)
        return table(["row"] + groups + ["total"], rows) if rows else ""

    def render(self):
        out = []
        a = self.args
        out.append(f"Bittern word-count benchmark: {self.runs} run(s) per row, median [min-max]; "
                   f"workload: {self.src} SENTENCES; python {sys.version.split()[0]}; "
                   f"{os.cpu_count()} cores")
        out.append(f"N sentences per throughput run: Bittern {a.n}; latency runs: {a.lat_secs:g}s at half the "
                   "rate of the throughput run just before\n")
        headers = ["row", "ok", "sentences/s", "words/s", "p50 ms", "p99 ms", "peak RSS MB (procs)",
                   "startup s", "foreign CPU%"]
        rows = []
        for row in self.rows_present("throughput"):
            th = self.by(row, "throughput")
            la = self.by(row, "latency")
            oks = sum(1 for r in th + la if r.get("ok"))
            rows.append([
                row, f"{oks}/{len(th) + len(la)}",
                fmt([r.get("sent_per_s") for r in th if r.get("ok")], human),
                fmt([r.get("words_per_s") for r in th if r.get("ok")], human),
                fmt([r.get("p50_ms") for r in la if r.get("ok")], ms),
                fmt([r.get("p99_ms") for r in la if r.get("ok")], ms),
                fmt([r.get("peak_rss_mb") for r in th], f0) + " (%d)" % max(r.get("max_procs", 0) for r in th),
                fmt([r.get("startup_s") for r in th], f2),
                fmt([r.get("foreign_cpu_pct") for r in th + la], f0),
            ])
        if rows:
            out.append(table(headers, rows))
            out.append("ok: runs whose final counts were exactly the expected ones (Bittern: throughput + latency "
                       "runs; at least once also needs every tree acked, none failed); p50/p99: end-to-end, spout "
                       "emit -> count bolt, at half the rate of the throughput run; peak RSS: summed over the "
                       "whole process tree (procs: most processes seen at once)")
        cpu = self.cpu_table()
        if cpu:
            out.append("\nwhere the CPU goes in the throughput runs, from the first sentence emitted to the last "
                       "word counted:\n% of one core (all tasks of a component added up) and CPU ns per word "
                       "(2 cores = 200%):")
            out.append(cpu)
        probes = []
        il = self.by("idle-latency", "latency")
        if il:
            probes.append(f"idle crossing (1 sentence / 200 ms, 1-1-1 at most once): median "
                          f"{fmt([r.get('p50_ms') for r in il if r.get('ok')], ms)} ms, p99 "
                          f"{fmt([r.get('p99_ms') for r in il if r.get('ok')], ms)} ms, max "
                          f"{fmt([r.get('max_ms') for r in il if r.get('ok')], ms)} ms "
                          f"(ok {sum(1 for r in il if r.get('ok'))}/{len(il)})")
        ic = [r for r in self.by("idle-cpu") if r.get("ok")]
        if ic:
            roles = []
            for r in ic:
                for role in r["processes"]:
                    if role not in roles:
                        roles.append(role)
            prow = [[role,
                     fmt([r["processes"][role]["cpu_pct"] for r in ic if role in r["processes"]], f2),
                     fmt([r["processes"][role]["rss_mb"] for r in ic if role in r["processes"]], f1)]
                    for role in roles]
            prow.append(["(total)", fmt([sum(v["cpu_pct"] for v in r["processes"].values()) for r in ic], f2),
                         fmt([r["total_rss_mb"] for r in ic], f0)])
            probes.append(f"idle topology (1-1-1, spout emits nothing), {ic[0]['window_s']:g}s window after "
                          f"{ic[0]['settle_s']:g}s settle (ok {len(ic)}/{len(self.by('idle-cpu'))}):\n"
                          + table(["process", "CPU %", "RSS MB"], prow))
        elif self.by("idle-cpu"):
            probes.append("idle topology: failed: " + "; ".join(
                p for r in self.by("idle-cpu") for p in r.get("problems", [])))
        if probes:
            out.append("")
            out.extend(probes)
        ratios = []
        zmq = next((r for r in self.rows_present("throughput") if r.startswith("zmq:")), None)
        bw = next((r for r in self.rows_present("throughput") if r.startswith("bytewax:stateful_map")), None)
        plain = next((r for r in self.rows_present("throughput") if r == "plain:loop"), None)
        if "amo-111" in self.rows_present("throughput"):
            if bw:
                ratios.append(("Bittern AMO 1-1-1 / Bytewax stateful_map (words/s)", self.ratio("amo-111", bw),
                               f">= {TARGET_VS_BYTEWAX:.2f}", TARGET_VS_BYTEWAX))
            if zmq:
                ratios.append(("Bittern AMO 1-1-1 / pyzmq msgpack batch-100 ceiling", self.ratio("amo-111", zmq),
                               f">= {TARGET_VS_ZMQ:.2f}", TARGET_VS_ZMQ))
            if plain:
                ratios.append(("Bittern AMO 1-1-1 / plain Python loop (floor)", self.ratio("amo-111", plain),
                               "", None))
        for par in ("111", "122"):
            if f"alo-{par}" in self.rows_present("throughput") and f"amo-{par}" in self.rows_present("throughput"):
                ratios.append((f"ALO / AMO {par[0]}-{par[1]}-{par[2]}", self.ratio(f"alo-{par}", f"amo-{par}"),
                               f">= {TARGET_ALO_OVER_AMO:.2f}", TARGET_ALO_OVER_AMO))
            if f"eo-{par}" in self.rows_present("throughput") and f"alo-{par}" in self.rows_present("throughput"):
                ratios.append((f"EO / ALO {par[0]}-{par[1]}-{par[2]}", self.ratio(f"eo-{par}", f"alo-{par}"),
                               f">= {TARGET_EO_OVER_ALO:.2f}", TARGET_EO_OVER_ALO))
        for rel in ("amo", "alo"):
            if f"{rel}-122" in self.rows_present("throughput") and f"{rel}-111" in self.rows_present("throughput"):
                ratios.append((f"{rel.upper()} 1-2-2 (2 containers) / 1-1-1", self.ratio(f"{rel}-122", f"{rel}-111"),
                               "", None))
        targets = []
        if ratios:
            out.append("\nratios (computed per run, between rows of the same run):")
            out.append(table(["ratio", "median [min-max]", "target"],
                             [[name, fmt(v, f2), t] for name, v, t, _ in ratios]))
            for name, v, t, thr in ratios:
                if thr is not None:
                    targets.append((name, fmt(v, f2), t, median_or_none(v), lambda m, thr=thr: m >= thr))
        la = [r for r in self.by("amo-111", "latency") if r.get("ok")]
        if la:
            targets.append(("p99 latency at half the max rate, AMO 1-1-1 (ms)",
                            fmt([r["p99_ms"] for r in la], ms), f"< {TARGET_P99_MS:g}",
                            median_or_none([r["p99_ms"] for r in la]), lambda m: m < TARGET_P99_MS))
        if il:
            v = [r.get("p50_ms") for r in il if r.get("ok")]
            targets.append(("idle: one tuple crosses the topology (ms, median)", fmt(v, ms),
                            f"< {TARGET_IDLE_CROSS_MS:g}", median_or_none(v), lambda m: m < TARGET_IDLE_CROSS_MS))
        if ic:
            v = [max(p["cpu_pct"] for role, p in r["processes"].items() if role != "bittern-cli") for r in ic]
            targets.append(("idle: busiest topology process CPU %", fmt(v, f2), f"< {TARGET_IDLE_CPU_PCT:g} each",
                            median_or_none(v), lambda m: m < TARGET_IDLE_CPU_PCT))
            bolts = [max(p["rss_mb"] for role, p in r["processes"].items()
                         if role.startswith(("split[", "count["))) for r in ic]
            targets.append(("trivial-bolt instance RSS (MB, largest)", fmt(bolts, f1), f"< {TARGET_BOLT_RSS_MB:g}",
                            median_or_none(bolts), lambda m: m < TARGET_BOLT_RSS_MB))
        th = [r for r in self.by("amo-111", "throughput")]
        if th:
            v = [r["peak_rss_mb"] for r in th]
            targets.append(("word count AMO 1-1-1 peak RSS, all processes (MB)", fmt(v, f0),
                            f"< {TARGET_WC_RSS_MB:g}", median_or_none(v), lambda m: m < TARGET_WC_RSS_MB))
        th = [r for r in self.by("alo-111", "throughput")]
        if th:
            v = [r["peak_rss_mb"] for r in th]
            targets.append(("word count ALO 1-1-1 peak RSS, all processes (MB)", fmt(v, f0),
                            f"< {TARGET_WC_RSS_MB:g}", median_or_none(v), lambda m: m < TARGET_WC_RSS_MB))
        if targets:
            out.append("\ntargets (reported, not asserted):")
            out.append(table(["target", "measured", "wanted", "verdict"],
                             [[n, m, t, "n/a" if med is None else ("met" if ok(med) else "MISSED")]
                              for n, m, t, med, ok in targets]))
        dirty = [r for r in self.records if (r.get("foreign_cpu_pct") or 0) > FOREIGN_CPU_WARN]
        if dirty:
            self.notes.insert(0, f"{len(dirty)} of {len(self.records)} runs had other processes of the machine "
                                 f"using > {FOREIGN_CPU_WARN:g}% of a core (foreign CPU%): their figures are "
                                 "contaminated; compare ratios, or run again on a quieter machine")
        bad = [r for r in self.records if not r.get("ok")]
        if bad:
            out.append("\nfailed runs:")
            for r in bad:
                out.append(f"  {r.get('row')} run {r.get('run')} ({r.get('kind')}): "
                           + "; ".join(r.get("problems") or [])
                           + (f" logs: {r['logs']}" if r.get("logs") else "")
                           + (("\n    " + r["stderr_tail"].strip().replace("\n", "\n    ")[-800:])
                              if r.get("stderr_tail") else ""))
        if self.notes:
            out.append("\nnotes:")
            out.extend("  " + n for n in self.notes)
        return "\n".join(out)


# ---------------------------------------------------------------------------------------
# Main
# ---------------------------------------------------------------------------------------

def select(only, peers):
    names = (PEER_ROWS if peers else []) + list(BITTERN_ROWS) + PROBES
    if not only:
        return names
    want = [w.strip() for w in only.split(",") if w.strip()]
    known = list(BITTERN_ROWS) + PROBES + PEER_ROWS + ["bittern", "peers"]
    for w in want:
        if not any(k == w or k.startswith(w) for k in known):
            raise SystemExit(f"error: --only {w!r} matches no row (rows: {', '.join(known)})")
    out = []
    for k in PEER_ROWS + list(BITTERN_ROWS) + PROBES:
        is_peer = k in PEER_ROWS
        hit = any(k == w or k.startswith(w) for w in want) or ("bittern" in want and not is_peer) \
            or ("peers" in want and is_peer)
        if hit:  # naming a peer row (or "peers") runs it, --peers or not
            out.append(k)
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=None, help="runs per row (default 3; 1 with --quick)")
    ap.add_argument("--quick", action="store_true", help="smoke test: 1 run, small N, short windows")
    ap.add_argument("--only", default="", help="comma-separated rows (prefixes match): "
                    + ", ".join(list(BITTERN_ROWS) + PROBES + PEER_ROWS) + ", bittern, peers")
    ap.add_argument("--peers", action="store_true", help="also run the peers (plain, zmq, bytewax)")
    ap.add_argument("--peers-dir", default=os.path.normpath(os.path.join(ROOT, "..", "shared", "bench")),
                    help="where the peers' scripts are (default: ../shared/bench beside the repo)")
    ap.add_argument("-n", type=int, default=None,
                    help="sentences per Bittern throughput run (default 300000; 20000 with --quick)")
    ap.add_argument("--lat-secs", type=float, default=None,
                    help="length of a latency run at half rate (default 4; 1.5 with --quick)")
    ap.add_argument("--idle-secs", type=float, default=None,
                    help="idle-cpu measurement window (default 8; 3 with --quick)")
    ap.add_argument("--config", action="append", default=[], metavar="K=V",
                    help="extra config for every Bittern word-count run (e.g. topology.max.spout.pending=5000)")
    ap.add_argument("--home", default=os.path.join(WORK, "home"), help="BITTERN_HOME for the runs")
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds before a run is killed")
    ap.add_argument("--out", help="append every raw record to this file (JSON lines)")
    a = ap.parse_args(argv)
    a.runs = a.runs or (1 if a.quick else 3)
    a.n = a.n or (20_000 if a.quick else 300_000)
    a.lat_secs = a.lat_secs or (1.5 if a.quick else 4.0)
    a.idle_secs = a.idle_secs or (3.0 if a.quick else 8.0)
    a.peers_dir = os.path.abspath(a.peers_dir)
    items = select(a.only, a.peers)
    os.makedirs(WORK, exist_ok=True)

    peers = Peers(a)
    workload = Workload(a.peers_dir if os.path.isdir(a.peers_dir) else None)
    notes = []
    if workload.wc is None:
        notes.append(f"{a.peers_dir}/wc_common.py not found: expected counts computed from the topology's "
                     "own SENTENCES")
    peer_items = [k for k in items if k in PEER_ROWS]
    if peer_items and not peers.available():
        items = [k for k in items if k not in PEER_ROWS]
        peer_items = []
    bt = BitternRunner(a, workload)
    records = []
    outf = open(a.out, "a") if a.out else None
    t_start = time.time()

    def keep(rec, kind, run):
        rec["kind"], rec["run"] = kind, run
        rec["time"] = time.time()
        records.append(rec)
        brief = {k: (round(v, 3) if isinstance(v, float) else v) for k, v in rec.items()
                 if k in ("row", "ok", "sent_per_s", "words_per_s", "startup_s", "peak_rss_mb", "p50_ms",
                          "p99_ms", "foreign_cpu_pct", "problems")}
        print(f"[bench] run {run + 1}/{a.runs} {kind:10s} {json.dumps(brief)}", file=sys.stderr, flush=True)
        if outf:
            slim = {k: v for k, v in rec.items() if k not in ("counts",)}
            outf.write(json.dumps(slim) + "\n")
            outf.flush()

    try:
        for run in range(a.runs):
            for item in items:
                if item in BITTERN_ROWS:
                    th = bt.run_wc(item, "throughput", a.n)
                    keep(th, "throughput", run)
                    if th.get("ok") and th.get("sent_per_s"):
                        rate = th["sent_per_s"] / 2
                        n_lat = max(20, int(rate * a.lat_secs))
                        keep(bt.run_wc(item, "latency", n_lat, rate=rate), "latency", run)
                elif item == "idle-latency":
                    keep(bt.run_wc("idle-latency", "latency", 10 if a.quick else 25, rate=5.0), "latency", run)
                elif item == "idle-cpu":
                    keep(bt.idle_cpu(settle=1.0 if a.quick else 2.0, window=a.idle_secs), "idle", run)
                elif item in PEER_ROWS:
                    for rec in peers.run(item, a.quick):
                        keep(rec, "throughput", run)
    except KeyboardInterrupt:
        notes.append("interrupted: partial results")
    finally:
        if outf:
            outf.close()
    notes = notes + peers.notes
    notes.append(f"total benchmark time {time.time() - t_start:.0f}s")
    print(Report(records, a.runs, notes, workload.source, a).render(), flush=True)
    bittern_ok = all(r.get("ok") for r in records if r.get("peer") == "bittern")
    return 0 if records and bittern_ok else 1


if __name__ == "__main__":
    sys.exit(main())

"""Running one measured command: tree RSS and CPU sampled every 50 ms (the shared harness's method)."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import tempfile
import threading
import time

import psutil

from .common import ROOT, SAMPLE_EVERY, WORK


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
        self.rss_series = {}  # pid -> [(time, RSS)], one point per sample
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
                self.rss_series.setdefault(q.pid, []).append((now, rss))
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

"""The windowed rows: ``bittern run`` of scripts/bench_topologies/windowed_word_count.py.

* ``win-111``: the windowed word count (event time, tumbling 1 s windows, counts per
  (window, word)) at most once 1-1-1, checked exactly against
  ``wc_common.expected_window_counts(n)``; a throughput run, then a latency run at half
  its rate. Figures: words/s (first sentence emitted -> last window result emitted)
  and the window latency (see the topology's docstring: the spout stamps the wall time
  at which it emitted each window's last tuple, and at which its watermark passed the
  window's end; the count bolt the wall time of each window's last result).
* ``win-slide-100k``: the key mode (tuple i is key ``k<i % K>``, K = ``--win-keys``
  distinct keys, same event times), counted in tumbling 1 s windows
  (``win-tumble-100k``) and in sliding 10 s windows every 1 s (``win-slide-100k``), one
  after the other in the same run: the peak RSS of the window bolt's process (sampled
  every 50 ms by the harness, per process: ``rss_by_process_mb['count[..]']``), and the
  windows it held open at the peak. Results checked by digest (windows fired, sum of
  counts, weighted checksum), computed from the workload.
"""
from __future__ import annotations

from .common import WIN_TOPOLOGY
from .measure import Measured, pct


def _rows(pairs):
    """[[start, t], ...] (JSON) -> {start: t}"""
    return {float(s): t for s, t in pairs or ()}


class WindowRunner:
    def __init__(self, bt, workload, args):
        self.bt = bt  # the BitternRunner: command line, environment, parsing, per-process figures
        self.workload = workload
        self.args = args

    def run(self, row, window, keys, mode, n, rate=None):
        bt = self.bt
        confs = {"topology.reliability.mode": "ATMOST_ONCE", "topology.stmgrs": 1, "bench.sentences": n}
        confs.update(bt.extra)
        if rate:
            confs["bench.rate"] = round(rate, 3)
        name = bt.name(row)
        env = bt.env(mode, "1,1,1", "ATMOST_ONCE")
        env.update(BENCH_WINDOW=window, BENCH_KEYS=str(keys))
        # the drain waits for the count task to get through its backlog (the spout ends long
        # before it when the windows are many: win-slide-100k)
        drain = max(60, int(bt.args.timeout) - 60)
        m = Measured(bt.cmd(name, confs, topology=WIN_TOPOLOGY, drain_timeout=drain), env,
                     timeout=bt.args.timeout).wait()
        rec = m.base_record()
        rec.update({"peer": "bittern", "row": row, "mode": mode, "reliability": "ATMOST_ONCE", "par": "1,1,1",
                    "stmgrs": 1, "sentences_target": n, "window": window, "keys": keys})
        bench, summary = bt.parse(m.out)
        spouts = [b for b in bench if b.get("bench") == "spout"]
        counts = [b for b in bench if b.get("bench") == "count"]
        problems = []
        if m.timed_out:
            problems.append(f"timed out after {m.timeout:.0f}s")
        if m.proc.returncode != 0:
            problems.append(f"bittern run exited {m.proc.returncode}")
        if len(spouts) != 1 or len(counts) != 1:
            problems.append(f"{len(spouts)}/1 spout and {len(counts)}/1 count tasks reported")
        sentences = sum(b.get("sentences", 0) for b in spouts)
        fires = sum(b.get("fires", 0) for b in counts)
        if keys:
            want_fires, want_words, want_sum = self.workload.key_digest(n, keys, window)
            words = sum(b.get("words", 0) for b in counts)
            checksum = sum(b.get("checksum", 0) for b in counts)
            if (fires, words, checksum) != (want_fires, want_words, want_sum):
                problems.append(f"results differ from the expected ones: {fires} windows fired, counts sum "
                                f"{words}, checksum {checksum}; expected {want_fires}, {want_words}, {want_sum}")
            rec["tuples"] = sentences  # one key per "sentence"
            rec["count_sum"] = words
            words = sentences
        else:
            got = {}
            for b in counts:
                for s, w, c in b.get("results") or ():
                    got[(float(s), w)] = c
            want = self.workload.expected_window_counts(n)
            words = sum(got.values())
            if got != want or fires != len(want):
                diff = sum(1 for k in set(got) | set(want) if got.get(k) != want.get(k))
                problems.append(f"window counts differ from the expected ones: {diff} (window, word) pairs differ, "
                                f"{fires} results emitted for {len(want)} pairs ({words} words, expected "
                                f"{sum(want.values())})")
        rec["windows_fired"] = fires
        rec["open_windows_peak"] = max((b.get("open_peak", 0) for b in counts), default=None)
        if summary is not None:
            rec["drained"] = summary.get("drained")
            if not summary.get("drained"):
                problems.append(f"not drained within {drain}s (the count task was still behind)")
            rec["components"] = summary.get("components")
        rec.update(sentences=sentences, words=words, ok=not problems, problems=problems)
        firsts = [b["t_first"] for b in spouts if b.get("t_first")]
        lasts = [b["t_last"] for b in counts if b.get("t_last")]
        if firsts and lasts:
            t_first, t_end = min(firsts), max(lasts)
            rec.update(t_first=t_first, t_end=t_end, startup_s=t_first - m.t0, proc_s=t_end - t_first)
            if t_end > t_first:
                rec["sent_per_s"] = sentences / (t_end - t_first)
                rec["words_per_s"] = words / (t_end - t_first)
        rec.update(self.latency(spouts, counts))
        rec["rss_by_process_mb"] = bt._rss_by_role(m)
        rec["win_bolt_rss_mb"] = max((v for k, v in rec["rss_by_process_mb"].items() if k.startswith("count[")),
                                     default=None)
        if rec.get("proc_s"):
            rec["cpu_window_s"] = bt._cpu_by_group(m, rec["t_first"], rec["t_end"])
        if mode == "latency":
            rec["rate"] = rate
        if problems:
            rec["stderr_tail"] = m.err[-2000:]
            rec["logs"] = f"{bt.home}/logs/{name}"
        else:
            bt._clean_logs(name)
        return rec

    @staticmethod
    def latency(spouts, counts):
        """Per window: its last result emitted - the spout's emit of its last tuple (window
        latency), and - the spout's watermark passing its end (watermark delay); ms."""
        last_at, wm_at, fired = {}, {}, {}
        for b in spouts:
            last_at.update(_rows(b.get("last_at")))
            wm_at.update(_rows(b.get("wm_at")))
        for b in counts:
            for s, (_first, last) in _rows(b.get("fired")).items():
                fired[s] = max(fired.get(s, last), last)
        lat = [(fired[s] - last_at[s]) * 1000 for s in sorted(fired) if s in last_at]
        wmd = [(fired[s] - wm_at[s]) * 1000 for s in sorted(fired) if s in wm_at]
        return {"win_lat_ms": [round(x, 2) for x in lat], "lat_samples": len(lat),
                "p50_ms": pct(lat, 0.50), "p99_ms": pct(lat, 0.99), "max_ms": max(lat) if lat else None,
                "wm_p50_ms": pct(wmd, 0.50), "wm_p99_ms": pct(wmd, 0.99)}

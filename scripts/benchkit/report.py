"""The tables, ratios and target verdicts printed at the end of a benchmark."""
from __future__ import annotations

import os
import statistics as st
import sys


from .common import FOREIGN_CPU_WARN, TARGET_ALO_OVER_AMO, TARGET_BOLT_RSS_MB, TARGET_EO_OVER_ALO, TARGET_IDLE_CPU_PCT, TARGET_IDLE_CROSS_MS, TARGET_P99_MS, TARGET_SLIDE_OVER_TUMBLE_RSS, TARGET_VS_BYTEWAX, TARGET_VS_ZMQ, TARGET_WC_RSS_MB, TARGET_WIN_OVER_AMO, TARGET_WIN_VS_BYTEWAX


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
    def __init__(self, records, runs, notes, workload_source, args, groups=()):
        self.records = records
        self.runs = runs
        self.notes = notes
        self.src = workload_source
        self.args = args
        self.groups = list(groups)  # row groups (benchkit/groups.py): their sections and targets

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

    def field_ratio(self, num, den, field):
        """Per run: ``field`` of row ``num`` / of row ``den`` (ok throughput runs)."""
        def by_run(row):
            return {r["run"]: r.get(field) for r in self.by(row, "throughput") if r.get("ok") and r.get(field)}
        a, b = by_run(num), by_run(den)
        return [a[i] / b[i] for i in sorted(set(a) & set(b))]

    def window_table(self):
        """The windowed rows: throughput, window latency, the window bolt's memory."""
        rows = []
        for row in self.rows_present("throughput"):
            th = [r for r in self.by(row, "throughput") if r.get("ok")]
            if not th or "window" not in th[0]:
                continue
            la = [r for r in self.by(row, "latency") if r.get("ok")]
            rows.append([
                row, th[0]["window"] + (f", {th[0]['keys']} keys" if th[0].get("keys") else ", words"),
                fmt([r.get("words_per_s") for r in th], human),
                fmt([r.get("p50_ms") for r in la], ms) + " / " + fmt([r.get("p99_ms") for r in la], ms)
                if la else "-",
                fmt([r.get("wm_p50_ms") for r in la], ms) + " / " + fmt([r.get("wm_p99_ms") for r in la], ms)
                if la else "-",
                fmt([r.get("p50_ms") for r in th], ms) + " / " + fmt([r.get("p99_ms") for r in th], ms),
                fmt([r.get("win_bolt_rss_mb") for r in th], f1),
                fmt([r.get("open_windows_peak") for r in th], human),
                fmt([r.get("windows_fired") for r in th], human),
            ])
        if not rows:
            return ""
        return table(["row", "windows, keys", "words/s", "window lat. p50 / p99 ms (half rate)",
                      "watermark delay p50 / p99 ms (half rate)", "window lat. p50 / p99 ms (full rate)",
                      "window bolt peak RSS MB", "open windows (peak)", "results"], rows)

    def eo_table(self):
        """The exactly-once rows' output: committed through a transactional FileSink, checked."""
        rows = []
        for row in self.rows_present("throughput"):
            recs = [r for r in self.by(row) if "sink_exact" in r]
            if not recs:
                continue
            th = [r for r in recs if r.get("kind") == "throughput" and r.get("ok")]
            rows.append([row, f"{sum(1 for r in recs if r['sink_exact'])}/{len(recs)}",
                         fmt([r.get("sink_rows") for r in th], f0), fmt([r.get("sink_checkpoints") for r in th], f0),
                         fmt([r.get("commit_after_s") for r in th], f2),
                         fmt([r.get("committed_words_per_s") for r in th], human)])
        if not rows:
            return ""
        return table(["row", "committed output exact", "rows committed", "checkpoints committed",
                      "end committed after the last word s", "words/s to the committed end"], rows)

    def cpu_table(self):
        groups = ["sentence", "split", "count", "sink", "stmgr", "tmaster", "supervisor", "bittern-cli"]
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
                       "runs; at least once also needs every tree acked, none failed; exactly once its committed "
                       "output exact, below); p50/p99: end-to-end, spout "
                       "emit -> count bolt (win-111: window latency, below), at half the rate of the throughput "
                       "run; peak RSS: summed over the "
                       "whole process tree (procs: most processes seen at once)")
        eo = self.eo_table()
        if eo:
            out.append("\nexactly-once output (eo-*: the count bolt emits each changed count at every checkpoint to "
                       "a SinkBolt over a transactional FileSink; after the run the committed files are read: "
                       "exact = every word's largest committed count is its expected count, each word's counts "
                       "increase once per checkpoint, nothing left uncommitted; throughput + latency runs; the "
                       "figures are the throughput runs'. words/s above stops at the last word counted, the last "
                       "column at the end's commit, which waits for the checkpoint after the spout's done())")
            out.append(eo)
        cpu = self.cpu_table()
        if cpu:
            out.append("\nwhere the CPU goes in the throughput runs, from the first sentence emitted to the last "
                       "word counted:\n% of one core (all tasks of a component added up) and CPU ns per word "
                       "(2 cores = 200%):")
            out.append(cpu)
        win = self.window_table()
        if win:
            out.append("\nwindowed rows (event time, at most once 1-1-1; win-*-100k: tuples/s in words/s): "
                       "window latency = a window's last result emitted - the spout emitting the window's last "
                       "tuple (p50/p99 over the windows of a run); watermark delay = that result - the spout's "
                       "watermark (largest timestamp - lag 0.5 s) reaching the window's end, i.e. the engine's "
                       "part: the watermark interval (topology.watermark.interval.ms), flushes and the trip; "
                       "window bolt RSS: peak of the count task's process; open windows: (key, window) "
                       "accumulators the task held when a window start first fired; results: (key, window) "
                       "results emitted")
            out.append(win)
        group_targets = []
        for g in self.groups:
            text = g.render(self.records)
            if text:
                out.append(text)
            group_targets += g.targets(self.records)
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
        present = self.rows_present("throughput")
        bww = next((r for r in present if r.startswith("bytewax-window:")), None)
        if "win-111" in present:
            if "amo-111" in present:
                ratios.append(("windowed word count / word count, AMO 1-1-1 (words/s)", self.ratio("win-111", "amo-111"),
                               f">= {TARGET_WIN_OVER_AMO:.2f}", TARGET_WIN_OVER_AMO))
            if bww:
                ratios.append(("Bittern windowed 1-1-1 / Bytewax windowed word count (words/s)",
                               self.ratio("win-111", bww), f">= {TARGET_WIN_VS_BYTEWAX:.2f}", TARGET_WIN_VS_BYTEWAX))
        if "win-slide-100k" in present and "win-tumble-100k" in present:
            ratios.append(("100k keys: sliding 10 s/1 s / tumbling 1 s, tuples/s",
                           self.ratio("win-slide-100k", "win-tumble-100k"), "", None))
        for ser in ("json", "msgpack"):
            if f"ml-{ser}-111" in self.rows_present("throughput") and "amo-111" in self.rows_present("throughput"):
                ratios.append((f"multilang {ser} split (pystorm) / native, AMO 1-1-1",
                               self.ratio(f"ml-{ser}-111", "amo-111"), "", None))
        for rel in ("amo", "alo"):
            if f"{rel}-122" in self.rows_present("throughput") and f"{rel}-111" in self.rows_present("throughput"):
                ratios.append((f"{rel.upper()} 1-2-2 (2 containers) / 1-1-1", self.ratio(f"{rel}-122", f"{rel}-111"),
                               "", None))
        targets = []
        rss_ratio = None
        if "win-slide-100k" in present and "win-tumble-100k" in present:
            rss_ratio = self.field_ratio("win-slide-100k", "win-tumble-100k", "win_bolt_rss_mb")
            ratios.append(("100k keys: window bolt peak RSS, sliding / tumbling", rss_ratio,
                           f"<= {TARGET_SLIDE_OVER_TUMBLE_RSS:.2f}", None))
        if ratios:
            out.append("\nratios (computed per run, between rows of the same run):")
            out.append(table(["ratio", "median [min-max]", "target"],
                             [[name, fmt(v, f2), t] for name, v, t, _ in ratios]))
            for name, v, t, thr in ratios:
                if thr is not None:
                    targets.append((name, fmt(v, f2), t, median_or_none(v), lambda m, thr=thr: m >= thr))
        if rss_ratio is not None:
            targets.append(("100k keys: window bolt peak RSS, sliding / tumbling", fmt(rss_ratio, f2),
                            f"<= {TARGET_SLIDE_OVER_TUMBLE_RSS:.2f}", median_or_none(rss_ratio),
                            lambda m: m <= TARGET_SLIDE_OVER_TUMBLE_RSS))
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
        targets += group_targets
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
                           + (f" sink output: {r['sink_dir']}" if r.get("sink_dir") else "")
                           + (("\n    " + r["stderr_tail"].strip().replace("\n", "\n    ")[-800:])
                              if r.get("stderr_tail") else ""))
        if self.notes:
            out.append("\nnotes:")
            out.extend("  " + n for n in self.notes)
        return "\n".join(out)



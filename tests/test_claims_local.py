"""Claims of the README that no other test checked, in local mode (issue 22, item 3).

* ``topology.max.spout.pending`` bounds the trees in flight per spout task (README,
  "Reliability"): the engine's own ``__pending`` of each spout task, at every report
  taken while a slow bolt holds the trees back, is at most the bound and reaches it;
  at the end every number is acked exactly once and reached the sink.
* ``bittern logs NAME COMPONENT TASK -f`` follows (README, the CLI table): lines the
  running topology appends after it started come out of it, in order; SIGINT stops it.
* ``/metrics`` answers 501 without ``prometheus_client`` and the rest of the API works
  (README, "HTTP API"): ``bittern serve`` in a subprocess whose ``prometheus_client``
  cannot be imported (a shadowing package on its PYTHONPATH that raises ImportError).

Already covered elsewhere (not repeated here): the HTTP API with prometheus_client
(tests/test_httpapi.py), Heron's spout under max-spout-pending (tests/test_heron.py, in
the heronpy venv).
"""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import threading
import types

import pytest

from conftest import ROOT, TOPOLOGIES, wait_for
from test_backpressure import LineCounter, describe_difference, numbers
from test_httpapi import ApiServer

MAX_PENDING = 40
SPOUT_TASKS = ("5", "6")  # backpressure_seq.py: one spout task in each container


@pytest.mark.slow
def test_max_spout_pending_bounds_the_trees_in_flight_per_spout_task(bittern, tmp_path):
    out, flag = str(tmp_path / "out"), str(tmp_path / "fast.flag")
    name = "pending"
    bittern("submit", os.path.join(TOPOLOGIES, "backpressure_seq.py"), "--name", name, "--config", f"test.out={out}",
            "--config", f"test.flag={flag}", "--config", f"topology.max.spout.pending={MAX_PENDING}", check=True)
    try:
        from bittern.client import TMClient
        seen = {t: [] for t in SPOUT_TASKS}
        with TMClient(bittern.state("status", name)["tmaster"]) as client:
            def at_the_bound():
                rep = client.request("report", timeout=30)
                for t in SPOUT_TASKS:
                    if str(t) not in {str(m) for m in rep.get("missing", [])}:
                        seen[t].append(rep["tasks"][t]["__pending"])
                return all(len(v) >= 5 and MAX_PENDING in v for v in seen.values())
            # the slow bolts (1 ms a tuple) hold the trees: the spouts fill up to the bound
            wait_for(at_the_bound, timeout=90, interval=0.3,
                     what=f"5 reports of each spout task, one with {MAX_PENDING} trees pending")
        print(f"__pending per spout task over {len(seen['5'])} reports: "
              f"{ {t: (min(v), max(v)) for t, v in seen.items()} }")
        over = {t: max(v) for t, v in seen.items() if max(v) > MAX_PENDING}
        assert not over, f"spout tasks above topology.max.spout.pending={MAX_PENDING}: {over}"
        # the end: every emitted number acked once, and at the sink once
        open(flag, "w").close()
        bittern("deactivate", name, check=True)
        emitted = {}
        for t in SPOUT_TASKS:
            path = os.path.join(out, f"emitted-{t}.json")
            emitted[t] = json.load(open(wait_for(lambda p=path: os.path.exists(p) and p, what=path)))
            assert emitted[t]["pending"] <= MAX_PENDING, emitted[t]
        expected = sorted(e["index"] + k * e["par"] for e in emitted.values() for k in range(e["emitted"]))
        acks, sink = LineCounter(out, "acks-"), LineCounter(out, "sink-")
        wait_for(lambda: acks() >= len(expected), timeout=60, what=f"{len(expected)} acks")
        wait_for(lambda: sink() >= len(expected), timeout=30, what=f"{len(expected)} numbers at the sink")
        assert numbers(out, "fails-") == []
        acked, got = sorted(numbers(out, "acks-")), sorted(numbers(out, "sink-"))
        assert acked == expected, describe_difference(expected, acked)
        assert got == expected, describe_difference(expected, got)
    finally:
        bittern("kill", name, check=True)


def test_logs_follow_prints_what_the_topology_appends_and_stops_on_ctrl_c(bittern, tmp_path):
    """The spout logs each tuple it emits (``topology.debug``, a steady 20 a second);
    ``bittern logs NAME spout 3 -f`` must print the ones logged after it started."""
    out, name = str(tmp_path / "flow"), "follow"
    bittern("submit", os.path.join(TOPOLOGIES, "flow.py"), "--name", name, "--config", f"test.out={out}",
            "--config", "test.rate=20", "--config", "topology.debug=true", check=True)
    log = os.path.join(bittern.home, "logs", name, "spout-3.log")  # task ids: sink 1-2, spout 3
    emitted_re = re.compile(r"emitting: \[(\d+)\]")

    def logged():
        with open(log, errors="replace") as f:
            return [int(m.group(1)) for m in emitted_re.finditer(f.read())]
    follow = None
    try:
        wait_for(lambda: os.path.exists(log) and logged(), what="the spout's first debug lines")
        # started as a script's background job is, with SIGINT ignored (`nohup ... &`):
        # Ctrl-C must stop it all the same (and the test holds however pytest was started)
        inherited = signal.signal(signal.SIGINT, signal.SIG_IGN)
        try:
            follow = bittern.popen("logs", name, "spout", 3, "-f")
        finally:
            signal.signal(signal.SIGINT, inherited)
        lines = []
        reader = threading.Thread(target=lambda: lines.extend(follow.stdout), daemon=True)
        reader.start()

        def printed():
            return [int(m.group(1)) for ln in list(lines) for m in emitted_re.finditer(ln)]
        # its first output comes with the first new data (the initial tail is flushed then);
        # whatever the file holds after that was written after the follow began
        wait_for(lambda: printed(), timeout=30, what="output of bittern logs -f")
        mark = max(logged())
        wait_for(lambda: printed() and max(printed()) >= mark + 20, timeout=30,
                 what=f"lines appended after the follow started (past {mark}) printed by it")
        got = printed()
        assert got == sorted(got) and len(got) == len(set(got)), "lines out of order or twice"
        assert set(got) <= set(logged())
        follow.send_signal(signal.SIGINT)
        assert follow.wait(timeout=20) == 0, follow.stderr.read()
        reader.join(timeout=10)
        assert follow.stderr.read() == ""
        print(f"bittern logs -f printed {len(got)} emit lines, {len([n for n in got if n > mark])} "
              f"appended after it started")
    finally:
        if follow is not None and follow.poll() is None:
            follow.kill()
            follow.wait()
        bittern("kill", name, check=True)


def test_metrics_answers_501_without_prometheus_client_and_the_rest_works(bittern, tmp_path):
    blocker = tmp_path / "no_prometheus"
    (blocker / "prometheus_client").mkdir(parents=True)
    (blocker / "prometheus_client" / "__init__.py").write_text(
        'raise ImportError("prometheus_client is not installed (blocked by the test)")\n')
    env = dict(bittern.env, PYTHONPATH=str(blocker) + os.pathsep + bittern.env.get("PYTHONPATH", ""))
    check = subprocess.run([bittern.python, "-c", "import prometheus_client"], env=env, cwd=ROOT,
                           capture_output=True, text=True)
    assert check.returncode != 0 and "blocked by the test" in check.stderr, "the import was not blocked"
    server = ApiServer(types.SimpleNamespace(home=bittern.home, env=env), tmp_path)
    try:
        code, ctype, body = server.get("/metrics")
        assert code == 501, (code, body)
        assert "prometheus_client" in body and "bittern[metrics]" in body, body
        assert server.json("/api/v1/topologies") is not None  # the rest works
        code, _, _ = server.get("/healthz")
        assert code == 200
        server.stop()  # exit 0, port closed
    finally:
        server.kill()

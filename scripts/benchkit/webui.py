"""``bench.py --webui``: how long the web UI's pages take with a 100-task topology (issue 23:
under 1 s). A topology of 1 spout + 3 bolts (100 tasks in 4 containers) is submitted in local
mode under a fresh home, ``bittern serve`` started on it, then per page:

* ``server_ms``: the whole HTML page over HTTP with the token (median of ``runs`` GETs),
  which includes the topology master's metrics round trip;
* ``browser_ms`` (when /usr/bin/chromium and Playwright are there): headless Chromium from
  navigation to the page drawn (graph laid out by dagre and both charts drawn by uPlot with
  their points, or the tables for the pages without them), the token signed in once
  beforehand, every visit a first one (the tab's copy of the pages cleared before it;
  median of ``runs``).

The spouts emit ``--webui-rate`` tuples/s in all (default 400: the pages' size and the
server's work grow with the tasks, not the rate); ``--webui-rate 0`` lets them go as fast
as they can, which on a 2-core machine leaves the browser a sliver of the CPU (the load
average is printed with the figures).

Everything is stopped and the home removed at the end."""
from __future__ import annotations

import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
import urllib.request

from .common import ROOT

NAME = "webui_bench"
TOPOLOGY = textwrap.dedent("""
    import time
    from bittern import Bolt, Grouping, Spout, Topology

    class Source(Spout):
        outputs = ["n"]
        def initialize(self, config, context):
            self.i = 0
            rate = float(config.get("bench.rate", 0))  # the whole topology's, over the 4 spout tasks
            self.pause = 80.0 / rate if rate > 0 else 0.01  # 20 tuples, then this
        def next_tuple(self):
            for _ in range(20):
                self.emit([self.i])
                self.i += 1
            time.sleep(self.pause)

    class Pass(Bolt):
        outputs = ["n"]
        def process(self, tup):
            self.emit([tup.values[0]])

    class Sink(Bolt):
        def process(self, tup):
            pass

    class WebuiBench(Topology):
        config = {"topology.stmgrs": 4}
        source = Source.spec(par=4)
        split = Pass.spec(par=32, inputs=[source])
        count = Pass.spec(par=32, inputs={split: Grouping.fields("n")})
        sink = Sink.spec(par=32, inputs=[count])
    """)
CHROMIUM = "/usr/bin/chromium"


def _get(url, token):
    req = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"})
    t0 = time.monotonic()
    with urllib.request.urlopen(req, timeout=60) as r:
        body = r.read()
    return (time.monotonic() - t0) * 1000, r.status, body


def _browser(base, token, pages, runs):
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        return {}
    if not os.path.exists(CHROMIUM):
        return {}
    out = {}
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, headless=True,
                              args=["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                                    "--disable-background-networking", "--disable-component-update", "--disable-sync"])
        try:
            page = b.new_context(viewport={"width": 1280, "height": 900}).new_page()
            page.goto(base + "/ui/")
            page.fill("#token", token)
            page.click("#signin-form button[type=submit]")
            page.wait_for_selector("#t-topologies tbody a")
            for label, path, ready in pages:
                times = []
                for _ in range(runs):
                    page.evaluate("() => Object.keys(sessionStorage).filter(k => k.startsWith('bittern.page:'))"
                                  ".forEach(k => sessionStorage.removeItem(k))")  # (a first visit)
                    t0 = time.monotonic()
                    page.goto(base + path)
                    for selector in ready:
                        page.wait_for_selector(selector, timeout=30000)
                    times.append((time.monotonic() - t0) * 1000)
                out[label] = statistics.median(times)
        finally:
            b.close()
    return out


def main(a):
    runs = max(3, a.runs)
    home = tempfile.mkdtemp(prefix="bittern-webui-bench-")
    env = dict(os.environ, BITTERN_HOME=home, PYTHONUNBUFFERED="1")
    topo = os.path.join(home, "webui_bench.py")
    with open(topo, "w") as f:
        f.write(TOPOLOGY)
    serve = None
    try:
        # (100 processes may take over a minute to start on a loaded 2-core machine)
        rate = a.webui_rate
        subprocess.run([sys.executable, "-m", "bittern", "submit", topo, "--name", NAME,
                        "--config", "bittern.startup.timeout.secs=240", "--config", f"bench.rate={rate}"],
                       env=env, cwd=ROOT,
                       check=True, capture_output=True, timeout=300)
        log = open(os.path.join(home, "serve.out"), "w+")
        serve = subprocess.Popen([sys.executable, "-m", "bittern", "serve", "--port", "0"], env=env, cwd=ROOT,
                                 stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 60
        while True:
            log.seek(0)
            m = re.search(r"web UI at (http://127\.0\.0\.1:\d+)/ui/", log.read())
            if m or time.monotonic() > deadline or serve.poll() is not None:
                break
            time.sleep(0.2)
        if not m:
            raise SystemExit("bench --webui: bittern serve did not start")
        base = m.group(1)
        token = open(os.path.join(home, "token")).read().strip()
        plan = json.loads(_get(base + f"/api/v1/topologies/{NAME}", token)[2])
        tasks = sum(c["par"] for c in plan["logical_plan"]["components"])
        time.sleep(5)  # a metrics interval or two, so that the pages have rates to show
        charts = ".chart:not([data-points='0']) .uplot >> nth=1"  # both charts drawn, with points
        pages = [("list", "/ui/", ["#t-topologies tbody a"]),
                 ("topology", f"/ui/topologies/{NAME}", ["#graph svg [data-node] >> nth=3", charts]),
                 ("component", f"/ui/topologies/{NAME}/components/split", ["#t-tasks tbody tr >> nth=31", charts]),
                 ("errors", f"/ui/topologies/{NAME}/errors", ["#t-errors-of-webui-bench-newest-first-per-component"]),
                 ("logs", f"/ui/topologies/{NAME}/logs", ["ul.files a"])]
        server = {}
        for label, path, _ in pages:
            times = []
            for _ in range(runs):
                ms, status, _ = _get(base + path, token)
                assert status == 200, (path, status)
                times.append(ms)
            server[label] = statistics.median(times)
        browser = _browser(base, token, pages, runs)
        load = os.getloadavg()[0]
        print(f"web UI with a {tasks}-task topology at {rate or 'full'} tuples/s, load {load:.0f} (median of "
              f"{runs}; server: the HTML page over HTTP, browser: headless Chromium from navigation to the "
              "page drawn, a first visit)")
        print(f"{'page':10s} {'server ms':>10s} {'browser ms':>11s}")
        for label, _, _ in pages:
            b = browser.get(label)
            print(f"{label:10s} {server[label]:10.1f} {('%.1f' % b) if b is not None else '-':>11s}")
        rec = {"row": "webui", "tasks": tasks, "rate": rate, "load": load, "server_ms": server,
               "browser_ms": browser, "runs": runs}
        if a.out:
            with open(a.out, "a") as f:
                f.write(json.dumps(rec) + "\n")
        return 0
    finally:
        if serve is not None:
            serve.terminate()
            serve.wait(timeout=30)
        subprocess.run([sys.executable, "-m", "bittern", "kill", NAME], env=env, cwd=ROOT, capture_output=True,
                       timeout=120)
        shutil.rmtree(home, ignore_errors=True)

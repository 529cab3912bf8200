"""The web UI in a real browser: Debian's headless Chromium driven by Playwright (its
Python package, against /usr/bin/chromium: no browser download), against a topology run
by ``bittern submit`` + ``bittern serve --allow-actions`` (local mode) and by a real
nimbus and supervisor on ZooKeeper (cluster mode, tests/clusterkit.py).

Each page is opened, its tables and graph checked against what the topology is, the
rates seen to move, the error a bolt raises found with its traceback; deactivate,
activate, rebalance and kill are clicked and checked through the JSON API, and in
cluster mode refused without the token (wrong token: 401 shown, nothing changed).
Screenshots of every page go to ``$BITTERN_ARTIFACTS/webui`` (else the test's tmp dir;
the path is printed)."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
import urllib.request

import pytest

from conftest import ROOT, processes_of, wait_for

CHROMIUM = "/usr/bin/chromium"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]
NAME = "webui_topo"
TOPOLOGY = textwrap.dedent("""
    import time
    from bittern import Bolt, Grouping, Spout, Topology

    class Numbers(Spout):
        outputs = ["n"]
        def initialize(self, config, context):
            self.i, self.t0 = 0, time.monotonic()
        def next_tuple(self):
            due = min(int((time.monotonic() - self.t0) * 200), self.i + 50)
            while self.i < due:
                self.emit([self.i])
                self.i += 1
            time.sleep(0.005)

    class Check(Bolt):
        outputs = ["n"]
        def process(self, tup):
            n = tup.values[0]
            if n % 500 == 7:
                raise ValueError("unlucky <number> %d" % n)
            self.emit([n])

    class Sink(Bolt):
        def process(self, tup):
            pass

    class WebuiTopo(Topology):
        numbers = Numbers.spec(par=1)
        check = Check.spec(par=2, inputs=[numbers])
        sink = Sink.spec(par=1, inputs={check: Grouping.fields("n")})
    """)
COMPONENTS = {"numbers", "check", "sink"}
EDGES = {("numbers", "check"), ("check", "sink")}

pytestmark = pytest.mark.slow
# (bittern[test] and scripts/setup.sh install both: a missing one fails the tests, it never skips them)
import playwright.sync_api as playwright_api  # noqa: E402


@pytest.fixture(autouse=True)
def chromium_installed():
    if not os.path.exists(CHROMIUM):
        pytest.fail(f"Debian's chromium is not installed ({CHROMIUM}): run scripts/setup.sh as root")


@pytest.fixture
def artifacts(tmp_path):
    d = os.path.join(os.environ.get("BITTERN_ARTIFACTS") or str(tmp_path), "webui")
    os.makedirs(d, exist_ok=True)
    print(f"web UI screenshots in {d}")
    return d


@pytest.fixture
def browser():
    """Chromium (Playwright gives it a fresh temporary profile, --user-data-dir); closed after."""
    with playwright_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=FLAGS)
        pid = b.process.pid if getattr(b, "process", None) else None
        try:
            yield b
        finally:
            b.close()
    assert pid is None or not _alive(pid), "chromium left running"


def _alive(pid):
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    return True


def api(base, path, token, method="GET", body=None):
    req = urllib.request.Request(base + path, method=method, headers={"Authorization": f"Bearer {token}"},
                                 data=json.dumps(body).encode() if body is not None else None)
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, json.loads(r.read() or b"null")
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"null")


def shot(page, artifacts, name):
    page.screenshot(path=os.path.join(artifacts, f"{name}.png"), full_page=True)


def sign_in(page, token):
    page.fill("#token", token)
    page.click("#signin-form button[type=submit]")


def series_points(base, token):
    """How many points the topology's throughput series has (the JSON API's metrics)."""
    return len(api(base, f"/api/v1/topologies/{NAME}/metrics", token)[1].get("throughput") or [])


def chart_points(page, ids):
    """``data-points`` of each chart drawn (a uPlot in it), as the page shows them now."""
    return page.evaluate("(ids) => ids.map(id => { const c = document.getElementById(id);"
                         " return c && c.querySelector('.uplot') ? parseInt(c.dataset.points, 10) : -1; })", ids)


def first_answer(page, ids):
    """Wait until the page's first fresh answer is shown (the script's status line) and the
    charts ``ids`` are drawn (the libraries may run after the answer came)."""
    page.wait_for_function("(ids) => document.getElementById('status').textContent.startsWith('updated')"
                           " && ids.every(id => document.querySelector('#' + id + ' .uplot'))",
                           arg=ids, timeout=60000)


def check_topology_page(page, base, token, artifacts, tag):
    """Graph with every component and edge, grouping labels, live rates, charts that come
    with their last minutes of points (not only what was polled since the page opened)."""
    wait_for(lambda: series_points(base, token) >= 3, timeout=60, what="3 points of throughput sampled")
    n = series_points(base, token)
    page.goto(f"{base}/ui/topologies/{NAME}")
    first_answer(page, ["chart-throughput", "chart-latency"])
    ts, lat = chart_points(page, ["chart-throughput", "chart-latency"])
    assert ts >= n and lat >= n, (ts, lat, n)  # both charts drawn from the first answer's series
    page.wait_for_selector("#graph svg [data-node]")
    wait_for(lambda: {n.get_attribute("data-node") for n in page.query_selector_all("#graph [data-node]")}
             == COMPONENTS, timeout=30, what="every component in the graph")
    edges = {(g.get_attribute("data-from"), g.get_attribute("data-to"))
             for g in page.query_selector_all("#graph g.edge")}
    assert edges == EDGES
    labels = [t.text_content() for t in page.query_selector_all("#graph .edge-label")]
    assert any(t.startswith("shuffle") for t in labels) and any(t.startswith("fields(n)") for t in labels), labels
    # rates move: the spout's emitted count (component page, live-updated) grows while we watch
    headers = [th.text_content() for th in page.query_selector_all("#t-components thead th")]
    assert headers[:3] == ["component", "kind", "tasks"]

    def spout_rate():
        row = page.query_selector("#t-components tbody tr:has(th:has-text('numbers'))")
        return float(row.query_selector_all("td")[2].text_content().replace(",", "") or 0) if row else 0
    wait_for(lambda: spout_rate() > 0, timeout=60, what="the spout's emit rate above 0 in the live table")
    shot(page, artifacts, f"{tag}-topology")


def emitted(base, token):
    return api(base, f"/api/v1/topologies/{NAME}/components/numbers?window=all", token)[1]["metrics"]["emitted"]


def check_pages(page, base, token, artifacts, tag):
    page.goto(f"{base}/ui/")
    page.wait_for_selector(f"#t-topologies a:has-text('{NAME}')")
    shot(page, artifacts, f"{tag}-list")
    check_topology_page(page, base, token, artifacts, tag)
    # the component page: one row per task, rates moving between two live updates, its
    # charts drawn with the component's points at once
    n = series_points(base, token)
    page.goto(f"{base}/ui/topologies/{NAME}/components/check")
    first_answer(page, ["chart-rate", "chart-latency"])
    rate, lat = chart_points(page, ["chart-rate", "chart-latency"])
    assert rate >= n and lat >= n, (rate, lat, n)
    legend = page.text_content("#chart-rate .u-legend")
    assert "emit" in legend and "execute" in legend, legend
    wait_for(lambda: len(page.query_selector_all("#t-tasks tbody tr")) == 2, timeout=30, what="2 task rows")
    first = page.text_content("#t-tasks tbody")
    wait_for(lambda: page.text_content("#t-tasks tbody") != first, timeout=30, what="task metrics updating")
    shot(page, artifacts, f"{tag}-component")
    # the bolt's error, with its traceback (the '<' of its text shown, not parsed)
    page.goto(f"{base}/ui/topologies/{NAME}/errors")
    wait_for(lambda: "unlucky <number>" in page.text_content("#live"), timeout=60, what="the bolt's error")
    tb = page.text_content("pre.tb")
    assert "Traceback" in tb and "ValueError: unlucky <number>" in tb and "in process" in tb, tb
    shot(page, artifacts, f"{tag}-errors")
    # logs: the list of files, one of them shown, follow on
    page.goto(f"{base}/ui/topologies/{NAME}/logs")
    page.wait_for_selector("ul.files a")  # (the page comes signed out; the script fetches it with the token)
    files = [a.text_content() for a in page.query_selector_all("ul.files a")]
    assert any(f.startswith("check-") for f in files), files
    page.click("ul.files a:has-text('check-')")
    page.wait_for_selector("#log")
    page.check("#follow")
    shot(page, artifacts, f"{tag}-logs")


def act(page, button, expect="done"):
    page.click(f"#actions button[data-action={button}]")
    page.wait_for_function("(w) => document.getElementById('action-result').textContent.startsWith(w)", arg=expect,
                           timeout=60000)
    return page.text_content("#action-result")


def active(base, token):
    return api(base, f"/api/v1/topologies/{NAME}/metrics", token)[1].get("active")


def check_actions(page, base, token, artifacts, tag):
    page.goto(f"{base}/ui/topologies/{NAME}")
    page.wait_for_selector("#actions button[data-action=deactivate]")
    act(page, "deactivate")
    assert active(base, token) is False
    wait_for(lambda: "PAUSED" in page.text_content("#t-topology-webui-topo"), timeout=30, what="PAUSED shown")
    act(page, "activate")
    assert active(base, token) is True
    # rebalance sink to 2 tasks from its form
    page.fill("#par-sink", "2")
    page.click("form.rebalance[data-component=sink] button")
    page.wait_for_function("() => document.getElementById('action-result').textContent.startsWith('done')",
                           timeout=150000)
    plan = api(base, f"/api/v1/topologies/{NAME}", token)[1]
    assert {c["name"]: c["par"] for c in plan["logical_plan"]["components"]}["sink"] == 2
    shot(page, artifacts, f"{tag}-actions")
    # kill, with its confirmation: dismissed first (nothing happens), then accepted
    page.once("dialog", lambda d: d.dismiss())
    act(page, "kill", expect="kill cancelled")
    assert api(base, f"/api/v1/topologies/{NAME}", token)[0] == 200
    page.once("dialog", lambda d: d.accept())
    page.click("#actions button[data-action=kill]")
    page.wait_for_url(f"{base}/ui/", timeout=60000)
    wait_for(lambda: api(base, "/api/v1/topologies", token)[1]["topologies"] == [], timeout=30,
             what="the topology gone")


def test_webui_local(bittern, home, tmp_path, browser, artifacts):
    path = tmp_path / "webui_topo.py"
    path.write_text(TOPOLOGY)
    bittern("submit", str(path), "--name", NAME, check=True, timeout=120)
    out = open(tmp_path / "serve.out", "w+")
    proc = subprocess.Popen([sys.executable, "-m", "bittern", "--home", home, "serve", "--port", "0",
                             "--allow-actions"], env=bittern.env, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT)
    try:
        def started():
            out.seek(0)
            assert proc.poll() is None, out.read()
            return re.search(r"web UI at (http://127\.0\.0\.1:\d+)/ui/ \(actions allowed\)", out.read())
        base = wait_for(started, timeout=60, what="bittern serve's URL").group(1)
        token = open(os.path.join(home, "token")).read().strip()
        ctx = browser.new_context(viewport={"width": 1280, "height": 900})
        page = ctx.new_page()
        # signed out: the page, no data, a sign-in box; the token goes in sessionStorage only
        resp = page.goto(f"{base}/ui/topologies/{NAME}")
        assert resp.status == 401 and "Sign in to see" in page.text_content("#live")
        assert resp.headers["content-security-policy"].startswith("default-src 'none'; script-src 'self'")
        assert resp.headers["x-content-type-options"] == "nosniff"
        shot(page, artifacts, "local-signin")
        sign_in(page, token)
        page.wait_for_selector("#graph svg [data-node]")
        assert page.evaluate("sessionStorage.getItem('bittern.token')") == token
        assert token not in page.url and not ctx.cookies()
        check_pages(page, base, token, artifacts, "local")
        n0 = emitted(base, token)
        wait_for(lambda: emitted(base, token) > n0, timeout=30, what="the spout emitting")
        # without JavaScript: the same tables, signed in through HTTP Basic
        check_no_js(browser, base, token, artifacts)
        check_actions(page, base, token, artifacts, "local")
    finally:
        proc.terminate()
        rc = proc.wait(timeout=30)
        out.seek(0)
        text = out.read()
        out.close()
        bittern("kill", NAME)
    assert rc == 0 and "Traceback" not in text, text[-3000:]
    assert not processes_of(home)


def check_no_js(browser_obj, base, token, artifacts):
    ctx = browser_obj.new_context(java_script_enabled=False, http_credentials={"username": "me", "password": token})
    try:
        page = ctx.new_page()
        page.goto(f"{base}/ui/topologies/{NAME}")  # no credentials sent unasked: signed out
        assert "Sign in to see" in page.text_content("#live")
        page.goto(f"{base}/ui/login?next=/ui/topologies/{NAME}")  # the link the page offers without JS
        assert page.url == f"{base}/ui/topologies/{NAME}"
        rows = [r.text_content() for r in page.query_selector_all("#t-components tbody th")]
        assert set(rows) == COMPONENTS
        assert [th.text_content() for th in page.query_selector_all("#t-streams-edges thead th")][:4] == \
            ["from", "to", "stream", "grouping"]
        # the charts' newest points as a table (no script to draw them)
        assert len(page.query_selector_all("#t-recent-throughput tbody th")) >= 3
        assert [th.text_content() for th in page.query_selector_all("#t-recent-throughput thead th")] == \
            ["ago", "spouts emit/s", "bolts execute/s", "execute ms", "complete ms"]
        shot(page, artifacts, "local-nojs-topology")
    finally:
        ctx.close()


def test_webui_cluster(cluster, tmp_path, browser, artifacts):
    """Nimbus serves the same pages; every action is refused without the right token."""
    path = tmp_path / "webui_topo.py"
    path.write_text(TOPOLOGY)
    nimbus = cluster.start_nimbus()
    cluster.start_supervisor("a", slots=2)
    cluster.cli("submit", str(path), "--name", NAME, check=True, timeout=120)
    base, token = nimbus.url, cluster.token
    ctx = browser.new_context(viewport={"width": 1280, "height": 900})
    page = ctx.new_page()
    resp = page.goto(f"{base}/ui/cluster")
    assert resp.status == 401 and "Sign in to see" in page.text_content("#live")
    sign_in(page, token)
    page.wait_for_selector("#t-supervisors tbody th")
    assert page.text_content("#t-zookeeper tbody td") == "connected"
    roles = [r.text_content() for r in page.query_selector_all("#t-nimbus tbody td:nth-child(2)")]
    assert roles == ["leader"]
    def sup_row():  # (read again: a live update may swap the table between two queries)
        return page.evaluate("() => Array.from(document.querySelectorAll("
                             "'#t-supervisors tbody tr:first-child > *'), c => c.textContent)")
    wait_for(lambda: (lambda r: r[:1] == ["a"] and r[2:5] == ["2", "1", "1"])(sup_row()), timeout=30,
             what="supervisor a with 2 slots, 1 used, 1 free")  # the topology's one container
    shot(page, artifacts, "cluster-cluster")
    check_pages(page, base, token, artifacts, "cluster")
    # a standby nimbus serves the pages too; it takes no action (it would answer 307, which the
    # page can't follow with the token): its panel sends the user to the same page on the leader
    standby = cluster.start_nimbus(1)
    page.goto(f"{standby.url}/ui/topologies/{NAME}")  # (another origin: its own sign-in)
    sign_in(page, token)
    # (the topology master admits a new nimbus's key at its next read of nimbus/hosts: the
    # nimbus's first request is refused and asked again on a fresh handshake, bittern/client.py)
    try:
        link = page.wait_for_selector("#actions a")
    except playwright_api.TimeoutError:
        print("the standby's page:", page.inner_text("body")[:3000])
        raise
    assert link.get_attribute("href") == f"{base}/ui/topologies/{NAME}"
    assert page.query_selector_all("#actions button, #actions form") == []
    shot(page, artifacts, "cluster-standby")
    page.goto(f"{standby.url}/ui/cluster")
    page.wait_for_selector("#t-nimbus tbody td")
    roles = sorted(r.text_content() for r in page.query_selector_all("#t-nimbus tbody td:nth-child(2)"))
    assert roles == ["leader", "standby"]
    standby.stop()
    # a wrong token: every action refused by the API (401 shown), nothing changes
    page.goto(f"{base}/ui/topologies/{NAME}")
    page.wait_for_selector("#actions button[data-action=deactivate]")
    page.evaluate("sessionStorage.setItem('bittern.token', 'wrong')")
    for verb in ("deactivate", "activate"):
        assert act(page, verb, expect="refused").startswith("refused (401)")
    page.click("form.rebalance[data-component=sink] button")
    page.wait_for_function("() => document.getElementById('action-result').textContent.startsWith('refused (401)')")
    page.once("dialog", lambda d: d.accept())
    assert act(page, "kill", expect="refused").startswith("refused (401)")
    assert active(base, token) is True and api(base, f"/api/v1/topologies/{NAME}", token)[0] == 200
    # no token at all: the page asks for it and sends nothing
    page.evaluate("sessionStorage.removeItem('bittern.token')")
    assert act(page, "deactivate", expect="sign in").startswith("sign in with the API token")
    shot(page, artifacts, "cluster-refused")
    # the right token: they take effect
    page.evaluate(f"sessionStorage.setItem('bittern.token', {json.dumps(token)})")
    act(page, "deactivate")
    assert active(base, token) is False
    act(page, "activate")
    assert active(base, token) is True
    page.once("dialog", lambda d: d.accept())
    page.click("#actions button[data-action=kill]")
    page.wait_for_url(f"{base}/ui/", timeout=60000)
    wait_for(lambda: api(base, "/api/v1/topologies", token)[1]["topologies"] == [], timeout=60,
             what="the topology gone")
    ctx.close()

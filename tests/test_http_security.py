"""Every HTTP port of Bittern attacked from outside, as issue 18 found them (holes 5 and
6): nimbus's API (a real nimbus on the session's real ZooKeeper, a topology submitted),
``bittern serve`` (a subprocess on a temporary home) and the supervisor's log server
(in-process: it is an HTTP server class). Raw requests over real sockets.

On each: no token, or a wrong one, gets 401 before any of the body is read (a body
announced and never sent: a server that waited for it would answer 408 after its read
timeout instead); negative, non-numeric, conflicting and oversized Content-Length are
refused, and the server closes the connection; 50 idle half-sent connections do not
keep a good request from being answered while they are held, and the server closes
every one of them itself; a request trickled a byte at a time is cut off at its
deadline; names no topology (or log file) can have, ``word_count%2F`` first, are 400
naming the field on every route; nested JSON is 400; and hypothesis-fuzzed methods,
paths, headers, lengths and bodies never get a 500, the server keeps serving, and on
nimbus no topology's record, assignment or code changes. Each server counts what it
refused, by status, exactly (``/healthz``'s ``"http"``; Prometheus on ``bittern serve``)."""
from __future__ import annotations

import collections
import contextlib
import http.client
import json
import os
import re
import select
import socket
import string
import subprocess
import sys
from urllib.parse import quote

import pytest
from hypothesis import HealthCheck, assume, event, given, settings
from hypothesis import strategies as st

from bittern.httpsafe import SMALL_BODY, path_segments
from conftest import EXAMPLES, ROOT, processes_of, wait_for
from nimbus.api import MAX_BODY, SMALL_BODY as SMALL_NIMBUS_BODY

TIMEOUT = 3.0  # the servers' idle timeout in these tests (--timeout, $BITTERN_HTTP_TIMEOUT)
NAME = "word_count"  # the topology nimbus holds
BAD_NAMES = ["word_count%2F", "word_count%2f", "word_count%2F..", "word_count%0A", "word_count%00",
             "word%20count", "..", "%2E%2E", "a%2Fb", "%2Fetc%2Fpasswd", "-x", "_x", "x" * 65, "%C3%A9t%C3%A9"]
# (a log file may start with '_': a component named __x logs to __x-3.log)
BAD = {"topology": BAD_NAMES, "file": [n for n in BAD_NAMES if n not in ("x" * 65, "_x")] + [".x", "x" * 129],
       "component": ["a%2Fb", "word_count%2F", "c%0Ad", "%00", "%7F", "x" * 129]}
FUZZ = settings(max_examples=200, deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


# -- raw HTTP ---------------------------------------------------------------------------------
def raw_request(method, path, headers=(), body=b""):
    head = f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n"
    head += "".join(f"{k}: {v}\r\n" for k, v in headers) + "\r\n"
    return head.encode("latin-1") + body


def server_closed(sock, timeout=30.0):
    """True once the server closed ``sock`` (EOF or reset), False if it stays open."""
    sock.settimeout(timeout)
    try:
        while True:
            data = sock.recv(65536)
            if not data:
                return True
    except ConnectionResetError:
        return True
    except socket.timeout:
        return False


def exchange(port, raw, method="GET", check_closed=False):
    """Send ``raw`` on a new connection and read one answer: ``(status, headers, JSON or
    bytes body, closed)``; ``closed`` (with ``check_closed``): the server closed it."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        s.sendall(raw)
        resp = http.client.HTTPResponse(s, method=method)
        resp.begin()
        body = resp.read()
        if resp.getheader("Content-Type", "").startswith("application/json") and body:
            body = json.loads(body)
        closed = server_closed(s, 2 * TIMEOUT) if check_closed else None
        return resp.status, resp, body, closed


def is_open(sock):
    """The server has neither answered nor closed ``sock`` (no waiting)."""
    sock.setblocking(False)
    try:
        return sock.recv(1, socket.MSG_PEEK) is None
    except BlockingIOError:
        return True
    except OSError:
        return False
    finally:
        sock.setblocking(True)


class Target:
    """One server under attack: its port, token, a good GET, and the routes that take a
    name (``(method, path with {} for the name, field)``)."""

    def __init__(self, port, token, good, name_routes, length_routes):
        self.port, self.token, self.good = port, token, good
        self.name_routes = name_routes
        self.length_routes = length_routes  # (method, path, body limit, body required)

    def auth(self):
        return [("Authorization", f"Bearer {self.token}")]

    def get(self, path, token=True):
        return exchange(self.port, raw_request("GET", path, self.auth() if token else []))

    def healthy(self):
        """Still serving: /healthz, open to all."""
        status, _, body, _ = self.get("/healthz", token=False)
        return status == 200 and body["status"] == "ok"

    def refused(self):
        """``{status: n}``: what the server says it refused so far (its /healthz)."""
        status, _, body, _ = self.get("/healthz", token=False)
        assert status == 200, body
        return {int(k): v for k, v in body["http"]["refused"].items()}


@contextlib.contextmanager
def counting(t):
    """Yields a Counter the block fills with the refusals it causes ({status: n}); on
    exit, the server must have counted exactly those."""
    want = collections.Counter()
    before = t.refused()
    yield want
    after = t.refused()
    got = {k: n - before.get(k, 0) for k, n in after.items() if n != before.get(k, 0)}
    assert got == dict(want), f"the server counted {got}, the test caused {dict(want)}"


# -- the attacks, the same on every server ---------------------------------------------------
def check_token_before_body(t):
    """401 at once with a body announced but never sent (under any limit): the server did
    not wait for it, and closes the connection; the 401 names the way in."""
    routes = [("GET", t.good)] + [(m, p) for m, p, _, _ in t.length_routes]
    with counting(t) as want:
        for method, path in routes:
            for auth in ([], [("Authorization", "Bearer wrong")], [("Authorization", t.token)],
                         [("Authorization", f"Basic {t.token}")], [("Authorization", f"Bearer {t.token}x")]):
                raw = raw_request(method, path, auth + [("Content-Length", "1000"), ("Expect", "100-continue")])
                status, resp, body, closed = exchange(t.port, raw, method, check_closed=True)
                want[401] += 1
                assert status == 401, (method, path, auth, status, body)
                assert resp.getheader("WWW-Authenticate", "").startswith("Bearer"), (method, path)
                assert body["error"].startswith("missing or wrong API token") and closed, (method, path, auth)
        assert t.get(t.good)[0] == 200


def check_lengths(t):
    """With the token: every bad Content-Length refused before reading, connection closed."""
    with counting(t) as want:
        _check_lengths(t, want)
    assert t.healthy()


def _check_lengths(t, want):
    for method, path, limit, required in t.length_routes:
        cases = [("-1", 400, "negative"), ("-99999999999999999999", 400, "negative"),
                 ("abc", 400, "not a number"), ("1e3", 400, "not a number"), ("0x10", 400, "not a number"),
                 ("+5", 400, "not a number"), ("", 400, "not a number"), ("5 5", 400, "not a number"),
                 (str(limit + 1), 413, f"over the limit of {limit}"), ("9" * 40, 413, "over the limit")]
        for value, expected, words in cases:
            raw = raw_request(method, path, t.auth() + [("Content-Length", value)])
            status, _, body, closed = exchange(t.port, raw, method, check_closed=True)
            want[expected] += 1
            assert (status, closed) == (expected, True) and words in body["error"], (method, path, value, body)
        raw = raw_request(method, path, t.auth() + [("Content-Length", "2"), ("Content-Length", "3")], b"{}")
        status, _, body, closed = exchange(t.port, raw, method, check_closed=True)
        want[400] += 1
        assert (status, closed) == (400, True) and "conflicting Content-Length" in body["error"]
        raw = raw_request(method, path, t.auth() + [("Transfer-Encoding", "chunked")], b"2\r\n{}\r\n0\r\n\r\n")
        status, _, body, closed = exchange(t.port, raw, method, check_closed=True)
        want[411] += 1
        assert (status, closed) == (411, True) and "Transfer-Encoding" in body["error"], body
        if required:
            status, _, body, closed = exchange(t.port, raw_request(method, path, t.auth()), method, True)
            want[411] += 1
            assert (status, closed) == (411, True) and "Content-Length" in body["error"], body


def check_idle_connections(t, n=50):
    """``n`` connections each send half a request and stop. A good request is answered
    while every one of them is still held open; then the server closes each of them
    itself (408, or nothing when not a byte had come)."""
    idle = []
    with counting(t) as want:
        _check_idle(t, n, idle, want)
    assert t.healthy()


def _check_idle(t, n, idle, want):
    try:
        for i in range(n):
            s = socket.create_connection(("127.0.0.1", t.port), timeout=30)
            s.sendall(b"GET /api/v1/topologies HTTP/1.1\r\nHost: x\r\nAuthoriz" if i % 5 else b"")
            idle.append(s)
        status, _, _, _ = t.get(t.good)
        held = sum(is_open(s) for s in idle)
        assert (status, held) == (200, n), f"good request: {status}; idle connections still open: {held}/{n}"
        answers = []
        for s in idle:
            s.settimeout(6 * TIMEOUT)
            data = b""
            try:
                while chunk := s.recv(65536):
                    data += chunk
            except ConnectionResetError:
                pass
            except socket.timeout:
                data += b"<still open>"
            answers.append(data)
        assert all(a.startswith(b"HTTP/1.1 408 ") for a in answers[1:5] + answers[6:10]), answers[:10]
        assert [a for a in answers if not (a == b"" or a.startswith(b"HTTP/1.1 408 "))] == []
        want[408] += sum(a.startswith(b"HTTP/1.1 408 ") for a in answers)
    finally:
        for s in idle:
            s.close()


def check_trickle(t):
    """A request line sent one byte at a time, each in time for the per-read timeout, is
    cut off at the request's deadline (408) long before it is complete."""
    line = f"GET {t.good}?{'x' * 300} HTTP/1.1\r\n".encode()
    with counting(t) as want, socket.create_connection(("127.0.0.1", t.port), timeout=30) as s:
        sent = 0
        while sent < len(line):
            s.sendall(line[sent:sent + 1])
            sent += 1
            if select.select([s], [], [], TIMEOUT / 6)[0]:
                break  # the server answered or closed
        data = b""
        s.settimeout(30)
        while chunk := s.recv(65536):
            data += chunk
        want[408] += 1
    assert data.startswith(b"HTTP/1.1 408 ") and sent < len(line), (sent, data[:200])
    assert t.healthy()


def check_names(t):
    with counting(t) as want:
        for method, template, field in t.name_routes:
            for bad in BAD[field]:
                path = template.format(bad)
                raw = raw_request(method, path, t.auth() + ([("Content-Length", "2")] if method == "POST" else []),
                                  b"{}" if method == "POST" else b"")
                status, _, body, _ = exchange(t.port, raw, method)
                want[400] += 1
                assert status == 400 and body.get("field") == field, (method, path, status, body)
                assert body["error"].startswith(f"bad {field} name ") and "\n" not in body["error"], body


# -- hypothesis: any request -------------------------------------------------------------------
SAFE = string.ascii_letters + string.digits + "-._~!$&'()*+,;=:@%"
segments = st.one_of(st.sampled_from(BAD_NAMES + [NAME, "wc", "x", "", "%", "%zz", "%2", "%%2F"]),
                     st.text(alphabet=SAFE, max_size=24),
                     st.text(max_size=12).map(lambda s: quote(s, safe="")))
suffixes = st.sampled_from(["", "/", "/activate", "/deactivate", "/rebalance", "/savepoint", "/logs", "/metrics",
                            "/errors", "/components/x", "/components/%2F", "/x/y/z", "//"])
queries = st.one_of(st.just(""), st.sampled_from(["?window=1m", "?window=%00", "?limit=-1", "?limit=1e9",
                                                  "?component=%2F", "?file=..%2Fx", "?file=stmgr-0.log",
                                                  "?tail=-5", "?tail=1e99", "?wait=nan", "?wait=-1", "?&&=", "?a"]),
                    st.text(alphabet=SAFE + "?/=&", max_size=30).map(lambda q: "?" + q))
header_names = st.one_of(st.sampled_from(["Accept", "Content-Type", "Expect", "Connection", "Cookie", "Range",
                                          "X-Forwarded-For", "Authorization", "Host", "If-None-Match"]),
                         st.text(alphabet=string.ascii_letters + string.digits + "-", min_size=1, max_size=16))
header_values = st.text(alphabet=st.characters(min_codepoint=32, max_codepoint=255, blacklist_characters="\x7f"),
                        max_size=60)
bodies = st.one_of(st.just(b""), st.binary(max_size=256),
                   st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
                                lambda kids: st.lists(kids, max_size=4) | st.dictionaries(st.text(max_size=8), kids,
                                                                                         max_size=4),
                                max_leaves=20).map(lambda d: json.dumps(d).encode()),
                   st.integers(1, 20000).map(lambda n: b"[" * n + b"]" * n),
                   st.integers(1, 20000).map(lambda n: b'{"a":' * n + b"1" + b"}" * n))
lengths = st.sampled_from(["exact", "exact", "exact", "absent", "-1", "abc", "1" * 30, "+3", ""])


@st.composite
def requests(draw, prefixes):
    method = draw(st.integers(0, 9).flatmap(  # now and then any word, mostly what the routes take
        lambda i: st.text(alphabet=string.ascii_letters, min_size=1, max_size=8) if i == 0 else
        st.sampled_from(["GET", "GET", "HEAD", "POST", "POST", "DELETE", "PUT", "PATCH", "OPTIONS", "TRACE"])))
    path = draw(st.one_of(st.tuples(st.sampled_from(prefixes), segments, suffixes, queries).map("".join),
                          st.text(alphabet=SAFE + "/?#", max_size=60).map(lambda p: "/" + p)))
    auth = draw(st.sampled_from(["good", "good", "good", "good", None, "Bearer wrong", "Basic x", "Bearer"]))
    headers = draw(st.lists(st.tuples(header_names, header_values), max_size=4))
    body, length = draw(bodies), draw(lengths)
    return method, path, auth, headers, body, length


def fuzz_one(t, req):
    """Send one fuzzed request; returns its status (asserting it is an HTTP status but 500)."""
    method, path, auth, headers, body, length = req
    hdrs = [(k, v) for k, v in headers if k.lower() not in ("content-length", "transfer-encoding", "authorization")]
    if auth:
        hdrs.append(("Authorization", f"Bearer {t.token}" if auth == "good" else auth))
    if length == "absent":
        body = b""
    else:
        hdrs.append(("Content-Length", str(len(body)) if length == "exact" else length))
    status, _, answer, _ = exchange(t.port, raw_request(method, path, hdrs, body), method)
    assert 100 <= status < 600 and status != 500, (method, path, hdrs, body[:200], status, answer)
    event(f"status {status}")
    return status


# -- bittern serve ---------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def serve(tmp_path_factory):
    """``bittern serve --port 0 --timeout 3`` on a fresh home; proven stopped afterwards."""
    home = str(tmp_path_factory.mktemp("serve-home"))
    out = open(tmp_path_factory.mktemp("serve-out") / "serve.out", "w+")
    env = dict(os.environ, BITTERN_HOME=home, PYTHONUNBUFFERED="1")
    proc = subprocess.Popen([sys.executable, "-m", "bittern", "--home", home, "serve", "--port", "0",
                             "--timeout", str(TIMEOUT)], env=env, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT)
    try:
        def started():
            out.seek(0)
            text = out.read()
            assert proc.poll() is None, f"bittern serve exited {proc.returncode}:\n{text}"
            return re.search(r"http://127\.0\.0\.1:(\d+)/", text)
        port = int(wait_for(started, timeout=60, what="bittern serve's URL").group(1))
        out.seek(0)
        assert f"token in {os.path.join(home, 'token')}" in out.read()
        with open(os.path.join(home, "token")) as f:
            token = f.read().strip()
        routes = [("GET", "/api/v1/topologies/{}", "topology"), ("GET", "/api/v1/topologies/{}/metrics", "topology"),
                  ("GET", "/api/v1/topologies/{}/errors", "topology"),
                  ("GET", "/api/v1/topologies/{}/components/count", "topology"),
                  ("GET", "/api/v1/topologies/wc/components/{}", "component")]
        yield Target(port, token, "/api/v1/topologies", routes, [("GET", "/api/v1/topologies", SMALL_BODY, False)])
    finally:
        proc.terminate()
        rc = proc.wait(timeout=30)
        out.seek(0)
        text = out.read()
        out.close()
        assert rc == 0 and "bittern API stopped" in text, text[-3000:]
        assert "Traceback" not in text, text[-3000:]
        assert not processes_of(home), "bittern serve left processes behind"


def test_serve_token_before_body(serve):
    check_token_before_body(serve)
    assert serve.get("/healthz", token=False)[0] == 200  # the one route open to all
    assert serve.get("/metrics", token=False)[0] == 401
    refused = serve.refused()
    status, _, text, _ = serve.get("/metrics")  # the counts, as Prometheus sees them
    assert status == 200
    text = text.decode()
    for code, n in refused.items():
        assert f'bittern_http_refused_total{{status="{code}"}} {float(n)}' in text, (code, n, text[-2000:])
    assert "bittern_http_turned_away_total 0.0" in text


def test_serve_content_length(serve):
    check_lengths(serve)


def test_serve_idle_and_trickled_connections(serve):
    check_idle_connections(serve)
    check_trickle(serve)


def test_serve_names(serve):
    check_names(serve)
    status, _, body, _ = serve.get("/api/v1/topologies/wc/errors?component=a%2Fb")
    assert status == 400 and body["parameter"] == "component"


@FUZZ
@given(req=requests(["/api/v1/topologies/", "/api/v1/", "/", "/metrics", "/healthz"]))
def test_serve_fuzzed_requests(serve, req):
    fuzz_one(serve, req)
    assert serve.healthy()


def test_serve_insecure_says_so_and_bad_timeouts_are_one_line(bittern, home):
    proc = bittern.popen("serve", "--port", "0", "--insecure")
    try:
        line = proc.stdout.readline()
        assert "NO AUTHENTICATION (--insecure)" in line, line
        port = int(re.search(r"http://127\.0\.0\.1:(\d+)/", line).group(1))
        assert exchange(port, raw_request("GET", "/api/v1/topologies"))[0] == 200
        assert not os.path.exists(os.path.join(home, "token"))
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0
    assert "WARNING: --insecure: the API answers without a token, so any local user" in err, err
    r = bittern("serve", "--port", "0", "--timeout", "0")
    assert r.returncode == 1 and r.stderr.strip().splitlines()[-1] == \
        "error: --timeout must be from 0.1 to 3600 seconds, got 0"
    bittern.env["BITTERN_HTTP_TIMEOUT"] = "soon"
    r = bittern("serve", "--port", "0")
    assert r.returncode == 1 and r.stderr.strip().splitlines()[-1] == \
        "error: BITTERN_HTTP_TIMEOUT must be a number of seconds from 0.1 to 3600, got 'soon'", r.stderr


# -- the supervisor's log server -------------------------------------------------------------------
@pytest.fixture(scope="module")
def logserver(tmp_path_factory):
    from supervisor.logserver import LogServer
    root = tmp_path_factory.mktemp("logs")
    (root / "wc").mkdir()
    (root / "wc" / "stmgr-0.log").write_text("line 1\nline 2\n")
    server = LogServer("127.0.0.1", 0, str(root), lambda: "log-token", idle_secs=TIMEOUT)
    server.start()
    try:
        yield Target(server.port, "log-token", "/logs/wc", [("GET", "/logs/{}", "topology"),
                                                             ("GET", "/logs/{}/stmgr-0.log", "topology"),
                                                             ("GET", "/logs/wc/{}", "file")],
                     [("GET", "/logs", SMALL_BODY, False)])
    finally:
        server.stop()
        wait_for(lambda: server.httpd.slots == 0, timeout=10, what="every connection thread ended")
        assert not server._thread.is_alive()


def test_logserver_attacks(logserver):
    t = logserver
    assert t.get("/logs/wc/stmgr-0.log?tail=1")[2] == b"line 2\n"
    check_token_before_body(t)
    check_lengths(t)
    check_names(t)
    check_idle_connections(t)
    check_trickle(t)


def test_logserver_bounds_its_connections(tmp_path):
    """At most max_connections at once: the next one gets 503 at once, and is served
    again once the others are gone."""
    from supervisor.logserver import LogServer
    server = LogServer("127.0.0.1", 0, str(tmp_path), lambda: "tok", idle_secs=TIMEOUT)
    server.httpd.max_connections = 4
    server.start()
    held = []
    try:
        for _ in range(4):
            held.append(socket.create_connection(("127.0.0.1", server.port), timeout=30))
            held[-1].sendall(b"GET /logs HTTP/1.1\r\n")
        wait_for(lambda: server.httpd.slots == 4, timeout=10, what="4 connections admitted")
        with socket.create_connection(("127.0.0.1", server.port), timeout=30) as fifth:
            resp = http.client.HTTPResponse(fifth)  # answered at once, before it sent anything
            resp.begin()
            body = json.loads(resp.read())
            assert (resp.status, server_closed(fifth), server.httpd.turned_away) == (503, True, 1)
            assert body == {"error": "too many connections (at most 4); try again"}
        for s in held:
            s.close()
        wait_for(lambda: server.httpd.slots == 0, timeout=10, what="the held connections gone")
        status, _, health, _ = exchange(server.port, raw_request("GET", "/healthz"))
        assert (status, health["http"]["turned_away"]) == (200, 1), health  # counted where it is shown
        assert exchange(server.port, raw_request("GET", "/logs", [("Authorization", "Bearer tok")]))[0] == 200
    finally:
        for s in held:
            s.close()
        server.stop()
    wait_for(lambda: server.httpd.slots == 0, timeout=10, what="every connection thread ended")


@FUZZ
@given(req=requests(["/logs/", "/logs/wc/", "/", "/logs"]))
def test_logserver_fuzzed_requests(logserver, req):
    fuzz_one(logserver, req)
    assert logserver.healthy()


# -- nimbus ------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def nimbus(zk_server, tmp_path_factory):
    """A real nimbus (BITTERN_HTTP_TIMEOUT=3) with word_count submitted: no supervisor, so
    it waits for slots and its record stays as submitted."""
    from clusterkit import Cluster
    cluster = Cluster(zk_server, tmp_path_factory.mktemp("cluster"))
    cluster.env["BITTERN_HTTP_TIMEOUT"] = str(TIMEOUT)
    try:
        d = cluster.start_nimbus()
        r = cluster.cli("submit", os.path.join(EXAMPLES, "word_count.py"), "--name", NAME, timeout=60)
        port = int(d.url.rsplit(":", 1)[1])
        t = Target(port, cluster.token, "/api/v1/topologies", [
            ("DELETE", "/api/v1/topologies/{}", "topology"), ("POST", "/api/v1/topologies/{}/activate", "topology"),
            ("POST", "/api/v1/topologies/{}/deactivate", "topology"),
            ("POST", "/api/v1/topologies/{}/rebalance", "topology"),
            ("POST", "/api/v1/topologies/{}/savepoint", "topology"), ("GET", "/api/v1/topologies/{}/logs", "topology"),
            ("GET", "/api/v1/topologies/{}", "topology"), ("GET", "/api/v1/topologies/{}/metrics", "topology"),
            ("GET", f"/api/v1/topologies/{NAME}/logs?file={{}}", "file")],
            [("POST", f"/api/v1/topologies/{NAME}/rebalance", SMALL_NIMBUS_BODY, False),
             ("POST", "/api/v1/topologies", MAX_BODY, True)])
        t.cluster, t.daemon, t.submitted = cluster, d, r
        t.before = zk_snapshot(cluster)
        assert NAME in t.before[0], (r.stdout, r.stderr, t.before)
        yield t
        assert zk_snapshot(cluster) == t.before  # nothing any attack sent changed a topology
        log = d.tail(100000)
        assert "Traceback" not in log and "internal error" not in log, log[-3000:]
    finally:
        cluster.stop()


def zk_snapshot(cluster):
    """What nimbus keeps of the topologies: records, assignments, code archives."""
    st_ = cluster.state()
    try:
        names = sorted(st_.topologies())
        return ({n: st_.topology(n) for n in names}, {n: st_.assignment(n) for n in names},
                sorted(st_.children("code")))
    finally:
        st_.close()


def test_nimbus_attacks(nimbus):
    t = nimbus
    status, _, body, _ = t.get(f"/api/v1/topologies/{NAME}")
    assert status == 200 and body["name"] == NAME
    check_token_before_body(t)
    check_lengths(t)
    check_names(t)
    # the finding itself: DELETE word_count%2F used to kill word_count
    status, _, body, _ = exchange(t.port, raw_request("DELETE", f"/api/v1/topologies/{NAME}%2F", t.auth()), "DELETE")
    assert status == 400 and body == {"error": f"bad topology name '{NAME}/': 1-64 letters, digits, '_', '.', "
                                               "'-', starting with a letter or digit", "field": "topology"}
    assert zk_snapshot(t.cluster) == t.before
    check_idle_connections(t)
    check_trickle(t)


def test_nimbus_json_bodies(nimbus):
    t = nimbus
    path = f"/api/v1/topologies/{NAME}/rebalance"
    for body, words in ((b"[" * 100000, "nests deeper than 64 levels"),
                        (b'{"a":' * 65 + b"1" + b"}" * 65, "nests deeper than 64 levels"),
                        (b"\xff\xfe{", "not JSON"), (b"{'a': 1}", "not JSON"), (b"[1, 2]", "must be a JSON object"),
                        (b'{"parallelism": [1]}', "parallelism must be an object"),
                        (b'{"parallelism": {"nope": 2}}', "has no component 'nope'"),
                        (b'{"parallelism": {"split/x": 1}}', "bad component name"),
                        (b'{"containers": "3"}', "containers must be an integer")):
        raw = raw_request("POST", path, t.auth() + [("Content-Length", str(len(body)))], body)
        status, _, answer, _ = exchange(t.port, raw, "POST")
        assert status == 400 and words in answer["error"] and "\n" not in answer["error"], (body[:40], answer)
    for body, words in ((b"[" * 50000, "nests deeper"), (b'{"name": "wc", "definition": []}', "definition must be"),
                        (b'{"name": "wc", "definition": {}, "archive": 5, "digest": "x"}', "archive must be"),
                        (b'{"name": "wc%2F", "definition": {}}', "bad topology name")):
        raw = raw_request("POST", "/api/v1/topologies", t.auth() + [("Content-Length", str(len(body)))], body)
        status, _, answer, _ = exchange(t.port, raw, "POST")
        assert status == 400 and words in answer["error"], (body[:40], answer)
    assert zk_snapshot(t.cluster) == t.before


@FUZZ
@given(req=requests(["/api/v1/topologies/", "/api/v1/", "/", "/api/v1/cluster"]))
def test_nimbus_fuzzed_requests(nimbus, req):
    method, path, auth, *_ = req
    # a fuzzed request with the token may name the real topology only to read it
    assume(not (auth == "good" and method not in ("GET", "HEAD") and NAME in path_segments(path)))
    fuzz_one(nimbus, req)
    assert nimbus.healthy()


"""Nimbus's HTTP API: the read-only API of ``bittern serve`` plus the write operations.

Every request but ``/healthz`` needs the token, checked from the headers before any
of the body is read (bittern/httpsafe.py: deadlines, bounded connections, Content-Length
checked first). Reads go to :class:`bittern.httpapi.Api` over a
:class:`~nimbus.source.ClusterSource`, on any nimbus; writes go to the leader (a standby
answers 307 with the leader's URL). Logs are fetched from the supervisor that has them.
Bodies are JSON objects, capped in size (a submission's archive: ``MAX_BODY``; any
other body: ``SMALL_BODY``) and in nesting depth; nothing in them is unpickled. Every
topology name, component name and log file name is checked after percent-decoding
(``word_count%2F`` is a 400, not ``word_count``).
"""
from __future__ import annotations

import json
import logging
import threading
import urllib.error
import urllib.parse
import urllib.request
from urllib.parse import parse_qs, unquote, urlsplit

from bittern import __version__, archive, auth
from bittern import httpapi
from bittern.httpapi import JSON_TYPE, Api, dump_json, write_answer
from bittern.httpsafe import Reject, SafeHandler, check_name, parse_json, path_segments, require_token
from bittern.webui import for_nimbus

from . import health, savepoints
from .daemon import ApiError

log = logging.getLogger("bittern.nimbus.api")

# base64 of the largest archive, plus the definition and config
MAX_BODY = archive.MAX_BYTES * 4 // 3 + (4 << 20)
SMALL_BODY = 1 << 20  # rebalance, savepoint: a few fields
MAX_TAIL = 100_000  # lines of a log file
LOG_FETCH_SECS = 10.0


class NimbusApi:
    def __init__(self, nimbus):
        self.nimbus = nimbus
        self.reads = Api(nimbus.source, lock=threading.RLock())
        self.webui = for_nimbus(self, lambda: health.unreachable(nimbus.state) or "connected")  # /ui/ pages

    def handle(self, method, target, headers, body):
        """``(status, content type, bytes, extra headers)``; never raises. A read never
        waits for a lost ZooKeeper connection to come back (it is a 503 at once); a write
        that started before the loss waits for it, so that it is done whole or not at all."""
        if method in ("GET", "HEAD"):
            with health.impatient(self.nimbus.state):
                return self._handle(method, target, headers, body)
        return self._handle(method, target, headers, body)

    def _handle(self, method, target, headers, body):
        parts = urlsplit(target)
        segs = [unquote(s) for s in parts.path.split("/") if s]
        try:
            if segs == ["healthz"]:
                return self._plain(*self.reads.handle("GET", target))
            if not auth.check(headers.get("Authorization"), self.nimbus.token):
                raise ApiError(401, "missing or wrong API token (Authorization: Bearer ...)")
            down = health.unreachable(self.nimbus.state)
            if down:  # at once, rather than block for the state manager's retries
                raise ApiError(503, down, zookeeper="unreachable")
            out = self._route(method, segs, parse_qs(parts.query), body)
            if out is None:
                if method not in ("GET", "HEAD"):
                    raise ApiError(405, f"method {method} not allowed on {parts.path}")
                status, ctype, data = self.reads.handle("GET", target, headers.get("Accept"))
                if status == 500 and health.unreachable(self.nimbus.state):  # lost it half-way
                    raise ApiError(503, health.message(self.nimbus.state), zookeeper="unreachable")
                return status, ctype, data, {}
            status, doc = out
            if isinstance(doc, str):
                return status, "text/plain; charset=utf-8", doc.encode(), {}
            return status, JSON_TYPE, dump_json(doc), {}
        except ApiError as e:
            extra = {"WWW-Authenticate": "Bearer"} if e.status == 401 else {}
            if e.status == 307 and e.extra.get("leader"):
                extra["Location"] = e.extra["leader"].rstrip("/") + parts.path
            return e.status, JSON_TYPE, dump_json({"error": str(e), **e.extra}), extra
        except Exception as e:  # noqa: BLE001 - answer 500; the traceback is logged
            if health.is_zk_failure(e) or health.unreachable(self.nimbus.state):
                log.warning("%s %s: ZooKeeper connection lost during the request (%s)", method, target,
                            type(e).__name__)
                return 503, JSON_TYPE, dump_json({"error": health.message(self.nimbus.state),
                                                  "zookeeper": "unreachable"}), {}
            log.exception("internal error answering %s %s", method, target)
            return 500, JSON_TYPE, dump_json({"error": f"internal error: {type(e).__name__}: {e}"}), {}

    @staticmethod
    def _plain(status, ctype, body):
        return status, ctype, body, {}

    def _route(self, method, segs, query, body):
        """The nimbus-only endpoints; None for the read API's."""
        n = self.nimbus
        if segs == ["api", "v1", "cluster"] and method == "GET":
            return 200, n.cluster()
        if segs == ["api", "v1", "topologies"] and method == "POST":
            return n.submit(check_submission(self._json(body)))
        if len(segs) == 4 and segs[:3] == ["api", "v1", "topologies"] and method == "DELETE":
            return 200, n.kill(_name(segs[3]), wait=self._secs(query, "wait"))
        if len(segs) == 5 and segs[:3] == ["api", "v1", "topologies"]:
            name, verb = segs[3], segs[4]
            if verb in ("activate", "deactivate") and method == "POST":
                return 200, n.set_active(_name(name), verb == "activate")
            if verb == "rebalance" and method == "POST":
                return 200, n.rebalance(_name(name), check_rebalance(self._json(body)))
            if verb == "savepoint" and method == "POST":
                return 200, savepoints.take(n, _name(name), check_savepoint(self._json(body)))
            if verb == "logs" and method == "GET":
                return self.logs(_name(name), query)
        return None

    @staticmethod
    def _secs(query, key, most=600.0):
        """A number of seconds from the query string (None if absent)."""
        raw = (query.get(key) or [None])[-1]
        if raw is None:
            return None
        try:
            secs = float(raw)
        except ValueError:
            secs = -1.0
        if not 0 <= secs <= most:
            raise ApiError(400, f"{key} must be a number of seconds from 0 to {most:g}, got {raw!r}")
        return secs

    @staticmethod
    def _json(body):
        try:
            doc = parse_json(body or b"{}")
        except Reject as r:
            raise ApiError(r.status, r.message) from None
        if not isinstance(doc, dict):
            raise ApiError(400, "the request body must be a JSON object")
        return doc

    # -- logs, from the supervisors ------------------------------------------------------------
    def logs(self, name, query):
        state = self.nimbus.state
        asg = state.assignment(name)
        if state.topology(name) is None and asg is None:
            raise ApiError(404, f"no topology named {name!r}")
        sups = {w["supervisor"] for w in ((asg or {}).get("containers") or {}).values()}
        docs = {sid: state.get(f"supervisors/{sid}") for sid in sorted(sups)}
        wanted = (query.get("file") or [None])[-1]
        tail = (query.get("tail") or [None])[-1]
        if wanted is not None:
            _name(wanted, "file")
        if tail is not None and not (tail.isascii() and tail.isdigit() and int(tail) <= MAX_TAIL):
            raise ApiError(400, f"tail must be a number of lines from 0 to {MAX_TAIL}, got {tail[:40]!r}",
                           parameter="tail")
        if wanted is None:
            containers = {}
            for sid, doc in docs.items():
                if doc and doc.get("log_url"):
                    listing = self._fetch(doc["log_url"], f"/logs/{urllib.parse.quote(name)}", json_=True)
                    for f in _file_names(listing):
                        containers.setdefault(str(_container_of(f, asg, sid)), []).append(f)
            return 200, {"topology": name, "containers": {c: sorted(v) for c, v in sorted(containers.items())}}
        for sid, doc in docs.items():
            if not doc or not doc.get("log_url"):
                continue
            path = f"/logs/{urllib.parse.quote(name)}/{urllib.parse.quote(wanted)}"
            if tail:
                path += f"?tail={urllib.parse.quote(tail)}"
            text = self._fetch(doc["log_url"], path, missing_ok=True)
            if text is not None:
                return 200, text
        raise ApiError(404, f"topology {name!r} has no log file {wanted!r} on its supervisors")

    def _fetch(self, base, path, json_=False, missing_ok=False):
        req = urllib.request.Request(base.rstrip("/") + path,
                                     headers={"Authorization": auth.bearer(self.nimbus.token)})
        try:
            with urllib.request.urlopen(req, timeout=LOG_FETCH_SECS) as r:
                data = r.read()
        except urllib.error.HTTPError as e:
            if e.code == 404 and missing_ok:
                return None
            if e.code == 404:
                return []
            raise ApiError(502, f"supervisor log server {base} answered {e.code} for {path}") from None
        except OSError as e:
            raise ApiError(502, f"supervisor log server {base} does not answer: {e}") from None
        if not json_:
            return data.decode("utf-8", "replace")
        try:
            return json.loads(data)
        except ValueError:
            raise ApiError(502, f"supervisor log server {base} answered {path} with something not JSON") from None


def _file_names(listing):
    """File names from a supervisor's listing (a list of names or of ``{"file": ...}``)."""
    if isinstance(listing, dict):
        listing = listing.get("files") or []
    if not isinstance(listing, list):
        return []
    return [str(x.get("file")) if isinstance(x, dict) else str(x) for x in listing]


# -- checks of what a client sends ------------------------------------------------------------
def _name(value, field="topology"):
    """A percent-decoded name from the path or query: 400 naming the field unless valid."""
    try:
        return check_name(value, field)
    except Reject as r:
        raise ApiError(400, r.message, **r.extra) from None


def _field(body, key, kind, what, required=False):
    """400 naming ``key`` unless ``body[key]`` is a ``kind`` (or absent, when not required)."""
    value = body.get(key)
    if value is None and not required:
        return
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool):
        raise ApiError(400, f"{key} must be {what}, got {type(value).__name__}", field=key)


def check_submission(body):
    """The shape of a submission (the values are checked by Nimbus.submit)."""
    _name(body.get("name"), "topology")
    _field(body, "definition", dict, "an object (the topology definition)", required=True)
    _field(body, "config", dict, "an object {key: value}")
    _field(body, "archive", str, "base64 text", required=True)
    _field(body, "digest", str, "the archive's sha256 (hex)", required=True)
    _field(body, "entry", str, "the topology file's path in the archive")
    _field(body, "deactivated", bool, "true or false")
    _field(body, "savepoint", dict, "an object {path, allow_non_restored_state}")
    return body


def check_rebalance(body):
    _field(body, "parallelism", dict, "an object {component: N}")
    for comp in body.get("parallelism") or {}:
        _name(comp, "component")
    _field(body, "containers", int, "an integer >= 1 or null")
    return body


def check_savepoint(body):
    _field(body, "dir", str, "an absolute path or null")
    _field(body, "deactivate", bool, "true or false")
    return body


def _container_of(filename, asg, sid):
    """The container a log file belongs to, from its name (``tmaster.log``, ``stmgr-C.log``,
    ``COMPONENT-TASK.log``); other files go to the supervisor's first container."""
    packing = (asg or {}).get("packing") or {}
    stem = filename[:-4] if filename.endswith(".log") else filename
    if stem == "tmaster":
        return 0
    head, _, tail = stem.rpartition("-")
    if tail.isdigit():
        if head == "stmgr":
            return int(tail)
        for c, tasks in (packing.get("containers") or {}).items():
            if int(tail) in tasks:
                return int(c)
    mine = sorted(int(c) for c, w in ((asg or {}).get("containers") or {}).items() if w["supervisor"] == sid)
    return mine[0] if mine else 0


class Handler(SafeHandler):
    """The token from the headers first (bittern/httpsafe.py), then :class:`NimbusApi`."""

    server_version = f"bittern-nimbus/{__version__}"

    def _submission(self):
        return self.command == "POST" and path_segments(self.path) == ["api", "v1", "topologies"]

    def authorize(self):
        if path_segments(self.path)[:1] == ["ui"]:
            return  # the web UI's pages check the token themselves (bittern/webui: no data without it)
        if path_segments(self.path) != ["healthz"]:
            require_token(self.headers, self.server.api.nimbus.token)

    def body_limit(self):
        return MAX_BODY if self._submission() else SMALL_BODY

    def body_required(self):
        return self._submission()

    def respond(self, body):
        page = self.server.api.webui.handle(self.command, self.path, self.headers)
        if page is not None:
            write_answer(self, *page[:3], page[3])
            return
        status, ctype, data, extra = self.server.api.handle(self.command, self.path, self.headers, body)
        write_answer(self, status, ctype, data, extra.items())

    def log_message(self, fmt, *args):
        log.info("%s %s", self.address_string(), fmt % args)


class Server(httpapi.Server):
    handler = Handler

    def __init__(self, address, api, idle_secs=None):
        super().__init__(address, api, idle_secs=idle_secs)

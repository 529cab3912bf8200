"""The HTTP API (JSON) and its Prometheus endpoint (the export itself: bittern/promexport.py).

:class:`Api` is the application. It knows nothing of where its data comes from:
it takes a *source* with the interface of :class:`bittern.monitor.LocalSource`
(``topologies()``, ``topology(name)``, ``metrics(name, window)``, ``errors(name,
component, limit)``): ``bittern serve`` serves it over the local state directory, nimbus
over ZooKeeper. :func:`make_server` serves it with bittern/httpsafe.py's hardened server.

Endpoints (every answer is JSON except ``/metrics``; README.md has the shapes)::

    GET /healthz
    GET /api/v1/topologies
    GET /api/v1/topologies/{name}
    GET /api/v1/topologies/{name}/metrics?window=interval|1m|10m|all
    GET /api/v1/topologies/{name}/components/{component}?window=...
    GET /api/v1/topologies/{name}/errors?component=...&limit=N
    GET /metrics?window=...                   (Prometheus text format)

Authentication: ``bittern serve`` requires ``Authorization: Bearer TOKEN`` on every
endpoint but ``/healthz``; the token is the file ``<BITTERN_HOME>/token`` (mode 0600,
made at the first start: bittern/auth.py). ``bittern serve --insecure`` serves without
it, and then any local user can read every topology's plan, config and errors.
Prometheus scrapes ``/metrics`` with the token file::

    scrape_configs:
      - job_name: bittern
        authorization: {type: Bearer, credentials_file: /home/me/.bittern/token}
        static_configs: [{targets: ["127.0.0.1:8080"]}]

JSON has no infinities: a watermark (``input_watermark``, ``output_watermark``) is
epoch seconds, null before the first one, or the string ``"inf"`` once its stream has
ended; any other non-finite number is null (:func:`finite`). In ``/metrics`` a
finished stream's watermark is ``+Inf``, and a watermark not there yet is no sample.

Errors are ``{"error": "..."}`` naming the thing: 400 for a bad query parameter
(``parameter``: its name) or a name in the path that no topology or component can have
(``field``: ``topology`` or ``component``), 401 without the token, 404 for an unknown
topology, component or path, 405 for a method other than GET, 503 when a topology
exists but does not answer (still starting, or dead), 500 (with the traceback logged)
for anything unexpected; bittern/httpsafe.py's refusals (408, 411, 413, 503 busy).
"""
from __future__ import annotations

import json
import logging
import socket
import threading
import time
from urllib.parse import parse_qs, unquote, urlsplit

from . import __version__, promexport, topostatus
from .cli.common import NAME_RE
from .errors import BitternError
from .httpsafe import (Reject, SafeHandler, SafeServer, check_name, is_loopback, path_segments,  # noqa: F401
                       require_token, write_answer)
from .metrics_fmt import WINDOWS, json_safe
from .monitor import TopologyGone

log = logging.getLogger("bittern.httpapi")

API = "/api/v1"
DEFAULT_WINDOW = "1m"
DEFAULT_ERROR_LIMIT = 10
MAX_ERROR_LIMIT = 100  # the topology master keeps the last 100 errors
JSON_TYPE = "application/json; charset=utf-8"


class HttpError(Exception):
    """An answer other than 200, with a JSON body ``{"error": message, **extra}``."""

    def __init__(self, status, message, **extra):
        super().__init__(message)
        self.status = status
        self.message = message
        self.extra = extra


# -- routing (pure) ---------------------------------------------------------------------
# (pattern segments, handler name, allowed query parameters); "{x}" captures a segment
ROUTES = [
    (("healthz",), "healthz", ()),
    (("metrics",), "prometheus", ("window",)),
    (("api", "v1"), "index", ()),
    (("api", "v1", "topologies"), "topologies", ()),
    (("api", "v1", "topologies", "{name}"), "topology", ()),
    (("api", "v1", "topologies", "{name}", "metrics"), "metrics", ("window",)),
    (("api", "v1", "topologies", "{name}", "components", "{component}"), "component", ("window",)),
    (("api", "v1", "topologies", "{name}", "errors"), "errors", ("component", "limit")),
]


def route(path):
    """``(handler name, path parameters, allowed query parameters)`` for a request
    path (without its query string); :class:`HttpError` 404 when nothing matches.
    Segments are percent-decoded; a trailing slash is ignored."""
    raw = [s for s in path.split("/") if s]
    segs = [unquote(s) for s in raw]
    for pattern, handler, allowed in ROUTES:
        if len(pattern) != len(segs):
            continue
        params = {}
        for p, s in zip(pattern, segs):
            if p.startswith("{"):
                if not s:
                    break
                params[p[1:-1]] = s
            elif p != s:
                break
        else:
            return handler, params, allowed
    raise HttpError(404, f"no such endpoint: {path!r} (see GET {API})")


def parse_query(query, allowed):
    """The query string as ``{name: value}`` (last value wins); 400 naming an
    unknown parameter."""
    out = {}
    for k, vals in parse_qs(query, keep_blank_values=True).items():
        if k not in allowed:
            hint = f"; this endpoint takes {', '.join(allowed)}" if allowed else "; this endpoint takes none"
            raise HttpError(400, f"unknown query parameter {k!r}{hint}", parameter=k)
        out[k] = vals[-1]
    return out


def check_path_name(value, field):
    """A topology or component name from the path: :class:`HttpError` 400 naming the
    field when no topology or component can have it (it never reaches the source)."""
    try:
        return check_name(value, field)
    except Reject as r:
        raise HttpError(400, r.message, **r.extra) from None


def check_window(query):
    window = query.get("window") or DEFAULT_WINDOW
    if window not in WINDOWS:
        raise HttpError(400, f"bad value for parameter 'window': {window!r} "
                             f"(one of {', '.join(WINDOWS)})", parameter="window")
    return window


def check_limit(query):
    raw = query.get("limit")
    if raw in (None, ""):
        return DEFAULT_ERROR_LIMIT
    try:
        limit = int(raw)
    except ValueError:
        limit = 0
    if not 1 <= limit <= MAX_ERROR_LIMIT:
        raise HttpError(400, f"bad value for parameter 'limit': {raw!r} "
                             f"(an integer from 1 to {MAX_ERROR_LIMIT})", parameter="limit")
    return limit


def finite(obj):
    """``obj`` as JSON can hold it (JSON has no inf/nan): a watermark at ``+inf`` (the
    end of a bounded stream) becomes the string ``"inf"``, apart from null (no
    watermark yet); every other non-finite float becomes null
    (:func:`bittern.metrics_fmt.json_safe`)."""
    return json_safe(obj)


def dump_json(obj):
    return (json.dumps(finite(obj), indent=1, sort_keys=True, allow_nan=False, default=str) + "\n").encode()


# -- the application --------------------------------------------------------------------
class Api:
    """Answers requests from a source. ``handle`` is all a server needs.

    Calls into the source are serialized with a lock: LocalSource caches one
    ZeroMQ socket per topology, and ZeroMQ sockets are not thread-safe."""

    def __init__(self, source, lock=None):
        self.source = source
        self.lock = lock or threading.RLock()
        self.started = time.time()
        self.refusals = None  # the serving SafeServer's Refusals (set by Server)

    # -- entry point --------------------------------------------------------------------
    def handle(self, method, target, accept=None):
        """``(status, content type, body bytes)`` for ``method`` on ``target``
        (a path with an optional query string); ``accept`` is the request's
        Accept header (it chooses the format of /metrics). Never raises."""
        status, result = self.answer(method, target, accept)
        if isinstance(result, tuple):  # (content type, bytes)
            return (status, *result)
        return status, JSON_TYPE, dump_json(result)

    def answer(self, method, target, accept=None, documents_only=False):
        """``(status, document)`` (or ``(status, (content type, bytes))`` for the
        Prometheus text) for ``method`` on ``target``, before any JSON is written: the
        web UI in this process reads the documents as they are (writing a 100-task
        topology's metrics as indented JSON and parsing it back was most of a page's
        time). ``documents_only``: the Prometheus text is a 404. Never raises."""
        try:
            parts = urlsplit(target)
            handler, params, allowed = route(parts.path)
            if method not in ("GET", "HEAD"):
                raise HttpError(405, f"method {method} not allowed on {parts.path} (only GET)")
            for key, field in (("name", "topology"), ("component", "component")):
                if key in params:
                    check_path_name(params[key], field)
            query = parse_query(parts.query, allowed)
            if handler == "prometheus":
                if documents_only:
                    raise HttpError(404, f"{parts.path} is no JSON document")
                params["accept"] = accept
            return 200, getattr(self, "get_" + handler)(query=query, **params)
        except HttpError as e:
            return e.status, {"error": e.message, **e.extra}
        except Exception as e:  # noqa: BLE001 - answer 500, never swallow: the traceback is logged
            log.exception("internal error answering %s %s", method, target)
            return 500, {"error": f"internal error: {type(e).__name__}: {e}"}

    # -- source access ------------------------------------------------------------------
    def _call(self, name, fn, *args):
        """``fn(*args)`` under the lock, with the source's errors as HTTP errors:
        404 for a topology that does not exist, 503 for one that exists but does
        not answer."""
        if name is not None and not NAME_RE.fullmatch(name):  # cannot exist; never reaches the source
            raise HttpError(404, f"no topology named {name!r}", topology=name)
        with self.lock:
            try:
                return fn(*args)
            except TopologyGone as e:
                if name is None:
                    raise
                row = self._row(name)
                if row is None:
                    raise HttpError(404, f"no topology named {name!r}", topology=name) from None
                raise HttpError(503, f"topology {name!r} is {row.get('state')}: {e}", topology=name,
                                state=row.get("state")) from None
            except BitternError as e:
                if name is not None and self._row(name) is None:
                    raise HttpError(404, f"no topology named {name!r}", topology=name) from None
                raise HttpError(503, str(e), topology=name) from None

    def _row(self, name):
        with self.lock:
            for row in self.source.topologies():
                if row.get("name") == name:
                    return row
        return None

    def _metrics(self, name, window):
        doc = dict(self._call(name, self.source.metrics, name, window))
        for k in ("op", "req"):  # reply envelope, not data
            doc.pop(k, None)
        return doc

    def _components(self, name):
        plan = self._call(name, self.source.topology, name)
        return plan, {c["name"]: c for c in plan["logical_plan"]["components"]}

    def _component(self, name, component):
        plan, comps = self._components(name)
        if component not in comps:
            raise HttpError(404, f"topology {name!r} has no component {component!r} "
                                 f"(components: {', '.join(sorted(comps))})",
                            topology=name, component=component)
        return plan, comps[component]

    # -- handlers -----------------------------------------------------------------------
    def get_healthz(self, query):
        doc = {"status": "ok", "version": __version__, "uptime_secs": time.time() - self.started}
        if self.refusals is not None:
            doc["http"] = self.refusals.snapshot()
        return doc

    def get_index(self, query):
        return {"version": __version__, "endpoints": [
            "GET /healthz", f"GET {API}/topologies", f"GET {API}/topologies/{{name}}",
            f"GET {API}/topologies/{{name}}/metrics?window={'|'.join(WINDOWS)}",
            f"GET {API}/topologies/{{name}}/components/{{component}}?window=...",
            f"GET {API}/topologies/{{name}}/errors?component=...&limit=N",
            "GET /metrics?window=... (Prometheus text format)"]}

    def _annotated(self, rows):
        """Rows with the topology master's health (a source that did not add it: local mode)."""
        state = getattr(self.source, "state", None)
        return topostatus.annotate_rows(rows, state) if state is not None else rows

    def get_topologies(self, query):
        with self.lock:
            rows = self._annotated(self.source.topologies())
        return {"topologies": sorted(rows, key=lambda r: r["name"])}

    def get_topology(self, query, name):
        doc = dict(self._call(name, self.source.topology, name))
        row = self._row(name)
        if row is not None and row.get("state") == "DEAD":
            doc["state"] = "DEAD"  # the listing knows the supervisor died
        elif row is not None and "health" not in doc:
            self._annotated([row])
            for k in ("health", "reason", "since"):
                if k in row:
                    doc[k] = row[k]
            doc["state"] = topostatus.shown_state(doc.get("state"), row.get("health"))
        return doc

    def get_metrics(self, query, name):
        window = check_window(query)
        return self._metrics(name, window)

    def get_component(self, query, name, component):
        window = check_window(query)
        _, definition = self._component(name, component)
        doc = self._metrics(name, window)
        view = (doc.get("components") or {}).get(component)
        if view is None:
            raise HttpError(503, f"topology {name!r} reports no metrics for component {component!r} yet",
                            topology=name, component=component)
        tasks = {t: v for t, v in (doc.get("tasks") or {}).items() if v.get("component") == component}
        return {"topology": name, "component": component, "kind": definition.get("kind"),
                "window": doc.get("window", window), "definition": definition, "metrics": view,
                "tasks": dict(sorted(tasks.items(), key=lambda kv: int(kv[0])))}

    def get_errors(self, query, name):
        limit = check_limit(query)
        component = query.get("component") or None
        if component is not None:
            try:
                check_name(component, "component")
            except Reject as r:
                raise HttpError(400, r.message, parameter="component") from None
        _, comps = self._components(name)
        if component is not None and component not in comps and component != topostatus.SYSTEM_COMPONENT:
            raise HttpError(404, f"topology {name!r} has no component {component!r} "
                                 f"(components: {', '.join(sorted(comps))})",
                            topology=name, component=component)
        out = {}
        for c in ([component] if component in comps else [] if component else sorted(comps)):
            out[c] = list(self._call(name, self.source.errors, name, c, limit))
        if component is None or component == topostatus.SYSTEM_COMPONENT:
            # the topology master's own errors (a checkpoint that cannot complete), when it has some
            mine = list(self._call(name, self.source.errors, name, topostatus.SYSTEM_COMPONENT, limit))
            if mine or component:
                out[topostatus.SYSTEM_COMPONENT] = mine
        return {"topology": name, "limit": limit, "components": out}

    def get_prometheus(self, query, accept=None):
        window = check_window(query)
        if promexport.prometheus_client is None:
            raise HttpError(501, promexport.PROMETHEUS_MISSING)
        with self.lock:
            rows = self._annotated(self.source.topologies())
            docs = {}
            for row in rows:
                if row.get("state") in ("RUNNING", "PAUSED", topostatus.DEGRADED):
                    try:
                        docs[row["name"]] = self._metrics(row["name"], window)
                    except HttpError as e:  # one silent topology must not fail the scrape
                        log.warning("scrape: no metrics from topology %s: %s", row["name"], e.message)
                    except Exception:  # noqa: BLE001 - nor a broken one: logged with its traceback
                        log.exception("scrape: reading the metrics of topology %s failed", row["name"])
        return promexport.prometheus_text(rows, docs, window, accept,
                               self.refusals.snapshot() if self.refusals is not None else None)


# -- serving ----------------------------------------------------------------------------
class Handler(SafeHandler):
    """``bittern serve``'s requests: the token (unless ``--insecure``) from the headers
    before anything else, then :class:`Api`."""

    server_version = f"bittern/{__version__}"

    def authorize(self):
        if self.server.insecure or path_segments(self.path) == ["healthz"]:
            return
        if getattr(self.server, "webui", None) is not None and path_segments(self.path)[:1] == ["ui"]:
            return  # the web UI's pages check the token themselves (bittern/webui: no data without it)
        require_token(self.headers, self.server.token)

    def respond(self, body):
        webui, actions = getattr(self.server, "webui", None), getattr(self.server, "actions", None)
        page = webui.handle(self.command, self.path, self.headers) if webui is not None else None
        if page is not None:
            write_answer(self, *page[:3], page[3])
            return
        done = actions.handle(self.command, self.path, body) if actions is not None else None
        if done is not None:  # bittern serve --allow-actions (bittern/webui/actions.py)
            write_answer(self, *done)
            return
        status, ctype, data = self.server.api.handle(self.command, self.path, self.headers.get("Accept"))
        write_answer(self, status, ctype, data, [("Allow", "GET, HEAD")] if status == 405 else ())

    def log_message(self, fmt, *args):
        log.info("%s %s", self.address_string(), fmt % args)


class Server(SafeServer):
    """Serves ``api``; requests need ``token`` unless ``insecure`` (one of the two must be
    given: there is no open-by-default)."""

    handler = Handler

    def __init__(self, address, api, token=None, insecure=False, idle_secs=None):
        self.token = token
        self.insecure = insecure
        super().__init__(address, self.handler, idle_secs=idle_secs)
        self.api = api

    @property
    def api(self):
        return self._api

    @api.setter
    def api(self, app):
        """The application served; its /healthz and /metrics show this server's refusals."""
        self._api = app
        for a in (app, getattr(app, "reads", None)):  # nimbus's NimbusApi answers reads with an Api
            if isinstance(a, Api):
                a.refusals = self.refusals

    @property
    def url(self):
        host, port = self.server_address[:2]
        if ":" in host:
            host = f"[{host}]"
        return f"http://{host}:{port}/"


def make_server(source, host="127.0.0.1", port=8080, token=None, insecure=False, idle_secs=None):
    """A :class:`Server` serving ``Api(source)`` on ``host:port`` (port 0: any free port;
    see ``server.url``) to clients that send ``token`` (every endpoint but /healthz), or
    to anyone with ``insecure``. Call ``serve_forever()`` on it."""
    if not token and not insecure:
        raise ValueError("make_server needs a token, or insecure=True to serve without one")
    host = host.strip("[]")
    family = socket.AF_INET
    try:
        family = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0][0]
    except OSError:
        pass
    cls = type("Server", (Server,), {"address_family": family})
    return cls((host, port), Api(source), token=token, insecure=insecure, idle_secs=idle_secs)


"""The web UI, mounted under ``/ui/`` by ``bittern serve`` (local mode) and by nimbus's
API server (cluster mode): the same :class:`WebUI` over either's JSON API.

Pages (server-rendered HTML tables, usable without JavaScript; static/app.js adds the
component graph, the charts, live updates and the actions)::

    /ui/                                   topologies
    /ui/cluster                            nimbuses, supervisors and slots, ZooKeeper (cluster mode)
    /ui/topologies/NAME                    summary, graph, components, streams, charts,
                                           health-manager decisions, stream managers, actions
    /ui/topologies/NAME/components/COMP    per-task metrics, charts, rebalance
    /ui/topologies/NAME/errors[?component=C]  exceptions with their tracebacks
    /ui/topologies/NAME/logs[?file=F&tail=N]  log files, follow
    /ui/login                              sign in without JavaScript (the browser's dialog)
    /ui/static/...                         the script, the style sheet, vendored libraries

``?fragment=1`` answers only the content of ``<main>`` (what a live update swaps in).

Security: the data on a page is what the token protects, so a page shows it only to a
request that carries the token: ``Authorization: Bearer`` (the script: the token the user
typed, kept in the tab's sessionStorage) or HTTP Basic with the token as password (the
no-JavaScript way: the browser's own dialog). Anything else gets the page without its
data and a sign-in box (401). Basic is taken on these read-only pages only; the JSON
API and every action take the Bearer header alone, which a browser never adds by itself,
so no other site can make a signed-in browser act (CSRF). Static files hold no data and
need no token. Every answer has a Content-Security-Policy without inline scripts.
"""
from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import logging
import os
from urllib.parse import parse_qs, urlsplit

from .. import __version__, auth
from ..httpsafe import Reject, check_name, path_segments
from . import render

log = logging.getLogger("bittern.webui")
STATIC_DIR = os.path.join(os.path.dirname(__file__), "static")
# static files are named with their digest (?v=TAG): cached for good, refetched when changed
STATIC_CACHE = "public, max-age=31536000, immutable"
HTML_TYPE = "text/html; charset=utf-8"
TYPES = {".js": "text/javascript; charset=utf-8", ".css": "text/css; charset=utf-8",
         ".json": "application/json; charset=utf-8", ".txt": "text/plain; charset=utf-8"}
CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
       "form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
SECURITY_HEADERS = [("Content-Security-Policy", CSP), ("X-Content-Type-Options", "nosniff"),
                    ("X-Frame-Options", "DENY"), ("Referrer-Policy", "no-referrer")]
QUERY = ("fragment", "file", "tail", "component", "next")
DEFAULT_TAIL = 200
MAX_TAIL = 100_000


class UiError(Exception):
    def __init__(self, status, message):
        super().__init__(message)
        self.status, self.message = status, message


def static_files(root=STATIC_DIR):
    """``{relative path: content type}`` of the files that may be served (nothing else is)."""
    out = {}
    for d, _, files in os.walk(root):
        for f in files:
            ext = os.path.splitext(f)[1]
            if ext in TYPES:
                out[os.path.relpath(os.path.join(d, f), root).replace(os.sep, "/")] = TYPES[ext]
    return out


def static_tag(files, root=STATIC_DIR):
    """A short digest of every static file: their URLs carry it (``?v=TAG``), so a browser
    may cache them for good and still gets the new ones after an upgrade."""
    h = hashlib.sha256()
    for rel in sorted(files):
        h.update(rel.encode())
        with open(os.path.join(root, rel), "rb") as f:
            h.update(f.read())
    return h.hexdigest()[:12]


def basic_password(header):
    """The password of an ``Authorization: Basic`` header, or None."""
    scheme, _, value = (header or "").strip().partition(" ")
    if scheme.lower() != "basic":
        return None
    try:
        decoded = base64.b64decode(value.strip(), validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError, ValueError):
        return None
    return decoded.partition(":")[2] if ":" in decoded else None


def authorized(header, token, insecure=False):
    """Whether a page request may see data: no token needed (``--insecure``), or the token
    as a Bearer header or as the password of HTTP Basic."""
    if insecure:
        return True
    if not token:
        return False
    if auth.check(header, token):
        return True
    pw = basic_password(header)
    return pw is not None and hmac.compare_digest(pw.encode("utf-8"), token.encode("utf-8"))


def safe_next(value):
    """Where /ui/login sends the browser back: a path under /ui/ only (no open redirect)."""
    if value and value.startswith("/ui/") and "//" not in value and "\\" not in value \
            and not any(ord(ch) < 32 for ch in value):
        return value
    return "/ui/"


class WebUI:
    """``handle(method, target, headers)`` answers a ``/ui/`` request, None for any other.

    ``read(target)`` -> ``(status, bytes)``: the JSON API in-process (GET); ``token()``:
    the API token; ``logs``: an object with ``files(name)`` and ``text(name, file, tail)``;
    ``cluster()``: ``(nimbus's cluster document, ZooKeeper status text)``, cluster mode only;
    ``standby()``: None while this server takes actions itself, else the leader's URL
    ("" when none is known): the pages then send the user there for actions."""

    def __init__(self, read, token, *, insecure=False, mode="local", actions=False, logs=None, cluster=None,
                 standby=None):
        self.read, self.token, self.insecure, self.standby = read, token, insecure, standby
        self.mode, self.actions, self.logs, self.cluster_doc = mode, actions, logs, cluster
        self.files = static_files()
        self.tag = static_tag(self.files)
        self._cache = {}

    # -- entry point --------------------------------------------------------------------------
    def handle(self, method, target, headers):
        segs = path_segments(target)
        if segs[:1] != ["ui"]:
            return None
        try:
            if method not in ("GET", "HEAD"):
                raise UiError(405, f"method {method} not allowed on the web UI (only GET)")
            if segs[1:2] == ["static"]:
                return self.static("/".join(segs[2:]))
            query = self.query(urlsplit(target).query)
            signed_in = authorized(headers.get("Authorization"), self.token(), self.insecure)
            if segs[1:] == ["login"]:
                return self.login(signed_in, query)
            return self.page(segs[1:], query, signed_in)
        except UiError as err:
            return self.answer(err.status, render.page("Error", render.problem(err.status, err.message),
                                                       ctx=self.ctx(True)))

    def ctx(self, signed_in):
        return {"mode": self.mode, "signed_in": signed_in, "actions": self.actions, "version": __version__,
                "static": self.tag, "standby": self.standby() if self.standby and signed_in else None}

    def answer(self, status, text, ctype=HTML_TYPE, extra=()):
        return status, ctype, text.encode("utf-8") if isinstance(text, str) else text, \
            SECURITY_HEADERS + list(extra)

    @staticmethod
    def query(raw):
        out = {}
        for k, vals in parse_qs(raw, keep_blank_values=True).items():
            if k not in QUERY:
                raise UiError(400, f"unknown query parameter {k!r} (the web UI takes {', '.join(QUERY)})")
            out[k] = vals[-1]
        return out

    def static(self, rel):
        ctype = self.files.get(rel)
        if ctype is None:
            raise UiError(404, f"no static file {rel!r}")
        data = self._cache.get(rel)
        if data is None:
            with open(os.path.join(STATIC_DIR, rel), "rb") as f:
                data = self._cache[rel] = f.read()
        return 200, ctype, data, SECURITY_HEADERS + [("Cache-Control", STATIC_CACHE)]

    def login(self, signed_in, query):
        if signed_in:
            return self.answer(303, "", extra=[("Location", safe_next(query.get("next")))])
        return self.answer(401, render.page("Sign in", "<p>Sign in with any user name and the API token as "
                                                       "the password.</p>", ctx=self.ctx(False)),
                           extra=[("WWW-Authenticate", 'Basic realm="bittern web UI", charset="UTF-8"')])

    # -- pages --------------------------------------------------------------------------------
    def page(self, rest, query, signed_in):
        kind, args, title, crumbs = self.route(rest)
        if kind == "logs" and "file" in query:
            self.name(query["file"], "file")
        if "component" in query:
            self.name(query["component"], "component")
        data = {"page": kind, **({"topology": args[0]} if args else {}),
                **({"component": args[1]} if len(args) > 1 else {})}
        if not signed_in:
            body = render.signed_out(title)
            status, extra = 401, [("WWW-Authenticate", 'Bearer realm="bittern"')]
        else:
            status, extra = 200, []
            body = getattr(self, "page_" + kind)(query, *args)
        if query.get("fragment"):
            return self.answer(status, f"<h1>{render.e(title)}</h1>{body}", extra=extra)
        return self.answer(status, render.page(title, body, ctx=self.ctx(signed_in), crumbs=crumbs, data=data),
                           extra=extra)

    def route(self, rest):
        """``(page kind, path arguments, title, breadcrumbs)``; 404 for anything else."""
        if rest == []:
            return "list", (), "Topologies", ()
        if rest == ["cluster"] and self.mode == "cluster":
            return "cluster", (), "Cluster", (("/ui/", "Topologies"),)
        if len(rest) >= 2 and rest[0] == "topologies":
            name = self.name(rest[1], "topology")
            top = (("/ui/", "Topologies"), (f"/ui/topologies/{render.q(name)}", name))
            if len(rest) == 2:
                return "topology", (name,), f"Topology {name}", top[:1]
            if len(rest) == 4 and rest[2] == "components":
                comp = self.name(rest[3], "component")
                return "component", (name, comp), f"Component {comp} of {name}", top
            if len(rest) == 3 and rest[2] in ("errors", "logs"):
                return rest[2], (name,), f"{rest[2].capitalize()} of {name}", top
        raise UiError(404, "no such page: /ui/" + "/".join(rest))

    @staticmethod
    def name(value, field):
        try:
            return check_name(value, field)
        except Reject as r:
            raise UiError(400, r.message) from None

    def get(self, target):
        """A document of the JSON API, or :class:`UiError` with its status and message.
        ``read`` answers the JSON text, or the document itself (:func:`api_reader`)."""
        status, body = self.read(target)
        if isinstance(body, (dict, list)):
            doc = body
        else:
            try:
                doc = json.loads(body)
            except ValueError:
                raise UiError(502, f"the API answered {target} with something not JSON") from None
        if status != 200:
            raise UiError(status, doc.get("error", "error") if isinstance(doc, dict) else "error")
        return doc

    def page_list(self, query):
        return render.topology_list(self.get("/api/v1/topologies").get("topologies") or [])

    def page_cluster(self, query):
        doc, zk = self.cluster_doc()
        return render.cluster(doc, zk)

    def page_topology(self, query, name):
        plan = self.get(f"/api/v1/topologies/{render.q(name)}")
        metrics = self.get(f"/api/v1/topologies/{render.q(name)}/metrics?window=1m")
        return render.topology(name, plan, metrics, self.ctx(True))

    def page_component(self, query, name, comp):
        doc = self.get(f"/api/v1/topologies/{render.q(name)}/components/{render.q(comp)}?window=1m")
        return render.component(name, comp, doc, self.ctx(True))

    def page_errors(self, query, name):
        target = f"/api/v1/topologies/{render.q(name)}/errors?limit=100"
        if query.get("component"):
            target += f"&component={render.q(query['component'])}"
        return render.errors(name, self.get(target))

    def page_logs(self, query, name):
        if self.logs is None:
            raise UiError(404, "this server has no logs")
        tail = query.get("tail") or str(DEFAULT_TAIL)
        if not (tail.isascii() and tail.isdigit() and 1 <= int(tail) <= MAX_TAIL):
            raise UiError(400, f"bad value for parameter 'tail': {tail[:40]!r} (1 to {MAX_TAIL} lines)")
        files = self.logs.files(name)
        chosen = query.get("file")
        text = self.logs.text(name, chosen, int(tail)) if chosen else None
        return render.logs(name, files, chosen, text, int(tail))


class LocalLogs:
    """Log files of local mode: ``$BITTERN_HOME/logs/NAME/*.log``."""

    def __init__(self, home):
        self.home = home

    def _dir(self, name):
        from ..logs import log_dir
        return log_dir(self.home, name)

    def files(self, name):
        try:
            return sorted(f for f in os.listdir(self._dir(name)) if f.endswith(".log"))
        except FileNotFoundError:
            raise UiError(404, f"no logs for topology {name!r}") from None

    def text(self, name, file, tail):
        check_name(file, "file")
        if file not in self.files(name):
            raise UiError(404, f"topology {name!r} has no log file {file!r}")
        return tail_of(os.path.join(self._dir(name), file), tail)


def tail_of(path, lines, chunk=1 << 16):
    """The last ``lines`` lines of the file (read from its end, not all of it)."""
    with open(path, "rb") as f:
        f.seek(0, os.SEEK_END)
        pos, data = f.tell(), b""
        while pos > 0 and data.count(b"\n") <= lines:
            step = min(chunk, pos)
            pos -= step
            f.seek(pos)
            data = f.read(step) + data
    return b"\n".join(data.split(b"\n")[-lines - 1:]).decode("utf-8", "replace")


class NimbusLogs:
    """Log files of cluster mode, through nimbus's API (fetched from the supervisors)."""

    def __init__(self, napi):
        self.napi = napi

    def _call(self, name, query):
        try:
            return self.napi.logs(name, query)[1]
        except Exception as e:  # nimbus's ApiError: its status and one line
            if isinstance(getattr(e, "status", None), int):
                raise UiError(e.status, str(e)) from None
            raise

    def files(self, name):
        doc = self._call(name, {})
        return sorted({f for files in (doc.get("containers") or {}).values() for f in files})

    def text(self, name, file, tail):
        return self._call(name, {"file": [file], "tail": [str(tail)]})


def api_reader(api):
    """``read(target)`` for :class:`WebUI` over a :class:`bittern.httpapi.Api` in this
    process: ``(status, the document)`` as the JSON API would answer it, without the
    JSON text in between (see ``Api.answer``)."""
    from ..metrics_fmt import json_safe

    def read(target):
        status, doc = api.answer("GET", target, documents_only=True)
        return status, json_safe(doc)  # (what JSON can hold, as the JSON API answers it)

    return read


def for_nimbus(napi, zk_status):
    """The web UI of a nimbus (``napi``: its ``nimbus.api.NimbusApi``; ``zk_status()``: how
    ZooKeeper is). Reads go through the same :class:`bittern.httpapi.Api` as the JSON API
    (in-process: :func:`api_reader`)."""

    read = api_reader(napi.reads)

    def cluster():
        zk = zk_status()
        doc = dict(napi.nimbus.cluster())
        state = napi.nimbus.state  # the slots in use: one per container of every assignment
        doc["assignments"] = {a: state.assignment(a) or {} for a in state.children("assignments")}
        return doc, zk

    def standby():
        n = napi.nimbus
        return None if n.is_leader else (n.leader_url() or "")

    return WebUI(read, lambda: napi.nimbus.token, mode="cluster", actions=True, logs=NimbusLogs(napi),
                 cluster=cluster, standby=standby)

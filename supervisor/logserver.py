"""The supervisor's log server: the log files of its topologies over HTTP.

Nimbus proxies ``bittern logs`` to the supervisors that ran a topology's
processes (docs/CLUSTER.md). Every request carries the cluster's API token
(``Authorization: Bearer TOKEN``, bittern/auth.py)::

    GET /logs                 ["NAME", ...]              topologies with logs here
    GET /logs/NAME            ["stmgr-0.log", ...]        files of one topology
    GET /logs/NAME/FILE       text/plain                  ?tail=N: the last N lines
    GET /healthz              {"status": "ok", "http": {...}}   (no token: what it refused)

401 without the token (503 while the supervisor has not read it yet), checked from
the headers before anything else (bittern/httpsafe.py: deadlines, bounded connections,
no body read); 400 naming the field for a topology or file name no log can have (after
percent-decoding), 404 for anything unknown, 405 for a method other than GET. Names are
also checked against the directory listing, so no request can reach outside
``<data dir>/logs``.
"""
from __future__ import annotations

import json
import logging
import os
import re
import stat
import threading
from urllib.parse import parse_qs, unquote, urlsplit

from bittern.httpsafe import Reject, SafeHandler, SafeServer, check_name, require_token

log = logging.getLogger("bittern.supervisor.logs")

NAME_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")  # (fullmatch: "$" admits a trailing newline)
TAIL_BLOCK = 64 * 1024
TEXT = "text/plain; charset=utf-8"


def tail_lines(f, n):
    """The last ``n`` lines of the binary file ``f``, read from its end."""
    if n <= 0:
        return b""
    f.seek(0, os.SEEK_END)
    pos = f.tell()
    data = b""
    while pos > 0 and data.count(b"\n") <= n:
        step = min(TAIL_BLOCK, pos)
        pos -= step
        f.seek(pos)
        data = f.read(step) + data
    lines = data.splitlines(keepends=True)
    return b"".join(lines[-n:])


class LogServer:
    """Serves ``root`` (``<data dir>/logs``) on ``host:port``; ``token()`` returns
    the current API token (None until known)."""

    def __init__(self, host, port, root, token, idle_secs=None):
        self.root = root
        self.token = token
        self.httpd = SafeServer((host, port), _Handler, idle_secs=idle_secs)
        self.httpd.logs = self
        self._thread = None

    @property
    def port(self):
        return self.httpd.server_address[1]

    def start(self):
        self._thread = threading.Thread(target=self.httpd.serve_forever, name="bittern-logserver",
                                        daemon=True)
        self._thread.start()

    def stop(self):
        if self._thread is not None:
            self.httpd.shutdown()
            self._thread.join()
        self.httpd.server_close()

    # -- resolving names ----------------------------------------------------------------
    @staticmethod
    def _entries(path, is_kind):
        """Names in ``path`` that are safe and of the kind (links are not followed)."""
        try:
            names = os.listdir(path)
        except OSError:
            return []
        out = []
        for n in names:
            try:
                if NAME_RE.fullmatch(n) and is_kind(os.lstat(os.path.join(path, n)).st_mode):
                    out.append(n)
            except OSError:
                pass
        return sorted(out)

    def topologies(self):
        return self._entries(self.root, stat.S_ISDIR)

    def files(self, name):
        if name not in self.topologies():
            return None
        return self._entries(os.path.join(self.root, name), stat.S_ISREG)

    def file_path(self, name, fname):
        files = self.files(name)
        if files is None or fname not in files:
            return None
        return os.path.join(self.root, name, fname)


class _Handler(SafeHandler):
    def log_message(self, fmt, *args):
        log.debug("%s %s", self.address_string(), fmt % args)

    def _healthz(self):
        return urlsplit(self.path).path == "/healthz"

    def authorize(self):
        if self._healthz():
            return
        token = self.server.logs.token()
        if not token:
            raise Reject(503, "the supervisor has not read the API token yet")
        require_token(self.headers, token)

    def _headers(self, code, ctype, length, extra=()):
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(length))
        for k, v in extra:
            self.send_header(k, v)
        self.end_headers()

    def _send(self, code, body, ctype="application/json", extra=()):
        if isinstance(body, (dict, list)):
            body = json.dumps(body).encode()
        self._headers(code, ctype, len(body), extra)
        self.wfile.write(body)

    def _send_file(self, f, size):
        """``size`` bytes of ``f`` (what the file held when opened: a log that grows
        meanwhile is cut there), in blocks."""
        self._headers(200, TEXT, size)
        while size > 0:
            block = f.read(min(size, TAIL_BLOCK))
            if not block:
                break
            self.wfile.write(block)
            size -= len(block)

    def respond(self, body):
        if self.command != "GET":
            return self._send(405, {"error": f"method {self.command} not allowed (only GET)"},
                              extra=[("Allow", "GET")])
        if self._healthz():
            return self._send(200, {"status": "ok", "http": self.server.refusals.snapshot()})
        srv = self.server.logs
        url = urlsplit(self.path)
        parts = [unquote(p) for p in url.path.split("/") if p]
        if not parts or parts[0] != "logs" or len(parts) > 3:
            return self._send(404, {"error": "not found"})
        try:
            for value, field in zip(parts[1:], ("topology", "file")):
                check_name(value, field)
        except Reject as r:
            return self._send(r.status, {"error": r.message, **r.extra})
        if len(parts) == 1:
            return self._send(200, srv.topologies())
        if len(parts) == 2:
            files = srv.files(parts[1])
            if files is None:
                return self._send(404, {"error": f"no logs of topology {parts[1]!r} here"})
            return self._send(200, files)
        path = srv.file_path(parts[1], parts[2])
        if path is None:
            return self._send(404, {"error": f"no log file {parts[2]!r} of topology {parts[1]!r} here"})
        tail = parse_qs(url.query).get("tail")
        try:
            n = int(tail[0]) if tail else None
        except ValueError:
            return self._send(400, {"error": f"tail must be a number of lines, not {tail[0][:40]!r}"})
        try:
            f = open(path, "rb")
        except OSError:
            return self._send(404, {"error": f"log file {parts[2]!r} is gone"})
        with f:
            if n is not None:
                return self._send(200, tail_lines(f, n), TEXT)
            return self._send_file(f, os.fstat(f.fileno()).st_size)

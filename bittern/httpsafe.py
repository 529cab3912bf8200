"""What Bittern's three HTTP servers share to survive hostile clients: nimbus's API
(nimbus/api.py), ``bittern serve`` (bittern/httpapi.py) and the supervisor's log
server (supervisor/logserver.py).

A request is taken in this order, and nothing is read that the step before did not allow:

1. the request line and the headers, within ``request_secs`` in all (twice
   ``idle_secs``), with at most ``idle_secs`` between two reads;
2. authentication (:meth:`SafeHandler.authorize`), from the headers alone: a client
   without the token never gets a byte of its body read;
3. the body's length: ``Content-Length`` is one decimal integer up to the route's limit
   (:func:`content_length`: 400 not a number, negative or given twice with different
   values; 413 over the limit; 411 missing where the route needs a body, or
   ``Transfer-Encoding`` instead of it);
4. the body, within ``request_secs`` plus the time to send it at ``MIN_BODY_RATE``;
5. the answer (:meth:`SafeHandler.respond`).

Every refusal is one line of JSON, ``{"error": "..."}``, and closes the connection
(its body was not read: what the client still sends is dropped, at most
``LINGER_BYTES`` for ``LINGER_SECS``, so that it reads the answer rather than a reset).
A request line or headers sent too slowly get 408; an idle keep-alive connection is
closed after ``idle_secs``. The server serves at most ``max_connections`` connections
at once (one thread each); the next ones get 503 at once. JSON bodies go through
:func:`parse_json`: 400 with one line for anything that is not a JSON document nesting
at most ``MAX_JSON_DEPTH`` levels, never 500. Names from a path or query go through
:func:`check_name` after percent-decoding: 400 naming the field (``word_count%2F`` is
not ``word_count``).

Every refusal is counted (:class:`Refusals`, ``server.refusals``): each answer with a
status of 400 or more, by status, and each connection turned away for want of a slot.
The servers show the counts on ``/healthz`` (``"http"``) and, where they serve
Prometheus, as ``bittern_http_refused_total`` and ``bittern_http_turned_away_total``.

``idle_secs`` defaults to ``$BITTERN_HTTP_TIMEOUT`` (seconds), else 5.
"""
from __future__ import annotations

import io
import ipaddress
import collections
import json
import logging
import os
import re
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote, urlsplit

from . import auth
from .cli.common import NAME_RE
from .errors import BitternError

log = logging.getLogger("bittern.http")

ENV_TIMEOUT = "BITTERN_HTTP_TIMEOUT"
IDLE_SECS = 5.0
MAX_TIMEOUT_SECS = 3600.0
MAX_CONNECTIONS = 64
MIN_BODY_RATE = 64 * 1024  # bytes/s a body must arrive at, on top of request_secs
SMALL_BODY = 64 * 1024  # the default body limit: servers that take no body
MAX_JSON_DEPTH = 64
LINGER_BYTES = 64 * 1024  # after a refusal: unread bytes drained (and dropped) so the client sees
LINGER_SECS = 1.0  # the answer rather than a connection reset, for at most this long
JSON_TYPE = "application/json; charset=utf-8"

TOPOLOGY_RULE = "1-64 letters, digits, '_', '.', '-', starting with a letter or digit"
COMPONENT_RE = re.compile(r"[^\x00-\x1f\x7f/]{1,128}")
COMPONENT_RULE = "1-128 characters, no '/' and no control characters"
# (a component named __x logs to __x-3.log: a leading '_' is allowed, a leading '.' is not)
LOG_FILE_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")
LOG_FILE_RULE = "1-128 letters, digits, '_', '.', '-', not starting with '.' or '-'"
_DIGITS = re.compile(r"[0-9]+")


class Reject(Exception):
    """A refusal: ``status``, a one-line ``message``, response ``headers`` and extra
    JSON fields."""

    def __init__(self, status, message, headers=(), **extra):
        super().__init__(message)
        self.status = status
        self.message = message
        self.headers = list(headers)
        self.extra = extra


# -- pure checks ----------------------------------------------------------------------------
def content_length(headers, limit, required=False):
    """The body length the headers announce (0 when none), checked before any of it is
    read; :class:`Reject` otherwise."""
    if headers.get("Transfer-Encoding") is not None:
        raise Reject(411, "Transfer-Encoding is not accepted: send the body with a Content-Length")
    values = {v.strip() for v in headers.get_all("Content-Length") or []}
    if not values:
        if required:
            raise Reject(411, "this request needs a JSON body with a Content-Length header")
        return 0
    if len(values) > 1:
        raise Reject(400, "conflicting Content-Length headers: " + ", ".join(sorted(repr(v[:40]) for v in values)))
    raw = values.pop()
    if raw.startswith("-") and _DIGITS.fullmatch(raw[1:]):
        raise Reject(400, f"Content-Length is negative: {raw[:40]}")
    if not _DIGITS.fullmatch(raw):
        raise Reject(400, f"Content-Length is not a number of bytes: {raw[:40]!r}")
    if len(raw) > 30 or int(raw) > limit:
        raise Reject(413, f"request body of {raw[:40]} bytes is over the limit of {limit}")
    return int(raw)


def _too_deep(doc, limit):
    stack = [(doc, 1)]
    while stack:
        obj, depth = stack.pop()
        if isinstance(obj, (dict, list)):
            if depth > limit:
                return True
            stack.extend((v, depth + 1) for v in (obj.values() if isinstance(obj, dict) else obj))
    return False


def parse_json(data, max_depth=MAX_JSON_DEPTH, what="the request body"):
    """``data`` (bytes) as a JSON document; :class:`Reject` 400 with one line when it
    is not JSON, not UTF-8, or nests deeper than ``max_depth``."""
    try:
        doc = json.loads(data)
    except RecursionError:
        raise Reject(400, f"{what} nests deeper than {max_depth} levels") from None
    except ValueError as e:  # JSONDecodeError, UnicodeDecodeError
        raise Reject(400, f"{what} is not JSON: {' '.join(str(e).split())[:200]}") from None
    if _too_deep(doc, max_depth):
        raise Reject(400, f"{what} nests deeper than {max_depth} levels")
    return doc


def check_name(value, field="topology"):
    """``value`` if it is a valid ``field`` name (``topology``, ``component`` or
    ``file``, the name of a log file) after percent-decoding; else :class:`Reject` 400
    naming the field. ``topology`` is ``bittern.cli.common.NAME_RE``, matched in full
    (``$`` alone would let a trailing newline through)."""
    regex, rule = {"topology": (NAME_RE, TOPOLOGY_RULE), "component": (COMPONENT_RE, COMPONENT_RULE),
                   "file": (LOG_FILE_RE, LOG_FILE_RULE)}[field]
    if not isinstance(value, str) or not regex.fullmatch(value):
        shown = value[:80] if isinstance(value, str) else value
        raise Reject(400, f"bad {field} name {shown!r}: {rule}", field=field)
    return value


def path_segments(target):
    """The percent-decoded, non-empty segments of a request target's path."""
    return [unquote(s) for s in urlsplit(target).path.split("/") if s]


def require_token(headers, token):
    """:class:`Reject` 401 unless ``headers`` carry ``Authorization: Bearer <token>``."""
    if not auth.check(headers.get("Authorization"), token):
        raise Reject(401, "missing or wrong API token (Authorization: Bearer ...)",
                     headers=[("WWW-Authenticate", 'Bearer realm="bittern"')])


def timeout_from_env(env=None):
    """``$BITTERN_HTTP_TIMEOUT`` as seconds (``IDLE_SECS`` when unset)."""
    raw = (os.environ if env is None else env).get(ENV_TIMEOUT, "").strip()
    if not raw:
        return IDLE_SECS
    try:
        secs = float(raw)
    except ValueError:
        secs = -1.0
    if not 0.1 <= secs <= MAX_TIMEOUT_SECS:
        raise BitternError(f"{ENV_TIMEOUT} must be a number of seconds from 0.1 to {MAX_TIMEOUT_SECS:g}, "
                           f"got {raw!r}")
    return secs


def write_answer(handler, status, ctype, body, headers=()):
    """Send one complete answer (the body left out for HEAD): not to be cached, unless
    ``headers`` say otherwise (the web UI's static files, whose URLs change with them)."""
    headers = list(headers)
    handler.send_response(status)
    handler.send_header("Content-Type", ctype)
    handler.send_header("Content-Length", str(len(body)))
    if not any(k.lower() == "cache-control" for k, _ in headers):
        handler.send_header("Cache-Control", "no-store")
    for k, v in headers:
        handler.send_header(k, v)
    handler.end_headers()
    if handler.command != "HEAD":
        handler.wfile.write(body)


def is_loopback(host):
    """True when every address ``host`` resolves to is a loopback address."""
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        pass
    if not host:
        return False
    try:
        infos = socket.getaddrinfo(host, None)
    except OSError:
        return False
    return bool(infos) and all(ipaddress.ip_address(i[4][0].split("%")[0]).is_loopback for i in infos)


class Refusals:
    """What a server refused since it started: answers by status (400 and over) and
    connections turned away. Thread-safe; :meth:`snapshot` is what ``/healthz`` shows."""

    def __init__(self):
        self._lock = threading.Lock()
        self._by_status = collections.Counter()
        self._turned_away = 0

    def refused(self, status):
        with self._lock:
            self._by_status[int(status)] += 1

    def turned_away(self):
        with self._lock:
            self._turned_away += 1

    def snapshot(self):
        """``{"refused": {"401": n, ...}, "refused_total": N, "turned_away": M}``."""
        with self._lock:
            by_status = dict(sorted(self._by_status.items()))
            return {"refused": {str(k): v for k, v in by_status.items()},
                    "refused_total": sum(by_status.values()), "turned_away": self._turned_away}


# -- the handler ----------------------------------------------------------------------------
class _DeadlineIO(io.RawIOBase):
    """The connection's socket as a raw stream whose every read waits at most
    ``idle_secs`` and never past the handler's deadline (a client that trickles one
    byte at a time is cut off too)."""

    def __init__(self, sock, handler):
        super().__init__()
        self.sock, self.handler = sock, handler
        self.received = 0

    def readable(self):
        return True

    def readinto(self, buf):
        left = self.handler.deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("the request took longer than its deadline")
        self.sock.settimeout(min(self.handler.server.idle_secs, left))
        n = self.sock.recv_into(buf)
        self.received += n
        return n


class SafeHandler(BaseHTTPRequestHandler):
    """Subclasses override :meth:`respond` (and :meth:`authorize`, :meth:`body_limit`,
    :meth:`body_required` as they need); every method goes to the same steps."""

    protocol_version = "HTTP/1.1"

    # -- hooks ------------------------------------------------------------------------------
    def authorize(self):
        """Raise :class:`Reject` (401, 503) to refuse the request from its headers."""

    def body_limit(self):
        return self.server.max_body

    def body_required(self):
        return False

    def respond(self, body):
        raise NotImplementedError

    # -- plumbing ---------------------------------------------------------------------------
    def setup(self):
        super().setup()
        self.rfile.close()  # the stock reader: ours below, with deadlines
        self.deadline = time.monotonic() + self.server.request_secs
        self._io = _DeadlineIO(self.connection, self)
        self.rfile = io.BufferedReader(self._io, 64 * 1024)
        self.server.track(self.connection, True)

    def finish(self):
        try:
            super().finish()
            if self.close_connection and getattr(self, "_refused", False):
                self._linger()
        finally:
            self.server.track(self.connection, False)

    def _linger(self):
        """After a refusal the client may still be sending what we did not read; closing
        now would reset the connection and could lose the answer on its way. Half-close,
        then drop what arrives (bounded) until the client closes too."""
        try:
            self.connection.shutdown(socket.SHUT_WR)
            end, left = time.monotonic() + min(LINGER_SECS, self.server.idle_secs), LINGER_BYTES
            while left > 0 and time.monotonic() < end:
                self.connection.settimeout(max(0.01, end - time.monotonic()))
                chunk = self.connection.recv(min(left, 16384))
                if not chunk:
                    break
                left -= len(chunk)
        except OSError:
            pass

    def handle_one_request(self):
        self.deadline = time.monotonic() + self.server.request_secs
        mark, self._answered, self.raw_requestline = self._io.received, False, b""
        self.requestline, self.command, self.request_version = "", "", "HTTP/1.1"  # until parsed
        try:
            self.raw_requestline = self.rfile.readline(65537)
            if len(self.raw_requestline) > 65536:
                self.send_error(414, "request line longer than 65536 bytes")
                return
            if not self.raw_requestline:
                self.close_connection = True
                return
            if not self.parse_request():
                return
            method = getattr(self, "do_" + self.command, None)
            if method is None:
                self.send_error(501, f"method {self.command[:40]!r} is not supported")
                return
            method()
            self.wfile.flush()
        except TimeoutError:
            self.close_connection = True
            if self._io.received > mark and not self._answered:  # a request had started
                log.info("%s: request not received within the deadline; closing", self.address_string())
                try:
                    self.refuse(408, "the request was not received in time")
                except OSError:
                    pass

    def handle_expect_100(self):
        return True  # "100 Continue" only once the headers passed (:meth:`serve`)

    def send_response(self, code, message=None):
        self._answered = True
        if code >= 400:
            self.server.refusals.refused(code)
        super().send_response(code, message)

    def send_error(self, code, message=None, explain=None):
        """http.server's own refusals (bad request line, headers too large, unknown
        method), as one line of JSON, with a status line even when the request line
        could not be parsed (http.server would then answer the bare body, as to HTTP/0.9)."""
        if self.request_version == "HTTP/0.9":
            self.request_version = "HTTP/1.0"
        self.refuse(code, str(message or self.responses.get(code, ("error",))[0]))

    def refuse(self, status, message, headers=(), extra=None):
        """Answer ``{"error": message, **extra}`` and close the connection."""
        body = (json.dumps({"error": message, **(extra or {})}, default=str) + "\n").encode()
        self.close_connection = self._refused = True
        self.connection.settimeout(self.server.idle_secs)  # (a read may have left less)
        self.send_response(status)
        self.send_header("Content-Type", JSON_TYPE)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.send_header("Connection", "close")
        for k, v in headers:
            self.send_header(k, v)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def serve(self):
        """Every ``do_METHOD``: authorize, check the length, read the body, respond."""
        try:
            self.authorize()
            length = content_length(self.headers, self.body_limit(), self.body_required())
            body = b""
            if length:
                if self.headers.get("Expect", "").strip().lower() == "100-continue" \
                        and self.request_version >= "HTTP/1.1":
                    self.send_response_only(100)
                    self.end_headers()
                self.deadline = time.monotonic() + self.server.request_secs + length / MIN_BODY_RATE
                body = self.rfile.read(length)
                if len(body) < length:
                    raise Reject(400, f"the request body ended after {len(body)} of {length} bytes")
        except Reject as r:
            self.refuse(r.status, r.message, r.headers, r.extra)
            return
        self.connection.settimeout(self.server.idle_secs)  # for writing the answer
        self.respond(body)

    do_GET = do_HEAD = do_POST = do_PUT = do_DELETE = do_PATCH = do_OPTIONS = serve


# -- the server -----------------------------------------------------------------------------
class SafeServer(ThreadingHTTPServer):
    """A threading HTTP server with a bounded number of connections (a thread each)
    and per-connection deadlines (see the module docstring)."""

    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128  # listen backlog (socketserver's 5 drops a burst of connects: SYN retries)
    max_body = SMALL_BODY

    def __init__(self, address, handler, idle_secs=None, max_connections=MAX_CONNECTIONS,
                 bind_and_activate=True):
        self.idle_secs = timeout_from_env() if idle_secs is None else float(idle_secs)
        if not 0 < self.idle_secs <= MAX_TIMEOUT_SECS:
            raise BitternError(f"the HTTP timeout must be from 0.1 to {MAX_TIMEOUT_SECS:g} seconds, "
                               f"got {idle_secs!r}")
        self.request_secs = 2 * self.idle_secs
        self.max_connections = max_connections
        self._lock = threading.Lock()
        self._open = set()  # sockets of the connections being served
        self.slots = 0  # connections admitted and not finished
        self.turned_away = 0
        self.refusals = Refusals()
        super().__init__(address, handler, bind_and_activate)

    def track(self, sock, add):
        with self._lock:
            (self._open.add if add else self._open.discard)(sock)

    def process_request(self, request, client_address):
        with self._lock:
            full = self.slots >= self.max_connections
            if not full:
                self.slots += 1
            else:
                self.turned_away += 1
        if full:
            self.refusals.turned_away()
            self._turn_away(request, client_address)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._release()
            raise

    def process_request_thread(self, request, client_address):
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._release()

    def _release(self):
        with self._lock:
            self.slots -= 1

    def _turn_away(self, request, client_address):
        log.warning("%s connections open: turning %s away", self.max_connections,
                    client_address[0] if isinstance(client_address, tuple) else client_address)
        body = json.dumps({"error": f"too many connections (at most {self.max_connections}); "
                                    "try again"}).encode() + b"\n"
        head = (f"HTTP/1.1 503 Service Unavailable\r\nContent-Type: {JSON_TYPE}\r\n"
                f"Content-Length: {len(body)}\r\nRetry-After: 1\r\nConnection: close\r\n\r\n").encode()
        try:
            request.settimeout(0.5)
            request.sendall(head + body)
        except OSError:
            pass
        self.shutdown_request(request)

    def handle_error(self, request, client_address):
        """A client that went away or stalled is one log line, not a traceback; anything
        else is logged with its traceback."""
        err = sys.exc_info()[1]
        host = client_address[0] if isinstance(client_address, tuple) else client_address
        if isinstance(err, (ConnectionError, TimeoutError)):
            log.info("client %s went away or stalled (%s)", host, type(err).__name__)
            return
        log.error("error serving a request from %s", host, exc_info=err)

    def server_close(self):
        """Stop listening and cut every connection still open (their threads end)."""
        super().server_close()
        with self._lock:
            socks = list(self._open)
        for s in socks:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

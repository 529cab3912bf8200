"""The CLI's side of nimbus's HTTP API (cluster mode, docs/CLUSTER.md).

:class:`ClusterClient` sends JSON over HTTP with the standard library, with
``Authorization: Bearer TOKEN`` on every request. It knows several nimbus URLs:
when one does not answer it tries the next, and the one that answered is tried
first next time. A standby nimbus answers a write with 307 and ``{"leader": URL}``;
the client sends the request once more, to that leader.

Failover is safe because a request is only sent elsewhere when the first nimbus
cannot have carried it out: it refused the connection, or the connection could
not be made in time. A read that times out *after* being sent is also retried
elsewhere (reads change nothing), a write is not: it may still be carried out,
and running it twice could start a topology twice.

Answers other than 2xx become :class:`~bittern.errors.BitternError` subclasses
with one-line messages that name the nimbus URL or the topology.
"""
from __future__ import annotations

import http.client
import json
import socket
import urllib.error
import urllib.request
from urllib.parse import quote, urlencode, urlsplit

from . import __version__
from .auth import bearer
from .errors import BitternError, ConfigError

API = "/api/v1"
DEFAULT_TIMEOUT = 10.0
READS = ("GET", "HEAD")


class ClusterError(BitternError):
    """Nimbus answered with an error, or with something that is not its API."""

    def __init__(self, message, status=None, url=None):
        super().__init__(message)
        self.status = status
        self.url = url


class NimbusUnavailable(ClusterError):
    """No nimbus answered (every URL refused the connection or timed out)."""


class TokenRefused(ClusterError):
    """401: the token is wrong or missing."""


class NoSuchTopology(ClusterError):
    """404 for a topology the request named."""

    def __init__(self, message, topology, status=404, url=None):
        super().__init__(message, status, url)
        self.topology = topology


class RequestRefused(ClusterError):
    """400, 409 or 422: nimbus refused the request; its message says why. A 422
    (start-up failed) carries the user's traceback, shown by ``print_error``."""

    def __init__(self, message, status=None, url=None, traceback=None):
        super().__init__(message, status, url)
        self.user_traceback = traceback


class _Unreachable(Exception):
    """This nimbus did not answer; ``why`` is a few words for the final message."""

    def __init__(self, why):
        super().__init__(why)
        self.why = why


def parse_urls(value):
    """``"http://a:6627,http://b:6627"`` (or a list) as a list of base URLs without
    a trailing slash; a URL without a scheme gets ``http://``."""
    items = value.split(",") if isinstance(value, str) else list(value or ())
    urls = []
    for item in items:
        url = str(item).strip()
        if not url:
            continue
        if "://" not in url:
            url = "http://" + url
        url = url.rstrip("/")
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname or parts.query or parts.fragment:
            raise ConfigError(f"nimbus URL {item.strip()!r} is not an http(s)://HOST:PORT URL")
        try:
            parts.port  # noqa: B018 - raises on a malformed port
        except ValueError:
            raise ConfigError(f"nimbus URL {item.strip()!r} has a bad port") from None
        if url not in urls:
            urls.append(url)
    if not urls:
        raise ConfigError("no nimbus URL given (--cluster URL[,URL...] or BITTERN_CLUSTER)")
    return urls


def topology_path(name, *rest):
    """``/api/v1/topologies/NAME[/rest...]`` with the name percent-encoded."""
    return "/".join([f"{API}/topologies", quote(name, safe=""), *rest])


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """Hand 3xx answers back as they are: the client follows a 307 itself, once,
    to the leader named in the body, and with the token."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        return None


def _reason(err):
    """A few words for why a URL did not answer."""
    reason = getattr(err, "reason", err)
    if isinstance(reason, (TimeoutError, socket.timeout)):
        return "timed out"
    if isinstance(reason, ConnectionRefusedError):
        return "connection refused"
    if isinstance(reason, socket.gaierror):
        return f"unknown host: {reason.strerror or reason}"
    if isinstance(reason, OSError) and reason.strerror:
        return reason.strerror
    return str(reason) or type(reason).__name__


def _one_line(text):
    return " ".join(str(text).split())


class ClusterClient:
    """JSON requests to nimbus. ``urls``: a list or a comma-separated string;
    ``token``: the API token (:func:`bittern.auth.client_token`); ``timeout``: seconds
    for each request unless the call gives its own."""

    def __init__(self, urls, token, timeout=DEFAULT_TIMEOUT):
        self.urls = parse_urls(urls)
        self.token = token
        self.timeout = timeout
        self.url = self.urls[0]  # the nimbus that answered last (the leader after a 307)
        self._first = 0  # index in urls of the nimbus to try first
        self._opener = urllib.request.build_opener(_NoRedirect)

    # -- verbs ----------------------------------------------------------------------------
    def get(self, path, query=None, topology=None, timeout=None, text=False):
        return self.request("GET", path, query=query, topology=topology, timeout=timeout, text=text)

    def post(self, path, body=None, topology=None, timeout=None):
        return self.request("POST", path, body=body, topology=topology, timeout=timeout)

    def delete(self, path, topology=None, timeout=None):
        return self.request("DELETE", path, topology=topology, timeout=timeout)

    def request(self, method, path, body=None, query=None, topology=None, timeout=None, text=False):
        """Send one request and return the decoded JSON answer (or, with ``text``,
        the body as a string). ``topology`` names the topology the request is
        about, for a 404's message."""
        if query:
            path += "?" + urlencode({k: v for k, v in query.items() if v is not None})
        payload = None if body is None else json.dumps(body).encode()
        timeout = self.timeout if timeout is None else timeout
        order = self.urls[self._first:] + self.urls[:self._first]
        failures = []
        for base in order:
            try:
                status, headers, data = self._send(base, method, path, payload, timeout)
            except _Unreachable as e:
                failures.append(f"{base} ({e.why})")
                continue
            self._first = self.urls.index(base)
            if status == 307:
                base, (status, headers, data) = self._follow(base, method, path, payload, timeout, data)
            self.url = base
            return self._answer(base, method, path, status, headers, data, topology, text)
        raise NimbusUnavailable("no nimbus answers: " + ", ".join(failures))

    # -- plumbing -------------------------------------------------------------------------
    def _send(self, base, method, path, payload, timeout):
        """``(status, headers, body bytes)``, or :class:`_Unreachable` when this nimbus
        cannot have carried out the request (or it is a read)."""
        headers = {"Authorization": bearer(self.token), "Accept": "application/json",
                   "User-Agent": f"bittern/{__version__}"}
        if payload is not None:
            headers["Content-Type"] = "application/json"
        req = urllib.request.Request(base + path, data=payload, method=method, headers=headers)
        try:
            with self._opener.open(req, timeout=timeout) as r:
                return r.status, r.headers, r.read()
        except urllib.error.HTTPError as e:
            with e:
                return e.code, e.headers, e.read()
        except urllib.error.URLError as e:  # not connected, or the request could not be sent
            raise _Unreachable(_reason(e)) from None
        except (OSError, http.client.HTTPException) as e:  # sent; no (complete) answer
            if method in READS:
                raise _Unreachable(_reason(e)) from None
            what = (f"did not answer within {timeout:g}s" if isinstance(e, (TimeoutError, socket.timeout))
                    else f"dropped the connection ({_reason(e)})")
            raise ClusterError(f"nimbus at {base} {what} after {method} {path}; it may still carry "
                               "it out (check with `bittern list`)", url=base) from None

    def _follow(self, base, method, path, payload, timeout, data):
        """The answer of the leader a standby named in its 307."""
        leader = None
        try:
            leader = (json.loads(data) or {}).get("leader")
        except (ValueError, AttributeError):
            pass
        if not leader:
            raise ClusterError(f"nimbus at {base} is a standby and knows no leader yet; try again shortly",
                               status=307, url=base)
        leader = parse_urls(leader)[0]
        try:
            answer = self._send(leader, method, path, payload, timeout)
        except _Unreachable as e:
            raise NimbusUnavailable(f"nimbus at {base} named {leader} the leader, which does not answer "
                                    f"({e.why})", url=leader) from None
        if answer[0] == 307:
            raise ClusterError(f"the leader nimbus {leader} (named by {base}) sent the request on again; "
                               "leadership is changing, try again", status=307, url=leader)
        return leader, answer

    def _answer(self, base, method, path, status, headers, data, topology, text):
        doc, is_json = None, False
        if data:
            try:
                doc, is_json = json.loads(data), True
            except ValueError:
                pass
        if 200 <= status < 300:
            if text:
                if is_json and "json" in (headers.get("Content-Type") or "") and isinstance(doc, str):
                    return doc
                return data.decode("utf-8", "replace")
            if not is_json:
                raise ClusterError(f"nimbus at {base} answered {method} {path} with something other "
                                   "than JSON; is that URL a nimbus?", status, base)
            return doc
        message = doc.get("error") if isinstance(doc, dict) else None
        if not message:
            message = _one_line(data.decode("utf-8", "replace"))[:200] if data and not is_json else ""
        message = _one_line(message or f"HTTP {status}")
        if status == 401:
            raise TokenRefused(f"nimbus at {base} refused the token (set BITTERN_TOKEN or token_file "
                               "in cluster.toml)", status, base)
        if status == 404 and topology is not None and not (isinstance(doc, dict) and doc.get("component")):
            raise NoSuchTopology(f"no topology named {topology!r} (nimbus at {base})", topology, status, base)
        if status in (400, 409, 422):
            tb = doc.get("traceback") if isinstance(doc, dict) else None
            raise RequestRefused(message, status, base, traceback=tb)
        if status == 503 and isinstance(doc, dict) and doc.get("zookeeper") == "unreachable":
            raise ClusterError(f"nimbus at {base}: {message}", status, base)  # names ZooKeeper, at once
        if status == 503 and topology is not None:  # exists but does not answer: the message names it
            raise ClusterError(message, status, base)
        raise ClusterError(f"nimbus at {base} answered {status} to {method} {path}: {message}", status, base)

"""The write operations of ``bittern serve --allow-actions`` (local mode), with the
shapes of nimbus's API, so that the web UI drives both the same way::

    POST   /api/v1/topologies/{name}/activate
    POST   /api/v1/topologies/{name}/deactivate
    POST   /api/v1/topologies/{name}/rebalance   {"parallelism": {component: N}, "containers": K}
    DELETE /api/v1/topologies/{name}

The server has checked the token (Bearer, never a cookie) and the body's length before
this runs; without ``--allow-actions`` none of this is mounted and the read-only API
answers 405. The work is the CLI's: bittern/cli/lifecycle.py and bittern/rebalance.py."""
from __future__ import annotations

import argparse
import json
import logging
import threading

from ..errors import BitternError
from ..httpsafe import Reject, check_name, parse_json, path_segments

log = logging.getLogger("bittern.webui.actions")
JSON_TYPE = "application/json; charset=utf-8"
KILL_TIMEOUT_SECS = 15.0
REBALANCE_STATUS = {"invalid": 400, "unknown": 404, "busy": 409, "failed": 500, "broken": 500}


class ActionError(Exception):
    def __init__(self, status, message, **extra):
        super().__init__(message)
        self.status, self.message, self.extra = status, message, extra


def route(method, target):
    """``(verb, topology name)`` of an action request, or None when it is not one."""
    segs = path_segments(target)
    if segs[:3] != ["api", "v1", "topologies"]:
        return None
    if len(segs) == 4 and method == "DELETE":
        return "kill", segs[3]
    if len(segs) == 5 and method == "POST" and segs[4] in ("activate", "deactivate", "rebalance"):
        return segs[4], segs[3]
    return None


def check_rebalance(body):
    """``(parallelism, containers)`` from a rebalance body; :class:`ActionError` 400 naming
    the field."""
    try:
        doc = parse_json(body or b"{}")
    except Reject as r:
        raise ActionError(400, r.message) from None
    if not isinstance(doc, dict):
        raise ActionError(400, "the request body must be a JSON object")
    par = doc.get("parallelism") or {}
    if not isinstance(par, dict):
        raise ActionError(400, "parallelism must be an object {component: N}", field="parallelism")
    for comp, n in par.items():
        try:
            check_name(comp, "component")
        except Reject as r:
            raise ActionError(400, r.message, field="parallelism") from None
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ActionError(400, f"parallelism of {comp!r} must be an integer >= 1, got {n!r}",
                              field="parallelism")
    containers = doc.get("containers")
    if containers is not None and (isinstance(containers, bool) or not isinstance(containers, int) or containers < 1):
        raise ActionError(400, f"containers must be an integer >= 1 or null, got {containers!r}", field="containers")
    if not par and containers is None:
        raise ActionError(400, "nothing to change: give parallelism {component: N} and/or containers")
    return par, containers


class LocalActions:
    """Carries out the actions on the local state directory; one rebalance or kill at a
    time per topology (a second one gets 409)."""

    def __init__(self, state, home, drop=None):
        self.state, self.home = state, home
        self.drop = drop or (lambda name: None)  # forget a killed topology's cached connection
        self._busy = set()
        self._lock = threading.Lock()

    def handle(self, method, target, body):
        """``(status, content type, bytes)``, or None for a request that is no action."""
        found = route(method, target)
        if found is None:
            return None
        verb, name = found
        try:
            try:
                check_name(name, "topology")
            except Reject as r:
                raise ActionError(400, r.message, field="topology") from None
            doc = self.run(verb, name, body)
            return 200, JSON_TYPE, (json.dumps(doc, default=str) + "\n").encode()
        except ActionError as e:
            return e.status, JSON_TYPE, (json.dumps({"error": e.message, **e.extra}) + "\n").encode()
        except BitternError as e:
            status = REBALANCE_STATUS.get(getattr(e, "kind", None), 409)
            if "no topology" in str(e) or "not running" in str(e):
                status = 404 if "no topology" in str(e) else 409
            return status, JSON_TYPE, (json.dumps({"error": str(e), "topology": name}) + "\n").encode()
        except Exception as e:  # noqa: BLE001 - 500 with the traceback logged, never a dead server
            log.exception("action %s on %s failed", verb, name)
            return 500, JSON_TYPE, (json.dumps({"error": f"internal error: {type(e).__name__}: {e}"}) + "\n").encode()

    def run(self, verb, name, body):
        from ..cli.common import tm_client
        from ..wire import Op
        if verb in ("activate", "deactivate"):
            with tm_client(self.state, name) as client:
                rep = client.request(Op.ACTIVATE if verb == "activate" else Op.DEACTIVATE)
            return {"topology": name, "active": verb == "activate", "missing": rep.get("missing") or []}
        with self._lock:
            if name in self._busy:
                raise ActionError(409, f"topology {name!r}: another kill or rebalance is running", topology=name)
            self._busy.add(name)
        try:
            if verb == "rebalance":
                from ..cli.common import require_running
                from ..rebalance import rebalance
                par, containers = check_rebalance(body)
                require_running(self.state, name)
                return rebalance(self.state, name, par, containers)
            from ..cli.lifecycle import kill_main
            if self.state.topology(name) is None:
                raise ActionError(404, f"no topology named {name!r}", topology=name)
            kill_main(argparse.Namespace(name=name, timeout=KILL_TIMEOUT_SECS, savepoint=None), self.state, self.home)
            self.drop(name)
            return {"topology": name, "killed": True}
        finally:
            with self._lock:
                self._busy.discard(name)

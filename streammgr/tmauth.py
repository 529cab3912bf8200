"""Who may talk to the topology master, and as whom (issue 18).

Mixed into :class:`streammgr.tmaster.TopologyMaster`.

* Local mode: its socket is ``ipc://`` in a directory only this user can enter
  (supervisor/local.py), so every client is this user's; nothing more is checked here.
* Cluster mode (the plan carries CURVE keys): the socket is a CURVE server with
  container 0's keypair. Its ZAP handler (bittern/curve.py ``KeyAuthenticator``)
  admits the public keys of the plan's containers (their stream managers) and of the
  registered nimbus daemons (``nimbus/hosts/*``, re-read every
  :data:`CLIENTS_SECS`). Every message then carries its sender's public key as the
  ZAP user id, and :meth:`TmAuth.caller_ok` binds what a sender may say to who it is:
  a stream manager identity ``s<C>@<V>`` only from container C's key, a request
  identity ``q...`` only from a nimbus key. Anything else is dropped and counted in
  ``counters["denied"]``, as are connections that end without a completed handshake
  (a key not admitted, a client without CURVE, bytes that are not ZMTP), seen through
  a socket monitor (streammgr/handshakes.py).
"""
from __future__ import annotations

import logging
import struct
import time

import zmq

from bittern import curve, wire

from .handshakes import EVENTS as HANDSHAKE_EVENTS, HandshakeLedger

log = logging.getLogger("bittern.tmaster")

CLIENTS_SECS = 2.0


class TmAuth:
    def _init_auth(self):
        """Before the bind: the CURVE server, its ZAP handler and the handshake monitor."""
        self.counters = getattr(self, "counters", None) or {"malformed": 0, "denied": 0}
        self.counters.setdefault("denied", 0)
        self.auth = self._auth_monitor = None
        self._denied_logged = 0.0
        keys = self.plan.keys
        if keys is None:
            return
        mine = keys.get(0) or {}
        if not mine.get("secret"):
            raise curve.CurveError("the plan has CURVE keys but no secret key for container 0 "
                                   "(the topology master's)")
        self._key_container = {k["public"]: c for c, k in keys.items() if (k or {}).get("public")}
        self._nimbus_keys = frozenset()
        self._clients_read_at = float("-inf")
        self.auth = curve.KeyAuthenticator(self._zctx, self._key_container).start()
        self.refresh_clients(time.monotonic())
        curve.server_options(self.sock, mine["secret"], mine["public"])
        self._handshakes = HandshakeLedger()
        self._auth_monitor = self.sock.get_monitor_socket(HANDSHAKE_EVENTS)

    def refresh_clients(self, now):
        """Re-read the nimbus daemons' public keys (every CLIENTS_SECS)."""
        if self.auth is None or now - self._clients_read_at < CLIENTS_SECS:
            return
        self._clients_read_at = now
        if not getattr(self.state, "connected", True):
            return  # ZooKeeper away: a read would hold up the loop for its retries; keep the keys known
        try:
            found = set()
            for node in self.state.children("nimbus/hosts"):
                pub = (self.state.get(f"nimbus/hosts/{node}") or {}).get("public_key")
                if isinstance(pub, str) and len(pub) == 40:
                    found.add(pub)
        except Exception as e:  # noqa: BLE001 - ZooKeeper away: keep the keys we know
            log.debug("cannot read nimbus/hosts (%s); keeping the nimbus keys known", e)
            return
        if found != self._nimbus_keys:
            self._nimbus_keys = frozenset(found)
            self.auth.allow(set(self._key_container) | found)

    def admit_container_keys(self, keys):
        """The assignment's container keys (``{C: {"public", ...}}``), read with the fencing
        check: a container placed anew got a fresh keypair, and its new stream manager must
        get in (the old copy's key is not admitted any more)."""
        if self.auth is None or not isinstance(keys, dict):
            return
        try:
            now = {k["public"]: int(c) for c, k in keys.items() if isinstance(k, dict) and k.get("public")}
        except (TypeError, ValueError):
            log.warning("the assignment's keys are malformed; keeping the keys admitted now")
            return
        if now and now != self._key_container:
            try:
                self.auth.allow(set(now) | self._nimbus_keys)
            except curve.CurveError as e:
                log.warning("the assignment has a bad key (%s); keeping the keys admitted now", e)
                return
            moved = sorted({c for k, c in now.items() if self._key_container.get(k) != c})
            self._key_container = now
            log.info("containers %s have new CURVE keys: admitted now", moved)

    def caller_ok(self, identity, user):
        """True if the sender with this ZAP user id (its public key) may speak as ``identity``."""
        if self.auth is None:
            return True
        if identity[:1] == b"q":
            if user in self._nimbus_keys:
                return True
            why = "a request from a key that is not a nimbus's"
        else:
            parsed = wire.parse_stmgr_identity(identity)
            if parsed is not None and self._key_container.get(user) == parsed[1]:
                return True
            why = "a stream manager identity its key does not own"
        self._denied(f"dropped {why} ({identity[:24]!r} from key {str(user)[:12]}...)")
        return False

    def drain_auth_monitor(self):
        """Count the connections the CURVE server refused."""
        mon = self._auth_monitor
        if mon is None:
            return
        for _ in range(256):
            try:
                ev, ep = mon.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                return
            except ValueError:
                continue
            event, value = struct.unpack("=HI", ev[:6]) if len(ev) >= 6 else (0, 0)
            why = self._handshakes.event(event, value)
            if why is not None:
                self._denied(f"refused a connection: {why}")

    def _denied(self, what):
        self.counters["denied"] += 1
        now = time.monotonic()
        if now - self._denied_logged >= 1.0:
            self._denied_logged = now
            log.warning("%s: %s (%d refused in all)", self.plan.tmaster, what, self.counters["denied"])

    def close_auth(self):
        if self._auth_monitor is not None:
            try:
                self.sock.disable_monitor()
            except zmq.ZMQError:
                pass
            self._auth_monitor.close(linger=0)
        if self.auth is not None:
            self.auth.stop()

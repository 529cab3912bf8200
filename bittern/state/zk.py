"""The ZooKeeper state manager: cluster mode.

The same tree of JSON documents as the local backend (see base.py), one znode per
document under ``root`` (default ``/bittern``). A znode is a document and a
directory at once; a znode without data (a parent made on the way to a deeper
document) reads as "no document", as a bare directory does locally. Names that
start with a dot are hidden from ``children`` on both backends (the local one keeps
its temp files there, this one its blob chunks).

Every operation runs under kazoo's retry, so a ZooKeeper restart or a leader change
(the client sees SUSPENDED, then CONNECTED with the same session) only delays it:
kazoo holds a call made while it reconnects until the server is back, however long.
A caller that must not wait (nimbus's API reads) runs its calls in
:meth:`ZkStateManager.impatient` (zkwait.py): they fail at once without a connection.
A *lost* session (expired: the server gave up on us and deleted our ephemeral nodes)
is different: ``on_lost`` is called once, and the
daemon must exit or re-register (``reopen``); it must not keep acting on leases
that are gone. Elections hand their leader a :class:`Lease` that says so too.
"""
from __future__ import annotations

import hashlib
import json
import logging
import math
import threading
import time
import uuid

from kazoo.client import KazooState
from kazoo.exceptions import (BadVersionError, CancelledError, LockTimeout, NoAuthError,
                              NodeExistsError, NoNodeError, NotEmptyError)
from kazoo.recipe.watchers import ChildrenWatch, DataWatch
from kazoo.retry import ForceRetryError
from kazoo.security import make_digest_acl, make_digest_acl_credential

from ..errors import BitternError

from . import zkwait
from .base import StateManager

log = logging.getLogger("bittern.state.zk")

# ZooKeeper refuses requests over jute.maxbuffer (1 MiB by default, path and ACL
# included) by dropping the connection, which kazoo's retry then resends forever:
# refuse oversized documents here instead, and chunk blobs well below the limit.
MAX_DOC_BYTES = 1_000_000
CHUNK_BYTES = 512 * 1024
BLOB = ".blob"  # the manifest of put_bytes; chunks are ".blob-VERSION-NNNNN"


def _encode(doc):
    data = json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()
    if len(data) > MAX_DOC_BYTES:
        raise ValueError(f"document of {len(data)} bytes is over ZooKeeper's node limit "
                         f"({MAX_DOC_BYTES}); store large data with put_bytes")
    return data


def _decode(data):
    return json.loads(data) if data else None  # empty: a parent, not a document


class UnsafeNode(BitternError):
    """A node under the root is not protected by this cluster's credentials."""


class ZkStateManager(StateManager):
    def __init__(self, hosts, root="/bittern", timeout=10.0, auth=None, on_lost=None,
                 connect_timeout=15.0):
        """Connect to ``hosts`` ("h1:2181,h2:2181"); raises ConnectionError if no server
        answers within ``connect_timeout`` s. ``timeout`` is the session timeout
        (the server clamps it to its min/maxSessionTimeout): how long after a crash
        our ephemeral nodes and leadership outlive us. ``auth`` "user:password"
        authenticates by digest and gives every node we create an ACL for that
        identity alone."""
        parts = [p for p in root.split("/") if p]
        if not parts or any(p in (".", "..") for p in parts):
            raise ValueError(f"bad ZooKeeper root {root!r}")
        self.root = "/" + "/".join(parts)
        self.hosts = hosts
        self.connect_timeout = connect_timeout
        self.session_timeout = timeout
        self._on_lost = on_lost
        self._lock = threading.Lock()
        self._lost = False  # the session expired since we opened / reopened
        self._closing = True  # until connected: kazoo reports a failed start as LOST
        self._ephemerals = {}  # znode path -> data, to re-create on reopen()
        self._leases = set()
        kwargs = {}
        self._acl_id = None  # "user:hash", the digest identity every node must be owned by
        if auth is not None:
            user, sep, password = auth.partition(":")
            if not sep or not user:
                raise ValueError("auth must be 'user:password'")
            kwargs = dict(auth_data=[("digest", auth)],
                          default_acl=[make_digest_acl(user, password, all=True)])
            self._acl_id = make_digest_acl_credential(user, password)
        self.zk = zkwait.Client(
            hosts=hosts, timeout=timeout, handler=zkwait.Handler(),
            # A server that accepts a connection and never answers must not hold us past
            # the session we reconnect to save (zkwait.py: ZooKeeper 3.8 does, on start).
            handshake_timeout=zkwait.handshake_timeout(timeout),
            # Reconnect forever, and quickly: a restarted server is back within seconds.
            connection_retry=dict(max_tries=-1, delay=0.1, max_delay=1.0),
            # An operation that fails on a dropped connection is retried for connect_timeout
            # (one made while kazoo reconnects waits for the connection: module docstring).
            command_retry=dict(max_tries=-1, delay=0.1, max_delay=1.0, deadline=connect_timeout),
            **kwargs)
        self.zk.add_listener(self._on_state)
        try:
            self.zk.start(timeout=connect_timeout)  # on time-out it stops and closes itself
        except self.zk.handler.timeout_exception:
            raise ConnectionError(f"no ZooKeeper server answered at {hosts} "
                                  f"within {connect_timeout}s") from None
        self._closing = False
        try:
            self.zk.retry(self.zk.ensure_path, self.root)
        except BaseException:
            self.close()  # no connection threads left behind by a failed constructor
            raise

    # -- session --------------------------------------------------------------------------
    def _on_state(self, state):
        """kazoo's connection thread calls this; it must not block, so on_lost runs in
        a thread of its own."""
        if state == KazooState.SUSPENDED:
            log.warning("ZooKeeper connection to %s interrupted; reconnecting", self.hosts)
        elif state == KazooState.CONNECTED:
            log.info("connected to ZooKeeper at %s", self.hosts)
        elif state == KazooState.LOST and not self._closing:  # close() also passes LOST
            with self._lock:
                first, self._lost = not self._lost, True
                leases = list(self._leases)
            log.error("ZooKeeper session lost (expired): ephemeral nodes and leadership "
                      "of this process are gone")
            for lease in leases:
                lease._lose("session lost")
            if first and self._on_lost is not None:
                threading.Thread(target=self._call_on_lost, name="bittern-zk-lost",
                                 daemon=True).start()

    def _call_on_lost(self):
        try:
            self._on_lost()
        except Exception:
            log.exception("on_lost callback failed")

    @property
    def connected(self):
        return self.zk.connected

    @property
    def lost(self):
        """True once the session expired, until reopen()."""
        return self._lost

    def reopen(self):
        """After a lost session: wait for the new session kazoo opens by itself,
        re-create this manager's ephemeral nodes in it and arm on_lost again.
        Returns the paths that could not be re-created (taken by someone else)."""
        deadline = time.monotonic() + self.connect_timeout
        while not self.zk.connected:
            if time.monotonic() > deadline:
                raise ConnectionError(f"no ZooKeeper connection to {self.hosts}")
            time.sleep(0.05)
        with self._lock:
            self._lost = False
            pending = dict(self._ephemerals)
        failed = []
        for zp, data in pending.items():
            if not self._retry(self._create_ephemeral, zp, data):
                log.warning("could not re-create ephemeral node %s: another session holds it", zp)
                failed.append(self._rel(zp))
                with self._lock:
                    self._ephemerals.pop(zp, None)  # not ours any more
        return failed

    def close(self):
        if self._closing:
            return
        self._closing = True
        with self._lock:
            leases = list(self._leases)
        for lease in leases:
            lease._lose("state manager closed")
        self.zk.stop()
        self.zk.close()

    def verify_acls(self):
        """With credentials: check that the root and every node under it carries this
        identity's ACL and no other grant. A node someone else made (a planted token or
        topology record, written before this cluster's daemons set the root's ACL) or one
        left open by an ``--insecure`` run raises :class:`UnsafeNode` naming it: its
        content cannot be trusted, so it is not silently fixed. Returns the number of
        nodes checked (0 without credentials: nothing to enforce)."""
        if self._acl_id is None:
            return 0
        stack, n = [self.root], 0
        while stack:
            zp = stack.pop()
            try:
                acls, _ = self._retry(self.zk.get_acls, zp)
                kids = self._retry(self.zk.get_children, zp)
            except NoNodeError:
                continue  # deleted while we walked
            except NoAuthError:
                raise UnsafeNode(f"ZooKeeper node {zp} cannot be read with this cluster's credentials: "
                                 f"someone else owns it; remove it (zkCli.sh deleteall {zp}) and start "
                                 "again") from None
            n += 1
            others = [f"{a.id.scheme}:{a.id.id}" for a in acls
                      if (a.id.scheme, a.id.id) != ("digest", self._acl_id)]
            if others or not acls:
                raise UnsafeNode(
                    f"ZooKeeper node {zp} is not protected by this cluster's credentials (ACL grants "
                    f"{', '.join(others) or 'nothing'}): someone else may have written it, or an --insecure "
                    f"run left it open; remove it (zkCli.sh deleteall {zp}) and start again")
            stack.extend(f"{zp}/{k}" for k in kids)
        return n

    # -- paths ----------------------------------------------------------------------------
    def _path(self, path, root_ok=False):
        parts = [p for p in path.split("/") if p]
        if (not parts and not root_ok) or any(p in (".", "..") for p in parts):
            raise ValueError(f"bad state path {path!r}")
        return "/".join([self.root, *parts])

    def _rel(self, zp):
        return zp[len(self.root) + 1:]

    def _retry(self, fn, *args, **kwargs):
        if zkwait.bound() is None:
            return self.zk.retry(fn, *args, **kwargs)

        def attempt():
            if not self.zk.connected:
                raise zkwait.Unreachable(f"no connection to ZooKeeper at {self.hosts}")
            return fn(*args, **kwargs)

        return self.zk.retry(attempt)

    def impatient(self):
        """A context (for this thread) in which operations fail at once without a
        connection and wait at most the session timeout for an answer."""
        return zkwait.impatient(self.session_timeout)

    # -- primitives -----------------------------------------------------------------------
    def get(self, path):
        return _decode(self._get_raw(self._path(path)))

    def _get_raw(self, zp):
        try:
            return self._retry(self.zk.get, zp)[0]
        except NoNodeError:
            return None

    def _write(self, zp, data):
        """Set or create (with parents); a create that lost the race to another one
        becomes a set."""
        try:
            self.zk.set(zp, data)
        except NoNodeError:
            try:
                self.zk.create(zp, data, makepath=True)
            except NodeExistsError:
                self.zk.set(zp, data)

    def put(self, path, doc):
        zp, data = self._path(path), _encode(doc)
        self._retry(self._write, zp, data)

    def create(self, path, doc):
        """Exclusive create. A data-less znode (a parent made for a deeper document)
        is claimed with a versioned set, as a local directory without its .json file
        would be. If the reply to our create was lost and the retry finds a node
        with exactly our bytes, it is taken as ours."""
        zp, data = self._path(path), _encode(doc)
        attempts = []

        def attempt():
            attempts.append(1)
            try:
                self.zk.create(zp, data, makepath=True)
                return True
            except NodeExistsError:
                pass
            try:
                got, stat = self.zk.get(zp)
            except NoNodeError:
                raise ForceRetryError(f"{zp} vanished during create") from None
            if not got:
                try:
                    self.zk.set(zp, data, version=stat.version)
                    return True
                except BadVersionError:
                    return False
            return len(attempts) > 1 and got == data

        return self._retry(attempt)

    def delete(self, path):
        zp = self._path(path)

        def attempt():
            try:
                self.zk.delete(zp, recursive=True)
            except NoNodeError:
                pass
            except NotEmptyError:  # a child appeared while we emptied it: start over
                raise ForceRetryError(f"{zp} gained children while being deleted") from None

        self._retry(attempt)
        with self._lock:
            for p in [p for p in self._ephemerals if p == zp or p.startswith(zp + "/")]:
                del self._ephemerals[p]

    def children(self, path):
        try:
            names = self._retry(self.zk.get_children, self._path(path, root_ok=True))
        except NoNodeError:
            return []
        return sorted(n for n in names if not n.startswith("."))

    # -- cluster extras -------------------------------------------------------------------
    def _create_ephemeral(self, zp, data):
        try:
            self.zk.create(zp, data, ephemeral=True, makepath=True)
            return True
        except NodeExistsError:
            pass
        stat, client_id = self.zk.exists(zp), self.zk.client_id
        if stat is None or client_id is None:  # just deleted, or disconnected since
            raise ForceRetryError(f"retry ephemeral {zp}")
        if stat.ephemeralOwner != client_id[0]:
            return False
        try:
            self.zk.set(zp, data)  # ours already (an earlier call, or a lost reply)
        except NoNodeError:
            raise ForceRetryError(f"retry ephemeral {zp}") from None
        return True

    def ephemeral(self, path, doc):
        """Write ``doc`` at ``path`` as a node that lives as long as this session.
        True if it is ours now (created, or already ours and updated); False if
        another session holds it (e.g. our predecessor's, until its session times
        out). reopen() re-creates it after a lost session. ZooKeeper allows no
        children (nor put_bytes) below an ephemeral node."""
        zp, data = self._path(path), _encode(doc)
        ok = self._retry(self._create_ephemeral, zp, data)
        if ok:
            with self._lock:
                self._ephemerals[zp] = data
        return ok

    def put_bytes(self, path, data):
        """Store a blob of any size: chunks under a fresh version, then the manifest
        switched to them in one write (readers see the old blob or the new one,
        never a mix), then the replaced version's chunks deleted."""
        zp = self._path(path)
        data = bytes(data)
        version = uuid.uuid4().hex[:16]
        n = max(1, math.ceil(len(data) / CHUNK_BYTES))
        try:
            for i in range(n):
                self._retry(self._write, f"{zp}/{BLOB}-{version}-{i:05d}",
                            data[i * CHUNK_BYTES:(i + 1) * CHUNK_BYTES])
        except Exception:
            self._delete_chunks(zp, version, n)  # nobody refers to them yet
            raise
        manifest = _encode({"version": version, "chunks": n, "size": len(data),
                            "sha256": hashlib.sha256(data).hexdigest()})
        seen = {}

        def switch():
            """Replace the manifest only if unchanged since read (a concurrent writer
            makes us read again: last writer wins, and each deletes only the version
            it replaced); returns the replaced manifest."""
            try:
                cur, stat = self.zk.get(f"{zp}/{BLOB}")
            except NoNodeError:
                try:
                    self.zk.create(f"{zp}/{BLOB}", manifest, makepath=True)
                    return None
                except NodeExistsError:
                    raise ForceRetryError("manifest created concurrently") from None
            if cur == manifest:  # our own write, whose reply was lost
                return seen.get("old")
            seen["old"] = _decode(cur)
            try:
                self.zk.set(f"{zp}/{BLOB}", manifest, version=stat.version)
            except BadVersionError:
                raise ForceRetryError("manifest changed concurrently") from None
            return seen["old"]

        old = self._retry(switch)
        if old and old["version"] != version:
            self._delete_chunks(zp, old["version"], old["chunks"])

    def _delete_chunks(self, zp, version, n):
        """Chunks of a version no manifest names (a failure here leaves them behind
        until ``delete(path)``: they are never read)."""
        def delete(chunk):
            try:
                self.zk.delete(chunk)
            except NoNodeError:
                pass

        try:
            for i in range(n):
                self._retry(delete, f"{zp}/{BLOB}-{version}-{i:05d}")
        except Exception:
            log.exception("could not delete unused chunks of %s (version %s)", zp, version)

    def get_bytes(self, path):
        """The blob at ``path``, or None. A chunk that disappears under us means a
        writer switched the manifest meanwhile: read the new one."""
        zp = self._path(path)
        for _ in range(20):
            m = _decode(self._get_raw(f"{zp}/{BLOB}"))
            if m is None:
                return None
            try:
                data = b"".join(self._retry(self.zk.get, f"{zp}/{BLOB}-{m['version']}-{i:05d}")[0]
                                for i in range(m["chunks"]))
            except NoNodeError:
                log.debug("blob %s replaced while reading it; reading again", zp)
                continue
            if len(data) != m["size"] or hashlib.sha256(data).hexdigest() != m["sha256"]:
                raise ValueError(f"blob at {zp} does not match its manifest")
            return data
        raise RuntimeError(f"blob at {zp} kept changing while being read")

    def watch(self, path, fn):
        """Call ``fn(doc)`` now and whenever the document at ``path`` changes (None:
        absent). Returning False from ``fn`` ends the watch."""
        return DataWatch(self.zk, self._path(path), self._guard(lambda data, *_: fn(_decode(data))))

    def watch_children(self, path, fn):
        """Call ``fn(names)`` now and whenever the children of ``path`` change. The
        path is created (empty) if absent; deleting it ends the watch (kazoo)."""
        zp = self._path(path, root_ok=True)
        self._retry(self.zk.ensure_path, zp)
        return ChildrenWatch(self.zk, zp, self._guard(
            lambda names: fn(sorted(n for n in names if not n.startswith(".")))))

    def _guard(self, fn):
        """Log a failing watch callback here and keep the watch (kazoo would log it
        under its own name and re-raise into its event thread)."""
        def call(*args):
            try:
                return fn(*args)
            except Exception:
                log.exception("watch callback failed")
                return None
        return call

    def election(self, path, identity):
        return Election(self, path, identity)


class Lease:
    """Leadership held by :meth:`Election.run`'s function. ``lost`` is set when the
    session expires, our election node is deleted, or the election is cancelled;
    the leader must stop acting as one then. While the connection is suspended the
    lease may still be ours but cannot be confirmed (``valid`` is False)."""

    def __init__(self, sm):
        self._sm = sm
        self.lost = threading.Event()
        self.reason = None

    def _lose(self, reason, level=logging.WARNING):
        if not self.lost.is_set():
            self.reason = reason
            log.log(level, "leadership lost: %s", reason)
            self.lost.set()

    @property
    def valid(self):
        return not self.lost.is_set() and self._sm.connected

    def wait(self, timeout=None):
        """Sleep up to ``timeout`` s; True if the lease is lost."""
        return self.lost.wait(timeout)


class Election:
    """Leader election on ``path`` (kazoo's lock recipe: the lowest sequential
    ephemeral node leads; when its session ends the next one takes over)."""

    def __init__(self, sm, path, identity):
        self._sm = sm
        self.identity = str(identity)
        self._lock = sm.zk.Lock(sm._path(path), self.identity)
        self._lease = None

    def run(self, fn, timeout=None):
        """Wait to be elected (up to ``timeout`` s, or until cancel()), then call
        ``fn(lease)`` and give leadership up when it returns. True if ``fn`` ran."""
        try:
            if not self._lock.acquire(timeout=timeout):
                return False
        except (LockTimeout, CancelledError):
            return False
        lease = self._lease = Lease(self._sm)
        with self._sm._lock:
            self._sm._leases.add(lease)
        try:
            node = f"{self._lock.path}/{self._lock.node}"  # kazoo keeps the name only

            def check(data, stat, *_):
                """Our node gone: leadership gone (deleted, or its session ended).
                kazoo's DataWatch, not a raw watch: kazoo drops raw watches on every
                disconnection, the recipe re-reads the node after reconnecting."""
                if stat is None:
                    lease._lose(f"election node {node} is gone")
                return not lease.lost.is_set()  # False ends the watch

            # Called at once: also covers a session lost before the lease existed.
            DataWatch(self._sm.zk, node, self._sm._guard(check))
            if not lease.lost.is_set():
                log.info("%s is leader of %s", self.identity, self._lock.path)
            fn(lease)
            return True
        finally:
            lease._lose("leadership given up", logging.INFO)
            with self._sm._lock:
                self._sm._leases.discard(lease)
            self._lease = None
            if not self._sm._closing:
                self._lock.release()

    def cancel(self):
        """Stop waiting to be elected; a running leader's lease is lost."""
        self._lock.cancel()
        if self._lease is not None:
            self._lease._lose("election cancelled")

    @property
    def is_leader(self):
        return self._lease is not None and self._lease.valid

    def contenders(self):
        """Identities in line, the leader first."""
        return self._lock.contenders()

    def leader(self):
        c = self.contenders()
        return c[0] if c else None

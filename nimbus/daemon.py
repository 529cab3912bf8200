"""The nimbus daemon: one leader (kazoo election) schedules; every nimbus serves the API.

State lives in ZooKeeper only (docs/CLUSTER.md), so a standby that wins the
election carries on from whatever the old leader left: it reads the topologies,
assignments and live supervisors and reconciles them, and running topologies never
notice (their processes do not talk to nimbus). The leader's loop is
:meth:`Nimbus.reconcile`, run every second and whenever something changed; every
write it makes is checked against its lease first, so a nimbus that lost its
session never acts on it.
"""
from __future__ import annotations

import base64
import logging
import os
import threading
import time

from bittern import archive, auth, config as cfg, curve
from bittern.api.topology import TopologyDef
from bittern.cli.common import NAME_RE
from bittern.client import TMClient
from bittern.errors import BitternError
from bittern.packing import PackingPlan, pack
from bittern.rebalance import MARKER as REBALANCE_MARKER, RebalanceError, plan_started, rebalance
from bittern.wire import Op
from bittern.runplan import placed_versions

from .scheduler import NoSlots, assignment, container_keys, kept_placement, place, stranded, used_slots
from .source import ClusterSource

log = logging.getLogger("bittern.nimbus")

RECONCILE_SECS = 1.0


class ApiError(BitternError):
    """An answer other than 2xx: ``status`` and a one-line message (plus extra fields)."""

    def __init__(self, status, message, **extra):
        super().__init__(message)
        self.status = status
        self.extra = extra


class NotLeader(ApiError):
    def __init__(self, leader):
        super().__init__(307, f"this nimbus is a standby; the leader is {leader}", leader=leader)


def status_error(status):
    """The start-up error of a status document as ``{"error", "traceback"}``."""
    err = status.get("error")
    if isinstance(err, dict):
        return {"error": err.get("error") or "start-up failed", "traceback": err.get("traceback")}
    return {"error": err or "start-up failed", "traceback": status.get("traceback")}


class Nimbus:
    def __init__(self, state, url, data_dir, cluster_conf=None, secure=True):
        self.state = state
        self.secure = secure  # ZooKeeper with credentials: every node checked ours (verify_acls)
        self.url = url
        self.data_dir = data_dir
        self.cluster_conf = dict(cluster_conf or {})  # cluster-wide settings (nimbus/store.py)
        self.store_lock = threading.Lock()  # a store's preparation and its removal at kill (store.py)
        self.nid = url
        # nimbus's own keypair: topology masters (CURVE servers in cluster mode) admit its
        # public key, which it registers in nimbus/hosts
        self.keypair = curve.load_or_create_keypair(os.path.join(data_dir, "nimbus.key"))
        self.source = ClusterSource(state, self.keypair)
        self.wake = threading.Event()
        self.stopping = threading.Event()
        self.lease = None  # set while leading
        self.election = None
        self.pending = {}  # topology -> why it is not placed yet
        self.scaling = {}  # topology -> the thread carrying out a health manager's scale request
        self.installing = set()  # topologies whose savepoint this nimbus is installing (savepoints.py)
        self.killed = {}  # topology -> (its topology master's endpoint and pid, when this nimbus killed it)
        self.token = self._token()

    # -- identity -----------------------------------------------------------------------
    def _token(self):
        """One token for every nimbus of the cluster: the first one to start puts its
        token in ZooKeeper, the others adopt it (and write it to their data dir, for
        clients on that host), so the CLI keeps working across a failover."""
        local = auth.load_or_create_token(self.data_dir)
        self.state.create("nimbus/token", {"token": local})
        token = (self.state.get("nimbus/token") or {}).get("token") or local
        if token != local and not self.secure:
            log.warning("adopting the API token another nimbus put in ZooKeeper; without ZooKeeper "
                        "authentication (--insecure) anyone could have written it")
        if token != local:
            path = os.path.join(self.data_dir, auth.TOKEN_FILE)
            tmp = path + f".{os.getpid()}.tmp"
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as f:
                f.write(token + "\n")
            os.replace(tmp, path)
        return token

    def register(self):
        self.state.ephemeral(f"nimbus/hosts/{self._node_id()}", {"id": self.nid, "url": self.url,
                                                               "pid": os.getpid(), "started": time.time(),
                                                               "public_key": self.keypair[0]})

    def _node_id(self):
        return self.url.split("://", 1)[-1].replace("/", "_").replace(":", "_")

    @property
    def is_leader(self):
        return self.lease is not None and self.lease.valid

    def leader_url(self):
        try:
            return self.election.leader() if self.election else None
        except Exception:  # noqa: BLE001 - ZooKeeper away: no known leader
            log.warning("cannot read the election", exc_info=True)
            return None

    def require_leader(self):
        if not self.is_leader:
            raise NotLeader(self.leader_url())

    # -- the election -------------------------------------------------------------------
    def run_election(self):
        """Thread: contend for leadership until stopped (again after losing it)."""
        while not self.stopping.is_set():
            self.election = self.state.election("nimbus/election", self.url)
            try:
                self.election.run(self._lead)
            except Exception:  # noqa: BLE001 - ZooKeeper trouble: logged, retried
                log.exception("election failed; retrying")
            self.stopping.wait(1.0)

    def _lead(self, lease):
        self.lease = lease
        log.info("nimbus %s leads", self.url)
        try:
            try:
                self.clear_stale_rebalances()
            except Exception:  # noqa: BLE001 - ZooKeeper trouble: logged; reconcile goes on
                log.exception("cannot clear the rebalance markers of the previous leader")
            while not self.stopping.is_set() and not lease.lost.is_set():
                if lease.valid:
                    try:
                        self.reconcile()
                    except Exception:  # noqa: BLE001 - the next round retries; never silent
                        log.exception("reconcile failed")
                self.wake.wait(RECONCILE_SECS)
                self.wake.clear()
        finally:
            self.lease = None
            log.info("nimbus %s no longer leads (%s)", self.url, lease.reason or "stopping")

    def stop(self):
        self.stopping.set()
        self.wake.set()
        if self.election is not None:
            self.election.cancel()

    # -- scheduling -----------------------------------------------------------------------
    def supervisors(self):
        out = {}
        for sid in self.state.children("supervisors"):
            doc = self.state.get(f"supervisors/{sid}")
            if doc:
                out[sid] = doc
        return out

    def reconcile(self):
        sups = self.supervisors()
        names = set(self.state.topologies())
        asgs = {n: self.state.assignment(n) for n in self.state.children("assignments")}
        for n in [n for n in asgs if n not in names]:  # a kill that stopped half-way
            self._write(lambda: self.state.delete(f"assignments/{n}"))
            asgs.pop(n)
        for n in self.state.children("status"):
            if n not in names:
                self._write(lambda: self.state.delete(f"status/{n}"))
        for name in sorted(names):
            rec = self.state.topology(name)
            if rec is None:
                continue
            asg = asgs.get(name)
            if rec.get("state") == "FAILED":
                if asg is not None:
                    self._write(lambda: self.state.delete(f"assignments/{name}"))
                    asgs.pop(name, None)
                continue
            if rec.get("restoring"):  # its savepoint is being installed: not placed before that is done
                if name not in self.installing:  # by a leader that is gone: it never will be
                    self._fail(name, rec, {"error": f"topology {name!r}: installing savepoint "
                                                    f"{rec['restoring'].get('savepoint')} was interrupted by a "
                                                    f"change of leader; kill it and submit it again"})
                    asgs.pop(name, None)
                continue
            status = self.state.status(name) or {}
            if status.get("phase") == "FAILED" and self.state.get(REBALANCE_MARKER.format(name=name)) is None:
                # (a rebalance whose new plan failed puts the old one back itself)
                self._fail(name, rec, status_error(status))
                asgs.pop(name, None)
                continue
            try:
                new = self._schedule(name, rec, asg, sups, asgs)
            except NoSlots as e:
                if self.pending.get(name) != str(e):
                    log.warning("topology %s waits for slots: %s", name, e)
                self.pending[name] = str(e)
                continue
            except BitternError as e:  # cannot be packed at all: a user error, fail it
                self._fail(name, rec, {"error": f"topology {name!r} cannot be scheduled: {e}"})
                continue
            self.pending.pop(name, None)
            if new is not None:
                asgs[name] = new
            self._serve_scale_request(name)

    @staticmethod
    def _keys(containers, placement, sups, old=None):
        """The containers' CURVE keys, sealed to their supervisors (scheduler.container_keys);
        a supervisor without a public key makes the topology wait, as for a slot."""
        try:
            return container_keys(containers, placement, sups, old)
        except ValueError as e:
            raise NoSlots(str(e)) from None

    def _schedule(self, name, rec, asg, sups, asgs):
        """A new assignment for ``name`` if it needs one (first placement, or containers
        on supervisors that are gone), written; None if nothing changed."""
        if asg is not None:
            dead = stranded(asg, sups)
            if not dead:
                return None
            keep = kept_placement(asg, sups)
            packing = PackingPlan.from_dict(asg["packing"])
            placement = place(packing.containers, sups, used_slots(asgs, skip=name), keep)
            keys = asg.get("keys") and self._keys(packing.containers, placement, sups, asg.get("keys"))
            since = {c: v for c, v in placed_versions(asg).items() if c in keep}  # moved ones: the new version
            doc = assignment(packing, placement, sups, asg.get("version", 0) + 1, keys, since=since)
            log.warning("topology %s: containers %s lost their supervisor; moved to %s (version %d)",
                        name, dead, {c: placement[c]["supervisor"] for c in dead}, doc["version"])
        else:
            tdef = TopologyDef.from_dict(rec["definition"])
            packing = pack(tdef, rec["config"])
            placement = place(packing.containers, sups, used_slots(asgs))
            keys = None
            if rec["config"].get("bittern.cluster.curve", True) and curve.available():
                keys = self._keys(packing.containers, placement, sups)
            doc = assignment(packing, placement, sups, 1, keys)
            log.info("topology %s placed: %s", name,
                     {c: f"{w['supervisor']}#{w['slot']}" for c, w in sorted(placement.items())})
        self._write(lambda: self.state.put(f"assignments/{name}", doc))
        return doc

    def _fail(self, name, rec, error):
        log.error("topology %s failed: %s", name, error.get("error"))
        rec = dict(rec, state="FAILED", error=error)
        self._write(lambda: self.state.put(f"topologies/{name}", rec))
        self._write(lambda: self.state.delete(f"assignments/{name}"))

    def _write(self, fn):
        """A state change made by the leader: refused once the lease is gone."""
        if self.lease is None or not self.lease.valid:
            raise NotLeader(self.leader_url())
        return fn()

    # -- the API's write operations ---------------------------------------------------------
    def submit(self, body, wait=None):
        self.require_leader()
        name = body.get("name")
        if not isinstance(name, str) or not NAME_RE.fullmatch(name):
            raise ApiError(400, f"bad topology name {name!r}")
        try:
            tdef = TopologyDef.from_dict(body["definition"])
        except Exception as e:  # noqa: BLE001 - untrusted input: a 400 naming the cause
            raise ApiError(400, f"topology {name!r}: malformed definition ({type(e).__name__}: {e})") from None
        if tdef.name != name:
            tdef.name = name
        try:
            conf, _warnings = cfg.check(body.get("config") or {}, where=f"topology {name!r} config")
            conf = cfg.check_merged(cfg.merge(conf), f"topology {name!r}")
        except BitternError as e:
            raise ApiError(400, str(e)) from None
        if self.secure and not conf.get("bittern.cluster.curve", True):
            raise ApiError(400, f"topology {name!r}: bittern.cluster.curve = false would open its topology master "
                                "and stream manager ports to anyone who reaches them; only a nimbus started "
                                "with --insecure accepts it")
        if self.secure and not curve.available():
            raise ApiError(400, f"topology {name!r}: this nimbus's libzmq has no CURVE, so the topology's ports "
                                "could not be closed to strangers; install a pyzmq wheel (it bundles CURVE)")
        try:
            data = base64.b64decode(body.get("archive") or "", validate=True)
        except ValueError:
            raise ApiError(400, f"topology {name!r}: the archive is not valid base64") from None
        digest = body.get("digest")
        if not data or archive.digest_of(data) != digest:
            raise ApiError(400, f"topology {name!r}: the archive does not match its digest {digest!r}")
        existing = self.state.topology(name)
        if existing is not None:
            raise ApiError(409, f"a topology named {name!r} already exists "
                                f"({self.source.phase(name, existing)}); kill it first or choose another name")
        from . import savepoints, store
        store.use_default(self, conf)  # exactly once: the cluster's store when the topology names none
        restore = None
        if body.get("savepoint") is not None:
            restore = savepoints.check_submission(self, name, tdef, conf, body["savepoint"])
        ckpt = store.resolve(self, name, conf)  # exactly once: the shared store, or a 400
        if (restore is not None or ckpt is not None) and not savepoints.wait_killed(self, name,
                                                                                    savepoints.GONE_WAIT_SECS):
            raise ApiError(409, f"the topology master of the killed topology {name!r} still answers at "
                                f"{self.killed[name][0]}; try again once it is gone")
        tdef_doc = tdef.to_dict()
        doc = {"definition": tdef_doc, "config": conf, "state": "PAUSED" if body.get("deactivated") else "RUNNING",
               "submitted_at": time.time(),
               "code": {"digest": digest, "entry": body.get("entry"), "size": len(data)}}
        if restore is not None:
            doc["restoring"] = {"savepoint": restore.path}
            self.installing.add(name)
        try:
            with self.store_lock:
                if ckpt is not None and restore is None:  # (from a savepoint: once it is installed)
                    self.require_leader()
                    doc["store"] = store.prepare(self, name, ckpt, doc["submitted_at"])
                if self.state.get_bytes(f"code/{digest}") is None:
                    self._write(lambda: self.state.put_bytes(f"code/{digest}", data))
                if not self._write(lambda: self.state.create(f"topologies/{name}", doc)):
                    raise ApiError(409, f"a topology named {name!r} is already being submitted")
            if restore is not None:
                cid = savepoints.install(self, name, restore, doc)
        finally:
            self.installing.discard(name)
        log.info("topology %s submitted (%d bytes of code, digest %s)", name, len(data), digest[:12])
        self.wake.set()
        status, answer = self.wait_started(name, conf["bittern.startup.timeout.secs"] if wait is None else wait)
        if restore is not None:
            answer = dict(answer, restored={"savepoint": restore.path, "checkpoint": cid,
                                            "topology": restore.doc["topology"]})
        return status, answer

    def wait_started(self, name, timeout):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and not self.stopping.is_set():
            rec = self.state.topology(name)
            if rec is None:
                raise ApiError(410, f"topology {name!r} was killed while starting")
            if rec.get("state") == "FAILED":
                err = rec.get("error") or {}
                raise ApiError(422, err.get("error") or "start-up failed", traceback=err.get("traceback"))
            phase = self.source.phase(name, rec)
            if phase in ("RUNNING", "PAUSED"):
                return 201, {"name": name, "state": phase}
            if name in self.pending:  # no slots for it now: accepted, placed when there are
                return 202, {"name": name, "state": "PENDING", "reason": self.pending[name]}
            time.sleep(0.1)
        return 202, {"name": name, "state": self.source.phase(name) or "PENDING",
                     "reason": self.pending.get(name) or f"not running after {timeout:.0f}s"}

    def kill(self, name, wait=None):
        """Remove every record of ``name`` (the supervisors stop its processes). ``wait``:
        seconds to wait for its topology master to stop answering (``kill --savepoint``:
        the next step restores under this name); the answer says whether it did."""
        self.require_leader()
        rec = self.state.topology(name)
        if rec is None and self.state.assignment(name) is None:
            raise ApiError(404, f"no topology named {name!r}")
        from . import savepoints, store
        savepoints.remember_killed(self, name, self.state.status(name) or {})
        ckpt = store.of_record(self, name, rec)
        digest = ((rec or {}).get("code") or {}).get("digest")
        for path in (f"topologies/{name}", f"assignments/{name}", f"status/{name}", f"checkpoints/{name}",
                     f"healthmgr/{name}"):
            self._write(lambda: self.state.delete(path))
        if digest and not any(((self.state.topology(n) or {}).get("code") or {}).get("digest") == digest
                              for n in self.state.topologies()):
            self._write(lambda: self.state.delete(f"code/{digest}"))
        self.pending.pop(name, None)
        log.info("topology %s killed", name)
        answer = {"name": name, "killed": True}
        if wait or ckpt is not None:  # (its checkpoints go once it stopped writing them)
            secs = wait if wait else savepoints.GONE_WAIT_SECS
            stopped = savepoints.wait_killed(self, name, secs)
            if not stopped:
                log.warning("topology %s: its topology master at %s still answers %gs after the kill", name,
                            self.killed[name][0], secs)
            if wait:
                answer["stopped"] = stopped
            if ckpt is not None:
                answer["checkpoints"] = store.remove(self, name, ckpt, stopped)
        return answer

    def set_active(self, name, active):
        self.require_leader()
        rec = self.state.topology(name)
        if rec is None:
            raise ApiError(404, f"no topology named {name!r}")
        if rec.get("state") == "FAILED":
            raise ApiError(409, f"topology {name!r} has FAILED; kill it and submit it again")
        want = "RUNNING" if active else "PAUSED"
        self._write(lambda: self.state.put(f"topologies/{name}", dict(rec, state=want)))
        status = self.state.status(name) or {}
        missing = []
        if self.source.phase(name) in ("RUNNING", "PAUSED") and status.get("tmaster"):
            with TMClient(status["tmaster"], curve=self.source.tm_curve(name)) as client:
                rep = client.request(Op.ACTIVATE if active else Op.DEACTIVATE, timeout=10.0)
            missing = rep.get("missing") or []
        return {"name": name, "state": want, "missing": missing}

    def rebalance(self, name, body):
        """``POST /api/v1/topologies/NAME/rebalance`` ``{parallelism: {C: N}, containers: K|null}``:
        bittern/rebalance.py run here, with new assignment versions as the deployer."""
        self.require_leader()
        par = body.get("parallelism") or {}
        containers = body.get("containers")
        if not isinstance(par, dict):
            raise ApiError(400, "parallelism must be an object {component: N}")
        try:
            return rebalance(self.state, name, par, containers, deployer=RebalanceDeployer(self, name),
                             say=lambda line: log.info("rebalance %s: %s", name, line))
        except RebalanceError as e:
            status = {"invalid": 400, "unknown": 404, "busy": 409, "failed": 422}.get(e.kind, 500)
            raise ApiError(status, str(e)) from None
        finally:
            self.wake.set()

    def clear_stale_rebalances(self):
        """A new leader: rebalances run on the leader only, so a marker left in
        ``rebalance/`` belongs to a previous leader that died during it. Remove it (else
        the topology could never be rebalanced again, nor failed), and activate the
        topology again if it was active before that rebalance."""
        for name in self.state.children("rebalance"):
            path = REBALANCE_MARKER.format(name=name)
            doc = self.state.get(path) or {}
            log.warning("topology %s: removing the marker of a rebalance interrupted by a change of leader "
                        "(%s)", name, doc)
            self._write(lambda: self.state.delete(path))
            if doc.get("active") and self.state.topology(name) is not None:
                try:
                    self.set_active(name, True)
                except Exception as e:  # noqa: BLE001 - not running (yet): the user activates it
                    log.warning("topology %s: could not activate it again: %s", name, e)

    def _serve_scale_request(self, name):
        """The health manager's scale request (``healthmgr/NAME/request``, written by
        streammgr/healthrunner.py's cluster scaler): carried out as a rebalance in a
        thread; the request is marked IN_PROGRESS, then DONE or ERROR (with ``error``)."""
        path = f"healthmgr/{name}/request"
        if name in self.scaling:
            return
        req = self.state.get(path)
        if not isinstance(req, dict) or req.get("state") != "REQUESTED":
            return
        self._write(lambda: self.state.put(path, dict(req, state="IN_PROGRESS", nimbus=self.url)))
        t = threading.Thread(target=self._scale, args=(name, path, req), name=f"scale-{name}", daemon=True)
        self.scaling[name] = t
        t.start()

    def _scale(self, name, path, req):
        try:
            try:  # every component of one decision in one rebalance (streammgr/healthrunner.py)
                many = req.get("parallelisms")
                par = ({str(c): int(n) for c, n in many.items()} if isinstance(many, dict) and many
                       else {str(req["component"]): int(req["parallelism"])})
                if any(n < 1 for n in par.values()):
                    raise ValueError("a parallelism below 1")
            except (KeyError, TypeError, ValueError, AttributeError):
                raise RebalanceError(f"malformed scale request {req!r:.200}") from None
            log.info("topology %s: the health manager asks for %s", name, par)
            rebalance(self.state, name, par, deployer=RebalanceDeployer(self, name),
                      say=lambda line: log.info("rebalance %s: %s", name, line))
            outcome = {"state": "DONE"}
        except Exception as e:  # noqa: BLE001 - reported to the health manager
            log.warning("topology %s: scale request failed: %s", name, e)
            outcome = {"state": "ERROR", "error": str(e)}
        finally:
            self.scaling.pop(name, None)
            self.wake.set()
        try:
            cur = self.state.get(path) or {}
            if cur.get("time") == req.get("time"):  # not replaced meanwhile
                self._write(lambda: self.state.put(path, dict(cur, done_at=time.time(), **outcome)))
        except Exception:  # noqa: BLE001 - the health manager times the request out
            log.exception("topology %s: cannot record the outcome of its scale request", name)

    def cluster(self):
        nimbuses = [self.state.get(f"nimbus/hosts/{n}") for n in self.state.children("nimbus/hosts")]
        leader = self.leader_url()
        return {"leader": leader, "this": self.url,
                "nimbuses": [dict(d, leader=d.get("url") == leader) for d in nimbuses if d],
                "supervisors": sorted(self.supervisors().values(), key=lambda d: d.get("id", "")),
                "pending": dict(self.pending), "config": dict(self.cluster_conf)}



class RebalanceDeployer:
    """Puts a rebalance's plan into effect on the cluster (bittern/rebalance.py's deployer):
    the topology record and a new assignment version with the new packing, placed on
    the slots its containers had where they still exist; the supervisors restart
    their containers because the packing changed."""

    def __init__(self, nimbus, name):
        self.nimbus, self.name = nimbus, name

    def tm_curve(self, name):
        """How rebalance reaches the topology master: a CURVE client with nimbus's key."""
        return self.nimbus.source.tm_curve(name)

    def pack(self, tdef, conf):
        return pack(tdef, conf)

    def deploy(self, rec, packing):
        n, name = self.nimbus, self.name
        state = n.state
        self.conf = rec["config"]
        old = state.assignment(name) or {}
        sups = n.supervisors()
        asgs = {a: state.assignment(a) for a in state.children("assignments")}
        keep = {c: w for c, w in kept_placement(old, sups).items() if c in packing.containers}
        try:
            placement = place(packing.containers, sups, used_slots(asgs, skip=name), keep)
        except NoSlots as e:
            raise RebalanceError(f"no slots for the new plan: {e}", "failed") from None
        keys = None
        if old.get("keys"):
            try:
                keys = container_keys(packing.containers, placement, sups, old.get("keys"))
            except ValueError as e:
                raise RebalanceError(str(e), "failed") from None
        doc = assignment(packing, placement, sups, int(old.get("version") or 0) + 1, keys)
        self.old_pid = (state.status(name) or {}).get("pid")
        n._write(lambda: state.put(f"topologies/{name}", rec))
        n._write(lambda: state.delete(f"status/{name}"))
        n._write(lambda: state.put(f"assignments/{name}", doc))
        log.info("topology %s rebalanced to version %d: %d tasks in %d container(s)", name, doc["version"],
                 len(packing.task_component), len(packing.containers))

    def wait_running(self, timeout):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and not self.nimbus.stopping.is_set():
            st = self.nimbus.state.status(self.name) or {}
            if st and st.get("pid") != self.old_pid and plan_started(st, self.conf):
                return st
            time.sleep(0.1)
        raise RebalanceError(f"the new plan of {self.name!r} did not start within {timeout:.0f}s", "failed")

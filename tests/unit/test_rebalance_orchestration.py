"""bittern.rebalance.rebalance with a fake topology master and a fake deployer:
the order of the steps, the rollback, the marker and the activation."""
from __future__ import annotations

import pytest

import bittern.rebalance as rb
from bittern.api.topology import ComponentDef, TopologyDef
from bittern.packing import round_robin
from bittern.rebalance import RebalanceError, rebalance
from bittern.state import LocalStateManager
from bittern.wire import Op


class FakeTM:
    calls = []
    pending = [3, 1, 0]

    def __init__(self, endpoint, curve=None):
        self.endpoint = endpoint

    def request(self, op, **kw):
        FakeTM.calls.append((self.endpoint, op))
        if op == Op.REPORT:
            p = FakeTM.pending.pop(0) if FakeTM.pending else 0
            return {"components": {"spout": {"__pending": p}, "count": {"__pending": 0}}, "tasks": {}}
        return {}

    def close(self):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        pass


class FakeDeployer:
    def __init__(self, state, fail_on=()):
        self.state, self.fail_on, self.deployed = state, list(fail_on), []

    def pack(self, tdef, conf):
        return round_robin({c.name: c.par for c in tdef.components.values()}, conf["topology.stmgrs"])

    def deploy(self, rec, packing):
        self.deployed.append({c["name"]: c["par"] for c in rec["definition"]["components"]})
        self.state.put("topologies/t", rec)
        self.state.put("assignments/t", {"packing": packing.to_dict()})
        n = len(self.deployed)
        ok = n not in self.fail_on
        self.state.put("status/t", {"phase": "RUNNING" if ok else "FAILED", "tmaster": f"tm{n}",
                                    "active": False, "error": None if ok else {"error": "boom"}})

    def wait_running(self, timeout):
        return self.state.status("t")


@pytest.fixture
def state(tmp_path, monkeypatch):
    monkeypatch.setattr(rb, "TMClient", FakeTM)
    FakeTM.calls, FakeTM.pending = [], [3, 1, 0]
    monkeypatch.setattr(rb.time, "sleep", lambda s: None)
    st = LocalStateManager(str(tmp_path))
    comps = [ComponentDef("spout", "spout", "x:S", 1, {}), ComponentDef("count", "bolt", "x:C", 2, {})]
    tdef = TopologyDef("t", {c.name: c for c in comps})
    conf = {"topology.stmgrs": 2, "topology.reliability.mode": "ATLEAST_ONCE",
            "topology.message.timeout.secs": 5}
    st.put("topologies/t", {"definition": tdef.to_dict(), "config": conf, "state": "RUNNING",
                            "submitted_at": 42.0})
    st.put("assignments/t", {"packing": round_robin({"spout": 1, "count": 2}, 2).to_dict()})
    st.put("status/t", {"phase": "RUNNING", "tmaster": "tm0", "active": True})
    return st


def pars(state):
    return {c["name"]: c["par"] for c in state.topology("t")["definition"]["components"]}


def test_drains_then_deploys_then_activates(state):
    d = FakeDeployer(state)
    out = rebalance(state, "t", {"count": 4}, deployer=d)
    assert out["parallelism"] == {"spout": 1, "count": 4} and out["tasks"] == 5 and out["drained"]
    assert d.deployed == [{"spout": 1, "count": 4}]
    assert FakeTM.calls == [("tm0", Op.DEACTIVATE)] + [("tm0", Op.REPORT)] * 3 + [("tm1", Op.ACTIVATE)]
    assert state.topology("t")["submitted_at"] == 42.0 and pars(state)["count"] == 4
    assert state.get("rebalance/t") is None


def test_a_failing_plan_is_rolled_back_and_activated(state):
    d = FakeDeployer(state, fail_on=[1])
    with pytest.raises(RebalanceError, match="back on the old plan: boom") as e:
        rebalance(state, "t", {"count": 4}, deployer=d)
    assert e.value.kind == "failed"
    assert d.deployed == [{"spout": 1, "count": 4}, {"spout": 1, "count": 2}]
    assert pars(state)["count"] == 2 and state.topology("t")["submitted_at"] == 42.0
    assert FakeTM.calls[-1] == ("tm2", Op.ACTIVATE)
    assert state.get("rebalance/t") is None


def test_a_failing_rollback_says_so(state):
    d = FakeDeployer(state, fail_on=[1, 2])
    with pytest.raises(RebalanceError, match="so did restarting it on the old plan") as e:
        rebalance(state, "t", {"count": 4}, deployer=d)
    assert e.value.kind == "broken" and state.get("rebalance/t") is None


def test_a_paused_topology_stays_paused(state):
    state.put("status/t", {"phase": "RUNNING", "tmaster": "tm0", "active": False})
    rebalance(state, "t", {"count": 3}, deployer=FakeDeployer(state))
    assert Op.ACTIVATE not in [op for _, op in FakeTM.calls]


def test_a_marker_that_cannot_be_removed_is_logged_and_the_outcome_stands(state, monkeypatch, caplog):
    def refuse(key):
        raise OSError(f"{key}: read-only file system")
    monkeypatch.setattr(state, "delete", refuse)
    with caplog.at_level("WARNING", logger="bittern.rebalance"):
        out = rebalance(state, "t", {"count": 3}, deployer=FakeDeployer(state))
    assert out["parallelism"] == {"spout": 1, "count": 3}
    assert "could not remove the rebalance marker rebalance/t of 't'" in caplog.text
    assert "read-only file system" in caplog.text


def test_refusals_touch_nothing(state):
    d = FakeDeployer(state)
    assert state.create("rebalance/t", {"pid": 1, "host": "elsewhere"})
    with pytest.raises(RebalanceError, match="already in progress") as e:
        rebalance(state, "t", {"count": 3}, deployer=d)
    assert e.value.kind == "busy"
    assert state.get("rebalance/t")["host"] == "elsewhere"  # not ours to remove
    state.delete("rebalance/t")
    state.put("status/t", {"phase": "STARTING"})
    with pytest.raises(RebalanceError, match="not running"):
        rebalance(state, "t", {"count": 3}, deployer=d)
    with pytest.raises(RebalanceError) as e:
        rebalance(state, "nope", {"count": 3}, deployer=d)
    assert e.value.kind == "unknown"
    assert d.deployed == [] and FakeTM.calls == []


@pytest.mark.parametrize("status, mode, settled", [
    ({"phase": "STARTING"}, "ATLEAST_ONCE", False),
    ({"phase": "RUNNING"}, "ATLEAST_ONCE", True),
    ({"phase": "FAILED"}, "ATLEAST_ONCE", True),
    # exactly once: registered is not enough, every task must have restored its state
    ({"phase": "RUNNING", "resumed_epoch": None}, "EFFECTIVELY_ONCE", False),
    ({"phase": "RUNNING", "resumed_epoch": 0}, "EFFECTIVELY_ONCE", True),
    ({"phase": "FAILED", "resumed_epoch": None}, "EFFECTIVELY_ONCE", True),
])
def test_a_new_plan_has_started_once_running_and_under_exactly_once_restored(status, mode, settled):
    assert rb.plan_started(status, {"topology.reliability.mode": mode}) is settled

"""Fencing by assignment version (streammgr/fencing.py): the pure rule, the identities that
carry it, and where the versions come from (nimbus's assignment, the supervisor's plan)."""
from __future__ import annotations

from bittern import wire
from bittern.packing import round_robin
from bittern.runplan import placed_versions
from nimbus.scheduler import assignment, kept_placement, place
from streammgr.fencing import ACCEPT, NEWER, OLDER, UNKNOWN, Fence, PeerIds

SUPS = {"a": {"host": "10.0.0.1", "slots": 2, "base_port": 6700},
        "b": {"host": "10.0.0.2", "slots": 2, "base_port": 7700}}


def test_identities_carry_the_version_and_parse_back_and_junk_is_refused():
    assert wire.stmgr_identity(3) == b"s3" and wire.stmgr_ctrl_identity(3) == b"c3"  # local mode: as before
    assert wire.stmgr_identity(3, 7) == b"s3@7" and wire.stmgr_ctrl_identity(12, 40) == b"c12@40"
    assert wire.parse_stmgr_identity(b"s3@7") == (b"s", 3, 7)
    assert wire.parse_stmgr_identity(b"c12") == (b"c", 12, 0)
    for junk in (b"", b"s", b"t3", b"s3@", b"s@3", b"s3@x", b"s-1", b"s3@07", b"s3@7@8", b"q123",
                 b"s" + b"9" * 10, b"s1@" + b"9" * 16):
        assert wire.parse_stmgr_identity(junk) is None, junk


def test_fence_accepts_the_known_version_refuses_older_and_learns_newer():
    f = Fence({0: 1, 1: 4}, [0, 1])
    assert f.check(0, 1) == ACCEPT and f.check(1, 4) == ACCEPT
    assert f.check(1, 3) == OLDER
    assert f.check(5, 1) == UNKNOWN
    assert f.check(1, 6) == NEWER and f.version(1) == 6
    assert f.check(1, 4) == OLDER  # the version before the newer one is fenced from now on
    assert f.check(1, 6) == ACCEPT


def test_fence_update_never_goes_back_and_superseded_names_what_moved():
    f = Fence({0: 2, 1: 2}, [0, 1])
    assert f.superseded({0: 2, 1: 5, 9: 9}) == [1]
    assert f.update({0: 1, 1: 5}) == [1] and f.version(0) == 2 and f.version(1) == 5
    assert f.superseded({0: 2, 1: 5}) == []
    local = Fence(None, [0, 1])
    assert local.version(0) == 0 and local.check(0, 0) == ACCEPT


def test_peer_ids_hot_path_and_an_old_copy_after_the_new_one_spoke():
    f = Fence({0: 1, 1: 1, 2: 1}, [0, 1, 2])
    ids = PeerIds(f, me=0)
    assert ids.get(b"s1@1") == (1, False) and ids.get(b"c1@1") == (1, True)
    assert ids.get(b"s0@1") == UNKNOWN  # ourselves: nobody else may claim it
    assert ids.get(b"s7@1") == UNKNOWN and ids.get(b"junk") == UNKNOWN
    # container 1 moved (version 3): its new copy is accepted and its old one refused from then on
    assert ids.get(b"s1@3") == (1, False)
    assert ids.get(b"s1@1") == OLDER and ids.get(b"c1@1") == OLDER
    assert ids.get(b"s2@1") == (2, False)  # others unaffected


def test_nimbus_keeps_since_of_containers_that_stay_and_the_plan_reads_it():
    packing = round_robin({"x": 2}, 2)
    pl = place(packing.containers, SUPS, set())
    v1 = assignment(packing, pl, SUPS, 1)
    assert placed_versions(v1) == {0: 1, 1: 1}
    # supervisor of container 1 lost: it moves, container 0 stays
    lost = pl[1]["supervisor"]
    live = {k: v for k, v in SUPS.items() if k != lost}
    keep = kept_placement(v1, live)
    pl2 = place(packing.containers, live, set(), keep)
    since = {c: v for c, v in placed_versions(v1).items() if c in keep}
    v2 = assignment(packing, pl2, live, 2, since=since)
    assert placed_versions(v2) == {0: 1, 1: 2}
    # an assignment written before placements had "since": every container at its version
    old = {"version": 5, "containers": {"0": {"supervisor": "a"}, "1": {"supervisor": "b"}}}
    assert placed_versions(old) == {0: 5, 1: 5}
    assert placed_versions(None) == {}

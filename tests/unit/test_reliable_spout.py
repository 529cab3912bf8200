"""bittern.api.reliable.ReliableSpout: the pending map, replays first, max_retries,
EXHAUSTED and done(). The runtime's emit and done hooks are stubbed."""
from __future__ import annotations

import pytest

from bittern import ReliableSpout
from bittern.api.reliable import EXHAUSTED


class Items(ReliableSpout):
    """Serves ``script`` one entry per next_item() call; records emits and callbacks."""

    outputs = ["v"]

    def __init__(self, script, max_retries=None):
        super().__init__()
        self.script = list(script)
        if max_retries is not None:
            self.max_retries = max_retries
        self.emitted = []
        self.done_calls = 0
        self.acked_ids = []
        self.gave_up = []
        self.emit = self._emit  # the runtime binds emit; here it records
        self._runtime_done = self._done

    def _emit(self, values, tup_id=None, stream="default", direct_task=None, need_task_ids=False):
        self.emitted.append((tup_id, values, stream))

    def _done(self):
        self.done_calls += 1

    def next_item(self):
        return self.script.pop(0) if self.script else None

    def on_acked(self, tup_id):
        self.acked_ids.append(tup_id)

    def on_gave_up(self, tup_id, values):
        self.gave_up.append((tup_id, values))


def drive(s, n):
    for _ in range(n):
        s.next_tuple()


def test_emits_new_items_with_their_ids_and_keeps_them_pending():
    s = Items([(1, ["a"]), (2, ["b"], "side"), None, (3, ["c"])])
    drive(s, 4)
    assert s.emitted == [(1, ["a"], "default"), (2, ["b"], "side"), (3, ["c"], "default")]
    assert s.pending == {1: [["a"], "default", 0], 2: [["b"], "side", 0], 3: [["c"], "default", 0]}
    s.ack(2)
    assert list(s.pending) == [1, 3] and s.acked_ids == [2]
    s.ack(2)  # a duplicate ack is not reported twice
    s.ack(99)  # nor an unknown id
    assert s.acked_ids == [2]


def test_nothing_to_emit_emits_nothing():
    s = Items([])
    drive(s, 3)
    assert s.emitted == [] and s.pending == {} and s.done_calls == 0


def test_replays_go_first_in_failure_order():
    s = Items([(i, [i]) for i in range(6)])
    drive(s, 4)  # 0..3 emitted
    s.fail(2)
    s.fail(0)
    assert list(s.replay_queue) == [2, 0]
    drive(s, 3)
    assert s.emitted[4:] == [(2, [2], "default"), (0, [0], "default"), (4, [4], "default")]
    assert s.pending[2][2] == 1 and s.pending[0][2] == 1 and s.pending[4][2] == 0
    assert list(s.replay_queue) == []


def test_replay_keeps_the_stream():
    s = Items([("x", ["v"], "errors")])
    drive(s, 1)
    s.fail("x")
    drive(s, 1)
    assert s.emitted == [("x", ["v"], "errors"), ("x", ["v"], "errors")]


def test_acked_before_its_replay_is_not_replayed():
    s = Items([(1, [1]), (2, [2]), (3, [3])])
    drive(s, 2)
    s.fail(1)
    s.fail(2)
    s.ack(1)  # e.g. the replay raced with a late ack of an earlier emission
    drive(s, 1)
    assert s.emitted[2:] == [(2, [2], "default")]  # 1 skipped, 2 replayed, in one call
    drive(s, 1)
    assert s.emitted[3:] == [(3, [3], "default")]


def test_fail_of_an_unknown_id_is_ignored():
    s = Items([(1, [1])])
    drive(s, 1)
    s.fail(42)
    assert list(s.replay_queue) == [] and s.gave_up == []


def test_each_failure_replays_forever_without_max_retries():
    s = Items([(1, ["a"])])
    drive(s, 1)
    for k in range(1, 21):
        s.fail(1)
        drive(s, 1)
        assert s.pending[1][2] == k
    assert s.emitted == [(1, ["a"], "default")] * 21 and s.gave_up == []


def test_max_retries_then_on_gave_up():
    s = Items([(1, ["a"]), (2, ["b"])], max_retries=2)
    drive(s, 2)
    s.fail(1)
    drive(s, 1)
    s.fail(1)
    drive(s, 1)
    assert [e[0] for e in s.emitted] == [1, 2, 1, 1]  # the first emission and 2 replays
    assert s.gave_up == []
    s.fail(1)  # the third failure is past max_retries
    assert s.gave_up == [(1, ["a"])]
    assert 1 not in s.pending and list(s.replay_queue) == []
    drive(s, 1)
    assert [e[0] for e in s.emitted] == [1, 2, 1, 1]
    s.ack(1)  # a late ack of the abandoned id is not reported
    assert s.acked_ids == []


def test_max_retries_zero_gives_up_on_the_first_failure():
    s = Items([(7, ["z"])], max_retries=0)
    drive(s, 1)
    s.fail(7)
    assert s.gave_up == [(7, ["z"])] and s.pending == {}


def test_exhausted_with_nothing_pending_is_done_at_once():
    s = Items([EXHAUSTED, (1, [1])])
    drive(s, 1)
    assert s.done_calls == 1 and s.emitted == []


def test_exhausted_waits_for_pending_then_done():
    s = Items([(1, ["a"]), (2, ["b"]), EXHAUSTED, (3, ["never"])])
    drive(s, 3)
    assert s.done_calls == 0 and [e[0] for e in s.emitted] == [1, 2]
    drive(s, 5)  # nothing new is asked of the source once it is exhausted
    assert s.script == [(3, ["never"])] and s.done_calls == 0
    s.fail(2)
    drive(s, 1)  # replays still go out after EXHAUSTED
    assert [e[0] for e in s.emitted] == [1, 2, 2]
    s.ack(1)
    drive(s, 1)
    assert s.done_calls == 0, "2 is still pending"
    s.ack(2)
    assert s.done_calls == 0  # done() comes from next_tuple, not from ack
    drive(s, 1)
    assert s.done_calls == 1 and s.pending == {}


def test_exhausted_then_the_last_pending_item_is_given_up():
    s = Items([(1, ["a"]), EXHAUSTED], max_retries=0)
    drive(s, 2)
    assert s.done_calls == 0
    s.fail(1)
    assert s.gave_up == [(1, ["a"])]
    drive(s, 1)
    assert s.done_calls == 1


def test_a_pending_id_returned_again_is_an_error():
    s = Items([(1, ["a"]), (1, ["again"])])
    drive(s, 1)
    with pytest.raises(ValueError, match=r"Items.next_item returned tup_id 1 that is still pending"):
        s.next_tuple()
    assert s.pending == {1: [["a"], "default", 0]}


def test_an_acked_id_may_be_reused():
    s = Items([(1, ["a"]), (1, ["b"])])
    drive(s, 1)
    s.ack(1)
    drive(s, 1)
    assert s.emitted == [(1, ["a"], "default"), (1, ["b"], "default")]
    assert s.pending == {1: [["b"], "default", 0]}


def test_done_outside_a_running_topology_raises():
    class Bare(ReliableSpout):
        outputs = ["v"]

        def next_item(self):
            return EXHAUSTED
    with pytest.raises(RuntimeError, match="done\\(\\) can only be called inside a running topology"):
        Bare().next_tuple()

"""Input watermarks over channels (bittern/time/watermarks.py): the minimum over the
channels that are not idle, never backwards; derived channels (Storm's max ts - lag)
and their idleness; +inf from ended sources; restore after a rollback. Pure: no clocks."""
from __future__ import annotations

import random

import pytest

from bittern import Bolt, EventTime, Grouping, Spout, TopologyBuilder, Window
from bittern.api.windows import AggregatingWindowBolt
from bittern.time.watermarks import NEG_INF, POS_INF, InputWatermark, SourceWatermark, watermark_components


# -- in-band channels -------------------------------------------------------------------------

def test_minimum_over_channels():
    iw = InputWatermark(channels=[1, 2, 3])
    assert iw.current == NEG_INF and iw.channels == frozenset({1, 2, 3})
    assert iw.on_watermark(1, 10) is False  # 2 and 3 still at -inf
    assert iw.on_watermark(2, 5) is False
    assert iw.on_watermark(3, 7) is True
    assert iw.current == 5
    assert iw.on_watermark(2, 20) is True
    assert iw.current == 7
    assert iw.on_watermark(3, 30) is True
    assert iw.current == 10


def test_never_backwards():
    iw = InputWatermark(channels=["a", "b"])
    iw.on_watermark("a", 10)
    iw.on_watermark("b", 10)
    assert iw.current == 10
    assert iw.on_watermark("a", 3) is False  # a channel's own watermark keeps its maximum
    assert iw.wm["a"] == 10 and iw.current == 10
    assert iw.on_watermark("b", 12) is False  # a still at 10
    assert iw.on_watermark("a", 11) is True and iw.current == 11


def test_unknown_channel_is_ignored():
    iw = InputWatermark(channels=[1])
    assert iw.on_watermark(99, 5) is False
    assert iw.on_watermark(99, None) is False
    assert iw.channels == frozenset({1}) and iw.current == NEG_INF and not iw.idle


def test_idle_channel_is_excluded_and_rejoins():
    iw = InputWatermark(channels=[1, 2])
    iw.on_watermark(1, 5)
    assert iw.current == NEG_INF  # 2 has said nothing yet
    assert iw.on_watermark(2, None) is True  # 2 idle: the minimum is 1's alone
    assert iw.current == 5 and iw.idle == {2} and not iw.all_idle
    assert iw.on_watermark(1, 9) is True and iw.current == 9
    # 2 joins again below the input watermark: the input does not move back and waits
    # for 2 to catch up
    assert iw.on_watermark(2, 4) is False
    assert iw.idle == set() and iw.current == 9
    assert iw.on_watermark(1, 20) is False
    assert iw.on_watermark(2, 15) is True and iw.current == 15


def test_idle_channel_rejoins_without_watermark_of_its_own_yet():
    iw = InputWatermark(channels=[1, 2])
    iw.on_watermark(2, None)
    iw.on_watermark(1, 8)
    assert iw.current == 8
    iw.on_watermark(2, 8)  # back, at the input watermark
    assert iw.current == 8 and not iw.idle
    assert iw.on_watermark(1, 12) is False  # 2 holds it at 8 again
    assert iw.on_watermark(2, 10) is True and iw.current == 10


def test_all_idle_does_not_advance():
    iw = InputWatermark(channels=[1, 2])
    iw.on_watermark(1, 3)
    iw.on_watermark(2, 4)
    assert iw.current == 3
    assert iw.on_watermark(1, None) is True and iw.current == 4  # 2 alone
    assert iw.on_watermark(2, None) is False
    assert iw.all_idle and iw.current == 4
    assert iw.on_watermark(1, None) is False and iw.current == 4
    # one comes back: the input moves with it alone
    assert iw.on_watermark(1, 6) is True and iw.current == 6 and not iw.all_idle


def test_all_idle_from_the_start_stays_at_minus_infinity():
    iw = InputWatermark(channels=[1, 2])
    assert iw.on_watermark(1, None) is False
    assert iw.on_watermark(2, None) is False
    assert iw.all_idle and iw.current == NEG_INF


def test_no_channels_is_never_all_idle():
    iw = InputWatermark()
    assert not iw.all_idle and iw.current == NEG_INF
    assert iw.check_idle(100.0) is False


def test_ended_sources_send_plus_infinity():
    iw = InputWatermark(channels=[1, 2])
    iw.on_watermark(1, 5)
    iw.on_watermark(2, 7)
    assert iw.on_watermark(1, POS_INF) is True and iw.current == 7  # 1 ended: 2 alone holds it
    assert iw.on_watermark(2, 9) is True and iw.current == 9
    assert iw.on_watermark(2, POS_INF) is True and iw.current == POS_INF
    assert iw.on_watermark(2, 100) is False and iw.current == POS_INF  # after the end: nothing moves


def test_ended_and_idle_mix():
    iw = InputWatermark(channels=[1, 2, 3])
    iw.on_watermark(1, POS_INF)
    iw.on_watermark(2, None)
    assert iw.current == NEG_INF  # 3 has said nothing
    assert iw.on_watermark(3, 4) is True and iw.current == 4
    # 1 ended (+inf) and 2, 3 idle: idle sources hold nothing back, so the only awake one
    # decides: +inf, as in Flink (what 2 and 3 send when they wake is late)
    assert iw.on_watermark(3, None) is True
    assert iw.current == POS_INF and iw.all_idle
    assert iw.on_watermark(2, 6) is False and iw.current == POS_INF and not iw.all_idle  # never backwards


# -- derived channels (Storm's rule) -------------------------------------------------------------

def test_derived_channel_is_max_timestamp_minus_lag():
    iw = InputWatermark(derived=["s1", "s2"], lag=2.0)
    assert iw.derived == frozenset({"s1", "s2"})
    assert iw.on_timestamp("s1", 10, now=0.0) is False  # s2 unknown yet: -inf
    assert iw.on_timestamp("s2", 20, now=0.0) is True
    assert iw.current == 8
    assert iw.on_timestamp("s1", 5, now=1.0) is False  # older timestamps do not lower it
    assert iw.wm["s1"] == 8
    assert iw.on_timestamp("s1", 30, now=1.0) is True and iw.current == 18
    assert iw.on_timestamp("other", 99, now=1.0) is False  # not derived: ignored


def test_derived_and_in_band_together():
    iw = InputWatermark(channels=[1], derived=[2], lag=1.0)
    assert iw.on_timestamp(1, 100, now=0.0) is False  # an in-band channel's timestamps do not count
    iw.on_timestamp(2, 11, now=0.0)
    assert iw.current == NEG_INF
    assert iw.on_watermark(1, 50) is True and iw.current == 10
    assert iw.on_timestamp(2, 100, now=0.0) is True and iw.current == 50


def test_derived_channel_goes_idle_after_idle_secs_and_rejoins():
    iw = InputWatermark(derived=["a", "b"], lag=0.0, idle_secs=10.0)
    iw.on_timestamp("a", 5, now=0.0)
    iw.on_timestamp("b", 7, now=0.0)
    assert iw.current == 5
    iw.on_timestamp("b", 20, now=4.0)
    assert iw.check_idle(9.99) is False and not iw.idle
    assert iw.check_idle(10.0) is True  # a silent for 10 s: idle, b alone
    assert iw.idle == {"a"} and iw.current == 20
    assert iw.check_idle(13.0) is False  # b seen at 4: not yet
    assert iw.check_idle(14.0) is False  # b idle too, but all idle: no advance
    assert iw.all_idle and iw.current == 20
    # a tuple from a: it joins again (its watermark below the input's: no move back)
    assert iw.on_timestamp("a", 12, now=15.0) is False
    assert iw.idle == {"b"} and iw.current == 20
    assert iw.on_timestamp("a", 30, now=16.0) is True and iw.current == 30


def test_idle_secs_zero_never_idle():
    iw = InputWatermark(derived=["a", "b"], idle_secs=0.0)
    iw.on_timestamp("a", 5, now=0.0)
    iw.on_timestamp("b", 9, now=0.0)
    assert iw.check_idle(1e9) is False and not iw.idle and iw.current == 5


def test_check_idle_only_concerns_derived_channels():
    iw = InputWatermark(channels=[1], derived=[2], idle_secs=1.0)
    iw.on_watermark(1, 50)
    iw.on_timestamp(2, 10, now=0.0)
    assert iw.current == 10
    assert iw.check_idle(5.0) is True and iw.idle == {2} and iw.current == 50
    assert iw.check_idle(500.0) is False and iw.idle == {2}  # channel 1 in band: never idled here


def test_derived_channel_that_never_sends_goes_idle():
    """A derived upstream task that emits nothing must not hold the watermark at -inf
    forever: silent for idle_secs (counted from the first check), it is idle, as an
    in-band source that never emits is."""
    iw = InputWatermark(derived=["a", "b"], idle_secs=10.0)
    assert iw.check_idle(0.0) is False
    iw.on_timestamp("a", 5, now=1.0)
    assert iw.current == NEG_INF
    assert iw.check_idle(9.0) is False
    assert iw.check_idle(10.0) is True  # b silent since the first check
    assert iw.idle == {"b"} and iw.current == 5
    assert iw.on_timestamp("b", 7, now=11.0) is False and iw.idle == set()  # b joins (late: below 5)
    assert iw.on_timestamp("a", 9, now=11.0) is True and iw.current == 7


# -- restore -----------------------------------------------------------------------------------

def test_restore_starts_channels_over_at_the_checkpointed_watermark():
    iw = InputWatermark(channels=[1, 2], derived=[3], idle_secs=5.0)
    iw.on_watermark(1, 40)
    iw.on_watermark(2, None)
    iw.on_timestamp(3, 50, now=0.0)
    assert iw.current == 40
    iw.restore(25)
    assert iw.current == 25 and not iw.idle and not iw.last_seen
    assert all(w == NEG_INF for w in iw.wm.values())
    assert iw.on_watermark(1, 30) is False  # 2 and 3 start over at -inf
    assert iw.on_watermark(2, 10) is False and iw.on_timestamp(3, 20, now=1.0) is False
    assert iw.current == 25  # below the checkpoint's: never back
    assert iw.on_watermark(2, 31) is False
    assert iw.on_timestamp(3, 35, now=1.0) is True and iw.current == 30


def test_restore_none_is_minus_infinity():
    iw = InputWatermark(channels=[1])
    iw.on_watermark(1, 3)
    iw.restore(None)
    assert iw.current == NEG_INF
    assert iw.on_watermark(1, 1) is True and iw.current == 1


# -- against a model on random inputs -------------------------------------------------------------

@pytest.mark.parametrize("seed", range(6))
def test_random_against_model(seed):
    rnd = random.Random(seed)
    inband = list(range(rnd.randint(1, 4)))
    derived = [f"d{i}" for i in range(rnd.randint(0, 3))]
    lag, idle_secs = rnd.choice([0.0, 1.5]), rnd.choice([0.0, 3.0])
    iw = InputWatermark(inband, derived, lag=lag, idle_secs=idle_secs)
    best = {c: NEG_INF for c in inband + derived}
    idle, last, current, now = set(), {}, NEG_INF, 0.0
    first_check = None
    for _ in range(400):
        now += rnd.choice([0.0, 0.5, 1.0, 2.5])
        r = rnd.random()
        before = current
        if r < 0.45 and inband:
            c = rnd.choice(inband)
            w = None if rnd.random() < 0.15 else (POS_INF if rnd.random() < 0.02 else rnd.uniform(-5, 5) + now)
            got = iw.on_watermark(c, w)
            if w is None:
                idle.add(c)
            else:
                idle.discard(c)
                best[c] = max(best[c], w)
        elif r < 0.85 and derived:
            c = rnd.choice(derived)
            ts = now + rnd.uniform(-5, 5)
            got = iw.on_timestamp(c, ts, now)
            last[c] = now
            idle.discard(c)
            best[c] = max(best[c], ts - lag)
        else:
            got = iw.check_idle(now)
            if idle_secs and derived:
                if first_check is None:
                    first_check = now
                for c in derived:
                    if now - last.get(c, first_check) >= idle_secs:
                        idle.add(c)
        live = [best[c] for c in best if c not in idle]
        if live and min(live) > current:
            current = min(live)
        assert iw.current == current
        assert got == (current > before)
        assert iw.idle == idle
        assert iw.all_idle == (bool(idle) and all(c in idle or best[c] == POS_INF for c in best))


# -- sources and components -------------------------------------------------------------------

def test_source_watermark_is_max_minus_lag():
    s = SourceWatermark(lag=1.5)
    assert s.watermark == NEG_INF
    for ts in [10, 4, 12, 11]:
        s.observe(ts)
    assert s.max_ts == 12 and s.watermark == 10.5


class _TimedSpout(Spout):
    outputs = ["ts", "v"]
    event_time = EventTime("ts", lag=0.5)


class _PlainSpout(Spout):
    outputs = ["ts", "v"]


class _Pass(Bolt):
    outputs = ["ts", "v"]


class _Win(AggregatingWindowBolt):
    outputs = ["k", "s", "e", "r"]
    window = Window.tumbling(1.0)
    timestamp_field = "ts"


def test_watermark_components():
    b = TopologyBuilder("wm")
    timed = b.add_spout("timed", _TimedSpout)
    plain = b.add_spout("plain", _PlainSpout)
    a = b.add_bolt("a", _Pass, inputs={timed: Grouping.SHUFFLE})
    c = b.add_bolt("c", _Pass, inputs={plain: Grouping.SHUFFLE})
    w = b.add_bolt("w", _Win, inputs={plain: Grouping.SHUFFLE})
    b.add_bolt("after_w", _Pass, inputs={w: Grouping.SHUFFLE})
    b.add_bolt("after_a", _Pass, inputs={a: Grouping.SHUFFLE, c: Grouping.SHUFFLE})
    b.add_bolt("after_c", _Pass, inputs={c: Grouping.SHUFFLE})
    tdef = b.build()
    assert watermark_components(tdef) == {"timed", "a", "w", "after_w", "after_a"}


def test_a_garbled_watermark_is_ignored_not_a_crash():
    iw = InputWatermark(channels=[1, 2])
    iw.on_watermark(1, 5)
    for junk in ("10", [3], {"a": 1}, float("nan"), True):
        assert iw.on_watermark(2, junk) is False
    assert iw.on_watermark(2, 7) is True and iw.current == 5

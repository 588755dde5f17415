"""Tests that need no server: the HLC port and validate_write."""

from __future__ import annotations

import pytest

from holdfast import Clock, ClockOffsetError, StaleTokenError, Timestamp, validate_write


def test_now_strictly_increases_when_the_clock_stalls_or_goes_back() -> None:
    pt = [1_000]
    c = Clock(physical=lambda: pt[0])
    a, b = c.now(), c.now()
    pt[0] = 500
    d = c.now()
    assert a < b < d
    pt[0] = 2_000
    assert c.now() == Timestamp(2_000, 0)


def test_update_moves_past_the_remote_stamp() -> None:
    c = Clock(physical=lambda: 1_000, max_offset=1e-3)
    c.now()
    remote = Timestamp(1_500, 7)
    assert c.update(remote) == Timestamp(1_500, 8)
    assert c.update(Timestamp(1_500, 3)) == Timestamp(1_500, 9)
    assert c.update(Timestamp()) == Timestamp(1_500, 10)


def test_update_refuses_beyond_max_offset_without_advancing() -> None:
    c = Clock(physical=lambda: 1_000_000_000, max_offset=0.5)
    before = c.now()
    with pytest.raises(ClockOffsetError):
        c.update(Timestamp(1_000_000_000 + 600_000_000, 0))
    assert c.last() == before
    assert c.observe(Timestamp(5_000_000_000, 0)) > Timestamp(5_000_000_000, 0)


def test_next_carries_a_full_logical_counter() -> None:
    assert Timestamp(5, 0xFFFF_FFFF).next() == Timestamp(6, 0)


def test_wire_round_trip() -> None:
    assert Timestamp().to_proto() is None
    t = Timestamp(123, 4)
    assert Timestamp.from_proto(t.to_proto()) == t


def test_validate_write() -> None:
    assert validate_write(5, 5) == 5
    assert validate_write(9, 5) == 9
    with pytest.raises(StaleTokenError):
        validate_write(4, 5)

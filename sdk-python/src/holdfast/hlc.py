"""Hybrid Logical Clock (Kulkarni et al., "Logical Physical Clocks", 2014).

A port of holdfast's Go package ``proto/hlc`` so that every SDK orders
events the same way. A stamp never falls behind the physical clock of the
node that issued it, and a node that receives a stamp moves its own clock past
it, so "happened before" implies "smaller stamp". The client ticks its clock
for every request it sends (``client_stamp``) and merges every
``server_stamp`` it receives.

Merging a remote stamp can move a clock any distance forward, so
:meth:`Clock.update` refuses a stamp whose wall time is more than the max
offset ahead of the local physical clock, without advancing the clock (as
CockroachDB does; its default max offset, 500 ms, is ours).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from ._timestamp import ZERO, Timestamp
from .errors import ClockOffsetError

DEFAULT_MAX_OFFSET = 0.5
"""How far ahead of the local clock a remote stamp may be, in seconds."""

__all__ = ["DEFAULT_MAX_OFFSET", "ZERO", "Clock", "Timestamp"]


class Clock:
    """A Hybrid Logical Clock. Safe for use from several threads."""

    def __init__(
        self,
        physical: Callable[[], int] | None = None,
        max_offset: float = DEFAULT_MAX_OFFSET,
    ) -> None:
        """
        Args:
            physical: nanoseconds since the Unix epoch (default time.time_ns).
            max_offset: seconds a remote stamp may be ahead of the physical
                clock (negative disables the check).
        """
        self._physical = physical or time.time_ns
        self._max_offset_ns = -1 if max_offset < 0 else round(max_offset * 1e9)
        self._lock = threading.Lock()
        self._last = ZERO

    @property
    def max_offset(self) -> float:
        """Seconds a remote stamp may be ahead of the physical clock (-1: no check)."""
        return -1.0 if self._max_offset_ns < 0 else self._max_offset_ns / 1e9

    def now(self) -> Timestamp:
        """Ticks the clock for a local or send event."""
        pt = self._physical()
        with self._lock:
            if pt > self._last.wall_time_ns:
                self._last = Timestamp(pt, 0)
            else:
                self._last = self._last.next()
            return self._last

    def last(self) -> Timestamp:
        """The latest reading, without ticking."""
        with self._lock:
            return self._last

    def update(self, remote: Timestamp) -> Timestamp:
        """Merges a remote stamp (a receive event).

        Returns the new reading, strictly after both remote and every earlier
        reading. A zero stamp only ticks the clock. Raises ClockOffsetError,
        leaving the clock unchanged, when remote is more than the max offset
        ahead of the physical clock.
        """
        if remote.is_zero():
            return self.now()
        pt = self._physical()
        ahead = remote.wall_time_ns - pt
        if self._max_offset_ns >= 0 and ahead > self._max_offset_ns:
            raise ClockOffsetError(
                f"hlc: stamp {remote} is {ahead}ns ahead of the local clock, "
                f"more than the max offset {self.max_offset}s"
            )
        return self._merge(pt, remote)

    def observe(self, remote: Timestamp) -> Timestamp:
        """Merges a stamp from a trusted source without the max-offset check."""
        return self._merge(self._physical(), remote)

    def _merge(self, pt: int, remote: Timestamp) -> Timestamp:
        with self._lock:
            last = self._last
            wall = max(last.wall_time_ns, remote.wall_time_ns, pt)
            if wall == last.wall_time_ns and wall == remote.wall_time_ns:
                nxt = max(last, remote).next()
            elif wall == last.wall_time_ns:
                nxt = last.next()
            elif wall == remote.wall_time_ns:
                nxt = remote.next()
            else:
                nxt = Timestamp(wall, 0)
            self._last = nxt
            return nxt

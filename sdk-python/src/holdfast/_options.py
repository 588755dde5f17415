"""Client options that are values: the backoff and the expiry margin."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from . import _durations
from ._durations import Duration
from .errors import InvalidArgumentError


@dataclass(frozen=True, init=False)
class Backoff:
    """Exponential backoff with equal jitter: before retry n (0-based) the SDK
    sleeps a uniformly random duration in [d/2, d], where
    d = min(initial x multiplier^n, cap). Half of each delay is kept so
    retries never bunch at zero. It spaces retries of ``unavailable``
    answers, renewal attempts after a failed renewal, and release attempts;
    every such loop is also bounded by its own budget. Durations are seconds
    or timedelta; the attributes are seconds."""

    initial: float
    multiplier: float
    cap: float

    def __init__(self, initial: Duration = 0.05, multiplier: float = 2.0, cap: Duration = 1.0) -> None:
        if isinstance(multiplier, bool) or not isinstance(multiplier, (int, float)) or not 1 <= multiplier < math.inf:
            raise InvalidArgumentError(f"holdfast: backoff.multiplier: {multiplier!r} must be a finite number >= 1")
        object.__setattr__(self, "initial", _durations.positive("backoff.initial", initial))
        object.__setattr__(self, "multiplier", float(multiplier))
        object.__setattr__(self, "cap", _durations.positive("backoff.cap", cap))

    def ceiling(self, attempt: int) -> float:
        """d for retry number ``attempt``: the upper end of its delay."""
        d = self.initial
        for _ in range(attempt):
            if d >= self.cap:
                break
            d *= self.multiplier
        return min(d, self.cap)

    def delay(self, attempt: int) -> float:
        """The pause before retry number ``attempt`` (0-based), in seconds."""
        d = self.ceiling(attempt)
        return d / 2 + random.random() * d / 2


@dataclass(frozen=True, init=False)
class ExpiryMargin:
    """How much earlier than TTL after the send the guard counts its lease as
    ended: ``ttl x drift_factor + fixed``. The drift part covers a client
    clock that runs slow against the store's over a long lease, the fixed
    part a timer that fires a little late; the guard is therefore poisoned at
    least the margin before the store could grant the key to anyone else.
    Defaults: 1 % of the TTL plus 20 ms."""

    drift_factor: float
    fixed: float
    """Seconds."""

    def __init__(self, drift_factor: float = 0.01, fixed: Duration = 0.02) -> None:
        if isinstance(drift_factor, bool) or not isinstance(drift_factor, (int, float)) or not 0 <= drift_factor < 1:
            raise InvalidArgumentError(f"holdfast: expiry_margin.drift_factor: {drift_factor!r} must be in [0, 1)")
        object.__setattr__(self, "drift_factor", float(drift_factor))
        object.__setattr__(self, "fixed", _durations.non_negative("expiry_margin.fixed", fixed))

    def of(self, ttl: float) -> float:
        """The margin for a lease of ``ttl`` seconds."""
        return ttl * self.drift_factor + self.fixed

    def check(self, ttl: float) -> None:
        """Refuses a margin that leaves the watchdog no time to renew (the
        first renewal is due at TTL/3)."""
        if self.of(ttl) >= ttl * 2 / 3:
            raise InvalidArgumentError(
                f"holdfast: expiry_margin: {_durations.fmt(self.of(ttl))} for ttl {_durations.fmt(ttl)} "
                f"leaves the watchdog no time to renew (it must be below 2/3 of the TTL)"
            )

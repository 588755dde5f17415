"""Client options that are values: the backoff and the expiry margin."""

from __future__ import annotations

import random
from dataclasses import dataclass

from . import _durations
from ._durations import Duration
from .errors import InvalidArgumentError


@dataclass(frozen=True)
class Backoff:
    """Exponential backoff with equal jitter: before retry n (0-based) the SDK
    sleeps a uniformly random duration in [d/2, d], where
    d = min(initial × multiplierⁿ, cap). Half of each delay is kept so retries
    never bunch at zero. It spaces retries of ``unavailable`` answers,
    renewal attempts after a failed renewal, and release attempts; every such
    loop is also bounded by its own budget. Durations in seconds or
    timedelta."""

    initial: Duration = 0.05
    multiplier: float = 2.0
    cap: Duration = 1.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "initial", _durations.positive("backoff.initial", self.initial))
        object.__setattr__(self, "cap", _durations.positive("backoff.cap", self.cap))
        if isinstance(self.multiplier, bool) or not isinstance(self.multiplier, (int, float)) or not 1 <= self.multiplier < float("inf"):
            raise InvalidArgumentError(f"holdfast: backoff.multiplier: {self.multiplier!r} must be a finite number >= 1")

    def ceiling(self, attempt: int) -> float:
        """d for retry number ``attempt``: the upper end of its delay."""
        d = float(self.initial)
        for _ in range(attempt):
            if d >= float(self.cap):
                break
            d *= self.multiplier
        return min(d, float(self.cap))

    def delay(self, attempt: int) -> float:
        """The pause before retry number ``attempt`` (0-based), in seconds."""
        d = self.ceiling(attempt)
        return d / 2 + random.random() * d / 2


@dataclass(frozen=True)
class ExpiryMargin:
    """How much earlier than TTL after the send the guard counts its lease as
    ended: ``ttl × drift_factor + fixed``. The drift part covers a client
    clock that runs slow against the store's over a long lease, the fixed
    part a timer that fires a little late; the guard is therefore poisoned at
    least the margin before the store could grant the key to anyone else.
    Defaults: 1 % of the TTL plus 20 ms."""

    drift_factor: float = 0.01
    fixed: Duration = 0.02

    def __post_init__(self) -> None:
        if isinstance(self.drift_factor, bool) or not isinstance(self.drift_factor, (int, float)) or not 0 <= self.drift_factor < 1:
            raise InvalidArgumentError(f"holdfast: expiry_margin.drift_factor: {self.drift_factor!r} must be in [0, 1)")
        object.__setattr__(self, "fixed", _durations.non_negative("expiry_margin.fixed", self.fixed))

    def of(self, ttl: float) -> float:
        """The margin for a lease of ``ttl`` seconds."""
        return ttl * self.drift_factor + float(self.fixed)

    def check(self, ttl: float) -> None:
        """Refuses a margin that leaves the watchdog no time to renew (the
        first renewal is due at TTL/3)."""
        if self.of(ttl) >= ttl * 2 / 3:
            raise InvalidArgumentError(
                f"holdfast: expiry_margin: {_durations.fmt(self.of(ttl))} for ttl {_durations.fmt(ttl)} "
                f"leaves the watchdog no time to renew (it must be below 2/3 of the TTL)"
            )

"""Durations as the SDK takes them: seconds (int or float) or a
datetime.timedelta, checked before anything is sent."""

from __future__ import annotations

import datetime
import math

from .errors import InvalidArgumentError

Duration = int | float | datetime.timedelta
"""Seconds as an int or float, or a datetime.timedelta."""

MIN_TTL = 0.1
"""The shortest lease the SDK asks for: the watchdog renews at TTL/3."""


def fmt(seconds: float) -> str:
    """A duration for messages: ``3ms``, ``1.5s``, ``inf``."""
    if math.isinf(seconds):
        return "inf" if seconds > 0 else "-inf"
    if seconds != 0 and abs(seconds) < 1:
        return f"{seconds * 1000:g}ms"
    return f"{seconds:g}s"


def seconds(field: str, value: object) -> float:
    """The value in seconds; anything but a number or a timedelta (a bool
    included) is an InvalidArgumentError naming the field."""
    if isinstance(value, datetime.timedelta):
        return value.total_seconds()
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidArgumentError(
            f"holdfast: {field}: {value!r} is not a duration: give seconds (int or float) or a datetime.timedelta"
        )
    s = float(value)
    if math.isnan(s):
        raise InvalidArgumentError(f"holdfast: {field}: NaN is not a duration")
    return s


def ttl(value: object, field: str = "ttl") -> float:
    """A lease length: finite and at least MIN_TTL. The upper bound is the
    server's (its --max-ttl and the backend's), checked there."""
    s = seconds(field, value)
    if math.isinf(s):
        raise InvalidArgumentError(f"holdfast: {field}: {fmt(s)} is not a finite duration")
    if s < MIN_TTL:
        raise InvalidArgumentError(
            f"holdfast: {field}: {fmt(s)} is below the SDK minimum {fmt(MIN_TTL)} (Python durations are seconds)"
        )
    return s


def wait(value: object) -> float | None:
    """How long an acquire queues: None (until acquired or cancelled), 0
    (one attempt) or a finite positive duration."""
    if value is None:
        return None
    s = seconds("wait", value)
    if s < 0:
        raise InvalidArgumentError(
            f"holdfast: wait: {fmt(s)} is negative: give 0 for one attempt, or None to queue until acquired"
        )
    if math.isinf(s):
        raise InvalidArgumentError(
            "holdfast: wait: inf is not a finite duration: give None to queue until acquired or cancelled"
        )
    return s


def positive(field: str, value: object) -> float:
    """A finite duration above zero (budgets, timeouts, run times)."""
    s = seconds(field, value)
    if not 0 < s < math.inf:
        raise InvalidArgumentError(f"holdfast: {field}: {fmt(s)} must be a finite duration above 0")
    return s


def non_negative(field: str, value: object) -> float:
    """A finite duration of zero or more."""
    s = seconds(field, value)
    if not 0 <= s < math.inf:
        raise InvalidArgumentError(f"holdfast: {field}: {fmt(s)} must be a finite duration of 0 or more")
    return s

"""Lease events: what a guard's watchdog and unlock report, to the client's
listener (``on_lease_event=``) and to ``logging.getLogger("holdfast")``.

| event | when | log level |
|---|---|---|
| ``renewed`` | a renewal succeeded | DEBUG |
| ``renewal_failed`` | a renewal attempt failed and will be retried | WARNING |
| ``lost`` | the guard was poisoned | WARNING |
| ``released`` | unlock was confirmed by the server | DEBUG |

With no logging configured, Python prints warnings and errors to stderr and
drops the rest, so a struggling or lost lease shows and a healthy one stays
quiet. A listener that raises is logged and never stops the watchdog.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from ._durations import fmt
from .errors import HoldfastError, LeaseLostReason

logger = logging.getLogger("holdfast")
"""The SDK's logger."""

LeaseEventType = Literal["renewed", "renewal_failed", "lost", "released"]


@dataclass(frozen=True)
class LeaseEvent:
    """One event of a guard's lease."""

    type: LeaseEventType
    key: str
    fencing_token: int
    ttl: float
    """The lease's TTL in seconds."""
    renewals: int
    """Successful renewals so far."""
    latency: float | None = None
    """``renewed``: seconds from sending the renewal to its answer."""
    error: HoldfastError | None = None
    """``renewal_failed``: the attempt's error; ``lost``: the loss itself
    (a LeaseLostError, whose ``__cause__`` is the last renewal error)."""
    remaining: float | None = None
    """``renewal_failed``: seconds left to the local expiry."""
    reason: LeaseLostReason | None = None
    """``lost``: why."""
    keys: tuple[str, ...] | None = None
    """Every key of a multi-key lease (``key`` and ``fencing_token`` are then
    its first key's); None for one key."""


LeaseEventListener = Callable[[LeaseEvent], None]


def emit(listener: LeaseEventListener | None, event: LeaseEvent) -> None:
    """Logs the event and hands it to the listener, which must not break the
    caller (the watchdog): whatever it raises is logged."""
    _log(event)
    if listener is None:
        return
    try:
        listener(event)
    except Exception:
        logger.exception("holdfast: the lease event listener raised on %s of %r", event.type, event.key)


def _log(ev: LeaseEvent) -> None:
    extra = {"holdfast_event": ev}
    if ev.type == "renewed":
        if logger.isEnabledFor(logging.DEBUG):
            logger.debug(
                "holdfast: lease on %r (fencing token %d) renewed: %d renewals, ttl %s, %s",
                ev.key,
                ev.fencing_token,
                ev.renewals,
                fmt(ev.ttl),
                fmt(ev.latency or 0.0),
                extra=extra,
            )
    elif ev.type == "renewal_failed":
        logger.warning(
            "holdfast: renewing the lease on %r (fencing token %d) failed, retrying with %s left: %s",
            ev.key,
            ev.fencing_token,
            fmt(ev.remaining or 0.0),
            ev.error,
            extra=extra,
        )
    elif ev.type == "lost":
        cause = ev.error.__cause__ if ev.error is not None else None
        logger.warning(
            "holdfast: lease on %r (fencing token %d) lost (%s)%s",
            ev.key,
            ev.fencing_token,
            ev.reason,
            f": {cause}" if cause else "",
            extra=extra,
        )
    else:
        logger.debug("holdfast: lease on %r (fencing token %d) released", ev.key, ev.fencing_token, extra=extra)

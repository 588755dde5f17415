"""The check a fenced resource makes before accepting a write."""

from __future__ import annotations

from .errors import StaleTokenError


def validate_write(token: int, watermark: int) -> int:
    """Accepts a write fenced with ``token`` if it is not older than
    ``watermark`` (the highest token the resource has accepted).

    Returns the new watermark, ``max(token, watermark)`` (that is, token);
    store it in the same atomic step as the write. Raises StaleTokenError
    (carrying both) for a stale token. The resource, not the lock, is where
    safety is decided: a holder that overran its lease still carries its old
    token, and this check refuses it once the next holder (with a larger
    token) has written.
    """
    if token < watermark:
        raise StaleTokenError(token, watermark)
    return max(token, watermark)

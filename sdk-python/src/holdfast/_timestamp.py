"""The HLC timestamp: a value type, apart from the clock that issues it, so
that plain result types can carry stamps without importing the clock."""

from __future__ import annotations

from dataclasses import dataclass

from .lock.v1 import lock_pb2

_MAX_UINT32 = 0xFFFF_FFFF


@dataclass(frozen=True, order=True)
class Timestamp:
    """One HLC reading, ordered by wall time then logical counter.

    The zero stamp means "no stamp" and is before every other stamp.
    """

    wall_time_ns: int = 0
    """Nanoseconds since the Unix epoch."""
    logical: int = 0
    """Orders events within one wall_time_ns (uint32)."""

    def __post_init__(self) -> None:
        if not 0 <= self.logical <= _MAX_UINT32:
            raise ValueError(f"hlc: logical {self.logical} is not a uint32")

    def is_zero(self) -> bool:
        """Whether this is the zero stamp ("no stamp")."""
        return self.wall_time_ns == 0 and self.logical == 0

    def next(self) -> Timestamp:
        """The smallest stamp strictly after this one."""
        if self.logical == _MAX_UINT32:
            return Timestamp(self.wall_time_ns + 1, 0)
        return Timestamp(self.wall_time_ns, self.logical + 1)

    def __str__(self) -> str:
        return f"{self.wall_time_ns}.{self.logical}"

    def to_proto(self) -> lock_pb2.HlcTimestamp | None:
        """Wire form; the zero stamp becomes None (an unset field)."""
        if self.is_zero():
            return None
        return lock_pb2.HlcTimestamp(wall_time_ns=self.wall_time_ns, logical=self.logical)

    @staticmethod
    def from_proto(p: lock_pb2.HlcTimestamp | None) -> Timestamp:
        """Converts a wire stamp; None is the zero stamp."""
        if p is None:
            return ZERO
        return Timestamp(p.wall_time_ns, p.logical)


ZERO = Timestamp()
"""The zero stamp: no stamp."""

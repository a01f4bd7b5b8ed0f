"""The emulator's clock: real time plus an offset that tests move forward."""

from __future__ import annotations

import threading
from datetime import datetime, timedelta, timezone


class Clock:
    """A UTC clock that tests control.

    Every state transition of the emulator is computed from this clock, lazily, when a request or a
    state access asks for it: nothing moves in the background.

    :param frozen: when true, time moves only through :meth:`advance` (deterministic tests); when false,
        it follows real time plus the advanced offset.
    :param start: the time a frozen clock starts at (default: the real time at construction). Ignored by
        a running clock.
    """

    def __init__(self, *, frozen: bool = False, start: datetime | None = None) -> None:
        if start is not None and start.tzinfo is None:
            raise ValueError("start must be timezone-aware")
        self.frozen = frozen
        self._start = (start or datetime.now(timezone.utc)).astimezone(timezone.utc)
        self._offset = timedelta()
        self._last = self._start
        self._lock = threading.Lock()

    def now(self) -> datetime:
        """Return the current emulated time (timezone-aware UTC; never earlier than a previous answer)."""
        with self._lock:
            base = self._start if self.frozen else datetime.now(timezone.utc)
            # Never go back, even if the real clock does: the state machine only moves forward.
            self._last = max(self._last, base + self._offset)
            return self._last

    def advance(self, seconds: float) -> datetime:
        """Move the clock forward by ``seconds`` (>= 0) and return the new time.

        :param seconds: how far to move.
        """
        if seconds < 0:
            raise ValueError(f"the clock only moves forward; got seconds={seconds}")
        with self._lock:
            self._offset += timedelta(seconds=seconds)
        return self.now()

    @property
    def offset_seconds(self) -> float:
        """Total seconds added by :meth:`advance`."""
        return self._offset.total_seconds()

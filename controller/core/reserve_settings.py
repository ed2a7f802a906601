"""The reserves' settings and hints, as plain records (Balancer's reserves: controller.core.reserves
decides with them). No numpy and no I/O, so that gleanctl and the config checks can read them."""
from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from enum import Enum
from typing import Any

from gleaner_common.ids import InvalidField, bounded

HOUR = 3600
DAY = 86400
MONTH_DAYS = 30
MIN_SLOT_SECONDS = 60
MAX_HINTS = 100            # hints kept at once (anything an admin can open has a bound)
MAX_COUNT = 1_000_000      # nodes reserved, requests waiting: far past any pool, and within uint32
EPSILON = 1e-9             # demand sampled as 3.0000000001 nodes still needs 3
NO_SLOT = -(2 ** 63)       # a history entry that holds no slot yet (slots before the epoch are < 0)


class ReserveError(ValueError):
    """A setting, hint or sample the reserves refuse, naming the field at fault."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


class PredictiveMode(str, Enum):
    OFF = "off"
    DAY = "day"        # the same time-of-day slot of yesterday
    WEEK = "week"      # ... of each of the last 7 days
    MONTH = "month"    # ... of each of the last 30 days


MODE_DAYS = {PredictiveMode.OFF: 0, PredictiveMode.DAY: 1, PredictiveMode.WEEK: 7,
             PredictiveMode.MONTH: MONTH_DAYS}


# -- settings -------------------------------------------------------------------------------------

@dataclass(frozen=True)
class ReserveSettings:
    static_nodes: int = 0                 # R: whole nodes kept free of backfill
    predictive: PredictiveMode = PredictiveMode.OFF
    slot_seconds: int = 6 * HOUR          # time-of-day slot of the predictive reserve; divides a day
    utc_offset_seconds: int = 0           # slots follow this local time of day
    wait_seconds: float = 0.0             # W: 0 rejects an unplaceable request at once
    lead_seconds: float = 600.0           # a hint (and the next slot) counts this early: drain time
    max_waiting: int = 1000               # requests waiting for room at once
    # True: the reserve's nodes give their running backfill notice (drained: its work is lost).
    # False (soft): they only take no new backfill, and come free as their VMs end or are
    # preempted. While a hint is live (added and not over) the reserve drains as with True, so
    # the hint's nodes are free by its start: an admin asked for them.
    drain: bool = True

    def validate(self) -> ReserveSettings:
        """The settings, or ReserveError naming the first field at fault."""
        for field, (kind, low, high) in NUMBER_RANGES.items():
            (_whole if kind is int else _seconds)(field, getattr(self, field), low, high)
        if not isinstance(self.predictive, PredictiveMode):
            raise ReserveError("predictive", f"must be one of {', '.join(m.value for m in PredictiveMode)}")
        if DAY % self.slot_seconds:
            raise ReserveError("slot_seconds", f"must divide a day ({DAY} s) evenly, not {self.slot_seconds}")
        if not isinstance(self.drain, bool):
            raise ReserveError("drain", f"must be true or false, not {self.drain!r}")
        return self

    def as_dict(self) -> dict[str, Any]:
        """Plain values (the mode by name), for JSON, TOML, the store and protobuf."""
        return {**asdict(self), "predictive": self.predictive.value}

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> ReserveSettings:
        """Settings from plain values, validated; unknown keys are an error, not ignored."""
        known = set(cls.__dataclass_fields__)
        unknown = sorted(set(values) - known)
        if unknown:
            raise ReserveError(unknown[0], f"unknown reserve setting (known: {', '.join(sorted(known))})")
        fields = dict(values)
        if "predictive" in fields:
            try:
                fields["predictive"] = PredictiveMode(fields["predictive"])
            except ValueError:
                raise ReserveError("predictive", f"must be one of {', '.join(m.value for m in PredictiveMode)}, "
                                                 f"not {fields['predictive']!r}") from None
        return cls(**fields).validate()


# Every number among the settings: (type, low, high), inclusive. Seconds are finite (NaN and the
# infinities are within no range).
NUMBER_RANGES: dict[str, tuple[type, float, float]] = {
    "static_nodes": (int, 0, MAX_COUNT),
    "slot_seconds": (int, MIN_SLOT_SECONDS, DAY),        # and divides a day
    "utc_offset_seconds": (int, -DAY // 2, DAY // 2),    # within 12 hours of UTC
    "wait_seconds": (float, 0, DAY),
    "lead_seconds": (float, 0, DAY),
    "max_waiting": (int, 0, MAX_COUNT),
}


def _whole(field: str, value: Any, least: int, most: int = MAX_COUNT) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ReserveError(field, f"must be a whole number within {least}..{most}, not {value!r}")
    _within(field, value, least, most, "")


def _seconds(field: str, value: Any, least: float, most: float) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ReserveError(field, f"must be a number of seconds within {least}..{most}, not {value!r}")
    _within(field, value, least, most, " s")


def _within(field: str, value: float, least: float, most: float, unit: str) -> None:
    try:
        bounded(value, least, most, field)   # the shared rule: NaN and the infinities are outside
    except InvalidField:
        raise ReserveError(field, f"must be within {least}..{most}{unit} (a finite number), "   # the bounds are whole
                                  f"not {value!r}") from None


@dataclass(frozen=True)
class Hint:
    """N nodes will be needed from start_at until until (seconds since the epoch)."""
    nodes: int
    start_at: float
    until: float
    label: str = ""            # who or what it is for, for the audit log

    def counts_at(self, now: float, lead_seconds: float) -> bool:
        """Whether the hint holds nodes at `now`: from start_at - lead (to drain) until `until`."""
        return self.start_at - lead_seconds <= now < self.until


def hint_in_hours(nodes: int, in_hours: float, for_hours: float, now: float, label: str = "") -> Hint:
    """The admin's "N nodes in H hours for D hours", as a Hint (checked: see validate_hint)."""
    for field, value in (("in_hours", in_hours), ("for_hours", for_hours)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise ReserveError(field, f"must be a finite number of hours, not {value!r}")
    if in_hours < 0:
        raise ReserveError("in_hours", f"must not be negative, not {in_hours:g}")
    if for_hours <= 0:
        raise ReserveError("for_hours", f"the hint must last more than 0 hours, not {for_hours:g}")
    start_at = now + in_hours * HOUR
    return Hint(nodes, start_at, start_at + for_hours * HOUR, label)

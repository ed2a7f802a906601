"""The checks at leases' deadlines (DeadlineChecks): the engine (controller/sim/engine.py) checks
each deadline a Write sets, and keeps those checks off its event heap until the bucket of time
they fall in comes, dropping the ones that can no longer do anything.
"""
from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Mapping

from ..core.records import Lease

DEADLINE_BUCKET_S = 30.0


class DeadlineChecks:
    """The check at each deadline a Write sets (Simulation._deadline: the ledger ticks if the lease
    is still due then), kept out of the event heap until the bucket of time its deadline falls in
    comes, and dropped then if it can no longer do anything: its lease is gone, or has no deadline
    due by then. Most are (a launch or stop is answered seconds after its Write, its deadline is a
    minute or more away), and they were a third of a run's events, each pushed on the heap and
    popped for nothing.

    Exactly the checks that would have ticked still do, in their place: a check keeps the
    sequence number it was given, and one dropped joins the heap after all if a Write gives its
    lease a deadline at or before it while it is still ahead (the only way it could become due).
    ``settle`` counts the dropped checks as the events they were (the summary's sim_events)."""

    def __init__(self, heap: list, check: Callable[[str], None], bucket_seconds: float = DEADLINE_BUCKET_S) -> None:
        self.heap = heap
        self.check = check
        self.width = bucket_seconds
        self.waiting: dict[int, list[tuple[float, int, str]]] = {}   # bucket -> its checks not yet on the heap
        self.joined = -1   # every bucket up to this one has joined the heap
        # lease -> (deadline, sequence) of its checks the last bucket to join dropped: they may be
        # revived until the clock passes them
        self.dropped: dict[str, list[tuple[float, int]]] = {}
        self.dropped_count = 0   # the checks in `dropped`

    @property
    def next_join(self) -> float:
        """When the next bucket starts: its checks join the heap before any event from then on."""
        return (self.joined + 1) * self.width

    def add(self, deadline: float, seq: int, lease_id: str, running: tuple[float, int]) -> None:
        """A check at `deadline` for the lease whose deadline it is; `running`: (time, sequence) of
        the event being run (a dropped check behind it is past)."""
        if self.dropped:
            self._revive(lease_id, deadline, running)
        if deadline == math.inf:
            return   # never due (on the heap it was never reached either)
        bucket = int(deadline // self.width)
        if bucket <= self.joined:
            heapq.heappush(self.heap, (deadline, seq, self.check, lease_id))
        else:
            self.waiting.setdefault(bucket, []).append((deadline, seq, lease_id))

    def _revive(self, lease_id: str, deadline: float, running: tuple[float, int]) -> None:
        checks = self.dropped.get(lease_id)
        if not checks:
            return
        kept = []
        for at, seq in checks:
            if deadline <= at and (at, seq) > running:
                heapq.heappush(self.heap, (at, seq, self.check, lease_id))
                self.dropped_count -= 1
            else:
                kept.append((at, seq))
        self.dropped[lease_id] = kept

    def join_next(self, leases: Mapping[str, Lease], end: float) -> int:
        """The next bucket's checks join the heap, but those whose lease (as `leases` books it now)
        is gone or has no deadline due by then. Returns the checks up to `end` the previous bucket
        dropped for good (the clock is past them)."""
        settled = self.settle(end)
        self.joined += 1
        dropped: dict[str, list[tuple[float, int]]] = {}
        for at, seq, lease_id in self.waiting.pop(self.joined, ()):
            lease = leases.get(lease_id)
            if lease is not None and lease.deadline is not None and lease.deadline <= at:
                heapq.heappush(self.heap, (at, seq, self.check, lease_id))
            else:
                dropped.setdefault(lease_id, []).append((at, seq))
                self.dropped_count += 1
        self.dropped = dropped
        return settled

    def settle(self, end: float, before: tuple[float, int] | None = None) -> int:
        """Forget the dropped checks: how many were due up to `end` (and, if given, before the
        event at (time, sequence) `before`), the events they would have been."""
        if before is None and self.next_join <= end:
            count = self.dropped_count   # all of them: their bucket ends before `end`
        else:
            count = sum(1 for checks in self.dropped.values() for at, seq in checks
                        if at <= end and (before is None or (at, seq) < before))
        self.dropped, self.dropped_count = {}, 0
        return count

"""Each node's budget for reports: one agent certificate, however it behaves, costs the
controller a bounded amount of work and never delays another node's reports or an admin's call.

A node's reports are admitted by two token buckets, one counting reports and one counting their
bytes (Kubernetes' API priority and fairness bounds each flow the same way). A report over budget
is held back before it is checked or reaches the pool lock, and counted: its stream is not read
until the budget has room, so the sender is paced by HTTP/2 flow control and its flood costs the
controller nothing. A stream that keeps sending over budget (`strikes` reports in a row) is
ended with RESOURCE_EXHAUSTED, and the node may open no new report stream for
`penalty_seconds` (a stream opened meanwhile is held until then, and refused). What a report may make the books do (adoptions) is
bounded in the books themselves (LedgerSettings.adoptions_per_report, adoptions_per_hour).

Pure over a clock: the service passes time.monotonic(), tests their own.
"""
from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

from .core.bucket import Bucket


@dataclass(frozen=True)
class IntakeSettings:
    reports_per_minute: float = 240.0  # sustained, per node: an agent reports every 2 s by default (30)
    report_burst: int = 20             # reports a node may send at once (a reconnect, a restart)
    report_mib_per_minute: float = 8.0   # bytes, per node: a report of 4,096 VMs is about 0.6 MiB, of 100 VMs 15 KiB
    strikes: int = 20                  # reports over budget in a row: the stream is ended
    penalty_seconds: float = 10.0      # ... and the node opens no report stream for this long


class ReportRefused(Exception):
    """The node is over its budget: its stream is ended, or may not be opened yet."""

    def __init__(self, node_id: str, message: str, retry_after: float = 0.0) -> None:
        super().__init__(message)
        self.node_id = node_id
        self.retry_after = retry_after


@dataclass
class NodeBudget:
    reports: Bucket
    bytes: Bucket
    over_budget: int = 0        # reports held back over budget, since the controller started
    streams_ended: int = 0
    penalty_until: float = 0.0
    said_at: float = -1e18      # when the last over-budget line was logged


class ReportIntake:
    """The budgets of every node that reported (bounded: the least recently seen go first; a
    node forgotten starts again with a full budget, which is what a new node gets anyway)."""

    MAX_NODES = 65_536

    def __init__(self, settings: IntakeSettings = IntakeSettings()) -> None:
        self.settings = settings
        self._nodes: OrderedDict[str, NodeBudget] = OrderedDict()
        self._lock = threading.Lock()

    def _budget(self, node_id: str, now: float) -> NodeBudget:
        budget = self._nodes.get(node_id)
        if budget is None:
            s = self.settings
            per_second = s.report_mib_per_minute * 2**20 / 60
            budget = self._nodes[node_id] = NodeBudget(Bucket(s.reports_per_minute / 60, s.report_burst, now),
                                                       Bucket(per_second, max(per_second * 15, 4 * 2**20), now))
            while len(self._nodes) > self.MAX_NODES:
                self._nodes.popitem(last=False)
        else:
            self._nodes.move_to_end(node_id)
        return budget

    def open_stream(self, node_id: str, now: float) -> "ReportStream":
        """A new report stream of `node_id`; refused while the node sits out a penalty."""
        with self._lock:
            budget = self._budget(node_id, now)
            if now < budget.penalty_until:
                raise ReportRefused(node_id, f"node {node_id} broke its report budget; it may report again in "
                                    f"{budget.penalty_until - now:.0f} s", budget.penalty_until - now)
        return ReportStream(self)

    def wait(self, node_id: str, size: int, now: float) -> float:
        """Seconds until this report (of `size` bytes) is within the node's budget; 0: it is, and
        it is taken from the budget."""
        with self._lock:
            budget = self._budget(node_id, now)
            wait = max(budget.reports.wait(1, now), budget.bytes.wait(size, now))
            if wait == 0:
                budget.reports.take(1, now)
                budget.bytes.take(size, now)
            return wait

    def count_over(self, node_id: str, now: float) -> None:
        with self._lock:
            self._budget(node_id, now).over_budget += 1

    def end_stream(self, node_id: str, now: float) -> None:
        with self._lock:
            budget = self._budget(node_id, now)
            budget.streams_ended += 1
            budget.penalty_until = now + self.settings.penalty_seconds

    def due_to_say(self, node_id: str, now: float, every: float = 60.0) -> int:
        """The node's over-budget count if a line about it is due (at most one a minute), else 0."""
        with self._lock:
            budget = self._budget(node_id, now)
            if now - budget.said_at < every:
                return 0
            budget.said_at = now
            return budget.over_budget

    def counts(self) -> dict[str, tuple[int, int]]:
        """node -> (reports held back over budget, streams ended), for nodes that broke their budget."""
        with self._lock:
            return {node: (b.over_budget, b.streams_ended) for node, b in self._nodes.items() if b.over_budget}


class ReportStream:
    """One report stream's view of its node's budget. A report over budget is held back (the
    stream is not read meanwhile, so HTTP/2 flow control stops the sender at no cost to us) until
    the budget has room: a stream is paced to its budget, and nothing an agent says is lost. A
    stream whose every report had to wait, `strikes` in a row, is ended. Strikes are per stream,
    so an honest stream of the same node (after a reconnect) is not ended for another's flood."""

    def __init__(self, intake: ReportIntake) -> None:
        self.intake = intake
        self.strikes = 0
        self._held = False   # the report in hand already had to wait

    def admit(self, node_id: str, size: int, now: float) -> float:
        """0: take this report now. Else the seconds to wait before asking again.
        ReportRefused: end the stream."""
        wait = self.intake.wait(node_id, size, now)
        if wait == 0:
            if not self._held:
                self.strikes = 0
            self._held = False
            return 0.0
        if not self._held:
            self._held = True
            self.strikes += 1
            self.intake.count_over(node_id, now)
            if self.strikes >= self.intake.settings.strikes:
                self.intake.end_stream(node_id, now)
                raise ReportRefused(node_id, f"node {node_id} sent {self.strikes} reports in a row over its budget "
                                    f"({self.intake.settings.reports_per_minute:g} a minute, "
                                    f"{self.intake.settings.report_mib_per_minute:g} MiB a minute)")
        return wait

    def paced(self, reports: Iterable, is_active: Callable[[], bool], on_over: Callable[[str], None],
              clock: Callable[[], float] = time.monotonic) -> Iterator:
        """The stream's reports, each when its node's budget has room for it."""
        for report in reports:
            size = report.ByteSize()
            while (wait := self.admit(report.node_id, size, clock())) > 0:
                on_over(report.node_id)
                if not pause(wait, is_active):
                    return
            yield report


def pause(seconds: float, is_active: Callable[[], bool]) -> bool:
    """Sleep `seconds` unless the call ends first (then False): a held stream never outlives its call."""
    until = time.monotonic() + min(seconds, 60.0)
    while (left := until - time.monotonic()) > 0:
        if not is_active():
            return False
        time.sleep(min(left, 0.2))
    return is_active()

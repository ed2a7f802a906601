"""The kernel of the books: leases, nodes and request records, and the indexes kept with them.

`_book` is the one place a lease enters, changes or leaves the books; the stages above it
(lifecycle, requests, matching, idleness, filling, volunteers) compute what changes and book it
through here. Nothing here reads a clock or does I/O.
"""
from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import islice

from .records import (BLANK_LEASE, HIBERNATED, IN_TRANSIT, TERMINAL, ZERO, BackfillConfig, Lease,
                      LedgerSettings, RequestRecord, Size, VmRole, is_on_demand_vm, reacts, replace)
from .departures import LIFETIMES_KEPT


ROLES = {role.value: role for role in VmRole}   # VmRole(value), without the enum's lookup per call
AUDIT_NODES = 50          # node ids an audit event lists at most


@dataclass
class NodeState:
    node_id: str
    address: str
    capacity: Size
    state: str = "up"                  # up | suspect | down
    last_report: float = 0.0
    fg_samples: deque = field(default_factory=deque)
    foreground_cpu: float = 0.0        # what the agent counts as foreground: on-demand VMs and the host's other load
    on_demand_cpu: float = 0.0         # ... of which its on-demand VMs (the rest is the host's own)
    backfill_cpu: float = 0.0
    signature: tuple = ()
    seen_version: int = -1
    check_until: float = 0.0
    agent_version: str = ""
    images: frozenset[str] = frozenset()
    min_memory_mib: int = 0
    unexplained: Size = ZERO           # VMs the node runs that no live lease explains
    redrive: bool = False              # unfinished leases here wait for this node's next report
    hibernation_budget_mib: int = 0    # disk its agent lets hibernated VMs use (0: it hibernates none)
    stray_saved: int = 0               # saved VMs it reports that no live lease explains (matched until gone)


_SIZES: dict[tuple[int, int], Size] = {}


def shared_size(vcpus: int, memory_mib: int) -> Size:
    """Size(vcpus, memory_mib), one instance per value (a Size is immutable, and a pool's VMs
    come in a few sizes): the books make one per booking."""
    size = _SIZES.get((vcpus, memory_mib))
    if size is None:
        if len(_SIZES) >= 1024:
            _SIZES.clear()
        size = _SIZES[(vcpus, memory_mib)] = Size(vcpus, memory_mib)
    return size


class Books:
    """The kernel: leases, nodes and request records. `_book` alone enters, changes or removes a
    lease (and `_unbook` takes back one the store refused); stages change the books only through
    them, and hear of what the kernel did through its hooks."""

    def _init_books(self, settings: LedgerSettings, backfill: BackfillConfig, new_id: Callable[[str], str]) -> None:
        self.settings = settings
        self._backfill = backfill
        self.new_id = new_id
        self.nodes: dict[str, NodeState] = {}
        self.leases: dict[str, Lease] = {}
        self._timed: dict[str, Lease] = {}   # the leases with a deadline, in the order of self.leases
        self._waiting_on: dict[str, int] = {}   # node -> its leases in state waiting
        self._in_transit: dict[str, int] = {}   # node -> its backfill leases IN_TRANSIT
        self._asleep_on: dict[str, int] = {}    # node -> its hibernated leases
        self._reacting_on: dict[str, int] = {}  # node -> its leases a report showing their VM acts on (REACTS)
        self.by_node: dict[str, dict[str, Lease]] = {}
        # node -> VM name -> its live lease, in by_node's order (a VM name names one live lease: the
        # store refuses a second, and so does adoption): what a report's VMs are matched against
        self._named_on: dict[str, dict[str, Lease]] = {}
        self.requests: dict[str, RequestRecord] = {}   # unresolved, and recently resolved (bounded)
        # Ended leases, bounded: a VM still reported under one of them is not ours to adopt, and
        # still takes room on its node.
        self.retired: OrderedDict[str, tuple[Lease, float]] = OrderedDict()   # vm name -> (its ended lease, when)
        self.retired_ids: OrderedDict[str, str] = OrderedDict()             # lease id -> its node
        self.said: OrderedDict[str, None] = OrderedDict()                   # audit events said once
        # (launched_at, ended_at) of the last on-demand VMs that ended, in the order they ended
        # (not goal sizing's dedicated VMs, whose ends the books choose): the residual's forecast
        # from on-demand departures (departures.py)
        self.on_demand_lives: deque[tuple[float, float]] = deque(maxlen=LIFETIMES_KEPT)
        self.lease_version: dict[str, int] = {}   # node -> changes to its books
        self._books_version = 0                   # counts changes to any node's books

    @property
    def backfill(self) -> BackfillConfig:
        """The backfill settings (a stage that depends on them hears of a change: _backfill_changed)."""
        return self._backfill

    @backfill.setter
    def backfill(self, config: BackfillConfig) -> None:
        self._backfill = config
        self._backfill_changed(config)

    # Hooks: the kernel says what happened, each stage forgets or redoes what it keeps of it (a
    # stage that keeps something extends the hook and calls super()).

    def _backfill_changed(self, config: BackfillConfig) -> None:
        """The backfill settings changed."""

    def _lease_ended(self, lease_id: str) -> None:
        """A lease left the books (ended, or its adoption was refused)."""

    def _view_lease(self, lease: Lease) -> None:
        """A lease was booked: count what it holds in its node's view (views.py)."""

    def _unview_lease(self, node_id: str, lease_id: str) -> None:
        """A lease is about to be re-booked or removed: take it out of its node's view (views.py)."""

    def _views_stale(self, node_id: str) -> None:
        """The node's books changed: its view is rebuilt before the next decision reads it (views.py)."""

    def _add_node(self, node_id: str, address: str, capacity: Size, window: int) -> NodeState:
        """A node reports for the first time."""
        node = self.nodes[node_id] = NodeState(node_id, address, capacity, fg_samples=deque(maxlen=window))
        return node

    def _unbook(self, lease: Lease) -> None:
        """Take back a lease the store refused to keep (an adoption): as if it had never been booked."""
        booked = self.leases.pop(lease.lease_id, None)
        if booked is None:
            return
        if booked.state == "waiting":
            self._waiting_on[booked.node_id] -= 1
        if booked.state == HIBERNATED:
            self._asleep_on[booked.node_id] -= 1
        if reacts(booked):
            self._reacting_on[booked.node_id] -= 1
        self._timed.pop(lease.lease_id, None)
        self.by_node.get(lease.node_id, {}).pop(lease.lease_id, None)
        named = self._named_on.get(lease.node_id)
        if named is not None:
            named.pop(lease.vm_name, None)
        self._unview_lease(lease.node_id, lease.lease_id)
        self._lease_ended(lease.lease_id)
        self._touch(lease.node_id)

    def _book(self, lease: Lease, now: float) -> Lease:
        lease_id, node_id, state = lease.lease_id, lease.node_id, lease.state
        old = self.leases.pop(lease_id, None)
        if old is not None:
            old_node, old_state = old.node_id, old.state
            by_node = self.by_node.get(old_node)
            if by_node is not None:
                by_node.pop(lease_id, None)
            self._unview_lease(old_node, lease_id)
            self._named_on[old_node].pop(old.vm_name, None)
            if old_node != node_id:   # its own node is touched below (versions are only compared)
                self._touch(old_node)
            if old.deadline is not None:
                self._timed.pop(lease_id, None)
            if old_state == "waiting":
                self._waiting_on[old_node] -= 1
            if old_state == HIBERNATED:
                self._asleep_on[old_node] -= 1
            if old_state in IN_TRANSIT and old.role == "backfill":
                left = self._in_transit.pop(old_node) - 1
                if left:
                    self._in_transit[old_node] = left
            if reacts(old):
                self._reacting_on[old_node] -= 1
        if state in TERMINAL:
            self._retire(lease, now)
            self._lease_ended(lease_id)
        else:
            self.leases[lease_id] = lease
            self.by_node.setdefault(node_id, {})[lease_id] = lease
            self._named_on.setdefault(node_id, {})[lease.vm_name] = lease
            self._view_lease(lease)
            if lease.deadline is not None:
                self._timed[lease_id] = lease
            if state == "waiting":
                self._waiting_on[node_id] = self._waiting_on.get(node_id, 0) + 1
            if state == HIBERNATED:
                self._asleep_on[node_id] = self._asleep_on.get(node_id, 0) + 1
            if state in IN_TRANSIT and lease.role == "backfill":
                self._in_transit[node_id] = self._in_transit.get(node_id, 0) + 1
            if reacts(lease):
                self._reacting_on[node_id] = self._reacting_on.get(node_id, 0) + 1
        self._touch(node_id)
        return lease

    def _retire(self, lease: Lease, now: float) -> None:
        self.retired[lease.vm_name] = (lease, now)
        if is_on_demand_vm(lease) and lease.launched_at is not None:
            self.on_demand_lives.append((lease.launched_at, max(lease.launched_at, lease.ended_at or now)))
        self.retired_ids[lease.lease_id] = lease.node_id
        for table in (self.retired, self.retired_ids):
            while len(table) > 100_000:
                table.popitem(last=False)

    def _say_once(self, key: str) -> bool:
        """True the first time `key` comes (bounded memory): for audit events that could repeat per report."""
        if key in self.said:
            return False
        self.said[key] = None
        while len(self.said) > 100_000:
            self.said.popitem(last=False)
        return True

    def _touch(self, node_id: str) -> None:
        self._books_version += 1
        self._views_stale(node_id)
        self.lease_version[node_id] = self.lease_version.get(node_id, 0) + 1

    def live_leases(self) -> list[Lease]:
        return sorted(self.leases.values(), key=lambda l: (l.created_at, l.lease_id))

    def _new_lease(self, role: VmRole, node_id: str, size: Size, image: str, owner: str, state: str,
                   now: float, deadline: float | None, request_id: str = "") -> Lease:
        lease_id = self.new_id("od" if role is VmRole.ON_DEMAND else "bf")
        # Lease(...) with its other fields at their defaults, copied from a blank one (faster)
        return replace(BLANK_LEASE, lease_id=lease_id, role=role.value, node_id=node_id,
                       vm_name=f"{self.settings.vm_name_prefix}{lease_id}", vcpus=size.vcpus,
                       memory_mib=size.memory_mib, image=image, owner=owner, state=state, created_at=now,
                       deadline=deadline, request_id=request_id)

    def pending(self, request_id: str) -> RequestRecord | None:
        return self.requests.get(request_id)

    def _remember(self, record: RequestRecord) -> None:
        self.requests[record.request_id] = record
        if len(self.requests) > 10_000:  # bounded: the resolved ones go first (the store keeps every one)
            resolved = (r for r, rec in self.requests.items() if rec.outcome != "pending")
            for request_id in list(islice(resolved, 1000)):   # the oldest, without reading every record
                del self.requests[request_id]

    def _resolve(self, request_id: str, outcome: str, reason: str = "") -> tuple[RequestRecord, ...]:
        record = self.requests.get(request_id)
        if record is None or record.outcome != "pending":
            return ()
        record = replace(record, outcome=outcome, reason=reason or record.reason)
        self.requests[request_id] = record
        return (record,)

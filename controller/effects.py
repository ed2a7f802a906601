"""Carrying out the books' effects, for the live service and the simulator alike.

The books (controller.core.ledger) answer every input with a list of effects: Writes (rows and
audit events) and the calls they authorise (Launch, Stop, Resume). Both drivers carry them out by the
same rules, here:

- every Write of the list is committed first, in one transaction; if that fails, nothing else
  happens (no call is made, no event is logged) and the caller rolls its books back;
- then the calls, in the books' order. A Stop marked `after_launch` waits for the launch the same
  list makes on its node (the first one): libvirt holds up defining a domain while another one's
  ACPI shutdown is under way, so the new VM is launched first;
- a fill of backfill is due when an event frees room or brings a node (FILL_EVENTS), and a fill
  runs only if backfill is on or a request waits for room (fill_wanted).

The service's carrier is SQLite and the agents over gRPC; the simulator's is its rows in memory
and simulated agents. They differ only in their agents and their clock.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from .core.records import FILL_EVENTS, Audit, Effect, Launch, Resume, Stop, Write


class Carrier(Protocol):
    def commit(self, writes: Sequence[Write]) -> None:
        """All of them in one transaction, or none (raise)."""

    def logged(self, event: Audit) -> None:
        """An audit event just committed (the service logs it; crash points hang here)."""

    def launch(self, launch: Launch) -> None:
        """Ask the agent to launch the lease's VM; its answer goes back to the books."""

    def stop(self, stop: Stop, after: Launch | None) -> None:
        """Ask the agent to stop the VM (or to save it: stop.hibernate); `after`: only once that
        launch has been answered."""

    def resume(self, resume: Resume) -> None:
        """Ask the agent to restore a hibernated VM; its answer goes back to the books (resume_done)."""


def carry_out(effects: Sequence[Effect], carrier: Carrier) -> bool:
    """Commit the effects' writes, then make their calls; returns whether a fill is due."""
    writes = [effect for effect in effects if type(effect) is Write]
    if writes:
        carrier.commit(writes)
    fill = False
    for write in writes:
        for event in write.events:
            carrier.logged(event)
            if event.kind in FILL_EVENTS:
                fill = True
    if len(writes) == len(effects):
        return fill
    first_launch: dict[str, Launch] = {}   # node -> its first launch in this list
    for effect in effects:
        if type(effect) is Launch:
            first_launch.setdefault(effect.lease.node_id, effect)
    for effect in effects:
        if type(effect) is Launch:
            carrier.launch(effect)
        elif type(effect) is Stop:
            carrier.stop(effect, first_launch.get(effect.lease.node_id) if effect.after_launch else None)
        elif type(effect) is Resume:
            carrier.resume(effect)
    return fill


def fill_wanted(backfill_enabled: bool, requests_waiting: int) -> bool:
    """Whether a fill pass has anything to do: launch backfill, or give freed room to a waiting request."""
    return backfill_enabled or requests_waiting > 0

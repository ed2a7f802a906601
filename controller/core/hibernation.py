"""Which victims of a preemption are hibernated, within their node's disk budget (issue 25).

Pure: the books give each victim and each VM already saved on the node as (lease id, state size
in MiB, work at stake in vCPU-seconds), and the node's free budget. A saved VM's state file is
at most its memory (only the pages the guest touched are written), so its memory is what the
budget is charged: never more disk than the agent was told it may use.

The rule: when the budget does not hold every victim, the VM with the least work at stake (a new
victim, or one already saved) is the one terminated. Victims are taken by work at stake, most
first; one that does not fit displaces saved VMs with less at stake than itself (least first),
if together they free enough; otherwise it is terminated.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

Candidate = tuple[str, int, float]   # (lease id, state size in MiB, work at stake in vCPU-seconds)


@dataclass(frozen=True)
class Interruptions:
    hibernate: tuple[str, ...]   # victims saved
    terminate: tuple[str, ...]   # victims terminated (their work lost)
    discard: tuple[str, ...]     # saved VMs given up for victims with more at stake (their work lost)


def interruptions(victims: Sequence[Candidate], saved: Sequence[Candidate], free_mib: int) -> Interruptions:
    """Split a preemption's victims between hibernation and termination within `free_mib` of
    budget (see the module's doc); victims and saved VMs are told apart by lease id."""
    hibernate: list[str] = []
    terminate: list[str] = []
    discard: list[str] = []
    # the saved VMs that may still be displaced, least at stake first (ties: the larger state first,
    # then by id, so the decision never depends on the order it was given)
    keep = sorted(saved, key=lambda c: (c[2], -c[1], c[0]))
    for lease_id, size, at_stake in sorted(victims, key=lambda c: (-c[2], c[1], c[0])):
        if size <= free_mib:
            hibernate.append(lease_id)
            free_mib -= size
            continue
        cheaper = [c for c in keep if c[2] < at_stake]
        freed, taken = 0, 0
        while taken < len(cheaper) and size > free_mib + freed:
            freed += cheaper[taken][1]
            taken += 1
        if size <= free_mib + freed:
            displaced = cheaper[:taken]
            discard += [c[0] for c in displaced]
            keep = [c for c in keep if c not in displaced]
            free_mib += freed - size
            hibernate.append(lease_id)
        else:
            terminate.append(lease_id)
    return Interruptions(tuple(hibernate), tuple(terminate), tuple(discard))

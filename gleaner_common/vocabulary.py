"""Gleaner's vocabulary: the words controller, agent and gleanctl share, as enums.

Two words, often confused:

* the *role* of a VM (VmRole) says whether it may be preempted: an ``on_demand`` VM is placed
  on request and never preempted by backfill; a ``backfill`` VM runs on idle capacity and may
  be shut down at any time;
* the *priority class* of a VM (PriorityClass) says how the host schedules it: ``foreground``
  at normal priority, ``volunteer`` at minimal priority (CPU, disk, network).

A backfill VM normally runs in the volunteer class and an on-demand VM in the foreground class
(class_of, role_of); an admin may promote or demote a VM's class without changing its role.

Pure: no imports beyond the standard library's enum.
"""
from __future__ import annotations

from enum import Enum


class PriorityClass(str, Enum):
    """How the host schedules a VM. The values are the wire's and the domain metadata's."""

    FOREGROUND = "foreground"
    VOLUNTEER = "volunteer"


class VmRole(str, Enum):
    """Whether a VM may be preempted. The values are the wire's and the controller's store's."""

    ON_DEMAND = "on_demand"
    BACKFILL = "backfill"


CLASS_OF_ROLE: dict[VmRole, PriorityClass] = {VmRole.ON_DEMAND: PriorityClass.FOREGROUND,
                                               VmRole.BACKFILL: PriorityClass.VOLUNTEER}
ROLE_OF_CLASS: dict[PriorityClass, VmRole] = {cls: role for role, cls in CLASS_OF_ROLE.items()}


def class_of(role: VmRole) -> PriorityClass:
    """The priority class a VM of this role is launched in."""
    return CLASS_OF_ROLE[VmRole(role)]


def role_of(cls: PriorityClass) -> VmRole:
    """The role of a VM launched in this priority class."""
    return ROLE_OF_CLASS[PriorityClass(cls)]

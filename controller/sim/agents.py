"""The simulated agents: how long a launch and a stop take and whether they succeed, when a node's
report reaches the controller after one of its VMs changed, and what CPU figure an agent reports
for a VM. The engine (controller/sim/engine.py) asks an AgentModel and never decides these itself.

The interface (kept stable: other models, e.g. one replaying a live pool's recorded answers,
implement the same callbacks). The engine calls, in simulated time order:

- ``bind(settings, node_ids)`` once, before the first event.
- ``launch(lease, now) -> LaunchAnswer(seconds, ok, error)`` when it carries out a Launch the
  ledger asked for at ``now``. ``seconds`` later the agent's answer arrives: with ``ok`` the VM
  exists on its node and the engine calls ``ledger.launch_done(lease_id, True, "", t)``; without,
  no VM exists and it calls ``ledger.launch_done(lease_id, False, error, t)`` (the ledger's real
  failure path: vm.launch_failed, the node's backfill backs off, an on-demand request is
  rejected or asked again as the ledger decides).
- ``stop(lease, grace_seconds, force, now) -> StopAnswer(seconds, outcome, ok, error)`` when it
  carries out a Stop (``now``: when the agent is asked; for a stop held for a launch of the same
  batch, the launch's answer). ``seconds`` later the VM is gone (if ``ok``) and the engine calls
  ``ledger.stop_done(lease_id, outcome, ok, seconds, error, t)``. ``outcome`` is what the agent
  says: clean_shutdown, destroyed_after_grace or destroyed_forced.
- ``report_lag(node_id, now) -> seconds`` (only when ``immediate_reports`` is False) when a VM of
  the node changed (launched, stopped, turned idle or busy): the node's report that shows the
  change reaches the controller that much later (0 .. one report interval). Changes on a node
  while its report is pending go in the same report (the report is built when it is sent).
- ``sampled_cpu(vm, true_cores, now) -> cores`` (only when ``exact_cpu`` is False) for a backfill
  VM each time its work changes (``true_cores``: the vCPUs its work uses) and each time its node
  reports: the figure the agent's report carries (SimVm.cpu_cores), which the ledger judges
  idleness by (controller/core/idleness.py, IDLE_CPU_CORES).
- ``vm_class("backfill")`` once, before the first event: the class of the backfill VMs it makes
  (SimVm unless the model samples CPU).
- ``describe() -> dict``: the model's name and every parameter, for the summary's header.

Models: ``IdealAgents`` (the default of SimSettings: every launch and stop succeeds in the fixed
SimSettings.launch_time and stop_seconds, reports arrive at the instant, CPU figures are exact;
what the simulator did before agent models existed, bit for bit) and ``ModelledAgents``
(``SimSettings.agents = "modelled"``).

Randomness: no model draws from a shared stream. Every draw is a hash of (the run's seed, the
thing it is about, what is drawn): an on-demand VM's by its request id (and launch attempt),
a backfill VM's by its name, a node's by its id. A run with backfill and one without therefore
give each on-demand VM the same launch time, launch failure and stop time, although the ledger
numbers their leases differently.
"""
from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable
from typing import Any, NamedTuple

from ..core.records import Lease
from .world import SimSettings, SimVm

OUTCOMES = ("clean_shutdown", "destroyed_after_grace", "destroyed_forced")


class LaunchAnswer(NamedTuple):
    """An agent's answer to a Launch, ``seconds`` after the call."""
    seconds: float
    ok: bool
    error: str = ""


class StopAnswer(NamedTuple):
    """An agent's answer to a Stop, ``seconds`` after the call (the VM gone when ``ok``)."""
    seconds: float
    outcome: str          # one of OUTCOMES
    ok: bool = True
    error: str = ""


def clean_or_grace(shutdown_seconds: float, grace_seconds: float, force: bool) -> StopAnswer:
    """What the agent does with a stop: destroy at once when forced; else a clean shutdown that
    takes `shutdown_seconds`, or the VM destroyed at the grace when it would take longer."""
    if force:
        return StopAnswer(0.0, "destroyed_forced")
    if shutdown_seconds <= grace_seconds:
        return StopAnswer(shutdown_seconds, "clean_shutdown")
    return StopAnswer(float(grace_seconds), "destroyed_after_grace")


class AgentModel:
    """The callbacks the engine makes (see the module's doc). The base class is the ideal agents'
    behaviour for every callback; a model overrides what it models."""

    name = "ideal"
    exact_cpu = True           # sampled_cpu is never called: SimVm.cpu_cores is the work's own figure
    immediate_reports = True   # report_lag is never called: a node reports the instant a VM changes

    def __init__(self, settings: SimSettings) -> None:
        self.settings = settings

    def bind(self, settings: SimSettings, node_ids: Iterable[str]) -> None:
        """Before the first event: the run's settings and its nodes."""
        self.settings = settings

    def launch(self, lease: Lease, now: float) -> LaunchAnswer:
        return LaunchAnswer(self.settings.launch_time(lease.lease_id), True)

    def stop(self, lease: Lease, grace_seconds: float, force: bool, now: float) -> StopAnswer:
        return clean_or_grace(self.settings.stop_seconds, grace_seconds, force)

    def report_lag(self, node_id: str, now: float) -> float:
        return 0.0

    def sampled_cpu(self, vm: SimVm, true_cores: float, now: float) -> float:
        return true_cores

    def vm_class(self, role: str) -> type[SimVm]:
        """The class of the engine's backfill VMs (`role`): SimVm, whose cpu_cores is exactly
        what its work sets; a model that samples CPU gives a subclass whose cpu_cores reads
        sampled_cpu (on-demand VMs are always SimVm: nothing judges their idleness)."""
        return SimVm

    def describe(self) -> dict[str, Any]:
        return dict(model=self.name, launch_seconds=self.settings.launch_seconds,
                    launch_jitter=self.settings.launch_jitter, stop_seconds=self.settings.stop_seconds)


class IdealAgents(AgentModel):
    """Agents that always succeed in fixed times, report at the instant and measure CPU exactly."""


# -- seeded draws -----------------------------------------------------------------------------------

def uniform(seed: int, *key: str) -> float:
    """A number in (0, 1), the same for the same seed and key in every run and process (a hash,
    not a stream: no draw depends on what else was drawn before it)."""
    text = "\x1f".join((str(seed), *key)).encode()
    value = int.from_bytes(hashlib.blake2b(text, digest_size=8).digest(), "big")
    return (value + 0.5) / 2.0 ** 64


def draw_key(lease: Lease) -> str:
    """What a lease's draws are keyed by: an on-demand VM's request id (the same whether or not
    backfill runs beside it: lease ids and VM names are numbered in the order the ledger makes
    them, which backfill changes), else its VM name."""
    if lease.role == "on_demand" and lease.request_id:
        return "request:" + lease.request_id
    return "vm:" + lease.vm_name


# -- what the engine keeps for the models -----------------------------------------------------------

class NodeReports:
    """When a node whose VM changed reports. With immediate reports: a full report (a VM came or
    went) at once, a CPU report (a VM turned idle or busy) once the event that did it is over.
    Else report_lag later, and changes meanwhile go in the same report (it is built when it is
    sent): a node has at most one report on its way, and no report is simulated that shows
    nothing new."""
    __slots__ = ("agents", "schedule", "send_whole", "send_cpu", "pending")

    def __init__(self, agents: AgentModel, schedule: Callable[[float, Callable[[Any], None], Any], None],
                 send_whole: Callable[[str], None], send_cpu: Callable[[str], None]) -> None:
        self.agents = agents
        self.schedule = schedule
        self.send_whole = send_whole   # a full report (ledger.report)
        self.send_cpu = send_cpu       # only the VMs' CPU and the guests' word (ledger.note_cpu)
        self.pending: dict[str, bool] = {}   # node -> its report is on its way (True: a full one)

    def changed(self, node_id: str, now: float, whole: bool) -> None:
        pending = self.pending.get(node_id)
        if self.agents.immediate_reports:
            if whole:
                self.send_whole(node_id)
            elif pending is None:
                self.pending[node_id] = False
                self.schedule(now, self._send, node_id)
        elif pending is None:
            self.pending[node_id] = whole
            self.schedule(now + self.agents.report_lag(node_id, now), self._send, node_id)
        elif whole and not pending:
            self.pending[node_id] = True

    def _send(self, node_id: str) -> None:
        (self.send_whole if self.pending.pop(node_id) else self.send_cpu)(node_id)


def resample(vms: Iterable[SimVm], now: float) -> None:
    """Each sampled VM's CPU figure drawn afresh for the report its agent sends now."""
    for vm in vms:
        again = getattr(vm, "resample", None)
        if again is not None:
            again(now)


MODELS: dict[str, type[AgentModel]] = {"ideal": IdealAgents}


def agent_model(settings: SimSettings) -> AgentModel:
    """The model SimSettings.agents names."""
    try:
        model = MODELS[settings.agents]
    except KeyError:
        raise ValueError(f"agents {settings.agents!r}: one of {', '.join(MODELS)}") from None
    return model(settings)

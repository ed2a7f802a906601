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
import math
import random
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from statistics import NormalDist
from typing import Any, ClassVar, NamedTuple

from ..core.idleness import IDLE_CPU_CORES
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
    fill_delay = 0.0           # a fill asked for runs at the instant (after the event that asked)

    def __init__(self, settings: SimSettings) -> None:
        self.settings = settings

    def bind(self, settings: SimSettings, node_ids: Iterable[str]) -> None:
        """Before the first event: the run's settings and its nodes."""
        self.settings = settings

    def launch(self, lease: Lease, now: float) -> LaunchAnswer:
        return LaunchAnswer(self.settings.launch_time(lease.lease_id), True)

    def stop(self, lease: Lease, grace_seconds: float, force: bool, now: float) -> StopAnswer:
        return clean_or_grace(self.settings.stop_seconds, grace_seconds, force)

    def hibernate(self, lease: Lease, now: float) -> StopAnswer:
        """The answer to a save: the VM's state written (outcome "hibernated")."""
        return StopAnswer(self.settings.save_seconds, "hibernated")

    def resume(self, lease: Lease, now: float) -> LaunchAnswer:
        """The answer to a restore: the VM runs again."""
        return LaunchAnswer(self.settings.restore_seconds, True)

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
    """The sampled VMs' CPU figures drawn afresh for the report their agent sends now, where a new
    sample could change what the ledger decides (SampledVm.near)."""
    for vm in vms:
        if getattr(vm, "near", False):
            vm.resample(now)   # type: ignore[attr-defined]


# -- the modelled agents ----------------------------------------------------------------------------

Z99 = NormalDist().inv_cdf(0.99)


class AgentParamError(ValueError):
    """A modelled agents' parameter out of its range (`name`: the parameter)."""

    def __init__(self, name: str, message: str) -> None:
        super().__init__(message)
        self.name = name


@dataclass(frozen=True)
class ModelledParams:
    """The modelled agents' parameters (docs/simulator.md says where each default comes from).
    Times are lognormal, fitted to a median and a 99th percentile."""
    # tests.bench.lifecycle, 30 launches and clean stops of the tiny guest through a real agent
    # (TCG, the 2-core development host): every one succeeded, which bounds the failure rate only
    # below 10 % (the rule of three); 1 % is an assumption inside that
    launch_failure: float = 0.01        # share of launches the agent answers with an error
    launch_p50_seconds: float = 0.82    # launch_rpc: Launch call to answer (domain defined and started)
    launch_p99_seconds: float = 1.35    # its largest of 30
    # backfill launches' own times (0 and 0: as the launches above). The replay fits them to the
    # refills it recorded: a refill comes as others launch on the node and slows beside them
    backfill_launch_p50_seconds: float = 0.0
    backfill_launch_p99_seconds: float = 0.0
    stop_p50_seconds: float = 1.50      # terminate_rpc: a clean shutdown, Terminate call to answer
    stop_p99_seconds: float = 2.52      # its largest of 30
    report_seconds: float = 2.0         # the agents' report interval (nodeagent: report_seconds)
    # hibernation: tests.bench.hibernate, 20 save/restore cycles of the tiny guest running a CPU hog
    # through a real agent (TCG, 128 and 512 MiB): HibernateDomain and ResumeDomain as the client sees them
    save_p50_seconds: float = 2.05
    save_p99_seconds: float = 2.59
    restore_p50_seconds: float = 1.00
    restore_p99_seconds: float = 1.87
    # assumptions: an idle tiny guest under TCG uses about 0.01 core (controller/core/idleness.py);
    # a CPU-bound job keeps a core about 97 % busy beside the guest's kernel and the host's steal
    cpu_idle_cores: float = 0.01        # an idle guest's CPU (a worker between jobs)
    cpu_busy_share: float = 0.97        # a busy vCPU's share of a core as the agent samples it
    cpu_noise_cores: float = 0.02       # standard deviation of one sample, in cores
    # the controller's bulkhead (controller/bulkheads.py, agent_calls_per_node): at most this many
    # calls to one node at once, one slot kept for the urgent lane (stops, on-demand launches)
    calls_per_node: float = 4.0
    # how many stops a node's agent works on at once (0: all it is sent); the others wait at the
    # agent, in the order they came. The replay fits it to a recording (controller/sim/replay.py):
    # the live agents on libvirt's test:/// driver answer a batch of stops one at a time (its span
    # grows with its size, about 7 ms a stop), while their launches overlap
    agent_parallel_stops: float = 0.0
    # how long after a fill is asked for it runs: the live launcher is an APScheduler job moved to
    # "now", run by the scheduler's thread a moment later, and what asks for a fill meanwhile is
    # served by that one run. Four recordings of tests.bench.replay: 5.6 to 5.8 ms at the median
    # from the event that asked (the first, if several) to the fill's job line (the thread's
    # wake-up and the fill's own work); 1.5 events per fill
    fill_delay_seconds: float = 0.0056

    RANGES: ClassVar[dict[str, tuple[float, float]]] = dict(
        launch_failure=(0.0, 0.5), launch_p50_seconds=(0.001, 600.0), launch_p99_seconds=(0.001, 3600.0),
        backfill_launch_p50_seconds=(0.0, 600.0), backfill_launch_p99_seconds=(0.0, 3600.0),
        stop_p50_seconds=(0.001, 600.0), stop_p99_seconds=(0.001, 3600.0), report_seconds=(0.0, 3600.0),
        save_p50_seconds=(0.01, 600.0), save_p99_seconds=(0.01, 3600.0), restore_p50_seconds=(0.01, 600.0),
        restore_p99_seconds=(0.01, 3600.0),
        cpu_idle_cores=(0.0, 1.0), cpu_busy_share=(0.1, 1.0), cpu_noise_cores=(0.0, 4.0),
        calls_per_node=(2.0, 1023.0), agent_parallel_stops=(0.0, 1023.0), fill_delay_seconds=(0.0, 60.0))
    WHOLE: ClassVar[tuple[str, ...]] = ("calls_per_node", "agent_parallel_stops")   # counts: whole numbers

    @classmethod
    def of(cls, pairs: Iterable[tuple[str, float]]) -> ModelledParams:
        """The parameters with `pairs` (name, value) changed, each checked: a ValueError names the
        parameter, its value and what is allowed."""
        changes = dict(pairs)
        unknown = sorted(set(changes) - set(cls.RANGES))
        if unknown:
            raise AgentParamError(unknown[0], f"agent parameter {unknown[0]!r} unknown; the parameters are "
                                              f"{', '.join(cls.RANGES)}")
        params = cls(**{k: float(v) for k, v in changes.items()})
        for name, (low, high) in cls.RANGES.items():
            value = getattr(params, name)
            if not (low <= value <= high) or math.isnan(value):
                raise AgentParamError(name, f"agent parameter {name} = {value:g}: allowed {low:g} to {high:g}")
            if name in cls.WHOLE and value != int(value):
                raise AgentParamError(name, f"agent parameter {name} = {value:g}: a whole number of calls")
        if (params.backfill_launch_p50_seconds == 0) != (params.backfill_launch_p99_seconds == 0):
            raise AgentParamError("backfill_launch_p50_seconds", "agent parameters backfill_launch_p50_seconds and "
                                  "backfill_launch_p99_seconds are both 0 (as any launch) or both set, not one")
        for what in ("launch", "backfill_launch", "stop", "save", "restore"):   # (0 and 0 pass: as any launch)
            p50, p99 = getattr(params, f"{what}_p50_seconds"), getattr(params, f"{what}_p99_seconds")
            if p99 < p50:
                raise AgentParamError(f"{what}_p99_seconds", f"agent parameter {what}_p99_seconds = {p99:g} is below "
                                                             f"{what}_p50_seconds = {p50:g}")
        return params


class Lognormal:
    """A lognormal with the given median and 99th percentile, drawn from a uniform in (0, 1)."""
    __slots__ = ("mu", "sigma", "inv_cdf")

    def __init__(self, p50: float, p99: float) -> None:
        self.mu = math.log(p50)
        self.sigma = (math.log(p99) - self.mu) / Z99
        self.inv_cdf = NormalDist().inv_cdf

    def __call__(self, u: float) -> float:
        return math.exp(self.mu + self.sigma * self.inv_cdf(u))


class Call(NamedTuple):
    """One agent call on a node's lanes: when it took a slot of the bulkhead (entry), when the
    agent began it (start), when it answered (end), whether it is a backfill launch, a stop."""
    entry: float
    start: float
    end: float
    backfill: bool
    stop: bool


class NodeLanes:
    """The calls to each node, as the live controller makes them (controller/bulkheads.py) and its
    agent answers them: at most `per_node` at once, backfill launches at most `per_node - 1` of them
    (a slot is kept for the urgent lane: stops and on-demand launches), each lane first come first
    served, urgent calls before backfill ones; the agent works on at most `parallel_stops` of the
    stops it holds at once (0: all), in the order they came, and on every launch it holds. A call's
    answer is `seconds` (its own time, a draw) after the agent began it.

    Answers are fixed when a call is made (the engine schedules them then), so an urgent call
    goes ahead of the backfill launches still waiting in the bulkhead when it comes, but does not
    push their answers back: while they overlap, the node holds one call too many. Live, that is
    the moment the urgent lane's kept slot serves."""
    __slots__ = ("per_node", "parallel_stops", "calls")

    def __init__(self, per_node: int, parallel_stops: int = 0) -> None:
        self.per_node = per_node
        self.parallel_stops = parallel_stops or per_node
        self.calls: dict[str, list[Call]] = {}   # node -> its calls not yet answered (pruned as they end)

    def call(self, node_id: str, now: float, seconds: float, backfill: bool, stop: bool) -> float:
        """A call made at `now` that takes the agent `seconds`: how long until its answer."""
        calls = [c for c in self.calls.get(node_id, ()) if c.end > now]
        if not calls:   # an idle node (most calls): the agent begins it at once
            self.calls[node_id] = [Call(now, now, now + seconds, backfill, stop)]
            return seconds
        # the calls this one waits behind: all of them for a backfill launch; for an urgent call,
        # not the backfill launches still waiting for a slot (it goes first)
        ahead = calls if backfill else [c for c in calls if not (c.backfill and c.entry > now)]
        lane = [c for c in ahead if c.backfill == backfill]
        earliest = max([now] + [c.entry for c in lane])
        # fewer calls ahead than either limit: _free's first moment, `earliest`, has room
        few = len(ahead) < self.per_node and (not backfill or len(ahead) < self.per_node - 1)
        entry = earliest if few else self._free(ahead, earliest, lambda c: (c.entry, c.end), self.per_node,
                                                (self.per_node - 1) if backfill else 0)
        start = entry
        if stop:   # in turn with the stops ahead of it at the agent
            stops = [c for c in ahead if c.stop]
            earliest = max([entry] + [c.start for c in stops if c.entry <= entry])
            start = earliest if len(stops) < self.parallel_stops else \
                self._free(stops, earliest, lambda c: (c.start, c.end), self.parallel_stops, 0)
        calls.append(Call(entry, start, start + seconds, backfill, stop))
        self.calls[node_id] = calls
        return (start - now) + seconds   # exactly `seconds` when it did not wait

    @staticmethod
    def _free(calls: list[Call], earliest: float, span: Callable[[Call], tuple[float, float]], limit: int,
              backfill_limit: int) -> float:
        """The first moment from `earliest` when fewer than `limit` of `calls` hold a place (each
        from its span's start to its end), and, if `backfill_limit`, fewer than that many backfill
        launches: a place frees when a call ends."""
        for t in sorted({earliest, *(c.end for c in calls if c.end > earliest)}):
            holding = [c for c in calls if span(c)[0] <= t < span(c)[1]]
            if len(holding) < limit and (not backfill_limit or sum(c.backfill for c in holding) < backfill_limit):
                return t
        return earliest   # not reached: every call ends, and then none holds a place


class SampledVm(SimVm):
    """A backfill VM whose CPU figure (cpu_cores, what its agent reports and the ledger judges
    idleness by) is sampled: its work sets the true figure, and the figure is drawn afresh at each
    change, and at each report of its node while a sample could fall on either side of
    IDLE_CPU_CORES (`near`: within 6 standard deviations; farther, a new sample could not change
    what the ledger decides, and redrawing it at every report would cost a tenth of the run). Its
    draws come from its own stream, seeded by its name."""
    __slots__ = ("true_cores", "seen", "agents", "draws", "near")

    def __init__(self, lease: Lease, now: float, clock: Any = None) -> None:
        self.clock = clock
        self.agents: ModelledAgents = clock.agents
        self.draws = random.Random(int(uniform(self.agents.seed, "vm:" + lease.vm_name, "cpu") * 2 ** 53))
        self.true_cores = self.seen = 0.0
        self.near = False
        super().__init__(lease, now, clock)

    @property   # type: ignore[override]   # a property over SimVm's slot: reads give the sample
    def cpu_cores(self) -> float:
        return self.seen

    @cpu_cores.setter
    def cpu_cores(self, value: float) -> None:
        self.true_cores = value
        self.seen = self.agents.sampled_cpu(self, value, self.clock.now)
        self.near = self.agents.near_threshold(value)

    def resample(self, now: float) -> None:
        self.seen = self.agents.sampled_cpu(self, self.true_cores, now)


class ModelledAgents(AgentModel):
    """Agents as the benchmarks measure them: launches fail now and then, launch and shutdown
    times are lognormal, a node's report reaches the controller at its next report tick (a phase
    per node), and CPU figures are samples with noise around an idle floor and a busy share.
    Every draw is a hash of the seed and what it is about (the module's doc)."""

    name = "modelled"
    exact_cpu = False
    immediate_reports = False

    def __init__(self, settings: SimSettings) -> None:
        super().__init__(settings)
        self.params = ModelledParams.of(settings.agent_params)
        self.fill_delay = self.params.fill_delay_seconds
        self.seed = settings.seed
        self.launch_time = Lognormal(self.params.launch_p50_seconds, self.params.launch_p99_seconds)
        self.backfill_launch_time = Lognormal(self.params.backfill_launch_p50_seconds,
                                              self.params.backfill_launch_p99_seconds) \
            if self.params.backfill_launch_p50_seconds else self.launch_time
        self.stop_time = Lognormal(self.params.stop_p50_seconds, self.params.stop_p99_seconds)
        self.save_time = Lognormal(self.params.save_p50_seconds, self.params.save_p99_seconds)
        self.restore_time = Lognormal(self.params.restore_p50_seconds, self.params.restore_p99_seconds)
        self.saves: dict[str, int] = {}   # draw key -> saves asked
        self.attempts: dict[str, int] = {}   # draw key -> launches (an on-demand request may be launched again)
        self.stops: dict[str, int] = {}
        self.phase: dict[str, float] = {}    # node -> its report tick's phase in the interval
        self.lanes = NodeLanes(int(self.params.calls_per_node), int(self.params.agent_parallel_stops))

    def bind(self, settings: SimSettings, node_ids: Iterable[str]) -> None:
        super().bind(settings, node_ids)
        interval = self.params.report_seconds
        self.phase = {n: uniform(self.seed, "node:" + n, "report_phase") * interval for n in node_ids}

    def launch(self, lease: Lease, now: float) -> LaunchAnswer:
        key = draw_key(lease)
        attempt = str(self.attempts.get(key, 0))
        self.attempts[key] = int(attempt) + 1
        backfill = lease.role == "backfill"
        time = self.backfill_launch_time if backfill else self.launch_time
        seconds = self.lanes.call(lease.node_id, now, time(uniform(self.seed, key, attempt, "launch_s")), backfill, False)
        if uniform(self.seed, key, attempt, "launch_failed") < self.params.launch_failure:
            return LaunchAnswer(seconds, False, "the domain did not start (modelled launch failure)")
        return LaunchAnswer(seconds, True)

    def stop(self, lease: Lease, grace_seconds: float, force: bool, now: float) -> StopAnswer:
        if force:   # no draw: a destroy is immediate, once the call's turn comes
            return StopAnswer(self.lanes.call(lease.node_id, now, 0.0, False, True), "destroyed_forced")
        key = draw_key(lease)
        attempt = str(self.stops.get(key, 0))
        self.stops[key] = int(attempt) + 1
        answer = clean_or_grace(self.stop_time(uniform(self.seed, key, attempt, "stop_s")), grace_seconds, False)
        return answer._replace(seconds=self.lanes.call(lease.node_id, now, answer.seconds, False, True))

    def hibernate(self, lease: Lease, now: float) -> StopAnswer:
        key = draw_key(lease)
        attempt = str(self.saves.get(key, 0))
        self.saves[key] = int(attempt) + 1
        seconds = self.save_time(uniform(self.seed, key, attempt, "save_s"))
        return StopAnswer(self.lanes.call(lease.node_id, now, seconds, False, True), "hibernated")   # urgent, as a stop

    def resume(self, lease: Lease, now: float) -> LaunchAnswer:
        key = draw_key(lease)
        attempt = str(self.saves.get(key, 0))
        seconds = self.restore_time(uniform(self.seed, key, attempt, "restore_s"))
        return LaunchAnswer(self.lanes.call(lease.node_id, now, seconds, True, False), True)   # a backfill launch's lane

    def report_lag(self, node_id: str, now: float) -> float:
        """To the node's next report tick: its phase plus whole report intervals."""
        interval = self.params.report_seconds
        if not interval:
            return 0.0
        return (self.phase[node_id] - now) % interval

    def sampled_cpu(self, vm: SimVm, true_cores: float, now: float) -> float:
        p = self.params
        draws = getattr(vm, "draws", None)
        noise = draws.gauss(0.0, p.cpu_noise_cores) if draws is not None and p.cpu_noise_cores else 0.0
        # folded at 0 (a figure is never negative, and an idle guest's is never exactly 0), capped at its vCPUs
        return min(abs(true_cores * p.cpu_busy_share + p.cpu_idle_cores + noise), float(vm.vcpus))

    def near_threshold(self, true_cores: float) -> bool:
        """Whether a sample of `true_cores` could fall on either side of IDLE_CPU_CORES."""
        p = self.params
        return abs(true_cores * p.cpu_busy_share + p.cpu_idle_cores - IDLE_CPU_CORES) < 6 * p.cpu_noise_cores

    def vm_class(self, role: str) -> type[SimVm]:
        return SampledVm

    def describe(self) -> dict[str, Any]:
        return dict(model=self.name, seed=self.seed, **asdict(self.params))


MODELS: dict[str, type[AgentModel]] = {"ideal": IdealAgents, "modelled": ModelledAgents}


def agent_model(settings: SimSettings) -> AgentModel:
    """The model SimSettings.agents names."""
    try:
        model = MODELS[settings.agents]
    except KeyError:
        raise ValueError(f"agents {settings.agents!r}: one of {', '.join(MODELS)}") from None
    return model(settings)

"""Replay: a live controller's recording (controller/recording.py) fed through the simulator.

`replay(recording)` runs the simulator (controller/sim/engine.py, the same Ledger as the live
controller) on the recording's inputs, at their recorded times (seconds since the recording began):

- the nodes join when their first recorded report came, with the size and images it gave;
- on-demand requests and releases (a release names its lease by its stable key, LeaseKeys);
- the backfill settings in force, and their changes;
- the tenants as stored, the pool's RBT and URR and the jobs done at the start, and every change
  of the tenants at its time (a goal set begins its tenant's job afresh; a batch tenant changed
  sizes the goals at once, as the service does); a `delete --drain`: its tenant granted nothing
  from the drain's start to its end (`drain` lines), its VMs' releases as any release;
- the periodic jobs that ran: every fill and volunteer selection, and every tick that did
  something (jobs="recorded"; the simulator's own schedule is not used then, so a fill runs when
  the live launcher's did). jobs="simulated" keeps the simulator's own schedule instead;
- the agents' answers (RecordedAgents): each launch and stop the simulated books ask of an agent
  gets the answer the live agent gave the same lease (by key, in order), after the delay it took;
- the agents' reports (reports="recorded"), at their recorded times, each VM named as the
  replay's books name the lease of the same key (RecordedReports). A report travels: one sent
  before a stop ended can arrive after its answer, and the books then count the VM as room still
  taken until the next report. The simulated nodes' own reports would not show that.
  reports="simulated" has the simulated nodes report instead, the instant a VM changes.

It records itself as it goes, with the same Recorder, so the replay's decisions and the live
ones read alike (controller/sim/replay_compare.py compares them one by one).

`predict(recording)` runs the same requests, releases and node arrivals (and tenants) with the
simulator's own agents ("modelled", fitted to the recording by model_settings) and its own
schedule of jobs (the goals job every GOAL_INTERVAL_S among them), for the aggregate figures
(replay_compare.aggregates). Its guests say no progress: a goal is sized on the work it states.

What a replay leaves out:
- a VM of a recorded report whose key the replay's books placed on another node or never made
  (the replay decided otherwise before, or around a node's silence: it is left out of the report
  and counted in `report_vms_left_out`);
- the reports the recorder left out (one that repeats the node's last, within REPORT_HEARTBEAT_S,
  with no line about the node between). Most would have matched as the one before; not those
  whose matching depends on the time (a VM missing past `lost_after` is found lost), which the
  recorder keeps when the books acted on them. Each live report is a foreground sample: those left
  out count as samples at the last recorded figure (`skipped`), which a repeat need not have had;
- from recordings written before report lines kept them: the guests' word on the work channel
  (work state, progress) and whether a CPU figure was sampled yet (a recorded figure then counts
  as sampled, and no guest said anything);
- the lives of the on-demand VMs that ended before the recording began (the live books load the
  last ones from their store): the projected finish of a goal (controller/core/departures.py)
  counts departures only once the replay has seen enough VMs end; what the books buy is not
  sized on it;
- a node's silence judged by time: the replay's books find a node suspect or down only at the
  recorded tick that did (with repeated reports left out, a gap between recorded reports is not
  a silence live);
- a controller restart within a recording (use the recording's last segment: each start begins one);
- a progress sample taken live on a report left out as a repeat: taken at the next recorded one.
"""
from __future__ import annotations

import io
import json
import math
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..core.goal_sizing import GOAL_INTERVAL_S
from ..core.lifecycle import liveness_verdict
from ..core.records import BackfillConfig, Lease, Write
from ..recording import LeaseKeys, Recorder
from . import agents as agents_module
from .agents import MODELS, AgentModel, LaunchAnswer, StopAnswer, agent_model
from .engine import DAY, Scripted, SimSettings, Simulation
from .replay_fit import answer_figures
from .replay_load import Recording, load, segments  # noqa: F401 (load and segments: this module's API)
from .traces import NodeGroup, OnDemandRequest
from .world import HeldRoom, SimNode

REPLAY_MARGIN_S = 120.0   # simulated past the recording's last line, for answers still due


# -- the agents ---------------------------------------------------------------------------------

IN_STEP_S = 0.010   # a replay's call asked this close to the live one's ask is the same call, in step


def answer_delay(answer: Mapping[str, Any], now: float) -> float:
    """How long after `now` a recorded answer comes to a call the replay asks now. Asked in step
    with the live call (within IN_STEP_S), when the live answer came: the replay decides at the
    instant a request or job line was recorded, which is a millisecond or so off the live ask
    (a request line comes before its decision, a fill's job line after its calls), and an answer
    due that much early (or late) can change places with a recorded report. Out of step (the
    runs decided otherwise before), after the delay it took."""
    delay = answer["delay_s"]
    came = answer["t"] - now
    return came if abs(came - delay) <= IN_STEP_S and came >= 0.0 else delay


class RecordedAgents(AgentModel):
    """The live agents' answers, by lease key and in order: the Nth launch (stop) the replay asks
    for a lease gets the Nth answer the live agent gave that lease, when it came (answer_delay). A call
    the live run never made (the replay decided otherwise) gets `fallback`'s answer, and is noted
    in `unrecorded`."""

    name = "recorded"

    def __init__(self, settings: SimSettings, recording: Recording, keys: LeaseKeys,
                 fallback: AgentModel | None = None) -> None:
        super().__init__(settings)
        self.recording = recording
        self.keys = keys
        self.fallback = fallback or agent_model(settings)
        self.launches: dict[str, int] = defaultdict(int)   # key -> launches asked so far
        self.stops: dict[str, int] = defaultdict(int)
        self.unrecorded: list[tuple[str, str, float]] = []   # (call, key, when)

    def bind(self, settings: SimSettings, node_ids: Sequence[str]) -> None:
        super().bind(settings, node_ids)
        self.fallback.bind(settings, node_ids)

    def launch(self, lease: Lease, now: float) -> LaunchAnswer:
        key = self.keys.key(lease.lease_id)
        answers = self.recording.launch_answers.get(key, [])
        n = self.launches[key]
        self.launches[key] += 1
        if n >= len(answers):
            self.unrecorded.append(("launch", key, now))
            return self.fallback.launch(lease, now)
        answer = answers[n]
        return LaunchAnswer(answer_delay(answer, now), answer["ok"], answer["detail"])

    def stop(self, lease: Lease, grace_seconds: float, force: bool, now: float) -> StopAnswer:
        key = self.keys.key(lease.lease_id)
        answers = self.recording.stop_answers.get(key, [])
        n = self.stops[key]
        self.stops[key] += 1
        if n >= len(answers):
            self.unrecorded.append(("stop", key, now))
            return self.fallback.stop(lease, grace_seconds, force, now)
        answer = answers[n]
        return StopAnswer(answer_delay(answer, now), answer["outcome"] if answer["ok"] else "unreachable", answer["ok"],
                          answer["detail"])

    def describe(self) -> dict[str, Any]:
        return dict(model=self.name, launches=sum(map(len, self.recording.launch_answers.values())),
                    stops=sum(map(len, self.recording.stop_answers.values())))


# -- the reports ----------------------------------------------------------------------------------

class RecordedVm:
    """A VM of a recorded report (controller.core.records.ReportedVmLike), named as the replay's
    books name its lease, with its guest's word as recorded (`guest`: cpu_sampled, work_state,
    work_for_s, progress_done, progress_total, progress_for_s; a line from before the recorder
    kept them gives none: sampled, nothing said)."""
    __slots__ = ("name", "lease_id", "role", "vcpus", "memory_mib", "launched_at", "cpu_cores",
                 "cpu_sampled", "image", "work_state", "work_for_s", "progress_done", "progress_total",
                 "progress_for_s")

    def __init__(self, name: str, lease_id: str, role: str, vcpus: int, memory_mib: int, cpu_cores: float,
                 image: str, guest: Sequence[Any] = ()) -> None:
        self.name, self.lease_id, self.role = name, lease_id, role
        self.vcpus, self.memory_mib, self.cpu_cores, self.image = vcpus, memory_mib, cpu_cores, image
        self.launched_at = 0.0
        (self.cpu_sampled, self.work_state, self.work_for_s, self.progress_done, self.progress_total,
         self.progress_for_s) = guest[:6] if len(guest) >= 6 else (True, "", 0.0, 0, 0, 0.0)


class RecordedReport:
    """A recorded report line (controller.core.records.ReportLike) with its VMs as RecordedVm, its
    hibernated ones (`hibernated`, read by matching.reported_vms) and the disk its agent lets them
    use. A line from before the recorder kept those (no `hibernation_budget_bytes`) gets
    `budget_bytes`, what the simulated node's report would say."""
    __slots__ = ("node_id", "agent_address", "cpus", "memory_mib", "foreground_cpu_cores", "images",
                 "min_memory_mib", "agent_version", "vms", "hibernated", "hibernation_budget_bytes", "held_samples")

    def __init__(self, line: Mapping[str, Any], address: str, vms: list[RecordedVm], saved: list[RecordedVm],
                 budget_bytes: int) -> None:
        self.node_id, self.agent_address = line["node"], address
        self.cpus, self.memory_mib, self.images = line["cpus"], line["memory_mib"], tuple(line["images"])
        self.foreground_cpu_cores, self.min_memory_mib = line["fg"], line["min_memory_mib"]
        self.agent_version, self.vms, self.hibernated = "recorded", vms, saved
        self.hibernation_budget_bytes = line.get("hibernation_budget_bytes", budget_bytes)
        # the reports left out as repeats since the node's last recorded one: each was a foreground
        # sample live, taken here at the last recorded figure (as a simulated report's held samples)
        self.held_samples = line.get("skipped", 0)


LEFT_OUT_KEPT = 10   # reported VMs left out, kept to say which


class RecordedReports:
    """The recorded reports' VMs, each renamed to the replay's lease of the same key: the live
    VM of key K is, in the replay, the VM of the lease the replay's books made for K (while the
    two runs agree, the very same name). A VM whose key the replay made on another node, or never
    made, is left out (counted): adopting it would book a VM the replay's agents never launched.
    A VM no live lease explained (an adoption, live) is passed on as it is."""

    def __init__(self, recording: Recording) -> None:
        self.live_keys = recording.lease_keys
        self.made: dict[str, tuple[str, str, str]] = {}   # key -> (VM name, lease id, node) in the replay
        self.left_out = 0
        self.left_out_first: list[dict[str, Any]] = []   # the first LEFT_OUT_KEPT, each with why

    def made_lease(self, key: str, lease: Lease) -> None:
        self.made.setdefault(key, (lease.vm_name, lease.lease_id, lease.node_id))

    def report(self, line: Mapping[str, Any], address: str, images: Mapping[str, str], budget_bytes: int
               ) -> RecordedReport:
        """The report of `line`; `images`: the image of each role's VMs (the recording keeps none)."""
        vms = [vm for name, lease_id, role, _state, vcpus, memory_mib, cpu, *guest in line["vms"]
               if (vm := self._renamed(line, name, lease_id, role, vcpus, memory_mib, cpu, images.get(role, ""),
                                       guest))]
        # the books read these as matching.SavedVm (hibernated, no CPU figure): reported_vms wraps them
        saved = [vm for name, lease_id, vcpus, memory_mib, image in line.get("saved", ())
                 if (vm := self._renamed(line, name, lease_id, "backfill", vcpus, memory_mib, 0.0, image))]
        return RecordedReport(line, address, vms, saved, budget_bytes)

    def _renamed(self, line: Mapping[str, Any], name: str, lease_id: str, role: str, vcpus: int, memory_mib: int,
                 cpu: float, image: str, guest: Sequence[Any] = ()) -> RecordedVm | None:
        """The reported VM as the replay names it, or None (left out, counted)."""
        key = self.live_keys.get(lease_id)
        if key is not None and not key.startswith("adopted:"):   # an adoption, live: passed on as it is
            made = self.made.get(key)
            if made is None or made[2] != line["node"]:
                self._leave_out(line, key, "the replay never made it" if made is None else
                                f"the replay made it on {made[2]}")
                return None
            name, lease_id = made[0], made[1]
        return RecordedVm(name, lease_id, role, vcpus, memory_mib, cpu, image, guest)

    def _leave_out(self, line: Mapping[str, Any], key: str, why: str) -> None:
        self.left_out += 1
        if len(self.left_out_first) < LEFT_OUT_KEPT:
            self.left_out_first.append(dict(t=round(line["t"], 6), node=line["node"], key=key, why=why))


# -- the simulation -------------------------------------------------------------------------------

def _live_ids(recording: Recording, counted: Callable[[str], str]) -> Callable[[str], str]:
    """The books' lease ids for a replay: the live run's own, role by role in the order it made
    them (then counted ones). The victim policies break ties (two VMs launched at one instant) by
    lease id: with ids of its own the replay chose the other VM of a tie, at random."""
    made: dict[str, list[str]] = {"on_demand": [], "backfill": []}
    for line in recording.lines:
        if line["kind"] == "lease" and line.get("lease") and line.get("role") in made:
            made[line["role"]].append(line["lease"])
    live = {"od": iter(made["on_demand"]), "bf": iter(made["backfill"])}

    def new_id(prefix: str) -> str:
        return next(live.get(prefix, iter(())), None) or counted(prefix)
    return new_id


class ReplaySimulation(Simulation):
    """The simulator on a recording's inputs (the module's doc), recording its own decisions."""

    def __init__(self, recording: Recording, settings: SimSettings, agents: AgentModel | None,
                 keys: LeaseKeys, jobs: str, reports: str = "recorded") -> None:
        for what, value in (("jobs", jobs), ("reports", reports)):
            if value not in ("recorded", "simulated"):
                raise ValueError(f"{what} {value!r}: recorded or simulated")
        self.recording = recording
        self.keys = keys
        self.jobs = jobs
        self.recorded_reports = RecordedReports(recording) if reports == "recorded" else None
        self.out = io.StringIO()
        self.recorder = Recorder(self.out, 2**62, clock=lambda: self.now)
        self.recorder.keys = keys
        requests = [OnDemandRequest(r["t"], r["vcpus"], r["memory_mib"], None, r["owner"], r["rid"])
                    for r in recording.requests]
        super().__init__(requests, settings, recording.backfill, recording.ledger,
                         reserve_settings=recording.reserves, agents=agents)
        # the live nodes by their own ids (placement breaks ties by node id), each joining when
        # its first report came
        self.nodes = {n.node_id: SimNode(n.node_id, n.cpus, n.memory_mib, n.images) for n in recording.nodes}
        self.held = HeldRoom(list(self.nodes.values()))
        self.absent = set(self.nodes)
        self.agents.bind(settings, list(self.nodes))
        self.ledger.new_id = _live_ids(recording, self.ledger.new_id)
        self.ledger.tenancy_settings = recording.tenancy
        self.ledger.set_tenants(recording.tenants)
        self.ledger.load_goals_done(recording.goals_done)
        self.released_unknown: list[tuple[float, str]] = []   # releases of leases the replay never made
        self._periodic = False   # the simulator's own periodic jobs started (jobs="simulated")
        self._schedule()

    def _schedule(self) -> None:
        self._periodic = self.recording.backfill.enabled   # run() starts them then
        self.recorder.started(self.ledger.settings, self.ledger.backfill, self.ledger.reserve_settings.as_dict(),
                              self.recording.tenants, self.recording.tenancy, self.ledger.goals_done())
        for node in self.recording.nodes:
            self.at(node.at, self._scripted, Scripted(node.at, "join", node.node_id))
        for at, config in self.recording.backfill_changes:
            self.at(at, self._set_backfill, config)
        for line in self.recording.drains:   # before the tenants line and the releases of the same instant
            self.at(line["t"], self._set_draining, line)
        for line in self.recording.tenant_changes:
            self.at(line["t"], self._set_tenants, line)
        for line in self.recording.releases:
            self.at(line["t"], self._recorded_release, line)
        if self.jobs == "recorded":
            self.fill_at = math.inf   # never None: the engine schedules no fill of its own
            for line in self.recording.jobs:
                self.at(line["t"], self._recorded_job, line)
        else:   # the controller's goals job, on the simulator's clock (controller/cli.py)
            self.at(GOAL_INTERVAL_S, self._goals_job)
        if self.recorded_reports is not None:
            for line in self.recording.reports:
                self.at(line["t"], self._recorded_report, line)

    # The simulated nodes' own reports, when the recorded ones come instead
    def report(self, node: SimNode) -> None:
        if self.recorded_reports is None:
            super().report(node)

    def _cpu_report(self, node_id: str) -> None:
        if self.recorded_reports is None:
            super()._cpu_report(node_id)

    def _recorded_report(self, line: Mapping[str, Any]) -> None:
        node = self.nodes[line["node"]]
        images = {"on_demand": self.settings.on_demand_image, "backfill": self.ledger.backfill.image}
        report = self.recorded_reports.report(line, node.address, images, self.budget_mib(node) << 20)
        self.apply(self.ledger.report(report, self.now))

    # The engine's own periodic jobs, when the recorded ones run instead
    def _periodic_fill(self, arg: Any) -> None:
        if self.jobs == "simulated":
            super()._periodic_fill(arg)

    def _evaluate(self, arg: Any) -> None:
        if self.jobs == "simulated":
            super()._evaluate(arg)

    def _goals_job(self, _arg: Any = None) -> None:
        self.apply(self.ledger.size_goals(self.now))   # as live: it also releases what no goal steers
        self.at(self.now + GOAL_INTERVAL_S, self._goals_job)

    def _recorded_job(self, line: Mapping[str, Any]) -> None:
        name = line["name"]
        if name == "fill":
            self.apply(self.ledger.fill(self.now))
        elif name == "select":
            self.apply(self.ledger.select(self.now, evaluation=True))
        elif name == "goals":
            self.apply(self.ledger.size_goals(self.now))
        elif name == "tick":
            self.apply(self._tick(line.get("silent", {})))

    def _tick(self, silent: Mapping[str, str]) -> list:
        """A recorded tick. The nodes it found suspect or down (its events) are found so here first,
        as its liveness pass did; the replay's own timers stay far beyond the run, as in every
        simulation, since the recorder leaves repeated reports out (a gap between recorded
        reports is not a silence live)."""
        effects: list = []
        for node_id, event in silent.items():
            node = self.ledger.nodes.get(node_id)
            verdict = event.removeprefix("node.")
            # the recorded verdict is the next step for the node as the replay's books have it
            if node is not None and liveness_verdict(node.state, math.inf, 0.0, 0.0) == verdict:
                effects += self.ledger.node_found(node_id, verdict, self.now)
        return effects + self.ledger.tick(self.now)

    def _set_backfill(self, config: BackfillConfig) -> None:
        self.ledger.backfill = config
        self.recorder.backfill(config)
        if self.jobs == "simulated" and config.enabled and not self._periodic:
            # backfill turned on after the start: the engine's periodic jobs begin now (as the
            # live launcher's fill runs at once when backfill is set)
            self._periodic = True
            self.at(self.now, self._periodic_fill)
            self.at(self.now + self.settings.selection_interval_seconds, self._evaluate)

    def _set_tenants(self, line: Mapping[str, Any]) -> None:
        """A `tenants` line: as the service's _tenants_changed does."""
        begins, sized = line.get("goal_begins") or None, bool(line.get("sized"))
        effects = self.ledger.tenants_changed(line["tenants"], begins, sized, self.now)
        self.recorder.tenants(line["tenants"], begins, sized)
        self.apply(effects)
        if self.jobs == "simulated":   # the launcher grants by the tenants now (recorded: its fill line)
            self.ask_fill()

    def _set_draining(self, line: Mapping[str, Any]) -> None:
        """A `drain` line: as the service's delete_tenant marks (and unmarks) the tenant it drains."""
        (self.ledger.draining.add if line["draining"] else self.ledger.draining.discard)(line["tenant"])
        self.recorder.drain(line["tenant"], line["draining"])

    def _recorded_release(self, line: Mapping[str, Any]) -> None:
        lease_id = self.keys.leases.get(line["key"])
        if lease_id is None or lease_id not in self.ledger.leases:
            self.released_unknown.append((self.now, line["key"]))
            return
        self.recorder.release(self.ledger.leases[lease_id], line["force"])
        self._release(lease_id, force=line["force"])

    def _arrive(self, index: int) -> None:
        request = self.requests[index]
        line = self.recording.requests[index]
        self.recorder.request(request.vcpus, request.memory_mib, line["image"], request.owner, request.request_id)
        super()._arrive(index)

    # keys before any call is made (the agents read them), decisions after
    def commit(self, writes: Sequence[Write]) -> None:
        for write in writes:
            for lease in write.created:
                key = self.keys.made(lease)
                if self.recorded_reports is not None:
                    self.recorded_reports.made_lease(key, lease)
        super().commit(writes)

    def apply(self, effects: list) -> None:
        super().apply(effects)
        if effects:
            self.recorder.effects(effects)

    def recorded(self) -> list[dict[str, Any]]:
        """The replay's own recording, its times already relative."""
        return [json.loads(line) for line in self.out.getvalue().splitlines()]


def sim_settings(recording: Recording, **more: Any) -> SimSettings:
    """Settings for a run on the recording's pool: its nodes' sizes, its span and a margin."""
    sizes: dict[tuple[int, int], int] = defaultdict(int)
    for node in recording.nodes:
        sizes[(node.cpus, node.memory_mib)] += 1
    images = {r["image"] for r in recording.requests}
    return SimSettings(nodes=len(recording.nodes), pool=tuple(NodeGroup(n, c, m) for (c, m), n in sizes.items()),
                       days=(recording.span + REPLAY_MARGIN_S) / DAY, progress_seconds=0.0,
                       on_demand_image=images.pop() if len(images) == 1 else "tiny", **more)


def replay(recording: Recording, jobs: str = "recorded", reports: str = "recorded"
           ) -> tuple[ReplaySimulation, list[dict[str, Any]]]:
    """The recording through the simulator with the live agents' answers (and by default their
    reports and the live periodic jobs); returns the run and its own recording (the same format,
    times relative to its start)."""
    if len({r["image"] for r in recording.requests}) > 1:
        raise ValueError("the recording's requests name several images: replay asks with one")
    settings = sim_settings(recording)
    keys = LeaseKeys()
    sim = ReplaySimulation(recording, settings, RecordedAgents(settings, recording, keys), keys, jobs, reports)
    sim.run()
    return sim, sim.recorded()


# -- prediction -----------------------------------------------------------------------------------

MIN_SECONDS = 0.001   # the modelled agents' smallest time (a lone stop on test:/// takes about 6 ms)
MAX_JITTER = 1.98    # the ideal agents' launch times: launch_seconds x (1 +- jitter/2), above 0


def model_settings(recording: Recording, model: str, report_seconds: float) -> dict[str, Any]:
    """SimSettings for the simulator's own agents, fitted to the recording (answer_figures):
    the ideal agents' launch time is the on-demand launches' median, spread uniformly
    (launch_jitter) so that its top reaches their p99 as near as it can, and their stop time the
    clean stops' median; the modelled agents' lognormal launch and stop times have the recorded
    median and p99 (backfill launches those of the refills: measured on three 600-s recordings,
    drawing them from the on-demand launches' times left the prediction's p99 wait 15 % under
    live where victims were still starting, their stops waiting for launches queued on the node),
    their launch failures the recorded share, their report interval `report_seconds`."""
    f = answer_figures(recording)
    p50, p99 = max(f["launch_p50_s"], MIN_SECONDS), max(f["launch_p99_s"], f["launch_p50_s"], MIN_SECONDS)
    settings: dict[str, Any] = dict(agents=model, launch_seconds=p50,
                                    launch_jitter=min(max((p99 / p50 - 1) / 0.49, 0.0), MAX_JITTER),
                                    stop_seconds=max(f["stop_p50_s"], MIN_SECONDS))
    if model == "modelled":
        refill_p50 = max(f["refill_launch_p50_s"], MIN_SECONDS) if f["refill_launch_p50_s"] else 0.0
        refill_p99 = max(f["refill_launch_p99_s"], refill_p50) if refill_p50 else 0.0
        fitted = dict(launch_failure=f["launch_failure_share"], launch_p50_seconds=p50, launch_p99_seconds=p99,
                      backfill_launch_p50_seconds=refill_p50, backfill_launch_p99_seconds=refill_p99,
                      stop_p50_seconds=max(f["stop_p50_s"], MIN_SECONDS),
                      stop_p99_seconds=max(f["stop_p99_s"], f["stop_p50_s"], MIN_SECONDS),
                      report_seconds=report_seconds, agent_parallel_stops=float(f["agent_parallel_stops"]),
                      fill_delay_seconds=f["fill_delay_s"])
        known = getattr(getattr(agents_module, "ModelledParams", None), "RANGES", fitted)
        settings["agent_params"] = tuple((k, v) for k, v in fitted.items() if k in known)
    return settings


def predict(recording: Recording, model: str | None = None, report_seconds: float = 2.0, seed: int = 0
            ) -> tuple[ReplaySimulation, list[dict[str, Any]]]:
    """The same requests, releases and node arrivals with the simulator's own agents (`model`:
    "modelled" if it exists, else "ideal"; fitted by model_settings, `report_seconds`: the live
    agents' report interval; `seed`: what the model's draws are hashed with) and its own
    schedule of jobs."""
    model = model or ("modelled" if "modelled" in MODELS else "ideal")
    settings = sim_settings(recording, seed=seed, **model_settings(recording, model, report_seconds))
    keys = LeaseKeys()
    sim = ReplaySimulation(recording, settings, None, keys, "simulated", reports="simulated")
    sim.run()
    return sim, sim.recorded()

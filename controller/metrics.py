"""The controller's Prometheus metrics (issue 27).

Counters and histograms come from the audit events as they are committed (`observe`), so they
say what the audit log says: a request placed or rejected, a victim preempted and how it stopped,
the work lost. Gauges are read from the books when Prometheus scrapes (`PoolFigures`). Label sets
are bounded: nodes and reserves are made by admins, reasons are codes (policy.REJECTION_CODES),
paths, policies, roles and states are the books' own words, and there is no per-VM label.
Counters start at 0 when the controller starts; Prometheus' rate() and increase() expect that.
"""
from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from .core.policy import REJECTION_CODES
from .core.records import INTERRUPTIONS, Audit, Policy, Size

# seconds: a decision takes milliseconds; a start or a stop seconds to a minute or two
DECISION_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0)
START_BUCKETS = (0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0)
NODE_STATES = ("up", "suspect", "down")


@dataclass(frozen=True)
class PoolFigures:
    """What the gauges read, taken from the books under their lock at scrape time."""
    nodes: dict[str, int] = field(default_factory=dict)                  # state -> nodes
    node_states: dict[str, str] = field(default_factory=dict)            # node id -> its state
    leases: dict[tuple[str, str], int] = field(default_factory=dict)     # (role, state) -> leases
    allocated_vcpus: dict[str, int] = field(default_factory=dict)        # role -> vCPUs held
    allocated_memory_mib: dict[str, int] = field(default_factory=dict)   # role -> MiB held
    capacity_vcpus: int = 0            # of the nodes up
    capacity_memory_mib: int = 0
    foreground_cpu_cores: dict[str, float] = field(default_factory=dict)   # "on_demand" / "host_other"
    backfill_cpu_cores: float = 0.0
    reserved_nodes: int = 0
    waiting_requests: int = 0
    selected_nodes: int = 0
    backfill_enabled: bool = False
    # tenant -> (what its live VMs hold, its lower bound, its upper bound or None: unbounded)
    tenants: dict[str, tuple[Size, Size, Size | None]] = field(default_factory=dict)


class ControllerMetrics:
    """The controller's own metrics on a registry of their own (`collectors()` for serving)."""

    def __init__(self, figures: Callable[[], PoolFigures]) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter("gleaner_controller_requests", "On-demand requests decided, by outcome "
                                "(placed, rejected) and, for rejections, why (a code)", ["outcome", "reason"],
                                registry=r)
        self.queued = Counter("gleaner_controller_requests_queued", "On-demand requests that found no room at once "
                              "and waited for it (the wait window)", registry=r)
        self.preemptions = Counter("gleaner_controller_preemptions", "Backfill VMs chosen as victims of an on-demand "
                                   "request, by the request's path, the termination policy and what the victim is "
                                   "asked (hibernate or terminate)", ["path", "policy", "interruption"], registry=r)
        self.victim_stops = Counter("gleaner_controller_victim_stops", "Victims stopped, by how: hibernated (work "
                                    "kept), clean_shutdown, destroyed_after_grace, destroyed_forced, already_stopped",
                                    ["how"], registry=r)
        self.lost_work = Counter("gleaner_controller_lost_work_vcpu_seconds", "Backfill work thrown away, in "
                                 "vCPU-seconds (run time x vCPUs): victims terminated, saved VMs discarded, VMs "
                                 "drained for a reserve", ["cause"], registry=r)
        self.launches = Counter("gleaner_controller_launches", "VMs the agents launched, by role", ["role"],
                                registry=r)
        self.launch_failures = Counter("gleaner_controller_launch_failures", "Launches that failed, by role",
                                       ["role"], registry=r)
        self.stop_failures = Counter("gleaner_controller_stop_failures", "Stops (or saves) an agent could not "
                                     "carry out (asked again later)", registry=r)
        self.resumes = Counter("gleaner_controller_resumes", "Hibernated backfill VMs resumed", registry=r)
        self.ended = Counter("gleaner_controller_vms_ended", "VMs that ended otherwise than by a preemption, "
                             "by event: released, recycled, drained, discarded, lost, gone", ["event"], registry=r)
        self.reports = Counter("gleaner_controller_reports", "Node reports, by what became of them: applied, "
                               "refused (out of bounds), over_budget (dropped)", ["result"], registry=r)
        self.node_changes = Counter("gleaner_controller_node_transitions", "Nodes changing state (joined, up, "
                                    "suspect, down, rejoined)", ["to"], registry=r)
        self.decision = Histogram("gleaner_controller_decision_seconds", "Time the controller took to decide an "
                                  "on-demand request (placement and victims)", buckets=DECISION_BUCKETS, registry=r)
        self.start = Histogram("gleaner_controller_on_demand_start_seconds", "From an on-demand request's placement "
                               "to its VM running (the agent's launch answered)", buckets=START_BUCKETS, registry=r)
        self.victim_stop = Histogram("gleaner_controller_victim_stop_seconds", "How long a victim's stop or save "
                                     "took at its agent", buckets=START_BUCKETS, registry=r)
        self._figures = figures
        self._zeroes()
        r.register(_PoolGauges(figures))

    def _zeroes(self) -> None:
        """Every label set known ahead shown from the start at 0: increase() and rate() count a
        series' first value as its start, so one that first appeared at 1 would show no increase
        (an alert on the first rejection would never fire)."""
        self.requests.labels("placed", "")
        for code in REJECTION_CODES:
            self.requests.labels("rejected", code)
        for role in ("on_demand", "backfill"):
            self.launches.labels(role)
            self.launch_failures.labels(role)
        for cause in ("preempted", "discarded", "drained"):
            self.lost_work.labels(cause)
        for event in _ENDED:
            self.ended.labels(event.removeprefix("vm."))
        for path in ("instant", "after_victims"):   # a request that preempts takes one of the two
            for policy in Policy:
                for interruption in INTERRUPTIONS:
                    self.preemptions.labels(path, policy.value, interruption)
        for how in ("hibernated", "clean_shutdown", "destroyed_after_grace", "destroyed_forced", "already_stopped"):
            self.victim_stops.labels(how)
        for result in ("applied", "refused", "over_budget"):
            self.reports.labels(result)
        for to in _NODE_TO:
            self.node_changes.labels(to)

    # -- from the audit events -------------------------------------------------------------------

    def observe(self, event: Audit) -> None:
        """An audit event just committed: count what it says."""
        handler = _HANDLERS.get(event.kind)
        if handler is not None:
            handler(self, event.detail)
        elif event.kind in _ENDED:
            self.ended.labels(event.kind.removeprefix("vm.")).inc()
            lost = event.detail.get("work_lost_vcpu_seconds")
            if lost:
                self.lost_work.labels(event.kind.removeprefix("vm.")).inc(float(lost))
        elif event.kind.startswith("node.") and event.kind.removeprefix("node.") in _NODE_TO:
            self.node_changes.labels(event.kind.removeprefix("node.")).inc()

    def report(self, result: str) -> None:
        self.reports.labels(result).inc()

    def _placed(self, detail) -> None:
        self.requests.labels("placed", "").inc()
        _observe_ms(self.decision, detail.get("decided_ms"))

    def _rejected(self, detail) -> None:
        code = detail.get("reason_code", "other")
        self.requests.labels("rejected", code if code in REJECTION_CODES else "other").inc()
        _observe_ms(self.decision, detail.get("decided_ms"))

    def _preempting(self, detail) -> None:
        self.preemptions.labels(str(detail.get("path", "")), str(detail.get("policy", "")),
                                str(detail.get("interruption", "terminate"))).inc()

    def _preempted(self, detail) -> None:
        self.victim_stops.labels(str(detail.get("stopped", "unknown"))).inc()
        _observe(self.victim_stop, detail.get("seconds"))
        lost = detail.get("work_lost_vcpu_seconds")
        if lost:
            self.lost_work.labels("preempted").inc(float(lost))

    def _hibernated(self, detail) -> None:
        self.victim_stops.labels("hibernated").inc()
        _observe(self.victim_stop, detail.get("seconds"))

    def _launched(self, detail) -> None:
        role = str(detail.get("role", ""))
        self.launches.labels(role).inc()
        if role == "on_demand":
            _observe(self.start, detail.get("seconds"))

    def _launch_failed(self, detail) -> None:
        self.launch_failures.labels(str(detail.get("role", "backfill"))).inc()


def _observe(histogram: Histogram, seconds) -> None:
    if isinstance(seconds, (int, float)) and seconds >= 0:
        histogram.observe(float(seconds))


def _observe_ms(histogram: Histogram, ms) -> None:
    if isinstance(ms, (int, float)) and ms > 0:   # 0: not timed (a queued request placed later)
        histogram.observe(float(ms) / 1000)


_HANDLERS: dict[str, Callable[[ControllerMetrics, dict], None]] = {
    "request.placed": ControllerMetrics._placed,
    "request.rejected": ControllerMetrics._rejected,
    "request.queued": lambda m, _d: m.queued.inc(),
    "vm.preempting": ControllerMetrics._preempting,
    "vm.preempted": ControllerMetrics._preempted,
    "vm.hibernated": ControllerMetrics._hibernated,
    "vm.launched": ControllerMetrics._launched,
    "vm.launch_failed": ControllerMetrics._launch_failed,
    "vm.stop_failed": lambda m, _d: m.stop_failures.inc(),
    "vm.resumed": lambda m, _d: m.resumes.inc(),
}
_ENDED = frozenset({"vm.released", "vm.recycled", "vm.drained", "vm.discarded", "vm.lost", "vm.gone"})
_NODE_TO = frozenset({"joined", "up", "suspect", "down", "rejoined"})


class _PoolGauges(Collector):
    """The books at scrape time (one PoolFigures read)."""

    def __init__(self, figures: Callable[[], PoolFigures]) -> None:
        self.figures = figures

    def collect(self) -> Iterator[Metric]:
        f = self.figures()
        nodes = GaugeMetricFamily("gleaner_controller_nodes", "Nodes by state", labels=["state"])
        for state in NODE_STATES:
            nodes.add_metric([state], f.nodes.get(state, 0))
        yield nodes
        each = GaugeMetricFamily("gleaner_controller_node_state", "1 for each node's current state (up, suspect, "
                                 "down): alerts name the node", labels=["node", "state"])
        for node_id, state in sorted(f.node_states.items()):
            each.add_metric([node_id, state], 1)
        yield each
        leases = GaugeMetricFamily("gleaner_controller_leases", "Live leases by role and state (hibernated: "
                                   "saved to their node's disk, holding nothing)", labels=["role", "state"])
        for (role, state), count in sorted(f.leases.items()):
            leases.add_metric([role, state], count)
        yield leases
        yield _by_role("gleaner_controller_allocated_vcpus", "vCPUs the leases hold, by role", f.allocated_vcpus)
        yield _by_role("gleaner_controller_allocated_memory_bytes", "Memory the leases hold, by role",
                       {role: mib * 2**20 for role, mib in f.allocated_memory_mib.items()})
        yield GaugeMetricFamily("gleaner_controller_capacity_vcpus", "CPUs of the nodes up", value=f.capacity_vcpus)
        yield GaugeMetricFamily("gleaner_controller_capacity_memory_bytes", "Memory of the nodes up",
                                value=f.capacity_memory_mib * 2**20)
        used = GaugeMetricFamily("gleaner_controller_cpu_used_cores", "CPU the nodes up report in use: on-demand "
                                 "VMs, the hosts' other load (foreground both), and backfill", labels=["use"])
        for use in ("on_demand", "host_other"):
            used.add_metric([use], f.foreground_cpu_cores.get(use, 0.0))
        used.add_metric(["backfill"], f.backfill_cpu_cores)
        yield used
        yield GaugeMetricFamily("gleaner_controller_reserved_nodes", "Nodes kept free of backfill by reserves",
                                value=f.reserved_nodes)
        yield GaugeMetricFamily("gleaner_controller_waiting_requests", "On-demand requests waiting for room",
                                value=f.waiting_requests)
        yield GaugeMetricFamily("gleaner_controller_selected_nodes", "Nodes selected as volunteers for backfill",
                                value=f.selected_nodes)
        yield GaugeMetricFamily("gleaner_controller_backfill_enabled", "1 if backfill is enabled",
                                value=1 if f.backfill_enabled else 0)
        yield from _tenant_gauges(f.tenants)


def _tenant_gauges(tenants: dict[str, tuple[Size, Size, Size | None]]) -> Iterator[Metric]:
    """Per tenant (admin-made, so a bounded label set): what it holds against its two bounds. An
    unbounded upper bound (the built-in tenants') has no sample."""
    what = (("allocated", "What the tenant's live VMs hold (on-demand VMs; backfill for the batch tenant "
                          "that owns it)"),
            ("lower", "The tenant's lower bound: capacity guaranteed to it"),
            ("upper", "The tenant's upper bound, never passed (no sample: unbounded)"))
    for index, (name, help_text) in enumerate(what):
        vcpus = GaugeMetricFamily(f"gleaner_controller_tenant_{name}_vcpus", f"{help_text}, in vCPUs", labels=["tenant"])
        memory = GaugeMetricFamily(f"gleaner_controller_tenant_{name}_memory_bytes", f"{help_text}, in bytes",
                                   labels=["tenant"])
        for tenant, sizes in sorted(tenants.items()):
            size = sizes[index]
            if size is not None:
                vcpus.add_metric([tenant], size.vcpus)
                memory.add_metric([tenant], size.memory_mib * 2**20)
        yield vcpus
        yield memory


def _by_role(name: str, help_text: str, values: dict[str, float]) -> GaugeMetricFamily:
    family = GaugeMetricFamily(name, help_text, labels=["role"])
    for role in ("on_demand", "backfill"):
        family.add_metric([role], values.get(role, 0))
    return family

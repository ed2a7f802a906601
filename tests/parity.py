"""One short event sequence for the parity test (issue 10, item 4), and how its outcome is read,
the same way from the simulator's books and from the live controller's.

The sequence: three nodes of one size join one after another, each filled by one backfill VM
as big as the node; on-demand requests arrive one at a time (one preempts, one fits beside it,
one preempts elsewhere, one is too big for any node); then their VMs are released one at a time
and backfill refills the freed nodes.

Each step waits for the previous one to settle, and no two backfill VMs that a decision could
tell apart are launched by the same fill: which of two VMs launched side by side is "younger"
is a race in the live controller (its launch calls run on a thread pool), not a decision.
"""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

from controller.config import ControllerConfig, ledger_settings
from controller.core.records import BackfillConfig
from controller.sim.engine import DAY, Scripted, SimSettings, Simulation
from controller.sim.traces import OnDemandRequest

NODES = 3
STEP_SECONDS = 100.0     # simulated time between steps: every launch and stop is long over by then
# one backfill VM fills a 16-vCPU node; its victims are terminated (the scenario was worked out so)
BACKFILL = dict(enabled=True, vcpus=16, memory_mb=128, interruption="terminate")
SETTINGS = dict(use_prediction=False)   # placement by allocation only (the live host's CPU is not the sim's)


@dataclass(frozen=True)
class Step:
    action: str          # join | request | release
    arg: str             # node index (join) or request id
    vcpus: int = 0
    memory_mib: int = 0


STEPS = (
    Step("join", "0"), Step("join", "1"), Step("join", "2"),
    Step("request", "od-1", 4, 512),     # every node full of backfill: preempts the youngest (node 2's)
    Step("request", "od-2", 4, 512),     # fits beside od-1 in the room its victim left
    Step("request", "od-3", 16, 512),    # a whole node: preempts node 1's VM, younger than node 0's
    Step("request", "od-4", 17, 512),    # larger than any node: rejected
    Step("release", "od-1"), Step("release", "od-2"),   # node 2 empty again: refilled
    Step("release", "od-3"),                            # node 1 refilled
)

# What the sequence gives, worked out by hand from the policy (most_recent, best fit).
EXPECTED = dict(
    placements={"od-1": 2, "od-2": 2, "od-3": 1, "od-4": None},
    victims={"od-1": [(2, 1)], "od-2": [], "od-3": [(1, 1)], "od-4": []},
    launches={0: 1, 1: 2, 2: 2},
)


@dataclass(frozen=True)
class LeaseFacts:
    """What the outcome is read from, for one lease (the sim's Lease or the live proto Lease)."""
    lease_id: str
    role: str
    node_id: str
    created_at: float
    launched: bool


def outcome(leases: Iterable[LeaseFacts], answers: dict[str, tuple[str | None, list[str]]],
            node_ids: list[str]) -> dict:
    """Placements (request -> node index, None if not placed), victims (request -> [(node index,
    launch number on that node)]) and launches (node index -> backfill VMs launched there).
    `answers`: request id -> (the lease it got or None, its victims' lease ids). Nodes are named
    by index in `node_ids` (sorted), so the live pool's names and the sim's compare."""
    index = {node_id: i for i, node_id in enumerate(sorted(node_ids))}
    leases = list(leases)
    node_of = {l.lease_id: index[l.node_id] for l in leases}
    order: dict[str, tuple[int, int]] = {}
    per_node: dict[int, int] = defaultdict(int)
    for lease in sorted((l for l in leases if l.role == "backfill"), key=lambda l: (l.created_at, l.lease_id)):
        if lease.launched:
            per_node[index[lease.node_id]] += 1
            order[lease.lease_id] = (index[lease.node_id], per_node[index[lease.node_id]])
    return dict(
        placements={r: (node_of[lease_id] if lease_id else None) for r, (lease_id, _) in sorted(answers.items())},
        victims={r: [order[v] for v in victims] for r, (_, victims) in sorted(answers.items())},
        launches=dict(sorted(per_node.items())),
    )


def run_sim(node_cpus: int, node_memory_mib: int, config: ControllerConfig | None = None) -> tuple[Simulation, dict]:
    """The sequence through the simulator: STEP_SECONDS of simulated time between steps."""
    config = config or ControllerConfig(**SETTINGS)
    requests, script = [], []
    for k, step in enumerate(STEPS):
        at = k * STEP_SECONDS
        if step.action == "request":
            requests.append(OnDemandRequest(at, step.vcpus, step.memory_mib, None, "parity", step.arg))
        else:
            script.append(Scripted(at, step.action, f"n{step.arg}" if step.action == "join" else step.arg))
    settings = SimSettings(nodes=NODES, node_cpus=node_cpus, node_memory_mib=node_memory_mib,
                           days=(len(STEPS) + 1) * STEP_SECONDS / DAY, progress_seconds=0.0,
                           selection_interval_seconds=config.selection_interval_seconds)
    sim = Simulation(requests, settings, BackfillConfig(**BACKFILL), ledger_settings(config), script=script)
    sim.run()
    leases = [LeaseFacts(l.lease_id, l.role, l.node_id, l.created_at, l.launched_at is not None)
              for l in sim.store.leases.values()]
    answers = {r.request_id: (r.lease_id if r.outcome == "placed" else None, list(r.victims))
               for r in sim.store.requests.values()}
    return sim, outcome(leases, answers, list(sim.nodes))

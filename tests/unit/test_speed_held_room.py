"""The simulator's HeldRoom notes the leases written and takes their last versions into its sums
only when it is read (a rejection): every read sees every lease written before it, as sums kept
at each write did. Checked against sums made afresh from each lease's last version."""
from __future__ import annotations

import random
from types import SimpleNamespace

from controller.core.records import BLANK_LEASE, HIBERNATED, HOLDS_ALL, HOLDS_MEMORY, ZERO, Size, replace
from controller.sim.world import HeldRoom

STATES = sorted(HOLDS_ALL | HOLDS_MEMORY | {"ended", "failed", HIBERNATED})


def afresh(last: dict, node_ids: list[str]) -> dict[str, tuple[int, int, int]]:
    """Per node: (vCPUs, MiB) held by leases other than backfill, and backfill leases holding room."""
    sums = {n: [0, 0, 0] for n in node_ids}
    for lease in last.values():
        vcpus, memory = (lease.vcpus, lease.memory_mib) if lease.state in HOLDS_ALL else \
            (0, lease.memory_mib) if lease.state in HOLDS_MEMORY else (0, 0)
        if not (vcpus or memory):
            continue
        if lease.role == "backfill":
            sums[lease.node_id][2] += 1
        else:
            sums[lease.node_id][0] += vcpus
            sums[lease.node_id][1] += memory
    return {n: tuple(v) for n, v in sums.items()}


def test_every_read_sees_the_last_version_of_every_lease_written_before_it() -> None:
    draws = random.Random(3)
    node_ids = [f"n{i}" for i in range(5)]
    room = HeldRoom([SimpleNamespace(node_id=n, cpus=16, memory_mib=65536) for n in node_ids])
    books = {n: SimpleNamespace(state="up", capacity=Size(16, 65536), unexplained=ZERO) for n in node_ids}
    last: dict = {}
    reads = 0
    for step in range(4000):
        lease_id = f"l{draws.randrange(60)}"
        was = last.get(lease_id)
        lease = replace(BLANK_LEASE, lease_id=lease_id, role=was.role if was else draws.choice(("backfill", "on_demand")),
                        node_id=was.node_id if was else draws.choice(node_ids), vcpus=was.vcpus if was else
                        draws.choice((1, 2, 4)), memory_mib=was.memory_mib if was else draws.choice((128, 2048, 8192)),
                        state=draws.choice(STATES))
        room.hold(lease)
        last[lease_id] = lease
        if draws.random() < 0.05:   # a rejection reads the sums
            reads += 1
            want = Size(draws.choice((2, 8, 16)), draws.choice((4096, 32768)))
            expected = afresh(last, node_ids)
            assert room.backfill_held_room(want, books) == any(
                held > 0 and want.vcpus <= 16 - vcpus and want.memory_mib <= 65536 - memory
                for vcpus, memory, held in expected.values())
            got = {n: (room.fixed_vcpus[i], room.fixed_memory[i], room.backfill_held[i]) for i, n in enumerate(node_ids)}
            assert got == expected, step
    assert reads > 100

"""What durability costs a decision: commit latency of the controller's store under
synchronous=NORMAL and synchronous=FULL (both in WAL mode), side by side.

    python -m tests.bench.store_durability [--commits 300] [--rounds 3] [--dir /var/lib/gleaner-test]

Each commit is the Write a preemption makes (controller/core/ledger.py): a new on-demand lease,
two victims updated, the request record and three audit events, in one transaction, through
Store.apply. Timed per commit from the call until it returns (the commit is on disk as far as
the setting promises). The two settings alternate, --rounds times, on stores in --dir (the
disk the controller's state lives on); p50/p99 are over all commits of a setting.
Prints one JSON object.
"""
from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from controller import store as store_module
from controller.core.records import Audit, Lease, RequestRecord, Write
from controller.store import Store


def preemption_write(i: int) -> Write:
    now = time.time()
    lease = Lease(f"od-{i}", "on_demand", "n1", f"vm-od-{i}", 1, 128, "tiny", "bench", "starting", now, deadline=now + 60)
    victims = tuple(Lease(f"bf-{i}-{k}", "backfill", "n1", f"vm-bf-{i}-{k}", 1, 128, "tiny", "backfill", "on_notice",
                          now - 100, launched_at=now - 100, deadline=now + 90) for k in range(2))
    record = RequestRecord(f"r-{i}", 1, 128, "tiny", "bench", "pending", lease.lease_id, "n1",
                           tuple(v.lease_id for v in victims), "", now, 1.0, "instant")
    events = (Audit("request.placed", "n1", lease.lease_id, {"request_id": record.request_id}),) + tuple(
        Audit("vm.preempting", "n1", v.lease_id, {"vm": v.vm_name}) for v in victims)
    return Write(created=(lease,), updated=victims, requests=(record,), events=events)


def commits(directory: Path, setting: str, count: int, offset: int) -> list[float]:
    store_module.DURABILITY = setting
    store = Store(directory / f"{setting}.sqlite3")
    store.put_leases([Lease(f"bf-{offset + i}-{k}", "backfill", "n1", f"vm-bf-{offset + i}-{k}", 1, 128, "tiny",
                            "backfill", "running", 1.0) for i in range(count) for k in range(2)])
    times = []
    for i in range(offset, offset + count):
        write = preemption_write(i)
        started = time.perf_counter()
        store.apply(write)
        times.append((time.perf_counter() - started) * 1000)
    store.close()
    return times


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--commits", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--dir", type=Path, default=Path("/var/lib/gleaner-test"))
    args = parser.parse_args(argv)
    args.dir.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="store-durability-", dir=args.dir))
    samples: dict[str, list[float]] = {"NORMAL": [], "FULL": []}
    try:
        for round_ in range(args.rounds):
            for setting in ("NORMAL", "FULL") if round_ % 2 == 0 else ("FULL", "NORMAL"):
                samples[setting] += commits(work, setting, args.commits, round_ * args.commits)
    finally:
        shutil.rmtree(work, ignore_errors=True)

    def p(values: list[float], q: float) -> float:
        ordered = sorted(values)
        return round(ordered[min(len(ordered) - 1, int(q / 100 * len(ordered)))], 3)
    print(json.dumps({"commits_per_setting": len(samples["FULL"]), "rounds": args.rounds,
                      **{f"{s.lower()}_p50_ms": round(statistics.median(v), 3) for s, v in samples.items()},
                      **{f"{s.lower()}_p99_ms": p(v, 99) for s, v in samples.items()},
                      "full_over_normal_p50": round(statistics.median(samples["FULL"]) /
                                                    statistics.median(samples["NORMAL"]), 2),
                      "directory": str(args.dir)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Hibernation: how long a backfill VM takes to save and restore, how big its state is, and what a
save beside it costs an on-demand VM.

    python -m tests.bench.hibernate [--cycles 10] [--sizes 128,512] [--rounds 10] [--cpu 1] [--untuned]

A real agent process (mutual TLS) on the local libvirtd, TCG guests of the tiny image.

Part 1, save and restore. For each size (MiB), a backfill guest running a CPU hog
(gleaner.workload=hog) is hibernated and resumed --cycles times through the agent's gRPC API,
with 1 s of running between cycles. What is timed: save_s is the wall time of one
HibernateDomain call as the client sees it (request sent to reply read: the agent's checks, libvirt's
save of memory and devices into the state file until the file is complete and the domain stopped,
and the agent's bookkeeping); restore_s likewise for one ResumeDomain (libvirt's restore, paused,
the volunteer settings put on, the domain let run, the state file deleted). Left out: the boot, the
1 s between cycles, the gRPC channel set-up. save_p50_s, save_p99_s, restore_p50_s and
restore_p99_s pool every cycle of every size (nearest rank); each size has its own too.
hibernated_bytes_per_mib is the state file's size on disk (allocated blocks) over the guest's
memory, the mean over cycles, per size and over all.

Part 2, the foreground cost of a save. An on-demand guest runs the wake-up probe of
tests/bench/interference.py (gleaner-probe wakeup: sleep until an absolute deadline 1 ms ahead,
a sample is how late it woke, read inside the guest), pinned to host CPU --cpu with a 128 MiB
backfill hog victim. Each round has two windows, in this order: "saving": from just before the
victim's HibernateDomain call until 0.6 s after its reply (so the probe batch in flight when the
save ends is printed); "alone": a window of the same length right after, the victim hibernated
(nothing of it runs). Then the victim is resumed and left 2 s to settle, unmeasured. As in
interference.py, the first batch printed in a window is dropped (it may have begun before it),
and the samples of all rounds are pooled per window kind. save_fg_p99_ratio is the pooled p99 of
"saving" over the pooled p99 of "alone"; goal at most 1.05: exit 1 if it is missed.

--untuned has the agent save as libvirt does by default (through the page cache, the I/O helper
left at libvirtd's priority), to show what the agent's tuning buys; --sizes "" skips part 1.

Prints each run's figures to stderr as it goes and one JSON object with everything at the end.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

from protos import agent_pb2
from tests.agentproc import (AgentProcess, LabEnv, exit_cleanly_on_sigterm, launch_request, remove_test_domains,
                             unique_name, wait_for_console)
from tests.bench.interference import (PROBE_CMDLINES, PROBE_STARTS, WAKEUP_LINE, parse_window, percentile,
                                      read_since)

SAVE_FG_GOAL = 1.05
TAIL_SECONDS = 0.6    # after a save: the wake-up batch in flight (about 0.55 s) is printed
SETTLE_SECONDS = 2.0
MIB = 2**20


def say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def timed(call) -> tuple[float, object]:
    started = time.monotonic()
    reply = call()
    return time.monotonic() - started, reply


def hibernate(stub, name: str):
    return lambda: stub.HibernateDomain(agent_pb2.HibernateDomainRequest(name=name), timeout=300)


def resume(stub, name: str):
    return lambda: stub.ResumeDomain(agent_pb2.ResumeDomainRequest(name=name), timeout=300)


def save_restore(stub, size_mib: int, cycles: int) -> dict:
    name = unique_name(f"hog{size_mib}")
    reply = stub.LaunchDomain(launch_request(name, memory_mib=size_mib, kernel_cmdline="gleaner.workload=hog"))
    wait_for_console(reply.domain.console_log, "GLEANER-HOG", timeout=180)
    runs = []
    for cycle in range(cycles):
        time.sleep(1.0)
        save_s, saved = timed(hibernate(stub, name))
        restore_s, resumed = timed(resume(stub, name))
        assert saved.saved and resumed.resumed, (saved, resumed)
        run = {"cycle": cycle + 1, "save_s": round(save_s, 3), "restore_s": round(restore_s, 3),
               "agent_save_s": round(saved.duration_seconds, 3), "agent_restore_s": round(resumed.duration_seconds, 3),
               "state_mib": round(saved.state_bytes / MIB, 1)}
        say(f"{size_mib} MiB cycle {cycle + 1}: {json.dumps(run)}")
        runs.append(run)
    stub.TerminateDomain(agent_pb2.TerminateDomainRequest(name=name, force=True))
    saves, restores = [r["save_s"] for r in runs], [r["restore_s"] for r in runs]
    return {"memory_mib": size_mib, "runs": runs,
            "save_p50_s": percentile(saves, 50), "save_p99_s": percentile(saves, 99),
            "restore_p50_s": percentile(restores, 50), "restore_p99_s": percentile(restores, 99),
            "hibernated_bytes_per_mib": round(statistics.mean(r["state_mib"] for r in runs) * MIB / size_mib)}


def foreground_cost(stub, cpu: str, rounds: int) -> dict:
    probe = unique_name("probe-wakeup")
    reply = stub.LaunchDomain(launch_request(probe, agent_pb2.ROLE_ON_DEMAND, cpuset=cpu,
                                             kernel_cmdline=PROBE_CMDLINES["wakeup"]))
    console = Path(reply.domain.console_log)
    wait_for_console(console, PROBE_STARTS["wakeup"], timeout=180)
    victim = unique_name("victim")
    hog = stub.LaunchDomain(launch_request(victim, cpuset=cpu, kernel_cmdline="gleaner.workload=hog"))
    wait_for_console(hog.domain.console_log, "GLEANER-HOG", timeout=300)
    windows: dict[str, list] = {"saving": [], "alone": []}
    for r in range(rounds):
        time.sleep(SETTLE_SECONDS)
        start = console.stat().st_size
        save_s, _saved = timed(hibernate(stub, victim))
        time.sleep(TAIL_SECONDS)
        saving = parse_window(read_since(console, start), WAKEUP_LINE)
        start = console.stat().st_size
        time.sleep(save_s + TAIL_SECONDS)
        alone = parse_window(read_since(console, start), WAKEUP_LINE)
        windows["saving"].append(saving)
        windows["alone"].append(alone)
        say(f"round {r + 1}/{rounds}: save {save_s:.2f}s; wake-up p99 saving "
            f"{_p99_ms(saving['samples_us'])} ms ({len(saving['samples_us'])} samples), alone "
            f"{_p99_ms(alone['samples_us'])} ms ({len(alone['samples_us'])} samples)")
        stub.ResumeDomain(agent_pb2.ResumeDomainRequest(name=victim), timeout=300)
    pooled = {kind: [v for w in ws for v in w["samples_us"]] for kind, ws in windows.items()}
    if min(len(v) for v in pooled.values()) < 500:
        raise SystemExit(f"too few probe samples ({ {k: len(v) for k, v in pooled.items()} }): is the probe running?")
    saving_p99, alone_p99 = percentile(pooled["saving"], 99), percentile(pooled["alone"], 99)
    return {"save_fg_p99_ratio": round(saving_p99 / alone_p99, 3),
            "saving_p99_ms": saving_p99 / 1000, "alone_p99_ms": alone_p99 / 1000,
            "saving_p50_ms": percentile(pooled["saving"], 50) / 1000, "alone_p50_ms": percentile(pooled["alone"], 50) / 1000,
            "saving_samples": len(pooled["saving"]), "alone_samples": len(pooled["alone"]),
            "saving_p99_rounds_ms": [_p99_ms(w["samples_us"]) for w in windows["saving"]],
            "alone_p99_rounds_ms": [_p99_ms(w["samples_us"]) for w in windows["alone"]]}


def _p99_ms(samples: list[int]) -> float | None:
    return percentile(samples, 99) / 1000 if samples else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cycles", type=int, default=10, help="save/restore cycles per size (default 10)")
    parser.add_argument("--sizes", default="128,512", help="guest memory sizes in MiB (default 128,512)")
    parser.add_argument("--rounds", type=int, default=10, help="saving/alone windows of part 2 (default 10)")
    parser.add_argument("--cpu", default="1", help="host CPU the probe and the victim are pinned to")
    parser.add_argument("--untuned", action="store_true",
                        help="the agent saves as libvirt does by default (page cache, its I/O helper at libvirtd's "
                             "priority): what the tuning buys")
    args = parser.parse_args(argv)
    if args.cycles < 1 or args.rounds < 1:
        parser.error("--cycles and --rounds must be at least 1")
    exit_cleanly_on_sigterm()
    env = LabEnv.create()
    agent = AgentProcess(env, name="bench-hibernate").start(
        env={"GLEANER_AGENT_HIBERNATE_UNTUNED": "1"} if args.untuned else None)
    try:
        stub = agent.stub()
        sizes = [save_restore(stub, int(size), args.cycles) for size in args.sizes.split(",") if size]
        fg = foreground_cost(stub, args.cpu, args.rounds)
        helpers_idled = agent.log_text().count("event=hibernate.helper_idled")
        saves = agent.log_text().count("event=hibernate.saved")
    finally:
        agent.stop()
        remove_test_domains()
        env.remove()
    all_saves = [r["save_s"] for s in sizes for r in s["runs"]]
    all_restores = [r["restore_s"] for s in sizes for r in s["runs"]]
    all_bytes = [r["state_mib"] * MIB / s["memory_mib"] for s in sizes for r in s["runs"]]
    timing = {"save_p50_s": percentile(all_saves, 50), "save_p99_s": percentile(all_saves, 99),
              "restore_p50_s": percentile(all_restores, 50), "restore_p99_s": percentile(all_restores, 99),
              "hibernated_bytes_per_mib": round(statistics.mean(all_bytes))} if sizes else {}
    result = {**timing, **fg, "untuned": args.untuned,
              "io_helpers_idled": helpers_idled, "saves": saves, "cycles": args.cycles, "rounds": args.rounds,
              "pinned_cpu": args.cpu, "sizes": sizes}
    print(json.dumps(result))
    if fg["save_fg_p99_ratio"] > SAVE_FG_GOAL:
        say(f"FAIL: save_fg_p99_ratio {fg['save_fg_p99_ratio']} > {SAVE_FG_GOAL}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

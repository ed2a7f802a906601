"""CPU interference: a foreground latency probe beside a volunteer CPU hog on one host CPU.

    python -m tests.bench.interference [--phase-seconds 40] [--cpu 1]

Both real domains are pinned to the same host CPU. In one run the probe is measured
alone, beside the hog at libvirt's default priority (the hog promoted to the foreground
class: cpu.shares 1024, no cpu.idle), and beside the hog in Gleaner's volunteer class.
The probe prints p50/p99 of each batch of bursts; a phase's p50 and p99 are the medians
of its batches' (so one unlucky batch does not decide it), and *_p99_max_ms the worst
batch. Prints one JSON object; the ratios are against "alone" from the same run.
"""
from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import time
from pathlib import Path

from protos import agent_pb2
from tests.agentproc import (AgentProcess, LabEnv, exit_cleanly_on_sigterm, launch_request, remove_test_domains, unique_name,
                             wait_for_console)

PROBE_LINE = re.compile(r"GLEANER-PROBE n=\d+ p50_us=(\d+) p99_us=(\d+) max_us=(\d+)")
DISKPROBE_LINE = re.compile(r"GLEANER-DISKPROBE n=\d+ p50_us=(\d+) p99_us=(\d+) max_us=(\d+)")
SETTLE_SECONDS = 3.0


def probe_batches(console: Path, start: int, line: re.Pattern[str] = PROBE_LINE) -> list[tuple[int, int]]:
    """(p50 µs, p99 µs) of each batch printed after byte offset `start`."""
    text = console.read_bytes()[start:].decode(errors="replace")
    return [(int(m.group(1)), int(m.group(2))) for m in line.finditer(text)]


def measure(console: Path, seconds: float, line: re.Pattern[str] = PROBE_LINE) -> dict[str, float]:
    time.sleep(SETTLE_SECONDS)  # let a class change take hold and a partial batch drain
    start = console.stat().st_size
    time.sleep(seconds)
    batches = probe_batches(console, start, line)[1:]  # the first may have begun before `start`
    if len(batches) < 3:
        raise SystemExit(f"only {len(batches)} probe batches in {seconds}s; is the probe running?")
    return {"p50_ms": statistics.median(b[0] for b in batches) / 1000,
            "p99_ms": statistics.median(b[1] for b in batches) / 1000,
            "p99_max_ms": max(b[1] for b in batches) / 1000, "batches": len(batches)}


def set_class(stub, name: str, role: int) -> None:
    stub.SetDomainClass(agent_pb2.SetDomainClassRequest(name=name, priority_class=role))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--phase-seconds", type=float, default=40.0)
    parser.add_argument("--cpu", default="1", help="host CPU both domains are pinned to")
    args = parser.parse_args(argv)
    exit_cleanly_on_sigterm()
    env = LabEnv.create()
    agent = AgentProcess(env, name="bench-interference").start()
    try:
        stub = agent.stub()
        fg, vol = unique_name("probe"), unique_name("hog")
        reply = stub.LaunchDomain(launch_request(fg, agent_pb2.ROLE_FOREGROUND, cpuset=args.cpu,
                                                 kernel_cmdline="gleaner.workload=probe gleaner.probe=2000,10,100"))
        console = Path(reply.domain.console_log)
        wait_for_console(console, "GLEANER-PROBE start", timeout=120)
        print("measuring the probe alone", file=sys.stderr, flush=True)
        alone = measure(console, args.phase_seconds)

        # The hog boots while promoted: at idle priority beside the probe it would boot slowly.
        hog = stub.LaunchDomain(launch_request(vol, agent_pb2.ROLE_VOLUNTEER, cpuset=args.cpu,
                                               kernel_cmdline="gleaner.workload=hog"))
        set_class(stub, vol, agent_pb2.ROLE_FOREGROUND)
        wait_for_console(hog.domain.console_log, "GLEANER-HOG", timeout=120)
        print("measuring beside the hog at libvirt's default priority", file=sys.stderr, flush=True)
        default = measure(console, args.phase_seconds)

        set_class(stub, vol, agent_pb2.ROLE_VOLUNTEER)
        print("measuring beside the hog in the volunteer class", file=sys.stderr, flush=True)
        volunteer = measure(console, args.phase_seconds)
        host = stub.DescribeHost(agent_pb2.DescribeHostRequest())
    finally:
        agent.stop()
        remove_test_domains()
        env.remove()
    result = {**phase_summary(alone, default, volunteer),
        "volunteer_mechanism": "cpu.idle" if host.cpu_idle_supported else "lowest cpu weight",
        "domain_type": host.domain_type, "pinned_cpu": args.cpu, "phase_seconds": args.phase_seconds}
    print(json.dumps(result))
    return 0


def phase_summary(alone: dict, default: dict, volunteer: dict) -> dict:
    """The keys every interference benchmark prints: p50/p99 per phase and ratios to alone."""
    return {
        "alone_p50_ms": alone["p50_ms"], "alone_p99_ms": alone["p99_ms"],
        "default_p50_ms": default["p50_ms"], "default_p99_ms": default["p99_ms"],
        "volunteer_p50_ms": volunteer["p50_ms"], "volunteer_p99_ms": volunteer["p99_ms"],
        "default_ratio": round(default["p99_ms"] / alone["p99_ms"], 3),
        "volunteer_ratio": round(volunteer["p99_ms"] / alone["p99_ms"], 3),
        "default_p50_ratio": round(default["p50_ms"] / alone["p50_ms"], 3),
        "volunteer_p50_ratio": round(volunteer["p50_ms"] / alone["p50_ms"], 3),
        "alone_p99_max_ms": alone["p99_max_ms"], "default_p99_max_ms": default["p99_max_ms"],
        "volunteer_p99_max_ms": volunteer["p99_max_ms"],
        "batches": {"alone": alone["batches"], "default": default["batches"], "volunteer": volunteer["batches"]},
    }


if __name__ == "__main__":
    sys.exit(main())

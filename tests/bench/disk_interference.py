"""Disk interference: a foreground guest doing small synchronous I/O beside a volunteer
writing as fast as it can.

    python -m tests.bench.disk_interference [--phase-seconds 15] [--rounds 3]

The foreground's probe (gleaner-probe diskprobe /dev/vda 5,100) does a 4 KiB write then a
4 KiB read of the same random 4 KiB-aligned offset within the first 128 MiB of its virtio
disk (opened O_DIRECT|O_SYNC), then sleeps 5 ms; the volunteer writes 1 MiB O_DIRECT blocks
without pause. Disks are qcow2 overlays with cache=none, so both reach the host device. The
guests sit on different host CPUs, so what is measured is the disk, not CPU contention.

What is timed: one sample is the wall time of one write+read pair, from CLOCK_MONOTONIC
inside the guest just before the pwrite to just after the pread returns. Left out: the
offset choice, the 5 ms sleep, the guest's boot, and the printing: every 100 pairs the probe
prints all of the batch's samples in the order measured (GLEANER-DISKPROBE-RAW us=...) and
the batch's p50/p99/max (GLEANER-DISKPROBE n=...), then waits for the serial console to
drain. The SETTLE_SECONDS after each phase switch are not measured either, and the first
batch printed in each phase window is dropped (it may have begun before the window).

Phases alternate as in tests.bench.interference: "alone" (the writer's domain suspended
through libvirt, which also drains its in-flight I/O), "volunteer" (the writer in the
volunteer class: block-I/O weight under BFQ, else throughput/IOPS caps) and "default" (the
writer promoted to the foreground class), in that order, --rounds times, --phase-seconds
each per round. The writer boots while promoted, before the first round.

How p99 is computed: all raw samples of a phase, from all rounds, are pooled and
*_p99_all_ms is their 99th percentile by nearest rank; default_ratio and volunteer_ratio are
p99_all of the phase over p99_all of alone; *_p99_all_rounds_ms shows each round's p99. The
batch statistics (*_p50_ms, *_p99_ms = median of batch p99s, which with 100 samples are batch
maxima; *_p99_max_ms; *_ratio_batch_median) keep their old meaning. writer_*_mib_per_s is the
mean of the writer's per-second rate reports inside that phase's windows. Prints one JSON
object.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

from protos import agent_pb2
from tests.agentproc import (AgentProcess, LabEnv, exit_cleanly_on_sigterm, launch_request, remove_test_domains,
                             unique_name, wait_for_console)
from tests.bench.interference import (DISKPROBE_LINE, PHASES, HogSwitch, alternate, capture, parse_window,
                                      phase_stats, phase_summary, set_class)

HOG_LINE = "GLEANER-DISKHOG"


def hog_rates(text: str) -> list[float]:
    """The writer's MiB/s reports in a stretch of its console."""
    return [float(line.split("=")[1]) for line in text.splitlines() if line.startswith(HOG_LINE)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--phase-seconds", type=float, default=15.0, help="per phase per round (default 15)")
    parser.add_argument("--rounds", type=int, default=3, help="alone/volunteer/default repetitions (default 3)")
    args = parser.parse_args(argv)
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    if args.rounds < 3:
        print(f"WARNING: --rounds {args.rounds}: fewer than 3 alternations, a drift of the host can pass "
              "for a difference between phases", file=sys.stderr)
    exit_cleanly_on_sigterm()
    env = LabEnv.create()
    agent = AgentProcess(env, name="bench-disk").start()
    switch = None
    rates: dict[str, list[float]] = {phase: [] for phase in PHASES}
    try:
        stub = agent.stub()
        host = stub.DescribeHost(agent_pb2.DescribeHostRequest())
        fg, vol = unique_name("diskprobe"), unique_name("diskhog")
        reply = stub.LaunchDomain(launch_request(fg, agent_pb2.ROLE_ON_DEMAND, cpuset="0",
                                                 kernel_cmdline="gleaner.workload=diskprobe gleaner.diskprobe=5,100"))
        console = Path(reply.domain.console_log)
        wait_for_console(console, "GLEANER-DISKPROBE start", timeout=120)

        hog = stub.LaunchDomain(launch_request(vol, agent_pb2.ROLE_BACKFILL, cpuset="1",
                                               kernel_cmdline="gleaner.workload=diskhog"))
        hog_console = Path(hog.domain.console_log)
        set_class(stub, vol, agent_pb2.ROLE_ON_DEMAND)
        wait_for_console(hog_console, HOG_LINE, timeout=120)
        switch = HogSwitch(stub, vol)

        def measure_phase(phase: str, _round: int) -> dict:
            probe_text, hog_text = capture([console, hog_console], args.phase_seconds)
            rates[phase].extend(hog_rates(hog_text))
            window = parse_window(probe_text, DISKPROBE_LINE)
            if not window["samples_us"]:  # phase_stats judges the phase as a whole
                print(f"warning: no complete disk-probe batch in a {args.phase_seconds}s window "
                      f"({len(probe_text)} bytes of console)", file=sys.stderr, flush=True)
            return window

        windows = alternate(args.rounds, switch.enter, measure_phase)
    finally:
        if switch is not None:
            switch.close()
        agent.stop()
        remove_test_domains()
        env.remove()
    stats = {phase: phase_stats(windows[phase]) for phase in PHASES}

    def mean_rate(phase: str) -> float:
        return round(statistics.fmean(rates[phase]), 1) if rates[phase] else 0.0

    print(json.dumps({**phase_summary(stats["alone"], stats["default"], stats["volunteer"]), "rounds": args.rounds,
                      "disk_scheduler": host.disk_scheduler, "volunteer_mechanism": host.volunteer_disk_mechanism,
                      "writer_default_mib_per_s": mean_rate("default"),
                      "writer_volunteer_mib_per_s": mean_rate("volunteer"),
                      "writer_alone_mib_per_s": mean_rate("alone"),
                      "phase_seconds": args.phase_seconds}))
    return 0


if __name__ == "__main__":
    sys.exit(main())

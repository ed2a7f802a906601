"""Disk interference: a foreground guest doing small synchronous I/O beside a volunteer
writing as fast as it can.

    python -m tests.bench.disk_interference [--phase-seconds 40]

The foreground's probe does a 4 KiB O_DIRECT write then read at a random offset of its
virtio disk, then sleeps 5 ms; the volunteer writes 1 MiB O_DIRECT blocks without pause.
Disks are qcow2 overlays with cache=none, so both reach the host device. The guests sit
on different host CPUs, so what is measured is the disk, not CPU contention. Phases as in
tests.bench.interference: alone, beside the writer at default priority (promoted), and
beside it in the volunteer class (block-I/O weight under BFQ, else throughput/IOPS caps).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from protos import agent_pb2
from tests.agentproc import (AgentProcess, LabEnv, exit_cleanly_on_sigterm, launch_request, remove_test_domains,
                             unique_name, wait_for_console)
from tests.bench.interference import DISKPROBE_LINE, measure, phase_summary, set_class

HOG_LINE = "GLEANER-DISKHOG"


def hog_rate(console: Path) -> float:
    """The writer's last reported MiB/s."""
    lines = [line for line in console.read_text(errors="replace").splitlines() if line.startswith(HOG_LINE)]
    return float(lines[-1].split("=")[1]) if lines else 0.0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--phase-seconds", type=float, default=40.0)
    args = parser.parse_args(argv)
    exit_cleanly_on_sigterm()
    env = LabEnv.create()
    agent = AgentProcess(env, name="bench-disk").start()
    try:
        stub = agent.stub()
        host = stub.DescribeHost(agent_pb2.DescribeHostRequest())
        fg, vol = unique_name("diskprobe"), unique_name("diskhog")
        reply = stub.LaunchDomain(launch_request(fg, agent_pb2.ROLE_FOREGROUND, cpuset="0",
                                                 kernel_cmdline="gleaner.workload=diskprobe gleaner.diskprobe=5,100"))
        console = Path(reply.domain.console_log)
        wait_for_console(console, "GLEANER-DISKPROBE start", timeout=120)
        print("measuring the disk probe alone", file=sys.stderr, flush=True)
        alone = measure(console, args.phase_seconds, DISKPROBE_LINE)

        hog = stub.LaunchDomain(launch_request(vol, agent_pb2.ROLE_VOLUNTEER, cpuset="1",
                                               kernel_cmdline="gleaner.workload=diskhog"))
        hog_console = Path(hog.domain.console_log)
        set_class(stub, vol, agent_pb2.ROLE_FOREGROUND)
        wait_for_console(hog_console, HOG_LINE, timeout=120)
        print("measuring beside the writer at default priority", file=sys.stderr, flush=True)
        default = measure(console, args.phase_seconds, DISKPROBE_LINE)
        default_hog = hog_rate(hog_console)

        set_class(stub, vol, agent_pb2.ROLE_VOLUNTEER)
        print("measuring beside the writer in the volunteer class", file=sys.stderr, flush=True)
        volunteer = measure(console, args.phase_seconds, DISKPROBE_LINE)
        volunteer_hog = hog_rate(hog_console)
    finally:
        agent.stop()
        remove_test_domains()
        env.remove()
    print(json.dumps({**phase_summary(alone, default, volunteer),
                      "disk_scheduler": host.disk_scheduler, "volunteer_mechanism": host.volunteer_disk_mechanism,
                      "writer_default_mib_per_s": default_hog, "writer_volunteer_mib_per_s": volunteer_hog,
                      "phase_seconds": args.phase_seconds}))
    return 0


if __name__ == "__main__":
    sys.exit(main())

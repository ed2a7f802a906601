"""CPU interference: a foreground latency probe beside a volunteer CPU hog on one host CPU.

    python -m tests.bench.interference [--phase-seconds 15] [--rounds 5] [--cpu 1] [--probe both|burst|wakeup]

Both real domains are pinned to the same host CPU. The probe guest (gleaner-probe probe
2000,10,100) runs bursts of fixed CPU work, calibrated once at its start to take about 2 ms
alone, each followed by a 10 ms sleep.

What is timed: one sample is the wall time of one burst, read from CLOCK_MONOTONIC inside
the guest just before and just after the spin loop, so it grows whenever the probe's vCPU is
kept off the host CPU (or slowed) during the burst. Left out: the sleeps between bursts,
the calibration, the guest's boot, and the printing: every 100 bursts the probe prints all
of the batch's samples in the order measured (GLEANER-PROBE-RAW us=...) and the batch's
p50/p99/max (GLEANER-PROBE n=...), then waits for the serial console to drain before the
next burst. The SETTLE_SECONDS after each phase switch are not measured either, and the
first batch printed after a phase's window opens is dropped (it may have begun earlier).

The wake-up probe (--probe wakeup or both, the default) is a second foreground guest on the
same host CPU (gleaner-probe wakeup 1000,500), cyclictest-style: it sleeps until an absolute
CLOCK_MONOTONIC deadline 1 ms ahead (clock_nanosleep, TIMER_ABSTIME) and one sample is how late
it woke past that deadline, read inside the guest. That is what a request to an idle
foreground VM feels: the host must run QEMU, which injects the timer interrupt, and the guest
must run its sleeper. It is printed in batches of 500 like the burst probe (GLEANER-WAKEUP-RAW,
GLEANER-WAKEUP). Only one probe runs at a time: in every phase window the burst probe is
measured with the wake-up guest suspended, then the wake-up probe with the burst guest
suspended, each for --phase-seconds. wakeup_volunteer_ratio and wakeup_default_ratio are the
pooled p99 beside the volunteer (default) hog over the pooled p99 alone; the benchmark exits 1
when wakeup_volunteer_ratio exceeds 1.05 or wakeup_default_ratio is not above 1.2 (a probe that
sees no difference beside a default-priority hog cannot see interference at all).

Phases: "alone" (the hog's domain suspended through libvirt), "volunteer" (the hog in
Gleaner's volunteer class) and "default" (the hog promoted to the foreground class:
libvirt's default priority, cpu.shares 1024, no cpu.idle). They alternate in that order,
--rounds times (5 by default), each phase measured for --phase-seconds per round, so a slow drift of the
shared host falls on all phases alike. The hog boots while promoted (at idle priority beside
the probe it would boot slowly), before the first round.

How p99 is computed: every raw sample of a phase, from all rounds, is pooled and
*_p99_all_ms is the 99th percentile by nearest rank (the ceil(0.99 n)-th smallest) over all
of them; *_p50_all_ms likewise; *_p99_all_rounds_ms is the same per round, to show the
spread (null for a round whose window held no complete batch). default_ratio and
volunteer_ratio are p99_all of the phase over p99_all of alone; `samples` counts them.
The older batch statistics are kept with their meaning: *_p50_ms and *_p99_ms are the
medians over the phase's batches (all rounds) of each batch's p50 and p99 as the probe
prints them (with 100 samples a batch's p99 is its largest sample, so clustered spikes
vanish from that median), *_p99_max_ms the worst batch p99, and
*_ratio_batch_median the ratios of those medians. Prints one JSON object.
"""
from __future__ import annotations

import argparse
import json
import math
import re
import statistics
import sys
import time
from pathlib import Path
from typing import Callable, Sequence

import libvirt

from protos import agent_pb2
from tests.agentproc import (LIBVIRT_URI, AgentProcess, LabEnv, exit_cleanly_on_sigterm, launch_request,
                             remove_test_domains, unique_name, wait_for_console)

PROBE_LINE = re.compile(r"GLEANER-PROBE n=\d+ p50_us=(\d+) p99_us=(\d+) max_us=(\d+)\r?\n")
DISKPROBE_LINE = re.compile(r"GLEANER-DISKPROBE n=\d+ p50_us=(\d+) p99_us=(\d+) max_us=(\d+)\r?\n")
PROBE_RAW_LINE = re.compile(r"GLEANER-PROBE-RAW us=([\d,]+)\r?\n")
DISKPROBE_RAW_LINE = re.compile(r"GLEANER-DISKPROBE-RAW us=([\d,]+)\r?\n")
WAKEUP_LINE = re.compile(r"GLEANER-WAKEUP n=\d+ p50_us=(\d+) p99_us=(\d+) max_us=(\d+)\r?\n")
WAKEUP_RAW_LINE = re.compile(r"GLEANER-WAKEUP-RAW us=([\d,]+)\r?\n")
RAW_LINES = {PROBE_LINE.pattern: PROBE_RAW_LINE, DISKPROBE_LINE.pattern: DISKPROBE_RAW_LINE,
             WAKEUP_LINE.pattern: WAKEUP_RAW_LINE}
SETTLE_SECONDS = 3.0
PHASES = ("alone", "volunteer", "default")  # the order within each round
WAKEUP_SLEEP_US, WAKEUP_BATCH = 1000, 500
# The wake-up goals: beside a volunteer hog the foreground wakes as on time as alone (p99 within
# 5%), and beside a default-priority hog it wakes measurably later (else the probe sees nothing).
WAKEUP_VOLUNTEER_GOAL, WAKEUP_DEFAULT_FLOOR = 1.05, 1.2


def percentile(samples: Sequence[float], pct: float) -> float:
    """Nearest rank: the ceil(pct/100 * n)-th smallest sample (the largest for pct=100)."""
    if not samples:
        raise ValueError("percentile of no samples")
    ordered = sorted(samples)
    rank = max(1, math.ceil(pct / 100 * len(ordered)))
    return ordered[rank - 1]


def read_since(console: Path, start: int) -> str:
    """The console text written after byte offset `start`, up to its last complete line."""
    data = console.read_bytes()[start:]
    return data[:data.rfind(b"\n") + 1].decode(errors="replace")


def probe_batches(console: Path, start: int, line: re.Pattern[str] = PROBE_LINE) -> list[tuple[int, int]]:
    """(p50 µs, p99 µs) of each complete batch summary printed after byte offset `start`."""
    return [(int(m.group(1)), int(m.group(2))) for m in line.finditer(read_since(console, start))]


def parse_window(text: str, line: re.Pattern[str] = PROBE_LINE) -> dict:
    """One phase window's batches and raw samples (µs); the first batch of each is dropped,
    since it may have begun before the window opened."""
    batches = [(int(m.group(1)), int(m.group(2))) for m in line.finditer(text)][1:]
    raw = [[int(v) for v in m.group(1).split(",") if v] for m in RAW_LINES[line.pattern].finditer(text)][1:]
    if len(raw) != len(batches):
        print(f"warning: {len(batches)} batch summaries but {len(raw)} raw lines in a window",
              file=sys.stderr, flush=True)
    return {"batch_p50_us": [b[0] for b in batches], "batch_p99_us": [b[1] for b in batches],
            "samples_us": [v for batch in raw for v in batch]}


def capture(consoles: Sequence[Path], seconds: float) -> list[str]:
    """Settle, then the text each console gains over `seconds` (complete lines only)."""
    time.sleep(SETTLE_SECONDS)  # let a class change take hold and a partial batch drain
    starts = [c.stat().st_size for c in consoles]
    time.sleep(seconds)
    return [read_since(c, s) for c, s in zip(consoles, starts)]


def measure(console: Path, seconds: float, line: re.Pattern[str] = PROBE_LINE) -> dict:
    """One phase window of one round: see parse_window."""
    text = capture([console], seconds)[0]
    window = parse_window(text, line)
    if not window["samples_us"]:  # a busy host may leave a short window empty; phase_stats judges the phase
        print(f"warning: no complete probe batch in a {seconds}s window ({len(text)} bytes of console)",
              file=sys.stderr, flush=True)
    return window


def phase_stats(rounds: list[dict]) -> dict:
    """Pool a phase's windows (one per round): batch medians as before, and pooled percentiles."""
    p50s = [v for r in rounds for v in r["batch_p50_us"]]
    p99s = [v for r in rounds for v in r["batch_p99_us"]]
    samples = [v for r in rounds for v in r["samples_us"]]
    if len(p99s) < 3 or not samples:
        raise SystemExit(f"only {len(p99s)} probe batches ({len(samples)} raw samples) in the phase; "
                         "is the probe running, and is the image rebuilt with the raw-sample probe?")
    return {"p50_ms": statistics.median(p50s) / 1000, "p99_ms": statistics.median(p99s) / 1000,
            "p99_max_ms": max(p99s) / 1000, "batches": len(p99s),
            "p50_all_ms": percentile(samples, 50) / 1000, "p99_all_ms": percentile(samples, 99) / 1000,
            "samples": len(samples),
            "p99_all_rounds_ms": [percentile(r["samples_us"], 99) / 1000 if r["samples_us"] else None
                                  for r in rounds]}


def set_class(stub, name: str, role: int) -> None:
    stub.SetDomainClass(agent_pb2.SetDomainClassRequest(name=name, priority_class=role))


class HogSwitch:
    """Puts the interfering domain into each phase: suspended (alone), volunteer, promoted (default)."""

    def __init__(self, stub, name: str):
        self.stub, self.name = stub, name
        self.conn = libvirt.open(LIBVIRT_URI)
        self.dom = self.conn.lookupByName(name)

    def enter(self, phase: str) -> None:
        paused = self.dom.state()[0] == libvirt.VIR_DOMAIN_PAUSED
        if phase == "alone":
            if not paused:
                self.dom.suspend()
            return
        set_class(self.stub, self.name, agent_pb2.ROLE_BACKFILL if phase == "volunteer" else agent_pb2.ROLE_ON_DEMAND)
        if paused:
            self.dom.resume()

    def close(self) -> None:
        self.conn.close()


def alternate(rounds: int, enter: Callable[[str], None], measure_phase: Callable[[str, int], dict]) -> dict[str, list]:
    """Run PHASES in order, `rounds` times; {phase: [its window of each round]}."""
    windows: dict[str, list] = {phase: [] for phase in PHASES}
    for r in range(rounds):
        for phase in PHASES:
            enter(phase)
            print(f"round {r + 1}/{rounds}: measuring {phase}", file=sys.stderr, flush=True)
            windows[phase].append(measure_phase(phase, r))
    return windows


class Foreground:
    """The probe guests: while one is measured the others are suspended, so no probe delays another."""

    def __init__(self, names: dict[str, str]):
        self.conn = libvirt.open(LIBVIRT_URI)
        self.doms = {probe: self.conn.lookupByName(name) for probe, name in names.items()}

    def only(self, probe: str) -> None:
        for other, dom in self.doms.items():
            paused = dom.state()[0] == libvirt.VIR_DOMAIN_PAUSED
            if other != probe and not paused:
                dom.suspend()
        if self.doms[probe].state()[0] == libvirt.VIR_DOMAIN_PAUSED:
            self.doms[probe].resume()

    def close(self) -> None:
        self.conn.close()


PROBE_LINES = {"burst": PROBE_LINE, "wakeup": WAKEUP_LINE}
PROBE_CMDLINES = {"burst": "gleaner.workload=probe gleaner.probe=2000,10,100",
                  "wakeup": f"gleaner.workload=wakeup gleaner.wakeup={WAKEUP_SLEEP_US},{WAKEUP_BATCH}"}
PROBE_STARTS = {"burst": "GLEANER-PROBE start", "wakeup": "GLEANER-WAKEUP start"}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--phase-seconds", type=float, default=15.0, help="per phase per round per probe (default 15)")
    parser.add_argument("--rounds", type=int, default=5, help="alone/volunteer/default repetitions (default 5)")
    parser.add_argument("--cpu", default="1", help="host CPU all domains are pinned to")
    parser.add_argument("--probe", choices=("both", "burst", "wakeup"), default="both",
                        help="the burst probe, the wake-up probe, or both taking turns (default)")
    args = parser.parse_args(argv)
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    if args.rounds < 3:
        print(f"WARNING: --rounds {args.rounds}: fewer than 3 alternations, a drift of the host can pass "
              "for a difference between phases", file=sys.stderr)
    probes = ("burst", "wakeup") if args.probe == "both" else (args.probe,)
    exit_cleanly_on_sigterm()
    env = LabEnv.create()
    agent = AgentProcess(env, name="bench-interference").start()
    switch = foreground = None
    try:
        stub = agent.stub()
        names = {probe: unique_name(f"probe-{probe}") for probe in probes}
        consoles = {}
        for probe, name in names.items():
            reply = stub.LaunchDomain(launch_request(name, agent_pb2.ROLE_ON_DEMAND, cpuset=args.cpu,
                                                     kernel_cmdline=PROBE_CMDLINES[probe]))
            consoles[probe] = Path(reply.domain.console_log)
            wait_for_console(consoles[probe], "GLEANER-READY", timeout=120)
            if "unknown workload" in consoles[probe].read_text(errors="replace"):
                raise SystemExit(f"the guest image has no {probe} probe: rebuild it (python3 images/build.py)")
            wait_for_console(consoles[probe], PROBE_STARTS[probe], timeout=60)
        foreground = Foreground(names)

        # The hog boots while promoted: at idle priority beside the probe it would boot slowly.
        vol = unique_name("hog")
        hog = stub.LaunchDomain(launch_request(vol, agent_pb2.ROLE_BACKFILL, cpuset=args.cpu,
                                               kernel_cmdline="gleaner.workload=hog"))
        set_class(stub, vol, agent_pb2.ROLE_ON_DEMAND)
        wait_for_console(hog.domain.console_log, "GLEANER-HOG", timeout=120)
        switch = HogSwitch(stub, vol)

        def measure_phase(_phase: str, _round: int) -> dict:
            windows = {}
            for probe in probes:
                foreground.only(probe)
                windows[probe] = measure(consoles[probe], args.phase_seconds, PROBE_LINES[probe])
            return windows
        windows = alternate(args.rounds, switch.enter, measure_phase)
        host = stub.DescribeHost(agent_pb2.DescribeHostRequest())
    finally:
        for part in (switch, foreground):
            if part is not None:
                part.close()
        agent.stop()
        remove_test_domains()
        env.remove()
    stats = {probe: {phase: phase_stats([w[probe] for w in windows[phase]]) for phase in PHASES} for probe in probes}
    result: dict = {}
    if "burst" in stats:
        result.update(phase_summary(stats["burst"]["alone"], stats["burst"]["default"], stats["burst"]["volunteer"]))
    failures = []
    if "wakeup" in stats:
        wake = wakeup_summary(stats["wakeup"])
        result.update(wake)
        if wake["wakeup_volunteer_ratio"] > WAKEUP_VOLUNTEER_GOAL:
            failures.append(f"wakeup_volunteer_ratio {wake['wakeup_volunteer_ratio']} > {WAKEUP_VOLUNTEER_GOAL}")
        if wake["wakeup_default_ratio"] <= WAKEUP_DEFAULT_FLOOR:
            failures.append(f"wakeup_default_ratio {wake['wakeup_default_ratio']} <= {WAKEUP_DEFAULT_FLOOR}: "
                            "the probe does not see a default-priority hog")
    result.update({"rounds": args.rounds, "probes": list(probes),
                   "volunteer_mechanism": "cpu.idle" if host.cpu_idle_supported else "lowest cpu weight",
                   "domain_type": host.domain_type, "pinned_cpu": args.cpu, "phase_seconds": args.phase_seconds})
    print(json.dumps(result))
    for failure in failures:
        print(f"FAIL: {failure}", file=sys.stderr, flush=True)
    return 1 if failures else 0


def wakeup_summary(stats: dict[str, dict]) -> dict:
    """The wake-up probe's keys: pooled p50/p99 per phase, per-round p99, and the two ratios."""
    alone = stats["alone"]["p99_all_ms"]
    summary = {"wakeup_volunteer_ratio": round(stats["volunteer"]["p99_all_ms"] / alone, 3),
               "wakeup_default_ratio": round(stats["default"]["p99_all_ms"] / alone, 3),
               "wakeup_volunteer_goal": WAKEUP_VOLUNTEER_GOAL, "wakeup_default_floor": WAKEUP_DEFAULT_FLOOR,
               "wakeup_sleep_us": WAKEUP_SLEEP_US,
               "wakeup_samples": {phase: p["samples"] for phase, p in stats.items()}}
    for phase, p in stats.items():
        summary[f"wakeup_{phase}_p50_all_ms"] = p["p50_all_ms"]
        summary[f"wakeup_{phase}_p99_all_ms"] = p["p99_all_ms"]
        summary[f"wakeup_{phase}_p99_all_rounds_ms"] = p["p99_all_rounds_ms"]
        summary[f"wakeup_{phase}_worst_batch_p99_ms"] = p["p99_max_ms"]
    return summary


def phase_summary(alone: dict, default: dict, volunteer: dict) -> dict:
    """The keys every interference benchmark prints, from phase_stats of each phase."""
    phases = {"alone": alone, "default": default, "volunteer": volunteer}
    summary = {
        "alone_p50_ms": alone["p50_ms"], "alone_p99_ms": alone["p99_ms"],
        "default_p50_ms": default["p50_ms"], "default_p99_ms": default["p99_ms"],
        "volunteer_p50_ms": volunteer["p50_ms"], "volunteer_p99_ms": volunteer["p99_ms"],
        "default_ratio": round(default["p99_all_ms"] / alone["p99_all_ms"], 3),
        "volunteer_ratio": round(volunteer["p99_all_ms"] / alone["p99_all_ms"], 3),
        "default_ratio_batch_median": round(default["p99_ms"] / alone["p99_ms"], 3),
        "volunteer_ratio_batch_median": round(volunteer["p99_ms"] / alone["p99_ms"], 3),
        "default_p50_ratio": round(default["p50_ms"] / alone["p50_ms"], 3),
        "volunteer_p50_ratio": round(volunteer["p50_ms"] / alone["p50_ms"], 3),
        "alone_p99_max_ms": alone["p99_max_ms"], "default_p99_max_ms": default["p99_max_ms"],
        "volunteer_p99_max_ms": volunteer["p99_max_ms"],
        "batches": {name: p["batches"] for name, p in phases.items()},
        "samples": {name: p["samples"] for name, p in phases.items()},
    }
    for name, p in phases.items():
        summary[f"{name}_p50_all_ms"] = p["p50_all_ms"]
        summary[f"{name}_p99_all_ms"] = p["p99_all_ms"]
        summary[f"{name}_p99_all_rounds_ms"] = p["p99_all_rounds_ms"]
    return summary


if __name__ == "__main__":
    sys.exit(main())

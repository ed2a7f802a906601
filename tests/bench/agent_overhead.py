"""The agent's own CPU use under real duty: reporting to a controller, guarding starved volunteers.

    python -m tests.bench.agent_overhead [--domains 20] [--seconds S] [--starve-cpu N]

What runs: a real controller (backfill left disabled, placement without CPU prediction, its
default liveness thresholds: suspect after 6 s without a report) and a real agent reporting to
it, with the agent's default intervals: a report every controller_report_seconds (2 s),
reconcile every 10 s, reaper every 5 s, metrics sampler every second, starvation guard on its
fast tick (0.25 s) while a volunteer is boosted or at risk and its slow tick (1 s) otherwise,
log level info. Half the domains are volunteers (1 vCPU, 128 MiB, the tiny image). Half of
those (rounded up) are CPU hogs (kernel_cmdline gleaner.workload=hog) pinned to one host CPU
(--starve-cpu, by default the highest-numbered one) together with one foreground hog, so at
idle priority they starve and the guard boosts and releases them all through the window. The
other domains are idle guests, unpinned. Every domain boots in the foreground class, all at
once (a volunteer at idle priority beside a busy foreground takes minutes to boot); the
volunteers are demoted afterwards, and the window starts once the guard has boosted one of
them (plus 2 s). The controller adopts the agent's domains as leases; it launches nothing.

What is measured: the agent process's user+system CPU time, read from outside (psutil on its
pid) at the two ends of the window, as a percentage of one core over the window's wall time.
Evidence that the duty happened in the window, none of it obtained by calling the agent:
guard.boost and guard.release lines the agent logged during the window; the reports the
controller received from the node (ListNodes polled on the controller every 0.5 s, a report
counted when last_report_age shows a new arrival), the longest gap between them, and the
controller's node.suspect/down/up lines in the window; the starved volunteers' CPU seconds per
guard period (the guard aims at guard_slice_s each): on average over the window (libvirt's CPU
time), and in every whole period of the window for every starved volunteer (the kernel's time
on CPU of the threads in its vcpuN groups, read at each period boundary). The benchmark exits 1 when any
starved volunteer got less than MIN_SLICE_FRACTION (0.8) of the slice in any period. Before and after the window, outside it,
the agent is asked for ListDomains (volunteer CPU times) and GetMetrics (domains in its metrics,
host busy cores, and its self-reported CPU: one 1 s sample of its own CPU time, which the kernel
counts in 10 ms ticks, so it reads 0 or a multiple of about 1%).

The window (--seconds, by default the XML refresh cycle plus 10 s, at least 310 s) must cover
one full XML refresh cycle: the agent re-reads every domain's XML every FULL_REFRESH_PASSES
view refreshes. Reconcile passes alone guarantee one every FULL_REFRESH_PASSES x
reconcile_interval_seconds (xml_refresh_cycle_s, 300 s by default); the reporter's builds
refresh the views too, so while reports flow it comes sooner (xml_refresh_cycle_expected_s).
A window shorter than xml_refresh_cycle_s is run anyway, with a WARNING on stderr,
window_covers_refresh=false and a "warning" key in the JSON.

Left out: CPU spent on the agent's behalf by other processes (libvirtd answering its calls, the
controller, QEMU, kernel work not charged to the agent's pid) and by children of the agent
(none is started during the window). Launch, boot and demotion happen before the window.
Prints one JSON object.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import threading
import time
from pathlib import Path
from concurrent.futures import ThreadPoolExecutor
from itertools import zip_longest

import psutil

from controller.config import ControllerConfig
from nodeagent.config import AgentConfig, load_config
from nodeagent.inventory import FULL_REFRESH_PASSES
from protos import agent_pb2, controller_pb2
from tests.agentproc import (AgentProcess, LabEnv, domain_cgroup_dir, exit_cleanly_on_sigterm, launch_request,
                             remove_test_domains, unique_name, wait_for, wait_for_console)
from tests.controllerproc import ControllerProcess, agent_settings

DEFAULTS = AgentConfig()
CONTROLLER_DEFAULTS = ControllerConfig()
HOG = "gleaner.workload=hog"
MIN_SLICE_FRACTION = 0.8   # the goal: every starved volunteer gets at least this much of its slice in every period


def refresh_cycles(config: AgentConfig) -> tuple[float, float]:
    """(guaranteed, expected) seconds between full XML refreshes with these settings: reconcile
    passes alone, and reconcile passes plus one per report the reporter builds."""
    guaranteed = FULL_REFRESH_PASSES * config.reconcile_interval_seconds
    passes_per_s = 1 / config.reconcile_interval_seconds
    if config.controller_address:
        passes_per_s += 1 / config.controller_report_seconds
    return guaranteed, FULL_REFRESH_PASSES / passes_per_s


class ReportCounter:
    """Polls the controller's ListNodes (never the agent) and records each report arrival of
    one node: the controller's monotonic clock is the host's, so `now - last_report_age` is the
    arrival time, and a new value means a new report."""

    def __init__(self, controller: ControllerProcess, node_id: str, report_seconds: float) -> None:
        self.stub = controller.stub()
        self.node_id = node_id
        self.poll = min(0.5, report_seconds / 4)
        self.tolerance = report_seconds / 2
        self.arrivals: list[float] = []
        self.ages: list[tuple[float, float]] = []  # (poll time, last_report_age)
        self.errors = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> "ReportCounter":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(self.poll):
            before = time.monotonic()
            try:
                nodes = self.stub.ListNodes(controller_pb2.ListNodesRequest(), timeout=5).nodes
            except Exception:  # noqa: BLE001 - a missed poll is counted, not fatal
                self.errors += 1
                continue
            now = (before + time.monotonic()) / 2
            for node in nodes:
                if node.node_id == self.node_id:
                    self.ages.append((now, node.last_report_age_seconds))
                    arrival = now - node.last_report_age_seconds
                    if not self.arrivals or arrival - self.arrivals[-1] > self.tolerance:
                        self.arrivals.append(arrival)

    def within(self, t0: float, t1: float) -> tuple[int, float, float]:
        """Reports that arrived in [t0, t1], the longest gap between two arrivals there (the
        first one counted from the last arrival before t0), and the longest report age seen."""
        inside = [a for a in self.arrivals if t0 <= a <= t1]
        before = [a for a in self.arrivals if a < t0][-1:]
        marks = before + inside
        gaps = [b - a for a, b in zip(marks, marks[1:])]
        ages = [age for at, age in self.ages if t0 <= at <= t1]
        return len(inside), max(gaps, default=float("nan")), max(ages, default=float("nan"))


def log_offset(service) -> int:
    return service.log_path.stat().st_size


def log_since(service, start: int, end: int | None = None) -> list[str]:
    with open(service.log_path, "rb") as f:
        f.seek(start)
        data = f.read() if end is None else f.read(end - start)
    return data.decode(errors="replace").splitlines()


def domain_cpu_ns(stub) -> dict[str, int]:
    return {d.name: d.cpu_time_ns for d in stub.ListDomains(agent_pb2.ListDomainsRequest()).domains}


def vcpu_cpu_ns(name: str) -> int:
    """A domain's vCPU time as the kernel counts it: the time on CPU of the threads in its vcpuN
    groups (/proc/<tid>/schedstat; libvirt makes no cpuacct group on these hosts). Read from
    outside, never by asking the agent, and found without the agent's code."""
    group = domain_cgroup_dir(name, "cpu")
    tids = [tid for tasks in sorted(group.glob("vcpu*/tasks")) for tid in tasks.read_text().split()]
    if not tids:
        raise SystemExit(f"no vCPU thread in {group}/vcpu*/tasks")
    return sum(int(Path(f"/proc/{tid}/schedstat").read_text().split()[0]) for tid in tids)


class PeriodSampler:
    """Reads the starved volunteers' vCPU time at every guard period boundary of the window, so
    each volunteer gets a figure for every period (a mean over the window would hide a volunteer
    starved in some periods, or two starved throughout beside three fed ones)."""

    def __init__(self, names: list[str], period: float) -> None:
        self.names, self.period = names, period
        self.marks: list[tuple[float, dict[str, int]]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> "PeriodSampler":
        self.marks.append((time.monotonic(), self._read()))
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def _read(self) -> dict[str, int]:
        return {name: vcpu_cpu_ns(name) for name in self.names}

    def _run(self) -> None:
        t0 = self.marks[0][0]
        k = 1
        while not self._stop.wait(max(0.0, t0 + k * self.period - time.monotonic())):
            self.marks.append((time.monotonic(), self._read()))
            k += 1

    def per_period(self) -> dict[str, list[float]]:
        """CPU seconds of each volunteer in each whole period, scaled to exactly one period
        (a mark taken late on a busy host would otherwise credit the extra time)."""
        out: dict[str, list[float]] = {name: [] for name in self.names}
        for (ta, a), (tb, b) in zip(self.marks, self.marks[1:]):
            for name in self.names:
                out[name].append((b[name] - a[name]) / 1e9 * self.period / (tb - ta))
        return out


def boot_all(stub, plan: list[tuple[str, int, str, str]]) -> None:
    """Launch every domain of the plan at once and wait until each guest is ready. Volunteers
    are promoted as soon as they run (at idle priority beside busy foreground VMs they would
    take minutes to boot). At once rather than one after another: the hogs pinned to one CPU
    would otherwise boot each beside all those before it (on a busy shared host one run took
    over 20 minutes to boot its 20 domains). Boots are outside the window."""
    def boot(entry: tuple[str, int, str, str]) -> None:
        name, role, cmdline, cpuset = entry
        reply = stub.LaunchDomain(launch_request(name, role, memory_mib=128, kernel_cmdline=cmdline, cpuset=cpuset),
                                  timeout=300)
        if role == agent_pb2.ROLE_BACKFILL:
            stub.SetDomainClass(agent_pb2.SetDomainClassRequest(name=name,
                                                                priority_class=agent_pb2.PRIORITY_CLASS_FOREGROUND))
        wait_for_console(reply.domain.console_log, "GLEANER-READY", timeout=900)
    with ThreadPoolExecutor(max_workers=len(plan)) as pool:
        for done, _ in enumerate(pool.map(boot, plan), start=1):
            print(f"domain {done}/{len(plan)} ready", file=sys.stderr, flush=True)


def count_events(lines: list[str], event: str) -> int:
    return sum(f" event={event} " in f"{line} " for line in lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--domains", type=int, default=20)
    parser.add_argument("--seconds", type=float, default=None,
                        help="the measured window; by default the XML refresh cycle plus 10 s (at least 310)")
    parser.add_argument("--keep-log", type=Path, default=None,
                        help="copy the agent's log here before the run's files are removed")
    parser.add_argument("--starve-cpu", type=int, default=max(os.sched_getaffinity(0)),
                        help="host CPU the starved volunteers and the foreground hog are pinned to")
    args = parser.parse_args(argv)
    if args.domains < 2:
        parser.error("--domains must be at least 2 (a foreground hog and a starved volunteer)")
    exit_cleanly_on_sigterm()
    volunteers = args.domains // 2
    starved = max(1, (volunteers + 1) // 2)
    env = LabEnv.create()
    # The harness's liveness thresholds (suspect after 2 s) suit its 0.5 s reports; with the
    # agent's real 2 s interval they would flap the node between up and suspect every report.
    controller = ControllerProcess(env, name="bench-ctl", settings=dict(
        use_prediction=False, suspect_after_seconds=CONTROLLER_DEFAULTS.suspect_after_seconds,
        down_after_seconds=CONTROLLER_DEFAULTS.down_after_seconds,
        liveness_check_seconds=CONTROLLER_DEFAULTS.liveness_check_seconds))
    # AgentProcess's test defaults are quicker than an agent's; this measures the real defaults.
    agent = AgentProcess(env, name="bench-overhead", grace_seconds=DEFAULTS.grace_seconds,
                         reap_interval=DEFAULTS.reap_interval_seconds,
                         settings={**agent_settings(controller), "controller_report_seconds":
                                   DEFAULTS.controller_report_seconds, "log_level": DEFAULTS.log_level,
                                   "reconcile_interval_seconds": DEFAULTS.reconcile_interval_seconds})
    counter: ReportCounter | None = None
    sampler: PeriodSampler | None = None
    try:
        controller.start()
        if controller.stub().GetBackfill(controller_pb2.GetBackfillRequest(), timeout=10).enabled:
            raise SystemExit("the controller's backfill is enabled; this benchmark needs it off")
        agent.start()
        config = load_config(agent.config_path)  # what the agent really runs with
        cycle, cycle_expected = refresh_cycles(config)
        seconds = args.seconds if args.seconds is not None else max(310.0, cycle + 10)
        warning = ""
        if seconds < cycle:
            warning = (f"the {seconds:g} s window is shorter than the agent's full XML refresh cycle "
                       f"({FULL_REFRESH_PASSES} reconcile passes x {config.reconcile_interval_seconds:g} s = "
                       f"{cycle:g} s): the figure may leave out a full refresh")
            print(f"WARNING: {warning}", file=sys.stderr, flush=True)
        stub = agent.stub()
        # (name, role, kernel_cmdline, cpuset): starved volunteers first, then the foreground hog
        # that starves them, then idle guests, volunteers and foreground alternating.
        cpu = str(args.starve_cpu)
        plan = [(unique_name(f"ovh-starved{i}"), agent_pb2.ROLE_BACKFILL, HOG, cpu) for i in range(starved)]
        plan.append((unique_name("ovh-fghog"), agent_pb2.ROLE_ON_DEMAND, HOG, cpu))
        idle_roles = zip_longest([agent_pb2.ROLE_BACKFILL] * (volunteers - starved),
                                 [agent_pb2.ROLE_ON_DEMAND] * (args.domains - volunteers - 1))
        idle = [role for pair in idle_roles for role in pair if role is not None]
        plan += [(unique_name(f"ovh-idle{i}"), role, "", "") for i, role in enumerate(idle)]
        boot_all(stub, plan)
        running = sum(d.state == agent_pb2.DOMAIN_STATE_RUNNING
                      for d in stub.ListDomains(agent_pb2.ListDomainsRequest()).domains)
        if running != args.domains:
            raise SystemExit(f"only {running} of {args.domains} domains are running")
        wait_for(lambda: controller.node_state(agent.name) == "up", 30, "the controller to see the node up", 0.5)
        counter = ReportCounter(controller, agent.name, config.controller_report_seconds).start()
        demoted_at = log_offset(agent)
        for name, role, _, _ in plan:
            if role == agent_pb2.ROLE_BACKFILL:
                stub.SetDomainClass(agent_pb2.SetDomainClassRequest(name=name, priority_class=role))
        # The guard judges a volunteer after one whole period of samples; start once it works.
        print("volunteers demoted; waiting for the guard's first boost", file=sys.stderr, flush=True)
        wait_for(lambda: count_events(log_since(agent, demoted_at), "guard.boost"),
                 3 * config.guard_period_seconds + 30, "the guard's first boost", 0.5)
        time.sleep(2)  # let the demotions' own work (events, XML re-reads) settle out of the window
        starved_names = [name for name, *_ in plan[:starved]]
        process = psutil.Process(agent.process.pid)
        snap_before = stub.GetMetrics(agent_pb2.GetMetricsRequest())
        dom0, d0 = domain_cpu_ns(stub), time.monotonic()
        print(f"window of {seconds:g} s starts", file=sys.stderr, flush=True)
        log0, ctl_log0 = log_offset(agent), log_offset(controller)
        sampler = PeriodSampler(starved_names, config.guard_period_seconds).start()
        cpu0, t0 = process.cpu_times(), time.monotonic()
        time.sleep(seconds)
        cpu1, t1 = process.cpu_times(), time.monotonic()
        sampler.stop()
        log1, ctl_log1 = log_offset(agent), log_offset(controller)
        dom1, d1 = domain_cpu_ns(stub), time.monotonic()
        snap = stub.GetMetrics(agent_pb2.GetMetricsRequest())
        rss = process.memory_info().rss
        counter.stop()
        node_state = controller.node_state(agent.name)
        window_log = log_since(agent, log0, log1)
        controller_log = log_since(controller, ctl_log0, ctl_log1)
    finally:
        if counter is not None:
            counter.stop()
        if sampler is not None:
            sampler.stop()
        agent.stop()
        if args.keep_log is not None and agent.log_path.exists():
            shutil.copyfile(agent.log_path, args.keep_log)
        controller.stop()
        remove_test_domains()
        env.remove()
    if len(snap.domains) != args.domains:  # a figure for an agent that samples nothing means nothing
        raise SystemExit(f"the agent's metrics cover {len(snap.domains)} of {args.domains} domains")
    used = (cpu1.user + cpu1.system) - (cpu0.user + cpu0.system)
    reports, max_gap, max_age = counter.within(t0, t1)
    print("report arrivals, seconds into the window: "
          + " ".join(f"{a - t0:.2f}" for a in counter.arrivals if t0 <= a <= t1), file=sys.stderr, flush=True)
    periods = (d1 - d0) / config.guard_period_seconds
    starved_cpu = [(dom1.get(n, 0) - dom0.get(n, 0)) / 1e9 / periods for n in starved_names]
    slice_s = config.guard_slice_ms / 1000
    per_period = sampler.per_period()
    # Every period in the window counts, for every starved volunteer (names in launch order).
    lowest = [min(per_period[n], default=float("nan")) for n in starved_names]
    short = {i: [round(c, 3) for c in per_period[n] if c < MIN_SLICE_FRACTION * slice_s]
             for i, n in enumerate(starved_names)}
    short = {i: c for i, c in short.items() if c}
    result = {
        "agent_cpu_percent": round(used / (t1 - t0) * 100, 3),
        "agent_self_reported_cpu_percent": round(snap.agent_cpu_percent, 3),
        "domains": args.domains, "domains_in_metrics": len(snap.domains), "seconds": round(t1 - t0, 1),
        "agent_rss_mib": round(rss / 2**20, 1), "host_busy_cores": round(snap.host.cpu_busy_cores, 2),
        "metrics_interval_s": round(snap_before.interval_seconds, 3),
        "volunteers": volunteers, "starved_volunteers": starved, "starve_cpu": args.starve_cpu,
        "guard_boosts": count_events(window_log, "guard.boost"),
        "guard_releases": count_events(window_log, "guard.release"),
        # A pass that put back a starved volunteer's CPU setting: the guard's books and the cgroup disagreed.
        "starved_cpu_drift_corrections": sum(" event=drift.corrected " in f"{l} " and "cpu." in l
                                             and any(n in l for n in starved_names) for l in window_log),
        "guard_period_s": config.guard_period_seconds, "guard_slice_s": config.guard_slice_ms / 1000,
        "starved_volunteer_cpu_s_per_guard_period": [round(c, 3) for c in starved_cpu],
        "starved_volunteer_vcpu_s_each_period": [[round(c, 3) for c in per_period[n]] for n in starved_names],
        "starved_volunteer_vcpu_s_lowest_period": [round(c, 3) for c in lowest],
        "periods_measured": len(sampler.marks) - 1,
        "min_slice_fraction_goal": MIN_SLICE_FRACTION,
        "periods_below_goal": sum(len(c) for c in short.values()),
        "reports_received_by_controller": reports,
        "reports_expected": int((t1 - t0) // config.controller_report_seconds),
        "report_interval_s": config.controller_report_seconds,
        "max_report_gap_s": round(max_gap, 2), "max_report_age_s": round(max_age, 2),
        "controller_polls_failed": counter.errors, "node_state_at_end": node_state,
        "node_liveness_changes_in_window": sum(count_events(controller_log, kind) for kind in
                                               ("node.suspect", "node.down", "node.up", "node.rejoined")),
        "agent_warnings_in_window": sum(" level=warning " in l or " level=error " in l for l in window_log),
        "reconcile_interval_s": config.reconcile_interval_seconds,
        "xml_refresh_cycle_s": round(cycle, 1), "xml_refresh_cycle_expected_s": round(cycle_expected, 1),
        "window_covers_refresh": t1 - t0 >= cycle,
    }
    if warning:
        result["warning"] = warning
        print(f"WARNING: {warning}", file=sys.stderr, flush=True)
    print(json.dumps(result))
    if sampler.marks and len(sampler.marks) < 2:
        print("FAIL: no whole guard period in the window", file=sys.stderr, flush=True)
        return 1
    if short:
        print(f"FAIL: starved volunteers got less than {MIN_SLICE_FRACTION:g} of the {slice_s:g} s slice in some "
              f"periods (volunteer index: CPU s in those periods): {short}", file=sys.stderr, flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

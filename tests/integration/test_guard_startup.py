"""The starvation guard on a domain it first sees while libvirt is still starting it (issue 23,
item 15): real libvirt, real QEMU, the real cgroup v1 hierarchy and /proc.

libvirt starts QEMU with every thread in the domain's emulator/ group and only about half a
second later makes vcpuN/ and moves each vCPU thread in. A reconcile pass that lists the
domain then hands it to the guard; the guard used to keep the thread list it read at that
moment (no vCPU thread at all), so it read the volunteer as a guest that never wants CPU and
never raised it, however starved, for the rest of its life (two of five volunteers in one
agent_overhead run got 0.025 s per 10 s period for 310 s).
"""
from __future__ import annotations

import threading
import time
from pathlib import Path

from gleaner_common.vocabulary import PriorityClass
from nodeagent.events import EventBus
from nodeagent.guard import GuardConfig
from nodeagent.host import cgroups
from nodeagent.priority import CpuWeights
from nodeagent.priorityctl import PriorityController
from protos import agent_pb2
from tests.agentproc import AgentProcess, launch_request, unique_name, wait_for


def test_a_volunteer_first_sampled_during_its_start_is_read_by_its_vcpu_threads(test_env):
    agent = AgentProcess(test_env, name="guard-startup").start()
    name = unique_name("guard-start")
    # A guard of its own in this process, ticking every 2 ms from the moment the domain's group
    # appears: so it surely samples the domain during libvirt's start-up. Its period is so long
    # that it never judges (it never writes to the cgroup); only what it reads is checked.
    guard = PriorityController(EventBus(), cgroups.ROOT, CpuWeights(), GuardConfig(period_seconds=3600))
    started = threading.Event()
    ticks_before_vcpus: list[int] = []

    def tick_through_start() -> None:
        group = None
        while not started.is_set():
            group = group or cgroups.domain_cgroup(cgroups.ROOT, guard.facts.version, name)
            if group is not None:
                if not cgroups.vcpu_groups(group) or not all((g / "tasks").read_text().split()
                                                             for g in cgroups.vcpu_groups(group)):
                    ticks_before_vcpus.append(1)
                guard.guard_tick({name: PriorityClass.VOLUNTEER})
            time.sleep(0.002)

    ticker = threading.Thread(target=tick_through_start)
    ticker.start()
    try:
        agent.stub().LaunchDomain(launch_request(name, agent_pb2.ROLE_ON_DEMAND), timeout=120)
        started.set()
        ticker.join()
        assert ticks_before_vcpus, "the guard never ticked while the domain was starting: nothing was tested"
        # The guest boots (TCG: its vCPU thread runs flat out for seconds): the guard must see it.
        t0 = time.monotonic()
        first = None
        while time.monotonic() - t0 < 10:
            guard.guard_tick({name: PriorityClass.VOLUNTEER})
            samples = guard._samples.get(name)
            if samples:
                first = first or samples[-1]
                if samples[-1][1] - first[1] > 50_000_000:
                    break
            time.sleep(0.25)
        samples = guard._samples.get(name)
        assert samples and first and samples[-1][1] - first[1] > 50_000_000, (
            f"the guard read {samples[-1][1] - first[1] if samples and first else None} ns of vCPU time in 10 s "
            "of a booting guest: it is not reading the vCPU threads")
        paths = guard._schedstat[name]
        vcpu_tids = {tid for g in cgroups.vcpu_groups(cgroups.domain_cgroup(cgroups.ROOT, 1, name))
                     for tid in (g / "tasks").read_text().split()}
        assert {Path(p).parent.name for p in paths} == vcpu_tids
    finally:
        started.set()
        ticker.join()
        agent.stop()


"""The guard's thread list on a cgroupfs of files laid out as libvirt makes it, stage by stage of
a domain's start (measured on libvirt 9: every thread in emulator/ for about 0.5 s, then an empty
vcpu0/, then the vCPU thread moved in). Issue 23, item 15; the real-libvirt twin is
tests/integration/test_guard_startup.py."""
from __future__ import annotations

from pathlib import Path

from gleaner_common.vocabulary import PriorityClass
from nodeagent.events import EventBus
from nodeagent.guard import GuardConfig
from nodeagent.host import cgroups
from nodeagent.priority import CpuWeights
from nodeagent.priorityctl import PriorityController


def tasks(group: Path, tids: list[int]) -> None:
    group.mkdir(parents=True, exist_ok=True)
    (group / "tasks").write_text("".join(f"{t}\n" for t in tids))


def test_no_thread_list_until_every_vcpu_group_holds_its_thread(tmp_path):
    group, proc = tmp_path / "qemu-12-vm.libvirt-qemu", tmp_path / "proc"
    tasks(group, [])
    tasks(group / "emulator", [10, 11, 12])        # QEMU's threads, the vCPU thread (11) among them
    assert cgroups.vcpu_schedstat_paths(group, 1, proc) is None
    tasks(group / "vcpu0", [])                     # made, not yet filled
    assert cgroups.vcpu_schedstat_paths(group, 1, proc) is None
    tasks(group / "vcpu0", [11])
    tasks(group / "emulator", [10, 12])
    assert cgroups.vcpu_schedstat_paths(group, 1, proc) == [proc / "11" / "schedstat"]


def test_vcpu_groups_nested_in_a_systemd_scope_are_found(tmp_path):
    scope, proc = tmp_path / "machine-qemu\\x2d3\\x2dvm.scope", tmp_path / "proc"
    tasks(scope / "libvirt" / "emulator", [20])
    tasks(scope / "libvirt" / "vcpu0", [21])
    tasks(scope / "libvirt" / "vcpu1", [22])
    assert cgroups.vcpu_schedstat_paths(scope, 1, proc) == [proc / "21" / "schedstat",
                                                                          proc / "22" / "schedstat"]


def test_a_volunteer_first_seen_while_starting_is_boosted_once_it_starves(tmp_path):
    root, proc = tmp_path / "cgroup", tmp_path / "proc"
    group = root / "cpu" / "machine" / "qemu-12-vm.libvirt-qemu"
    tasks(group / "emulator", [10, 11])
    (group / "cpu.shares").write_text("1024\n")
    (group / "cpu.idle").write_text("0\n")
    for tid in (10, 11):
        (proc / str(tid)).mkdir(parents=True)
        (proc / str(tid) / "schedstat").write_text("0 0 0\n")
    config = GuardConfig(period_seconds=10, slice_ms=500, tick_seconds=0.25, idle_tick_seconds=1.0)
    ctl = PriorityController(EventBus(), root, CpuWeights(), config, proc)
    ctl.guard_tick({"vm": PriorityClass.VOLUNTEER}, 0.0)      # start-up: no vCPU thread in place yet
    tasks(group / "vcpu0", [11])
    tasks(group / "emulator", [10])
    waited = 0
    for step in range(1, 13 * 4 + 1):                         # 13 s at the fast tick: starving all along
        waited += 250_000_000
        (proc / "11" / "schedstat").write_text(f"1000 {waited} 1\n")
        ctl.guard_tick({"vm": PriorityClass.VOLUNTEER}, step * 0.25)
        if ctl.is_boosted("vm"):
            break
    assert ctl.is_boosted("vm"), "a starving volunteer the guard first saw mid-start was never raised"
    assert (group / "cpu.idle").read_text().strip() == "0"

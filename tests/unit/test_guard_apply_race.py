"""A reconcile pass and a guard boost on the same volunteer at once (issue 23, item 15): the
pass reads the volunteer's effective class (not raised), the guard raises it and writes the
normal setting, then the pass writes idle. The volunteer then sat idle, starving, while the guard
believed it raised and waited for CPU that never came, until the next pass 10 s later. Played
here on a cgroupfs of files, the pass held between its read and its write."""
from __future__ import annotations

import threading
from pathlib import Path

from gleaner_common.vocabulary import PriorityClass
from nodeagent.events import EventBus
from nodeagent.guard import GuardConfig
from nodeagent.host import cgroups
from nodeagent.priority import CpuWeights
from nodeagent.priorityctl import PriorityController


def starving_volunteer(tmp_path: Path) -> tuple[PriorityController, Path, Path]:
    root, proc = tmp_path / "cgroup", tmp_path / "proc"
    group = root / "cpu" / "machine" / "qemu-4-vm.libvirt-qemu"
    (group / "vcpu0").mkdir(parents=True)
    (group / "vcpu0" / "tasks").write_text("40\n")
    (group / "cpu.shares").write_text("2\n")
    (group / "cpu.idle").write_text("1\n")
    (group.parent / "cpu.idle").write_text("0\n")   # the kernel has cpu.idle: volunteers are idle
    (proc / "40").mkdir(parents=True)
    schedstat = proc / "40" / "schedstat"
    schedstat.write_text("0 0 0\n")
    ctl = PriorityController(EventBus(), root, CpuWeights(), GuardConfig(period_seconds=10), proc)
    ctl.guard_tick({"vm": PriorityClass.VOLUNTEER}, 0.0)
    schedstat.write_text(f"1000 {10 * 10**9} 1\n")   # 10 s waiting to run, 1 µs run: starving
    return ctl, group, schedstat


def test_a_reconcile_write_never_lands_after_a_boost_it_did_not_see(tmp_path):
    ctl, group, _ = starving_volunteer(tmp_path)
    real_apply = cgroups.apply_cpu
    in_pass, boosted = threading.Event(), threading.Event()

    def held_pass(path, version, want):   # the pass has read its setting; hold it before the write
        if threading.current_thread().name == "reconcile":
            in_pass.set()
            boosted.wait(1.0)   # the guard's tick, if it can run meanwhile
        return real_apply(path, version, want)
    cgroups.apply_cpu = held_pass
    try:
        reconcile = threading.Thread(target=ctl.apply, args=("vm", PriorityClass.VOLUNTEER), name="reconcile")
        reconcile.start()
        assert in_pass.wait(5)
        guard = threading.Thread(target=lambda: (ctl.guard_tick({"vm": PriorityClass.VOLUNTEER}, 10.0),
                                                 boosted.set()))
        guard.start()
        guard.join(5)
        reconcile.join(5)
    finally:
        cgroups.apply_cpu = real_apply
    assert ctl.facts.cpu_idle and ctl.is_boosted("vm")
    assert cgroups.read_cpu(group, 1) == ctl.setting(PriorityClass.FOREGROUND), \
        "raised in the guard's books, idle in the cgroup"

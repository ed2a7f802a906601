"""Priority classes on a fake cgroupfs (v1 and v2), and the starvation guard's rule."""
from __future__ import annotations

from collections import deque
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from gleaner_common.vocabulary import PriorityClass
from nodeagent.host import cgroups
from nodeagent.guard import GuardAction, GuardConfig, at_risk, decide, lookahead, to_sample, trim, window
from nodeagent.priority import CpuWeights, cpu_setting


def fake_domain_cgroup(root: Path, version: int, name: str, idle_file: bool = True) -> Path:
    """A cgroupfs laid out as libvirt makes it without systemd, with a second domain beside."""
    if version == 2:
        (root / "cgroup.controllers").write_text("cpu io memory\n")
    base = root if version == 2 else root / "cpu"
    groups = []
    for i, dom in enumerate((name, "other"), start=7):
        group = base / "machine" / f"qemu-{i}-{dom}.libvirt-qemu"
        group.mkdir(parents=True)
        (group / ("cpu.weight" if version == 2 else "cpu.shares")).write_text("100\n" if version == 2 else "1024\n")
        if idle_file:
            (group / "cpu.idle").write_text("0\n")
        groups.append(group)
    return groups[0]


@pytest.mark.parametrize("version", [1, 2])
def test_domain_cgroup_is_found_by_exact_name(tmp_path, version):
    group = fake_domain_cgroup(tmp_path, version, "vm-1")
    assert cgroups.domain_cgroup(tmp_path, version, "vm-1") == group
    assert cgroups.domain_cgroup(tmp_path, version, "vm") is None  # not a prefix match
    assert cgroups.domain_cgroup(tmp_path, version, "1") is None


def test_systemd_scope_names_are_understood(tmp_path):
    scope = tmp_path / "machine.slice" / "machine-qemu\\x2d3\\x2dvm\\x2d1.scope"
    scope.mkdir(parents=True)
    (tmp_path / "cgroup.controllers").write_text("cpu\n")
    assert cgroups.domain_cgroup(tmp_path, 2, "vm-1") == scope


@pytest.mark.parametrize("version,weight_file,normal", [(1, "cpu.shares", 1024), (2, "cpu.weight", 100)])
def test_volunteer_goes_idle_without_touching_the_weight_and_back(tmp_path, version, weight_file, normal):
    group = fake_domain_cgroup(tmp_path, version, "vm")
    facts = cgroups.CgroupFacts(version=version, cpu_idle=True)
    volunteer = cpu_setting(PriorityClass.VOLUNTEER, facts, CpuWeights())
    foreground = cpu_setting(PriorityClass.FOREGROUND, facts, CpuWeights())
    (group / weight_file).write_text("77\n")
    assert cgroups.apply_cpu(group, version, volunteer) == ["cpu.idle 0 -> 1"]
    assert (group / weight_file).read_text() == "77\n"  # the kernel would refuse a write now
    assert cgroups.apply_cpu(group, version, volunteer) == []  # already true: nothing written
    changes = cgroups.apply_cpu(group, version, foreground)
    assert changes == ["cpu.idle 1 -> 0", f"{weight_file} 77 -> {normal}"]
    assert cgroups.read_cpu(group, version) == cgroups.CpuSetting(idle=False, weight=normal)


@pytest.mark.parametrize("version,weight_file,lowest", [(1, "cpu.shares", 2), (2, "cpu.weight", 1)])
def test_without_cpu_idle_volunteers_get_the_lowest_weight(tmp_path, version, weight_file, lowest):
    group = fake_domain_cgroup(tmp_path, version, "vm", idle_file=False)
    facts = cgroups.detect(tmp_path)
    assert facts == cgroups.CgroupFacts(version=version, cpu_idle=False)
    setting = cpu_setting(PriorityClass.VOLUNTEER, facts, CpuWeights())
    assert setting == cgroups.CpuSetting(idle=False, weight=lowest)
    assert cgroups.apply_cpu(group, version, setting) == [f"{weight_file} {'1024' if version == 1 else '100'} -> {lowest}"]
    assert not (group / "cpu.idle").exists()


def test_cpu_idle_can_be_turned_off_by_configuration():
    facts = cgroups.CgroupFacts(version=1, cpu_idle=True)
    assert cpu_setting(PriorityClass.VOLUNTEER, facts, CpuWeights(use_cpu_idle=False)) == cgroups.CpuSetting(False, 2)


# -- the starvation guard -------------------------------------------------------------------

def test_window_needs_a_full_period_of_samples():
    samples = [(0.0, 0, 0), (5.0, 10, 1), (10.0, 30, 2), (12.0, 40, 5)]
    assert window(samples, 12.0, 10.0) == (40, 5)  # from the newest sample at or before t=2, t=0
    assert window(samples, 12.0, 20.0) is None
    assert window(samples[2:], 12.0, 10.0) is None


def test_boost_then_release_after_the_slice():
    config = GuardConfig(period_seconds=10, slice_ms=500)
    starved = [(t, 0, t * 900_000_000) for t in range(11)]  # runnable all along, never ran
    assert decide(starved, 10, False, config) is GuardAction.BOOST
    assert decide([(1, 0, 0), (11, 400_000_000, 0)], 11, True, config) is GuardAction.NONE
    assert decide([(2, 0, 0), (12, 500_000_000, 0)], 12, True, config) is GuardAction.RELEASE
    busy = [(0, 0, 0), (10, 600_000_000, 0)]
    assert decide(busy, 10, False, config) is GuardAction.NONE
    assert decide(starved, 10, False, GuardConfig(enabled=False)) is GuardAction.NONE
    assert decide(starved, 10, True, GuardConfig(enabled=False)) is GuardAction.RELEASE  # never stuck raised


def test_an_idle_volunteer_is_not_starving():
    idle = [(t, t * 1_000_000, 0) for t in range(11)]  # ran 10 ms, never waited: it wanted nothing
    assert decide(idle, 10, False, GuardConfig(period_seconds=10, slice_ms=500)) is GuardAction.NONE
    barely = [(t, 0, t * 20_000_000) for t in range(11)]  # waited 200 ms in all: would not reach e
    assert decide(barely, 10, False, GuardConfig(period_seconds=10, slice_ms=500)) is GuardAction.NONE


def simulate(idle_rate: float, boosted_rate: float, config: GuardConfig, seconds: float):
    """A CPU-bound volunteer that gets `idle_rate` of a CPU at minimal priority (waiting the
    rest) and `boosted_rate` when raised; returns (times, cumulative cpu ns, boosted flags)."""
    samples: deque = deque()
    cpu, waited, boosted, t = 0.0, 0.0, False, 0.0
    times, cpus, flags = [], [], []
    while t <= seconds:
        samples.append((t, int(cpu), int(waited)))
        trim(samples, t, config.period_seconds)
        action = decide(samples, t, boosted, config)
        if action is GuardAction.BOOST:
            boosted = True
        elif action is GuardAction.RELEASE:
            boosted = False
        times.append(t)
        cpus.append(cpu)
        flags.append(boosted)
        rate = boosted_rate if boosted else idle_rate
        cpu += rate * config.tick_seconds * 1e9
        waited += (1 - rate) * config.tick_seconds * 1e9
        t += config.tick_seconds
    return times, cpus, flags


@settings(max_examples=60, deadline=None)
@given(idle_rate=st.floats(0, 0.02), boosted_rate=st.floats(0.2, 1.0),
       period=st.sampled_from([5.0, 10.0, 20.0]), slice_ms=st.sampled_from([100.0, 500.0, 1000.0]))
def test_a_starving_volunteer_gets_its_slice_every_period_and_little_more(idle_rate, boosted_rate, period, slice_ms):
    tick = 0.25
    config = GuardConfig(period_seconds=period, slice_ms=slice_ms, tick_seconds=tick)
    times, cpus, flags = simulate(idle_rate, boosted_rate, config, seconds=period * 12)
    slice_ns = slice_ms * 1e6
    # Once the first deficit is made up, every window of p holds e: the lookahead (two ticks)
    # counts the CPU that leaves the window before the next tick. (Without it a window held e
    # less one tick at the boosted rate: 0.375 s of 0.5 at half a CPU, under the 0.8 e goal.)
    per_period = int(period / tick)
    settle = per_period + int((slice_ms / 1000 / boosted_rate) / tick) + 2
    for i in range(settle + per_period, len(times)):
        # (the bound is exact, so allow a nanosecond of float rounding)
        assert cpus[i] - cpus[i - per_period] >= slice_ns - 1, f"starved around t={times[i]}"
    # The foreground's loss: time raised is about e/(p - L) of a CPU (at the boosted rate), no more.
    after = flags[settle:]
    raised = sum(after) * tick / (len(after) * tick)
    ahead = lookahead(config)
    assert raised * boosted_rate <= (slice_ms / 1000 + boosted_rate * tick) / (period - ahead)


@given(idle_rate=st.floats(0.1, 1.0))
def test_a_volunteer_that_gets_enough_is_never_boosted(idle_rate):
    config = GuardConfig(period_seconds=10, slice_ms=500, tick_seconds=0.25)
    _, _, flags = simulate(idle_rate, 1.0, config, seconds=60)
    assert not any(flags)


def test_between_slow_ticks_only_watched_volunteers_are_read():
    assert to_sample(["a", "b", "c"], {"b"}, slow_tick_due=True) == ["a", "b", "c"]
    assert to_sample(["a", "b", "c"], {"b", "gone"}, slow_tick_due=False) == ["b"]


def test_a_starving_volunteer_beside_fed_ones_keeps_its_slice_and_the_fed_are_read_once_a_second():
    """Guard steps as PriorityController.guard_tick takes them (to_sample, then the rule per
    volunteer read) over one starving volunteer and three that get a whole CPU: the starving one
    still gets e every period, and the fed ones are read at the slow tick only."""
    config = GuardConfig(period_seconds=10, slice_ms=500, tick_seconds=0.25, idle_tick_seconds=1.0)
    rates = {"hungry": 0.0, "fed1": 1.0, "fed2": 1.0, "fed3": 1.0}
    used = {name: [0.0, 0.0] for name in rates}   # cumulative ns run and waited
    samples = {name: deque() for name in rates}
    boosted, risky, reads, ran_at = set(), set(), dict.fromkeys(rates, 0), []
    slow_at, t = 0.0, 0.0
    while t <= 120:
        slow = t >= slow_at
        if slow:
            slow_at = t + config.idle_tick_seconds
        for name in to_sample(rates, boosted | risky, slow):
            reads[name] += 1
            samples[name].append((t, int(used[name][0]), int(used[name][1])))
            trim(samples[name], t, config.period_seconds)
            action = decide(samples[name], t, name in boosted, config)
            (risky.add if at_risk(samples[name], t, config) else risky.discard)(name)
            if action is GuardAction.BOOST:
                boosted.add(name)
            elif action is GuardAction.RELEASE:
                boosted.discard(name)
        ran_at.append(used["hungry"][0])
        for name, rate in rates.items():
            got = 1.0 if name in boosted else rate
            used[name][0] += got * config.tick_seconds * 1e9
            used[name][1] += (1 - got) * config.tick_seconds * 1e9
        t += config.tick_seconds
    per_period = int(config.period_seconds / config.tick_seconds)
    for i in range(3 * per_period, len(ran_at)):   # after the first deficit is made up
        assert ran_at[i] - ran_at[i - per_period] >= config.slice_ms * 1e6 - config.tick_seconds * 1e9 - 1
    assert all(reads[name] == 121 for name in ("fed1", "fed2", "fed3"))   # once a second over 120 s
    assert reads["hungry"] > 3 * 121   # watched: read at the fast tick nearly all the time


def test_the_guard_reads_calm_volunteers_at_its_slow_tick_only(tmp_path):
    """PriorityController.guard_tick on a cgroupfs and /proc of files: a starving volunteer is
    read at every fast tick once watched and raised; a fed one and one that joins later only at
    the slow ticks; one that is gone loses its samples."""
    from nodeagent.events import EventBus
    from nodeagent.priorityctl import PriorityController
    root, proc = tmp_path / "cgroup", tmp_path / "proc"
    schedstat = {}
    for i, name in enumerate(("hungry", "fed", "late"), start=1):
        group = root / "cpu" / "machine" / f"qemu-{i}-{name}.libvirt-qemu"
        (group / "vcpu0").mkdir(parents=True)
        (group / "cpu.shares").write_text("1024\n")
        (group / "cpu.idle").write_text("0\n")
        (group / "vcpu0" / "tasks").write_text(f"{100 + i}\n")
        (proc / str(100 + i)).mkdir(parents=True)
        schedstat[name] = proc / str(100 + i) / "schedstat"
    config = GuardConfig(period_seconds=10, slice_ms=500, tick_seconds=0.25, idle_tick_seconds=1.0)
    ctl = PriorityController(EventBus(), root, CpuWeights(), config, proc)
    reads = dict.fromkeys(schedstat, 0)
    raised_ticks = 0
    real_read = cgroups.read_schedstat
    used = {name: [0, 0] for name in schedstat}   # ns run, ns waited

    def counted(paths):
        reads[next(n for n, p in schedstat.items() if p in paths)] += 1
        return real_read(paths)
    cgroups.read_schedstat = counted
    try:
        for step in range(241):   # 60 s of fast ticks
            now = step * 0.25
            volunteers = {"hungry": PriorityClass.VOLUNTEER, "fed": PriorityClass.VOLUNTEER}
            if now >= 30:
                volunteers["late"] = PriorityClass.VOLUNTEER
            for name, path in schedstat.items():
                path.write_text(f"{used[name][0]} {used[name][1]} 1\n")
            ctl.guard_tick(volunteers, now)
            raised_ticks += ctl.is_boosted("hungry")
            for name in schedstat:   # the hungry one runs only while raised, the others all they want
                got = 1.0 if name != "hungry" or ctl.is_boosted(name) else 0.0
                used[name][0] += int(got * 0.25e9)
                used[name][1] += int((1 - got) * 0.25e9)
        assert reads["fed"] == 61 and reads["late"] == 31   # once a second (late: from 30 s)
        assert reads["hungry"] > 150                        # watched most of the time
        assert 0 < raised_ticks < 120   # raised for its slices, not throughout
        ctl.guard_tick({"fed": PriorityClass.VOLUNTEER}, 60.25)
        assert "hungry" not in ctl._samples and "late" not in ctl._samples
    finally:
        cgroups.read_schedstat = real_read


# -- counters read from the kernel --------------------------------------------------------------

def test_kernel_files_are_read_whole_and_a_missing_one_says_so(tmp_path):
    small, large = tmp_path / "cpu.shares", tmp_path / "io_service_bytes_recursive"
    small.write_text("1024\n")
    large.write_text("".join(f"8:{i} Read {i}\n" for i in range(20000)))   # past one 64 KiB read
    assert cgroups.read_small(small) == "1024\n"
    assert cgroups.read_small(large) == large.read_text()
    with pytest.raises(FileNotFoundError):
        cgroups.read_small(tmp_path / "gone")


def test_schedstat_of_vcpu_threads_only(tmp_path):
    group = tmp_path / "qemu-1-vm.libvirt-qemu"
    proc = tmp_path / "proc"
    for sub, tids in (("vcpu0", [11]), ("vcpu1", [12]), ("emulator", [10, 13])):
        (group / sub).mkdir(parents=True)
        (group / sub / "tasks").write_text("".join(f"{t}\n" for t in tids))
    for tid, run, wait in ((10, 999, 999), (11, 100, 7), (12, 50, 3), (13, 999, 999)):
        (proc / str(tid)).mkdir(parents=True)
        (proc / str(tid) / "schedstat").write_text(f"{run} {wait} 42\n")
    paths = cgroups.vcpu_schedstat_paths(group, 1, proc)
    assert cgroups.read_schedstat(paths) == (150, 10)  # the emulator's threads are not the guest's
    (proc / "12" / "schedstat").unlink()
    with pytest.raises(FileNotFoundError):
        cgroups.read_schedstat(paths)


def test_block_and_cpu_counters_v1_and_v2(tmp_path):
    v1 = tmp_path / "v1"
    v1.mkdir()
    (v1 / "blkio.throttle.io_service_bytes_recursive").write_text(
        "254:0 Read 4096\n254:0 Write 8192\n254:0 Sync 0\n254:16 Read 1\n254:16 Write 2\nTotal 12291\n")
    (v1 / "blkio.throttle.io_serviced_recursive").write_text("254:0 Read 1\n254:0 Write 2\nTotal 3\n")
    (v1 / "cpuacct.usage").write_text("123456789\n")
    assert cgroups.block_counters(v1, 1) == cgroups.BlockCounters(4097, 8194, 1, 2)
    assert cgroups.cpu_usage_ns(v1, 1) == 123456789
    v2 = tmp_path / "v2"
    v2.mkdir()
    (v2 / "io.stat").write_text("254:0 rbytes=10 wbytes=20 rios=1 wios=2 dbytes=0 dios=0\n8:0 rbytes=5 wbytes=0 rios=1 wios=0\n")
    (v2 / "cpu.stat").write_text("usage_usec 1500\nuser_usec 1000\nsystem_usec 500\n")
    assert cgroups.block_counters(v2, 2) == cgroups.BlockCounters(15, 20, 2, 2)
    assert cgroups.cpu_usage_ns(v2, 2) == 1_500_000
    assert cgroups.block_counters(tmp_path, 2) == cgroups.BlockCounters()  # no io.stat: nothing yet


# -- disk ----------------------------------------------------------------------------------------

from nodeagent.host import blockdev  # noqa: E402
from nodeagent.priority import DiskPolicy, DiskSetting, disk_mechanism, disk_setting  # noqa: E402


@pytest.mark.parametrize("text,active", [("none [mq-deadline] kyber bfq\n", "mq-deadline"),
                                         ("mq-deadline kyber [bfq] none\n", "bfq"), ("[none]\n", "none"),
                                         ("none\n", "none"), ("", "unknown")])
def test_active_scheduler_is_the_bracketed_one(text, active):
    assert blockdev.parse_scheduler(text) == active


def test_scheduler_of_a_partition_is_its_disks(tmp_path, monkeypatch):
    disk = tmp_path / "devices" / "vda"
    (disk / "vda1").mkdir(parents=True)
    (disk / "vda1" / "partition").write_text("1\n")
    (disk / "queue").mkdir()
    (disk / "queue" / "scheduler").write_text("none mq-deadline kyber [bfq]\n")
    (tmp_path / "dev" / "block").mkdir(parents=True)
    (tmp_path / "dev" / "block" / "254:1").symlink_to(disk / "vda1")
    monkeypatch.setattr(blockdev, "device_of", lambda path: (254, 1))
    assert blockdev.scheduler_of(tmp_path / "anything", sys_root=tmp_path) == "bfq"
    monkeypatch.setattr(blockdev, "device_of", lambda path: (9, 9))
    assert blockdev.scheduler_of(tmp_path / "anything", sys_root=tmp_path) == "unknown"


def test_volunteers_are_weighted_under_bfq_and_capped_elsewhere():
    policy = DiskPolicy(foreground_weight=900, volunteer_weight=100, volunteer_bytes_per_second=10, volunteer_iops=5)
    assert disk_mechanism("bfq") == "weights"
    assert {disk_mechanism(s) for s in ("mq-deadline", "kyber", "none", "unknown")} == {"caps"}
    for mechanism in ("weights", "caps"):
        assert disk_setting(PriorityClass.FOREGROUND, mechanism, policy) == DiskSetting(900, 0, 0)  # never capped
    assert disk_setting(PriorityClass.VOLUNTEER, "weights", policy) == DiskSetting(100, 0, 0)
    assert disk_setting(PriorityClass.VOLUNTEER, "caps", policy) == DiskSetting(100, 10, 5)


def test_foreground_traffic_is_never_shaped():
    from nodeagent.priority import NetCap, net_cap
    assert net_cap(PriorityClass.FOREGROUND, 100, 200) == NetCap(0, 0)
    assert net_cap(PriorityClass.VOLUNTEER, 100, 200) == NetCap(100, 200)


def test_process_cpu_time_of_a_group(tmp_path):
    import os
    group = tmp_path / "qemu-1-vm.libvirt-qemu"
    (group / "emulator").mkdir(parents=True)
    (group / "cgroup.procs").write_text("")
    (group / "emulator" / "cgroup.procs").write_text("321\n")
    (tmp_path / "proc" / "321").mkdir(parents=True)
    fields = ["S"] + ["0"] * 10 + ["250", "50"] + ["0"] * 30  # utime, stime = 250, 50 ticks
    (tmp_path / "proc" / "321" / "stat").write_text("321 (qemu-system-x86 (odd) name) " + " ".join(fields) + "\n")
    assert cgroups.group_pids(group) == [321]
    assert cgroups.process_cpu_ns([321], tmp_path / "proc") == 300 * 1_000_000_000 // os.sysconf("SC_CLK_TCK")
    with pytest.raises(FileNotFoundError):
        cgroups.process_cpu_ns([999], tmp_path / "proc")


def test_group_finder_remembers_paths_and_misses(tmp_path):
    group = fake_domain_cgroup(tmp_path, 1, "vm")
    finder = cgroups.GroupFinder(tmp_path, 1, miss_seconds=3600)
    assert finder.find("vm") == group
    assert finder.find("vm", "cpuacct") is None
    acct = tmp_path / "cpuacct" / "machine" / group.name
    acct.mkdir(parents=True)
    assert finder.find("vm", "cpuacct") is None  # a miss is remembered for miss_seconds
    finder.forget("vm")
    assert finder.find("vm", "cpuacct") == acct


def test_only_hungry_volunteers_near_their_slice_are_watched_closely():
    config = GuardConfig(period_seconds=10, slice_ms=500)
    hungry = [(0, 0, 0), (10, 600_000_000, 5_000_000_000)]   # ran 0.6 s of a wanted 5.6 s
    idle = [(0, 0, 0), (10, 10_000_000, 0)]                  # wanted nothing
    fed = [(0, 0, 0), (10, 5_000_000_000, 4_000_000_000)]    # got plenty
    assert at_risk(hungry, 10, config) and not at_risk(idle, 10, config) and not at_risk(fed, 10, config)


def test_events_reach_subscribers_and_the_log_at_their_level(caplog):
    import logging
    from nodeagent.events import Event, EventBus
    bus = EventBus()
    q = bus.subscribe()
    with caplog.at_level(logging.INFO, logger="nodeagent.events"):
        bus.publish(Event("network.limited", "vm1", "this kernel cannot police traffic from the guest",
                          {"interface": "vnet0"}, level=logging.WARNING))
        bus.publish(Event("drift.corrected", "vm1", "disk weight 500 -> 100"))
    assert [(e.kind, e.fields) for e in (q.get_nowait(), q.get_nowait())] == [
        ("network.limited", {"interface": "vnet0"}), ("drift.corrected", {})]
    assert [(r.getMessage(), r.levelno) for r in caplog.records] == [
        ("network.limited", logging.WARNING), ("drift.corrected", logging.INFO)]

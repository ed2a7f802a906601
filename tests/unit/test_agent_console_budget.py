"""The console directory's byte budget (issue 23): over lifecycle.console_budget_mib, ended
domains' files go, the domain that wrote last the longest ago first, each logged with its size;
a running domain's files never go. Real files in a temporary directory; the reaper's sweep runs
against a stand-in hypervisor that only says which domains exist and run."""
from __future__ import annotations

import logging
import os
from types import SimpleNamespace

import pytest

from gleaner_common.config import ConfigError
from nodeagent.config import AgentConfig, check_config, parse_config
from nodeagent.domains import NameLocks
from nodeagent.host.logfiles import all_logs, over_budget
from nodeagent.reaper import MIB, Reaper

NOW = 1e9


def write(path, size: int, age: float) -> None:
    path.write_bytes(b"x" * size)
    os.utime(path, (NOW - age, NOW - age))


def test_the_budget_takes_ended_domains_oldest_first_and_never_a_running_one(tmp_path):
    write(tmp_path / "running.log", 500, age=9000)       # the oldest of all, but its domain runs
    write(tmp_path / "old.log", 300, age=8000)
    write(tmp_path / "old.log.0", 100, age=8500)         # a rotated copy goes with its log
    write(tmp_path / "middle.log", 300, age=5000)
    write(tmp_path / "middle.work.1", 50, age=100)       # its newest file says when it last wrote
    write(tmp_path / "recent.log", 300, age=10)
    (tmp_path / "notes.txt").write_bytes(b"y" * 10_000)  # not a domain's: neither counted nor taken
    logs = all_logs(tmp_path)
    assert [item.name for item in logs] == ["running", "old", "middle", "recent"]
    assert {item.name: item.size for item in logs} == {"running": 500, "old": 400, "middle": 350, "recent": 300}
    # 1550 bytes: within 1200 once "old" (400) goes
    assert [item.name for item in over_budget(logs, 1200, running={"running"})] == ["old"]
    # within 600 only after old, middle and recent: running's 500 stays however old
    assert [item.name for item in over_budget(logs, 600, running={"running"})] == ["old", "middle", "recent"]
    assert [item.name for item in over_budget(logs, 100, running={"running"})] == ["old", "middle", "recent"]
    assert over_budget(logs, 1550, running=()) == []
    assert all_logs(tmp_path / "missing") == []


class Libvirt:
    """Which domains exist and run: all the sweep asks of libvirt."""

    def __init__(self, running: set[str], stopped: set[str]) -> None:
        self.running, self.stopped = running, stopped

    def active_domain_names(self) -> set[str]:
        return set(self.running)

    def get_domain(self, name: str):
        if name in self.running | self.stopped:
            return SimpleNamespace(name=name, active=name in self.running)
        return None


def sweep(config: AgentConfig, libvirt: Libvirt, locks: NameLocks | None = None) -> list[str]:
    reaper = Reaper(config, libvirt, inventory=None, domains=SimpleNamespace(locks=locks or NameLocks()))
    return reaper._keep_console_logs_within_budget()


def test_the_sweep_removes_ended_domains_logs_until_within_budget_and_logs_each_file(tmp_path, caplog):
    config = AgentConfig(state_dir=tmp_path, console_budget_mib=16)
    console = config.console_dir
    console.mkdir(parents=True)
    write(console / "vm-running.log", 13 * MIB, age=9000)
    write(console / "vm-gone.log", 4 * MIB, age=8000)
    write(console / "vm-gone.log.0", 2 * MIB, age=8100)
    write(console / "vm-stopped.log", 3 * MIB, age=7000)   # defined but shut off: ended too
    write(console / "vm-fresh.log", 1 * MIB, age=5)
    with caplog.at_level(logging.INFO, logger="nodeagent.reaper"):
        removed = sweep(config, Libvirt(running={"vm-running"}, stopped={"vm-stopped"}))
    assert removed == ["console-budget:vm-gone", "console-budget:vm-stopped"]   # 23 -> 17 -> 14 MiB
    assert sorted(p.name for p in console.iterdir()) == ["vm-fresh.log", "vm-running.log"]
    lines = [r for r in caplog.records if r.getMessage() == "console.log_removed_over_budget"]
    assert [(r.domain, os.path.basename(r.path), r.bytes) for r in lines] == [
        ("vm-gone", "vm-gone.log", 4 * MIB), ("vm-gone", "vm-gone.log.0", 2 * MIB),
        ("vm-stopped", "vm-stopped.log", 3 * MIB)]
    assert not [r for r in caplog.records if r.getMessage() == "console.budget_exceeded"]
    assert sweep(config, Libvirt(running={"vm-running"}, stopped=set())) == []   # within budget: nothing


def test_running_domains_logs_stay_over_budget_and_the_excess_is_said(tmp_path, caplog):
    config = AgentConfig(state_dir=tmp_path, console_budget_mib=16)
    console = config.console_dir
    console.mkdir(parents=True)
    write(console / "vm-a.log", 10 * MIB, age=9000)
    write(console / "vm-b.log", 10 * MIB, age=8000)
    write(console / "vm-busy.log", 1 * MIB, age=7000)   # ended, but a launch of its name holds its lock
    locks = NameLocks()
    with caplog.at_level(logging.INFO, logger="nodeagent.reaper"), locks.hold("vm-busy"):
        assert sweep(config, Libvirt(running={"vm-a", "vm-b"}, stopped=set()), locks) == []
    assert sorted(p.name for p in console.iterdir()) == ["vm-a.log", "vm-b.log", "vm-busy.log"]
    [warning] = [r for r in caplog.records if r.getMessage() == "console.budget_exceeded"]
    assert warning.levelno == logging.WARNING and warning.total_bytes == 21 * MIB and warning.budget_bytes == 16 * MIB


def test_a_domain_running_again_since_the_scan_keeps_its_log(tmp_path):
    """The scan's running set is stale by the time a name's lock is taken: libvirt is asked again."""
    config = AgentConfig(state_dir=tmp_path, console_budget_mib=16)
    config.console_dir.mkdir(parents=True)
    write(config.console_dir / "vm-again.log", 20 * MIB, age=100)

    class Relaunched(Libvirt):
        def active_domain_names(self) -> set[str]:
            return set()   # the listing missed it; the lookup under its lock does not
    assert sweep(config, Relaunched(running={"vm-again"}, stopped=set())) == []
    assert (config.console_dir / "vm-again.log").exists()


@pytest.mark.parametrize("value", [0, 15, 1024 * 1024 + 1, -1])
def test_the_budget_is_bounded(value):
    with pytest.raises(ConfigError, match=rf"agent.toml: lifecycle.console_budget_mib must be within "
                                          rf"16\.\.1048576 \(a finite number\), not {value}"):
        check_config(AgentConfig(console_budget_mib=value), "agent.toml")


def test_the_budget_is_read_from_the_lifecycle_section_with_a_default():
    assert AgentConfig().console_budget_mib == 1024
    assert parse_config({"lifecycle": {"console_budget_mib": 64}}).console_budget_mib == 64
    with pytest.raises(ConfigError, match="console_budget_mib"):
        parse_config({"lifecycle": {"console_budget_mib": "lots"}})

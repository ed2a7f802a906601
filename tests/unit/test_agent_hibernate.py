"""Hibernation's pure parts: configuration, state files, naps and the work clock, the budget."""
from __future__ import annotations

import os
import time
from datetime import datetime, timezone
from pathlib import Path
from types import SimpleNamespace

import pytest

from gleaner_common.config import ConfigError
from gleaner_common.vocabulary import PriorityClass
from nodeagent.config import AgentConfig, check_config, parse_config
from nodeagent.hibernation import Hibernation, HibernationBudget, restore_xml
from nodeagent.host import statefiles
from nodeagent.host.domainxml import GleanerMetadata, metadata_xml, read_metadata, slept_since, with_nap
from nodeagent.host.statefiles import Kind
from nodeagent.inventory import guest_work
from nodeagent.host.workchannel import channel_path

MIB = 2**20


def meta(**changes) -> GleanerMetadata:
    base = GleanerMetadata(PriorityClass.VOLUNTEER, "L1", datetime(2026, 1, 1, tzinfo=timezone.utc), "tiny", "", "",
                           PriorityClass.VOLUNTEER)
    return GleanerMetadata(**{**base.__dict__, **changes})


# -- configuration ------------------------------------------------------------------------------------

@pytest.mark.parametrize("section, words", [
    ({"budget_mib": -1}, ("hibernation.budget_mib", "-1")),
    ({"disk_reserve_mib": 2**31}, ("hibernation.disk_reserve_mib",)),
    ({"budget_mib": "lots"}, ("hibernation.budget_mib",)),
    ({"size": 1}, ("unknown key hibernation.size",)),
])
def test_bad_hibernation_values_are_config_errors_naming_the_key(section, words):
    with pytest.raises(ConfigError) as caught:
        check_config(parse_config({"hibernation": section}, "agent.toml"), "agent.toml")
    assert all(word in str(caught.value) for word in ("agent.toml", *words)), caught.value


@pytest.mark.parametrize("directory, words", [
    ("relative/dir", "absolute path"),
    ("/var/lib/x/../etc", "without '..'"),
    ("/srv/state/overlays", "overlay directory"),
    ("/srv/state/console/hib", "console directory"),
])
def test_a_hibernation_directory_of_its_own_is_required(directory, words):
    config = parse_config({"agent": {"state_dir": "/srv/state"}, "hibernation": {"directory": directory}}, "a.toml")
    with pytest.raises(ConfigError, match="hibernation.directory") as caught:
        check_config(config, "a.toml")
    assert words in str(caught.value)


def test_the_default_directory_is_beside_the_overlays():
    config = parse_config({"agent": {"state_dir": "/srv/state"}}, "a.toml")
    assert config.hibernation_dir == Path("/srv/state/hibernation")
    assert config.hibernation_dir.parent == config.overlay_dir.parent


# -- state files ---------------------------------------------------------------------------------------

def test_state_files_are_judged_by_libvirts_header_and_symlinks_are_never_followed(tmp_path):
    statefiles.make_directory(tmp_path / "h")
    directory = tmp_path / "h"
    (directory / "done.save").write_bytes(statefiles.MAGIC_COMPLETE + b"x" * 100)
    (directory / "half.save").write_bytes(statefiles.MAGIC_PARTIAL + b"x" * 100)
    (directory / "empty.save").write_bytes(b"")
    (directory / "junk.save").write_bytes(b"#!/bin/sh\n")
    outside = tmp_path / "outside"
    outside.write_bytes(statefiles.MAGIC_COMPLETE)
    (directory / "link.save").symlink_to(outside)
    (directory / "not a vm.save").write_bytes(statefiles.MAGIC_COMPLETE)
    found = statefiles.list_state_files(directory)
    assert {n: f.kind for n, f in found.items()} == {"done": Kind.COMPLETE, "half": Kind.PARTIAL,
                                                     "empty": Kind.PARTIAL, "junk": Kind.FOREIGN,
                                                     "link": Kind.FOREIGN}
    with pytest.raises(statefiles.StateDirUnsafe, match="symlink"):
        statefiles.clear_path(directory, "link")
    statefiles.delete(directory, "link")
    assert outside.exists() and not (directory / "link.save").is_symlink()
    with pytest.raises(ValueError):
        statefiles.state_path(directory, "../x")


def test_an_unsafe_directory_is_refused(tmp_path):
    real = tmp_path / "real"
    real.mkdir(mode=0o700)
    statefiles.check_directory(real)
    (tmp_path / "link").symlink_to(real)
    with pytest.raises(statefiles.StateDirUnsafe, match="symlink"):
        statefiles.check_directory(tmp_path / "link")
    real.chmod(0o777)
    with pytest.raises(statefiles.StateDirUnsafe, match="writable by it alone"):
        statefiles.check_directory(real)


# -- naps and the work clock -------------------------------------------------------------------------------

def test_naps_survive_the_metadata_and_a_repeated_resume_counts_once():
    m = with_nap(with_nap(meta(), 100.0, 150.0), 100.0, 160.0)   # the same nap recorded twice
    m = with_nap(m, 200.0, 210.0)
    back = read_metadata(f"<domain><metadata>{_qualified(m)}</metadata></domain>")
    assert back.naps == ((100.0, 160.0), (200.0, 210.0)) and back.slept_s == 70.0


def _qualified(m: GleanerMetadata) -> str:
    from nodeagent.host.domainxml import NAMESPACE
    return metadata_xml(m).replace("<instance>", f'<instance xmlns="{NAMESPACE}">', 1)


def test_only_sleep_after_the_guests_statement_is_taken_off_its_work_clock():
    naps = ((100.0, 160.0), (200.0, 210.0))
    assert slept_since(naps, since=120.0, now=300.0) == 40.0 + 10.0
    assert slept_since(naps, since=205.0, now=300.0) == 5.0
    assert slept_since(naps, since=120.0, now=300.0, asleep_from=250.0) == 100.0   # asleep now, too


def test_the_reported_work_age_excludes_the_time_the_vm_slept(tmp_path):
    path = channel_path(tmp_path, "vm1")
    path.write_bytes(b"busy 4\n")
    now = time.time()
    os.utime(path, (now - 100, now - 100))   # said busy 100 s ago
    slept = with_nap(meta(), now - 90, now - 30)   # and slept 60 s of them
    work = guest_work(tmp_path, "vm1", slept)
    assert work.state == "busy" and 39 < work.for_s < 42
    asleep = guest_work(tmp_path, "vm1", meta(), asleep_from=now - 50)   # hibernated 50 s ago, still
    assert 49 < asleep.for_s < 52


def test_the_restore_xml_appends_to_the_console_log_and_work_channel():
    image = ("<domain><devices><serial type='pty'><log file='/c/x.log' append='off'/></serial>"
             "<channel type='file'><source path='/c/x.work' append='off'/></channel></devices></domain>")
    out = restore_xml(image)
    assert "append=\"off\"" not in out and out.count("append=\"on\"") == 2


# -- the budget ------------------------------------------------------------------------------------------

def hibernation(tmp_path: Path, budget_mib: int, reserve_mib: int = 0) -> Hibernation:
    config = AgentConfig(state_dir=tmp_path, hibernation_budget_mib=budget_mib, hibernation_disk_reserve_mib=reserve_mib)
    statefiles.make_directory(config.hibernation_dir)
    return Hibernation(config, SimpleNamespace(), SimpleNamespace(), SimpleNamespace(), SimpleNamespace())


def test_saves_under_way_count_against_the_budget_with_the_files_on_disk(tmp_path):
    hib = hibernation(tmp_path, budget_mib=300)
    with open(hib.directory / "old.save", "wb") as f:   # 100 MiB on disk
        f.write(statefiles.MAGIC_COMPLETE)
        f.write(os.urandom(100 * MIB - 16))
    assert hib.figures().used_bytes >= 100 * MIB
    with hib._reserved("a", 129 * MIB):
        assert hib.figures().room_bytes <= 300 * MIB - 229 * MIB
        with pytest.raises(HibernationBudget, match=r"needs up to 129 MiB.*budget_mib\) is 300 MiB.*129 MiB held"):
            with hib._reserved("b", 129 * MIB):
                pass
    with hib._reserved("b", 129 * MIB):   # room again once the first save is done
        pass


def test_the_disk_reserve_is_never_crossed(tmp_path):
    free_mib = statefiles.free_bytes(tmp_path) // MIB
    hib = hibernation(tmp_path, budget_mib=2**30, reserve_mib=free_mib - 50)
    with pytest.raises(HibernationBudget, match="disk_reserve_mib"):
        with hib._reserved("a", 129 * MIB):
            pass
    assert hib.figures().room_bytes <= 51 * MIB   # (free space rounded down to MiB above)


# -- the console budget ------------------------------------------------------------------------------------

def test_a_hibernated_domains_console_log_and_work_channel_stay_over_the_console_budget(tmp_path):
    from tests.unit.test_agent_console_budget import Libvirt, sweep, write
    config = AgentConfig(state_dir=tmp_path, console_budget_mib=16)
    config.console_dir.mkdir(parents=True)
    statefiles.make_directory(config.hibernation_dir)
    (config.hibernation_dir / "vm-asleep.save").write_bytes(statefiles.MAGIC_COMPLETE)
    write(config.console_dir / "vm-asleep.log", 12 * MIB, age=9000)   # the oldest, but it only sleeps
    write(config.console_dir / "vm-asleep.work", 1024, age=9000)      # its work clock
    write(config.console_dir / "vm-gone.log", 6 * MIB, age=100)
    removed = sweep(config, Libvirt(running=set(), stopped={"vm-asleep"}))
    assert removed == ["console-budget:vm-gone"]
    assert sorted(p.name for p in config.console_dir.iterdir()) == ["vm-asleep.log", "vm-asleep.work"]

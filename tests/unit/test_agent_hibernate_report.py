"""The node report tells hibernated VMs apart from running ones and from gone ones."""
from __future__ import annotations

import os
import time
from datetime import datetime, timezone
from pathlib import Path
from types import SimpleNamespace

from gleaner_common.vocabulary import PriorityClass
from nodeagent.config import AgentConfig
from nodeagent.hibernation import Figures
from nodeagent.host.domainxml import GleanerMetadata, with_nap
from nodeagent.host.hypervisor import DomainRecord
from nodeagent.host.statefiles import Kind, StateFile
from nodeagent.host.workchannel import channel_path
from nodeagent.inventory import guest_work
from nodeagent.reporter import Reporter
from protos import controller_pb2

XML = "<domain><vcpu>2</vcpu><memory unit='MiB'>512</memory></domain>"


def meta(lease: str) -> GleanerMetadata:
    return GleanerMetadata(PriorityClass.VOLUNTEER, lease, datetime(2026, 1, 1, tzinfo=timezone.utc), "tiny", "", "",
                           PriorityClass.VOLUNTEER)


class Inventory:
    def __init__(self, console_dir: Path, running: list) -> None:
        self.console_dir, self._running = console_dir, running

    def work_state(self, name, meta, asleep_from=None):
        return guest_work(self.console_dir, name, meta, asleep_from)

    def host_facts(self):
        return SimpleNamespace(cpus=2, memory_mib=4096)

    def running(self):
        return self._running


class Hibernation:
    def __init__(self, asleep: list) -> None:
        self.asleep = asleep

    def figures(self) -> Figures:
        return Figures(budget_bytes=4 << 30, used_bytes=98 << 20, room_bytes=3 << 30)

    def hibernated(self):
        return self.asleep

    def busy(self) -> frozenset:
        return frozenset()   # no save or restore under way (tests/integration/test_hibernate_reports.py has one)


def test_hibernated_vms_are_reported_apart_with_a_stopped_work_clock_and_the_disk_figures(tmp_path: Path):
    now = time.time()
    channel_path(tmp_path, "sleeper").write_bytes(b"busy 7\n")
    os.utime(channel_path(tmp_path, "sleeper"), (now - 100, now - 100))   # said busy 100 s ago...
    saved = StateFile("sleeper", tmp_path / "sleeper.save", Kind.COMPLETE, 98 << 20, now - 60)   # ...slept 60 s
    record = DomainRecord("sleeper", "u1", "shutoff", XML, 0)
    woke = with_nap(meta("L-run"), now - 500, now - 400)
    running = [("runner", woke, SimpleNamespace(vcpus=1, memory_mib=128))]
    reporter = Reporter(AgentConfig(image_dir=tmp_path), Inventory(tmp_path, running), SimpleNamespace(latest=lambda: None),
                        Hibernation([(record, meta("L-sleep"), saved)]))
    report = reporter.build()
    assert [vm.name for vm in report.vms] == ["runner"] and report.vms[0].slept_s == 100.0
    (asleep,) = report.hibernated
    assert (asleep.name, asleep.lease_id, asleep.vm_role, asleep.vcpus, asleep.memory_mib) == \
        ("sleeper", "L-sleep", controller_pb2.VM_ROLE_BACKFILL, 2, 512)
    assert asleep.state_bytes == 98 << 20 and abs(asleep.hibernated_at - (now - 60)) < 1
    assert asleep.work_state == "busy" and 39 < asleep.work_for_s < 42   # 100 s ago, less the 60 s asleep
    assert (report.hibernation_budget_bytes, report.hibernation_used_bytes, report.hibernation_room_bytes) == \
        (4 << 30, 98 << 20, 3 << 30)


class ListingHypervisor:
    """libvirt's answers for running domains, as plain data (the Inventory is under test)."""

    def __init__(self, records: dict[str, DomainRecord]) -> None:
        self.records = records

    def watch(self, on_change) -> None:
        pass

    def active_domain_names(self) -> set[str]:
        return set(self.records)

    def get_domain(self, name: str) -> DomainRecord | None:
        return self.records.get(name)


def test_a_domain_the_agent_stopped_leaves_the_snapshot_reports_read_during_a_save(tmp_path: Path):
    """The bench's double preemption (issue 25): an on-demand VM destroyed while a restore held
    libvirtd stayed in the snapshot the report reads then, and its room counted as taken."""
    from nodeagent.host.domainxml import metadata_element
    from nodeagent.inventory import Inventory as RealInventory
    import xml.etree.ElementTree as ET

    def record(name: str, lease: str) -> DomainRecord:
        root = ET.fromstring(XML)
        ET.SubElement(root, "metadata").append(metadata_element(meta(lease)))
        return DomainRecord(name, name, "running", ET.tostring(root, encoding="unicode"), 0)

    hv = ListingHypervisor({"od": record("od", "L-od"), "bf": record("bf", "L-bf")})
    inventory = RealInventory(AgentConfig(image_dir=tmp_path), hv)
    assert sorted(name for name, *_ in inventory.running()) == ["bf", "od"]
    inventory.forget("od")   # what Domains.remove does once it destroyed it
    assert [name for name, *_ in inventory.running_snapshot()] == ["bf"]

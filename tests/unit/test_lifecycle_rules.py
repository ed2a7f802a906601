"""The lifecycle's small decisions, as pure functions."""
from __future__ import annotations

from datetime import datetime, timezone

import pytest

from gleaner_common.vocabulary import PriorityClass
from nodeagent.domains import spec_differences
from nodeagent.inventory import ManagedDomain, choose_domain_type
from nodeagent.validation import LaunchSpec


@pytest.mark.parametrize("configured,usable,chosen", [
    ("auto", True, "kvm"), ("auto", False, "qemu"), ("kvm", False, "kvm"), ("qemu", True, "qemu"),
])
def test_auto_picks_kvm_only_when_usable(configured, usable, chosen):
    assert choose_domain_type(configured, usable) == chosen


def domain(**changes) -> ManagedDomain:
    base = dict(name="vm", uuid="u", role=PriorityClass.VOLUNTEER, state="running", vcpus=1, memory_mib=128,
                launched_at=datetime.now(timezone.utc), lease_id="L1", cpu_time_ns=5, image="tiny",
                kernel_cmdline="gleaner.workload=hog", console_log="/c/vm.log")
    return ManagedDomain(**{**base, **changes})


def test_same_spec_has_no_differences_whatever_the_runtime_state():
    spec = LaunchSpec("vm", PriorityClass.VOLUNTEER, 1, 128, "tiny", "gleaner.workload=hog", "L1")
    assert spec_differences(domain(state="shutoff", cpu_time_ns=99), spec) == []


def test_differences_are_named_in_plain_words():
    spec = LaunchSpec("vm", PriorityClass.FOREGROUND, 2, 128, "tiny", "gleaner.workload=hog", "L2")
    assert spec_differences(domain(), spec) == [
        "role is 'volunteer', not 'foreground'", "vcpus is 1, not 2", "lease_id is 'L1', not 'L2'"]


class _FakeInventory:
    def __init__(self, running):
        self._running = running
        self.info = {}
        self.changed = []

    def running(self):
        return self._running

    def set_info(self, info, keep=frozenset()):
        self.info = info

    def note_change(self, name):
        self.changed.append(name)


class _FakePriority:
    def apply(self, name, cls):
        return ["cpu.idle 0 -> 1"] if name == "vm-drifted" else []

    def effective_class(self, name, cls):
        return cls


class _FakeHypervisor:
    def __init__(self):
        self.disk_calls = []

    def set_disk_priority(self, *args):
        self.disk_calls.append(args)


def test_a_reconcile_pass_publishes_one_drift_event_per_domain_with_all_its_changes(tmp_path):
    from nodeagent.config import AgentConfig
    from nodeagent.enforcement import Enforcement
    from nodeagent.events import EventBus
    from nodeagent.host.domainxml import DomainShape, GleanerMetadata

    def meta(overlay: str) -> GleanerMetadata:
        return GleanerMetadata(role=PriorityClass.VOLUNTEER, lease_id="", launched_at=datetime.now(timezone.utc),
                               image="tiny", kernel_cmdline="", overlay=overlay, priority_class=PriorityClass.VOLUNTEER)
    config = AgentConfig(state_dir=tmp_path)
    config.overlay_dir.mkdir(parents=True)
    uncapped = DomainShape(vcpus=1, memory_mib=128, console_log="", cpuset="", disk_caps=(0, 0))
    running = [("vm-drifted", meta("/o/vm-drifted.qcow2"), uncapped), ("vm-fine", meta(""), uncapped)]
    events, hv, inventory = EventBus(), _FakeHypervisor(), _FakeInventory(running)
    enforcement = Enforcement(config, hv, inventory, _FakePriority(), events)
    enforcement.disk_mechanism = "caps"  # whatever this machine's disk: volunteers are capped
    watch = events.subscribe()
    corrected = enforcement.reconcile()
    assert list(corrected) == ["vm-drifted"]
    assert corrected["vm-drifted"][0] == "cpu.idle 0 -> 1"
    assert corrected["vm-drifted"][1].startswith("disk caps 0 B/s, 0 IOPS ->")
    published = [watch.get_nowait() for _ in range(watch.qsize())]
    assert [(e.kind, e.domain) for e in published] == [("drift.corrected", "vm-drifted")]
    assert published[0].detail == "; ".join(corrected["vm-drifted"])
    assert published[0].fields == {"class": "volunteer"}
    assert len(hv.disk_calls) == 1 and inventory.changed == ["vm-drifted"]
    assert set(inventory.info) == {"vm-drifted", "vm-fine"}
    # A domain whose launch is under way has not had its class put on yet: not drift.
    with enforcement.launching("vm-drifted"):
        assert enforcement.reconcile() == {}
    assert list(enforcement.reconcile()) == ["vm-drifted"]


def test_an_unknown_crash_point_is_an_error_that_names_it():
    from nodeagent.crashpoints import UnknownCrashPoint, crash_point
    with pytest.raises(UnknownCrashPoint, match="no crash point named 'launch.after_lunch'"):
        crash_point("launch.after_lunch")


def test_a_domain_undefined_behind_the_agents_back_while_its_class_changes_is_named(tmp_path):
    from contextlib import nullcontext
    from types import SimpleNamespace
    from nodeagent.config import AgentConfig
    from nodeagent.domains import Domains
    from nodeagent.events import EventBus
    from nodeagent.host.domainxml import GleanerMetadata
    from nodeagent.inventory import DomainNotFound
    meta = GleanerMetadata(role=PriorityClass.VOLUNTEER, lease_id="", launched_at=datetime.now(timezone.utc),
                           image="tiny", kernel_cmdline="", overlay="", priority_class=PriorityClass.VOLUNTEER)
    record = SimpleNamespace(name="vm", active=False, xml="<domain/>")
    hv = SimpleNamespace(set_metadata=lambda *args: None, get_domain=lambda name: None)
    inventory = SimpleNamespace(lookup=lambda name: (record, meta), note_change=lambda name: None)
    domains = Domains(AgentConfig(state_dir=tmp_path), hv, inventory, SimpleNamespace(changing_class=nullcontext),
                      EventBus())
    with pytest.raises(DomainNotFound, match="'vm' vanished right after its class was set"):
        domains.set_class("vm", PriorityClass.FOREGROUND)

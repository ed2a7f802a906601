"""The lifecycle's small decisions, as pure functions."""
from __future__ import annotations

from datetime import datetime, timezone

import pytest

from nodeagent.lifecycle import ManagedDomain, choose_domain_type, spec_differences
from nodeagent.validation import LaunchSpec, Role


@pytest.mark.parametrize("configured,usable,chosen", [
    ("auto", True, "kvm"), ("auto", False, "qemu"), ("kvm", False, "kvm"), ("qemu", True, "qemu"),
])
def test_auto_picks_kvm_only_when_usable(configured, usable, chosen):
    assert choose_domain_type(configured, usable) == chosen


def domain(**changes) -> ManagedDomain:
    base = dict(name="vm", uuid="u", role=Role.VOLUNTEER, state="running", vcpus=1, memory_mib=128,
                launched_at=datetime.now(timezone.utc), lease_id="L1", cpu_time_ns=5, image="tiny",
                kernel_cmdline="gleaner.workload=hog", console_log="/c/vm.log")
    return ManagedDomain(**{**base, **changes})


def test_same_spec_has_no_differences_whatever_the_runtime_state():
    spec = LaunchSpec("vm", Role.VOLUNTEER, 1, 128, "tiny", "gleaner.workload=hog", "L1")
    assert spec_differences(domain(state="shutoff", cpu_time_ns=99), spec) == []


def test_differences_are_named_in_plain_words():
    spec = LaunchSpec("vm", Role.FOREGROUND, 2, 128, "tiny", "gleaner.workload=hog", "L2")
    assert spec_differences(domain(), spec) == [
        "role is 'volunteer', not 'foreground'", "vcpus is 1, not 2", "lease_id is 'L1', not 'L2'"]

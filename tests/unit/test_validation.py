"""Field validation: property tests that nothing dangerous gets through, and examples."""
from __future__ import annotations

import re
import string

import pytest
from hypothesis import given, strategies as st

from gleaner_common import ids
from gleaner_common.ids import InvalidField
from gleaner_common.vocabulary import PriorityClass
from nodeagent.validation import (MAX_RETIRE_AFTER_SECONDS, HostLimits, validate_cmdline, validate_launch,
                                  validate_lease_id, validate_name)

LIMITS = HostLimits(cpus=4, memory_mib=8192)
XML_AND_PATH_CHARS = set("<>&'\"/\\\n\r\t;$`|*?")


@given(st.text(max_size=80))
def test_accepted_names_are_plain_words(text):
    try:
        name = validate_name(text)
    except InvalidField as exc:
        assert exc.field == "name"
        return
    assert 1 <= len(name) <= 63 and name[0].isalnum()
    assert not set(name) & XML_AND_PATH_CHARS and ".." not in name


@given(st.text(alphabet=string.printable, max_size=600))
def test_accepted_cmdlines_cannot_break_out_of_xml_or_a_shell(text):
    try:
        cmdline = validate_cmdline(text)
    except InvalidField as exc:
        assert exc.field == "kernel_cmdline"
        return
    assert len(cmdline) <= 512
    assert not set(cmdline) & (XML_AND_PATH_CHARS - {"/"})


@given(st.text(alphabet=string.ascii_letters + "./-_" + "\\<", max_size=40))
def test_accepted_image_refs_stay_relative_and_never_climb(text):
    try:
        ref = ids.image(text)
    except InvalidField as exc:
        assert exc.field == "image"
        return
    assert not ref.startswith("/")
    assert all(part not in ("", ".", "..") and not part.startswith(".") for part in ref.split("/"))


def test_launch_validation_reports_the_first_bad_field():
    good = dict(name="vm1", role="volunteer", vcpus=2, memory_mib=512, image="tiny",
                kernel_cmdline="  gleaner.workload=hog   quiet ", lease_id="lease-1")
    spec = validate_launch(**good, limits=LIMITS)
    assert spec.role is PriorityClass.VOLUNTEER and spec.kernel_cmdline == "gleaner.workload=hog quiet"
    for field, value in [("vcpus", 5), ("memory_mib", 8193), ("role", None), ("role", "batch"),
                         ("image", "a//b"), ("lease_id", "x" * 200)]:
        with pytest.raises(InvalidField) as err:
            validate_launch(**{**good, field: value}, limits=LIMITS)
        assert err.value.field == field
        assert str(err.value).startswith(f"{field}: ")


@pytest.mark.parametrize("lease", ["", "lease-1", "pool:a.b_c-9"])
def test_good_lease_ids(lease):
    assert validate_lease_id(lease) == lease


def test_error_messages_name_the_limit():
    with pytest.raises(InvalidField, match=re.escape("outside 1..4 (this host's CPUs)")):
        validate_launch("vm", "foreground", 9, 64, "tiny", "", "", LIMITS)


def test_the_vocabulary_keeps_the_wire_values_and_pairs_each_role_with_its_class():
    from gleaner_common.vocabulary import VmRole, class_of, role_of
    assert [c.value for c in PriorityClass] == ["foreground", "volunteer"]
    assert [r.value for r in VmRole] == ["on_demand", "backfill"]
    assert class_of(VmRole.BACKFILL) is PriorityClass.VOLUNTEER and class_of("on_demand") is PriorityClass.FOREGROUND
    assert all(role_of(class_of(role)) is role for role in VmRole)


def test_only_a_volunteer_is_told_its_recycle_and_within_ten_years():
    limits = HostLimits(cpus=4, memory_mib=4096)
    def launch(role: PriorityClass, seconds: int):
        return validate_launch("vm1", role, 1, 128, "tiny", "", "", limits, retire_after_seconds=seconds)
    assert launch(PriorityClass.VOLUNTEER, 604800).retire_after_seconds == 604800
    assert launch(PriorityClass.FOREGROUND, 0).retire_after_seconds == 0
    with pytest.raises(InvalidField, match="retire_after_seconds.*only volunteer"):
        launch(PriorityClass.FOREGROUND, 60)
    with pytest.raises(InvalidField, match="retire_after_seconds.*outside 0..315360000"):
        launch(PriorityClass.VOLUNTEER, MAX_RETIRE_AFTER_SECONDS + 1)


def test_the_work_channel_flag_is_true_or_false_and_gives_a_foreground_domain_the_port():
    limits = HostLimits(cpus=4, memory_mib=4096)
    def launch(role: PriorityClass, flag):
        return validate_launch("vm1", role, 1, 128, "tiny", "", "", limits, work_channel=flag)
    assert launch(PriorityClass.FOREGROUND, True).has_work_channel
    assert not launch(PriorityClass.FOREGROUND, False).has_work_channel
    assert launch(PriorityClass.VOLUNTEER, False).has_work_channel   # a volunteer has it whatever it is asked
    for bad in (1, "yes", None):
        with pytest.raises(InvalidField, match="work_channel"):
            launch(PriorityClass.FOREGROUND, bad)

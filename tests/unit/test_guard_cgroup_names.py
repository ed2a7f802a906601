"""Finding a domain's cgroup by the name libvirt gives it (issue 23, item 15: "the cgroup path of
some VMs not found"). libvirt names the group after the domain's machine name, which drops the
characters a host name cannot hold ('_' among the names Gleaner allows) and is cut at 64
characters, earlier once the domain id has more digits. The real-libvirt twin is
tests/integration/test_guard_cgroup_names.py."""
from __future__ import annotations

import pytest

from nodeagent.host import cgroups

LONG = "backfill_worker-" + "a" * 40 + "_end"   # 60 characters, the longest names allowed are 63


@pytest.mark.parametrize("domain_id, name, machine", [
    (7, "vm-1", "qemu-7-vm-1"),
    (7, "my_vm", "qemu-7-myvm"),
    (7, "a--b_-c", "qemu-7-a-b-c"),
    (9, LONG, ("qemu-9-backfillworker-" + "a" * 40 + "en")[:64]),
    (123, LONG, ("qemu-123-backfillworker-" + "a" * 40)[:64]),
    (5, "x" * 56 + "-" + "y" * 6, "qemu-5-" + "x" * 56),   # cut right after a '-': trailing '-' dropped
])
def test_machine_names_as_libvirt_makes_them(domain_id, name, machine):
    assert cgroups.machine_name(domain_id, name) == machine
    assert len(machine) <= 64


@pytest.mark.parametrize("domain_id", [3, 42, 1234])
@pytest.mark.parametrize("name", ["my_vm", "b_" * 20, "gtest-0075-ovh-starved0-c6352139"])
def test_groups_are_found_whatever_the_id_and_name(tmp_path, domain_id, name):
    """Names not cut short are found by the group's name alone (cut ones: by their QEMU, below)."""
    machine = cgroups.machine_name(domain_id, name)
    plain = tmp_path / "v1" / "cpu" / "machine" / f"{machine}.libvirt-qemu"
    scope = tmp_path / "v2" / "machine.slice" / f"machine-{machine.replace('-', chr(92) + 'x2d')}.scope"
    for group in (plain, scope):
        group.mkdir(parents=True)
    (tmp_path / "v2" / "cgroup.controllers").write_text("cpu\n")
    (plain.parent / f"{cgroups.machine_name(domain_id + 1, 'other-vm')}.libvirt-qemu").mkdir()
    assert cgroups.domain_cgroup(tmp_path / "v1", 1, name) == plain
    assert cgroups.domain_cgroup(tmp_path / "v2", 2, name) == scope


@pytest.mark.parametrize("name, group", [
    ("my_vm", "qemu-3-myvm.libvirt-qemu"),   # as libvirt 9.0 named it on a development host
    ("gtest-0075-long_name_x", "qemu-123-gtest-0075-longnamex.libvirt-qemu"),
])
def test_groups_libvirt_named_are_found(tmp_path, name, group):
    (tmp_path / "cpu" / "machine" / group).mkdir(parents=True)
    assert cgroups.domain_cgroup(tmp_path, 1, name) == tmp_path / "cpu" / "machine" / group


def qemu_group(machine_dir, domain_id: int, name: str, pid: int, proc):
    group = machine_dir / f"{cgroups.machine_name(domain_id, name)}.libvirt-qemu"
    (group / "emulator").mkdir(parents=True)
    (group / "cgroup.procs").write_text("")
    (group / "emulator" / "cgroup.procs").write_text(f"{pid}\n")
    (proc / str(pid)).mkdir(parents=True)
    (proc / str(pid) / "cmdline").write_text("\0".join(["/usr/bin/qemu-system-x86_64", "-name",
                                                       f"guest={name},debug-threads=on", "-S", ""]))
    return group


def test_long_names_alike_up_to_the_cut_are_told_apart_by_their_qemu(tmp_path):
    """Two names equal in their first 60 characters make the same machine name but for the id:
    the group whose QEMU runs the guest is the one."""
    machine_dir, proc = tmp_path / "cpu" / "machine", tmp_path / "proc"
    first, second = LONG + "-1", LONG + "-2"
    assert cgroups.machine_name(10, first).removeprefix("qemu-10-") == cgroups.machine_name(11, second).removeprefix("qemu-11-")
    a = qemu_group(machine_dir, 10, first, 500, proc)
    b = qemu_group(machine_dir, 11, second, 600, proc)
    assert cgroups.domain_cgroup(tmp_path, 1, first, proc=proc) == a
    assert cgroups.domain_cgroup(tmp_path, 1, second, proc=proc) == b
    assert cgroups.domain_cgroup(tmp_path, 1, LONG + "-3", proc=proc) is None
    b.joinpath("emulator", "cgroup.procs").write_text("")   # the second has stopped: its name is no
    b.joinpath("cgroup.procs").write_text("")                # reason to take the first's group
    assert cgroups.domain_cgroup(tmp_path, 1, second, proc=proc) is None

"""A volunteer's class reaches its real cgroup whatever its name (issue 23, item 15): libvirt
names the group after the machine name, which drops '_' and is cut at 64 characters."""
from __future__ import annotations

from pathlib import Path

import libvirt

from protos import agent_pb2
from tests.agentproc import LIBVIRT_URI, launch_request, read_cgroup_int, unique_name


def real_cpu_group(name: str) -> Path:
    """The domain's cpu cgroup found without the agent's code: its QEMU's own /proc/<pid>/cgroup."""
    pid = Path(f"/run/libvirt/qemu/{name}.pid").read_text().strip()
    for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if "cpu" in controllers.split(","):
            group = Path("/sys/fs/cgroup/cpu") / path.lstrip("/")
            return group.parent if group.name == "emulator" else group
    raise AssertionError(f"no cpu cgroup in /proc/{pid}/cgroup")


def test_a_volunteer_with_underscores_and_a_63_character_name_is_demoted(stub):
    name = (unique_name("u_nd") + "-" + "long_" * 8)[:63]
    stub.LaunchDomain(launch_request(name, agent_pb2.ROLE_BACKFILL), timeout=120)
    group = real_cpu_group(name)
    assert "_" not in group.name and len(group.name.removesuffix(".libvirt-qemu")) <= 64   # what libvirt made
    assert read_cgroup_int(group, "cpu.idle") == 1, f"the volunteer class never reached {group}"
    stub.SetDomainClass(agent_pb2.SetDomainClassRequest(name=name, priority_class=agent_pb2.PRIORITY_CLASS_FOREGROUND))
    assert read_cgroup_int(group, "cpu.idle") == 0
    conn = libvirt.open(LIBVIRT_URI)
    try:
        assert conn.lookupByName(name).isActive()
    finally:
        conn.close()

"""Domain XML: metadata survives the round trip through XML, and foreign domains are not ours."""
from __future__ import annotations

import dataclasses
import xml.etree.ElementTree as ET
from datetime import datetime, timezone
from pathlib import Path

from hypothesis import given, strategies as st

from gleaner_common.vocabulary import PriorityClass
from nodeagent.host.domainxml import NAMESPACE, build_domain_xml, metadata_xml, read_metadata, read_shape
from nodeagent.host.images import BootImage
from nodeagent.host.settings import DiskSetting, LaunchSpec

KERNEL_IMAGE = BootImage("tiny", Path("/img/tiny/vmlinuz"), Path("/img/tiny/initrd.img"),
                         Path("/img/tiny/disk.qcow2"), "qcow2")
DISK_IMAGE = BootImage("debian.qcow2", None, None, Path("/img/debian.qcow2"), "qcow2")
WHEN = datetime(2026, 11, 21, 12, 0, 0, tzinfo=timezone.utc)

specs = st.builds(
    LaunchSpec,
    name=st.from_regex(r"[A-Za-z0-9][A-Za-z0-9_-]{0,62}", fullmatch=True),
    role=st.sampled_from(list(PriorityClass)),
    vcpus=st.integers(1, 64),
    memory_mib=st.integers(32, 1 << 20),
    image=st.just("tiny"),
    kernel_cmdline=st.from_regex(r"[A-Za-z0-9._,=:/+-]{0,40}", fullmatch=True),
    lease_id=st.from_regex(r"([A-Za-z0-9][A-Za-z0-9_.:-]{0,20})?", fullmatch=True),
    cpuset=st.sampled_from(["", "0", "1", "0-1,3"]),
    retire_after_seconds=st.sampled_from([0, 60, 604800]),
)


@given(specs)
def test_metadata_and_shape_round_trip(spec):
    xml = build_domain_xml(spec, KERNEL_IMAGE, "qemu", Path(f"/ov/{spec.name}.qcow2"),
                           Path(f"/console/{spec.name}.log"), WHEN, cpu_shares=2)
    meta = read_metadata(xml)
    assert meta is not None
    assert (meta.role, meta.priority_class, meta.lease_id, meta.launched_at, meta.image, meta.kernel_cmdline,
            meta.retire_after_s) == \
        (spec.role, spec.role, spec.lease_id, WHEN, spec.image, spec.kernel_cmdline, spec.retire_after_seconds)
    shape = read_shape(xml)
    assert (shape.vcpus, shape.memory_mib, shape.console_log, shape.cpuset) == (
        spec.vcpus, spec.memory_mib, f"/console/{spec.name}.log", spec.cpuset)
    root = ET.fromstring(xml)
    assert root.findtext("cputune/shares") == "2"
    pin = root.find("cputune/emulatorpin")
    assert (pin.get("cpuset") if pin is not None else "") == spec.cpuset


def test_metadata_element_round_trips_a_changed_class():
    spec = LaunchSpec("vm1", PriorityClass.VOLUNTEER, 1, 128, "tiny")
    meta = read_metadata(build_domain_xml(spec, KERNEL_IMAGE, "qemu", None, Path("/c.log"), WHEN, cpu_shares=2))
    promoted = dataclasses.replace(meta, priority_class=PriorityClass.FOREGROUND)
    # libvirt's setMetadata takes the element unqualified and puts it in our namespace.
    element = metadata_xml(promoted)
    assert "xmlns" not in element
    qualified = element.replace("<", f"<g:").replace("<g:/", "</g:").replace("<g:instance>",
                                                                              f"<g:instance xmlns:g='{NAMESPACE}'>", 1)
    assert read_metadata(f"<domain><metadata>{qualified}</metadata></domain>") == promoted


def test_kernel_image_boots_its_kernel_with_the_console_on_serial():
    spec = LaunchSpec("vm1", PriorityClass.VOLUNTEER, 1, 128, "tiny", "gleaner.workload=hog")
    root = ET.fromstring(build_domain_xml(spec, KERNEL_IMAGE, "kvm", Path("/ov/vm1.qcow2"),
                                          Path("/c/vm1.log"), WHEN, cpu_shares=2))
    assert root.get("type") == "kvm"
    assert root.findtext("os/kernel") == "/img/tiny/vmlinuz"
    assert root.findtext("os/cmdline") == "console=ttyS0 quiet gleaner.workload=hog"
    assert root.find("devices/disk/source").get("file") == "/ov/vm1.qcow2"
    assert root.find("features/acpi") is not None  # needed for the power button


def test_a_volunteer_told_its_recycle_reads_it_on_its_kernel_command_line_and_in_an_oem_string():
    spec = LaunchSpec("vm1", PriorityClass.VOLUNTEER, 1, 128, "tiny", "gleaner.workload=jobs", retire_after_seconds=3600)
    root = ET.fromstring(build_domain_xml(spec, KERNEL_IMAGE, "qemu", None, Path("/c/vm1.log"), WHEN, cpu_shares=2))
    assert root.findtext("os/cmdline") == "console=ttyS0 quiet gleaner.workload=jobs gleaner.retire_after=3600"
    assert root.find("os/smbios").get("mode") == "sysinfo"
    assert [e.text for e in root.findall("sysinfo[@type='smbios']/oemStrings/entry")] == ["gleaner.retire_after=3600"]
    on_disk = dataclasses.replace(spec, image="debian.qcow2", kernel_cmdline="")   # no kernel line: the OEM string
    root = ET.fromstring(build_domain_xml(on_disk, DISK_IMAGE, "qemu", None, Path("/c/vm1.log"), WHEN, cpu_shares=2))
    assert root.find("os/cmdline") is None
    assert [e.text for e in root.findall("sysinfo/oemStrings/entry")] == ["gleaner.retire_after=3600"]
    untold = dataclasses.replace(spec, retire_after_seconds=0)
    root = ET.fromstring(build_domain_xml(untold, KERNEL_IMAGE, "qemu", None, Path("/c/vm1.log"), WHEN, cpu_shares=2))
    assert "retire_after" not in ET.tostring(root, encoding="unicode") and root.find("sysinfo") is None


def test_disk_image_boots_from_disk():
    spec = LaunchSpec("vm2", PriorityClass.FOREGROUND, 2, 1024, "debian.qcow2")
    root = ET.fromstring(build_domain_xml(spec, DISK_IMAGE, "qemu", Path("/ov/vm2.qcow2"), Path("/c/vm2.log"), WHEN,
                                          cpu_shares=1024))
    assert root.find("os/kernel") is None
    assert root.find("os/boot").get("dev") == "hd"


def test_domains_without_our_metadata_are_not_ours():
    assert read_metadata("<domain type='kvm'><name>other</name></domain>") is None
    foreign = (f"<domain><name>x</name><metadata><g:instance xmlns:g='{NAMESPACE}'><g:role>admin</g:role>"
               "</g:instance></metadata></domain>")
    assert read_metadata(foreign) is None  # a role we never write


def test_read_shape_understands_libvirt_memory_units():
    assert read_shape("<domain><memory unit='KiB'>131072</memory><vcpu>2</vcpu></domain>").memory_mib == 128
    assert read_shape("<domain><memory unit='GiB'>2</memory><vcpu>2</vcpu></domain>").memory_mib == 2048


def test_network_attachment_and_tap_names():
    import xml.etree.ElementTree as ET
    spec = LaunchSpec("vm3", PriorityClass.VOLUNTEER, 1, 128, "tiny")
    for attach, kind, source in (("ethernet", "ethernet", None), ("bridge:br0", "bridge", ("bridge", "br0")),
                                 ("network:default", "network", ("network", "default"))):
        root = ET.fromstring(build_domain_xml(spec, KERNEL_IMAGE, "qemu", None, Path("/c.log"), WHEN, cpu_shares=2,
                                              network=attach))
        interface = root.find("devices/interface")
        assert interface.get("type") == kind and interface.find("model").get("type") == "virtio"
        assert (interface.find("source").get(source[0]) if source else None) == (source[1] if source else None)
    none = build_domain_xml(spec, KERNEL_IMAGE, "qemu", None, Path("/c.log"), WHEN, cpu_shares=2)
    assert ET.fromstring(none).find("devices/interface") is None
    live = "<domain><devices><interface type='ethernet'><target dev='vnet7'/></interface></devices></domain>"
    assert read_shape(live).interfaces == ("vnet7",)


def test_read_shape_reads_the_block_io_weight_and_caps():
    spec = LaunchSpec(name="w", role=PriorityClass.VOLUNTEER, vcpus=1, memory_mib=128, image="tiny")
    xml = build_domain_xml(spec, KERNEL_IMAGE, "qemu", Path("/ov/w.qcow2"), Path("/console/w.log"), WHEN,
                           cpu_shares=1024, disk=DiskSetting(100, 20 * 2**20, 200))
    shape = read_shape(xml)
    assert (shape.disk_weight, shape.disk_caps) == (100, (20 * 2**20, 200))
    # The live XML after `virsh blkiotune --weight 500 --live`, and a domain without <blkiotune>.
    assert read_shape("<domain><vcpu>1</vcpu><blkiotune><weight>500</weight></blkiotune></domain>").disk_weight == 500
    assert read_shape("<domain><vcpu>1</vcpu></domain>").disk_weight is None


def test_a_work_channel_is_a_file_backed_virtio_port_only_when_asked():
    spec = LaunchSpec("vm3", PriorityClass.VOLUNTEER, 1, 128, "tiny")
    root = ET.fromstring(build_domain_xml(spec, KERNEL_IMAGE, "qemu", None, Path("/c/vm3.log"), WHEN, cpu_shares=2,
                                          work_channel=Path("/c/vm3.work")))
    (channel,) = root.findall("devices/channel")
    assert channel.get("type") == "file"   # file-backed: virtlogd keeps it, bounded; no reader to wait for
    assert channel.find("source").get("path") == "/c/vm3.work"
    assert (channel.find("target").get("type"), channel.find("target").get("name")) == ("virtio", "org.gleaner.work.0")
    plain = ET.fromstring(build_domain_xml(spec, KERNEL_IMAGE, "qemu", None, Path("/c/vm3.log"), WHEN, cpu_shares=2))
    assert plain.findall("devices/channel") == []


def test_a_foreground_domain_asked_for_the_work_channel_says_so_in_its_metadata():
    """A goal's dedicated VM: foreground, with the port; its metadata keeps the flag, so the
    agent reads its guest after a restart too. A volunteer has the port without the flag."""
    dedicated = LaunchSpec("vm4", PriorityClass.FOREGROUND, 1, 128, "tiny", work_channel=True)
    xml = build_domain_xml(dedicated, KERNEL_IMAGE, "qemu", None, Path("/c/vm4.log"), WHEN, cpu_shares=1024,
                           work_channel=Path("/c/vm4.work"))
    meta = read_metadata(xml)
    assert meta.work_channel and meta.has_work_channel and ET.fromstring(xml).findall("devices/channel")
    started = dataclasses.replace(meta, started=True)   # as the launch marks it, through setMetadata
    qualified = metadata_xml(started).replace("<", "<g:").replace("<g:/", "</g:").replace(
        "<g:instance>", f"<g:instance xmlns:g='{NAMESPACE}'>", 1)
    assert read_metadata(f"<domain><metadata>{qualified}</metadata></domain>") == started
    plain = read_metadata(build_domain_xml(LaunchSpec("vm5", PriorityClass.FOREGROUND, 1, 128, "tiny"), KERNEL_IMAGE,
                                           "qemu", None, Path("/c/vm5.log"), WHEN, cpu_shares=1024))
    assert not plain.work_channel and not plain.has_work_channel
    volunteer = read_metadata(build_domain_xml(LaunchSpec("vm6", PriorityClass.VOLUNTEER, 1, 128, "tiny"),
                                               KERNEL_IMAGE, "qemu", None, Path("/c/vm6.log"), WHEN, cpu_shares=2,
                                               work_channel=Path("/c/vm6.work")))
    assert not volunteer.work_channel and volunteer.has_work_channel
    assert LaunchSpec("vm6", PriorityClass.VOLUNTEER, 1, 128, "tiny").has_work_channel
    assert not LaunchSpec("vm5", PriorityClass.FOREGROUND, 1, 128, "tiny").has_work_channel

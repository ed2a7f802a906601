"""Domain XML built and read with ElementTree, never by formatting strings.

Gleaner keeps what it knows about a domain (role, lease, launch time, image, kernel
options, overlay) in the domain's own <metadata>, under its XML namespace, so a restarted
agent finds everything it manages in libvirt alone.
"""
from __future__ import annotations

import dataclasses
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from gleaner_common.vocabulary import PriorityClass

from .images import BootImage
from .settings import DiskSetting, LaunchSpec, gets_work_channel

NAMESPACE = "https://gleaner.dev/xmlns/domain/1"
PREFIX = "gleaner"
BASE_KERNEL_CMDLINE = "console=ttyS0 quiet"
DISK_TARGET = "vda"
WORK_CHANNEL = "org.gleaner.work.0"   # the virtio-serial port a backfill guest says busy/idle on
RETIRE_OPTION = "gleaner.retire_after"   # told to a volunteer guest: the run time after which it is recycled
ET.register_namespace(PREFIX, NAMESPACE)


def _q(tag: str) -> str:
    return f"{{{NAMESPACE}}}{tag}"


@dataclass(frozen=True)
class GleanerMetadata:
    role: PriorityClass
    lease_id: str
    launched_at: datetime
    image: str
    kernel_cmdline: str
    overlay: str
    priority_class: PriorityClass  # the role's class unless an admin promoted or demoted it
    agent_id: str = "default"  # the agent that manages it
    # False from define until the launch has started the domain: a stopped domain still False
    # was never started (its agent died mid-launch). Domains defined before this flag existed
    # have no element and read as started.
    started: bool = True
    # Its past hibernations, (saved, resumed) in seconds since the epoch, oldest first, at most
    # MAX_NAPS: the time it slept, which its run time and its work clock do not count.
    naps: tuple[tuple[float, float], ...] = ()
    # CPU time of its QEMU processes before the last restore (each restore starts a new one)
    banked_cpu_ns: int = 0
    retire_after_s: int = 0   # what its guest was told (retire_option); 0: nothing
    # a foreground domain launched with the work channel (a goal's dedicated VM: its guest says
    # its tenant's progress); volunteers always have it, with or without this flag
    work_channel: bool = False

    @property
    def has_work_channel(self) -> bool:
        return gets_work_channel(self.role, self.work_channel)

    @property
    def slept_s(self) -> float:
        return sum(end - start for start, end in self.naps)


MAX_NAPS = 64   # a hibernation every hour for most of three days; older ones are merged into the first


def with_nap(meta: GleanerMetadata, start: float, end: float) -> GleanerMetadata:
    """`meta` with the hibernation from `start` to `end` added (or, if one from `start` is already
    there, put in its place: recording the same resume twice counts it once)."""
    naps = sorted(({s: e for s, e in meta.naps if s != start} | {start: max(end, start)}).items())
    if len(naps) > MAX_NAPS:   # merge the oldest two: the total stays, their gap counts as sleep
        (s1, _e1), (_s2, e2) = naps[0], naps[1]
        naps = [(s1, s1 + (naps[0][1] - s1) + (e2 - naps[1][0]))] + naps[2:]
    return dataclasses.replace(meta, naps=tuple(naps))


def slept_since(naps: tuple[tuple[float, float], ...], since: float, now: float,
                asleep_from: float | None = None) -> float:
    """Seconds slept between `since` and `now`: the recorded naps, and the current one if the
    domain sleeps now (from `asleep_from`)."""
    spans = list(naps) + ([(asleep_from, now)] if asleep_from is not None else [])
    return sum(max(0.0, min(end, now) - max(start, since)) for start, end in spans)


@dataclass(frozen=True)
class DomainShape:
    """What the domain XML says about size and console, read back for listing."""

    vcpus: int
    memory_mib: int
    console_log: str
    cpuset: str
    disk_caps: tuple[int, int] = (0, 0)  # (total_bytes_sec, total_iops_sec) on the first disk
    interfaces: tuple[str, ...] = ()     # host-side tap names, once the domain runs
    disk_weight: int | None = None       # <blkiotune><weight>; None when the XML has none


def _sub(parent: ET.Element, tag: str, text: str | None = None, **attrs: str) -> ET.Element:
    element = ET.SubElement(parent, tag, attrs)
    if text is not None:
        element.text = text
    return element


def metadata_element(meta: GleanerMetadata, qualify=_q) -> ET.Element:
    element = ET.Element(qualify("instance"))
    for tag, value in (("agent", meta.agent_id), ("role", meta.role.value), ("class", meta.priority_class.value),
                       ("lease-id", meta.lease_id),
                       ("launched-at", meta.launched_at.astimezone(timezone.utc).isoformat()),
                       ("image", meta.image), ("kernel-cmdline", meta.kernel_cmdline), ("overlay", meta.overlay),
                       ("started", "yes" if meta.started else "no")):
        _sub(element, qualify(tag), value)
    if meta.naps:
        _sub(element, qualify("naps"), " ".join(f"{start:.3f}-{end:.3f}" for start, end in meta.naps))
    if meta.banked_cpu_ns:
        _sub(element, qualify("cpu-ns-before"), str(meta.banked_cpu_ns))
    if meta.retire_after_s:
        _sub(element, qualify("retire-after"), str(meta.retire_after_s))
    if meta.work_channel:
        _sub(element, qualify("work-channel"), "yes")
    return element


def retire_option(seconds: int) -> str:
    """What a volunteer's guest is told of its recycle: after this many seconds of run time (its
    own clock, which stands still while it is hibernated), the controller recycles it. "" for 0."""
    return f"{RETIRE_OPTION}={seconds}" if seconds else ""


def metadata_xml(meta: GleanerMetadata) -> str:
    """The metadata element alone, unqualified: libvirt's setMetadata puts it in our namespace."""
    return ET.tostring(metadata_element(meta, qualify=str), encoding="unicode")


def build_domain_xml(spec: LaunchSpec, image: BootImage, domain_type: str, overlay: Path | None,
                     console_log: Path, launched_at: datetime, cpu_shares: int, agent_id: str = "default",
                     disk: DiskSetting = DiskSetting(1000, 0, 0), network: str = "none",
                     work_channel: Path | None = None) -> str:
    """The domain's XML. `work_channel`: a file the guest's port WORK_CHANNEL writes to (kept by
    virtlogd like the console log, so its size is bounded whatever the guest writes)."""
    root = ET.Element("domain", type=domain_type)
    _sub(root, "name", spec.name)
    _sub(root, "memory", str(spec.memory_mib), unit="MiB")
    vcpu = _sub(root, "vcpu", str(spec.vcpus), placement="static")
    if spec.cpuset:
        vcpu.set("cpuset", spec.cpuset)
    meta = GleanerMetadata(role=spec.role, lease_id=spec.lease_id, launched_at=launched_at, image=spec.image,
                           kernel_cmdline=spec.kernel_cmdline, overlay=str(overlay) if overlay else "",
                           priority_class=spec.role, agent_id=agent_id, started=False,
                           retire_after_s=spec.retire_after_seconds,
                           work_channel=spec.work_channel and work_channel is not None)
    _sub(root, "metadata").append(metadata_element(meta))
    cputune = _sub(root, "cputune")
    _sub(cputune, "shares", str(cpu_shares))
    if spec.cpuset:
        _sub(cputune, "emulatorpin", cpuset=spec.cpuset)
    _sub(_sub(root, "blkiotune"), "weight", str(disk.weight))

    os_el = _sub(root, "os")
    _sub(os_el, "type", "hvm", arch="x86_64", machine="pc")
    retire = retire_option(spec.retire_after_seconds)
    if image.boots_kernel:
        _sub(os_el, "kernel", str(image.kernel))
        _sub(os_el, "initrd", str(image.initrd))
        _sub(os_el, "cmdline", " ".join(filter(None, [BASE_KERNEL_CMDLINE, spec.kernel_cmdline, retire])))
    else:
        _sub(os_el, "boot", dev="hd")
    if retire:   # any guest can read it: dmidecode --oem-string 1, or /sys/firmware/dmi/entries/11-0/raw
        _sub(os_el, "smbios", mode="sysinfo")
        strings = _sub(_sub(root, "sysinfo", type="smbios"), "oemStrings")
        _sub(strings, "entry", retire)
    features = _sub(root, "features")
    _sub(features, "acpi")
    _sub(features, "apic")
    _sub(root, "clock", offset="utc")
    _sub(root, "on_poweroff", "destroy")
    _sub(root, "on_reboot", "restart")
    _sub(root, "on_crash", "destroy")

    devices = _sub(root, "devices")
    if overlay is not None:
        disk_el = _sub(devices, "disk", type="file", device="disk")
        # cache=none: guest I/O reaches the device (where priorities act), not the host's page cache.
        _sub(disk_el, "driver", name="qemu", type="qcow2", discard="unmap", cache="none", io="native")
        _sub(disk_el, "source", file=str(overlay))
        _sub(disk_el, "target", dev=DISK_TARGET, bus="virtio")
        if disk.total_bytes_sec or disk.total_iops_sec:
            iotune = _sub(disk_el, "iotune")
            _sub(iotune, "total_bytes_sec", str(disk.total_bytes_sec))
            _sub(iotune, "total_iops_sec", str(disk.total_iops_sec))
    if network != "none":
        kind, _, source = network.partition(":")
        interface = _sub(devices, "interface", type=kind)
        if kind == "bridge":
            _sub(interface, "source", bridge=source)
        elif kind == "network":
            _sub(interface, "source", network=source)
        _sub(interface, "model", type="virtio")
    serial = _sub(devices, "serial", type="pty")
    _sub(serial, "log", file=str(console_log), append="off")
    console = _sub(devices, "console", type="pty")
    _sub(console, "target", type="serial", port="0")
    if work_channel is not None:
        channel = _sub(devices, "channel", type="file")
        _sub(channel, "source", path=str(work_channel), append="off")
        _sub(channel, "target", type="virtio", name=WORK_CHANNEL)
    _sub(devices, "memballoon", model="none")
    return ET.tostring(root, encoding="unicode")


def read_metadata(xml: str) -> GleanerMetadata | None:
    """Gleaner's metadata in a domain's XML, or None for a domain Gleaner does not manage."""
    meta = ET.fromstring(xml).find(f"metadata/{_q('instance')}")
    if meta is None:
        return None

    def text(tag: str) -> str:
        return (meta.findtext(_q(tag)) or "").strip()

    try:
        role = PriorityClass(text("role"))
        priority_class = PriorityClass(text("class") or role)
        launched = datetime.fromisoformat(text("launched-at"))
    except ValueError:
        return None  # not ours in any useful sense: a hand-edited or foreign element
    return GleanerMetadata(role=role, lease_id=text("lease-id"), launched_at=launched,
                           image=text("image"), kernel_cmdline=text("kernel-cmdline"),
                           overlay=text("overlay"), priority_class=priority_class,
                           agent_id=text("agent") or "default", started=text("started") != "no",
                           naps=_read_naps(text("naps")),
                           banked_cpu_ns=int(text("cpu-ns-before")) if text("cpu-ns-before").isdigit() else 0,
                           retire_after_s=int(text("retire-after")) if text("retire-after").isdigit() else 0,
                           work_channel=text("work-channel") == "yes")


def _read_naps(text: str) -> tuple[tuple[float, float], ...]:
    """`START-END START-END ...`; a hand-edited token that is no span is skipped."""
    naps = []
    for token in text.split()[:MAX_NAPS]:
        start, _, end = token.partition("-")
        try:
            span = (float(start), float(end))
        except ValueError:
            continue
        if all(map(lambda x: x == x and abs(x) != float("inf"), span)) and span[0] <= span[1]:
            naps.append(span)
    return tuple(naps)


def read_shape(xml: str) -> DomainShape:
    root = ET.fromstring(xml)
    memory = root.find("memory")
    kib = int(memory.text or 0) if memory is not None else 0
    unit = memory.get("unit", "KiB") if memory is not None else "KiB"
    factor = {"KiB": 1, "k": 1, "MiB": 1024, "M": 1024, "GiB": 1024 * 1024, "G": 1024 * 1024}.get(unit, 1)
    log = root.find("devices/serial/log")
    vcpu = root.find("vcpu")
    iotune = root.find("devices/disk/iotune")
    caps = (int(iotune.findtext("total_bytes_sec") or 0), int(iotune.findtext("total_iops_sec") or 0)) \
        if iotune is not None else (0, 0)
    weight = (root.findtext("blkiotune/weight") or "").strip()
    return DomainShape(vcpus=int(vcpu.text or 0) if vcpu is not None else 0, memory_mib=kib * factor // 1024,
                       console_log=log.get("file", "") if log is not None else "",
                       cpuset=vcpu.get("cpuset", "") if vcpu is not None else "", disk_caps=caps,
                       interfaces=tuple(t.get("dev", "") for t in root.findall("devices/interface/target")
                                        if t.get("dev")),
                       disk_weight=int(weight) if weight.isdigit() else None)

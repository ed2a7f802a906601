"""The one module that reads and writes cgroupfs.

Its root is configurable so tests can point it at a fake cgroupfs in a temporary
directory; it knows cgroup v1 (``cpu.shares``) and v2 (``cpu.weight``), and the kernel's
rules for ``cpu.idle``: while a group is idle the kernel refuses weight writes (EINVAL),
and clearing idle resets the weight, so the weight is written after idle is cleared.
"""
from __future__ import annotations

import os
import re
import time
from dataclasses import dataclass
from pathlib import Path

from .settings import CgroupFacts, CpuSetting

ROOT = Path("/sys/fs/cgroup")   # where the kernel mounts cgroupfs (the default of cgroup.root)
PROC = Path("/proc")   # where processes' and threads' stat and schedstat files are


def _cpu_dir(root: Path, version: int) -> Path:
    return root if version == 2 else root / "cpu"


def detect(root: Path) -> CgroupFacts:
    """Which cgroup version is mounted at root, and whether cpu.idle exists.

    cpu.idle is absent from the root group by design, so child groups are looked at too.
    """
    version = 2 if (root / "cgroup.controllers").is_file() else 1
    cpu_dir = _cpu_dir(root, version)
    candidates = [cpu_dir, *(p for p in cpu_dir.iterdir() if p.is_dir())] if cpu_dir.is_dir() else []
    return CgroupFacts(version=version, cpu_idle=any((p / "cpu.idle").is_file() for p in candidates))


MACHINE_NAME_MAX = 64   # libvirt's machine names stop growing at HOST_NAME_MAX characters
_HOSTNAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-")
_MACHINE_DIR = re.compile(r"(?:qemu-)?(\d+)-.*\.libvirt-qemu")
_SCOPE_DIR = re.compile(r"machine-qemu\\x2d(\d+)\\x2d.*\.scope")


def machine_name(domain_id: int, name: str, limit: int = MACHINE_NAME_MAX) -> str:
    """The machine name libvirt derives from a domain's id and name (virDomainDriverGenerateMachineName):
    'qemu-ID-' then the name's characters a host name may hold ('_' and others dropped, runs of
    '.' and '-' kept as their first), cut at 64 characters, without trailing '-' or '.'. A long
    name is cut shorter once the id has more digits, so one domain's group name can change
    from one start to the next."""
    out = f"qemu-{domain_id}-"
    skip = True
    for char in name:
        if len(out) >= limit:
            break
        if char in ".-":
            if not skip:
                out += char
                skip = True
            continue
        skip = False
        if char in _HOSTNAME_CHARS:
            out += char
    return out.rstrip("-.")


def _domain_dir_id(entry: str, name: str) -> int | None:
    """The domain id in a machine/ or machine.slice/ entry if the entry is domain `name`'s group
    by its name: without systemd 'MACHINE.libvirt-qemu', with systemd 'machine-MACHINE.scope'
    ('-' escaped as \\x2d)."""
    match = _MACHINE_DIR.fullmatch(entry)
    if match:
        domain_id = int(match.group(1))
        machine = machine_name(domain_id, name)
        return domain_id if entry in (f"{machine}.libvirt-qemu",
                                      f"{machine.removeprefix('qemu-')}.libvirt-qemu") else None
    match = _SCOPE_DIR.fullmatch(entry)
    if match:
        domain_id = int(match.group(1))
        machine = machine_name(domain_id, name)
        return domain_id if entry == f"machine-{machine.replace('-', chr(92) + 'x2d')}.scope" else None
    return None


def domain_cgroup(root: Path, version: int, name: str, controller: str = "cpu", proc: Path = PROC) -> Path | None:
    """The cgroup directory libvirt made for domain `name` (in `controller`'s hierarchy on v1).
    A name cut short in its machine name may be another domain's whose name begins alike: such
    a group is taken only if its QEMU was started as this guest (-name guest=NAME)."""
    base = root if version == 2 else root / controller
    for machine in ("machine", "machine.slice"):
        parent = base / machine
        if not parent.is_dir():
            continue
        for entry in parent.iterdir():
            domain_id = _domain_dir_id(entry.name, name) if entry.is_dir() else None
            if domain_id is None:
                continue
            cut = machine_name(domain_id, name) != machine_name(domain_id, name, limit=10**6)
            if not cut or _runs_guest(entry, name, proc):
                return entry
    return None


def _runs_guest(group: Path, name: str, proc: Path) -> bool:
    for pid in group_pids(group):
        try:
            args = read_small(proc / str(pid) / "cmdline").split("\0")
        except (FileNotFoundError, ProcessLookupError):
            continue
        if any(arg == f"guest={name}" or arg.startswith(f"guest={name},") for arg in args):
            return True
    return False


class GroupFinder:
    """domain_cgroup with a memory: a domain's group keeps its path while the domain runs,
    so periodic jobs need not scan machine/ every time. A vanished path is looked up again;
    a group that does not exist (libvirt makes none in some hierarchies) is looked for again
    only after `miss_seconds`."""

    def __init__(self, root: Path, version: int, miss_seconds: float = 30.0) -> None:
        self.root = root
        self.version = version
        self.miss_seconds = miss_seconds
        self._paths: dict[tuple[str, str], Path] = {}
        self._misses: dict[tuple[str, str], float] = {}

    def find(self, name: str, controller: str = "cpu") -> Path | None:
        key = (name, controller)
        path = self._paths.get(key)
        if path is not None and path.is_dir():
            return path
        if time.monotonic() - self._misses.get(key, -self.miss_seconds) < self.miss_seconds:
            return None
        path = domain_cgroup(self.root, self.version, name, controller)
        if path is None:
            self._paths.pop(key, None)
            self._misses[key] = time.monotonic()
            return None
        self._misses.pop(key, None)
        self._paths[key] = path
        return path

    def forget(self, name: str) -> None:
        for cache in (self._paths, self._misses):
            for key in [k for k in cache if k[0] == name]:
                del cache[key]


@dataclass(frozen=True)
class BlockCounters:
    read_bytes: int = 0
    write_bytes: int = 0
    read_ops: int = 0
    write_ops: int = 0


def block_counters(group: Path, version: int) -> BlockCounters:
    """Host block I/O issued by the group, summed over devices (v1 blkio throttle counters,
    which count on every scheduler; v2 io.stat)."""
    if version == 2:
        totals = {"rbytes": 0, "wbytes": 0, "rios": 0, "wios": 0}
        for line in _read_lines(group / "io.stat"):
            for field in line.split()[1:]:
                key, _, value = field.partition("=")
                if key in totals:
                    totals[key] += int(value)
        return BlockCounters(totals["rbytes"], totals["wbytes"], totals["rios"], totals["wios"])

    def by_op(knob: str) -> dict[str, int]:
        sums = {"Read": 0, "Write": 0}
        for line in _read_lines(group / knob):
            parts = line.split()
            if len(parts) == 3 and parts[1] in sums:
                sums[parts[1]] += int(parts[2])
        return sums

    size = by_op("blkio.throttle.io_service_bytes_recursive")
    ops = by_op("blkio.throttle.io_serviced_recursive")
    return BlockCounters(size["Read"], size["Write"], ops["Read"], ops["Write"])


def cpu_usage_ns(group: Path, version: int) -> int:
    """CPU time the group has used: v1 cpuacct.usage (pass the cpuacct group), v2 cpu.stat."""
    if version == 2:
        for line in _read_lines(group / "cpu.stat"):
            key, _, value = line.partition(" ")
            if key == "usage_usec":
                return int(value) * 1000
        return 0
    return _read_int(group / "cpuacct.usage")


def group_pids(group: Path) -> list[int]:
    """Processes in a group and its direct subgroups (for a domain: its QEMU)."""
    return sorted({int(p) for f in [group / "cgroup.procs", *group.glob("*/cgroup.procs")] for p in _read_lines(f)})


def process_cpu_ns(pids: list[int], proc: Path = PROC) -> int:
    """CPU time of processes (utime + stime, which keeps the time of threads that have
    ended): for v1 hosts where libvirt made no cpuacct group for the domain. Clock-tick
    precision, plenty for one-second samples. FileNotFoundError when a process is gone."""
    total = 0
    for pid in pids:
        fields = read_small(proc / str(pid) / "stat").rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15 of stat)
    return total * 1_000_000_000 // os.sysconf("SC_CLK_TCK")


def read_small(path: Path) -> str:
    """A kernel file's text (cgroupfs, /proc) read with plain system calls: pathlib's file
    objects cost more than the read itself, and the sampler and the guard read about a hundred
    such files a second. FileNotFoundError (or ProcessLookupError) as read_text raises them."""
    fd = os.open(path, os.O_RDONLY)
    try:
        chunks = []
        while chunk := os.read(fd, 65536):
            chunks.append(chunk)
        return b"".join(chunks).decode()
    finally:
        os.close(fd)


def _read_lines(path: Path) -> list[str]:
    try:
        return read_small(path).splitlines()
    except FileNotFoundError:
        return []


def _weight_file(version: int) -> str:
    return "cpu.weight" if version == 2 else "cpu.shares"


def _read_int(path: Path) -> int:
    return int(read_small(path).split()[0])


def read_cpu(group: Path, version: int) -> CpuSetting:
    idle_file = group / "cpu.idle"
    idle = idle_file.is_file() and _read_int(idle_file) == 1
    return CpuSetting(idle=idle, weight=_read_int(group / _weight_file(version)))


def apply_cpu(group: Path, version: int, want: CpuSetting) -> list[str]:
    """Make `group` say `want`; returns what had to change (empty when it already did).

    Asking for idle where the kernel has no cpu.idle is a caller error: callers choose a
    setting from CgroupFacts, which says whether idle exists.
    """
    have = read_cpu(group, version)
    changes = []
    if want.idle:
        if not have.idle:
            (group / "cpu.idle").write_text("1")
            changes.append("cpu.idle 0 -> 1")
        return changes
    if have.idle:
        (group / "cpu.idle").write_text("0")  # the kernel resets the weight here
        changes.append("cpu.idle 1 -> 0")
        have = read_cpu(group, version)
    if have.weight != want.weight:
        (group / _weight_file(version)).write_text(str(want.weight))
        changes.append(f"{_weight_file(version)} {have.weight} -> {want.weight}")
    return changes


def _task_ids(group: Path, version: int) -> list[int]:
    listing = group / ("cgroup.threads" if version == 2 else "tasks")
    try:
        return [int(t) for t in listing.read_text().split()]
    except FileNotFoundError:
        return []


def vcpu_groups(group: Path) -> list[Path]:
    """A domain's vcpuN groups: right under its group (libvirt without systemd) or under the
    nested libvirt/ group libvirt makes inside a systemd machine scope."""
    found = []
    for parent in (group, group / "libvirt"):
        if parent.is_dir():
            found += [g for g in parent.iterdir() if g.is_dir() and re.fullmatch(r"vcpu\d+", g.name)]
    return sorted(found)


def vcpu_schedstat_paths(group: Path, version: int, proc: Path = PROC) -> list[Path] | None:
    """/proc/<tid>/schedstat of the domain's vCPU threads (those libvirt put in vcpuN/ groups),
    or None while libvirt has not yet put each of them there.

    vCPU threads live as long as the domain, so callers keep this list and read it often:
    the starvation guard reads the kernel's numbers rather than libvirt's, whose vCPU
    statistics ask QEMU's monitor, which a starved volunteer answers late. Hence None during
    start-up: libvirt starts QEMU with every thread in emulator/ (measured: about 0.5 s, longer
    on a busy host) and only then makes vcpuN/ and moves each vCPU thread in. A list taken
    then holds no vCPU thread, reads as a guest that never wants CPU, and, kept, hid a starving
    volunteer from the guard for the whole of its life.
    """
    groups = vcpu_groups(group)
    tids = [_task_ids(sub, version) for sub in groups]
    if not groups or not all(tids):
        return None
    return [proc / str(tid) / "schedstat" for ids in tids for tid in ids]


def read_schedstat(paths: list[Path]) -> tuple[int, int]:
    """(ns run, ns waited runnable in the run queue), summed; FileNotFoundError if a thread ended."""
    run = wait = 0
    for path in paths:
        fields = read_small(path).split()
        run += int(fields[0])
        wait += int(fields[1])
    return run, wait

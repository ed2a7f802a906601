"""The agent's TOML configuration: defaults, strict checking, and command-line overrides.

Unknown sections and keys are errors, so a typo never silently leaves a default in force.
"""
from __future__ import annotations

import re
import socket
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gleaner_common import ids
from gleaner_common.config import (ConfigError, TlsConfig, check_address, check_listen, check_numbers, check_tls,
                                   host_port_problem, number_keys, parse_sections, read_toml, sections_to_toml)
from gleaner_common.config import with_overrides as _with_overrides

from .guard import GuardConfig
from .host import cgroups
from .priority import CpuWeights, DiskPolicy

DOMAIN_TYPES = ("auto", "kvm", "qemu")
MAX_CONSOLE_KEEP_SECONDS = 366 * 86400
CONSOLE_BUDGET_MIB = (16, 1024 * 1024)   # lifecycle.console_budget_mib: at least two domains' full logs, at most 1 TiB
HIBERNATION_MIB = (0, 2**30)   # hibernation.budget_mib and disk_reserve_mib: 0 to 1 PiB


@dataclass(frozen=True)
class AgentConfig:
    agent_id: str = "default"  # stamped on every domain; an agent manages only its own
    listen: str = "0.0.0.0:7443"
    state_dir: Path = Path("/var/lib/gleaner/agent")
    image_dir: Path = Path("/var/lib/gleaner/images")
    log_level: str = "info"
    libvirt_uri: str = "qemu:///system"
    domain_type: str = "auto"
    grace_seconds: int = 30
    reap_interval_seconds: float = 5.0
    # A domain defined by a launch that never finished (the agent died before starting it) is
    # left this long for a repeated launch to finish it, then the reaper removes it.
    unfinished_launch_seconds: float = 30.0
    # An ended domain's console log is kept this long after its last line (a guest's last words
    # are only there; three days outlast a weekend), then the reaper removes it. 0: with the domain.
    console_keep_seconds: float = 3 * 86400.0
    # ... and all console logs together are kept within this many MiB: over it, ended domains'
    # logs go, oldest first (a chatty guest recycled every minute fills the state directory,
    # which also holds the overlays). virtlogd keeps at most 8 MiB a file kind a domain.
    console_budget_mib: int = 1024
    cgroup_root: Path = cgroups.ROOT
    use_cpu_idle: bool = True
    foreground_weight_v1: int = 1024
    foreground_weight_v2: int = 100
    volunteer_weight_v1: int = 2
    volunteer_weight_v2: int = 1
    reconcile_interval_seconds: float = 10.0
    guard_enabled: bool = True
    guard_period_seconds: float = 10.0
    guard_slice_ms: float = 500.0
    guard_tick_seconds: float = 0.25
    guard_idle_tick_seconds: float = 1.0
    disk_foreground_weight: int = 1000
    disk_volunteer_weight: int = 100
    disk_volunteer_bytes_per_second: int = 20 * 2**20
    disk_volunteer_iops: int = 200
    network_attach: str = "none"  # none, ethernet (a bare tap), bridge:NAME or network:NAME
    network_volunteer_to_guest_bytes_per_second: int = 12_500_000  # 100 Mbit/s
    network_volunteer_from_guest_bytes_per_second: int = 12_500_000
    metrics_listen: str = "127.0.0.1:9477"  # Prometheus endpoint; "" turns it off
    metrics_sample_seconds: float = 1.0
    controller_address: str = ""        # HOST:PORT of the controller to report to; "" = standalone
    controller_report_seconds: float = 2.0
    advertise_address: str = ""         # where the controller reaches this agent; "" = from listen
    # Hibernated backfill domains' state files (docs/agent.md, "Hibernation"): where ("" =
    # <state_dir>/hibernation, on the overlays' filesystem), how much together (a file is at most
    # its domain's memory; 0 turns hibernation off), and the free disk always left for overlays.
    hibernation_directory: str = ""
    hibernation_budget_mib: int = 32768
    # vCPUs offered per host CPU (OpenStack's cpu_allocation_ratio): the controller books this many
    # vCPUs on the node; 1 books one vCPU per CPU, as before
    cpu_allocation_ratio: float = 1.0
    hibernation_disk_reserve_mib: int = 10240
    tls: TlsConfig = field(default_factory=TlsConfig)

    @property
    def cpu_weights(self) -> CpuWeights:
        return CpuWeights(foreground_v1=self.foreground_weight_v1, foreground_v2=self.foreground_weight_v2,
                          volunteer_v1=self.volunteer_weight_v1, volunteer_v2=self.volunteer_weight_v2,
                          use_cpu_idle=self.use_cpu_idle)

    @property
    def disk_policy(self) -> DiskPolicy:
        return DiskPolicy(foreground_weight=self.disk_foreground_weight, volunteer_weight=self.disk_volunteer_weight,
                          volunteer_bytes_per_second=self.disk_volunteer_bytes_per_second,
                          volunteer_iops=self.disk_volunteer_iops)

    @property
    def guard(self) -> GuardConfig:
        return GuardConfig(enabled=self.guard_enabled, period_seconds=self.guard_period_seconds,
                           slice_ms=self.guard_slice_ms, tick_seconds=self.guard_tick_seconds,
                           idle_tick_seconds=self.guard_idle_tick_seconds)

    @property
    def reachable_address(self) -> str:
        """The address the controller dials: advertise, else listen with a wildcard host made concrete."""
        if self.advertise_address:
            return self.advertise_address
        host, port = self.listen.rsplit(":", 1)
        if host in ("0.0.0.0", "[::]", "::", ""):
            host = socket.gethostname()
        return f"{host}:{port}"

    @property
    def overlay_dir(self) -> Path:
        return self.state_dir / "overlays"

    @property
    def console_dir(self) -> Path:
        return self.state_dir / "console"

    @property
    def hibernation_dir(self) -> Path:
        return Path(self.hibernation_directory) if self.hibernation_directory else self.state_dir / "hibernation"


HOUR, DAY = 3600, 86400
INTERVAL = (0.1, HOUR)           # a loop's period: more often floods (reports) or spins (the reaper)
TICK = (0.01, 60.0)
MAX_DISK_BYTES_PER_SECOND = 2**40    # 1 TiB/s: past any disk; 0 is no cap
MAX_DISK_IOPS = 10**9
MAX_NET_BYTES_PER_SECOND = 125 * 10**9   # 1 Tbit/s: past any link; 0 is no cap
MAX_CPU_ALLOCATION_RATIO = 16.0      # OpenStack's historical default; past it foreground VMs starve

# TOML section -> {key: (AgentConfig attribute, type[, (low, high)])}: every number has its
# inclusive range, checked (finite) by check_config; a number without one fails at import.
_SCHEMA: dict[str, dict[str, tuple]] = {
    "agent": {"id": ("agent_id", str), "listen": ("listen", str), "state_dir": ("state_dir", Path),
              "image_dir": ("image_dir", Path), "log_level": ("log_level", str)},
    "libvirt": {"uri": ("libvirt_uri", str), "domain_type": ("domain_type", str)},
    "lifecycle": {"grace_seconds": ("grace_seconds", int, (0, HOUR)),
                  "reap_interval_seconds": ("reap_interval_seconds", float, INTERVAL),
                  "unfinished_launch_seconds": ("unfinished_launch_seconds", float, (0, DAY)),
                  "console_keep_seconds": ("console_keep_seconds", float, (0, MAX_CONSOLE_KEEP_SECONDS)),
                  "console_budget_mib": ("console_budget_mib", int, CONSOLE_BUDGET_MIB)},
    "cgroup": {"root": ("cgroup_root", Path)},
    # the kernel's ranges: cpu.shares (v1) and cpu.weight (v2)
    "priority": {"use_cpu_idle": ("use_cpu_idle", bool),
                 "foreground_weight_v1": ("foreground_weight_v1", int, (2, 262144)),
                 "foreground_weight_v2": ("foreground_weight_v2", int, (1, 10000)),
                 "volunteer_weight_v1": ("volunteer_weight_v1", int, (2, 262144)),
                 "volunteer_weight_v2": ("volunteer_weight_v2", int, (1, 10000)),
                 "reconcile_interval_seconds": ("reconcile_interval_seconds", float, INTERVAL)},
    "guard": {"enabled": ("guard_enabled", bool), "period_seconds": ("guard_period_seconds", float, INTERVAL),
              "slice_ms": ("guard_slice_ms", float, (1, HOUR * 1000)),
              "tick_seconds": ("guard_tick_seconds", float, TICK),
              "idle_tick_seconds": ("guard_idle_tick_seconds", float, TICK)},
    # libvirt's blkiotune weight range
    "disk": {"foreground_weight": ("disk_foreground_weight", int, (100, 1000)),
             "volunteer_weight": ("disk_volunteer_weight", int, (100, 1000)),
             "volunteer_bytes_per_second": ("disk_volunteer_bytes_per_second", int, (0, MAX_DISK_BYTES_PER_SECOND)),
             "volunteer_iops": ("disk_volunteer_iops", int, (0, MAX_DISK_IOPS))},
    "network": {"attach": ("network_attach", str),
                "volunteer_to_guest_bytes_per_second": ("network_volunteer_to_guest_bytes_per_second", int,
                                                        (0, MAX_NET_BYTES_PER_SECOND)),
                "volunteer_from_guest_bytes_per_second": ("network_volunteer_from_guest_bytes_per_second", int,
                                                          (0, MAX_NET_BYTES_PER_SECOND))},
    "metrics": {"listen": ("metrics_listen", str), "sample_seconds": ("metrics_sample_seconds", float, INTERVAL)},
    "controller": {"address": ("controller_address", str),
                   "report_seconds": ("controller_report_seconds", float, INTERVAL),
                   "advertise": ("advertise_address", str)},
    "capacity": {"cpu_allocation_ratio": ("cpu_allocation_ratio", float, (1.0, MAX_CPU_ALLOCATION_RATIO))},
    "hibernation": {"directory": ("hibernation_directory", str),
                    "budget_mib": ("hibernation_budget_mib", int, HIBERNATION_MIB),
                    "disk_reserve_mib": ("hibernation_disk_reserve_mib", int, HIBERNATION_MIB)},
}
NUMBER_KEYS = number_keys(_SCHEMA)


def parse_config(data: dict[str, Any], source: str = "<config>") -> AgentConfig:
    """Types and names are checked here; consistency by check_config, after overrides."""
    values, tls = parse_sections(data, _SCHEMA, source)
    return AgentConfig(**values, tls=TlsConfig(**tls))


def to_toml(config: AgentConfig) -> str:
    """The configuration as a TOML file that parse_config reads back to the same value."""
    return sections_to_toml(config, _SCHEMA, config.tls)


def load_config(path: Path) -> AgentConfig:
    return parse_config(read_toml(path), str(path))


def check_config(config: AgentConfig, source: str) -> None:
    check_numbers(config, _SCHEMA, source)   # first: every rule below may compare numbers
    if config.domain_type not in DOMAIN_TYPES:
        raise ConfigError(f"{source}: libvirt.domain_type must be one of {', '.join(DOMAIN_TYPES)}, "
                          f"not {config.domain_type!r}")
    if config.guard_slice_ms >= config.guard_period_seconds * 1000:
        raise ConfigError(f"{source}: guard.slice_ms must be shorter than guard.period_seconds")
    check_listen(config.listen, "agent.listen", source)
    try:
        ids.node_id(config.agent_id, "agent.id")
    except ids.InvalidField as exc:
        raise ConfigError(f"{source}: {exc} (it is this node's id, named in its certificate)") from None
    if not re.fullmatch(r"none|ethernet|(bridge|network):[A-Za-z0-9][A-Za-z0-9_.-]{0,14}", config.network_attach):
        raise ConfigError(f"{source}: network.attach {config.network_attach!r} must be none, ethernet, "
                          "bridge:NAME or network:NAME")
    if config.metrics_listen:
        check_address(config.metrics_listen, "metrics.listen", source, port_zero=True)
    if config.log_level.lower() not in ("debug", "info", "warning", "error"):
        raise ConfigError(f"{source}: agent.log_level must be debug, info, warning or error")
    check_controller_addresses(config, source)
    check_hibernation_directory(config, source)
    check_tls(config.tls, config.listen, source)


def check_controller_addresses(config: AgentConfig, source: str) -> None:
    """Where the agent reports to and where it says it is reached: each HOST:PORT and nothing
    else (host_port_problem), so neither can send a gRPC client to a socket or a resolver."""
    for key, address in (("controller.address", config.controller_address),
                         ("controller.advertise", config.advertise_address)):
        if address:
            check_address(address, key, source)
    if not config.controller_address:
        return
    if config.listen.startswith("unix:") and not config.advertise_address:
        raise ConfigError(f"{source}: an agent on a unix socket needs controller.advertise, the HOST:PORT "
                          "the controller can reach it at")
    if not config.advertise_address:   # made from listen and this host's name: checked as reported
        problem = host_port_problem(config.reachable_address)
        if problem:
            raise ConfigError(f"{source}: the address reported to the controller, {config.reachable_address[:80]!r} "
                              f"(from agent.listen), must be HOST:PORT: {problem}; set controller.advertise")


def check_hibernation_directory(config: AgentConfig, source: str) -> None:
    """An absolute path of its own: never the overlay or console directory (their sweeps would
    judge the state files), nor inside them."""
    if not config.hibernation_directory:
        return
    directory = Path(config.hibernation_directory)
    if not directory.is_absolute() or ".." in directory.parts:
        raise ConfigError(f"{source}: hibernation.directory {config.hibernation_directory!r} must be an absolute "
                          "path without '..'")
    for key, other in (("the overlay directory", config.overlay_dir), ("the console directory", config.console_dir)):
        if directory == other or other in directory.parents:
            raise ConfigError(f"{source}: hibernation.directory {config.hibernation_directory!r} must not be "
                              f"{key} ({other}) or inside it; use a directory of its own")


def with_overrides(config: AgentConfig, listen: str | None = None, insecure: bool = False,
                   source: str = "configuration") -> AgentConfig:
    """--listen / --insecure from the command line, then the whole configuration checked."""
    return _with_overrides(config, check_config, listen, insecure, source)

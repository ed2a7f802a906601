"""The agent's parts, made and wired together once (by the daemon, nodeagent/cli.py).

No behaviour lives here: each part is used directly by whoever needs it (the gRPC API,
the periodic jobs, the reporter, the sampler).
"""
from __future__ import annotations

from dataclasses import dataclass

from gleaner_common import __version__

from .collection import Collection
from .config import AgentConfig
from .domains import Domains
from .enforcement import Enforcement
from .events import EventBus
from .hibernation import Figures as HibernationFigures, Hibernation
from .host import statefiles
from .host.settings import CgroupFacts
from .host.hypervisor import HostFacts, Hypervisor
from .inventory import Inventory
from .priorityctl import PriorityController
from .reaper import Reaper


@dataclass(frozen=True)
class HostDescription:
    facts: HostFacts
    cgroup: CgroupFacts
    disk_scheduler: str
    disk_mechanism: str
    domain_type: str
    libvirt_uri: str
    agent_version: str
    managed_domains: int
    hibernation: HibernationFigures


@dataclass(frozen=True)
class AgentParts:
    config: AgentConfig
    hypervisor: Hypervisor
    events: EventBus
    priority: PriorityController
    inventory: Inventory
    enforcement: Enforcement
    domains: Domains
    collection: Collection
    reaper: Reaper
    hibernation: Hibernation

    def describe_host(self) -> HostDescription:
        return HostDescription(facts=self.inventory.host_facts(), cgroup=self.priority.facts,
                               disk_scheduler=self.enforcement.disk_scheduler,
                               disk_mechanism=self.enforcement.disk_mechanism,
                               domain_type=self.inventory.domain_type, libvirt_uri=self.hypervisor.uri,
                               agent_version=__version__, managed_domains=len(self.inventory.list()),
                               hibernation=self.hibernation.figures())


def make_directories(config: AgentConfig) -> None:
    # 0711: QEMU (libvirt-qemu) must traverse to its overlay; nothing here can be listed by others.
    for directory, mode in ((config.state_dir, 0o711), (config.overlay_dir, 0o711),
                            (config.console_dir, 0o700)):
        directory.mkdir(parents=True, exist_ok=True)
        directory.chmod(mode)
    # 0700: libvirtd (root) opens the state files and hands QEMU the descriptor; no one else reads them
    statefiles.make_directory(config.hibernation_dir)


def assemble(config: AgentConfig, hypervisor: Hypervisor, events: EventBus | None = None) -> AgentParts:
    events = events or EventBus()
    priority = PriorityController(events, config.cgroup_root, config.cpu_weights, config.guard)
    inventory = Inventory(config, hypervisor, boosted=priority.is_boosted)
    make_directories(config)
    enforcement = Enforcement(config, hypervisor, inventory, priority, events)
    domains = Domains(config, hypervisor, inventory, enforcement, events)
    hibernation = Hibernation(config, hypervisor, inventory, enforcement, domains)
    return AgentParts(config=config, hypervisor=hypervisor, events=events, priority=priority, inventory=inventory,
                      enforcement=enforcement, domains=domains, collection=Collection(inventory, priority),
                      reaper=Reaper(config, hypervisor, inventory, domains, hibernation), hibernation=hibernation)

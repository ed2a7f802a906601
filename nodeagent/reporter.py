"""Reports this node to the controller: one long-lived stream, a report every few seconds.

A report carries the host's size and load, the residual capacity, the running managed
domains as their metadata says, and apart from them the hibernated ones (present, not running)
with the hibernation directory's budget, use and room. When the controller is unreachable the agent keeps working
on its own and retries with a growing pause; the controller marks the node suspect, then down,
and takes it back when reports resume.
"""
from __future__ import annotations

import logging
import random
import socket
import threading
import time
from collections.abc import Iterator

import grpc

from gleaner_common import __version__, identity, watchdog
from gleaner_common.logs import log_event
from gleaner_common.rpc import channel_to
from gleaner_common.vocabulary import VmRole, role_of
from protos import controller_pb2, controller_pb2_grpc

from .config import AgentConfig
from .host.images import list_images
from .hibernation import Hibernation
from .host.domainxml import read_shape
from .host.workchannel import progress_fields
from .inventory import Inventory
from .metrics import Sampler
from .validation import MIN_MEMORY_MIB

log = logging.getLogger(__name__)
MAX_RETRY_SECONDS = 30.0
# Every outbound call has a deadline: a report stream ends after this long and is opened anew.
STREAM_SECONDS = 3600.0
VM_ROLES = {VmRole.ON_DEMAND: controller_pb2.VM_ROLE_ON_DEMAND, VmRole.BACKFILL: controller_pb2.VM_ROLE_BACKFILL}
PROBE_SECONDS = 1.0   # while the controller is away: how often to look whether it listens again
IMAGES_EVERY = 30     # reports between two looks at the image directory


def wait_for_listener(address: str, pause: float, stop: threading.Event, every: float = PROBE_SECONDS) -> bool:
    """Wait `pause` seconds before reporting again, or less: as soon as something listens at
    `address` again (a restarted controller), so that its unfinished business (asked again when
    this node reports) does not wait out the back-off. The probe is a bare TCP connect, refused
    at once while nothing listens: no TLS until the controller is back. True when it listens."""
    host, _, port = address.rpartition(":")
    deadline = time.monotonic() + pause
    while not stop.is_set():
        watchdog.beat("reporter")
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        if stop.wait(min(every * random.uniform(0.5, 1.0), left)):   # spread over a pool's agents
            return False
        try:
            with socket.create_connection((host.strip("[]"), int(port)), timeout=min(every, 1.0)):
                return True
        except (OSError, ValueError):
            continue
    return False


class Reporter:
    def __init__(self, config: AgentConfig, inventory: Inventory, sampler: Sampler,
                 hibernation: Hibernation | None = None) -> None:
        self.config = config
        self.hibernation = hibernation
        self.inventory = inventory
        self.sampler = sampler
        self._seq = 0
        self._images: list[str] = []

    def build(self) -> controller_pb2.NodeReport:
        facts = self.inventory.host_facts()
        snap = self.sampler.latest()
        cpu = {d.name: d.cpu_cores for d in snap.domains} if snap else {}
        self._seq += 1
        if self._seq % IMAGES_EVERY == 1:
            self._images = list_images(self.config.image_dir)
        report = controller_pb2.NodeReport(
            node_id=self.config.agent_id, agent_address=self.config.reachable_address,
            cpus=offered_vcpus(facts.cpus, self.config.cpu_allocation_ratio),
            memory_mib=facts.memory_mib, seq=self._seq, sent_at=time.time(), agent_version=__version__,
            images=self._images, min_memory_mib=MIN_MEMORY_MIB)
        if snap is not None:
            report.cpu_busy_cores = snap.host.get("cpu_busy_cores", 0.0)
            report.foreground_cpu_cores = snap.residual.foreground_cpu_demand_cores
            report.residual_cpu_cores = snap.residual.residual_cpu_cores
            report.residual_memory_mib = snap.residual.residual_memory_bytes // 2**20
        asleep = self._add_hibernated(report, self.hibernation) if self.hibernation is not None else set()
        # while libvirtd saves or restores a domain, every listing waits for it (seconds, minutes for
        # a large guest): the report says what the last pass saw, and the node stays alive to the
        # controller (the VM being saved still shows running, as it is until the save is done)
        busy = self.hibernation.busy() if self.hibernation is not None else frozenset()
        running = self.inventory.running_snapshot() if busy else self.inventory.running()
        for name, meta, shape in running:
            if name in asleep:   # the inventory's view may lag a save just done: it runs no more
                continue
            work = self.inventory.work_state(name, meta)
            role = role_of(meta.role)
            report.vms.add(name=name, lease_id=meta.lease_id, role=role.value, vm_role=VM_ROLES[role], state="running",
                           vcpus=shape.vcpus, memory_mib=shape.memory_mib, launched_at=meta.launched_at.timestamp(),
                           cpu_cores=cpu.get(name, 0.0), cpu_sampled=name in cpu, image=meta.image,
                           work_state=work.state, work_for_s=work.for_s, slept_s=meta.slept_s,
                           **progress_fields(work))
        return report

    def _add_hibernated(self, report: controller_pb2.NodeReport, hibernation: Hibernation) -> set[str]:
        """The hibernated VMs (present, not running: never in `vms`) and the hibernation disk
        figures; their names."""
        figures = hibernation.figures()
        report.hibernation_budget_bytes = figures.budget_bytes
        report.hibernation_used_bytes = figures.used_bytes
        report.hibernation_room_bytes = figures.room_bytes
        for record, meta, saved in hibernation.hibernated():
            work = self.inventory.work_state(record.name, meta, asleep_from=saved.mtime)
            shape = read_shape(record.xml)
            report.hibernated.add(name=record.name, lease_id=meta.lease_id, vm_role=VM_ROLES[role_of(meta.role)],
                                  vcpus=shape.vcpus, memory_mib=shape.memory_mib,
                                  launched_at=meta.launched_at.timestamp(), image=meta.image, state_bytes=saved.size,
                                  hibernated_at=saved.mtime, slept_s=meta.slept_s, work_state=work.state,
                                  work_for_s=work.for_s, **progress_fields(work))
        return {vm.name for vm in report.hibernated}

    def _stream(self, stop: threading.Event) -> Iterator[controller_pb2.NodeReport]:
        while not stop.is_set():
            watchdog.beat("reporter", self.config.controller_report_seconds)
            try:
                yield self.build()
            except Exception as exc:  # noqa: BLE001 - a bad sample must not end the stream
                log_event(log, "report.build_failed", logging.WARNING, error=str(exc))
            stop.wait(self.config.controller_report_seconds)

    def run(self, stop: threading.Event) -> None:
        pause = 1.0
        while not stop.is_set():
            started = time.monotonic()
            # The controller's certificate must name it as the controller: an agent reports nowhere else.
            with channel_to(identity.Role.CONTROLLER, "", self.config.controller_address, self.config.tls.files) as channel:
                stub = controller_pb2_grpc.ControllerStub(channel)
                log_event(log, "controller.connecting", address=self.config.controller_address,
                          advertise=self.config.reachable_address)
                try:
                    stub.Report(self._stream(stop), wait_for_ready=False, timeout=STREAM_SECONDS)
                except grpc.RpcError as exc:
                    if stop.is_set():
                        return
                    if exc.code() == grpc.StatusCode.DEADLINE_EXCEEDED:
                        log_event(log, "controller.stream_renewed", after_s=round(time.monotonic() - started))
                        continue
                    log_event(log, "controller.unreachable", logging.WARNING, address=self.config.controller_address,
                              code=exc.code().name, error=exc.details(), retry_in_s=pause)
            if time.monotonic() - started > 60:
                pause = 1.0  # it had been working: start over with short pauses
            wait_for_listener(self.config.controller_address, pause, stop)
            pause = min(pause * 2, MAX_RETRY_SECONDS)


def offered_vcpus(cpus: int, ratio: float) -> int:
    """The vCPUs the node offers the controller: its CPUs times [capacity] cpu_allocation_ratio,
    rounded down (never fewer than its CPUs)."""
    return max(cpus, int(cpus * ratio + 1e-9))

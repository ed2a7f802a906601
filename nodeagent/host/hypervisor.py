"""The one module that talks to libvirt.

It returns plain data (DomainRecord, HostFacts) and raises HypervisorError, so nothing
else needs to know libvirt's types. The connection heals itself: when libvirtd restarts,
the next call notices the dead socket, reconnects and (for reads) retries once.
"""
from __future__ import annotations

import logging
import os
import threading
from dataclasses import dataclass
from typing import Callable, TypeVar

import libvirt

from gleaner_common.logs import log_event

from .errors import HostExhausted, HostRefused, HostUnavailable, says_exhausted

log = logging.getLogger(__name__)
T = TypeVar("T")

# libvirt prints every error to stderr unless a handler is set; errors reach us as exceptions.
libvirt.registerErrorHandler(lambda _ctx, _err: None, None)

# Events that can change what a domain's XML says: its state, our metadata, its tunables
# (cputune, blkiotune, iotune) and its devices (taps appear when it starts).
WATCHED_EVENTS = (libvirt.VIR_DOMAIN_EVENT_ID_LIFECYCLE, libvirt.VIR_DOMAIN_EVENT_ID_METADATA_CHANGE,
                  libvirt.VIR_DOMAIN_EVENT_ID_TUNABLE, libvirt.VIR_DOMAIN_EVENT_ID_DEVICE_ADDED,
                  libvirt.VIR_DOMAIN_EVENT_ID_DEVICE_REMOVED)
_event_loop_lock = threading.Lock()
_event_loop_running = False


def _run_event_loop() -> None:
    while True:
        libvirt.virEventRunDefaultImpl()


def start_event_loop() -> None:
    """libvirt's own event loop, in a daemon thread; once per process, before connecting."""
    global _event_loop_running
    with _event_loop_lock:
        if not _event_loop_running:
            libvirt.virEventRegisterDefaultImpl()
            threading.Thread(target=_run_event_loop, name="libvirt-events", daemon=True).start()
            _event_loop_running = True

STATE_NAMES = {
    libvirt.VIR_DOMAIN_NOSTATE: "unknown",
    libvirt.VIR_DOMAIN_RUNNING: "running",
    libvirt.VIR_DOMAIN_BLOCKED: "blocked",
    libvirt.VIR_DOMAIN_PAUSED: "paused",
    libvirt.VIR_DOMAIN_SHUTDOWN: "shutting_down",
    libvirt.VIR_DOMAIN_SHUTOFF: "shutoff",
    libvirt.VIR_DOMAIN_CRASHED: "crashed",
    libvirt.VIR_DOMAIN_PMSUSPENDED: "suspended",
}


SAVE_FLAGS = libvirt.VIR_DOMAIN_SAVE_BYPASS_CACHE


def is_active_state(state: str) -> bool:
    """Whether a domain in this state has a running QEMU (paused and shutting down count)."""
    return state not in ("shutoff", "crashed")


class HypervisorError(RuntimeError):
    """libvirt refused or failed an operation; the message is libvirt's, prefixed with ours.
    Raised as itself only when libvirt finds fault with what the agent built (its XML): a bug.
    Every other failure is one of the subclasses below, chosen by libvirt's error code."""


class HypervisorUnavailable(HypervisorError, HostUnavailable):
    """libvirtd cannot be reached, or the connection was lost during the call."""


class HypervisorExhausted(HypervisorError, HostExhausted):
    """libvirt or QEMU ran out of memory or disk space."""


class HypervisorRefused(HypervisorError, HostRefused):
    """libvirt or QEMU refused: the domain or host is not in a state for it (a guest that cannot
    start, an operation invalid in the domain's state, a configuration this host cannot run)."""


class NoSuchDomain(HypervisorError):
    pass


# libvirt error codes (virErrorNumber) for a hypervisor that is away or too slow now
_UNAVAILABLE_CODES = frozenset({libvirt.VIR_ERR_NO_CONNECT, libvirt.VIR_ERR_INVALID_CONN, libvirt.VIR_ERR_RPC,
                                libvirt.VIR_ERR_OPERATION_TIMEOUT, libvirt.VIR_ERR_AGENT_UNRESPONSIVE,
                                libvirt.VIR_ERR_RESOURCE_BUSY})
# ... and for XML or a handle that libvirt cannot parse: the agent built it, so the agent is wrong
_BUG_CODES = frozenset({libvirt.VIR_ERR_XML_ERROR, libvirt.VIR_ERR_XML_DETAIL, libvirt.VIR_ERR_INVALID_DOMAIN})


def error_class(code: int, message: str, connection_lost: bool = False) -> type[HypervisorError]:
    """Which HypervisorError a libvirt error with this code (virErrorNumber) and message is."""
    if code == libvirt.VIR_ERR_NO_DOMAIN:
        return NoSuchDomain
    if connection_lost or code in _UNAVAILABLE_CODES:
        return HypervisorUnavailable
    if code == libvirt.VIR_ERR_NO_MEMORY or says_exhausted(message):
        return HypervisorExhausted
    if code in _BUG_CODES:
        return HypervisorError
    return HypervisorRefused


def connection_lost(exc: libvirt.libvirtError, conn: libvirt.virConnect) -> bool:
    """Whether a call's error means its connection to libvirtd broke (libvirtd restarted or went
    away: "End of file while reading data" is VIR_FROM_RPC), so the same call may succeed later."""
    if exc.get_error_domain() == libvirt.VIR_FROM_RPC:
        return True
    try:
        return not conn.isAlive()
    except libvirt.libvirtError:   # closed meanwhile
        return True


@dataclass(frozen=True)
class DomainRecord:
    name: str
    uuid: str
    state: str
    xml: str
    cpu_time_ns: int

    @property
    def active(self) -> bool:
        return is_active_state(self.state)


@dataclass(frozen=True)
class HostFacts:
    hostname: str
    cpus: int
    memory_mib: int
    libvirt_version: str
    qemu_version: str
    kvm_usable: bool


def _version_string(number: int) -> str:
    return f"{number // 1_000_000}.{number // 1000 % 1000}.{number % 1000}"


class Hypervisor:
    """A self-healing libvirt connection with the few operations the agent needs."""

    def __init__(self, uri: str) -> None:
        self.uri = uri
        self._conn: libvirt.virConnect | None = None
        self._connected_before = False
        self._lock = threading.Lock()
        self._on_change: Callable[[str | None], None] | None = None

    def watch(self, on_change: Callable[[str | None], None]) -> None:
        """Call on_change(name) when libvirt reports something that may change a domain's XML,
        and on_change(None) when events may have been missed (a new or lost connection)."""
        start_event_loop()
        with self._lock:
            self._on_change = on_change
            self._drop_locked()  # the next connection registers for events

    def _subscribe_locked(self, conn: libvirt.virConnect) -> None:
        notify = self._on_change
        if notify is None:
            return
        for event_id in WATCHED_EVENTS:
            conn.domainEventRegisterAny(None, event_id, lambda _c, dom, *_rest: notify(dom.name()), None)
        conn.registerCloseCallback(lambda _c, _reason, _opaque: notify(None), None)
        notify(None)  # whatever happened while we were not listening

    # -- connection -------------------------------------------------------------------------

    def _connection(self) -> libvirt.virConnect:
        with self._lock:
            if self._conn is None or not self._conn.isAlive():
                self._drop_locked()
                try:
                    self._conn = libvirt.open(self.uri)
                except libvirt.libvirtError as exc:
                    raise HypervisorUnavailable(f"cannot connect to libvirt at {self.uri}: "
                                                f"{exc.get_error_message()}") from None
                try:
                    self._subscribe_locked(self._conn)
                except libvirt.libvirtError as exc:
                    self._drop_locked()
                    raise HypervisorUnavailable(f"cannot subscribe to libvirt's domain events at {self.uri}: "
                                                f"{exc.get_error_message()}") from None
                if self._connected_before:
                    log_event(log, "libvirt.reconnected", uri=self.uri)
                self._connected_before = True
            return self._conn

    def _drop_locked(self) -> None:
        if self._conn is not None:
            try:
                if self._on_change is not None:
                    self._conn.unregisterCloseCallback()
            except libvirt.libvirtError:
                pass
            try:
                self._conn.close()
            except libvirt.libvirtError:
                pass
            self._conn = None

    def _connection_lost(self, exc: libvirt.libvirtError, conn: libvirt.virConnect) -> bool:
        """Judged on the connection the call used: another thread may have dropped it since (its
        reconnect failing while libvirtd restarts), which must not turn this error into a refusal."""
        lost = connection_lost(exc, conn)
        if lost:
            log_event(log, "libvirt.connection_lost", logging.WARNING, uri=self.uri,
                      error=exc.get_error_message())
        return lost

    def _call(self, what: str, fn: Callable[[libvirt.virConnect], T], retry: bool) -> T:
        """Run fn on the connection; on a lost connection reconnect, and retry if allowed."""
        for attempt in (1, 2):
            conn = self._connection()
            try:
                return fn(conn)
            except libvirt.libvirtError as exc:
                if exc.get_error_code() == libvirt.VIR_ERR_NO_DOMAIN:
                    raise NoSuchDomain(f"{what}: no such domain") from None
                lost = self._connection_lost(exc, conn)
                if lost and retry and attempt == 1:
                    continue
                message = exc.get_error_message() or str(exc)
                raise error_class(exc.get_error_code(), message, lost)(f"{what}: {message}") from None
        raise AssertionError("unreachable")

    def close(self) -> None:
        with self._lock:
            self._drop_locked()

    # -- host ---------------------------------------------------------------------------------

    def host_facts(self) -> HostFacts:
        def read(conn: libvirt.virConnect) -> HostFacts:
            info = conn.getInfo()  # [model, memory MiB, cpus, mhz, nodes, sockets, cores, threads]
            return HostFacts(hostname=conn.getHostname(), cpus=int(info[2]), memory_mib=int(info[1]),
                             libvirt_version=_version_string(conn.getLibVersion()),
                             qemu_version=_version_string(conn.getVersion()),
                             kvm_usable=self._kvm_usable(conn))
        return self._call("describe host", read, retry=True)

    @staticmethod
    def _kvm_usable(conn: libvirt.virConnect) -> bool:
        if not os.access("/dev/kvm", os.R_OK | os.W_OK):
            return False
        return "<domain type='kvm'" in conn.getCapabilities()

    # -- domains ------------------------------------------------------------------------------

    @staticmethod
    def _record(dom: libvirt.virDomain) -> DomainRecord:
        state, _reason = dom.state()
        return DomainRecord(name=dom.name(), uuid=dom.UUIDString(), state=STATE_NAMES.get(state, "unknown"),
                            xml=dom.XMLDesc(0), cpu_time_ns=int(dom.info()[4]))

    def list_domains(self, inactive_only: bool = False) -> list[DomainRecord]:
        flags = libvirt.VIR_CONNECT_LIST_DOMAINS_INACTIVE if inactive_only else 0

        def read(conn: libvirt.virConnect) -> list[DomainRecord]:
            records = []
            for dom in conn.listAllDomains(flags):
                try:
                    records.append(self._record(dom))
                except libvirt.libvirtError as exc:
                    if exc.get_error_code() != libvirt.VIR_ERR_NO_DOMAIN:
                        raise  # a domain that vanished while we listed is simply gone
            return records
        return self._call("list domains", read, retry=True)

    def active_domain_names(self) -> set[str]:
        """Names of the running domains: one cheap call, no XML."""
        return self._call("list running domain names",
                          lambda c: {d.name() for d in c.listAllDomains(libvirt.VIR_CONNECT_LIST_DOMAINS_ACTIVE)},
                          retry=True)

    def get_domain(self, name: str) -> DomainRecord | None:
        try:
            return self._call(f"look up {name}", lambda c: self._record(c.lookupByName(name)), retry=True)
        except NoSuchDomain:
            return None

    def state(self, name: str) -> str:
        def read(conn: libvirt.virConnect) -> str:
            return STATE_NAMES.get(conn.lookupByName(name).state()[0], "unknown")
        return self._call(f"state of {name}", read, retry=True)

    def define(self, xml: str) -> None:
        self._call("define domain", lambda c: c.defineXML(xml), retry=False)

    def start(self, name: str) -> None:
        self._call(f"start {name}", lambda c: c.lookupByName(name).create(), retry=False)

    def resume(self, name: str) -> None:
        self._call(f"resume {name}", lambda c: c.lookupByName(name).resume(), retry=False)

    def shutdown_acpi(self, name: str) -> None:
        """Press the guest's ACPI power button; the guest decides what to do with it."""
        self._call(f"ACPI shutdown of {name}",
                   lambda c: c.lookupByName(name).shutdownFlags(libvirt.VIR_DOMAIN_SHUTDOWN_ACPI_POWER_BTN),
                   retry=True)

    def destroy(self, name: str) -> None:
        """Stop the domain at once. A domain that is already stopped is left as it is."""
        def stop(conn: libvirt.virConnect) -> None:
            dom = conn.lookupByName(name)
            if dom.isActive():
                try:
                    dom.destroy()
                except libvirt.libvirtError as exc:
                    if exc.get_error_code() != libvirt.VIR_ERR_OPERATION_INVALID:  # it stopped meanwhile
                        raise
        self._call(f"destroy {name}", stop, retry=True)

    def undefine(self, name: str) -> None:
        self._call(f"undefine {name}", lambda c: c.lookupByName(name).undefine(), retry=True)

    def set_metadata(self, name: str, element_xml: str, prefix: str, namespace: str) -> None:
        """Replace our metadata element, in the running domain and its persistent config."""
        def update(conn: libvirt.virConnect) -> None:
            dom = conn.lookupByName(name)
            flags = libvirt.VIR_DOMAIN_AFFECT_CONFIG
            if dom.isActive():
                flags |= libvirt.VIR_DOMAIN_AFFECT_LIVE
            dom.setMetadata(libvirt.VIR_DOMAIN_METADATA_ELEMENT, element_xml, prefix, namespace, flags)
        self._call(f"update metadata of {name}", update, retry=True)

    def set_disk_priority(self, name: str, disk: str, weight: int, total_bytes_sec: int, total_iops_sec: int) -> None:
        """Block-I/O weight and caps of a running domain, live and in its persistent config."""
        def update(conn: libvirt.virConnect) -> None:
            dom = conn.lookupByName(name)
            caps = {"total_bytes_sec": total_bytes_sec, "total_iops_sec": total_iops_sec}
            # One at a time: libvirt refuses LIVE|CONFIG together for some of these calls.
            for flags in (libvirt.VIR_DOMAIN_AFFECT_LIVE, libvirt.VIR_DOMAIN_AFFECT_CONFIG):
                dom.setBlkioParameters({"weight": weight}, flags)
                dom.setBlockIoTune(disk, caps, flags)
        self._call(f"set disk priority of {name}", update, retry=True)

    # -- hibernation --------------------------------------------------------------------------
    # SAVE_FLAGS: libvirt_iohelper writes (and reads) the state file with O_DIRECT, in its own
    # context, which the agent puts at idle priority (host/procprio.py); without it the kernel's
    # writeback threads flush the file's dirty pages at normal priority, and the file evicts the
    # foreground VMs' page cache.

    def save(self, name: str, path: str, bypass_cache: bool = True) -> None:
        """Save a running domain's memory and device state to `path` (virDomainSaveFlags); the
        domain stops and stays defined. libvirtd runs the save as its own job: it goes on even if
        this process dies, and on failure libvirt removes the partial file and the domain runs on.
        No retry: a second save of a domain already saved would fail on its state."""
        flags = SAVE_FLAGS if bypass_cache else 0
        self._call(f"save {name} to {path}", lambda c: c.lookupByName(name).saveFlags(path, None, flags), retry=False)

    def save_image_xml(self, path: str) -> str:
        """The domain XML inside a complete save image; libvirt refuses an incomplete one."""
        return self._call(f"read the save image {path}", lambda c: c.saveImageGetXMLDesc(path, 0), retry=True)

    def restore_paused(self, path: str, xml: str, bypass_cache: bool = True) -> None:
        """Restore a domain from `path` with `xml` (the image's own, adjusted) and leave it paused:
        nothing of it runs until resume()."""
        self._call(f"restore from {path}",
                   lambda c: c.restoreFlags(path, xml, (SAVE_FLAGS if bypass_cache else 0) | libvirt.VIR_DOMAIN_SAVE_PAUSED),
                   retry=False)

    def inactive_xml(self, name: str) -> str:
        """The domain's persistent definition (what it is defined as, not what runs)."""
        return self._call(f"read the definition of {name}",
                          lambda c: c.lookupByName(name).XMLDesc(libvirt.VIR_DOMAIN_XML_INACTIVE), retry=True)

    def job_running(self, name: str) -> bool:
        """Whether libvirtd may still be saving or restoring the domain: paused by a save (libvirt
        pauses it for the whole save, and lets it run again only if the save fails), or a job
        under way by its job statistics (which read "none" for a moment as a save ends)."""
        def read(conn: libvirt.virConnect) -> bool:
            dom = conn.lookupByName(name)
            state, reason = dom.state()
            if state == libvirt.VIR_DOMAIN_PAUSED and reason == libvirt.VIR_DOMAIN_PAUSED_SAVE:
                return True
            stats = dom.jobStats(0)
            return stats.get("type", libvirt.VIR_DOMAIN_JOB_NONE) in (libvirt.VIR_DOMAIN_JOB_BOUNDED,
                                                                       libvirt.VIR_DOMAIN_JOB_UNBOUNDED)
        return self._call(f"job of {name}", read, retry=True)

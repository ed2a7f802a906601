"""Plain records and the vocabulary of the books: sizes, roles and policies, leases and requests,
the effects the books return (Write, Launch, Stop) and the settings they run under.

No numpy, no I/O: gleanctl, the store, the service, the simulator and the pure decisions all
read these. A Write is one transaction, always applied before the calls it authorises.

Lease states, what each holds on its node, and how it ends (every waiting state has a deadline):

    state        meaning                                          holds          deadline -> then
    waiting      on-demand, waits for its victims' memory         vCPUs, memory  victims' + margin -> failed
    starting     the agent was asked to launch it                 vCPUs, memory  launch timeout -> stopped, failed
    running      the agent runs it                                vCPUs, memory  -
    cancelling   released while starting: stopped once launched   vCPUs, memory  launch + stop -> failed
    stopping     released, recycled or abandoned: stop asked      vCPUs, memory  grace + stop -> failed
    discarding   a hibernated VM given up: its saved state deleted nothing         stop -> failed
    on_notice    a victim beside the VM that took its vCPUs       memory         notice + stop -> failed
    preempting   a victim whose room a waiting lease holds        nothing        grace + stop -> failed
    lost         its node is down or stopped reporting it         vCPUs, memory  a day -> ended (or running, ended)
    hibernated   a victim saved to disk (interruption=hibernate)  nothing        wait limit -> discarded, ended
    resuming     a hibernated VM asked to restore and run         vCPUs, memory  launch timeout -> discarded, failed
    ended/failed terminal                                         nothing

A victim under interruption = "hibernate" goes on_notice or preempting as any victim, with ending
"hibernated": the stop asked of its agent saves the VM's state instead of shutting it down, and
a confirmed save makes the lease hibernated (kept, holding nothing) rather than ended. The
launcher resumes hibernated VMs on their node before it launches new ones; one that waits past
the limit is discarded (stopped, its state deleted), and only then is its work lost.

Request outcomes: pending -> placed | rejected | failed, or cancelled while queued for room.
"""
from __future__ import annotations

import dataclasses
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING, Any, Protocol

from gleaner_common import vocabulary

if TYPE_CHECKING:
    from .reserve_settings import Hint

def plain_init(cls: type) -> type:
    """A frozen dataclass's __init__ that stores the fields straight into the instance's __dict__.
    The __init__ dataclasses generates sets each field through object.__setattr__ (to get past
    the frozen __setattr__), about twice as slow, and the books make several records per event
    (Size, Write, Audit...). For records of plain fields: defaults and default factories, no
    __post_init__, InitVar, keyword-only field, slots or hand-written __init__. Apply it above
    @dataclass(frozen=True)."""
    fields = dataclasses.fields(cls)
    generated = getattr(cls.__init__, "__code__", None) is not None and cls.__init__.__code__.co_filename == "<string>"
    if hasattr(cls, "__post_init__") or any(not f.init or f.kw_only for f in fields) or \
            len(fields) != len(cls.__dataclass_fields__) or not cls.__dataclass_params__.init or \
            "__slots__" in cls.__dict__ or not generated or \
            any(f.name in ("self", "values", "MISSING") or f.name.startswith(("_default_", "_factory_"))
                for f in fields):   # names the generated code uses itself
        raise TypeError(f"{cls.__name__}: plain_init takes plain fields only")
    namespace: dict[str, Any] = {"MISSING": dataclasses.MISSING}
    params, stores = [], []
    for f in fields:
        if f.default is not dataclasses.MISSING:
            namespace[f"_default_{f.name}"] = f.default
            params.append(f"{f.name}=_default_{f.name}")
            stores.append(f"    values[{f.name!r}] = {f.name}")
        elif f.default_factory is not dataclasses.MISSING:
            namespace[f"_factory_{f.name}"] = f.default_factory
            params.append(f"{f.name}=MISSING")
            stores.append(f"    values[{f.name!r}] = _factory_{f.name}() if {f.name} is MISSING else {f.name}")
        else:
            params.append(f.name)
            stores.append(f"    values[{f.name!r}] = {f.name}")
    source = f"def __init__(self, {', '.join(params)}):\n    values = self.__dict__\n" + "\n".join(stores) + "\n"
    exec(source, namespace)   # as dataclasses itself makes __init__
    init = namespace["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    cls.__init__ = init
    return cls


VmRole = vocabulary.VmRole   # the role (gleaner_common.vocabulary), beside the records that carry it


class Policy(str, Enum):
    MOST_RECENT = "most_recent"   # youngest backfill VMs first: they have the least work to lose
    ANY = "any"                   # random order
    LEAST_LOSS = "least_loss"     # fewest victims, then the least work lost (runtime x vCPUs)
    IDLE_FIRST = "idle_first"     # idle backfill VMs first (guest's word or CPU figures), then the shortest busy




@plain_init
@dataclass(frozen=True)
class Size:
    vcpus: int
    memory_mib: int

    def __add__(self, other: Size) -> Size:
        return Size(self.vcpus + other.vcpus, self.memory_mib + other.memory_mib)

    def __sub__(self, other: Size) -> Size:
        return Size(self.vcpus - other.vcpus, self.memory_mib - other.memory_mib)

    def fits_in(self, room: Size) -> bool:
        return self.vcpus <= room.vcpus and self.memory_mib <= room.memory_mib


ZERO = Size(0, 0)


_FIELD_NAMES: dict[type, frozenset[str]] = {}


def replace(record: Any, **changes: Any) -> Any:
    """dataclasses.replace for frozen records of plain fields (no __post_init__, every field in
    __init__), such as NodeView and the ledger's Lease: a copy of the record's fields with these
    changed, in a fraction of its time (the books replace one at every change)."""
    cls = type(record)
    names = _FIELD_NAMES.get(cls)
    if names is None:
        names = _FIELD_NAMES[cls] = frozenset(f.name for f in dataclasses.fields(cls))
    if not names.issuperset(changes):
        raise TypeError(f"{cls.__name__} has no field {sorted(set(changes) - names)}")
    copy = object.__new__(cls)
    values = copy.__dict__
    values.update(record.__dict__)
    values.update(changes)
    return copy



@dataclass(frozen=True)
class BackfillConfig:
    enabled: bool = False
    max_instances: int = 0            # 0: as many as fit
    image: str = "tiny"
    memory_mb: int = 128              # the tiny guest boots in 96 MiB; 128 leaves it room
    vcpus: int = 1
    duration_seconds: int = 604800
    termination_policy: Policy = Policy.MOST_RECENT
    retry_seconds: int = 300
    grace_seconds: int = 10
    # What a victim's preemption does to it: "hibernate" (saved to its node's disk, resumed there when
    # room returns, discarded after hibernate_wait_seconds) or "terminate" (shut down, its work lost).
    # Hibernate is the default: on the bench's month it lost 0.32 % of job time (0.27 % to preemption,
    # the rest cut by the recycle at duration_seconds: the guests retire, gleaner.retire_after)
    # where terminate lost 13.2 % (docs/controller.md, Hibernation). The wait limit: 7 days, as long as a
    # backfill VM may live (duration_seconds), and the validity AWS gives a persistent spot request by
    # default. Saved VMs wait on nodes that on-demand VMs keep full: on the month, 3 days discarded
    # 8,104 of 439,758 saved VMs (0.54 % of job time lost), 7 days 3,238 (0.26 %); a saved 128 MiB
    # guest costs about 90 MiB of disk.
    interruption: str = "hibernate"
    hibernate_wait_seconds: int = 604800

    @property
    def hibernates(self) -> bool:
        return self.interruption == HIBERNATE

    @property
    def size(self) -> Size:
        return Size(self.vcpus, self.memory_mb)

    def as_dict(self) -> dict:
        """Plain values (the policy by name), for JSON, the store and protobuf."""
        return {**dataclasses.asdict(self), "termination_policy": self.termination_policy.value}

    @classmethod
    def from_dict(cls, values: dict) -> BackfillConfig:
        return cls(**{**values, "termination_policy": Policy(values["termination_policy"])})



INTERRUPTIONS = ("terminate", "hibernate")
HIBERNATE = "hibernate"


# -- lease states ------------------------------------------------------------------------------

HIBERNATED = "hibernated"   # a victim's VM saved to its node's disk: kept, holding nothing
# a failed stop's outcome: the agent refused it (a save it would not make), or it is unknown (the
# agent was unreachable or died mid-call: it may have done it, so the call is asked again)
REFUSED, UNREACHABLE = "refused", "unreachable"
RESUMING = "resuming"       # a hibernated VM asked to restore
DISCARDING = "discarding"   # a hibernated VM's stop (its saved state deleted): it holds nothing
HOLDS_ALL = frozenset({"waiting", "starting", "running", "cancelling", "stopping", "lost", RESUMING})
HOLDS_MEMORY = frozenset({"on_notice"})
VICTIM = frozenset({"preempting", "on_notice"})
# A backfill VM in one of these states holds room placement cannot take by preemption yet (it is
# starting, or already stopping): the room comes free, or preemptible, by the lease's deadline.
IN_TRANSIT = frozenset({"starting", "cancelling", "stopping", "on_notice", RESUMING})
# A report need not show their VM (not launched yet, or saved: a hibernated VM runs nowhere; a
# lost state file shows when it is resumed)
NOT_YET_LAUNCHED = frozenset({"starting", "waiting", HIBERNATED, RESUMING})
REACTS = frozenset({"lost", "cancelling"})   # a report showing the VM of such a lease recovers it, or stops it
STOPS = frozenset({"cancelling", "stopping", DISCARDING}) | VICTIM   # a stop is (or will be) asked of the agent
TERMINAL = frozenset({"ended", "failed"})
LIVE = HOLDS_ALL | HOLDS_MEMORY
STOP_UNCONFIRMED = "the stop was not confirmed in time"   # how a stop that expired ends its lease
DRAINED = "reserved: "   # the end reason of a backfill VM stopped to keep its node free for a reserve
DISCARDED = "discarded: "   # ... of a hibernated VM given up (waited too long, or its resume failed)
# Audit events after which the backfill launcher runs at once (room was freed or a node came),
# rather than at its next retry: the live controller and the simulator both read this.
FILL_EVENTS = frozenset({"node.joined", "node.rejoined", "node.up", "vm.stopped", "vm.preempted", "vm.released",
                         "vm.recycled", "vm.gone", "vm.launch_failed", "request.expired", "vm.stop_expired",
                         "vm.drained", "vm.hibernated", "vm.discarded"})


# -- records ---------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Lease:
    lease_id: str
    role: str                  # on_demand | backfill
    node_id: str
    vm_name: str
    vcpus: int
    memory_mib: int
    image: str
    owner: str
    state: str
    created_at: float
    launched_at: float | None = None
    ended_at: float | None = None
    end_reason: str = ""
    deadline: float | None = None   # when the state it is in gives up
    request_id: str = ""            # on-demand: its request; a victim: the request it makes way for
    ending: str = "ended"           # the terminal state a stop leads to (failed for an abandoned launch;
                                    # hibernated: the stop is a save, and the lease is kept)
    slept_seconds: float = 0.0      # time spent hibernated before its current run (not work)
    hibernated_at: float | None = None   # when its current hibernation began (None: not hibernated)

    @property
    def size(self) -> Size:
        return Size(self.vcpus, self.memory_mib)

    @property
    def held(self) -> Size:
        """What the lease holds on its node now."""
        if self.state in HOLDS_ALL:
            return self.size
        if self.state in HOLDS_MEMORY:
            return Size(0, self.memory_mib)
        return ZERO


BLANK_LEASE = Lease("", "", "", "", 0, 0, "", "", "", 0.0)   # every other field at its default


@plain_init
@dataclass(frozen=True)
class RequestRecord:
    request_id: str
    vcpus: int
    memory_mib: int
    image: str
    owner: str
    outcome: str                 # pending | placed | rejected | failed | cancelled
    lease_id: str | None
    node_id: str
    victims: tuple[str, ...]
    reason: str
    created_at: float
    decided_ms: float
    path: str = ""               # free | instant | after_victims | queued (waits for room) ("" when rejected)
    wait_until: float | None = None  # queued: when its wait for room ends (rejected then, if still no room)


@dataclass(frozen=True)
class Reserve:
    node_id: str                 # '*' for every node
    vcpus: int = 0
    memory_mib: int = 0
    whole_node: bool = False


NO_RESERVE = Reserve("")   # a node without a reserve: nothing kept from backfill


# Tenants (PhoenixCloud): every VM belongs to one. The two made with the store cover an existing
# pool: DEFAULT takes every on-demand owner no tenant is named after, BACKFILL owns the pool-wide
# backfill settings. Neither may be deleted; their bounds may be set.
TENANT_KINDS = ("on_demand", "batch")
DEFAULT_TENANT = "default"
BACKFILL_TENANT = "backfill"
BUILT_IN_TENANTS = (DEFAULT_TENANT, BACKFILL_TENANT)


@dataclass(frozen=True)
class TenantRecord:
    """A tenant as stored. An upper bound of 0 vCPUs and 0 MiB is "unbounded": the tenant may use
    the whole pool, and the admission's sum of upper bounds leaves it out (it takes what the other
    tenants' upper bounds leave). Only the built-in tenants may have it."""
    name: str
    kind: str                         # on_demand | batch
    lower_vcpus: int = 0
    lower_memory_mib: int = 0
    upper_vcpus: int = 0
    upper_memory_mib: int = 0
    created_at: float = 0.0
    backfill: str | None = None       # batch: its backfill settings as JSON (None: the pool-wide ones)
    goal: str | None = None           # batch: its goal as JSON (None: no goal)

    @property
    def lower(self) -> Size:
        return Size(self.lower_vcpus, self.lower_memory_mib)

    @property
    def upper(self) -> Size:
        return Size(self.upper_vcpus, self.upper_memory_mib)

    @property
    def unbounded(self) -> bool:
        return self.upper == ZERO


@plain_init
@dataclass(frozen=True)
class Audit:
    kind: str
    node_id: str = ""
    lease_id: str = ""
    detail: Mapping[str, Any] = field(default_factory=dict)


# -- effects ---------------------------------------------------------------------------------------

@plain_init
@dataclass(frozen=True)
class Write:
    """One transaction, applied before any effect that follows it."""
    created: tuple[Lease, ...] = ()    # new leases: a plain insert (a clash is refused, never a replacement)
    updated: tuple[Lease, ...] = ()
    requests: tuple[RequestRecord, ...] = ()
    events: tuple[Audit, ...] = ()
    hints: tuple[Hint, ...] | None = None   # the reserves' hints now, replacing the stored ones (None: unchanged)
    reserved: tuple[str, ...] | None = None  # the nodes kept free of backfill now (None: unchanged)
    goals_done: tuple[str, ...] | None = None  # the tenants whose goal's job is done now (None: unchanged)

    def __bool__(self) -> bool:
        return bool(self.created or self.updated or self.requests or self.events or self.hints is not None
                    or self.reserved is not None or self.goals_done is not None)


@plain_init
@dataclass(frozen=True)
class Launch:
    lease: Lease


@plain_init
@dataclass(frozen=True)
class Stop:
    lease: Lease
    grace_seconds: int
    force: bool = False
    # Ask only once the Launch of the same batch has been answered. The instant path's victims:
    # libvirt (9.0, QEMU) holds up defining a domain while another one's ACPI shutdown is under
    # way, which made the on-demand VM wait the victim's whole shutdown. Measured: 1.3-2.5 s.
    after_launch: bool = False

    @property
    def hibernate(self) -> bool:
        """The stop saves a victim's state (its lease is kept) rather than shutting it down."""
        return self.lease.ending == HIBERNATED and self.lease.state in VICTIM


@plain_init
@dataclass(frozen=True)
class Resume:
    """Restore a hibernated VM on its node (paused, its volunteer settings applied, then run)."""
    lease: Lease


Effect = Write | Launch | Stop | Resume


# -- inputs ----------------------------------------------------------------------------------------

class ReportedVmLike(Protocol):
    name: str
    lease_id: str
    role: str
    vcpus: int
    memory_mib: int
    launched_at: float
    cpu_cores: float
    cpu_sampled: bool   # cpu_cores was measured (an agent has no figure for a VM it has not sampled yet)
    image: str
    # What a backfill guest last said of its whole VM's work on its virtio-serial port: "" (nothing
    # yet, or an older agent), "idle" or "busy" (a job started while none ran: the next one at once
    # is a new "busy" too); work_for_s: seconds since it said so, timed by the agent
    work_state: str
    work_for_s: float
    # an agent that hibernates lists its saved VMs too, with hibernated true (optional: older
    # agents and the simulator's reports have no such attribute; read with getattr)


class ReportLike(Protocol):
    """An agent's report (the protobuf NodeReport has these attributes)."""
    node_id: str
    agent_address: str
    cpus: int
    memory_mib: int
    foreground_cpu_cores: float
    images: Sequence[str]
    min_memory_mib: int
    agent_version: str
    vms: Sequence[ReportedVmLike]


@plain_init
@dataclass(frozen=True)
class Ask:
    """An on-demand request, already checked field by field."""
    vcpus: int
    memory_mib: int
    image: str
    owner: str
    request_id: str


@dataclass(frozen=True)
class LedgerSettings:
    vm_name_prefix: str = "gleaner-"
    suspect_after: float = 6.0       # seconds without a report: suspect (nothing new placed there)
    down_after: float = 20.0         # ... down: its running VMs are lost
    lost_after: float = 10.0         # a running VM absent from its node's reports this long after launch is lost
    lost_expiry: float = 86400.0     # a lost VM never seen again ends after this long
    retire_seconds: float = 60.0     # reports may still show a VM this long after its lease ended
    launch_timeout: float = 60.0     # from the launch call to the agent's answer
    stop_timeout: float = 60.0       # beyond the grace or notice period
    retry_seconds: float = 5.0       # between tries of a stop that failed
    notice_seconds: int = 30         # a victim's notice period on the instant path
    headroom_mib: int = 256          # node memory the instant path leaves free
    prediction_window: int = 30
    swap_threshold_cores: float = 0.5
    churn_burst: int = 3
    use_prediction: bool = True
    adoptions_per_report: int = 32   # a report naming more unknown VMs adopts this many; the rest wait
    adoptions_per_hour: int = 256    # ... and a node adopts at most this many an hour (burst: as many)


def stable_seed(text: str) -> int:
    """A seed that is the same in every process (str hash() is not)."""
    return zlib.crc32(text.encode()) & 0xFFFF


class LeaseError(ValueError):
    """A call the books refuse: the lease is unknown, or in a state that forbids it."""

    def __init__(self, field: str, message: str, not_found: bool = False) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.not_found = not_found


STOP_EVENTS = (("released", "vm.released"), ("recycled", "vm.recycled"), (DRAINED, "vm.drained"),
               (DISCARDED, "vm.discarded"))


def stop_event(lease: Lease) -> str:
    """The audit event of a confirmed stop, by why it was stopped."""
    if lease.state in VICTIM:
        return "vm.preempted"
    return next((kind for prefix, kind in STOP_EVENTS if lease.end_reason.startswith(prefix)), "vm.stopped")


GOAL_REQUEST_PREFIX = "goal-"   # the request ids of goal sizing's dedicated VMs begin so (goal_sizing)


def is_dedicated(lease: Lease) -> bool:
    """A goal-driven tenant's dedicated VM: on-demand, asked for and released by its goal's sizing."""
    return lease.role == "on_demand" and lease.request_id.startswith(GOAL_REQUEST_PREFIX)


def says_progress(lease: Lease) -> bool:
    """Whether the guest of `lease`'s VM may say its batch tenant's progress: a backfill VM, or a
    goal's dedicated VM (it runs the same job); no other on-demand VM steers anything."""
    return lease.role == "backfill" or is_dedicated(lease)


def is_on_demand_vm(lease: Lease) -> bool:
    """An on-demand VM a tenant asked for (not a goal's dedicated VM, whose end the books choose)."""
    return lease.role == "on_demand" and not lease.request_id.startswith(GOAL_REQUEST_PREFIX)


def reacts(lease: Lease) -> bool:
    """Whether a report showing the lease's VM acts on it: recovers it (lost), stops it
    (cancelling), or confirms its save (a victim being hibernated, whose answer may be lost)."""
    return lease.state in REACTS or (lease.ending == HIBERNATED and lease.state in VICTIM)


def launch_time(lease: Lease) -> float:
    """When its VM was launched (when the lease was made, if it has not been yet)."""
    return lease.launched_at or lease.created_at


def run_time(lease: Lease, now: float) -> float:
    """Seconds its VM has run since its launch, without the time it spent hibernated (a hibernated
    VM's run time stands still from its save, as its guest's clock does)."""
    until = lease.hibernated_at if lease.hibernated_at is not None else now
    return max(until - launch_time(lease) - lease.slept_seconds, 0.0)


def work(lease: Lease, now: float) -> float:
    """Work a stop loses: run time x vCPUs, in vCPU-seconds (run_time)."""
    return run_time(lease, now) * lease.vcpus

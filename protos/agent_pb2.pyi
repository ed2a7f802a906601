import datetime

from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Role(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ROLE_UNSPECIFIED: _ClassVar[Role]
    ROLE_ON_DEMAND: _ClassVar[Role]
    ROLE_BACKFILL: _ClassVar[Role]

class PriorityClass(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    PRIORITY_CLASS_UNSPECIFIED: _ClassVar[PriorityClass]
    PRIORITY_CLASS_FOREGROUND: _ClassVar[PriorityClass]
    PRIORITY_CLASS_VOLUNTEER: _ClassVar[PriorityClass]

class DomainState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    DOMAIN_STATE_UNSPECIFIED: _ClassVar[DomainState]
    DOMAIN_STATE_RUNNING: _ClassVar[DomainState]
    DOMAIN_STATE_BLOCKED: _ClassVar[DomainState]
    DOMAIN_STATE_PAUSED: _ClassVar[DomainState]
    DOMAIN_STATE_SHUTTING_DOWN: _ClassVar[DomainState]
    DOMAIN_STATE_SHUTOFF: _ClassVar[DomainState]
    DOMAIN_STATE_CRASHED: _ClassVar[DomainState]
    DOMAIN_STATE_SUSPENDED: _ClassVar[DomainState]
    DOMAIN_STATE_HIBERNATED: _ClassVar[DomainState]

class TerminationOutcome(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TERMINATION_OUTCOME_UNSPECIFIED: _ClassVar[TerminationOutcome]
    TERMINATION_OUTCOME_CLEAN_SHUTDOWN: _ClassVar[TerminationOutcome]
    TERMINATION_OUTCOME_DESTROYED_AFTER_GRACE: _ClassVar[TerminationOutcome]
    TERMINATION_OUTCOME_DESTROYED_FORCED: _ClassVar[TerminationOutcome]
    TERMINATION_OUTCOME_ALREADY_STOPPED: _ClassVar[TerminationOutcome]
ROLE_UNSPECIFIED: Role
ROLE_ON_DEMAND: Role
ROLE_BACKFILL: Role
PRIORITY_CLASS_UNSPECIFIED: PriorityClass
PRIORITY_CLASS_FOREGROUND: PriorityClass
PRIORITY_CLASS_VOLUNTEER: PriorityClass
DOMAIN_STATE_UNSPECIFIED: DomainState
DOMAIN_STATE_RUNNING: DomainState
DOMAIN_STATE_BLOCKED: DomainState
DOMAIN_STATE_PAUSED: DomainState
DOMAIN_STATE_SHUTTING_DOWN: DomainState
DOMAIN_STATE_SHUTOFF: DomainState
DOMAIN_STATE_CRASHED: DomainState
DOMAIN_STATE_SUSPENDED: DomainState
DOMAIN_STATE_HIBERNATED: DomainState
TERMINATION_OUTCOME_UNSPECIFIED: TerminationOutcome
TERMINATION_OUTCOME_CLEAN_SHUTDOWN: TerminationOutcome
TERMINATION_OUTCOME_DESTROYED_AFTER_GRACE: TerminationOutcome
TERMINATION_OUTCOME_DESTROYED_FORCED: TerminationOutcome
TERMINATION_OUTCOME_ALREADY_STOPPED: TerminationOutcome

class DescribeHostRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class HostDescription(_message.Message):
    __slots__ = ("hostname", "cpus", "memory_mib", "libvirt_version", "qemu_version", "cgroup_version", "cpu_idle_supported", "domain_type", "libvirt_uri", "agent_version", "managed_domains", "disk_scheduler", "volunteer_disk_mechanism", "hibernation_budget_bytes", "hibernation_used_bytes", "hibernation_room_bytes")
    HOSTNAME_FIELD_NUMBER: _ClassVar[int]
    CPUS_FIELD_NUMBER: _ClassVar[int]
    MEMORY_MIB_FIELD_NUMBER: _ClassVar[int]
    LIBVIRT_VERSION_FIELD_NUMBER: _ClassVar[int]
    QEMU_VERSION_FIELD_NUMBER: _ClassVar[int]
    CGROUP_VERSION_FIELD_NUMBER: _ClassVar[int]
    CPU_IDLE_SUPPORTED_FIELD_NUMBER: _ClassVar[int]
    DOMAIN_TYPE_FIELD_NUMBER: _ClassVar[int]
    LIBVIRT_URI_FIELD_NUMBER: _ClassVar[int]
    AGENT_VERSION_FIELD_NUMBER: _ClassVar[int]
    MANAGED_DOMAINS_FIELD_NUMBER: _ClassVar[int]
    DISK_SCHEDULER_FIELD_NUMBER: _ClassVar[int]
    VOLUNTEER_DISK_MECHANISM_FIELD_NUMBER: _ClassVar[int]
    HIBERNATION_BUDGET_BYTES_FIELD_NUMBER: _ClassVar[int]
    HIBERNATION_USED_BYTES_FIELD_NUMBER: _ClassVar[int]
    HIBERNATION_ROOM_BYTES_FIELD_NUMBER: _ClassVar[int]
    hostname: str
    cpus: int
    memory_mib: int
    libvirt_version: str
    qemu_version: str
    cgroup_version: int
    cpu_idle_supported: bool
    domain_type: str
    libvirt_uri: str
    agent_version: str
    managed_domains: int
    disk_scheduler: str
    volunteer_disk_mechanism: str
    hibernation_budget_bytes: int
    hibernation_used_bytes: int
    hibernation_room_bytes: int
    def __init__(self, hostname: _Optional[str] = ..., cpus: _Optional[int] = ..., memory_mib: _Optional[int] = ..., libvirt_version: _Optional[str] = ..., qemu_version: _Optional[str] = ..., cgroup_version: _Optional[int] = ..., cpu_idle_supported: _Optional[bool] = ..., domain_type: _Optional[str] = ..., libvirt_uri: _Optional[str] = ..., agent_version: _Optional[str] = ..., managed_domains: _Optional[int] = ..., disk_scheduler: _Optional[str] = ..., volunteer_disk_mechanism: _Optional[str] = ..., hibernation_budget_bytes: _Optional[int] = ..., hibernation_used_bytes: _Optional[int] = ..., hibernation_room_bytes: _Optional[int] = ...) -> None: ...

class Domain(_message.Message):
    __slots__ = ("name", "uuid", "role", "state", "vcpus", "memory_mib", "launched_at", "lease_id", "cpu_time_ns", "image", "kernel_cmdline", "console_log", "cpuset", "priority_class", "boosted", "work_state", "work_for_s", "hibernated_bytes", "hibernated_at", "slept_s", "retire_after_seconds", "progress_done", "progress_total", "progress_for_s")
    NAME_FIELD_NUMBER: _ClassVar[int]
    UUID_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    VCPUS_FIELD_NUMBER: _ClassVar[int]
    MEMORY_MIB_FIELD_NUMBER: _ClassVar[int]
    LAUNCHED_AT_FIELD_NUMBER: _ClassVar[int]
    LEASE_ID_FIELD_NUMBER: _ClassVar[int]
    CPU_TIME_NS_FIELD_NUMBER: _ClassVar[int]
    IMAGE_FIELD_NUMBER: _ClassVar[int]
    KERNEL_CMDLINE_FIELD_NUMBER: _ClassVar[int]
    CONSOLE_LOG_FIELD_NUMBER: _ClassVar[int]
    CPUSET_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_CLASS_FIELD_NUMBER: _ClassVar[int]
    BOOSTED_FIELD_NUMBER: _ClassVar[int]
    WORK_STATE_FIELD_NUMBER: _ClassVar[int]
    WORK_FOR_S_FIELD_NUMBER: _ClassVar[int]
    HIBERNATED_BYTES_FIELD_NUMBER: _ClassVar[int]
    HIBERNATED_AT_FIELD_NUMBER: _ClassVar[int]
    SLEPT_S_FIELD_NUMBER: _ClassVar[int]
    RETIRE_AFTER_SECONDS_FIELD_NUMBER: _ClassVar[int]
    PROGRESS_DONE_FIELD_NUMBER: _ClassVar[int]
    PROGRESS_TOTAL_FIELD_NUMBER: _ClassVar[int]
    PROGRESS_FOR_S_FIELD_NUMBER: _ClassVar[int]
    name: str
    uuid: str
    role: Role
    state: DomainState
    vcpus: int
    memory_mib: int
    launched_at: _timestamp_pb2.Timestamp
    lease_id: str
    cpu_time_ns: int
    image: str
    kernel_cmdline: str
    console_log: str
    cpuset: str
    priority_class: PriorityClass
    boosted: bool
    work_state: str
    work_for_s: float
    hibernated_bytes: int
    hibernated_at: _timestamp_pb2.Timestamp
    slept_s: float
    retire_after_seconds: int
    progress_done: int
    progress_total: int
    progress_for_s: float
    def __init__(self, name: _Optional[str] = ..., uuid: _Optional[str] = ..., role: _Optional[_Union[Role, str]] = ..., state: _Optional[_Union[DomainState, str]] = ..., vcpus: _Optional[int] = ..., memory_mib: _Optional[int] = ..., launched_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., lease_id: _Optional[str] = ..., cpu_time_ns: _Optional[int] = ..., image: _Optional[str] = ..., kernel_cmdline: _Optional[str] = ..., console_log: _Optional[str] = ..., cpuset: _Optional[str] = ..., priority_class: _Optional[_Union[PriorityClass, str]] = ..., boosted: _Optional[bool] = ..., work_state: _Optional[str] = ..., work_for_s: _Optional[float] = ..., hibernated_bytes: _Optional[int] = ..., hibernated_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., slept_s: _Optional[float] = ..., retire_after_seconds: _Optional[int] = ..., progress_done: _Optional[int] = ..., progress_total: _Optional[int] = ..., progress_for_s: _Optional[float] = ...) -> None: ...

class ListDomainsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListDomainsResponse(_message.Message):
    __slots__ = ("domains",)
    DOMAINS_FIELD_NUMBER: _ClassVar[int]
    domains: _containers.RepeatedCompositeFieldContainer[Domain]
    def __init__(self, domains: _Optional[_Iterable[_Union[Domain, _Mapping]]] = ...) -> None: ...

class LaunchDomainRequest(_message.Message):
    __slots__ = ("name", "role", "vcpus", "memory_mib", "image", "kernel_cmdline", "lease_id", "cpuset", "retire_after_seconds", "work_channel")
    NAME_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    VCPUS_FIELD_NUMBER: _ClassVar[int]
    MEMORY_MIB_FIELD_NUMBER: _ClassVar[int]
    IMAGE_FIELD_NUMBER: _ClassVar[int]
    KERNEL_CMDLINE_FIELD_NUMBER: _ClassVar[int]
    LEASE_ID_FIELD_NUMBER: _ClassVar[int]
    CPUSET_FIELD_NUMBER: _ClassVar[int]
    RETIRE_AFTER_SECONDS_FIELD_NUMBER: _ClassVar[int]
    WORK_CHANNEL_FIELD_NUMBER: _ClassVar[int]
    name: str
    role: Role
    vcpus: int
    memory_mib: int
    image: str
    kernel_cmdline: str
    lease_id: str
    cpuset: str
    retire_after_seconds: int
    work_channel: bool
    def __init__(self, name: _Optional[str] = ..., role: _Optional[_Union[Role, str]] = ..., vcpus: _Optional[int] = ..., memory_mib: _Optional[int] = ..., image: _Optional[str] = ..., kernel_cmdline: _Optional[str] = ..., lease_id: _Optional[str] = ..., cpuset: _Optional[str] = ..., retire_after_seconds: _Optional[int] = ..., work_channel: _Optional[bool] = ...) -> None: ...

class LaunchDomainResponse(_message.Message):
    __slots__ = ("domain", "created")
    DOMAIN_FIELD_NUMBER: _ClassVar[int]
    CREATED_FIELD_NUMBER: _ClassVar[int]
    domain: Domain
    created: bool
    def __init__(self, domain: _Optional[_Union[Domain, _Mapping]] = ..., created: _Optional[bool] = ...) -> None: ...

class TerminateDomainRequest(_message.Message):
    __slots__ = ("name", "force", "grace_seconds")
    NAME_FIELD_NUMBER: _ClassVar[int]
    FORCE_FIELD_NUMBER: _ClassVar[int]
    GRACE_SECONDS_FIELD_NUMBER: _ClassVar[int]
    name: str
    force: bool
    grace_seconds: int
    def __init__(self, name: _Optional[str] = ..., force: _Optional[bool] = ..., grace_seconds: _Optional[int] = ...) -> None: ...

class TerminateDomainResponse(_message.Message):
    __slots__ = ("name", "outcome", "duration_seconds", "detail")
    NAME_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    DURATION_SECONDS_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    name: str
    outcome: TerminationOutcome
    duration_seconds: float
    detail: str
    def __init__(self, name: _Optional[str] = ..., outcome: _Optional[_Union[TerminationOutcome, str]] = ..., duration_seconds: _Optional[float] = ..., detail: _Optional[str] = ...) -> None: ...

class SetDomainClassRequest(_message.Message):
    __slots__ = ("name", "priority_class")
    NAME_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_CLASS_FIELD_NUMBER: _ClassVar[int]
    name: str
    priority_class: PriorityClass
    def __init__(self, name: _Optional[str] = ..., priority_class: _Optional[_Union[PriorityClass, str]] = ...) -> None: ...

class HibernateDomainRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class HibernateDomainResponse(_message.Message):
    __slots__ = ("name", "duration_seconds", "state_bytes", "detail", "saved", "hibernated_at")
    NAME_FIELD_NUMBER: _ClassVar[int]
    DURATION_SECONDS_FIELD_NUMBER: _ClassVar[int]
    STATE_BYTES_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    SAVED_FIELD_NUMBER: _ClassVar[int]
    HIBERNATED_AT_FIELD_NUMBER: _ClassVar[int]
    name: str
    duration_seconds: float
    state_bytes: int
    detail: str
    saved: bool
    hibernated_at: _timestamp_pb2.Timestamp
    def __init__(self, name: _Optional[str] = ..., duration_seconds: _Optional[float] = ..., state_bytes: _Optional[int] = ..., detail: _Optional[str] = ..., saved: _Optional[bool] = ..., hibernated_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class ResumeDomainRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class ResumeDomainResponse(_message.Message):
    __slots__ = ("domain", "duration_seconds", "resumed")
    DOMAIN_FIELD_NUMBER: _ClassVar[int]
    DURATION_SECONDS_FIELD_NUMBER: _ClassVar[int]
    RESUMED_FIELD_NUMBER: _ClassVar[int]
    domain: Domain
    duration_seconds: float
    resumed: bool
    def __init__(self, domain: _Optional[_Union[Domain, _Mapping]] = ..., duration_seconds: _Optional[float] = ..., resumed: _Optional[bool] = ...) -> None: ...

class WatchEventsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class Event(_message.Message):
    __slots__ = ("time", "kind", "domain", "detail", "fields")
    class FieldsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    TIME_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    DOMAIN_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    FIELDS_FIELD_NUMBER: _ClassVar[int]
    time: _timestamp_pb2.Timestamp
    kind: str
    domain: str
    detail: str
    fields: _containers.ScalarMap[str, str]
    def __init__(self, time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., kind: _Optional[str] = ..., domain: _Optional[str] = ..., detail: _Optional[str] = ..., fields: _Optional[_Mapping[str, str]] = ...) -> None: ...

class GetMetricsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class HostMetrics(_message.Message):
    __slots__ = ("cpus", "cpu_busy_cores", "memory_total_bytes", "memory_available_bytes", "disk_read_bytes_per_s", "disk_write_bytes_per_s", "disk_read_ops_per_s", "disk_write_ops_per_s", "net_rx_bytes_per_s", "net_tx_bytes_per_s")
    CPUS_FIELD_NUMBER: _ClassVar[int]
    CPU_BUSY_CORES_FIELD_NUMBER: _ClassVar[int]
    MEMORY_TOTAL_BYTES_FIELD_NUMBER: _ClassVar[int]
    MEMORY_AVAILABLE_BYTES_FIELD_NUMBER: _ClassVar[int]
    DISK_READ_BYTES_PER_S_FIELD_NUMBER: _ClassVar[int]
    DISK_WRITE_BYTES_PER_S_FIELD_NUMBER: _ClassVar[int]
    DISK_READ_OPS_PER_S_FIELD_NUMBER: _ClassVar[int]
    DISK_WRITE_OPS_PER_S_FIELD_NUMBER: _ClassVar[int]
    NET_RX_BYTES_PER_S_FIELD_NUMBER: _ClassVar[int]
    NET_TX_BYTES_PER_S_FIELD_NUMBER: _ClassVar[int]
    cpus: int
    cpu_busy_cores: float
    memory_total_bytes: int
    memory_available_bytes: int
    disk_read_bytes_per_s: float
    disk_write_bytes_per_s: float
    disk_read_ops_per_s: float
    disk_write_ops_per_s: float
    net_rx_bytes_per_s: float
    net_tx_bytes_per_s: float
    def __init__(self, cpus: _Optional[int] = ..., cpu_busy_cores: _Optional[float] = ..., memory_total_bytes: _Optional[int] = ..., memory_available_bytes: _Optional[int] = ..., disk_read_bytes_per_s: _Optional[float] = ..., disk_write_bytes_per_s: _Optional[float] = ..., disk_read_ops_per_s: _Optional[float] = ..., disk_write_ops_per_s: _Optional[float] = ..., net_rx_bytes_per_s: _Optional[float] = ..., net_tx_bytes_per_s: _Optional[float] = ...) -> None: ...

class DomainMetrics(_message.Message):
    __slots__ = ("name", "role", "priority_class", "cpu_cores", "memory_bytes", "block_read_bytes_per_s", "block_write_bytes_per_s", "block_read_ops_per_s", "block_write_ops_per_s", "net_rx_bytes_per_s", "net_tx_bytes_per_s")
    NAME_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_CLASS_FIELD_NUMBER: _ClassVar[int]
    CPU_CORES_FIELD_NUMBER: _ClassVar[int]
    MEMORY_BYTES_FIELD_NUMBER: _ClassVar[int]
    BLOCK_READ_BYTES_PER_S_FIELD_NUMBER: _ClassVar[int]
    BLOCK_WRITE_BYTES_PER_S_FIELD_NUMBER: _ClassVar[int]
    BLOCK_READ_OPS_PER_S_FIELD_NUMBER: _ClassVar[int]
    BLOCK_WRITE_OPS_PER_S_FIELD_NUMBER: _ClassVar[int]
    NET_RX_BYTES_PER_S_FIELD_NUMBER: _ClassVar[int]
    NET_TX_BYTES_PER_S_FIELD_NUMBER: _ClassVar[int]
    name: str
    role: Role
    priority_class: PriorityClass
    cpu_cores: float
    memory_bytes: int
    block_read_bytes_per_s: float
    block_write_bytes_per_s: float
    block_read_ops_per_s: float
    block_write_ops_per_s: float
    net_rx_bytes_per_s: float
    net_tx_bytes_per_s: float
    def __init__(self, name: _Optional[str] = ..., role: _Optional[_Union[Role, str]] = ..., priority_class: _Optional[_Union[PriorityClass, str]] = ..., cpu_cores: _Optional[float] = ..., memory_bytes: _Optional[int] = ..., block_read_bytes_per_s: _Optional[float] = ..., block_write_bytes_per_s: _Optional[float] = ..., block_read_ops_per_s: _Optional[float] = ..., block_write_ops_per_s: _Optional[float] = ..., net_rx_bytes_per_s: _Optional[float] = ..., net_tx_bytes_per_s: _Optional[float] = ...) -> None: ...

class ResidualCapacity(_message.Message):
    __slots__ = ("foreground_cpu_demand_cores", "residual_cpu_cores", "foreground_memory_bytes", "residual_memory_bytes")
    FOREGROUND_CPU_DEMAND_CORES_FIELD_NUMBER: _ClassVar[int]
    RESIDUAL_CPU_CORES_FIELD_NUMBER: _ClassVar[int]
    FOREGROUND_MEMORY_BYTES_FIELD_NUMBER: _ClassVar[int]
    RESIDUAL_MEMORY_BYTES_FIELD_NUMBER: _ClassVar[int]
    foreground_cpu_demand_cores: float
    residual_cpu_cores: float
    foreground_memory_bytes: int
    residual_memory_bytes: int
    def __init__(self, foreground_cpu_demand_cores: _Optional[float] = ..., residual_cpu_cores: _Optional[float] = ..., foreground_memory_bytes: _Optional[int] = ..., residual_memory_bytes: _Optional[int] = ...) -> None: ...

class MetricsSnapshot(_message.Message):
    __slots__ = ("time", "interval_seconds", "host", "domains", "residual", "agent_cpu_percent")
    TIME_FIELD_NUMBER: _ClassVar[int]
    INTERVAL_SECONDS_FIELD_NUMBER: _ClassVar[int]
    HOST_FIELD_NUMBER: _ClassVar[int]
    DOMAINS_FIELD_NUMBER: _ClassVar[int]
    RESIDUAL_FIELD_NUMBER: _ClassVar[int]
    AGENT_CPU_PERCENT_FIELD_NUMBER: _ClassVar[int]
    time: _timestamp_pb2.Timestamp
    interval_seconds: float
    host: HostMetrics
    domains: _containers.RepeatedCompositeFieldContainer[DomainMetrics]
    residual: ResidualCapacity
    agent_cpu_percent: float
    def __init__(self, time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., interval_seconds: _Optional[float] = ..., host: _Optional[_Union[HostMetrics, _Mapping]] = ..., domains: _Optional[_Iterable[_Union[DomainMetrics, _Mapping]]] = ..., residual: _Optional[_Union[ResidualCapacity, _Mapping]] = ..., agent_cpu_percent: _Optional[float] = ...) -> None: ...

from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class VmRole(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    VM_ROLE_UNSPECIFIED: _ClassVar[VmRole]
    VM_ROLE_ON_DEMAND: _ClassVar[VmRole]
    VM_ROLE_BACKFILL: _ClassVar[VmRole]

class LeaseState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    LEASE_STATE_UNSPECIFIED: _ClassVar[LeaseState]
    LEASE_STATE_WAITING: _ClassVar[LeaseState]
    LEASE_STATE_STARTING: _ClassVar[LeaseState]
    LEASE_STATE_RUNNING: _ClassVar[LeaseState]
    LEASE_STATE_CANCELLING: _ClassVar[LeaseState]
    LEASE_STATE_STOPPING: _ClassVar[LeaseState]
    LEASE_STATE_ON_NOTICE: _ClassVar[LeaseState]
    LEASE_STATE_PREEMPTING: _ClassVar[LeaseState]
    LEASE_STATE_LOST: _ClassVar[LeaseState]
    LEASE_STATE_ENDED: _ClassVar[LeaseState]
    LEASE_STATE_FAILED: _ClassVar[LeaseState]

class RequestOutcome(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    REQUEST_OUTCOME_UNSPECIFIED: _ClassVar[RequestOutcome]
    REQUEST_OUTCOME_PENDING: _ClassVar[RequestOutcome]
    REQUEST_OUTCOME_PLACED: _ClassVar[RequestOutcome]
    REQUEST_OUTCOME_REJECTED: _ClassVar[RequestOutcome]
    REQUEST_OUTCOME_FAILED: _ClassVar[RequestOutcome]
    REQUEST_OUTCOME_CANCELLED: _ClassVar[RequestOutcome]
VM_ROLE_UNSPECIFIED: VmRole
VM_ROLE_ON_DEMAND: VmRole
VM_ROLE_BACKFILL: VmRole
LEASE_STATE_UNSPECIFIED: LeaseState
LEASE_STATE_WAITING: LeaseState
LEASE_STATE_STARTING: LeaseState
LEASE_STATE_RUNNING: LeaseState
LEASE_STATE_CANCELLING: LeaseState
LEASE_STATE_STOPPING: LeaseState
LEASE_STATE_ON_NOTICE: LeaseState
LEASE_STATE_PREEMPTING: LeaseState
LEASE_STATE_LOST: LeaseState
LEASE_STATE_ENDED: LeaseState
LEASE_STATE_FAILED: LeaseState
REQUEST_OUTCOME_UNSPECIFIED: RequestOutcome
REQUEST_OUTCOME_PENDING: RequestOutcome
REQUEST_OUTCOME_PLACED: RequestOutcome
REQUEST_OUTCOME_REJECTED: RequestOutcome
REQUEST_OUTCOME_FAILED: RequestOutcome
REQUEST_OUTCOME_CANCELLED: RequestOutcome

class ReportedVm(_message.Message):
    __slots__ = ("name", "lease_id", "role", "state", "vcpus", "memory_mib", "launched_at", "cpu_cores", "image", "cpu_sampled", "work_state", "work_for_s", "vm_role", "slept_s", "progress_done", "progress_total", "progress_for_s")
    NAME_FIELD_NUMBER: _ClassVar[int]
    LEASE_ID_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    VCPUS_FIELD_NUMBER: _ClassVar[int]
    MEMORY_MIB_FIELD_NUMBER: _ClassVar[int]
    LAUNCHED_AT_FIELD_NUMBER: _ClassVar[int]
    CPU_CORES_FIELD_NUMBER: _ClassVar[int]
    IMAGE_FIELD_NUMBER: _ClassVar[int]
    CPU_SAMPLED_FIELD_NUMBER: _ClassVar[int]
    WORK_STATE_FIELD_NUMBER: _ClassVar[int]
    WORK_FOR_S_FIELD_NUMBER: _ClassVar[int]
    VM_ROLE_FIELD_NUMBER: _ClassVar[int]
    SLEPT_S_FIELD_NUMBER: _ClassVar[int]
    PROGRESS_DONE_FIELD_NUMBER: _ClassVar[int]
    PROGRESS_TOTAL_FIELD_NUMBER: _ClassVar[int]
    PROGRESS_FOR_S_FIELD_NUMBER: _ClassVar[int]
    name: str
    lease_id: str
    role: str
    state: str
    vcpus: int
    memory_mib: int
    launched_at: float
    cpu_cores: float
    image: str
    cpu_sampled: bool
    work_state: str
    work_for_s: float
    vm_role: VmRole
    slept_s: float
    progress_done: int
    progress_total: int
    progress_for_s: float
    def __init__(self, name: _Optional[str] = ..., lease_id: _Optional[str] = ..., role: _Optional[str] = ..., state: _Optional[str] = ..., vcpus: _Optional[int] = ..., memory_mib: _Optional[int] = ..., launched_at: _Optional[float] = ..., cpu_cores: _Optional[float] = ..., image: _Optional[str] = ..., cpu_sampled: _Optional[bool] = ..., work_state: _Optional[str] = ..., work_for_s: _Optional[float] = ..., vm_role: _Optional[_Union[VmRole, str]] = ..., slept_s: _Optional[float] = ..., progress_done: _Optional[int] = ..., progress_total: _Optional[int] = ..., progress_for_s: _Optional[float] = ...) -> None: ...

class HibernatedVm(_message.Message):
    __slots__ = ("name", "lease_id", "vm_role", "vcpus", "memory_mib", "launched_at", "image", "state_bytes", "hibernated_at", "slept_s", "work_state", "work_for_s", "progress_done", "progress_total", "progress_for_s")
    NAME_FIELD_NUMBER: _ClassVar[int]
    LEASE_ID_FIELD_NUMBER: _ClassVar[int]
    VM_ROLE_FIELD_NUMBER: _ClassVar[int]
    VCPUS_FIELD_NUMBER: _ClassVar[int]
    MEMORY_MIB_FIELD_NUMBER: _ClassVar[int]
    LAUNCHED_AT_FIELD_NUMBER: _ClassVar[int]
    IMAGE_FIELD_NUMBER: _ClassVar[int]
    STATE_BYTES_FIELD_NUMBER: _ClassVar[int]
    HIBERNATED_AT_FIELD_NUMBER: _ClassVar[int]
    SLEPT_S_FIELD_NUMBER: _ClassVar[int]
    WORK_STATE_FIELD_NUMBER: _ClassVar[int]
    WORK_FOR_S_FIELD_NUMBER: _ClassVar[int]
    PROGRESS_DONE_FIELD_NUMBER: _ClassVar[int]
    PROGRESS_TOTAL_FIELD_NUMBER: _ClassVar[int]
    PROGRESS_FOR_S_FIELD_NUMBER: _ClassVar[int]
    name: str
    lease_id: str
    vm_role: VmRole
    vcpus: int
    memory_mib: int
    launched_at: float
    image: str
    state_bytes: int
    hibernated_at: float
    slept_s: float
    work_state: str
    work_for_s: float
    progress_done: int
    progress_total: int
    progress_for_s: float
    def __init__(self, name: _Optional[str] = ..., lease_id: _Optional[str] = ..., vm_role: _Optional[_Union[VmRole, str]] = ..., vcpus: _Optional[int] = ..., memory_mib: _Optional[int] = ..., launched_at: _Optional[float] = ..., image: _Optional[str] = ..., state_bytes: _Optional[int] = ..., hibernated_at: _Optional[float] = ..., slept_s: _Optional[float] = ..., work_state: _Optional[str] = ..., work_for_s: _Optional[float] = ..., progress_done: _Optional[int] = ..., progress_total: _Optional[int] = ..., progress_for_s: _Optional[float] = ...) -> None: ...

class NodeReport(_message.Message):
    __slots__ = ("node_id", "agent_address", "cpus", "memory_mib", "cpu_busy_cores", "foreground_cpu_cores", "residual_cpu_cores", "residual_memory_mib", "vms", "seq", "sent_at", "agent_version", "images", "min_memory_mib", "hibernated", "hibernation_budget_bytes", "hibernation_used_bytes", "hibernation_room_bytes")
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    AGENT_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    CPUS_FIELD_NUMBER: _ClassVar[int]
    MEMORY_MIB_FIELD_NUMBER: _ClassVar[int]
    CPU_BUSY_CORES_FIELD_NUMBER: _ClassVar[int]
    FOREGROUND_CPU_CORES_FIELD_NUMBER: _ClassVar[int]
    RESIDUAL_CPU_CORES_FIELD_NUMBER: _ClassVar[int]
    RESIDUAL_MEMORY_MIB_FIELD_NUMBER: _ClassVar[int]
    VMS_FIELD_NUMBER: _ClassVar[int]
    SEQ_FIELD_NUMBER: _ClassVar[int]
    SENT_AT_FIELD_NUMBER: _ClassVar[int]
    AGENT_VERSION_FIELD_NUMBER: _ClassVar[int]
    IMAGES_FIELD_NUMBER: _ClassVar[int]
    MIN_MEMORY_MIB_FIELD_NUMBER: _ClassVar[int]
    HIBERNATED_FIELD_NUMBER: _ClassVar[int]
    HIBERNATION_BUDGET_BYTES_FIELD_NUMBER: _ClassVar[int]
    HIBERNATION_USED_BYTES_FIELD_NUMBER: _ClassVar[int]
    HIBERNATION_ROOM_BYTES_FIELD_NUMBER: _ClassVar[int]
    node_id: str
    agent_address: str
    cpus: int
    memory_mib: int
    cpu_busy_cores: float
    foreground_cpu_cores: float
    residual_cpu_cores: float
    residual_memory_mib: int
    vms: _containers.RepeatedCompositeFieldContainer[ReportedVm]
    seq: int
    sent_at: float
    agent_version: str
    images: _containers.RepeatedScalarFieldContainer[str]
    min_memory_mib: int
    hibernated: _containers.RepeatedCompositeFieldContainer[HibernatedVm]
    hibernation_budget_bytes: int
    hibernation_used_bytes: int
    hibernation_room_bytes: int
    def __init__(self, node_id: _Optional[str] = ..., agent_address: _Optional[str] = ..., cpus: _Optional[int] = ..., memory_mib: _Optional[int] = ..., cpu_busy_cores: _Optional[float] = ..., foreground_cpu_cores: _Optional[float] = ..., residual_cpu_cores: _Optional[float] = ..., residual_memory_mib: _Optional[int] = ..., vms: _Optional[_Iterable[_Union[ReportedVm, _Mapping]]] = ..., seq: _Optional[int] = ..., sent_at: _Optional[float] = ..., agent_version: _Optional[str] = ..., images: _Optional[_Iterable[str]] = ..., min_memory_mib: _Optional[int] = ..., hibernated: _Optional[_Iterable[_Union[HibernatedVm, _Mapping]]] = ..., hibernation_budget_bytes: _Optional[int] = ..., hibernation_used_bytes: _Optional[int] = ..., hibernation_room_bytes: _Optional[int] = ...) -> None: ...

class ReportAck(_message.Message):
    __slots__ = ("reports",)
    REPORTS_FIELD_NUMBER: _ClassVar[int]
    reports: int
    def __init__(self, reports: _Optional[int] = ...) -> None: ...

class VmRequest(_message.Message):
    __slots__ = ("vcpus", "memory_mib", "image", "owner", "request_id")
    VCPUS_FIELD_NUMBER: _ClassVar[int]
    MEMORY_MIB_FIELD_NUMBER: _ClassVar[int]
    IMAGE_FIELD_NUMBER: _ClassVar[int]
    OWNER_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    vcpus: int
    memory_mib: int
    image: str
    owner: str
    request_id: str
    def __init__(self, vcpus: _Optional[int] = ..., memory_mib: _Optional[int] = ..., image: _Optional[str] = ..., owner: _Optional[str] = ..., request_id: _Optional[str] = ...) -> None: ...

class CancelRequestRequest(_message.Message):
    __slots__ = ("request_id",)
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    def __init__(self, request_id: _Optional[str] = ...) -> None: ...

class Preemption(_message.Message):
    __slots__ = ("lease_id", "vm_name", "outcome", "seconds", "work_lost_vcpu_seconds")
    LEASE_ID_FIELD_NUMBER: _ClassVar[int]
    VM_NAME_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    SECONDS_FIELD_NUMBER: _ClassVar[int]
    WORK_LOST_VCPU_SECONDS_FIELD_NUMBER: _ClassVar[int]
    lease_id: str
    vm_name: str
    outcome: str
    seconds: float
    work_lost_vcpu_seconds: float
    def __init__(self, lease_id: _Optional[str] = ..., vm_name: _Optional[str] = ..., outcome: _Optional[str] = ..., seconds: _Optional[float] = ..., work_lost_vcpu_seconds: _Optional[float] = ...) -> None: ...

class VmRequestResult(_message.Message):
    __slots__ = ("request_id", "outcome", "reason", "lease", "preempted", "decision_ms", "total_seconds", "policy", "request_outcome")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    LEASE_FIELD_NUMBER: _ClassVar[int]
    PREEMPTED_FIELD_NUMBER: _ClassVar[int]
    DECISION_MS_FIELD_NUMBER: _ClassVar[int]
    TOTAL_SECONDS_FIELD_NUMBER: _ClassVar[int]
    POLICY_FIELD_NUMBER: _ClassVar[int]
    REQUEST_OUTCOME_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    outcome: str
    reason: str
    lease: Lease
    preempted: _containers.RepeatedCompositeFieldContainer[Preemption]
    decision_ms: float
    total_seconds: float
    policy: str
    request_outcome: RequestOutcome
    def __init__(self, request_id: _Optional[str] = ..., outcome: _Optional[str] = ..., reason: _Optional[str] = ..., lease: _Optional[_Union[Lease, _Mapping]] = ..., preempted: _Optional[_Iterable[_Union[Preemption, _Mapping]]] = ..., decision_ms: _Optional[float] = ..., total_seconds: _Optional[float] = ..., policy: _Optional[str] = ..., request_outcome: _Optional[_Union[RequestOutcome, str]] = ...) -> None: ...

class ReleaseRequest(_message.Message):
    __slots__ = ("lease_id", "force")
    LEASE_ID_FIELD_NUMBER: _ClassVar[int]
    FORCE_FIELD_NUMBER: _ClassVar[int]
    lease_id: str
    force: bool
    def __init__(self, lease_id: _Optional[str] = ..., force: _Optional[bool] = ...) -> None: ...

class ReleaseResult(_message.Message):
    __slots__ = ("lease", "outcome", "seconds")
    LEASE_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    SECONDS_FIELD_NUMBER: _ClassVar[int]
    lease: Lease
    outcome: str
    seconds: float
    def __init__(self, lease: _Optional[_Union[Lease, _Mapping]] = ..., outcome: _Optional[str] = ..., seconds: _Optional[float] = ...) -> None: ...

class Lease(_message.Message):
    __slots__ = ("lease_id", "role", "node_id", "vm_name", "vcpus", "memory_mib", "image", "owner", "state", "created_at", "launched_at", "ended_at", "end_reason", "age_seconds", "vm_role", "lease_state", "progress_done", "progress_total")
    LEASE_ID_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    VM_NAME_FIELD_NUMBER: _ClassVar[int]
    VCPUS_FIELD_NUMBER: _ClassVar[int]
    MEMORY_MIB_FIELD_NUMBER: _ClassVar[int]
    IMAGE_FIELD_NUMBER: _ClassVar[int]
    OWNER_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    LAUNCHED_AT_FIELD_NUMBER: _ClassVar[int]
    ENDED_AT_FIELD_NUMBER: _ClassVar[int]
    END_REASON_FIELD_NUMBER: _ClassVar[int]
    AGE_SECONDS_FIELD_NUMBER: _ClassVar[int]
    VM_ROLE_FIELD_NUMBER: _ClassVar[int]
    LEASE_STATE_FIELD_NUMBER: _ClassVar[int]
    PROGRESS_DONE_FIELD_NUMBER: _ClassVar[int]
    PROGRESS_TOTAL_FIELD_NUMBER: _ClassVar[int]
    lease_id: str
    role: str
    node_id: str
    vm_name: str
    vcpus: int
    memory_mib: int
    image: str
    owner: str
    state: str
    created_at: float
    launched_at: float
    ended_at: float
    end_reason: str
    age_seconds: float
    vm_role: VmRole
    lease_state: LeaseState
    progress_done: int
    progress_total: int
    def __init__(self, lease_id: _Optional[str] = ..., role: _Optional[str] = ..., node_id: _Optional[str] = ..., vm_name: _Optional[str] = ..., vcpus: _Optional[int] = ..., memory_mib: _Optional[int] = ..., image: _Optional[str] = ..., owner: _Optional[str] = ..., state: _Optional[str] = ..., created_at: _Optional[float] = ..., launched_at: _Optional[float] = ..., ended_at: _Optional[float] = ..., end_reason: _Optional[str] = ..., age_seconds: _Optional[float] = ..., vm_role: _Optional[_Union[VmRole, str]] = ..., lease_state: _Optional[_Union[LeaseState, str]] = ..., progress_done: _Optional[int] = ..., progress_total: _Optional[int] = ...) -> None: ...

class Node(_message.Message):
    __slots__ = ("node_id", "state", "agent_address", "cpus", "memory_mib", "allocated_vcpus", "allocated_memory_mib", "on_demand_vms", "backfill_vms", "foreground_cpu_cores", "predicted_foreground_cpu_cores", "potential_productivity", "last_report_age_seconds", "selected", "on_demand_cpu_cores", "host_other_cpu_cores", "fill_code", "fill_reasons", "fill_vms")
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    AGENT_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    CPUS_FIELD_NUMBER: _ClassVar[int]
    MEMORY_MIB_FIELD_NUMBER: _ClassVar[int]
    ALLOCATED_VCPUS_FIELD_NUMBER: _ClassVar[int]
    ALLOCATED_MEMORY_MIB_FIELD_NUMBER: _ClassVar[int]
    ON_DEMAND_VMS_FIELD_NUMBER: _ClassVar[int]
    BACKFILL_VMS_FIELD_NUMBER: _ClassVar[int]
    FOREGROUND_CPU_CORES_FIELD_NUMBER: _ClassVar[int]
    PREDICTED_FOREGROUND_CPU_CORES_FIELD_NUMBER: _ClassVar[int]
    POTENTIAL_PRODUCTIVITY_FIELD_NUMBER: _ClassVar[int]
    LAST_REPORT_AGE_SECONDS_FIELD_NUMBER: _ClassVar[int]
    SELECTED_FIELD_NUMBER: _ClassVar[int]
    ON_DEMAND_CPU_CORES_FIELD_NUMBER: _ClassVar[int]
    HOST_OTHER_CPU_CORES_FIELD_NUMBER: _ClassVar[int]
    FILL_CODE_FIELD_NUMBER: _ClassVar[int]
    FILL_REASONS_FIELD_NUMBER: _ClassVar[int]
    FILL_VMS_FIELD_NUMBER: _ClassVar[int]
    node_id: str
    state: str
    agent_address: str
    cpus: int
    memory_mib: int
    allocated_vcpus: int
    allocated_memory_mib: int
    on_demand_vms: int
    backfill_vms: int
    foreground_cpu_cores: float
    predicted_foreground_cpu_cores: float
    potential_productivity: float
    last_report_age_seconds: float
    selected: bool
    on_demand_cpu_cores: float
    host_other_cpu_cores: float
    fill_code: str
    fill_reasons: _containers.RepeatedScalarFieldContainer[str]
    fill_vms: int
    def __init__(self, node_id: _Optional[str] = ..., state: _Optional[str] = ..., agent_address: _Optional[str] = ..., cpus: _Optional[int] = ..., memory_mib: _Optional[int] = ..., allocated_vcpus: _Optional[int] = ..., allocated_memory_mib: _Optional[int] = ..., on_demand_vms: _Optional[int] = ..., backfill_vms: _Optional[int] = ..., foreground_cpu_cores: _Optional[float] = ..., predicted_foreground_cpu_cores: _Optional[float] = ..., potential_productivity: _Optional[float] = ..., last_report_age_seconds: _Optional[float] = ..., selected: _Optional[bool] = ..., on_demand_cpu_cores: _Optional[float] = ..., host_other_cpu_cores: _Optional[float] = ..., fill_code: _Optional[str] = ..., fill_reasons: _Optional[_Iterable[str]] = ..., fill_vms: _Optional[int] = ...) -> None: ...

class ListNodesRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListNodesResponse(_message.Message):
    __slots__ = ("nodes",)
    NODES_FIELD_NUMBER: _ClassVar[int]
    nodes: _containers.RepeatedCompositeFieldContainer[Node]
    def __init__(self, nodes: _Optional[_Iterable[_Union[Node, _Mapping]]] = ...) -> None: ...

class ListVmsRequest(_message.Message):
    __slots__ = ("include_ended",)
    INCLUDE_ENDED_FIELD_NUMBER: _ClassVar[int]
    include_ended: bool
    def __init__(self, include_ended: _Optional[bool] = ...) -> None: ...

class ListVmsResponse(_message.Message):
    __slots__ = ("leases",)
    LEASES_FIELD_NUMBER: _ClassVar[int]
    leases: _containers.RepeatedCompositeFieldContainer[Lease]
    def __init__(self, leases: _Optional[_Iterable[_Union[Lease, _Mapping]]] = ...) -> None: ...

class BackfillConfig(_message.Message):
    __slots__ = ("enabled", "max_instances", "image", "memory_mb", "vcpus", "duration_seconds", "termination_policy", "retry_seconds", "grace_seconds", "interruption", "hibernate_wait_seconds")
    ENABLED_FIELD_NUMBER: _ClassVar[int]
    MAX_INSTANCES_FIELD_NUMBER: _ClassVar[int]
    IMAGE_FIELD_NUMBER: _ClassVar[int]
    MEMORY_MB_FIELD_NUMBER: _ClassVar[int]
    VCPUS_FIELD_NUMBER: _ClassVar[int]
    DURATION_SECONDS_FIELD_NUMBER: _ClassVar[int]
    TERMINATION_POLICY_FIELD_NUMBER: _ClassVar[int]
    RETRY_SECONDS_FIELD_NUMBER: _ClassVar[int]
    GRACE_SECONDS_FIELD_NUMBER: _ClassVar[int]
    INTERRUPTION_FIELD_NUMBER: _ClassVar[int]
    HIBERNATE_WAIT_SECONDS_FIELD_NUMBER: _ClassVar[int]
    enabled: bool
    max_instances: int
    image: str
    memory_mb: int
    vcpus: int
    duration_seconds: int
    termination_policy: str
    retry_seconds: int
    grace_seconds: int
    interruption: str
    hibernate_wait_seconds: int
    def __init__(self, enabled: _Optional[bool] = ..., max_instances: _Optional[int] = ..., image: _Optional[str] = ..., memory_mb: _Optional[int] = ..., vcpus: _Optional[int] = ..., duration_seconds: _Optional[int] = ..., termination_policy: _Optional[str] = ..., retry_seconds: _Optional[int] = ..., grace_seconds: _Optional[int] = ..., interruption: _Optional[str] = ..., hibernate_wait_seconds: _Optional[int] = ...) -> None: ...

class GetBackfillRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class SetBackfillRequest(_message.Message):
    __slots__ = ("enabled", "max_instances", "image", "memory_mb", "vcpus", "duration_seconds", "termination_policy", "retry_seconds", "grace_seconds", "interruption", "hibernate_wait_seconds")
    ENABLED_FIELD_NUMBER: _ClassVar[int]
    MAX_INSTANCES_FIELD_NUMBER: _ClassVar[int]
    IMAGE_FIELD_NUMBER: _ClassVar[int]
    MEMORY_MB_FIELD_NUMBER: _ClassVar[int]
    VCPUS_FIELD_NUMBER: _ClassVar[int]
    DURATION_SECONDS_FIELD_NUMBER: _ClassVar[int]
    TERMINATION_POLICY_FIELD_NUMBER: _ClassVar[int]
    RETRY_SECONDS_FIELD_NUMBER: _ClassVar[int]
    GRACE_SECONDS_FIELD_NUMBER: _ClassVar[int]
    INTERRUPTION_FIELD_NUMBER: _ClassVar[int]
    HIBERNATE_WAIT_SECONDS_FIELD_NUMBER: _ClassVar[int]
    enabled: bool
    max_instances: int
    image: str
    memory_mb: int
    vcpus: int
    duration_seconds: int
    termination_policy: str
    retry_seconds: int
    grace_seconds: int
    interruption: str
    hibernate_wait_seconds: int
    def __init__(self, enabled: _Optional[bool] = ..., max_instances: _Optional[int] = ..., image: _Optional[str] = ..., memory_mb: _Optional[int] = ..., vcpus: _Optional[int] = ..., duration_seconds: _Optional[int] = ..., termination_policy: _Optional[str] = ..., retry_seconds: _Optional[int] = ..., grace_seconds: _Optional[int] = ..., interruption: _Optional[str] = ..., hibernate_wait_seconds: _Optional[int] = ...) -> None: ...

class Reserve(_message.Message):
    __slots__ = ("node_id", "vcpus", "memory_mib", "whole_node")
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    VCPUS_FIELD_NUMBER: _ClassVar[int]
    MEMORY_MIB_FIELD_NUMBER: _ClassVar[int]
    WHOLE_NODE_FIELD_NUMBER: _ClassVar[int]
    node_id: str
    vcpus: int
    memory_mib: int
    whole_node: bool
    def __init__(self, node_id: _Optional[str] = ..., vcpus: _Optional[int] = ..., memory_mib: _Optional[int] = ..., whole_node: _Optional[bool] = ...) -> None: ...

class ListReservesRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListReservesResponse(_message.Message):
    __slots__ = ("reserves",)
    RESERVES_FIELD_NUMBER: _ClassVar[int]
    reserves: _containers.RepeatedCompositeFieldContainer[Reserve]
    def __init__(self, reserves: _Optional[_Iterable[_Union[Reserve, _Mapping]]] = ...) -> None: ...

class ReserveStatusRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class AddHintRequest(_message.Message):
    __slots__ = ("nodes", "in_hours", "for_hours", "label")
    NODES_FIELD_NUMBER: _ClassVar[int]
    IN_HOURS_FIELD_NUMBER: _ClassVar[int]
    FOR_HOURS_FIELD_NUMBER: _ClassVar[int]
    LABEL_FIELD_NUMBER: _ClassVar[int]
    nodes: int
    in_hours: float
    for_hours: float
    label: str
    def __init__(self, nodes: _Optional[int] = ..., in_hours: _Optional[float] = ..., for_hours: _Optional[float] = ..., label: _Optional[str] = ...) -> None: ...

class CancelHintsRequest(_message.Message):
    __slots__ = ("label",)
    LABEL_FIELD_NUMBER: _ClassVar[int]
    label: str
    def __init__(self, label: _Optional[str] = ...) -> None: ...

class SetReserveSettingsRequest(_message.Message):
    __slots__ = ("static_nodes", "predictive", "slot_seconds", "utc_offset_seconds", "wait_seconds", "lead_seconds", "max_waiting", "drain")
    STATIC_NODES_FIELD_NUMBER: _ClassVar[int]
    PREDICTIVE_FIELD_NUMBER: _ClassVar[int]
    SLOT_SECONDS_FIELD_NUMBER: _ClassVar[int]
    UTC_OFFSET_SECONDS_FIELD_NUMBER: _ClassVar[int]
    WAIT_SECONDS_FIELD_NUMBER: _ClassVar[int]
    LEAD_SECONDS_FIELD_NUMBER: _ClassVar[int]
    MAX_WAITING_FIELD_NUMBER: _ClassVar[int]
    DRAIN_FIELD_NUMBER: _ClassVar[int]
    static_nodes: int
    predictive: str
    slot_seconds: int
    utc_offset_seconds: int
    wait_seconds: float
    lead_seconds: float
    max_waiting: int
    drain: bool
    def __init__(self, static_nodes: _Optional[int] = ..., predictive: _Optional[str] = ..., slot_seconds: _Optional[int] = ..., utc_offset_seconds: _Optional[int] = ..., wait_seconds: _Optional[float] = ..., lead_seconds: _Optional[float] = ..., max_waiting: _Optional[int] = ..., drain: _Optional[bool] = ...) -> None: ...

class Hint(_message.Message):
    __slots__ = ("nodes", "start_at", "until", "label")
    NODES_FIELD_NUMBER: _ClassVar[int]
    START_AT_FIELD_NUMBER: _ClassVar[int]
    UNTIL_FIELD_NUMBER: _ClassVar[int]
    LABEL_FIELD_NUMBER: _ClassVar[int]
    nodes: int
    start_at: float
    until: float
    label: str
    def __init__(self, nodes: _Optional[int] = ..., start_at: _Optional[float] = ..., until: _Optional[float] = ..., label: _Optional[str] = ...) -> None: ...

class ReserveStatus(_message.Message):
    __slots__ = ("settings_json", "explain", "target_nodes", "static_nodes", "predicted_nodes", "hinted_nodes", "pool_nodes", "hints", "reserved_nodes", "waiting_requests", "note")
    SETTINGS_JSON_FIELD_NUMBER: _ClassVar[int]
    EXPLAIN_FIELD_NUMBER: _ClassVar[int]
    TARGET_NODES_FIELD_NUMBER: _ClassVar[int]
    STATIC_NODES_FIELD_NUMBER: _ClassVar[int]
    PREDICTED_NODES_FIELD_NUMBER: _ClassVar[int]
    HINTED_NODES_FIELD_NUMBER: _ClassVar[int]
    POOL_NODES_FIELD_NUMBER: _ClassVar[int]
    HINTS_FIELD_NUMBER: _ClassVar[int]
    RESERVED_NODES_FIELD_NUMBER: _ClassVar[int]
    WAITING_REQUESTS_FIELD_NUMBER: _ClassVar[int]
    NOTE_FIELD_NUMBER: _ClassVar[int]
    settings_json: str
    explain: str
    target_nodes: int
    static_nodes: int
    predicted_nodes: int
    hinted_nodes: int
    pool_nodes: int
    hints: _containers.RepeatedCompositeFieldContainer[Hint]
    reserved_nodes: _containers.RepeatedScalarFieldContainer[str]
    waiting_requests: int
    note: str
    def __init__(self, settings_json: _Optional[str] = ..., explain: _Optional[str] = ..., target_nodes: _Optional[int] = ..., static_nodes: _Optional[int] = ..., predicted_nodes: _Optional[int] = ..., hinted_nodes: _Optional[int] = ..., pool_nodes: _Optional[int] = ..., hints: _Optional[_Iterable[_Union[Hint, _Mapping]]] = ..., reserved_nodes: _Optional[_Iterable[str]] = ..., waiting_requests: _Optional[int] = ..., note: _Optional[str] = ...) -> None: ...

class ListEventsRequest(_message.Message):
    __slots__ = ("after_seq", "limit", "kind", "newest")
    AFTER_SEQ_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    NEWEST_FIELD_NUMBER: _ClassVar[int]
    after_seq: int
    limit: int
    kind: str
    newest: bool
    def __init__(self, after_seq: _Optional[int] = ..., limit: _Optional[int] = ..., kind: _Optional[str] = ..., newest: _Optional[bool] = ...) -> None: ...

class AuditEvent(_message.Message):
    __slots__ = ("seq", "at", "kind", "node_id", "lease_id", "detail_json")
    SEQ_FIELD_NUMBER: _ClassVar[int]
    AT_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    LEASE_ID_FIELD_NUMBER: _ClassVar[int]
    DETAIL_JSON_FIELD_NUMBER: _ClassVar[int]
    seq: int
    at: float
    kind: str
    node_id: str
    lease_id: str
    detail_json: str
    def __init__(self, seq: _Optional[int] = ..., at: _Optional[float] = ..., kind: _Optional[str] = ..., node_id: _Optional[str] = ..., lease_id: _Optional[str] = ..., detail_json: _Optional[str] = ...) -> None: ...

class FollowEventsRequest(_message.Message):
    __slots__ = ("after_seq", "kind", "max_seconds")
    AFTER_SEQ_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    MAX_SECONDS_FIELD_NUMBER: _ClassVar[int]
    after_seq: int
    kind: str
    max_seconds: int
    def __init__(self, after_seq: _Optional[int] = ..., kind: _Optional[str] = ..., max_seconds: _Optional[int] = ...) -> None: ...

class ListEventsResponse(_message.Message):
    __slots__ = ("events", "last_seq")
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    LAST_SEQ_FIELD_NUMBER: _ClassVar[int]
    events: _containers.RepeatedCompositeFieldContainer[AuditEvent]
    last_seq: int
    def __init__(self, events: _Optional[_Iterable[_Union[AuditEvent, _Mapping]]] = ..., last_seq: _Optional[int] = ...) -> None: ...

class StatusRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class PoolStatus(_message.Message):
    __slots__ = ("nodes_up", "nodes_suspect", "nodes_down", "cpus", "memory_mib", "on_demand_vcpus", "backfill_vcpus", "on_demand_memory_mib", "backfill_memory_mib", "on_demand_vms", "backfill_vms", "foreground_cpu_cores", "backfill_cpu_cores", "backfill_enabled", "preemptions", "rejections", "tenants_on_demand", "tenants_batch", "tenants_upper_vcpus", "tenants_upper_memory_mib", "tenants_rbt")
    NODES_UP_FIELD_NUMBER: _ClassVar[int]
    NODES_SUSPECT_FIELD_NUMBER: _ClassVar[int]
    NODES_DOWN_FIELD_NUMBER: _ClassVar[int]
    CPUS_FIELD_NUMBER: _ClassVar[int]
    MEMORY_MIB_FIELD_NUMBER: _ClassVar[int]
    ON_DEMAND_VCPUS_FIELD_NUMBER: _ClassVar[int]
    BACKFILL_VCPUS_FIELD_NUMBER: _ClassVar[int]
    ON_DEMAND_MEMORY_MIB_FIELD_NUMBER: _ClassVar[int]
    BACKFILL_MEMORY_MIB_FIELD_NUMBER: _ClassVar[int]
    ON_DEMAND_VMS_FIELD_NUMBER: _ClassVar[int]
    BACKFILL_VMS_FIELD_NUMBER: _ClassVar[int]
    FOREGROUND_CPU_CORES_FIELD_NUMBER: _ClassVar[int]
    BACKFILL_CPU_CORES_FIELD_NUMBER: _ClassVar[int]
    BACKFILL_ENABLED_FIELD_NUMBER: _ClassVar[int]
    PREEMPTIONS_FIELD_NUMBER: _ClassVar[int]
    REJECTIONS_FIELD_NUMBER: _ClassVar[int]
    TENANTS_ON_DEMAND_FIELD_NUMBER: _ClassVar[int]
    TENANTS_BATCH_FIELD_NUMBER: _ClassVar[int]
    TENANTS_UPPER_VCPUS_FIELD_NUMBER: _ClassVar[int]
    TENANTS_UPPER_MEMORY_MIB_FIELD_NUMBER: _ClassVar[int]
    TENANTS_RBT_FIELD_NUMBER: _ClassVar[int]
    nodes_up: int
    nodes_suspect: int
    nodes_down: int
    cpus: int
    memory_mib: int
    on_demand_vcpus: int
    backfill_vcpus: int
    on_demand_memory_mib: int
    backfill_memory_mib: int
    on_demand_vms: int
    backfill_vms: int
    foreground_cpu_cores: float
    backfill_cpu_cores: float
    backfill_enabled: bool
    preemptions: int
    rejections: int
    tenants_on_demand: int
    tenants_batch: int
    tenants_upper_vcpus: int
    tenants_upper_memory_mib: int
    tenants_rbt: float
    def __init__(self, nodes_up: _Optional[int] = ..., nodes_suspect: _Optional[int] = ..., nodes_down: _Optional[int] = ..., cpus: _Optional[int] = ..., memory_mib: _Optional[int] = ..., on_demand_vcpus: _Optional[int] = ..., backfill_vcpus: _Optional[int] = ..., on_demand_memory_mib: _Optional[int] = ..., backfill_memory_mib: _Optional[int] = ..., on_demand_vms: _Optional[int] = ..., backfill_vms: _Optional[int] = ..., foreground_cpu_cores: _Optional[float] = ..., backfill_cpu_cores: _Optional[float] = ..., backfill_enabled: _Optional[bool] = ..., preemptions: _Optional[int] = ..., rejections: _Optional[int] = ..., tenants_on_demand: _Optional[int] = ..., tenants_batch: _Optional[int] = ..., tenants_upper_vcpus: _Optional[int] = ..., tenants_upper_memory_mib: _Optional[int] = ..., tenants_rbt: _Optional[float] = ...) -> None: ...

class Tenant(_message.Message):
    __slots__ = ("name", "kind", "lower_vcpus", "lower_memory_mib", "upper_vcpus", "upper_memory_mib", "created_at", "backfill_json", "goal_json", "used_vcpus", "used_memory_mib", "lease_ids", "built_in", "progress_done", "progress_total", "goal_state", "goal_projected_finish", "goal_dedicated_vcpus", "goal_volunteer_vcpus", "goal_explain")
    NAME_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    LOWER_VCPUS_FIELD_NUMBER: _ClassVar[int]
    LOWER_MEMORY_MIB_FIELD_NUMBER: _ClassVar[int]
    UPPER_VCPUS_FIELD_NUMBER: _ClassVar[int]
    UPPER_MEMORY_MIB_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    BACKFILL_JSON_FIELD_NUMBER: _ClassVar[int]
    GOAL_JSON_FIELD_NUMBER: _ClassVar[int]
    USED_VCPUS_FIELD_NUMBER: _ClassVar[int]
    USED_MEMORY_MIB_FIELD_NUMBER: _ClassVar[int]
    LEASE_IDS_FIELD_NUMBER: _ClassVar[int]
    BUILT_IN_FIELD_NUMBER: _ClassVar[int]
    PROGRESS_DONE_FIELD_NUMBER: _ClassVar[int]
    PROGRESS_TOTAL_FIELD_NUMBER: _ClassVar[int]
    GOAL_STATE_FIELD_NUMBER: _ClassVar[int]
    GOAL_PROJECTED_FINISH_FIELD_NUMBER: _ClassVar[int]
    GOAL_DEDICATED_VCPUS_FIELD_NUMBER: _ClassVar[int]
    GOAL_VOLUNTEER_VCPUS_FIELD_NUMBER: _ClassVar[int]
    GOAL_EXPLAIN_FIELD_NUMBER: _ClassVar[int]
    name: str
    kind: str
    lower_vcpus: int
    lower_memory_mib: int
    upper_vcpus: int
    upper_memory_mib: int
    created_at: float
    backfill_json: str
    goal_json: str
    used_vcpus: int
    used_memory_mib: int
    lease_ids: _containers.RepeatedScalarFieldContainer[str]
    built_in: bool
    progress_done: int
    progress_total: int
    goal_state: str
    goal_projected_finish: float
    goal_dedicated_vcpus: int
    goal_volunteer_vcpus: int
    goal_explain: str
    def __init__(self, name: _Optional[str] = ..., kind: _Optional[str] = ..., lower_vcpus: _Optional[int] = ..., lower_memory_mib: _Optional[int] = ..., upper_vcpus: _Optional[int] = ..., upper_memory_mib: _Optional[int] = ..., created_at: _Optional[float] = ..., backfill_json: _Optional[str] = ..., goal_json: _Optional[str] = ..., used_vcpus: _Optional[int] = ..., used_memory_mib: _Optional[int] = ..., lease_ids: _Optional[_Iterable[str]] = ..., built_in: _Optional[bool] = ..., progress_done: _Optional[int] = ..., progress_total: _Optional[int] = ..., goal_state: _Optional[str] = ..., goal_projected_finish: _Optional[float] = ..., goal_dedicated_vcpus: _Optional[int] = ..., goal_volunteer_vcpus: _Optional[int] = ..., goal_explain: _Optional[str] = ...) -> None: ...

class CreateTenantRequest(_message.Message):
    __slots__ = ("name", "kind", "lower_vcpus", "lower_memory_mib", "upper_vcpus", "upper_memory_mib")
    NAME_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    LOWER_VCPUS_FIELD_NUMBER: _ClassVar[int]
    LOWER_MEMORY_MIB_FIELD_NUMBER: _ClassVar[int]
    UPPER_VCPUS_FIELD_NUMBER: _ClassVar[int]
    UPPER_MEMORY_MIB_FIELD_NUMBER: _ClassVar[int]
    name: str
    kind: str
    lower_vcpus: int
    lower_memory_mib: int
    upper_vcpus: int
    upper_memory_mib: int
    def __init__(self, name: _Optional[str] = ..., kind: _Optional[str] = ..., lower_vcpus: _Optional[int] = ..., lower_memory_mib: _Optional[int] = ..., upper_vcpus: _Optional[int] = ..., upper_memory_mib: _Optional[int] = ...) -> None: ...

class ListTenantsRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class ListTenantsResponse(_message.Message):
    __slots__ = ("tenants", "rbt", "urr", "capacity_vcpus", "capacity_memory_mib")
    TENANTS_FIELD_NUMBER: _ClassVar[int]
    RBT_FIELD_NUMBER: _ClassVar[int]
    URR_FIELD_NUMBER: _ClassVar[int]
    CAPACITY_VCPUS_FIELD_NUMBER: _ClassVar[int]
    CAPACITY_MEMORY_MIB_FIELD_NUMBER: _ClassVar[int]
    tenants: _containers.RepeatedCompositeFieldContainer[Tenant]
    rbt: float
    urr: float
    capacity_vcpus: int
    capacity_memory_mib: int
    def __init__(self, tenants: _Optional[_Iterable[_Union[Tenant, _Mapping]]] = ..., rbt: _Optional[float] = ..., urr: _Optional[float] = ..., capacity_vcpus: _Optional[int] = ..., capacity_memory_mib: _Optional[int] = ...) -> None: ...

class SetTenantRequest(_message.Message):
    __slots__ = ("name", "lower_vcpus", "lower_memory_mib", "upper_vcpus", "upper_memory_mib")
    NAME_FIELD_NUMBER: _ClassVar[int]
    LOWER_VCPUS_FIELD_NUMBER: _ClassVar[int]
    LOWER_MEMORY_MIB_FIELD_NUMBER: _ClassVar[int]
    UPPER_VCPUS_FIELD_NUMBER: _ClassVar[int]
    UPPER_MEMORY_MIB_FIELD_NUMBER: _ClassVar[int]
    name: str
    lower_vcpus: int
    lower_memory_mib: int
    upper_vcpus: int
    upper_memory_mib: int
    def __init__(self, name: _Optional[str] = ..., lower_vcpus: _Optional[int] = ..., lower_memory_mib: _Optional[int] = ..., upper_vcpus: _Optional[int] = ..., upper_memory_mib: _Optional[int] = ...) -> None: ...

class SetTenantBackfillRequest(_message.Message):
    __slots__ = ("name", "enabled", "image", "vcpus", "memory_mb", "max_instances", "reset")
    NAME_FIELD_NUMBER: _ClassVar[int]
    ENABLED_FIELD_NUMBER: _ClassVar[int]
    IMAGE_FIELD_NUMBER: _ClassVar[int]
    VCPUS_FIELD_NUMBER: _ClassVar[int]
    MEMORY_MB_FIELD_NUMBER: _ClassVar[int]
    MAX_INSTANCES_FIELD_NUMBER: _ClassVar[int]
    RESET_FIELD_NUMBER: _ClassVar[int]
    name: str
    enabled: bool
    image: str
    vcpus: int
    memory_mb: int
    max_instances: int
    reset: bool
    def __init__(self, name: _Optional[str] = ..., enabled: _Optional[bool] = ..., image: _Optional[str] = ..., vcpus: _Optional[int] = ..., memory_mb: _Optional[int] = ..., max_instances: _Optional[int] = ..., reset: _Optional[bool] = ...) -> None: ...

class SetTenantGoalRequest(_message.Message):
    __slots__ = ("name", "kind", "work_vcpu_hours", "deadline", "price_per_dedicated_vcpu_hour", "price_per_volunteer_vcpu_hour", "fixed_cost_per_hour", "clear")
    NAME_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    WORK_VCPU_HOURS_FIELD_NUMBER: _ClassVar[int]
    DEADLINE_FIELD_NUMBER: _ClassVar[int]
    PRICE_PER_DEDICATED_VCPU_HOUR_FIELD_NUMBER: _ClassVar[int]
    PRICE_PER_VOLUNTEER_VCPU_HOUR_FIELD_NUMBER: _ClassVar[int]
    FIXED_COST_PER_HOUR_FIELD_NUMBER: _ClassVar[int]
    CLEAR_FIELD_NUMBER: _ClassVar[int]
    name: str
    kind: str
    work_vcpu_hours: float
    deadline: float
    price_per_dedicated_vcpu_hour: float
    price_per_volunteer_vcpu_hour: float
    fixed_cost_per_hour: float
    clear: bool
    def __init__(self, name: _Optional[str] = ..., kind: _Optional[str] = ..., work_vcpu_hours: _Optional[float] = ..., deadline: _Optional[float] = ..., price_per_dedicated_vcpu_hour: _Optional[float] = ..., price_per_volunteer_vcpu_hour: _Optional[float] = ..., fixed_cost_per_hour: _Optional[float] = ..., clear: _Optional[bool] = ...) -> None: ...

class DeleteTenantRequest(_message.Message):
    __slots__ = ("name", "drain")
    NAME_FIELD_NUMBER: _ClassVar[int]
    DRAIN_FIELD_NUMBER: _ClassVar[int]
    name: str
    drain: bool
    def __init__(self, name: _Optional[str] = ..., drain: _Optional[bool] = ...) -> None: ...

class DeleteTenantResponse(_message.Message):
    __slots__ = ("tenant", "released")
    TENANT_FIELD_NUMBER: _ClassVar[int]
    RELEASED_FIELD_NUMBER: _ClassVar[int]
    tenant: Tenant
    released: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, tenant: _Optional[_Union[Tenant, _Mapping]] = ..., released: _Optional[_Iterable[str]] = ...) -> None: ...

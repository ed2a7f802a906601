"""Every RPC of both servers, fuzzed with hypothesis against running processes: whatever the
message, the answer is OK or one of the codes that name the caller's mistake, never UNKNOWN or
INTERNAL, and the servers keep answering. Unary calls, the controller's report stream and the
agent's server streams (opened by every kind of identity, read a little, cancelled) all are. Messages are built from the protobuf descriptors, with
extreme numbers and hostile strings mixed in. The agent runs on libvirt's test:/// driver, so a
fuzzed launch that passes every check starts no real VM."""
from __future__ import annotations

import itertools

import grpc
import pytest
from google.protobuf.descriptor import FieldDescriptor as F
from grpc_health.v1 import health_pb2, health_pb2_grpc
from hypothesis import HealthCheck, given, settings, strategies as st

from protos import agent_pb2, controller_pb2, controller_pb2_grpc
from tests.agentproc import AgentProcess, wait_for
from tests.controllerproc import ControllerProcess, agent_settings, rpc_code

ALLOWED = {grpc.StatusCode.OK, grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.PERMISSION_DENIED,
           grpc.StatusCode.NOT_FOUND, grpc.StatusCode.FAILED_PRECONDITION, grpc.StatusCode.ALREADY_EXISTS,
           grpc.StatusCode.RESOURCE_EXHAUSTED}
# A stream ends when its reader's deadline passes or the reader cancels it: the fuzzer's doing.
STREAM_ENDS = {grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.CANCELLED}
NODE = "fuzz-node"
HOSTILE = ["", "tiny", "*", NODE, "../../etc/passwd", "/etc/shadow", "a" * 300, "x\x00y", "<domain/>", "'; DROP",
           "gtest-fuzz", "od-0", "é\u2028\n", "most_recent", "least_loss", "on_demand", "backfill", "vm.preempted"]
INT_RANGES = {F.TYPE_INT32: (-2**31, 2**31 - 1), F.TYPE_UINT32: (0, 2**32 - 1), F.TYPE_INT64: (-2**63, 2**63 - 1),
              F.TYPE_UINT64: (0, 2**64 - 1), F.TYPE_SINT32: (-2**31, 2**31 - 1), F.TYPE_SINT64: (-2**63, 2**63 - 1),
              F.TYPE_FIXED32: (0, 2**32 - 1), F.TYPE_FIXED64: (0, 2**64 - 1)}


def scalar(field) -> st.SearchStrategy:
    if field.type in INT_RANGES:
        low, high = INT_RANGES[field.type]
        return st.one_of(st.integers(low, high), st.sampled_from([low, high, 0, 1, 2, 32, 64, 128, 4096]),
                         st.integers(0, 200))
    if field.type in (F.TYPE_DOUBLE, F.TYPE_FLOAT):
        return st.one_of(st.floats(allow_nan=True, allow_infinity=True, width=32 if field.type == F.TYPE_FLOAT
                                   else 64), st.sampled_from([0.0, 1.0, 1e300, -1.0]))
    if field.type == F.TYPE_BOOL:
        return st.booleans()
    if field.type == F.TYPE_STRING:
        return st.one_of(st.sampled_from(HOSTILE), st.text(max_size=80))
    if field.type == F.TYPE_BYTES:
        return st.binary(max_size=64)
    if field.type == F.TYPE_ENUM:
        return st.one_of(st.sampled_from([v.number for v in field.enum_type.values]), st.integers(-5, 50))
    raise AssertionError(f"no strategy for {field.full_name}")


def message(cls, depth: int = 0) -> st.SearchStrategy:
    """Messages of `cls` with any subset of fields set to fuzzed values."""
    parts = {}
    for field in cls.DESCRIPTOR.fields:
        if field.type == F.TYPE_MESSAGE:
            if depth >= 2 or field.message_type.full_name.startswith("google.protobuf"):
                continue
            value = message(field.message_type._concrete_class, depth + 1)
        else:
            value = scalar(field)
        if field.is_repeated:
            value = st.lists(value, max_size=4)
        parts[field.name] = st.one_of(st.none(), value)

    def build(values: dict):
        msg = cls()
        for name, value in values.items():
            if value is None:
                continue
            field = cls.DESCRIPTOR.fields_by_name[name]
            if field.is_repeated:
                target = getattr(msg, name)
                for item in value:
                    target.add().CopyFrom(item) if field.type == F.TYPE_MESSAGE else target.append(item)
            elif field.type == F.TYPE_MESSAGE:
                getattr(msg, name).CopyFrom(value)
            else:
                setattr(msg, name, value)
        return msg
    return st.fixed_dictionaries(parts).map(build)


@pytest.fixture(scope="module")
def servers(test_env):
    controller = ControllerProcess(test_env, name="fuzz").start()
    agent = AgentProcess(test_env, name=NODE, settings=agent_settings(
        controller, libvirt_uri="test:///default", metrics_listen="")).start()
    wait_for(lambda: controller.node_state(NODE) == "up", 20, "the fuzzed node to report")
    # The agent answers GetMetrics with UNAVAILABLE until its first rates exist (two samples):
    # a passing state, not an answer to input, so the fuzzing starts after it.
    wait_for(lambda: rpc_code(lambda: agent.stub().GetMetrics(agent_pb2.GetMetricsRequest(), timeout=5)) is None,
             20, "the agent's first metrics")
    yield controller, agent
    agent.stop()
    controller.stop()


def code_of(call) -> grpc.StatusCode:
    try:
        call()
    except grpc.RpcError as exc:
        assert exc.code() in ALLOWED, f"{exc.code().name}: {exc.details()}"
        return exc.code()
    return grpc.StatusCode.OK


def unary_methods(descriptor, service: str) -> list[str]:
    return [m.name for m in descriptor.services_by_name[service].methods
            if not m.client_streaming and not m.server_streaming]


def server_streaming_methods(descriptor, service: str) -> list[str]:
    return [m.name for m in descriptor.services_by_name[service].methods
            if m.server_streaming and not m.client_streaming]


def fuzz_unary(stub, method: str, request_cls, count: int = 40) -> set:
    seen = set()

    @settings(max_examples=count, deadline=None, derandomize=True,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(message(request_cls))
    def one(request):
        seen.add(code_of(lambda: getattr(stub, method)(request, timeout=30)))
    one()
    return seen


def request_class(descriptor, service: str, method: str):
    return descriptor.services_by_name[service].methods_by_name[method].input_type._concrete_class


def test_every_controller_rpc_answers_fuzz_with_a_meaningful_code(servers, test_env):
    controller, _agent = servers
    for tls in (test_env.pki.admin, test_env.pki.viewer):
        stub = controller.stub(tls)
        for method in unary_methods(controller_pb2.DESCRIPTOR, "Controller"):
            fuzz_unary(stub, method, request_class(controller_pb2.DESCRIPTOR, "Controller", method))
    assert_serving(controller, test_env)


def test_every_agent_rpc_answers_fuzz_with_a_meaningful_code(servers, test_env):
    _controller, agent = servers
    stub = agent.stub(test_env.pki.controller)
    for method in unary_methods(agent_pb2.DESCRIPTOR, "NodeAgent"):
        fuzz_unary(stub, method, request_class(agent_pb2.DESCRIPTOR, "NodeAgent", method))
    assert_serving(agent, test_env)


def test_every_agent_server_stream_answers_fuzz_with_a_meaningful_code(servers, test_env):
    """Streams opened with fuzzed requests by every kind of identity, read for a few messages or
    until a short deadline, or cancelled at once; the agent then still admits a stream."""
    _controller, agent = servers
    lab = test_env.pki
    stubs = [agent.stub(tls) for tls in (lab.controller, lab.admin, lab.viewer, lab.agent(NODE))]
    methods = server_streaming_methods(agent_pb2.DESCRIPTOR, "NodeAgent")
    assert methods == ["WatchEvents"]
    codes = set()
    for method in methods:
        @settings(max_examples=30, deadline=None, derandomize=True,
                  suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
        @given(message(request_class(agent_pb2.DESCRIPTOR, "NodeAgent", method)), st.sampled_from(stubs),
               st.integers(0, 3), st.sampled_from([0.05, 0.2, 0.5]))
        def one(request, stub, reads, seconds):
            call = getattr(stub, method)(request, timeout=seconds)
            try:
                list(itertools.islice(call, reads))
                codes.add(grpc.StatusCode.OK)
            except grpc.RpcError as exc:
                assert exc.code() in ALLOWED | STREAM_ENDS, f"{exc.code().name}: {exc.details()}"
                codes.add(exc.code())
            finally:
                call.cancel()
        one()
    assert grpc.StatusCode.PERMISSION_DENIED in codes   # the agent identity may not watch
    assert_serving(agent, test_env)
    watch = lambda: rpc_code(lambda: list(stubs[2].WatchEvents(agent_pb2.WatchEventsRequest(),  # noqa: E731
                                                               timeout=1)))
    wait_for(lambda: watch() == grpc.StatusCode.DEADLINE_EXCEEDED, 10, "the agent to admit a stream again")


def test_fuzzed_report_streams_answer_with_a_meaningful_code(servers, test_env):
    controller, _agent = servers
    tls = test_env.pki.agent("fuzz-reporter")
    codes = set()

    @settings(max_examples=60, deadline=None, derandomize=True,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(st.lists(message(controller_pb2.NodeReport), min_size=1, max_size=3), st.booleans())
    def one(reports, own_node):
        if own_node:  # most fuzzed ids are refused at once; these reach the checks behind
            for report in reports:
                report.node_id = "fuzz-reporter"
        with controller.channel(tls) as channel:
            stub = controller_pb2_grpc.ControllerStub(channel)
            codes.add(code_of(lambda: stub.Report(iter(reports), timeout=30)))
    one()
    assert grpc.StatusCode.INVALID_ARGUMENT in codes and grpc.StatusCode.PERMISSION_DENIED in codes
    assert_serving(controller, test_env)


def assert_serving(server, test_env) -> None:
    with server.channel(test_env.pki.viewer) as channel:
        reply = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=10)
    assert reply.status == health_pb2.HealthCheckResponse.SERVING

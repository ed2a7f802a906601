"""One agent certificate floods its own node's reports: the controller drops what is over the
node's budget, ends the stream, keeps the node out for a penalty, adopts no more than its caps
allow, and another node's reports and an admin's reads are taken all along.

The controller is a real process with mutual TLS; the flood and the honest node are real gRPC
clients holding agent certificates of the lab CA."""
from __future__ import annotations

import itertools
import threading
import time

import grpc
import pytest

from protos import controller_pb2, controller_pb2_grpc
from tests.agentproc import LabEnv
from tests.controllerproc import ControllerProcess, rpc_code
from tests.integration.test_security import report

ADOPTIONS_PER_REPORT, ADOPTIONS_PER_HOUR = 8, 40


@pytest.fixture(scope="module")
def test_env():
    """The lab's PKI and state directory only: no agent, no libvirt (so no domain is touched)."""
    env = LabEnv.create()
    yield env
    env.remove()


@pytest.fixture(scope="module")
def controller(test_env):
    proc = ControllerProcess(test_env, name="intake", settings=dict(
        adoptions_per_report=ADOPTIONS_PER_REPORT, adoptions_per_hour=ADOPTIONS_PER_HOUR,
        report_strikes=20, report_penalty_seconds=3)).start()
    yield proc
    proc.stop()


def flood(node: str, count: int, vms: int = 300):
    """Reports listing `vms` fresh VM names each, as fast as the stream takes them."""
    names = itertools.count()
    for _ in range(count):
        yield report(node, cpus=64, memory_mib=1 << 20, vms=[controller_pb2.ReportedVm(
            name=f"flood-{next(names)}", role="backfill", vcpus=64, memory_mib=1 << 20, state="running")
            for _ in range(vms)])


def test_a_report_flood_is_cut_off_and_adopts_no_more_than_the_caps(controller, test_env):
    stub = controller.stub()
    honest_tls, flood_tls = test_env.pki.agent("intake-honest"), test_env.pki.agent("intake-flood")
    stop, honest_codes = threading.Event(), []

    def honest() -> None:   # an honest node: a report every 0.5 s on its own stream
        def every_half_second():
            while not stop.is_set():
                yield report("intake-honest", vms=[controller_pb2.ReportedVm(
                    name="honest-vm", role="on_demand", vcpus=1, memory_mib=128, state="running")])
                time.sleep(0.5)
        with controller.channel(honest_tls) as channel:
            honest_codes.append(rpc_code(lambda: controller_pb2_grpc.ControllerStub(channel).Report(
                every_half_second(), timeout=60)))

    worker = threading.Thread(target=honest)
    worker.start()
    try:
        with controller.channel(flood_tls) as channel:
            flooder = controller_pb2_grpc.ControllerStub(channel)
            with pytest.raises(grpc.RpcError) as ended:
                flooder.Report(flood("intake-flood", 500), timeout=60)
            assert ended.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            assert "reports in a row over its budget" in ended.value.details()
            # the node sits out its penalty: a new stream is held until it is over, then refused
            started = time.monotonic()
            again = rpc_code(lambda: flooder.Report(flood("intake-flood", 1), timeout=20))
            assert again == grpc.StatusCode.RESOURCE_EXHAUSTED and time.monotonic() - started > 1.5
        every = stub.ListVms(controller_pb2.ListVmsRequest(include_ended=True), timeout=10).leases
        flood_leases = [l for l in every if l.node_id == "intake-flood"]
        assert 0 < len(flood_leases) <= ADOPTIONS_PER_HOUR
        refused = [e for e in controller.events("report.refused") if e.node_id == "intake-flood"]
        assert refused and "over its budget" in refused[0].detail_json
        # meanwhile the honest node stayed up and had its VM adopted; an admin still reads
        assert controller.node_state("intake-honest") == "up"
        assert [l.vm_name for l in controller.leases() if l.node_id == "intake-honest"] == ["honest-vm"]
        assert stub.Status(controller_pb2.StatusRequest(), timeout=5).nodes_up >= 1
    finally:
        stop.set()
        worker.join(timeout=30)
    assert honest_codes == [None]

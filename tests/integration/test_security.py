"""Attacks on the controller and the agent, each a test that fails if it succeeds and checks that
no state changed: wrong roles on every mutating call, node spoofing, several nodes on one
stream, lease hijacking through reports and adoption, out-of-range values, revoked and expired
certificates, and a node sending the controller to another node's agent.

The controller runs as a real process; agents are real processes on libvirt's test:/// driver
(the RPC and authorization layers are the same as on a real host, and no VM starts)."""
from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time

import grpc
import pytest
from cryptography import x509

from controller.agents import AgentCallFailed, AgentLinks
from controller.core.records import VmRole
from gleaner_common import pki
from gleaner_common.identity import Role, spiffe_uri
from gleaner_common.pki import TlsFiles
from protos import agent_pb2, agent_pb2_grpc, controller_pb2, controller_pb2_grpc
from tests.agentproc import REPO, AgentProcess, launch_request, odd_certificate, wait_for
from tests.controllerproc import ControllerProcess, agent_settings, rpc_code

DENIED = grpc.StatusCode.PERMISSION_DENIED
U64 = 2**64 - 1
U32 = 2**32 - 1


@pytest.fixture(scope="module")
def controller(test_env):
    proc = ControllerProcess(test_env, name="sec").start()
    yield proc
    proc.stop()


@pytest.fixture(scope="module")
def test_agent(test_env, controller):
    """An agent on the test:/// driver that reports to the controller as node 'sec-a'."""
    proc = AgentProcess(test_env, name="sec-a", settings=agent_settings(
        controller, libvirt_uri="test:///default", metrics_listen="")).start()
    wait_for(lambda: controller.node_state("sec-a") == "up", 20, "sec-a to report")
    yield proc
    proc.stop()


def controller_state(controller: ControllerProcess) -> tuple:
    stub = controller.stub()
    return (stub.GetBackfill(controller_pb2.GetBackfillRequest(), timeout=10),
            stub.ListReserves(controller_pb2.ListReservesRequest(), timeout=10),
            *(lambda status: (status.hints, status.settings_json))(
                stub.GetReserveStatus(controller_pb2.ReserveStatusRequest(), timeout=10)),
            sorted((l.lease_id, l.node_id, l.state) for l in controller.leases()),
            sorted(n.node_id for n in stub.ListNodes(controller_pb2.ListNodesRequest(), timeout=10).nodes))


def report(node_id: str, address: str = "127.0.0.1:1", **fields) -> controller_pb2.NodeReport:
    values = dict(node_id=node_id, agent_address=address, cpus=4, memory_mib=8192, images=["tiny"],
                  min_memory_mib=32)
    values.update(fields)
    return controller_pb2.NodeReport(**values)


def send_reports(controller: ControllerProcess, tls: TlsFiles, reports: list) -> grpc.StatusCode | None:
    with controller.channel(tls) as channel:
        stub = controller_pb2_grpc.ControllerStub(channel)
        return rpc_code(lambda: stub.Report(iter(reports), timeout=10))


def denial_detail(call) -> str:
    with pytest.raises(grpc.RpcError) as err:
        call()
    assert err.value.code() == DENIED, err.value.details()
    return err.value.details()


# Every call that changes the pool, as an intruder would make it.
MUTATING_CONTROLLER_CALLS = {
    "RequestVm": lambda s: s.RequestVm(controller_pb2.VmRequest(vcpus=1, memory_mib=128, image="tiny",
                                                                owner="eve", request_id="sec-req"), timeout=10),
    "Release": lambda s: s.Release(controller_pb2.ReleaseRequest(lease_id="od-anything"), timeout=10),
    "CancelRequest": lambda s: s.CancelRequest(controller_pb2.CancelRequestRequest(request_id="sec-req"),
                                               timeout=10),
    "SetBackfill": lambda s: s.SetBackfill(controller_pb2.SetBackfillRequest(enabled=True, max_instances=9),
                                           timeout=10),
    "SetReserve": lambda s: s.SetReserve(controller_pb2.Reserve(node_id="*", vcpus=3), timeout=10),
    "AddHint": lambda s: s.AddHint(controller_pb2.AddHintRequest(nodes=1, in_hours=1, for_hours=1, label="eve"),
                                   timeout=10),
    "CancelHints": lambda s: s.CancelHints(controller_pb2.CancelHintsRequest(), timeout=10),
    "SetReserveSettings": lambda s: s.SetReserveSettings(controller_pb2.SetReserveSettingsRequest(static_nodes=5),
                                                         timeout=10),
}


def test_every_mutating_controller_call_needs_an_admin(controller, test_env):
    before = controller_state(controller)
    intruders = {"viewer": test_env.pki.viewer, "agent": test_env.pki.agent("sec-a"),
                 "controller": test_env.pki.controller}
    for who, tls in intruders.items():
        stub = controller.stub(tls)
        for method, call in MUTATING_CONTROLLER_CALLS.items():
            detail = denial_detail(lambda: call(stub))
            assert f"may not call /gleaner.controller.v1.Controller/{method}" in detail and who in detail
    assert controller_state(controller) == before
    # and an admin may: the table is not simply closed
    assert controller.stub().SetReserve(controller_pb2.Reserve(node_id="sec-x", vcpus=1), timeout=10).reserves
    controller.stub().SetReserve(controller_pb2.Reserve(node_id="sec-x"), timeout=10)


def test_only_agents_report_and_only_for_their_own_node(controller, test_env):
    before = controller_state(controller)
    for tls in (test_env.pki.admin, test_env.pki.viewer, test_env.pki.controller):
        assert send_reports(controller, tls, [report("sec-b")]) == DENIED
    # node sec-b's agent speaking for sec-c: refused, and sec-c never appears
    assert send_reports(controller, test_env.pki.agent("sec-b"), [report("sec-c")]) == DENIED
    assert controller_state(controller) == before
    # one stream, two nodes: the first report is its own, the second is refused and ends the stream
    assert send_reports(controller, test_env.pki.agent("sec-b"), [report("sec-b"), report("sec-c")]) == DENIED
    nodes = controller_state(controller)[-1]   # the node ids come last
    assert "sec-b" in nodes and "sec-c" not in nodes


def test_bytes_that_are_no_message_are_refused_as_invalid_not_internal(controller, test_env):
    """Raw bytes on the wire (no protobuf client): an authorized caller hears INVALID_ARGUMENT
    naming the call, not INTERNAL; anyone else is refused before the bytes are looked at; the
    controller changes nothing and keeps serving."""
    before = controller_state(controller)
    junk = b"\xff\xff\xff\xff\x0f"   # a field number 0 varint: no message parses it
    method = "/gleaner.controller.v1.Controller/RequestVm"
    with controller.channel(test_env.pki.admin) as channel:
        with pytest.raises(grpc.RpcError) as err:
            channel.unary_unary(method)(junk, timeout=10)
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT, err.value.details()
        assert f"not a valid message for {method}" in err.value.details()
        with pytest.raises(grpc.RpcError) as err:
            channel.stream_unary("/gleaner.controller.v1.Controller/Report")(iter([junk]), timeout=10)
        assert err.value.code() == DENIED   # an admin may not report, whatever the bytes
    with controller.channel(test_env.pki.agent("sec-junk")) as channel:
        with pytest.raises(grpc.RpcError) as err:
            channel.stream_unary("/gleaner.controller.v1.Controller/Report")(iter([junk]), timeout=10)
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT, err.value.details()
    with controller.channel(test_env.pki.viewer) as channel:
        with pytest.raises(grpc.RpcError) as err:
            channel.unary_unary(method)(junk, timeout=10)
        assert err.value.code() == DENIED
    assert controller_state(controller) == before


def test_a_node_cannot_touch_another_nodes_leases(controller, test_env, test_agent):
    """Empty reports and adoption tricks from node sec-d leave node sec-a's VM and lease alone."""
    agent_stub = test_agent.stub()
    name = "gtest-sec-owned"
    agent_stub.LaunchDomain(launch_request(name, agent_pb2.ROLE_ON_DEMAND, lease_id="sec-lease-1"), timeout=30)
    try:
        lease = wait_for(lambda: [l for l in controller.leases() if l.vm_name == name], 20, "the VM to be adopted")[0]
        assert lease.node_id == "sec-a" and lease.state == "running"
        attacker = test_env.pki.agent("sec-d")
        hijack = [report("sec-d"), report("sec-d"),   # empty reports: nothing of sec-a's may change
                  report("sec-d", vms=[controller_pb2.ReportedVm(name=name, role="on_demand", vcpus=1, memory_mib=128,
                                                                 state="running")]),
                  report("sec-d", vms=[controller_pb2.ReportedVm(name="gtest-sec-other", lease_id=lease.lease_id,
                                                                 role="on_demand", vcpus=1, memory_mib=128,
                                                                 state="running")])]
        assert send_reports(controller, attacker, hijack) is None
        time.sleep(1)
        after = [l for l in controller.leases() if l.lease_id == lease.lease_id]
        assert [(l.node_id, l.vm_name, l.state) for l in after] == [("sec-a", name, "running")]
        assert not [l for l in controller.leases() if l.node_id == "sec-d"]  # nothing adopted onto sec-d
        conflicts = controller.events("vm.conflict")
        assert {json.loads(e.detail_json)["vm"] for e in conflicts} >= {name, "gtest-sec-other"}
    finally:
        agent_stub.TerminateDomain(agent_pb2.TerminateDomainRequest(name=name, force=True), timeout=30)


def test_out_of_range_values_are_refused_and_change_nothing(controller, test_env):
    before = controller_state(controller)
    stub = controller.stub()
    bad = [
        lambda: stub.RequestVm(controller_pb2.VmRequest(vcpus=1, memory_mib=U64, image="tiny", owner="a",
                                                        request_id="sec-big1"), timeout=10),
        lambda: stub.RequestVm(controller_pb2.VmRequest(vcpus=U32, memory_mib=128, image="tiny", owner="a",
                                                        request_id="sec-big2"), timeout=10),
        lambda: stub.SetBackfill(controller_pb2.SetBackfillRequest(duration_seconds=U64), timeout=10),
        lambda: stub.SetBackfill(controller_pb2.SetBackfillRequest(max_instances=U32), timeout=10),
        lambda: stub.SetBackfill(controller_pb2.SetBackfillRequest(memory_mb=U32), timeout=10),
        lambda: stub.SetReserve(controller_pb2.Reserve(node_id="*", memory_mib=U64), timeout=10),
        lambda: stub.SetReserve(controller_pb2.Reserve(node_id="*", vcpus=U32), timeout=10),
        lambda: stub.ListEvents(controller_pb2.ListEventsRequest(after_seq=U64), timeout=10),
        lambda: stub.ListEvents(controller_pb2.ListEventsRequest(kind="x" * 1000), timeout=10),
    ]
    for call in bad:
        assert rpc_code(call) == grpc.StatusCode.INVALID_ARGUMENT
    events = stub.ListEvents(controller_pb2.ListEventsRequest(limit=U32), timeout=10).events
    assert len(events) <= 1000
    agent = test_env.pki.agent("sec-e")
    for fields in ({"cpus": 10**6}, {"memory_mib": U64}, {"foreground_cpu_cores": float("nan")},
                   {"vms": [controller_pb2.ReportedVm(name="v", role="backfill", vcpus=64, memory_mib=128)]},
                   {"vms": [controller_pb2.ReportedVm(name="v", role="backfill", vcpus=1, memory_mib=U64)]},
                   {"vms": [controller_pb2.ReportedVm(name="../v", role="backfill", vcpus=1, memory_mib=1)]},
                   {"vms": [controller_pb2.ReportedVm(name="v", role="backfill", vcpus=1, memory_mib=1,
                                                      work_state="asleep")]},
                   {"vms": [controller_pb2.ReportedVm(name="v", role="backfill", vcpus=1, memory_mib=1,
                                                      work_state="busy", work_for_s=-1.0)]},
                   {"vms": [controller_pb2.ReportedVm(name="v", role="backfill", vcpus=1, memory_mib=1,
                                                      work_state="busy", work_for_s=float("inf"))]}):
        assert send_reports(controller, agent, [report("sec-e", **fields)]) == grpc.StatusCode.INVALID_ARGUMENT
    assert controller_state(controller) == before
    assert controller.events("report.refused")  # audited (at most once a minute per node)


def expired_certificate(lab: pki.LabPki, tmp_path) -> TlsFiles:
    """An admin certificate from the lab CA whose validity ended yesterday."""
    return odd_certificate(lab, tmp_path, "expired", [x509.UniformResourceIdentifier(spiffe_uri(Role.ADMIN, "expired"))],
                           valid_days=(-10, -1))


def test_revoked_and_expired_certificates_are_refused(controller, test_env, test_agent, tmp_path):
    lab = test_env.pki
    mallory = pki.issue(lab.directory, Role.ADMIN, "mallory")
    rogue = pki.issue(lab.directory, Role.CONTROLLER, "rogue")
    status = lambda tls: controller.stub(tls).Status(controller_pb2.StatusRequest(), timeout=10)  # noqa: E731
    listing = lambda tls: test_agent.stub(tls).ListDomains(agent_pb2.ListDomainsRequest(), timeout=10)  # noqa: E731
    assert rpc_code(lambda: status(mallory)) is None and rpc_code(lambda: listing(rogue)) is None
    pki.revoke(lab.directory, str(mallory.cert), "test: a stolen laptop")
    pki.revoke(lab.directory, str(rogue.cert), "test: a decommissioned controller")
    assert rpc_code(lambda: status(mallory)) is None  # not yet: the servers read the list on SIGHUP
    controller.process.send_signal(signal.SIGHUP)
    test_agent.process.send_signal(signal.SIGHUP)
    wait_for(lambda: rpc_code(lambda: status(mallory)) == DENIED, 10, "the controller to reload its deny list")
    wait_for(lambda: rpc_code(lambda: listing(rogue)) == DENIED, 10, "the agent to reload its deny list")
    assert "revoked" in denial_detail(lambda: status(mallory))
    assert rpc_code(lambda: status(test_env.pki.admin)) is None  # others are still served
    expired = expired_certificate(lab, tmp_path)
    assert rpc_code(lambda: status(expired)) == grpc.StatusCode.UNAVAILABLE  # the TLS handshake refuses it
    assert rpc_code(lambda: listing(expired)) == grpc.StatusCode.UNAVAILABLE


def serial_of(tls: TlsFiles) -> int:
    return x509.load_pem_x509_certificate(tls.cert.read_bytes()).serial_number


def sighup(*servers) -> None:
    for server in servers:
        server.process.send_signal(signal.SIGHUP)


def test_a_bad_deny_list_on_sighup_keeps_the_one_in_force_and_the_servers_serving(controller, test_env,
                                                                                   test_agent):
    lab, deny = test_env.pki, test_env.pki.deny_list
    original = deny.read_text() if deny.exists() else ""
    ivan = pki.issue(lab.directory, Role.ADMIN, "sec-ivan")     # revoked by a good list: stays revoked
    judy = pki.issue(lab.directory, Role.VIEWER, "sec-judy")    # named only in the bad list: stays served
    status = lambda tls: rpc_code(lambda: controller.stub(tls).Status(controller_pb2.StatusRequest(),  # noqa: E731
                                                                      timeout=10))
    listing = lambda tls: rpc_code(lambda: test_agent.stub(tls).ListDomains(  # noqa: E731
        agent_pb2.ListDomainsRequest(), timeout=10))
    rejected = lambda server: [l for l in server.log_text().splitlines()  # noqa: E731
                               if "event=tls.deny_list_rejected" in l]
    try:
        pki.revoke(lab.directory, str(ivan.cert), "test: revoked before the typo")
        sighup(controller, test_agent)
        wait_for(lambda: status(ivan) == DENIED and listing(ivan) == DENIED, 10, "the good list to be in force")
        seen = {server.name: len(rejected(server)) for server in (controller, test_agent)}
        with open(deny, "a") as handle:
            handle.write(f"{serial_of(judy):x}\nnot-a-serial  # a typo\n")
        bad_line = len(deny.read_text().splitlines())
        sighup(controller, test_agent)
        for server in (controller, test_agent):
            wait_for(lambda: len(rejected(server)) > seen[server.name], 10, f"{server.name} to log the bad list")
            line = rejected(server)[-1]
            assert f"file={deny}" in line and f"line={bad_line}" in line and "level=error" in line, line
            assert server.process.poll() is None
        assert status(ivan) == DENIED and listing(ivan) == DENIED      # the list in force still holds
        assert status(judy) is None and listing(judy) is None          # and the bad one was not half applied
        assert status(lab.admin) is None and listing(lab.viewer) is None
    finally:
        deny.write_text(original)
        sighup(controller, test_agent)


def test_revocation_ends_open_streams(controller, test_env, test_agent):
    """A revoked agent's live report stream and a revoked viewer's event stream are cut off after
    SIGHUP, with PERMISSION_DENIED naming the call; the node's reports stop."""
    lab = test_env.pki
    node, watcher = lab.agent("sec-rev"), pki.issue(lab.directory, Role.VIEWER, "sec-watcher")
    stop = threading.Event()

    def reports():
        while not stop.is_set():
            yield report("sec-rev")
            time.sleep(0.3)
    with controller.channel(node) as to_controller, test_agent.channel(watcher) as to_agent:
        try:
            reporting = controller_pb2_grpc.ControllerStub(to_controller).Report.future(reports(), timeout=60)
            events = agent_pb2_grpc.NodeAgentStub(to_agent).WatchEvents(agent_pb2.WatchEventsRequest(), timeout=60)
            wait_for(lambda: controller.node_state("sec-rev") == "up", 10, "the node's reports")
            assert not reporting.done() and events.is_active()
            pki.revoke(lab.directory, str(node.cert), "test: a stolen node key")
            pki.revoke(lab.directory, str(watcher.cert), "test: left the team")
            sighup(controller, test_agent)
            with pytest.raises(grpc.RpcError) as cut:
                reporting.result(timeout=10)
            assert cut.value.code() == DENIED and "revoked" in cut.value.details()
            assert "Controller/Report" in cut.value.details()
            with pytest.raises(grpc.RpcError) as watched:
                list(events)
            assert watched.value.code() == DENIED and "NodeAgent/WatchEvents" in watched.value.details()
            wait_for(lambda: controller.node_state("sec-rev") != "up", 15, "the cut-off node to go suspect")
        finally:
            stop.set()


def test_revoked_and_expired_admins_cannot_change_the_pool(controller, test_env, tmp_path):
    lab = test_env.pki
    kim = pki.issue(lab.directory, Role.ADMIN, "sec-kim")
    pki.revoke(lab.directory, str(kim.cert), "test: a stolen laptop")
    sighup(controller)
    wait_for(lambda: rpc_code(lambda: controller.stub(kim).Status(controller_pb2.StatusRequest(), timeout=10))
             == DENIED, 10, "the controller to reload its deny list")
    before = controller_state(controller)
    for tls, refused in ((kim, DENIED), (expired_certificate(lab, tmp_path), grpc.StatusCode.UNAVAILABLE)):
        stub = controller.stub(tls)
        for method, call in MUTATING_CONTROLLER_CALLS.items():
            assert rpc_code(lambda: call(stub)) == refused, method
    assert controller_state(controller) == before


def test_the_agent_logs_a_summary_of_repeated_denials(test_env):
    """Logged once as it happens, then counted: the summary at the end of the window (here, at
    stop) names the identity, the call and how often."""
    proc = AgentProcess(test_env, name="sec-deny", settings=dict(libvirt_uri="test:///default", metrics_listen=""))
    proc.start()
    try:
        stub = proc.stub(test_env.pki.viewer)
        for _ in range(30):
            assert rpc_code(lambda: stub.TerminateDomain(agent_pb2.TerminateDomainRequest(name="x", force=True),
                                                         timeout=10)) == DENIED
    finally:
        proc.stop()
    lines = proc.log_text().splitlines()
    assert len([l for l in lines if "event=rpc.denied " in l]) == 1
    (summary,) = [l for l in lines if "event=rpc.denied_summary" in l]
    assert "identity=viewer/lab-viewer" in summary and "NodeAgent/TerminateDomain" in summary
    assert "count=30" in summary


def test_the_controller_reaches_a_node_only_through_that_nodes_certificate(test_env, test_agent):
    """A node reporting another agent's address cannot make the controller act there."""
    links = AgentLinks(test_env.pki.controller, timeout_seconds=10)
    try:
        before = [d.name for d in test_agent.stub().ListDomains(agent_pb2.ListDomainsRequest(), timeout=10).domains]
        with pytest.raises(AgentCallFailed, match="UNAVAILABLE"):
            links.launch("sec-z", test_agent.address, "gtest-sec-hijack", VmRole.ON_DEMAND, 1, 128, "tiny", "x")
        after = [d.name for d in test_agent.stub().ListDomains(agent_pb2.ListDomainsRequest(), timeout=10).domains]
        assert after == before
        links.launch("sec-a", test_agent.address, "gtest-sec-right", VmRole.ON_DEMAND, 1, 128, "tiny", "x")
        test_agent.stub().TerminateDomain(agent_pb2.TerminateDomainRequest(name="gtest-sec-right", force=True),
                                          timeout=30)
    finally:
        links.close()


def test_every_mutating_agent_call_needs_the_controller(test_env, test_agent):
    stub_for = lambda tls: agent_pb2_grpc.NodeAgentStub(test_agent.channel(tls))  # noqa: E731
    listing = lambda: [d.name for d in test_agent.stub().ListDomains(agent_pb2.ListDomainsRequest(),  # noqa: E731
                                                                     timeout=10).domains]
    before = listing()
    calls = {
        "LaunchDomain": lambda s: s.LaunchDomain(launch_request("gtest-sec-nope"), timeout=10),
        "TerminateDomain": lambda s: s.TerminateDomain(agent_pb2.TerminateDomainRequest(name="x", force=True),
                                                       timeout=10),
        "SetDomainClass": lambda s: s.SetDomainClass(agent_pb2.SetDomainClassRequest(
            name="x", priority_class=agent_pb2.PRIORITY_CLASS_FOREGROUND), timeout=10),
    }
    for who, tls in (("admin", test_env.pki.admin), ("viewer", test_env.pki.viewer),
                     ("agent", test_env.pki.agent("sec-b"))):
        stub = stub_for(tls)
        for method, call in calls.items():
            detail = denial_detail(lambda: call(stub))
            assert f"may not call /gleaner.agent.v1.NodeAgent/{method}" in detail and who in detail
    # another node's agent may not even read
    denial_detail(lambda: stub_for(test_env.pki.agent("sec-b")).ListDomains(agent_pb2.ListDomainsRequest(),
                                                                            timeout=10))
    assert rpc_code(lambda: stub_for(test_env.pki.viewer).ListDomains(agent_pb2.ListDomainsRequest(),
                                                                      timeout=10)) is None
    assert listing() == before


def test_denials_reach_the_audit_log_in_bounded_rows(test_env):
    """A flood of denials costs one audit row per (identity, method, reason) per interval."""
    proc = ControllerProcess(test_env, name="sec-audit").start()
    try:
        stub = proc.stub(test_env.pki.viewer)
        for _ in range(200):
            rpc_code(lambda: stub.SetBackfill(controller_pb2.SetBackfillRequest(enabled=True), timeout=10))
    finally:
        proc.stop()  # stopping flushes the denial counts into the audit log
    proc.start()
    try:
        rows = proc.events("rpc.denied")
        assert len(rows) == 1
        detail = json.loads(rows[0].detail_json)
        assert detail["count"] == 200 and detail["identity"] == "viewer/lab-viewer"
        assert detail["method"].endswith("/SetBackfill")
        assert proc.log_text().count("event=rpc.denied") == 1  # logged once, counted 200 times
    finally:
        proc.stop()


def test_oversized_messages_are_refused_and_the_server_stays_up(controller, test_env):
    huge = controller_pb2.VmRequest(vcpus=1, memory_mib=128, image="tiny", owner="a" * (5 * 2**20),
                                    request_id="sec-huge")
    assert rpc_code(lambda: controller.stub().RequestVm(huge, timeout=10)) == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert rpc_code(lambda: controller.stub().Status(controller_pb2.StatusRequest(), timeout=10)) is None


def test_a_second_server_cannot_share_a_port(controller, test_env):
    """No SO_REUSEPORT: a second controller on the same port fails to start instead of serving beside it."""
    twin = ControllerProcess(test_env, name="sec-twin", port=controller.port)
    twin.write_config()
    done = subprocess.run([sys.executable, "-m", "controller", "--config", str(twin.config_path)], cwd=REPO,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 1 and "cannot listen on" in done.stderr, done.stderr
    assert rpc_code(lambda: controller.stub().Status(controller_pb2.StatusRequest(), timeout=10)) is None

"""Clients check the servers they dial against their deny list (issue 23, item 5): the
controller dialling an agent, an agent reporting to the controller, and gleanctl. Real gRPC
servers with mutual TLS and the project's certificates; the servers' methods answer empty
messages (what is under test is the client's refusal, not the service)."""
from __future__ import annotations

import threading
import time
from dataclasses import replace
from pathlib import Path

import grpc
import pytest

from controller.agents import AgentCallFailed, AgentLinks
from controller.core.records import VmRole
from controller.gleanctl import main as gleanctl_main
from gleaner_common import pki
from gleaner_common.authz import EVERYONE, DenyList, Limits, Rule
from gleaner_common.identity import Role
from gleaner_common.rpc import ServerSettings, ServerRefused, channel_to, start_server
from protos import agent_pb2, controller_pb2, controller_pb2_grpc

AGENT = "/gleaner.agent.v1.NodeAgent/"
CONTROLLER = "/gleaner.controller.v1.Controller/"


@pytest.fixture()
def lab(tmp_path):
    return pki.ensure_lab_pki(tmp_path / "pki", ("node1",))


def serve(tls: pki.TlsFiles, service: str, handlers: dict, port: int = 0):
    """A real server with `tls` as its certificate, answering `handlers` for anyone."""
    rules = {f"/{service}/{method}": Rule(EVERYONE) for method in handlers}
    settings = ServerSettings(f"127.0.0.1:{port}", tls, DenyList(None), Limits(), workers=8)
    running = start_server(settings, service, lambda server: server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler(service, handlers),)), rules)
    return running, f"127.0.0.1:{running.port}"


def agent_server(tls: pki.TlsFiles, port: int = 0):
    launched = []

    def launch(request, _context):
        launched.append(agent_pb2.LaunchDomainRequest.FromString(request).name)
        return agent_pb2.LaunchDomainResponse().SerializeToString()
    running, address = serve(tls, "gleaner.agent.v1.NodeAgent",
                             {"LaunchDomain": grpc.unary_unary_rpc_method_handler(launch)}, port)
    return running, address, launched


def controller_server(tls: pki.TlsFiles):
    reports = []

    def report(requests, _context):
        for message in requests:
            reports.append(controller_pb2.NodeReport.FromString(message).seq)
        return controller_pb2.ReportAck().SerializeToString()

    def status(_request, _context):
        return controller_pb2.PoolStatus(nodes_up=3).SerializeToString()
    running, address = serve(tls, "gleaner.controller.v1.Controller", {
        "Report": grpc.stream_unary_rpc_method_handler(report),
        "Status": grpc.unary_unary_rpc_method_handler(status)})
    return running, address, reports


def client_deny_list(lab, tmp_path: Path, *revoked: pki.TlsFiles) -> Path:
    """The client's own copy of the deny list (as an admin copies revoked.txt to each host)."""
    path = tmp_path / f"client-{len(list(tmp_path.glob('client-*')))}.txt"
    for files in revoked:
        pki.revoke(lab.directory, str(files.cert), "key stolen")
    path.write_text((lab.directory / pki.DENY_LIST).read_text() if revoked else "")
    return path


def launch(links: AgentLinks, address: str) -> None:
    links.launch("node1", address, "vm-1", VmRole.BACKFILL, 1, 128, "tiny", "lease-1")


# -- the controller dialling an agent ---------------------------------------------------------------

def test_the_controller_refuses_an_agent_whose_certificate_is_revoked(lab, tmp_path):
    running, address, launched = agent_server(lab.agent("node1"))
    try:
        good = AgentLinks(replace(lab.controller, deny_list=client_deny_list(lab, tmp_path)), 5)
        launch(good, address)
        assert launched == ["vm-1"]                      # unrevoked: it works
        good.close()
        links = AgentLinks(replace(lab.controller, deny_list=client_deny_list(lab, tmp_path, lab.agent("node1"))), 5)
        serial = pki.describe(lab.agent("node1").cert)["serial"]
        with pytest.raises(AgentCallFailed) as refused:
            launch(links, address)
        assert f"revoked certificate (serial {serial}" in str(refused.value)
        assert launched == ["vm-1"]                      # the revoked server never got the call
        links.close()
    finally:
        running.stop(0)


def test_a_revocation_takes_effect_at_the_next_call_on_an_open_channel(lab, tmp_path):
    running, address, launched = agent_server(lab.agent("node1"))
    deny = client_deny_list(lab, tmp_path)
    links = AgentLinks(replace(lab.controller, deny_list=deny), 5)
    try:
        launch(links, address)
        pki.revoke(lab.directory, str(lab.agent("node1").cert))
        deny.write_text((lab.directory / pki.DENY_LIST).read_text())   # no SIGHUP: the file changed
        with pytest.raises(AgentCallFailed, match="revoked certificate"):
            launch(links, address)
        assert launched == ["vm-1"]
    finally:
        links.close()
        running.stop(0)


def test_the_channel_is_pinned_to_the_certificate_it_checked(lab, tmp_path):
    """A server swapped behind the address after the check (a relay answering the check with the
    real agent, the call with a stolen, revoked key) fails the handshake: the channel insists on
    the name only the checked certificate carries."""
    stolen = pki.issue(lab.directory, Role.AGENT, "node1", lab.hosts, out_dir=tmp_path / "stolen")
    deny = client_deny_list(lab, tmp_path, stolen)
    running, address, launched = agent_server(lab.agent("node1"))
    links = AgentLinks(replace(lab.controller, deny_list=deny), 3)
    try:
        launch(links, address)
        running.stop(0)
        impostor, same_address, impostor_launched = agent_server(stolen, port=int(address.rpartition(":")[2]))
        assert same_address == address
        try:
            with pytest.raises(AgentCallFailed):     # within the 30 s the check holds, no new check yet
                launch(links, address)
            assert impostor_launched == []
        finally:
            impostor.stop(0)
    finally:
        links.close()


# -- an agent reporting to the controller ------------------------------------------------------------

def reports(n: int, pause: float = 0.0, sent: list | None = None):
    for seq in range(1, n + 1):
        if sent is not None:
            sent.append(seq)
        yield controller_pb2.NodeReport(node_id="node1", seq=seq)
        time.sleep(pause)


def test_an_agent_refuses_a_revoked_controller(lab, tmp_path):
    running, address, received = controller_server(lab.controller)
    agent_tls = lab.agent("node1")
    try:
        with channel_to(Role.CONTROLLER, "", address, replace(agent_tls, deny_list=client_deny_list(lab, tmp_path))) \
                as channel:
            controller_pb2_grpc.ControllerStub(channel).Report(reports(2), timeout=5)
        assert received == [1, 2]
        deny = client_deny_list(lab, tmp_path, lab.controller)
        with channel_to(Role.CONTROLLER, "", address, replace(agent_tls, deny_list=deny)) as channel:
            with pytest.raises(ServerRefused) as refused:
                controller_pb2_grpc.ControllerStub(channel).Report(reports(2), timeout=5)
        assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
        assert pki.describe(lab.controller.cert)["serial"] in refused.value.details()
        assert received == [1, 2]
    finally:
        running.stop(0)


def test_an_open_report_stream_ends_when_the_controller_is_revoked(lab, tmp_path):
    running, address, received = controller_server(lab.controller)
    deny = client_deny_list(lab, tmp_path)
    sent: list[int] = []
    outcome: list[BaseException | None] = []

    def report() -> None:
        with channel_to(Role.CONTROLLER, "", address, replace(lab.agent("node1"), deny_list=deny)) as channel:
            try:
                controller_pb2_grpc.ControllerStub(channel).Report(reports(1000, 0.05, sent), timeout=60)
                outcome.append(None)
            except grpc.RpcError as exc:
                outcome.append(exc)
    thread = threading.Thread(target=report)
    try:
        thread.start()
        deadline = time.monotonic() + 10
        while len(sent) < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
        pki.revoke(lab.directory, str(lab.controller.cert))
        deny.write_text((lab.directory / pki.DENY_LIST).read_text())
        revoked_at = time.monotonic()
        thread.join(10)
        assert not thread.is_alive()
        assert isinstance(outcome[0], ServerRefused), outcome
        assert time.monotonic() - revoked_at < 2
        assert len(sent) < 100
    finally:
        running.stop(0)


# -- gleanctl dialling the controller -----------------------------------------------------------------

def gleanctl(config: Path, address: str, capsys) -> tuple[int, str, str]:
    code = gleanctl_main(["--config", str(config), "--controller", address, "status"])
    out = capsys.readouterr()
    return code, out.out, out.err


def gleanctl_config(tmp_path: Path, admin: pki.TlsFiles, deny: Path) -> Path:
    path = tmp_path / "gleanctl.toml"
    path.write_text(f'[tls]\nca = "{admin.ca}"\ncert = "{admin.cert}"\nkey = "{admin.key}"\ndeny_list = "{deny}"\n')
    return path


def test_gleanctl_refuses_a_revoked_controller(lab, tmp_path, capsys):
    running, address, _ = controller_server(lab.controller)
    try:
        code, out, err = gleanctl(gleanctl_config(tmp_path, lab.admin, client_deny_list(lab, tmp_path)), address,
                                  capsys)
        assert code == 0, err
        deny = client_deny_list(lab, tmp_path, lab.controller)
        code, out, err = gleanctl(gleanctl_config(tmp_path, lab.admin, deny), address, capsys)
        serial = pki.describe(lab.controller.cert)["serial"]
        assert code == 5 and f"revoked certificate (serial {serial}" in err and "Traceback" not in err
    finally:
        running.stop(0)


def test_a_bad_client_deny_list_is_a_clear_error(lab, tmp_path, capsys):
    deny = tmp_path / "deny.txt"
    deny.write_text("zz-not-hex\n")
    code, _out, err = gleanctl(gleanctl_config(tmp_path, lab.admin, deny), "127.0.0.1:1", capsys)
    assert code == 5 and f"against the deny list: deny list {deny}, line 1" in err and "Traceback" not in err
    # the controller's calls: refused as the agent's failure, never an exception of another kind
    links = AgentLinks(replace(lab.controller, deny_list=deny), 5)
    with pytest.raises(AgentCallFailed, match="line 1"):
        launch(links, "127.0.0.1:1")
    links.close()

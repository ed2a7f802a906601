"""Mutual TLS, the standard health and reflection services, and insecure mode's limits."""
from __future__ import annotations

import subprocess
import sys

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from gleaner_common.pki import TlsFiles, ensure_lab_pki
from protos import agent_pb2, agent_pb2_grpc
from tests.agentproc import REPO


def test_client_with_a_certificate_from_our_ca_is_served(agent):
    host = agent.stub().DescribeHost(agent_pb2.DescribeHostRequest(), timeout=10)
    assert host.cpus > 0


def test_client_without_a_certificate_is_refused(agent):
    ca_only = grpc.ssl_channel_credentials(root_certificates=agent.env.pki.admin.ca.read_bytes())
    with grpc.secure_channel(agent.address, ca_only) as channel:
        with pytest.raises(grpc.RpcError) as err:
            agent_pb2_grpc.NodeAgentStub(channel).DescribeHost(agent_pb2.DescribeHostRequest(), timeout=5)
    assert err.value.code() == grpc.StatusCode.UNAVAILABLE


def test_client_with_a_certificate_from_another_ca_is_refused(agent, tmp_path):
    stranger = ensure_lab_pki(tmp_path / "other-ca").controller  # the right role, from the wrong CA
    # Trust the agent's CA (so the server check passes) but present a foreign client cert.
    files = TlsFiles(ca=agent.env.pki.admin.ca, cert=stranger.cert, key=stranger.key)
    with agent.channel(files) as channel:
        with pytest.raises(grpc.RpcError) as err:
            agent_pb2_grpc.NodeAgentStub(channel).DescribeHost(agent_pb2.DescribeHostRequest(), timeout=5)
    assert err.value.code() == grpc.StatusCode.UNAVAILABLE


def test_plaintext_client_is_refused(agent):
    with grpc.insecure_channel(agent.address) as channel:
        with pytest.raises(grpc.RpcError) as err:
            agent_pb2_grpc.NodeAgentStub(channel).DescribeHost(agent_pb2.DescribeHostRequest(), timeout=5)
    assert err.value.code() == grpc.StatusCode.UNAVAILABLE


def test_health_and_reflection_services(agent):
    with agent.channel(agent.env.pki.viewer) as channel:
        health = health_pb2_grpc.HealthStub(channel)
        status = health.Check(health_pb2.HealthCheckRequest(service="gleaner.agent.v1.NodeAgent"), timeout=5)
        assert status.status == health_pb2.HealthCheckResponse.SERVING
        stub = reflection_pb2_grpc.ServerReflectionStub(channel)
        replies = list(stub.ServerReflectionInfo(iter([reflection_pb2.ServerReflectionRequest(list_services="")]),
                                                 timeout=5))
        services = {s.name for s in replies[0].list_services_response.service}
    assert {"gleaner.agent.v1.NodeAgent", "grpc.health.v1.Health"} <= services


def run_agent(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "nodeagent", *args], capture_output=True, text=True,
                          cwd=REPO, timeout=30)


@pytest.mark.parametrize("listen", ["127.0.0.1:7443", "localhost:7443", "[::1]:7443", "0.0.0.0:7443",
                                    "10.1.2.3:7443", "example.org:7443"])
def test_insecure_mode_is_refused_anywhere_but_a_unix_socket(listen):
    """Loopback too: on TCP any local user could drive an agent that runs as root."""
    result = run_agent("--listen", listen, "--insecure")
    assert result.returncode == 2
    assert "insecure mode (no TLS) is only allowed on a unix socket" in result.stderr


def test_agent_without_tls_settings_refuses_to_start(tmp_path):
    config = tmp_path / "agent.toml"
    config.write_text('[agent]\nlisten = "127.0.0.1:7443"\n')
    result = run_agent("--config", str(config))
    assert result.returncode == 2
    assert "mutual TLS needs [tls] ca, cert, key" in result.stderr


def test_insecure_mode_on_a_unix_socket_serves_plaintext(test_env, tmp_path):
    socket = tmp_path / "agent.sock"
    config = tmp_path / "agent.toml"
    config.write_text(f'[agent]\nstate_dir = "{test_env.root / "insecure"}"\nimage_dir = "{test_env.image_dir}"\n'
                      '[libvirt]\ndomain_type = "qemu"\n[metrics]\nlisten = ""\n')
    proc = subprocess.Popen([sys.executable, "-m", "nodeagent", "--config", str(config),
                             "--listen", f"unix:{socket}", "--insecure"], cwd=REPO,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        with grpc.insecure_channel(f"unix:{socket}") as channel:
            grpc.channel_ready_future(channel).result(timeout=20)
            host = agent_pb2_grpc.NodeAgentStub(channel).DescribeHost(agent_pb2.DescribeHostRequest(), timeout=10)
        assert host.domain_type == "qemu"
    finally:
        proc.terminate()
        proc.wait(10)

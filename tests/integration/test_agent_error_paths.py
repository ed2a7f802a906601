"""The agent's error paths, driven for real (issue 23): a real agent on the real libvirtd (TCG
guests) is made to fail every way a launch or a terminate can, and answers each with the code
gRPC intends for it, never INTERNAL or UNKNOWN, leaving nothing behind:

* the host cannot: more memory or CPUs than it has, a full disk -> RESOURCE_EXHAUSTED;
* the host is not in a state for it: an image missing, corrupt or broken, a guest QEMU cannot
  start, a network that does not exist -> FAILED_PRECONDITION;
* libvirtd cannot be reached -> UNAVAILABLE;
* the name is taken by another spec -> ALREADY_EXISTS; a name the agent does not have -> NOT_FOUND.

A fuzz pass mixes these inputs with hypothesis, against the same real agent."""
from __future__ import annotations

import os
import subprocess

import grpc
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from protos import agent_pb2
from tests.agentproc import AgentProcess, domain_names, launch_request, unique_name

pytestmark = pytest.mark.libvirt

S = grpc.StatusCode
NEVER = {S.INTERNAL, S.UNKNOWN}


@pytest.fixture(scope="module")
def broken_images(test_env):
    """Images that pass every check of the request but that this host cannot boot."""
    images = test_env.image_dir
    (images / "corrupt.qcow2").write_bytes(b"QFI\xfb" + os.urandom(4096))   # a qcow2 magic, then junk
    bundle = images / "corrupt-disk"
    bundle.mkdir(mode=0o755)
    for part in ("vmlinuz", "initrd.img"):
        os.link(images / "tiny" / part, bundle / part)
    (bundle / "disk.qcow2").write_bytes(b"not a disk at all")
    # QEMU cannot load this kernel: the launch fails in libvirt after the domain is defined
    nokernel = images / "empty-kernel"
    nokernel.mkdir(mode=0o755)
    (nokernel / "vmlinuz").write_bytes(b"")
    for part in ("initrd.img", "disk.qcow2"):
        os.link(images / "tiny" / part, nokernel / part)
    return images


@pytest.fixture(scope="module")
def agent_for_errors(test_env, broken_images):
    proc = AgentProcess(test_env, name="errpaths").start()
    yield proc
    proc.stop()


def answer(call) -> tuple[S, str]:
    try:
        call()
    except grpc.RpcError as exc:
        return exc.code(), exc.details()
    return S.OK, ""


def launch(agent: AgentProcess, name: str, **fields) -> tuple[S, str]:
    return answer(lambda: agent.stub().LaunchDomain(launch_request(name, **fields), timeout=120))


def assert_nothing_left(agent: AgentProcess, name: str) -> None:
    assert name not in domain_names()
    assert not (agent.state_dir / "overlays" / f"{name}.qcow2").exists()
    assert not (agent.state_dir / "console" / f"{name}.work").exists()


def host(agent: AgentProcess) -> agent_pb2.HostDescription:
    return agent.stub().DescribeHost(agent_pb2.DescribeHostRequest(), timeout=30)


@pytest.mark.parametrize("fields,code,says", [
    (dict(image="does-not-exist"), S.FAILED_PRECONDITION, "no image 'does-not-exist' in the image directory"),
    (dict(image="corrupt.qcow2"), S.FAILED_PRECONDITION, "'corrupt.qcow2' is not a usable qcow2 image"),
    (dict(image="corrupt-disk"), S.FAILED_PRECONDITION, "'corrupt-disk' is not a usable qcow2 image"),
    (dict(image="empty-kernel"), S.FAILED_PRECONDITION, "rolled back"),
    (dict(vcpus=4096), S.RESOURCE_EXHAUSTED, "this host's CPUs"),
    (dict(memory_mib="host+1"), S.RESOURCE_EXHAUSTED, "this host's memory"),
    (dict(memory_mib=1 << 40), S.RESOURCE_EXHAUSTED, "this host's memory"),
    (dict(memory_mib=16), S.INVALID_ARGUMENT, "this host's memory"),   # too small anywhere: the request's fault
])
def test_each_failed_launch_has_its_intended_code(agent_for_errors, fields, code, says):
    if fields.get("memory_mib") == "host+1":
        fields = dict(fields, memory_mib=host(agent_for_errors).memory_mib + 1)
    name = unique_name("err")
    got, details = launch(agent_for_errors, name, **fields)
    assert (got, says in details) == (code, True), details
    assert_nothing_left(agent_for_errors, name)


def test_a_guest_qemu_cannot_start_is_a_precondition_named_by_libvirt(agent_for_errors):
    name = unique_name("nokernel")
    got, details = launch(agent_for_errors, name, image="empty-kernel")
    assert got == S.FAILED_PRECONDITION
    assert f"launch of '{name}' failed and was rolled back: start {name}:" in details
    assert "could not load kernel" in details
    assert_nothing_left(agent_for_errors, name)
    assert f"domain.launch_failed domain={name}" in agent_for_errors.log_text()
    assert "event=rpc.bug" not in agent_for_errors.log_text()


def test_a_name_with_another_spec_exists_and_an_unknown_name_is_not_found(agent_for_errors):
    name = unique_name("taken")
    stub = agent_for_errors.stub()
    stub.LaunchDomain(launch_request(name), timeout=120)
    try:
        got, details = launch(agent_for_errors, name, memory_mib=192)
        assert got == S.ALREADY_EXISTS and "memory_mib is 128, not 192" in details
    finally:
        stub.TerminateDomain(agent_pb2.TerminateDomainRequest(name=name, force=True), timeout=60)
    got, details = answer(lambda: stub.TerminateDomain(agent_pb2.TerminateDomainRequest(name=name), timeout=60))
    assert got == S.NOT_FOUND and "no domain" in details
    got, _details = answer(lambda: stub.SetDomainClass(agent_pb2.SetDomainClassRequest(
        name=unique_name("ghost"), priority_class=agent_pb2.PRIORITY_CLASS_FOREGROUND), timeout=60))
    assert got == S.NOT_FOUND


def test_a_network_the_host_lacks_fails_the_start_as_a_precondition(test_env):
    agent = AgentProcess(test_env, name="errnet", settings=dict(network_attach="network:gtest-nonet")).start()
    try:
        name = unique_name("nonet")
        got, details = launch(agent, name)
        assert got == S.FAILED_PRECONDITION and "rolled back" in details and "gtest-nonet" in details, details
        assert_nothing_left(agent, name)
    finally:
        agent.stop()


@pytest.fixture
def full_overlay_disk(test_env):
    """The agent's overlay directory on a 1 MiB tmpfs, filled to the last byte."""
    overlays = test_env.root / "errdisk" / "overlays"
    overlays.mkdir(parents=True)
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m,mode=0711", "tmpfs", str(overlays)],
                          capture_output=True, text=True)
    assert done.returncode == 0, f"cannot mount a small tmpfs for the disk-full fault: {done.stderr}"
    try:
        with open(overlays / "filler", "wb") as filler:
            try:
                while True:
                    filler.write(b"\0" * 65536)
                    filler.flush()
            except OSError:
                pass
        yield overlays
    finally:
        subprocess.run(["umount", "-l", str(overlays)], check=False)


def test_a_full_disk_is_exhaustion(test_env, full_overlay_disk):
    agent = AgentProcess(test_env, name="errdisk").start()
    try:
        name = unique_name("nodisk")
        got, details = launch(agent, name)
        assert got == S.RESOURCE_EXHAUSTED and os.strerror(28) in details, details   # ENOSPC
        assert name not in domain_names()
        assert sorted(p.name for p in full_overlay_disk.iterdir()) == ["filler"]
    finally:
        agent.stop()


def test_libvirtd_out_of_reach_is_unavailable(test_env):
    agent = AgentProcess(test_env, name="errgone",
                         settings=dict(libvirt_uri=f"qemu+unix:///system?socket={test_env.root}/no-libvirtd.sock"))
    agent.start()
    try:
        stub = agent.stub()
        for call in (lambda: stub.LaunchDomain(launch_request(unique_name("away")), timeout=30),
                     lambda: stub.TerminateDomain(agent_pb2.TerminateDomainRequest(name=unique_name("away")),
                                                  timeout=30),
                     lambda: stub.ListDomains(agent_pb2.ListDomainsRequest(), timeout=30)):
            got, details = answer(call)
            assert got == S.UNAVAILABLE and "cannot connect to libvirt" in details, details
    finally:
        agent.stop()


ERROR_IMAGES = ["does-not-exist", "corrupt.qcow2", "corrupt-disk", "empty-kernel", "tiny/../tiny", "/etc"]


def test_fuzzed_launches_into_the_error_paths_never_answer_internal(agent_for_errors):
    """Sizes around the host's, images that cannot boot: whatever the mix, a meaningful code."""
    facts = host(agent_for_errors)
    seen = set()

    @settings(max_examples=30, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
    # sizes that fit half the time, so the images' own failures are reached too
    @given(image=st.sampled_from(ERROR_IMAGES),
           vcpus=st.sampled_from([1] * 4 + [0, facts.cpus, facts.cpus + 1, 2**32 - 1]),
           memory_mib=st.sampled_from([128] * 4 + [0, 31, facts.memory_mib + 1, 2**64 - 1]),
           role=st.sampled_from([agent_pb2.ROLE_BACKFILL, agent_pb2.ROLE_ON_DEMAND]))
    def one(image, vcpus, memory_mib, role):
        name = unique_name("fz")
        got, details = launch(agent_for_errors, name, image=image, vcpus=vcpus, memory_mib=memory_mib, role=role)
        assert got not in NEVER and got != S.OK, f"{got.name}: {details}"
        seen.add(got)
        assert_nothing_left(agent_for_errors, name)
    one()
    assert {S.INVALID_ARGUMENT, S.FAILED_PRECONDITION, S.RESOURCE_EXHAUSTED} <= seen
    assert "event=rpc.bug" not in agent_for_errors.log_text()

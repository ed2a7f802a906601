"""Bad requests are refused with a message naming the field, and leave nothing behind."""
from __future__ import annotations

import os
import subprocess
import xml.etree.ElementTree as ET

import grpc
import libvirt
import pytest

from protos import agent_pb2
from tests.agentproc import TEST_PREFIX, domain_names, launch_request, unique_name


@pytest.fixture(scope="module")
def hostile_images(test_env):
    """Images that must be refused, next to the good one in the agent's image directory."""
    images = test_env.image_dir
    outside = test_env.root / "outside"
    outside.mkdir(exist_ok=True)
    subprocess.run(["qemu-img", "create", "-q", "-f", "qcow2", str(outside / "secret.qcow2"), "16M"], check=True)
    (images / "escape").symlink_to("/etc")
    (images / "secret-link.qcow2").symlink_to(outside / "secret.qcow2")
    subprocess.run(["qemu-img", "create", "-q", "-f", "qcow2", "-F", "qcow2", "-b", str(outside / "secret.qcow2"),
                    str(images / "sneaky-backing.qcow2")], check=True)
    (images / "no-initrd").mkdir()
    os.link(images / "tiny" / "vmlinuz", images / "no-initrd" / "vmlinuz")
    # Passes every check but QEMU cannot load its kernel: the launch fails after libvirt
    # has defined the domain, so the rollback is exercised for real.
    broken = images / "broken"
    broken.mkdir(mode=0o755)
    (broken / "vmlinuz").write_bytes(b"")
    for part in ("initrd.img", "disk.qcow2"):
        os.link(images / "tiny" / part, broken / part)
    return images


def assert_nothing_left(agent, name: str) -> None:
    assert name not in domain_names()
    assert not (agent.state_dir / "overlays" / f"{name}.qcow2").exists()


BAD_LAUNCHES = [  # (field, request fields, what the message must say)
    ("name", dict(name="../etc/passwd"), "is not valid: 1-63 letters, digits"),
    ("name", dict(name="x<y>"), "is not valid: 1-63 letters, digits"),
    ("name", dict(name="has space"), "is not valid: 1-63 letters, digits"),
    ("name", dict(name=""), "is not valid: 1-63 letters, digits"),
    ("name", dict(name="-leading-dash"), "is not valid: 1-63 letters, digits"),
    ("name", dict(name="a" * 64), "is not valid: 1-63 letters, digits"),
    ("name", dict(name="quote'name"), "is not valid: 1-63 letters, digits"),
    ("role", dict(role=agent_pb2.ROLE_UNSPECIFIED), "must be ROLE_ON_DEMAND or ROLE_BACKFILL"),
    ("vcpus", dict(vcpus=0), "this host's CPUs"),
    ("vcpus", dict(vcpus=4096), "this host's CPUs"),
    ("memory_mib", dict(memory_mib=0), "this host's memory"),
    ("memory_mib", dict(memory_mib=16), "this host's memory"),
    ("memory_mib", dict(memory_mib=1 << 40), "this host's memory"),
    ("image", dict(image=""), "is required"),
    ("image", dict(image="/var/lib/gleaner/images/tiny"), "is absolute"),
    ("image", dict(image="../images/tiny"), "'..' path part"),
    ("image", dict(image="tiny/../../outside"), "'..' path part"),
    ("image", dict(image="escape/passwd"), "resolves outside the image directory"),
    ("image", dict(image="secret-link.qcow2"), "resolves outside the image directory"),
    ("image", dict(image="sneaky-backing.qcow2"), "backing file outside the image directory"),
    ("image", dict(image="no-initrd"), "without initrd.img"),
    ("image", dict(image="does-not-exist"), "no image 'does-not-exist'"),
    ("kernel_cmdline", dict(kernel_cmdline="init=/bin/sh'; rm -rf /"), "outside the allowed set"),
    ("kernel_cmdline", dict(kernel_cmdline="</cmdline><kernel>/etc/shadow</kernel>"), "outside the allowed set"),
    ("kernel_cmdline", dict(kernel_cmdline="a" * 513), "at most 512"),
    ("kernel_cmdline", dict(kernel_cmdline="line\nbreak"), "outside the allowed set"),
    ("lease_id", dict(lease_id="lease with spaces"), "is not valid: 1-64 letters"),
    ("lease_id", dict(lease_id="<lease/>"), "is not valid: 1-64 letters"),
]


# Well formed, but more than this host has, or an image it lacks or has broken: not the request's
# form (issue 23; tests/integration/test_agent_error_paths.py has the rest)
NOT_THE_FORM = {("vcpus", 4096): grpc.StatusCode.RESOURCE_EXHAUSTED, ("memory_mib", 1 << 40): grpc.StatusCode.RESOURCE_EXHAUSTED,
                ("image", "no-initrd"): grpc.StatusCode.FAILED_PRECONDITION,
                ("image", "does-not-exist"): grpc.StatusCode.FAILED_PRECONDITION}


@pytest.mark.parametrize("field,bad,says", BAD_LAUNCHES,
                         ids=[f"{f}-{i}" for i, (f, _, _) in enumerate(BAD_LAUNCHES)])
def test_bad_launch_is_refused_naming_the_field(agent, stub, hostile_images, field, bad, says):
    bad = dict(bad)
    name = bad.pop("name", unique_name("bad"))
    with pytest.raises(grpc.RpcError) as err:
        stub.LaunchDomain(launch_request(name, **bad))
    assert err.value.code() == NOT_THE_FORM.get((field, bad.get(field)), grpc.StatusCode.INVALID_ARGUMENT)
    assert err.value.details().startswith(f"{field}:"), err.value.details()
    assert says in err.value.details()
    if name.startswith(TEST_PREFIX):
        assert_nothing_left(agent, name)


def test_launch_failing_half_way_is_rolled_back(agent, stub, hostile_images):
    name = unique_name("halfway")
    with pytest.raises(grpc.RpcError) as err:
        stub.LaunchDomain(launch_request(name, image="broken"))
    assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION   # QEMU cannot start it: the image's fault
    assert "rolled back" in err.value.details() and "could not load kernel" in err.value.details()
    assert_nothing_left(agent, name)
    assert f"domain.launch_failed domain={name}" in agent.log_text()


def test_terminate_checks_its_fields(stub):
    cases = [(agent_pb2.TerminateDomainRequest(name="../x"), grpc.StatusCode.INVALID_ARGUMENT, "name:"),
             (agent_pb2.TerminateDomainRequest(name=unique_name(), grace_seconds=100000),
              grpc.StatusCode.INVALID_ARGUMENT, "grace_seconds:"),
             (agent_pb2.TerminateDomainRequest(name=unique_name("ghost")), grpc.StatusCode.NOT_FOUND, "no domain")]
    for request, code, text in cases:
        with pytest.raises(grpc.RpcError) as err:
            stub.TerminateDomain(request)
        assert err.value.code() == code
        assert text in err.value.details()


def test_domains_gleaner_did_not_launch_are_left_alone(stub, test_env):
    """A hand-made domain on the host is neither listed, nor terminated, nor overwritten."""
    name = unique_name("foreign")
    root = ET.Element("domain", type="qemu")
    ET.SubElement(root, "name").text = name
    ET.SubElement(root, "memory", unit="MiB").text = "64"
    os_el = ET.SubElement(root, "os")
    ET.SubElement(os_el, "type", arch="x86_64").text = "hvm"
    conn = libvirt.open("qemu:///system")
    try:
        conn.defineXML(ET.tostring(root, encoding="unicode"))
        assert name not in {d.name for d in stub.ListDomains(agent_pb2.ListDomainsRequest()).domains}
        with pytest.raises(grpc.RpcError) as err:
            stub.TerminateDomain(agent_pb2.TerminateDomainRequest(name=name, force=True))
        assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        with pytest.raises(grpc.RpcError) as err:
            stub.LaunchDomain(launch_request(name))
        assert err.value.code() == grpc.StatusCode.ALREADY_EXISTS
        assert name in domain_names()
    finally:
        conn.lookupByName(name).undefine()
        conn.close()


def test_an_agent_leaves_another_agents_domains_alone(agent, stub, test_env):
    """Two agents on one host (say the demo beside a production agent) never fight."""
    from tests.agentproc import AgentProcess
    other = AgentProcess(test_env, name="other-agent").start()
    try:
        name = unique_name("theirs")
        other.stub().LaunchDomain(launch_request(name))
        assert name not in {d.name for d in stub.ListDomains(agent_pb2.ListDomainsRequest()).domains}
        with pytest.raises(grpc.RpcError) as err:
            stub.TerminateDomain(agent_pb2.TerminateDomainRequest(name=name, force=True))
        assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert "belongs to Gleaner agent 'other-agent'" in err.value.details()
        with pytest.raises(grpc.RpcError) as err:
            stub.LaunchDomain(launch_request(name))
        assert err.value.code() == grpc.StatusCode.ALREADY_EXISTS
        assert name in {d.name for d in other.stub().ListDomains(agent_pb2.ListDomainsRequest()).domains}
    finally:
        other.stop()

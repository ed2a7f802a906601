"""Mixed versions: the previous release's generated stubs (tests/data/previous_release, before the
protos carried roles and states as enums) against this release's controller, over real mutual
TLS, and this release's messages read by the previous release's stubs.

- An agent of the previous release reports a VM by its role string alone: the controller takes
  it (adopts the VM, as a backfill VM) and gleanctl of the previous release reads the lease's
  role and state strings; a request of that gleanctl gets its outcome string.
- This release's messages (a report with both role words, a lease, a request's result, an
  agent's domain with its role and priority class) read the same in the previous release's
  stubs: the strings are still filled, and the agent's enums keep their numbers.
- A report whose role string contradicts its role enum is refused.

The previous release's stubs run in a subprocess of their own: both releases define the same
proto files, which one process's descriptor pool cannot hold twice."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import grpc
import pytest

from protos import agent_pb2, controller_pb2, controller_pb2_grpc
from tests.agentproc import REPO, TEST_PREFIX
from tests.controllerproc import ControllerProcess

PREVIOUS = REPO / "tests" / "data" / "previous_release"

CLIENT = r'''
import json, sys, time
from gleaner_common.identity import Role
from pathlib import Path
from gleaner_common.pki import TlsFiles
from gleaner_common.rpc import channel_to
import protos
from protos import agent_pb2, controller_pb2, controller_pb2_grpc
assert protos.__file__.startswith(sys.argv[1]), protos.__file__   # the previous release's stubs
address, vm_name, agent_tls, admin_tls, new_bytes = json.loads(sys.stdin.read())
out = {}

# An agent of the previous release: the role as a string, no enum.
report = controller_pb2.NodeReport(node_id="old-node", agent_address="127.0.0.1:9", cpus=2, memory_mib=4096,
                                   images=["tiny"], min_memory_mib=32, agent_version="previous", seq=1,
                                   sent_at=time.time())
report.vms.add(name=vm_name, role="backfill", state="running", vcpus=1, memory_mib=128, launched_at=time.time() - 5,
               image="tiny")
agent = controller_pb2_grpc.ControllerStub(channel_to(Role.CONTROLLER, "", address, TlsFiles(**{k: Path(v) for k, v in agent_tls.items()})))
out["reports"] = agent.Report(iter([report]), timeout=30).reports

# gleanctl of the previous release.
admin = controller_pb2_grpc.ControllerStub(channel_to(Role.CONTROLLER, "", address, TlsFiles(**{k: Path(v) for k, v in admin_tls.items()})))
for _ in range(100):
    leases = [l for l in admin.ListVms(controller_pb2.ListVmsRequest(), timeout=10).leases if l.vm_name == vm_name]
    if leases:
        break
    time.sleep(0.1)
out["lease"] = dict(role=leases[0].role, state=leases[0].state, node=leases[0].node_id)
reply = admin.RequestVm(controller_pb2.VmRequest(vcpus=64, memory_mib=128, image="tiny", owner="old",
                                                 request_id="old-request-1"), timeout=30)
out["request"] = dict(outcome=reply.outcome, reason=reply.reason)

# This release's messages, as the previous release's stubs read them.
new = {k: bytes.fromhex(v) for k, v in new_bytes.items()}
vm = controller_pb2.NodeReport.FromString(new["report"]).vms[0]
lease = controller_pb2.Lease.FromString(new["lease"])
result = controller_pb2.VmRequestResult.FromString(new["result"])
domain = agent_pb2.Domain.FromString(new["domain"])
out["read"] = dict(vm_role=vm.role, lease_role=lease.role, lease_state=lease.state, outcome=result.outcome,
                   domain_role=agent_pb2.Role.Name(domain.role), domain_class=agent_pb2.Role.Name(domain.priority_class))
print(json.dumps(out))
'''


def tls_dict(files) -> dict:
    return dict(ca=str(files.ca), cert=str(files.cert), key=str(files.key))


def new_messages() -> dict[str, str]:
    """This release's messages, as its agent and controller send them."""
    report = controller_pb2.NodeReport(node_id="n1", agent_address="127.0.0.1:9", cpus=2, memory_mib=4096)
    report.vms.add(name="vm-1", role="backfill", vm_role=controller_pb2.VM_ROLE_BACKFILL, vcpus=1, memory_mib=128)
    lease = controller_pb2.Lease(lease_id="bf-1", role="backfill", vm_role=controller_pb2.VM_ROLE_BACKFILL,
                                 state="on_notice", lease_state=controller_pb2.LEASE_STATE_ON_NOTICE)
    result = controller_pb2.VmRequestResult(outcome="rejected",
                                            request_outcome=controller_pb2.REQUEST_OUTCOME_REJECTED)
    domain = agent_pb2.Domain(name="vm-1", role=agent_pb2.ROLE_BACKFILL,
                              priority_class=agent_pb2.PRIORITY_CLASS_FOREGROUND)   # a promoted backfill VM
    return {name: message.SerializeToString().hex()
            for name, message in dict(report=report, lease=lease, result=result, domain=domain).items()}


@pytest.fixture(scope="module")
def controller(test_env):
    proc = ControllerProcess(test_env, name="mixed")
    proc.start()
    yield proc
    proc.stop()


def test_the_previous_releases_agent_and_gleanctl_work_with_this_controller(controller, test_env):
    vm_name = f"{TEST_PREFIX}mixed-old-vm"
    given = json.dumps([controller.address, vm_name, tls_dict(test_env.pki.agent("old-node")),
                        tls_dict(test_env.pki.admin), new_messages()])
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(PREVIOUS), str(REPO)]))
    done = subprocess.run([sys.executable, "-c", CLIENT, str(PREVIOUS)], input=given, capture_output=True, text=True,
                          env=env, cwd=PREVIOUS, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout)
    assert out["reports"] == 1
    assert out["lease"] == dict(role="backfill", state="running", node="old-node")
    assert out["request"]["outcome"] == "rejected", out
    # This release's messages read by the previous release: the same words (the agent's enum
    # numbers kept: ROLE_VOLUNTEER was the backfill VM's, ROLE_FOREGROUND a foreground class).
    assert out["read"] == dict(vm_role="backfill", lease_role="backfill", lease_state="on_notice", outcome="rejected",
                               domain_role="ROLE_VOLUNTEER", domain_class="ROLE_FOREGROUND")
    # and this release's gleanctl reads the enums the controller now sets beside the strings
    lease = next(l for l in controller.leases() if l.vm_name == vm_name)
    assert (lease.vm_role, lease.lease_state) == (controller_pb2.VM_ROLE_BACKFILL, controller_pb2.LEASE_STATE_RUNNING)


def test_a_report_whose_role_words_disagree_is_refused(controller, test_env):
    report = controller_pb2.NodeReport(node_id="odd-node", agent_address="127.0.0.1:9", cpus=2, memory_mib=4096)
    report.vms.add(name=f"{TEST_PREFIX}mixed-odd", role="on_demand", vm_role=controller_pb2.VM_ROLE_BACKFILL, vcpus=1,
                   memory_mib=128, image="tiny")
    agent = controller_pb2_grpc.ControllerStub(controller.channel(test_env.pki.agent("odd-node")))
    with pytest.raises(grpc.RpcError) as refused:
        agent.Report(iter([report]), timeout=30)
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "contradicts vm_role 'backfill'" in refused.value.details()
    assert not [l for l in controller.leases() if l.node_id == "odd-node"]

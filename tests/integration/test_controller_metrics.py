"""The controller's Prometheus endpoint (issue 27) on a real controller process with two agents
on libvirt's test:/// driver as its nodes: every counter says what the audit log says, the gauges
what the books hold, and a node that stops reporting shows as down."""
from __future__ import annotations

import json

import pytest
from prometheus_client.parser import text_string_to_metric_families

from protos import controller_pb2
from tests.agentproc import AgentProcess, wait_for
from tests.controllerproc import ControllerProcess, agent_settings, run_gleanctl as gleanctl

pytestmark = pytest.mark.libvirt


def samples(controller: ControllerProcess) -> dict[tuple[str, tuple], float]:
    """(sample name, sorted labels) -> value, as Prometheus would scrape them."""
    found = {}
    for family in text_string_to_metric_families(controller.metrics_text()):
        for sample in family.samples:
            found[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return found


def value(found: dict, name: str, **labels: str) -> float:
    return found.get((name, tuple(sorted(labels.items()))), 0.0)


def total(found: dict, name: str) -> float:
    return sum(v for (n, _labels), v in found.items() if n == name)


def test_the_controllers_metrics_say_what_its_audit_log_and_books_say(test_env):
    controller = ControllerProcess(test_env, name="ctl-metrics", settings=dict(use_prediction=False)).start()
    nodes = [AgentProcess(test_env, name=f"mnode{i}", settings=agent_settings(
        controller, libvirt_uri="test:///default", metrics_listen="")).start() for i in (1, 2)]
    try:
        for node in nodes:
            wait_for(lambda: controller.node_state(node.name) == "up", 20, f"{node.name} to report")
        found = samples(controller)
        assert value(found, "gleaner_controller_nodes", state="up") == 2
        assert value(found, "gleaner_build_info", version=found and next(
            dict(labels)["version"] for (n, labels) in found if n == "gleaner_build_info"),
            component="controller", protocol="1", python=next(
            dict(labels)["python"] for (n, labels) in found if n == "gleaner_build_info")) == 1
        expiry = [v for (n, _l), v in found.items() if n == "gleaner_cert_expiry_timestamp_seconds"]
        assert len(expiry) == 1 and expiry[0] > 1.7e9   # the test PKI's controller certificate
        cpus = sum(n.cpus for n in controller.stub().ListNodes(controller_pb2.ListNodesRequest(), timeout=10).nodes)
        assert value(found, "gleaner_controller_capacity_vcpus") == cpus

        gleanctl(controller, "backfill", "set", "enabled=true", "memory_mb=128", "vcpus=8", "max_instances=4",
                 "interruption=terminate", "grace_seconds=1")   # two 8-vCPU VMs fill each 16-CPU test node
        wait_for(lambda: len(controller.leases("backfill", "running")) == 4, 60, "four running backfill VMs")
        big = max(n.cpus for n in controller.stub().ListNodes(controller_pb2.ListNodesRequest(), timeout=10).nodes)
        placed = controller.stub().RequestVm(controller_pb2.VmRequest(vcpus=big, memory_mib=256, image="tiny",
                                                                      owner="alice", request_id="m-1"), timeout=120)
        assert placed.outcome == "placed" and placed.preempted, placed.reason
        rejected = controller.stub().RequestVm(controller_pb2.VmRequest(vcpus=big + 1, memory_mib=256, image="tiny",
                                                                        owner="alice", request_id="m-2"), timeout=60)
        assert rejected.outcome == "rejected"
        preempting = controller.events("vm.preempting")
        wait_for(lambda: len(controller.events("vm.preempted")) == len(preempting), 60, "every victim's stop")

        found = samples(controller)
        assert value(found, "gleaner_controller_requests_total", outcome="placed", reason="") == 1
        assert value(found, "gleaner_controller_requests_total", outcome="rejected", reason="no_room") == 1
        assert total(found, "gleaner_controller_preemptions_total") == len(preempting) >= 1
        path = json.loads(preempting[0].detail_json)["path"]
        assert value(found, "gleaner_controller_preemptions_total", path=path, policy="most_recent",
                     interruption="terminate") == len(preempting)
        assert total(found, "gleaner_controller_victim_stops_total") == len(controller.events("vm.preempted"))
        lost = sum(json.loads(e.detail_json)["work_lost_vcpu_seconds"] for e in controller.events("vm.preempted"))
        assert value(found, "gleaner_controller_lost_work_vcpu_seconds_total", cause="preempted") == \
            pytest.approx(lost, abs=0.01)
        launched = controller.events("vm.launched")
        assert total(found, "gleaner_controller_launches_total") == len(launched)
        assert value(found, "gleaner_controller_decision_seconds_count") == 2   # the placement and the rejection
        assert value(found, "gleaner_controller_on_demand_start_seconds_count") == 1
        live = controller.leases()
        for role in ("on_demand", "backfill"):
            held = sum(l.vcpus for l in live if l.role == role and l.state in ("running", "starting"))
            assert value(found, "gleaner_controller_allocated_vcpus", role=role) == held, role
        assert value(found, "gleaner_controller_leases", role="on_demand", state="running") == 1
        assert total(found, "gleaner_controller_reports_total") >= 2
        assert value(found, "gleaner_controller_backfill_enabled") == 1

        nodes[1].stop()   # a node that stops reporting goes down (down_after_seconds 5 here)
        wait_for(lambda: value(samples(controller), "gleaner_controller_nodes", state="down") == 1, 30,
                 "the stopped node shown down")
        assert value(samples(controller), "gleaner_controller_node_transitions_total", to="down") == 1
    finally:
        for node in nodes:
            node.stop()
        controller.stop()

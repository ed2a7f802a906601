"""The shipped alert rules and Grafana dashboard against a real Prometheus (Debian's package)
scraping a running pool: a real controller and two agents on libvirt's test:/// driver as its
nodes (issue 27). promtool accepts the rules; every dashboard query returns data; every alert
expression evaluates; and the node-down alert fires when an agent stops. The dashboard's
panels are drawn from Prometheus' answers into a PNG (GLEANER_DASHBOARD_PNG: where to keep it)."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time

import pytest

from protos import controller_pb2
from tests.agentproc import REPO, AgentProcess, wait_for
from tests.controllerproc import ControllerProcess, agent_settings
from tests.prometheusproc import RULES, PrometheusProcess, dashboard_panels, promtool, render_dashboard

pytestmark = pytest.mark.libvirt


@pytest.fixture(autouse=True)
def prometheus_installed():
    assert shutil.which("prometheus") and shutil.which("promtool"), \
        "Debian's prometheus package is missing: scripts/setup.sh installs it"


def gleanctl(controller: ControllerProcess, *args: str) -> None:
    done = subprocess.run([sys.executable, "-m", "controller.gleanctl", *controller.gleanctl_args(), *args],
                          capture_output=True, text=True, cwd=REPO, timeout=120)
    assert done.returncode == 0, done.stderr


def test_promtool_accepts_the_rules():
    checked = promtool("check", "rules", str(RULES))
    assert checked.returncode == 0 and "SUCCESS: 7 rules found" in checked.stdout, checked.stdout + checked.stderr


def test_the_dashboard_and_the_alerts_work_on_a_running_pool(test_env, tmp_path):
    controller = ControllerProcess(test_env, name="ctl-prom", settings=dict(use_prediction=False)).start()
    nodes = [AgentProcess(test_env, name=f"pnode{i}", settings=agent_settings(controller, libvirt_uri="test:///default"))
             .start() for i in (1, 2)]
    prometheus = None
    try:
        for node in nodes:
            wait_for(lambda: controller.node_state(node.name) == "up", 20, f"{node.name} to report")
        prometheus = PrometheusProcess(tmp_path / "prometheus", f"127.0.0.1:{controller.metrics_port}",
                                       [f"127.0.0.1:{n.metrics_port}" for n in nodes]).start()
        checked = promtool("check", "config", str(prometheus.config_path))
        assert checked.returncode == 0, checked.stdout + checked.stderr
        started = time.time()
        # a little of everything the panels show: backfill, a preemption, a rejection, a release
        gleanctl(controller, "backfill", "set", "enabled=true", "memory_mb=128", "vcpus=8", "max_instances=4",
                 "interruption=terminate", "grace_seconds=1")
        wait_for(lambda: len(controller.leases("backfill", "running")) == 4, 60, "four running backfill VMs")
        time.sleep(20)   # rate()s over 5 minutes need two scrapes of each counter after its first value
        stub = controller.stub()
        placed = stub.RequestVm(controller_pb2.VmRequest(vcpus=16, memory_mib=256, image="tiny", owner="alice",
                                                         request_id="p-1"), timeout=120)
        assert placed.outcome == "placed" and placed.preempted, placed.reason
        assert stub.RequestVm(controller_pb2.VmRequest(vcpus=17, memory_mib=256, image="tiny", owner="alice",
                                                       request_id="p-2"), timeout=60).outcome == "rejected"
        wait_for(lambda: controller.events("vm.preempted"), 60, "the victim's stop")
        time.sleep(10)
        stub.Release(controller_pb2.ReleaseRequest(lease_id=placed.lease.lease_id), timeout=60)
        time.sleep(10)

        empty = []
        for panel in dashboard_panels():
            for target in panel["targets"]:
                if not prometheus.query(target["expr"]):
                    empty.append(f"{panel['title']} [{target['refId']}]: {target['expr']}")
        assert not empty, "dashboard queries with no data:\n" + "\n".join(empty)
        rules = prometheus.alert_rules()
        assert len(rules) == 7
        for name, rule in rules.items():
            prometheus.query(rule["query"])   # evaluates (an error raises, naming it)
            assert rule["health"] == "ok", (name, rule.get("lastError"))
        assert not prometheus.firing("GleanerNodeDown")
        assert prometheus.firing("GleanerRequestsRejected")[0]["labels"]["reason"] == "no_room"

        nodes[1].stop()   # down after the controller's down_after_seconds (5 s here)
        fired = wait_for(lambda: prometheus.firing("GleanerNodeDown"), 60, "GleanerNodeDown to fire")
        assert [a["labels"]["node"] for a in fired] == ["pnode2"]

        png = render_dashboard(prometheus, started, time.time(), tmp_path / "dashboard.png")
        assert png.stat().st_size > 20_000
        keep = os.environ.get("GLEANER_DASHBOARD_PNG")
        if keep:
            shutil.copy(png, keep)
    finally:
        if prometheus is not None:
            prometheus.stop()
        for node in nodes:
            node.stop()
        controller.stop()

"""`gleanctl explain NODE` and the nodes listing's NEXT_FILL (issue 27, item 3) against a real
controller: a node whose own load takes its CPUs gets no backfill, and the answer says so with
its figures, the on-demand VMs' CPU apart from the host's other load. Its reports come over a
real report stream with the node's identity (nothing is launched there). No libvirt."""
from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from protos import controller_pb2
from tests.agentproc import REPO, LabEnv, wait_for
from tests.controllerproc import ControllerProcess, reporting_node

NODE = "busy-node"


@pytest.fixture(scope="module")
def controller(tmp_path_factory):
    env = LabEnv.in_dir(tmp_path_factory.mktemp("gleanctl-explain"), nodes=(NODE,))
    controller = ControllerProcess(env, name="explain-ctl", settings=dict(prediction_window=2)).start()
    def report() -> controller_pb2.NodeReport:   # a 2-CPU host that runs no VM, its own load taking both CPUs
        return controller_pb2.NodeReport(node_id=NODE, agent_address="127.0.0.1:9", cpus=2, memory_mib=4096,
                                         images=["tiny"], min_memory_mib=32, foreground_cpu_cores=2.0,
                                         sent_at=time.time(), agent_version="test")
    try:
        with reporting_node(controller, NODE, report):
            controller.stub().SetBackfill(controller_pb2.SetBackfillRequest(enabled=True, memory_mb=128, vcpus=1),
                                          timeout=10)
            yield controller
    finally:
        controller.stop()


def gleanctl(controller: ControllerProcess, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "controller.gleanctl", *controller.gleanctl_args(), *args],
                          cwd=REPO, capture_output=True, text=True, timeout=90)


def test_explain_says_the_hosts_own_load_keeps_backfill_out(controller):
    done = wait_for(lambda: (lambda d: d if "the host's other load 2.00" in d.stdout else None)(
        gleanctl(controller, "explain", NODE)), 30, "an answer from the node's figures")
    assert done.returncode == 0, done.stderr
    first = done.stdout.splitlines()[0]
    assert first.startswith(f"node {NODE} (up): backfill would start nothing there"), done.stdout
    assert "on-demand VMs 0.00 + the host's other load 2.00" in done.stdout
    data = json.loads(gleanctl(controller, "explain", NODE, "-o", "json").stdout)
    assert data["fill_code"] in ("not_selected", "cpu") and data["fill_vms"] == 0 and data["fill_reasons"]
    assert data["host_other_cpu_cores"] == 2.0 and data["on_demand_cpu_cores"] == 0.0


def test_the_nodes_listing_says_what_the_next_fill_does(controller):
    done = gleanctl(controller, "nodes")
    assert done.returncode == 0, done.stderr
    header, row = done.stdout.splitlines()[:2]
    assert "NEXT_FILL" in header.split() and "FG_CPU(VMS+HOST)" in header.split()
    assert "0.00+2.00" in row.split()
    assert "gleanctl explain NODE" in done.stdout


def test_explain_an_unknown_node_is_not_found_and_names_the_known(controller):
    done = gleanctl(controller, "explain", "nowhere")
    assert done.returncode == 4
    assert "no node 'nowhere'" in done.stderr and NODE in done.stderr

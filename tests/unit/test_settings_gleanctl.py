"""gleanctl as a new admin types it (issue 23, item 7), against a real controller process with
mutual TLS (no libvirt: no agent is needed): `request` needs its sizes and the controller refuses
less memory than a guest boots in, whoever asks; `reserve NODE` reads, and only `reserve set` and
`reserve clear` change a node's reserve."""
from __future__ import annotations

import json
import math
import subprocess
import sys

import grpc
import pytest

from controller.checks import MIN_MEMORY_MIB
from protos import controller_pb2
from tests.agentproc import REPO, LabEnv
from tests.controllerproc import ControllerProcess


@pytest.fixture(scope="module")
def controller(tmp_path_factory):
    env = LabEnv.in_dir(tmp_path_factory.mktemp("gleanctl"))
    proc = ControllerProcess(env, name="settings-ctl").start()
    yield proc
    proc.stop()


def gleanctl(controller: ControllerProcess, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "controller.gleanctl", *controller.gleanctl_args(), "--timeout", "20",
                           *args], cwd=REPO, capture_output=True, text=True, timeout=60)


def reserves(controller: ControllerProcess) -> list[tuple]:
    reply = controller.stub().ListReserves(controller_pb2.ListReservesRequest(), timeout=10)
    return sorted((r.node_id, r.vcpus, r.memory_mib, r.whole_node) for r in reply.reserves)


def test_request_needs_its_sizes_and_nothing_reaches_the_controller_without_them(controller):
    requests = len(controller.events("request.rejected")) + len(controller.events("request.placed"))
    for args in ([], ["--vcpus", "1"], ["--memory", "128"]):
        done = gleanctl(controller, "request", *args)
        assert done.returncode == 2, done.stderr
        assert "the following arguments are required:" in done.stderr and "Traceback" not in done.stderr
        missing = [flag for flag in ("--vcpus", "--memory") if flag not in args]
        assert done.stderr.strip().endswith(", ".join(missing)), done.stderr
    assert len(controller.events("request.rejected")) + len(controller.events("request.placed")) == requests
    assert controller.leases() == []


def test_less_memory_than_a_guest_boots_in_is_refused_by_the_controller_whoever_asks(controller):
    small = MIN_MEMORY_MIB - 1
    done = gleanctl(controller, "request", "--vcpus", "1", "--memory", str(small))   # refused before the call
    assert done.returncode == 2   # a bad value: the usage code (README, Exit codes)
    assert f"invalid argument memory_mib: {small} MiB is less than {MIN_MEMORY_MIB} MiB" in done.stderr
    for memory in (64, small, 0):   # another client: the controller's own check, over gRPC with TLS
        with pytest.raises(grpc.RpcError) as err:
            controller.stub().RequestVm(controller_pb2.VmRequest(vcpus=1, memory_mib=memory, image="tiny", owner="a",
                                                                 request_id=f"small-{memory}"), timeout=10)
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert f"memory_mib: {memory} MiB is less than {MIN_MEMORY_MIB} MiB" in err.value.details()
    assert controller.leases() == [] and controller.events("request.rejected") == []
    # the floor itself is a request like any other (rejected here only for want of nodes)
    done = gleanctl(controller, "--json", "request", "--vcpus", "1", "--memory", str(MIN_MEMORY_MIB))
    assert done.returncode == 1 and json.loads(done.stdout)["outcome"] == "rejected"


def test_reserve_node_reads_and_only_set_and_clear_change_it(controller):
    before = len(controller.events("reserve.set"))
    done = gleanctl(controller, "reserve", "set", "node1", "--vcpus", "2", "--memory", "512")
    assert done.returncode == 0, done.stderr
    assert reserves(controller) == [("node1", 2, 512, False)]
    done = gleanctl(controller, "reserve", "node1")   # once this cleared what was just set
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[1].split() == ["node1", "2", "512"]
    assert reserves(controller) == [("node1", 2, 512, False)]
    done = gleanctl(controller, "--json", "reserve", "node1")
    assert [(r["node_id"], r["vcpus"]) for r in json.loads(done.stdout)] == [("node1", 2)]
    done = gleanctl(controller, "reserve")   # every node's, with Balancer's
    assert done.returncode == 0 and "node1" in done.stdout and "reserves   " in done.stdout
    # the old form of a change is refused, naming the new one, and changes nothing
    done = gleanctl(controller, "reserve", "node1", "--vcpus", "3")
    assert done.returncode == 2 and "`reserve node1` only shows" in done.stderr
    assert "gleanctl reserve set node1 --vcpus N" in done.stderr
    for args, says in ((["set", "node1"], "reserve set node1 needs --vcpus, --memory or --whole-node"),
                       (["clear"], "gleanctl reserve clear NODE"),
                       (["clear", "node1", "--vcpus", "1"], "reserve clear takes no"),
                       (["set", "node1", "node2", "--vcpus", "1"], "usage: gleanctl reserve")):
        done = gleanctl(controller, "reserve", *args)
        assert done.returncode == 2 and says in done.stderr, (args, done.stderr)
    assert reserves(controller) == [("node1", 2, 512, False)]
    assert len(controller.events("reserve.set")) == before + 1
    done = gleanctl(controller, "reserve", "clear", "node1")
    assert done.returncode == 0 and "cleared: no reserve for node1" in done.stdout, done.stdout
    assert reserves(controller) == []
    done = gleanctl(controller, "reserve", "node1")
    assert done.returncode == 0 and "no reserve for node1" in done.stdout
    assert len(controller.events("reserve.set")) == before + 2
    # `reserve set KEY=VALUE` still changes the [reserves] settings
    done = gleanctl(controller, "reserve", "set", "static_nodes=1")
    assert done.returncode == 0 and "static_nodes=1" in done.stdout, done.stderr
    done = gleanctl(controller, "reserve", "set", "--node", "set", "--whole-node")   # a node named like a verb
    assert done.returncode == 0 and reserves(controller) == [("set", 0, 0, True)]
    assert gleanctl(controller, "reserve", "clear", "--node", "set").returncode == 0 and reserves(controller) == []


def test_nan_and_infinities_in_live_settings_are_refused_by_the_controller_and_change_nothing(controller):
    stub = controller.stub()
    status = lambda: stub.GetReserveStatus(controller_pb2.ReserveStatusRequest(), timeout=10)   # noqa: E731
    before = status()
    for key in ("wait_seconds", "lead_seconds"):
        for value in (math.nan, math.inf, -math.inf):
            with pytest.raises(grpc.RpcError) as err:
                stub.SetReserveSettings(controller_pb2.SetReserveSettingsRequest(**{key: value}), timeout=10)
            assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and key in err.value.details()
            assert "0..86400" in err.value.details()
        done = gleanctl(controller, "reserve", "set", f"{key}=nan")
        assert done.returncode == 2 and f"invalid argument {key}:" in done.stderr and "0..86400" in done.stderr
    for field in ("in_hours", "for_hours"):
        with pytest.raises(grpc.RpcError) as err:
            stub.AddHint(controller_pb2.AddHintRequest(nodes=1, **{"in_hours": 1.0, "for_hours": 1.0, field: math.nan}),
                         timeout=10)
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and field in err.value.details()
    after = status()
    assert (after.settings_json, list(after.hints)) == (before.settings_json, list(before.hints))
    done = gleanctl(controller, "--timeout", "inf", "nodes")
    assert done.returncode == 2 and "argument --timeout: 'inf' is not a number within 0.1..86400" in done.stderr

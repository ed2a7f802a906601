"""Why backfill fills a node or not (controller/core/explain.py), and the controller saying so
once when a node stops being filled."""
from __future__ import annotations

import dataclasses
import logging

from controller.core.explain import FillFacts, explain_fill
from controller.core.records import BackfillConfig, Size

BASE = FillFacts(node_id="n1", state="up", enabled=True, vm=Size(1, 128), selected=True, reserved=False, unable="",
                 free=Size(2, 4096), backfill_vcpus=0, use_prediction=True, productivity=2.0,
                 predicted_foreground=0.0, on_demand_cpu=0.0, host_other_cpu=0.0, backoff_left_s=0.0,
                 budget_left=None)


def answer(**changes):
    return explain_fill(dataclasses.replace(BASE, **changes))


def test_a_selected_node_with_room_and_cpu_fills():
    filled = answer()
    assert (filled.fills, filled.vms, filled.code, filled.reasons) == (True, 2, "fills", ())


def test_each_check_that_keeps_backfill_off_says_so_first():
    cases = {"disabled": dict(enabled=False), "down": dict(state="suspect"), "reserved": dict(reserved=True),
             "unable": dict(unable="its agent does not offer the backfill image 'big'"),
             "not_selected": dict(selected=False), "backoff": dict(backoff_left_s=42.0), "busy": dict(lane_busy=True),
             "full": dict(free=Size(0, 4096)), "max_instances": dict(budget_left=0)}
    for code, changes in cases.items():
        got = answer(**changes)
        assert (got.fills, got.vms, got.code) == (False, 0, code), (code, got)
        assert got.first, code
    # the order the launcher checks them in: disabled before everything
    assert answer(enabled=False, state="down", reserved=True).code == "disabled"
    assert "42 s" in answer(backoff_left_s=42.0).first


def test_a_busy_host_names_its_own_load_apart_from_its_on_demand_vms():
    """The issue's case: FG 2.00 on a 2-CPU node with no VM at all: the host's other load."""
    got = answer(productivity=0.0, predicted_foreground=2.0, on_demand_cpu=0.0, host_other_cpu=2.0)
    assert (got.fills, got.code) == (False, "cpu")
    assert "predicted foreground 2.00" in got.first and "the host's other load 2.00" in got.first
    assert "on-demand VMs 0.00" in got.first


def test_cpu_and_the_pool_budget_bound_how_many():
    assert answer(productivity=1.4).vms == 1                        # half a free core is worth a vCPU
    assert answer(productivity=2.0, backfill_vcpus=1).vms == 1
    bounded = answer(budget_left=1)
    assert (bounded.fills, bounded.vms) == (True, 1) and "max_instances" in bounded.reasons[0]
    assert answer(use_prediction=False, productivity=0.0).vms == 2   # allocation only


def test_the_controller_says_once_why_a_node_with_room_gets_nothing(tmp_path, caplog):
    from controller.config import ControllerConfig
    from controller.service import PoolService
    from controller.store import Store
    from gleaner_common.config import TlsConfig
    from protos import controller_pb2
    from tests.unit.test_controller_parts import SlowAgents
    config = ControllerConfig(state_dir=tmp_path, tls=TlsConfig(insecure=True), listen="127.0.0.1:1",
                              prediction_window=1)
    store = Store(config.store_path)
    store.set_backfill(BackfillConfig(enabled=True, memory_mb=128))
    pool = PoolService(config, store, SlowAgents())
    busy = controller_pb2.NodeReport(node_id="busy", agent_address="127.0.0.1:9", cpus=2, memory_mib=4096,
                                     foreground_cpu_cores=2.0, images=["tiny"], min_memory_mib=32)
    with caplog.at_level(logging.INFO, logger="controller.service"):
        pool.ingest(busy)
        pool.select(evaluation=True)
        assert pool.fill() == 0
        assert pool.fill() == 0   # the same reason: said once
    said = [r for r in caplog.records if r.getMessage() == "backfill.not_filling"]
    assert len(said) == 1 and said[0].node == "busy", said
    assert "the host's other load 2.00" in said[0].reason and said[0].reason_code in ("not_selected", "cpu")
    row = pool.explain()["busy"]
    assert not row.fills and row.code in ("not_selected", "cpu")
    pool.executor.shutdown(wait=True)

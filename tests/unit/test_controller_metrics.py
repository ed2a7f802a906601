"""The controller's metrics from its audit events and its books (controller/metrics.py): what each
event adds, and label sets that stay bounded whatever the events say. The whole endpoint, on a
real controller, is tests/integration/test_controller_metrics.py."""
from __future__ import annotations

import dataclasses

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from controller.config import ControllerConfig, check_config
from controller.core.records import Audit
from controller.metrics import ControllerMetrics, PoolFigures
from gleaner_common.config import ConfigError, TlsConfig


def scraped(metrics: ControllerMetrics) -> dict[tuple[str, tuple], float]:
    text = generate_latest(metrics.registry).decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def test_each_event_counts_once_where_an_admin_looks_for_it():
    metrics = ControllerMetrics(lambda: PoolFigures(nodes={"up": 3, "down": 1}, leases={("backfill", "hibernated"): 2},
                                                    allocated_vcpus={"on_demand": 4}, capacity_vcpus=16))
    for event in (Audit("request.placed", detail=dict(decided_ms=2.0, path="instant")),
                  Audit("request.rejected", detail=dict(reason="no node can host ...", reason_code="no_room",
                                                        decided_ms=1.0)),
                  Audit("request.rejected", detail=dict(reason="...", reason_code="<script>made up</script>")),
                  Audit("vm.preempting", detail=dict(path="instant", policy="most_recent", interruption="hibernate")),
                  Audit("vm.hibernated", detail=dict(seconds=1.9)),
                  Audit("vm.preempted", detail=dict(stopped="clean_shutdown", seconds=3.0, work_lost_vcpu_seconds=12.5)),
                  Audit("vm.discarded", detail=dict(work_lost_vcpu_seconds=7.5)),
                  Audit("vm.launched", detail=dict(role="on_demand", seconds=0.7)),
                  Audit("vm.launched", detail=dict(role="backfill")),
                  Audit("node.down", detail=dict(silent_s=20))):
        metrics.observe(event)
    found = scraped(metrics)
    assert found[("gleaner_controller_requests_total", (("outcome", "placed"), ("reason", "")))] == 1
    assert found[("gleaner_controller_requests_total", (("outcome", "rejected"), ("reason", "no_room")))] == 1
    # a code the controller does not know never becomes a label of its own
    assert found[("gleaner_controller_requests_total", (("outcome", "rejected"), ("reason", "other")))] == 1
    # every code is there from the start, at 0: increase() sees the first rejection of a kind
    assert found[("gleaner_controller_requests_total", (("outcome", "rejected"), ("reason", "no_image")))] == 0
    assert found[("gleaner_controller_preemptions_total", (("interruption", "hibernate"), ("path", "instant"),
                                                           ("policy", "most_recent")))] == 1
    assert found[("gleaner_controller_victim_stops_total", (("how", "hibernated"),))] == 1
    assert found[("gleaner_controller_victim_stops_total", (("how", "clean_shutdown"),))] == 1
    assert found[("gleaner_controller_lost_work_vcpu_seconds_total", (("cause", "preempted"),))] == 12.5
    assert found[("gleaner_controller_lost_work_vcpu_seconds_total", (("cause", "discarded"),))] == 7.5
    assert found[("gleaner_controller_launches_total", (("role", "on_demand"),))] == 1
    assert found[("gleaner_controller_on_demand_start_seconds_count", ())] == 1
    assert found[("gleaner_controller_decision_seconds_count", ())] == 2   # the third was not timed
    assert found[("gleaner_controller_victim_stop_seconds_sum", ())] == pytest.approx(4.9)
    assert found[("gleaner_controller_node_transitions_total", (("to", "down"),))] == 1
    assert found[("gleaner_controller_nodes", (("state", "up"),))] == 3
    assert found[("gleaner_controller_nodes", (("state", "suspect"),))] == 0   # every state, even at 0
    assert found[("gleaner_controller_leases", (("role", "backfill"), ("state", "hibernated")))] == 2
    assert found[("gleaner_controller_allocated_vcpus", (("role", "on_demand"),))] == 4
    assert found[("gleaner_controller_allocated_vcpus", (("role", "backfill"),))] == 0


def test_no_metric_has_a_per_vm_label():
    metrics = ControllerMetrics(lambda: PoolFigures())
    metrics.observe(Audit("vm.launched", "n1", "bf-1", dict(role="backfill", vm="gleaner-bf-1")))
    labels = {key for (_name, labels) in scraped(metrics) for key, _ in labels}
    assert not labels & {"vm", "lease_id", "node", "request_id"}


def test_the_endpoint_leaves_loopback_only_over_https_with_the_controllers_certificate(tmp_path):
    insecure = ControllerConfig(listen="unix:/run/x.sock", tls=TlsConfig(insecure=True))
    check_config(insecure, "c.toml")   # 127.0.0.1:9478, plain HTTP: the default
    with pytest.raises(ConfigError, match=r"metrics.listen '0.0.0.0:9478' is not loopback: set metrics.tls = true"):
        check_config(dataclasses.replace(insecure, metrics_listen="0.0.0.0:9478"), "c.toml")
    with pytest.raises(ConfigError, match=r"metrics.tls = true needs the controller's certificate"):
        check_config(dataclasses.replace(insecure, metrics_tls=True), "c.toml")
    with pytest.raises(ConfigError, match="metrics.listen 'nowhere' must be HOST:PORT"):
        check_config(dataclasses.replace(insecure, metrics_listen="nowhere"), "c.toml")
    check_config(dataclasses.replace(insecure, metrics_listen=""), "c.toml")   # off

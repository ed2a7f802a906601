"""The controller's agent calls behind bulkheads, end to end in one process: the real PoolService
over a real SQLite store, calling agents through the real AgentLinks (mutual TLS, the lab PKI)
that are real gRPC servers: node a's agent accepts every call and never answers (hung), node
b's answers at once. Node a has room for 64 backfill VMs; node b is kept free of backfill (a
whole-node reserve) and alone offers the image the on-demand requests ask for.

Undo the bulkheads (one shared 32-thread pool, and no lane room in the fill) and the first test
fails: the fill plans 64 launches on a, 32 of them hang on every thread, and b's on-demand
launch never starts.
"""
from __future__ import annotations

import threading
import time

import pytest

from controller.agents import AgentLinks
from controller.config import ControllerConfig
from controller.core.records import BackfillConfig, Reserve
from controller.service import PoolService
from controller.store import Store
from gleaner_common.config import TlsConfig
from gleaner_common.pki import ensure_lab_pki
from protos import controller_pb2
from tests.fake_agents import serve_fake_agent, stop_fake_agent

WAIT = 15.0   # only ever reached when the claim is false


class Clock:
    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def pool(tmp_path):
    """(pool, hung agent of a, quick agent of b, clock); backlog 16 and 4 calls per node (the defaults)."""
    pki = ensure_lab_pki(tmp_path / "pki", nodes=("a", "b"))
    hung, hung_server = serve_fake_agent(pki, "a", hung=True)
    quick, quick_server = serve_fake_agent(pki, "b", hung=False)
    config = ControllerConfig(state_dir=tmp_path, tls=TlsConfig(insecure=True), listen="127.0.0.1:1",
                              use_prediction=False)
    store = Store(config.store_path)
    store.set_backfill(BackfillConfig(enabled=True, memory_mb=128, vcpus=1))
    store.set_reserve(Reserve("b", whole_node=True))
    clock = Clock()
    service = PoolService(config, store, AgentLinks(pki.controller, config.agent_timeout_seconds), clock=clock)
    for node, server, cpus, images in (("a", hung_server, 64, ["tiny"]), ("b", quick_server, 4, ["tiny", "big"])):
        service.ingest(controller_pb2.NodeReport(node_id=node, agent_address=f"127.0.0.1:{server.port}", cpus=cpus,
                                                 memory_mib=65536, images=images, min_memory_mib=32))
    yield service, hung, quick, clock
    stop_fake_agent(hung, hung_server)
    stop_fake_agent(quick, quick_server)
    service.executor.shutdown(wait=True)
    service.agents.close()
    store.close()


def starting_on(service: PoolService, node: str) -> int:
    return sum(1 for l in service.live_leases() if l.node_id == node and l.state == "starting")


def test_a_hung_node_does_not_delay_another_nodes_on_demand_launch(pool):
    service, hung, quick, _clock = pool
    assert service.fill() == 16   # 64 fit on a; its lane takes 16
    assert hung.calls.wait_until(lambda c: c.in_flight == 3, WAIT)   # one of a's 4 slots kept for urgent calls
    assert service.fill() == 0 and starting_on(service, "a") == 16   # a is busy: nothing more planned there
    result = service.request(1, 256, "big", "alice", "od-b", wait_seconds=WAIT)
    assert result.record.outcome == "placed" and result.lease.node_id == "b", result.record.reason
    assert [m for m, _name, _t in quick.calls.started] == ["launch"]
    assert hung.calls.most_in_flight == 3 and hung.calls.in_flight == 3   # a's calls still hang


def test_a_hung_nodes_stops_take_the_slot_its_backfill_cannot(pool):
    service, hung, _quick, clock = pool
    service.fill()
    assert hung.calls.wait_until(lambda c: c.in_flight == 3, WAIT)
    clock.now += service.ledger.settings.launch_timeout + 1
    service.tick()   # a's starting leases are past their deadline: each VM, if it started, is stopped
    assert hung.calls.wait_until(lambda c: any(m == "stop" for m, _n, _t in c.started), WAIT), hung.calls.started
    assert hung.calls.in_flight == 4 and hung.calls.most_in_flight == 4   # 3 launches + a stop, no more
    assert sum(m == "stop" for m, _n, _t in hung.calls.started) == 1


def test_a_refused_backfill_launch_fails_its_lease_and_backs_the_node_off(pool):
    """A fill that ignores the lane (as one racing a filling lane would): the launches past the
    backlog are refused, their leases fail with the reason, and the node's backfill backs off."""
    service, hung, _quick, _clock = pool
    with service.lock:
        service._apply(service.ledger.fill(service.clock()))   # no lane room given: 64 launches on a
    service.executor.shutdown(wait=False)   # the refusals are answered on the urgent lane; wait for them
    deadline = time.monotonic() + WAIT

    def settled() -> bool:   # the books change before their commit ends, the hung agent's calls arrive on their own
        return starting_on(service, "a") <= 16 and hung.calls.most_in_flight >= 3 and \
            len(service.store.events(0, 1000, "vm.launch_failed")) >= 48

    while not settled() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert starting_on(service, "a") == 16
    failed = service.store.events(0, 1000, "vm.launch_failed")
    assert len(failed) == 48 and all("backfill lane is full" in e.detail["reason"] for e in failed)
    assert service.ledger.launch_backoff["a"][0] > service.clock()   # no backfill on a for a while
    assert hung.calls.most_in_flight == 3


def test_a_launch_whose_lease_ended_while_it_waited_is_not_asked(pool):
    service, hung, _quick, clock = pool
    service.fill()
    assert hung.calls.wait_until(lambda c: c.in_flight == 3, WAIT)
    clock.now += service.ledger.settings.launch_timeout + 1
    service.tick()   # every starting lease of a is past its deadline: stopped instead
    assert starting_on(service, "a") == 0
    hung.release.set()   # the three hung calls end; the thirteen launches queued behind them must not be made
    service.executor.shutdown(wait=True)
    assert sum(m == "launch" for m, _n, _t in hung.calls.started) == 3


def test_close_returns_while_calls_hang(pool):
    service, hung, _quick, _clock = pool
    service.fill()
    assert hung.calls.wait_until(lambda c: c.in_flight == 3, WAIT)
    closer = threading.Thread(target=service.close)
    closer.start()
    closer.join(WAIT)
    assert not closer.is_alive() and hung.calls.in_flight == 3

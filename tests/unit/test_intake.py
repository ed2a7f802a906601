"""Each node's report budget (controller/intake.py) and what one report may adopt (the books):
one agent certificate cannot make the controller do unbounded work, and never spends another
node's budget."""
from __future__ import annotations

from dataclasses import replace

import pytest

from controller.core.ledger import Ledger
from controller.core.records import Write
from controller.intake import Bucket, IntakeSettings, ReportIntake, ReportRefused
from tests.unit.test_ledger import BACKFILL, SETTINGS, Report, Vm, counter

SMALL = IntakeSettings(reports_per_minute=60, report_burst=5, report_mib_per_minute=1, strikes=4, penalty_seconds=10)


def test_a_bucket_gives_its_burst_then_its_rate():
    bucket = Bucket(rate=2.0, burst=3, now=0.0)
    assert [bucket.take(1, 0.0) for _ in range(4)] == [True, True, True, False]
    assert bucket.take(1, 0.5) and not bucket.take(1, 0.5)       # 2 a second
    assert bucket.take(3, 100.0) and not bucket.take(1, 100.0)    # never more than the burst


def test_reports_over_a_nodes_budget_wait_and_are_counted_and_other_nodes_keep_theirs():
    intake = ReportIntake(SMALL)
    stream = intake.open_stream("flood", 0.0)
    assert [stream.admit("flood", 100, 0.0) for _ in range(5)] == [0.0] * 5
    assert stream.admit("flood", 100, 0.0) == pytest.approx(1.0)   # 60 a minute: one a second
    assert stream.admit("flood", 100, 0.5) == pytest.approx(0.5)   # the same report, asked again
    honest = intake.open_stream("honest", 0.0)
    assert honest.admit("honest", 100, 0.0) == 0.0                 # its own budget, untouched
    assert stream.admit("flood", 100, 1.0) == 0.0                  # taken when its budget has room
    assert intake.counts() == {"flood": (1, 0)}                    # one report held back, once
    assert intake.due_to_say("flood", 1.0) == 1 and intake.due_to_say("flood", 2.0) == 0


def test_bytes_count_as_well_as_reports():
    intake = ReportIntake(SMALL)        # 1 MiB a minute, a burst of 4 MiB (the floor)
    stream = intake.open_stream("n", 0.0)
    assert stream.admit("n", 4 * 2**20, 0.0) == 0.0
    assert stream.admit("n", 2**20, 0.0) == pytest.approx(60.0)    # a report in count, not in bytes


def test_a_paced_stream_yields_every_report_at_its_budgets_pace():
    intake = ReportIntake(SMALL)
    clock = [0.0]

    class Report:
        node_id = "n"

        def ByteSize(self) -> int:
            return 10

    def sleep_on_clock(seconds, is_active):   # the pause, on the test's clock
        clock[0] += seconds
        return True

    import controller.intake as intake_module
    real_pause, intake_module.pause = intake_module.pause, sleep_on_clock
    try:
        taken = [clock[0] for _ in intake.open_stream("n", 0.0).paced(
            [Report() for _ in range(8)], lambda: True, lambda node: None, clock=lambda: clock[0])]
    finally:
        intake_module.pause = real_pause
    assert taken == pytest.approx([0, 0, 0, 0, 0, 1, 2, 3])   # the burst, then one a second


def test_a_stream_that_keeps_breaking_the_budget_is_ended_and_the_node_sits_out_a_penalty():
    intake = ReportIntake(SMALL)
    stream = intake.open_stream("flood", 0.0)
    for _ in range(5):
        stream.admit("flood", 1, 0.0)
    now = 0.0
    for _ in range(3):   # each report taken only after a wait (a strike each), the next sent at once
        while (wait := stream.admit("flood", 1, now)) > 0:
            now += wait
    with pytest.raises(ReportRefused, match="4 reports in a row over its budget") as ended:
        stream.admit("flood", 1, now)
    assert ended.value.node_id == "flood"
    with pytest.raises(ReportRefused, match="may report again in 5 s") as held:
        intake.open_stream("flood", now + 5.0)
    assert held.value.retry_after == pytest.approx(5.0, abs=0.1)
    intake.open_stream("honest", 5.0)                # another node is not punished
    assert intake.open_stream("flood", now + 10.5).admit("flood", 1, now + 10.5) == 0.0
    assert intake.counts()["flood"] == (4, 1)


def test_a_report_in_budget_clears_the_streams_strikes():
    intake = ReportIntake(SMALL)
    stream = intake.open_stream("n", 0.0)
    now = 0.0
    for _ in range(50):   # a report over budget now and then, never `strikes` in a row: never ended
        while (wait := stream.admit("n", 1, now)) > 0:
            now += wait
        now += 0.5 if stream.strikes else 2.0
    assert stream.strikes < SMALL.strikes


def test_a_pause_ends_with_its_call():
    from controller.intake import pause
    assert pause(0.05, lambda: True)
    assert not pause(30.0, lambda: False)


def test_the_budgets_held_are_bounded():
    intake = ReportIntake(SMALL)
    intake.MAX_NODES = 10
    for i in range(100):
        intake.wait(f"n{i}", 1, 0.0)
    assert len(intake._nodes) == 10


# -- adoptions -----------------------------------------------------------------------------------

def unknown_vms(count: int, first: int = 0, memory: int = 32) -> list[Vm]:
    return [Vm(f"rogue-{i}", "", "backfill", 1, memory, 1.0) for i in range(first, first + count)]


def adopted(effects: list) -> list[str]:
    return [l.vm_name for e in effects if isinstance(e, Write) for l in e.created]


def events(effects: list, kind: str) -> list:
    return [ev for e in effects if isinstance(e, Write) for ev in e.events if ev.kind == kind]


def test_one_report_adopts_at_most_its_cap_and_the_rest_count_as_room_taken_until_a_later_report():
    settings = replace(SETTINGS, adoptions_per_report=8, adoptions_per_hour=20)
    ledger = Ledger(settings, BACKFILL, {}, counter())
    vms = unknown_vms(30)
    first = ledger.report(Report("n1", "n1:1", 64, 65536, vms), 10.0)
    assert adopted(first) == [vm.name for vm in vms[:8]]
    node = ledger.nodes["n1"]
    assert node.unexplained.memory_mib == 22 * 32    # the other 22 still take their room
    (deferred,) = events(first, "vm.adoption_deferred")
    assert deferred.detail["vms"] == 22
    second = ledger.report(Report("n1", "n1:1", 64, 65536, vms), 12.0)
    assert adopted(second) == [vm.name for vm in vms[8:16]]
    assert events(second, "vm.adoption_deferred") == []      # said once an hour
    third = ledger.report(Report("n1", "n1:1", 64, 65536, vms), 14.0)
    assert adopted(third) == [vm.name for vm in vms[16:20]]   # the hour's budget of 20 is spent
    assert adopted(ledger.report(Report("n1", "n1:1", 64, 65536, vms), 16.0)) == []
    assert len(ledger.leases) == 20 and node.unexplained.memory_mib == 10 * 32
    # the budget refills over the hour: 20 an hour is one every 180 s
    assert adopted(ledger.report(Report("n1", "n1:1", 64, 65536, vms), 16.0 + 370)) == [vms[20].name, vms[21].name]


def test_a_flood_of_fresh_names_from_one_node_leaves_other_nodes_adoptions_alone():
    settings = replace(SETTINGS, adoptions_per_report=4, adoptions_per_hour=8)
    ledger = Ledger(settings, BACKFILL, {}, counter())
    rows = []
    for round_ in range(10):
        rows += adopted(ledger.report(Report("n1", "n1:1", 64, 65536, unknown_vms(100, first=100 * round_)),
                                      10.0 + round_))
    assert len(rows) == 8
    honest = [Vm("honest-1", "", "on_demand", 1, 64, 1.0)]
    assert adopted(ledger.report(Report("n2", "n2:1", 4, 2048, honest), 30.0)) == ["honest-1"]

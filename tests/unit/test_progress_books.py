"""A batch tenant's progress as its guests say it (controller.core.progress, issue 26 item 3): the
pure choice among statements, the book's history for job_progress.progress_rate, and the books reading
real report messages (the protos the service passes): each statement filed under the tenant of
its VM's lease, never anyone else's, and forgotten with the lease."""
from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, strategies as st

from controller import checks
from controller.core.job_progress import Progress, progress_rate
from controller.core.ledger import Ledger
from controller.core.progress import MAX_SAMPLES, ProgressBook, Statement, tenant_progress
from controller.core.records import BackfillConfig, Policy
from gleaner_common.ids import InvalidField
from protos import controller_pb2

from .test_ledger import SETTINGS, counter

T0 = 1000.0


# -- tenant_progress: pure ------------------------------------------------------------------------

def test_no_statement_is_no_progress():
    assert tenant_progress([]) is None


def test_the_largest_total_then_the_largest_done_wins():
    said = [Statement(9, 10), Statement(3, 50), Statement(7, 50), Statement(0, 1)]
    assert tenant_progress(said) == Progress(7, 50)
    assert tenant_progress(reversed(said)) == Progress(7, 50)
    assert tenant_progress([Progress(2, 4)]) == Progress(2, 4)   # goals.Progress reads the same


@given(st.lists(st.tuples(st.integers(0, 10**15), st.integers(1, 10**15)).map(
    lambda p: Statement(min(p), max(p))), min_size=1, max_size=20))
def test_the_choice_is_one_of_the_statements_and_none_knows_more(said):
    chosen = tenant_progress(said)
    assert (chosen.done, chosen.total) in {(s.done, s.total) for s in said}
    assert all((s.total, s.done) <= (chosen.total, chosen.done) for s in said)


# -- the book --------------------------------------------------------------------------------------

def test_the_history_samples_each_change_of_done_or_vcpus_and_feeds_progress_rate():
    book = ProgressBook()
    assert book.note("l1", "batch", 0, 100, 0.0, T0)
    book.sample("batch", 2, T0)
    assert not book.note("l1", "batch", 0, 100, 5.0, T0 + 5)   # the same word again: nothing new
    book.sample("batch", 2, T0 + 5)                              # nor a new sample
    book.note("l1", "batch", 10, 100, 0.0, T0 + 3600)
    book.sample("batch", 4, T0 + 3600)
    book.sample("batch", 4, T0 + 3700)
    book.note("l1", "batch", 30, 100, 0.0, T0 + 7200)
    book.sample("batch", 4, T0 + 7200)
    assert book.history("batch") == ((T0, 0, 2), (T0 + 3600, 10, 4), (T0 + 7200, 30, 4))
    # 30 units over the vCPU-hours up to 1 h before the last word (the first word came 1 h after
    # the first vCPUs: job_progress.report_lag): 2 vCPU-hours
    assert progress_rate(book.history("batch")) == pytest.approx(30 / 2)
    assert book.progress("batch") == Progress(30, 100)
    assert book.statement("l1") == Statement(30, 100, T0 + 7200)


def test_a_new_total_is_a_new_job_whose_history_starts_afresh():
    book = ProgressBook()
    book.note("l1", "batch", 5, 10, 0.0, T0)
    book.sample("batch", 1, T0)
    book.note("l1", "batch", 9, 10, 0.0, T0 + 60)
    book.sample("batch", 1, T0 + 60)
    book.note("l1", "batch", 1, 20, 0.0, T0 + 120)
    book.sample("batch", 1, T0 + 120)
    assert book.history("batch") == ((T0 + 120, 1, 1),)


def test_the_history_is_bounded():
    book = ProgressBook()
    for i in range(MAX_SAMPLES * 3):
        book.note("l1", "batch", i, 10**15, 0.0, T0 + i)
        book.sample("batch", 1, T0 + i)
    history = book.history("batch")
    assert len(history) == MAX_SAMPLES and history[-1] == (T0 + MAX_SAMPLES * 3 - 1, MAX_SAMPLES * 3 - 1, 1)


def test_a_statement_goes_with_its_lease_and_the_tenants_last_progress_stays():
    book = ProgressBook()
    book.note("l1", "batch", 4, 10, 0.0, T0)
    book.note("l2", "batch", 2, 10, 0.0, T0)
    book.sample("batch", 2, T0)
    book.forget("l1")
    assert book.statement("l1") is None and book.progress("batch") == Progress(2, 10)   # the live VMs' word
    book.sample("batch", 1, T0 + 1)
    book.forget("l2")
    assert book.progress("batch") == Progress(2, 10)   # no VM left: the last it had (the job goes on)
    book.forget_tenant("batch")
    assert book.progress("batch") is None and book.history("batch") == ()


def test_one_tenants_guests_never_move_another_tenants_progress():
    book = ProgressBook()
    book.note("a1", "alpha", 1, 10, 0.0, T0)
    book.sample("alpha", 1, T0)
    book.note("b1", "beta", 10**15, 10**15, 0.0, T0)   # beta's guest says the most there is
    book.sample("beta", 1, T0)
    assert book.progress("alpha") == Progress(1, 10) and book.history("alpha") == ((T0, 1, 1),)


# -- the checks: a report past the bounds is refused naming the field ------------------------------

@pytest.mark.parametrize("done, total, field", [
    (6, 5, "vms.progress_done"),
    (1, 0, "vms.progress_done"),
    (0, 10**15 + 1, "vms.progress_total"),
    (2**64 - 1, 2**64 - 1, "vms.progress_total"),
])
def test_a_report_past_the_progress_bounds_is_refused_naming_the_field(done, total, field):
    report = node_report(vm("v1", done=done, total=total))
    with pytest.raises(InvalidField) as refused:
        checks.report(report)
    assert refused.value.field == field and str(done if field.endswith("done") else total) in str(refused.value)
    saved = node_report()
    saved.hibernated.add(name="v2", lease_id="l2", vm_role=controller_pb2.VM_ROLE_BACKFILL, vcpus=1, memory_mib=256,
                         launched_at=T0, progress_done=done, progress_total=total)
    with pytest.raises(InvalidField) as refused:
        checks.report(saved)
    assert refused.value.field == field.replace("vms.", "hibernated.")


@pytest.mark.parametrize("for_s", [-1.0, float("nan"), float("inf"), 1e12])
def test_a_progress_age_out_of_bounds_is_refused(for_s):
    report = node_report(vm("v1", done=1, total=5))
    report.vms[0].progress_for_s = for_s
    with pytest.raises(InvalidField) as refused:
        checks.report(report)
    assert refused.value.field == "vms.progress_for_s"


def test_reports_within_the_bounds_pass_and_0_of_0_is_nothing_said():
    for done, total in ((0, 0), (0, 1), (5, 5), (10**15, 10**15)):
        checks.report(node_report(vm("v1", done=done, total=total)))
    assert checks.progress(vm("v1"), "vms") is None
    assert checks.progress(vm("v1", done=2, total=5), "vms") == (2, 5)


# -- the books, fed the service's report messages --------------------------------------------------

def vm(name: str, role: str = "backfill", done: int = 0, total: int = 0, vcpus: int = 1) -> controller_pb2.ReportedVm:
    return controller_pb2.ReportedVm(name=name, lease_id="", role=role, state="running", vcpus=vcpus, memory_mib=256,
                                     launched_at=T0 - 10, image="tiny", progress_done=done, progress_total=total,
                                     progress_for_s=1.0 if total else 0.0)


def node_report(*vms: controller_pb2.ReportedVm, node: str = "n1") -> controller_pb2.NodeReport:
    return controller_pb2.NodeReport(node_id=node, agent_address=f"{node}:1", cpus=4, memory_mib=4096,
                                     images=["tiny"], min_memory_mib=32, agent_version="t", vms=vms)


def books() -> Ledger:
    backfill = BackfillConfig(enabled=False, memory_mb=256, vcpus=1, termination_policy=Policy.MOST_RECENT,
                              interruption="terminate")
    return Ledger(dataclasses.replace(SETTINGS, adoptions_per_report=10), backfill, {}, counter())


def lease_of(ledger: Ledger, name: str):
    return next(l for l in ledger.leases.values() if l.vm_name == name)


def test_the_books_keep_each_backfill_leases_latest_statement_under_its_tenant():
    ledger = books()
    ledger.report(node_report(vm("bf1", done=1, total=5), vm("bf2"), vm("od1", role="on_demand", done=5, total=5)), T0)
    ledger.report(node_report(vm("bf1", done=1, total=5), vm("bf2"), vm("od1", role="on_demand", done=5, total=5)),
                  T0 + 1)   # adopted by the first report: their word counts from this one
    bf1, bf2, od1 = (lease_of(ledger, n) for n in ("bf1", "bf2", "od1"))
    assert ledger.progress.statement(bf1.lease_id) == Statement(1, 5, T0)
    assert ledger.progress.statement(bf2.lease_id) is None          # it said nothing
    assert ledger.progress.statement(od1.lease_id) is None          # an on-demand VM's word steers nothing
    assert ledger.progress.progress("backfill") == Progress(1, 5)
    assert ledger.progress.progress("default") is None
    assert ledger.progress.history("backfill") == ((T0 + 1, 1, 2),)   # both backfill VMs' vCPUs held
    ledger.report(node_report(vm("bf1", done=3, total=5), vm("bf2", done=1, total=5)), T0 + 30)
    assert ledger.progress.progress("backfill") == Progress(3, 5)
    assert ledger.progress.history("backfill")[-1] == (T0 + 30, 3, 2)
    ledger.report(node_report(vm("bf2", done=1, total=5)), T0 + 40)   # bf1 is lost: it may come back
    assert ledger.leases[bf1.lease_id].state == "lost" and ledger.progress.statement(bf1.lease_id) is not None
    ledger.release(bf1.lease_id, True, T0 + 41)
    ledger.stop_done(bf1.lease_id, "destroyed", True, 0.1, "", T0 + 42)
    assert bf1.lease_id not in ledger.leases and ledger.progress.statement(bf1.lease_id) is None
    assert ledger.progress.progress("backfill") == Progress(1, 5)     # the live VM's word now


def test_a_report_calling_an_on_demand_vm_backfill_moves_no_progress():
    """The lease's role is the books' word, not the report's: an on-demand VM reported as backfill
    (a confused or lying agent) steers no batch tenant."""
    ledger = books()
    ledger.report(node_report(vm("od1", role="on_demand")), T0)
    ledger.report(node_report(vm("od1", role="backfill", done=4, total=5)), T0 + 1)
    assert lease_of(ledger, "od1").role == "on_demand"
    assert ledger.progress.statement(lease_of(ledger, "od1").lease_id) is None
    assert ledger.progress.progress("backfill") is None and ledger.progress.progress("default") is None


def test_a_vm_the_books_do_not_explain_says_nothing():
    ledger = books()
    ledger.report(node_report(vm("bf1", done=1, total=5)), T0)
    ledger.report(node_report(vm("bf1", done=1, total=5)), T0 + 1)
    other = books()   # a node none of whose VMs is in these books yet: the first report adopts, says nothing
    other.report(node_report(vm("bf9", done=4, total=5), node="n2"), T0)
    assert other.progress.progress("backfill") is None
    assert ledger.progress.progress("backfill") == Progress(1, 5)

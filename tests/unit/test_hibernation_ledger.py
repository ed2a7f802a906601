"""Hibernation in the books (issue 25), pure.

- The ledger's random sequences (tests/unit/test_ledger.py's machine) with interruption =
  hibernate, agents that save and restore within a small disk budget, lost answers, failures and
  controller crashes: the same invariants hold, saved VMs never pass their node's budget, and once
  everything settles every hibernated lease has its saved VM and every saved VM its lease.
- The steps one by one: a victim saved keeps its lease and frees its room, the launcher resumes the
  oldest first, time asleep is not work, the wait limit and a failed resume discard (and only then
  is work lost), a refused save terminates, the budget goes to the most work at stake.
- controller.core.hibernation.interruptions, on random small cases.
"""
from __future__ import annotations

import itertools
from collections import Counter
from dataclasses import dataclass, replace

import pytest
from hypothesis import HealthCheck, assume, settings, strategies as st
from hypothesis.stateful import invariant, rule, run_state_machine_as_test

from controller.core.hibernation import interruptions
from controller.core.ledger import Ledger
from controller.core.records import (HIBERNATED, RESUMING, STOPS, UNREACHABLE, VICTIM, Ask, Launch, Resume, Stop, Write,
                                     work)

from .test_ledger import BACKFILL, NODES, SETTINGS, LedgerMachine, Report, Vm, counter

WAIT = 150
HIBERNATING = replace(BACKFILL, interruption="hibernate", hibernate_wait_seconds=WAIT)
BUDGET_MIB = 600   # two of the machine's 256 MiB backfill VMs per node
STATS: Counter = Counter()


@dataclass
class SavingReport(Report):
    hibernation_budget_bytes: int = BUDGET_MIB << 20


@dataclass
class SavedVm(Vm):
    hibernated: bool = True


class HibernatingMachine(LedgerMachine):
    """The ledger machine with interruption = hibernate: its agents save a victim (within the
    budget, else refuse), restore one on Resume, and delete the saved state on a stop."""

    def __init__(self) -> None:
        super().__init__()
        self.ledger = Ledger(SETTINGS, HIBERNATING, {}, self.new_id)
        self.saved: dict[str, dict[str, Vm]] = {n: {} for n in NODES}

    def report_of(self, node_id: str) -> Report:
        cpus, memory = NODES[node_id]
        saved = [SavedVm(**vars(vm)) for vm in self.saved[node_id].values()]
        return SavingReport(node_id, f"{node_id}:1", cpus, memory, list(self.world[node_id].values()) + saved)

    def apply(self, effects) -> None:
        for effect in effects:
            if isinstance(effect, Write):
                for event in effect.events:
                    if event.kind in ("vm.hibernated", "vm.resumed", "vm.discarded", "vm.hibernate_refused"):
                        self.reach(event.kind)
        super().apply(effects)

    def carry_out(self, call, ok: bool) -> tuple[bool, str]:
        """What the agent does with a call; returns (ok, outcome or error)."""
        node = call.lease.node_id
        vms, saved = self.world[node], self.saved[node]
        name = call.lease.vm_name
        if not ok:
            return False, "agent down"
        if isinstance(call, Launch):
            vms.setdefault(name, Vm(name, call.lease.lease_id, call.lease.role, call.lease.vcpus,
                                    call.lease.memory_mib, self.now))
            return True, ""
        if isinstance(call, Resume):
            if name not in saved:
                return name in vms, "no saved state"   # already resumed: the agent answers ok
            vms[name] = saved.pop(name)
            return True, ""
        if call.hibernate:
            if name in saved:
                return True, HIBERNATED
            vm = vms.get(name)
            if vm is None:
                return True, "not_found"
            if sum(v.memory_mib for v in saved.values()) + vm.memory_mib > BUDGET_MIB:
                return False, "hibernation budget spent"
            saved[name] = vms.pop(name)
            return True, HIBERNATED
        vms.pop(name, None)
        saved.pop(name, None)   # a stop deletes the saved state with the domain
        return True, "clean_shutdown"

    def answer(self, call, ok: bool, said: str) -> None:
        lease_id = call.lease.lease_id
        if isinstance(call, Launch):
            self.apply(self.ledger.launch_done(lease_id, ok, "" if ok else said, self.now))
        elif isinstance(call, Resume):
            self.apply(self.ledger.resume_done(lease_id, ok, "" if ok else said, self.now))
        else:
            self.apply(self.ledger.stop_done(lease_id, said if ok else "error", ok, 1.0, "" if ok else said, self.now))

    @rule(data=st.data(), lose_answer=st.booleans())
    def deliver(self, data, lose_answer):
        """An agent carries out one call (or fails it while faulty); its answer may be lost."""
        assume(self.calls)
        call = self.calls.pop(data.draw(st.integers(0, len(self.calls) - 1)))
        ok, said = self.carry_out(call, not self.faulty)
        if not lose_answer:
            self.answer(call, ok, said)

    @rule()
    def agents_catch_up(self):
        """The agents carry out every call asked so far (failing them while faulty), answers delivered."""
        calls, self.calls = self.calls, []
        for call in calls:
            self.answer(call, *self.carry_out(call, not self.faulty))

    @rule(data=st.data())
    def on_demand_vm_released(self, data):
        """An on-demand VM's owner releases it, its agent stops it, the volunteers are evaluated and
        the launcher fills the room
        (where a hibernated VM may come back; the resume itself is a call like any other). The
        agents catch up first, so that saves asked so far are done."""
        self.agents_catch_up()
        on_demand = sorted(l.lease_id for l in self.ledger.leases.values()
                           if l.role == "on_demand" and l.state == "running")
        assume(on_demand)
        _lease, effects = self.ledger.release(data.draw(st.sampled_from(on_demand)), False, self.now)
        self.apply(effects)
        for stop in [c for c in self.calls if isinstance(c, Stop) and c.lease.lease_id == _lease.lease_id]:
            self.calls.remove(stop)
            self.answer(stop, *self.carry_out(stop, not self.faulty))
        for node in sorted(NODES):
            self.apply(self.ledger.report(self.report_of(node), self.now))
        self.apply(self.ledger.select(self.now, True))   # the periodic volunteer evaluation
        self.apply(self.ledger.fill(self.now))

    @rule(run_calls=st.booleans())
    def controller_crashes(self, run_calls):
        """kill -9: calls in flight may have reached the agents or not; the books come back from the rows."""
        if run_calls:
            for call in self.calls:
                self.carry_out(call, True)
            self.calls = []
        super().controller_crashes(False)

    def teardown(self):
        self.faulty = False
        for _ in range(40):
            while self.calls:
                call = self.calls.pop(0)
                self.answer(call, *self.carry_out(call, True))
            for node in NODES:
                self.apply(self.ledger.report(self.report_of(node), self.now))
            self.now += 5
            self.apply(self.ledger.tick(self.now))
        pending = [r for r in self.store.requests.values() if r.outcome == "pending"]
        assert not pending, pending
        for node_id in NODES:
            mine = {l.vm_name: l for l in self.ledger.by_node.get(node_id, {}).values()}
            for name in self.world[node_id]:
                assert name in mine and mine[name].state == "running", f"{name} runs on {node_id}: {mine.get(name)}"
            for name in self.saved[node_id]:
                assert name in mine and mine[name].state == HIBERNATED, f"{name} saved on {node_id}: {mine.get(name)}"
            for name, lease in mine.items():
                assert lease.state in ("running", HIBERNATED), lease
                assert name in (self.world if lease.state == "running" else self.saved)[node_id], lease
        for outcome in ("vm.hibernated", "vm.resumed", "vm.discarded"):
            if outcome in self.reached:
                STATS[f"examples_with_{outcome}"] += 1
        STATS["examples"] += 1

    @invariant()
    def saved_vms_stay_within_the_budget(self):
        for node_id, saved in self.saved.items():
            assert sum(v.memory_mib for v in saved.values()) <= BUDGET_MIB, (node_id, saved)

    @invariant()
    def every_hibernated_lease_waits_with_a_deadline_and_holds_nothing(self):
        for lease in self.ledger.leases.values():
            if lease.state in (HIBERNATED, RESUMING):
                assert lease.deadline is not None and lease.hibernated_at is not None, lease
            if lease.state == HIBERNATED:
                assert lease.held.vcpus == 0 and lease.held.memory_mib == 0
        asleep = Counter(l.node_id for l in self.ledger.leases.values() if l.state == HIBERNATED)
        assert {n: c for n, c in self.ledger._asleep_on.items() if c} == dict(asleep)


def test_ledger_sequences_with_hibernation():
    """The machine's random sequences under interruption = hibernate; enough of them save, resume
    and discard VMs (the counts are printed; a resume needs a save, a release and a fill on a node
    that is up and selected, so fewer sequences reach one)."""
    STATS.clear()
    run_state_machine_as_test(HibernatingMachine, settings=settings(
        max_examples=150, stateful_step_count=40, deadline=None, database=None, derandomize=True,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much]))
    print(dict(STATS))
    assert STATS["examples_with_vm.hibernated"] >= STATS["examples"] / 6, dict(STATS)
    assert STATS["examples_with_vm.resumed"] >= 3, dict(STATS)
    assert STATS["examples_with_vm.discarded"] >= 1, dict(STATS)


# -- step by step ---------------------------------------------------------------------------------

T0 = 1000.0


def events(effects, kind: str) -> list:
    return [e for w in effects if isinstance(w, Write) for e in w.events if e.kind == kind]


def calls(effects, kind: type) -> list:
    return [e for e in effects if isinstance(e, kind)]


def full_node(budget_mib: int = BUDGET_MIB, backfill=HIBERNATING) -> tuple[Ledger, list[str]]:
    """Node n1 (2 vCPUs, 1024 MiB) full of two running backfill VMs; their lease ids."""
    ledger = Ledger(SETTINGS, backfill, {}, counter())
    ledger.report(SavingReport("n1", "n1:1", *NODES["n1"], [], hibernation_budget_bytes=budget_mib << 20), T0)
    launches = calls(ledger.fill(T0), Launch)
    assert len(launches) == 2
    for launch in launches:
        ledger.launch_done(launch.lease.lease_id, True, "", T0 + 1)
    return ledger, [launch.lease.lease_id for launch in launches]


def preempt(ledger: Ledger, vcpus: int, now: float, request_id: str = "r1", memory: int = 256) -> list:
    return ledger.request(Ask(vcpus, memory, "tiny", "alice", request_id), now)


def test_a_saved_victim_keeps_its_lease_frees_its_room_and_loses_no_work():
    ledger, _ = full_node()
    effects = preempt(ledger, 1, T0 + 100)
    [stop] = calls(effects, Stop)
    assert stop.hibernate and stop.lease.state in VICTIM
    [preempting] = events(effects, "vm.preempting")
    assert preempting.detail["interruption"] == "hibernate"
    [launch] = calls(effects, Launch)
    ledger.launch_done(launch.lease.lease_id, True, "", T0 + 101)
    saved = ledger.stop_done(stop.lease.lease_id, HIBERNATED, True, 1.8, "", T0 + 103)
    asleep = ledger.leases[stop.lease.lease_id]
    assert asleep.state == HIBERNATED and asleep.hibernated_at == T0 + 103 and asleep.deadline == T0 + 103 + WAIT
    assert asleep.held.vcpus == 0 and asleep.held.memory_mib == 0
    [event] = events(saved, "vm.hibernated")
    assert event.detail["work_kept_vcpu_seconds"] == pytest.approx(102.0)
    assert not events(saved, "vm.preempted")
    assert work(asleep, T0 + 500) == pytest.approx(102.0)   # asleep, its work stands still


def test_a_victim_whose_save_is_refused_is_terminated_and_a_waiting_request_starts_once_it_is_saved():
    ledger, _ = full_node()
    effects = preempt(ledger, 2, T0 + 100, memory=700)   # memory short: it waits for both victims
    stops = calls(effects, Stop)
    assert len(stops) == 2 and all(s.hibernate for s in stops) and not calls(effects, Launch)
    refused = ledger.stop_done(stops[0].lease.lease_id, "error", False, 0.0, "hibernation budget spent", T0 + 101)
    [again] = calls(refused, Stop)
    assert not again.hibernate and events(refused, "vm.hibernate_refused")
    assert not calls(ledger.stop_done(stops[1].lease.lease_id, HIBERNATED, True, 1.0, "", T0 + 102), Launch)
    started = ledger.stop_done(again.lease.lease_id, "clean_shutdown", True, 1.0, "", T0 + 103)
    assert calls(started, Launch)   # both victims gone: the waiting lease starts
    [lost] = events(started, "vm.preempted")
    assert lost.detail["work_lost_vcpu_seconds"] > 0


def hibernated_one(ledger: Ledger, at: float, request_id: str) -> tuple[str, str]:
    """Preempt one backfill VM of n1 for a 1-vCPU request; its save confirmed. (victim, on-demand lease)."""
    effects = preempt(ledger, 1, at, request_id)
    [stop], [launch] = calls(effects, Stop), calls(effects, Launch)
    ledger.launch_done(launch.lease.lease_id, True, "", at + 1)
    ledger.stop_done(stop.lease.lease_id, HIBERNATED, True, 1.0, "", at + 2)
    return stop.lease.lease_id, launch.lease.lease_id


def resume_asked(ledger: Ledger, at: float, request_id: str) -> tuple[str, Resume]:
    """A VM of n1 hibernated for a 1-vCPU request at `at`; the request's VM released 2 s later, so
    the launcher asks the saved one back. (victim, the Resume asked)."""
    victim, od = hibernated_one(ledger, at, request_id)
    ledger.release(od, False, at + 2.2)
    ledger.stop_done(od, "clean_shutdown", True, 0.1, "", at + 2.3)
    [resume] = calls(ledger.fill(at + 2.4), Resume)
    return victim, resume


def test_the_launcher_resumes_the_oldest_hibernated_vm_first_and_time_asleep_is_not_work():
    ledger, _ = full_node()
    first, od1 = hibernated_one(ledger, T0 + 10, "r1")
    second, od2 = hibernated_one(ledger, T0 + 20, "r2")
    assert {ledger.leases[first].state, ledger.leases[second].state} == {HIBERNATED}
    _, released = ledger.release(od2, False, T0 + 30)
    ledger.stop_done(od2, "clean_shutdown", True, 1.0, "", T0 + 31)
    resumes = calls(ledger.fill(T0 + 31), Resume)
    assert [r.lease.lease_id for r in resumes] == [first]   # room for one: the one asleep longest
    assert not calls(ledger.fill(T0 + 31), Launch)          # and no new VM beside it
    ledger.resume_done(first, True, "", T0 + 32)
    awake = ledger.leases[first]
    assert awake.state == "running" and awake.hibernated_at is None
    assert awake.slept_seconds == pytest.approx(T0 + 32 - (T0 + 12))
    # it ran from T0+1 to T0+10 (the save was asked at the preemption) and from T0+32 on
    assert work(awake, T0 + 42) == pytest.approx((T0 + 12 - (T0 + 1)) + 10.0)


def test_the_wait_limit_discards_and_only_then_is_the_work_lost():
    ledger, _ = full_node()
    victim, _od = hibernated_one(ledger, T0 + 10, "r1")
    assert not calls(ledger.tick(T0 + 12 + WAIT - 1), Stop)
    effects = ledger.tick(T0 + 12 + WAIT)
    [stop] = calls(effects, Stop)
    assert stop.lease.lease_id == victim and stop.force and not stop.hibernate
    ended = ledger.stop_done(victim, "already_stopped", True, 0.0, "", T0 + 13 + WAIT)
    [discarded] = events(ended, "vm.discarded")
    assert discarded.detail["work_lost_vcpu_seconds"] == pytest.approx(11.0)   # its run, not its sleep
    assert victim not in ledger.leases


def test_a_failed_resume_discards_the_vm():
    ledger, _ = full_node()
    victim, _resume = resume_asked(ledger, T0 + 10, "r1")
    effects = ledger.resume_done(victim, False, "the state file is unreadable", T0 + 22)
    [stop] = calls(effects, Stop)
    assert stop.force and "resume failed" in stop.lease.end_reason


def test_a_report_showing_the_vm_saved_confirms_a_save_whose_answer_was_lost():
    ledger, _ = full_node()
    effects = preempt(ledger, 1, T0 + 100)
    [stop], [launch] = calls(effects, Stop), calls(effects, Launch)
    ledger.launch_done(launch.lease.lease_id, True, "", T0 + 101)
    victim = stop.lease
    others = [l for l in ledger.leases.values() if l.state == "running"]
    vms = [Vm(l.vm_name, l.lease_id, l.role, l.vcpus, l.memory_mib, T0) for l in others]
    saved = SavedVm(victim.vm_name, victim.lease_id, "backfill", victim.vcpus, victim.memory_mib, T0)
    confirmed = ledger.report(SavingReport("n1", "n1:1", *NODES["n1"], vms + [saved]), T0 + 104)
    assert events(confirmed, "vm.hibernated") and ledger.leases[victim.lease_id].state == HIBERNATED
    assert not ledger.stop_done(victim.lease_id, HIBERNATED, True, 1.0, "", T0 + 105)   # the late answer: nothing


def test_without_a_budget_or_under_terminate_victims_are_terminated():
    for budget, backfill in ((0, HIBERNATING), (BUDGET_MIB, BACKFILL)):
        ledger, _ = full_node(budget, backfill)
        [stop] = calls(preempt(ledger, 1, T0 + 100), Stop)
        assert not stop.hibernate, (budget, backfill.interruption)


def test_the_budget_goes_to_the_victim_with_the_most_work_at_stake():
    ledger, both = full_node(budget_mib=256)                # room for one saved VM
    first, od1 = hibernated_one(ledger, T0 + 10, "r1")      # saved with 9 s of work
    [other] = set(both) - {first}
    effects = preempt(ledger, 1, T0 + 500, "r2")            # the other, with 499 s at stake
    [save] = [s for s in calls(effects, Stop) if s.hibernate]
    [discard] = [s for s in calls(effects, Stop) if not s.hibernate]
    assert save.lease.lease_id == other and discard.lease.lease_id == first and discard.force
    assert ledger.leases[first].state == "discarding" and ledger.leases[first].held.memory_mib == 0


# -- the pure rule ------------------------------------------------------------------------------------

@pytest.mark.parametrize("seed", range(300))
def test_interruptions_stay_within_the_budget_and_never_drop_more_at_stake_for_less(seed):
    """Random small cases: the split is whole, within the budget, and gives up only what has less at stake."""
    import random
    rng = random.Random(seed)
    victims = [(f"v{i}", rng.choice([128, 256, 512]), float(rng.randint(0, 9))) for i in range(rng.randint(0, 3))]
    saved = [(f"s{i}", rng.choice([128, 256, 512]), float(rng.randint(0, 9))) for i in range(rng.randint(0, 3))]
    free = rng.choice([0, 128, 256, 384, 640])
    plan = interruptions(victims, saved, free)
    sizes = {c[0]: c[1] for c in victims + saved}
    at_stake = {c[0]: c[2] for c in victims + saved}
    assert set(plan.hibernate) | set(plan.terminate) == {v[0] for v in victims}
    assert not set(plan.hibernate) & set(plan.terminate) and set(plan.discard) <= {s[0] for s in saved}
    used = sum(sizes[v] for v in plan.hibernate) - sum(sizes[s] for s in plan.discard)
    assert used <= free, plan
    # a saved VM is given up only for a victim with more at stake than itself
    for s in plan.discard:
        assert any(at_stake[v] > at_stake[s] for v in plan.hibernate), plan
    # a victim terminated: no saved VM with less at stake is kept while it would have made room alone
    for v in plan.terminate:
        kept = [s for s in saved if s[0] not in plan.discard and s[2] < at_stake[v]]
        assert sum(s[1] for s in kept) + free - used < sizes[v], (plan, victims, saved, free)


def test_after_a_restart_a_resume_and_a_save_under_way_are_asked_again_when_the_node_reports():
    ledger, _ = full_node()
    victim, _resume = resume_asked(ledger, T0 + 10, "r1")
    # the controller dies with only the resume under way: its successor asks it again
    alone = Ledger(SETTINGS, HIBERNATING, {}, counter(), leases=list(ledger.leases.values()))
    asleep = ledger.leases[victim]
    saved_vm = SavedVm(asleep.vm_name, asleep.lease_id, "backfill", 1, 256, T0)
    others = [Vm(l.vm_name, l.lease_id, "backfill", 1, 256, T0) for l in ledger.leases.values() if l.state == "running"]
    assert [r.lease.lease_id for r in calls(alone.report(SavingReport("n1", "n1:1", *NODES["n1"], others + [saved_vm]),
                                                         T0 + 25), Resume)] == [victim]
    effects = preempt(ledger, 1, T0 + 30, "r2")   # the other backfill VM goes on notice, to be saved
    [save] = [s for s in calls(effects, Stop) if s.hibernate]
    # the controller dies before any answer; its successor reads the rows and the node reports
    again = Ledger(SETTINGS, HIBERNATING, {}, counter(), leases=list(ledger.leases.values()))
    other, asleep = ledger.leases[save.lease.lease_id], ledger.leases[victim]
    shown = [Vm(other.vm_name, other.lease_id, "backfill", 1, 256, T0),       # still runs: its save is asked again
             SavedVm(asleep.vm_name, asleep.lease_id, "backfill", 1, 256, T0)]  # still saved: its resume too
    redriven = again.report(SavingReport("n1", "n1:1", *NODES["n1"], shown), T0 + 40)
    assert [r.lease.lease_id for r in calls(redriven, Resume)] == [victim]
    assert [s.lease.lease_id for s in calls(redriven, Stop) if s.hibernate] == [save.lease.lease_id]


# -- calls whose outcome is unknown (tests.bench.chaos: an agent killed mid-save or mid-restore) ---------

def report_as_booked(ledger: Ledger, now: float) -> None:
    """n1 reports what the books say runs on it, and what they say is saved there."""
    vms = []
    for lease in (l for l in ledger.leases.values() if l.node_id == "n1"):
        kind = SavedVm if lease.state == HIBERNATED else Vm if lease.state == "running" or lease.state in VICTIM \
            else None
        if kind is not None:
            vms.append(kind(lease.vm_name, lease.lease_id, lease.role, lease.vcpus, lease.memory_mib,
                            lease.launched_at or now))
    ledger.report(SavingReport("n1", "n1:1", *NODES["n1"], vms), now)


def test_a_save_whose_outcome_is_unknown_is_asked_again_and_the_work_is_kept():
    """The agent died mid-save (libvirtd may finish it alone): not a refusal, so not terminated."""
    ledger, _ = full_node()
    effects = preempt(ledger, 1, T0 + 2)
    [stop], [launch] = calls(effects, Stop), calls(effects, Launch)
    ledger.launch_done(launch.lease.lease_id, True, "", T0 + 3)
    failed = ledger.stop_done(stop.lease.lease_id, UNREACHABLE, False, 0.0, "UNAVAILABLE: Socket closed", T0 + 3)
    assert events(failed, "vm.stop_failed") and not events(failed, "vm.hibernate_refused")
    assert not calls(failed, Stop) and ledger.leases[stop.lease.lease_id].state in VICTIM
    [again] = calls(ledger.tick(T0 + 3 + SETTINGS.retry_seconds), Stop)
    assert again.hibernate and again.lease.lease_id == stop.lease.lease_id
    saved = ledger.stop_done(stop.lease.lease_id, HIBERNATED, True, 0.0, "it was already hibernated", T0 + 5.5)
    assert events(saved, "vm.hibernated") and not events(saved, "vm.preempted")
    assert ledger.leases[stop.lease.lease_id].state == HIBERNATED


def test_a_resume_whose_outcome_is_unknown_is_asked_again_until_its_deadline():
    ledger, _ = full_node()
    victim, _resume = resume_asked(ledger, T0 + 2, "r1")
    failed = ledger.resume_done(victim, False, "UNAVAILABLE: Stream removed", T0 + 4.5, unknown=True)
    [warning] = events(failed, "vm.resume_failed")
    assert warning.detail["retry_in_s"] == SETTINGS.retry_seconds and not calls(failed, Stop)
    assert ledger.leases[victim].state == RESUMING   # not discarded: libvirtd may have restored it
    report_as_booked(ledger, T0 + 5)                 # the node lives (its agent restarted)
    [again] = calls(ledger.tick(T0 + 4.5 + SETTINGS.retry_seconds), Resume)
    assert again.lease.lease_id == victim
    ledger.resume_done(victim, True, "", T0 + 7)
    assert ledger.leases[victim].state == "running"
    # asked again and never answered: its deadline discards it, as before
    other, _resume = resume_asked(ledger, T0 + 8, "r2")
    ledger.resume_done(other, False, "DEADLINE_EXCEEDED", T0 + 10.3, unknown=True)
    [discard] = calls(ledger.tick(T0 + 10.4 + SETTINGS.launch_timeout), Stop)
    assert discard.lease.lease_id == other and discard.force and "not confirmed" in discard.lease.end_reason


def test_only_codes_that_leave_the_outcome_unknown_make_an_agent_call_worth_asking_again():
    import grpc

    from controller.agents import _failed

    class Error(grpc.RpcError):
        def __init__(self, code: grpc.StatusCode) -> None:
            self._code = code

        def code(self) -> grpc.StatusCode:
            return self._code

        def details(self) -> str:
            return "why"

    unknown = {c for c in grpc.StatusCode if not _failed("resume", "a:1", "vm", Error(c)).answered}
    assert unknown == {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.CANCELLED}

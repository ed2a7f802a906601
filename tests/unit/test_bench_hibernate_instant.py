"""tests/bench/hibernate.py part 3 (the instant path with hibernation): the parts that judge and sum
up its runs. A request counts only if its victim was really saved; the percentiles are nearest
rank; the goal fails the run; --parts names what is wrong. The state files are real files read by
the agent's own statefiles module."""
from __future__ import annotations

import argparse
import io
import json
import logging
import time
from pathlib import Path

import pytest

from gleaner_common.logs import LogfmtFormatter, log_event
from nodeagent.host import statefiles
from protos import controller_pb2
from tests.bench.hibernate import (INSTANT_GOAL, instant_summary, judge_save, logged_at, missed_goals, parse_parts,
                                  saves_logged)

MIB = 2**20


def state_file(directory: Path, name: str, magic: bytes) -> statefiles.StateFile | None:
    (directory / f"{name}{statefiles.SUFFIX}").write_bytes(magic + b"\0" * (MIB - len(magic)))
    return statefiles.read_state_file(directory, name)


def event(kind: str, **detail) -> controller_pb2.AuditEvent:
    return controller_pb2.AuditEvent(seq=7, at=1000.5, kind=kind, lease_id="l-1", detail_json=json.dumps(detail))


def test_a_saved_victim_counts_with_the_agents_save_time(tmp_path):
    saved = state_file(tmp_path, "gleaner-bf-1", statefiles.MAGIC_COMPLETE)
    judged = judge_save("gleaner-bf-1", event("vm.hibernated", seconds=1.234), "hibernated", saved)
    assert judged["save_s"] == 1.234 and judged["saved_at"] == 1000.5 and judged["state_mib"] > 0


@pytest.mark.parametrize("kind", ["vm.hibernate_refused", "vm.preempted", "vm.stopped"])
def test_a_victim_terminated_instead_ends_the_bench(tmp_path, kind):
    with pytest.raises(SystemExit, match=f"gleaner-bf-1 was not hibernated: {kind}"):
        judge_save("gleaner-bf-1", event(kind, stopped="clean_shutdown"), "ended", None)


@pytest.mark.parametrize("state,magic,missing", [("ended", statefiles.MAGIC_COMPLETE, False),
                                                 ("hibernated", statefiles.MAGIC_PARTIAL, False),
                                                 ("hibernated", b"", True)])
def test_a_save_event_without_its_lease_state_or_complete_file_ends_the_bench(tmp_path, state, magic, missing):
    saved = None if missing else state_file(tmp_path, "gleaner-bf-1", magic)
    with pytest.raises(SystemExit, match="vm.hibernated written but its lease is"):
        judge_save("gleaner-bf-1", event("vm.hibernated", seconds=1.0), state, saved)


def test_the_summary_is_nearest_rank_over_all_requests():
    runs = [{"instant_s": s, "save_s": 1.0 + s, "resume_after_release_s": 2.0 + s} for s in (0.4, 0.1, 0.3, 0.2)]
    summary = instant_summary(runs)
    # nearest rank: p50 of four is the 2nd smallest (a median would say 0.25), p99 the largest
    assert (summary["instant_p50_s"], summary["instant_p99_s"], summary["instant_max_s"]) == (0.2, 0.4, 0.4)
    assert summary["instant_victim_save_p50_s"] == 1.2 and summary["resume_after_release_p99_s"] == 2.4
    assert summary["instant_requests"] == 4


def test_the_instant_goal_fails_the_run_only_when_missed():
    assert missed_goals({"instant_p99_s": INSTANT_GOAL}) == []
    assert missed_goals({"instant_p99_s": INSTANT_GOAL + 0.001}) == [f"instant_p99_s 1.001 > {INSTANT_GOAL}"]
    assert missed_goals({}) == []   # parts not run judge nothing


def test_parts_are_checked_and_named():
    assert parse_parts("3") == {3} and parse_parts("1, 3") == {1, 3}
    for wrong in ("4", "", "x,3"):
        with pytest.raises(argparse.ArgumentTypeError, match="is not a part; give some of 1,2,3"):
            parse_parts(wrong)


def test_the_save_time_is_read_from_the_agents_own_log_lines():
    """The agent's logfmt, written by the agent's formatter: only hibernate.saved lines count."""
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(LogfmtFormatter())
    logger = logging.getLogger("test.bench.hibernate.saves")
    logger.addHandler(handler)
    logger.propagate = False
    logger.setLevel(logging.INFO)
    try:
        log_event(logger, "hibernate.started", domain="gleaner-bf-1", memory_mib=128)
        log_event(logger, "hibernate.saved", domain="gleaner-bf-1", lease_id="l-1", path="/x/gleaner-bf-1.save",
                  state_bytes=93847552, memory_mib=128, duration_s=5.904, slept_before_s=0.0,
                  note="the domain is stopped")
        log_event(logger, "resume.resumed", domain="gleaner-bf-1", duration_s=0.7)
        log_event(logger, "hibernate.saved", domain="gleaner-bf-2", duration_s=2.5)
    finally:
        logger.removeHandler(handler)
    assert saves_logged(out.getvalue()) == [("gleaner-bf-1", 5.904), ("gleaner-bf-2", 2.5)]
    text = out.getvalue()
    first = text.splitlines()[0]   # ts=YYYY-MM-DDTHH:MM:SS.mmmZ, UTC
    at = logged_at(text, "hibernate.started", "gleaner-bf-1")
    assert at is not None and abs(at - time.time()) < 5 and f"{at % 1:.3f}"[1:] == first[22:26]
    assert logged_at(text, "hibernate.started", "gleaner-bf") is None   # a name is matched whole
    assert logged_at(text, "hibernate.saved", "gleaner-bf-2") > logged_at(text, "hibernate.started", "gleaner-bf-1") - 1

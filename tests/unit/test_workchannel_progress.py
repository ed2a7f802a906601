"""The work channel's `progress DONE TOTAL` statements, read: the last well-formed one beside the
last busy/idle one, bounded (a guest's word is untrusted), and what the agent sends of it."""
from __future__ import annotations

import os

import pytest

from nodeagent.host.workchannel import (MAX_PROGRESS_TOTAL, NOISY_BYTES, SILENT, TAIL_BYTES, WorkState, channel_path,
                                        last_progress, last_statement, progress_fields, read_work_state)


@pytest.mark.parametrize("tail, whole, said", [
    (b"progress 1 5\n", True, (1, 5)),
    (b"progress 0 1\n", True, (0, 1)),                       # nothing done yet is a statement
    (b"progress 5 5\n", True, (5, 5)),
    (b"progress 1 5\nprogress 2 5\n", True, (2, 5)),
    (b"progress 2 5\r\n", True, (2, 5)),
    (b"progress 007 10\n", True, (7, 10)),                   # leading zeros are still the number
    (b"progress 1000000000000000 1000000000000000\n", True, (10**15, 10**15)),   # the bound itself
    # out of bounds or malformed: no statement, and the last well-formed one before it counts
    (b"progress 2 5\nprogress 6 5\n", True, (2, 5)),         # DONE past TOTAL
    (b"progress 2 5\nprogress 0 0\n", True, (2, 5)),         # TOTAL 0
    (b"progress 2 5\nprogress 1 1000000000000001\n", True, (2, 5)),   # TOTAL past 10**15
    (b"progress 2 5\nprogress 1 99999999999999999\n", True, (2, 5)),  # 17 digits
    (b"progress 2 5\nprogress -1 5\n", True, (2, 5)),
    (b"progress 2 5\nprogress 1.5 5\n", True, (2, 5)),
    (b"progress 2 5\nprogress 1 5 7\n", True, (2, 5)),
    (b"progress 2 5\nprogress  1 5\n", True, (2, 5)),
    (b"progress 2 5\nPROGRESS 3 5\n", True, (2, 5)),
    (b"progress 2 5\nprogress 3\n", True, (2, 5)),
    (b"progress 2 5\nprogress 3 5", True, (2, 5)),           # half written: not yet
    (b"ress 3 5\n", False, None),                            # a cut first line is no statement
    (b"progress 3 5\n", False, None),                        # ... even when what is left looks whole
    (b"x\nprogress 3 5\n", False, (3, 5)),
    (b"", True, None),
    (b"busy 1\nidle 1\n", True, None),
])
def test_last_progress(tail, whole, said):
    assert last_progress(tail, whole) == said


def test_progress_interleaved_with_busy_and_idle_leaves_each_its_own_last_word():
    tail = b"busy 1\nprogress 1 5\nidle 1\nbusy 2\nprogress 2 5\ngarbage\n"
    assert last_statement(tail) == "busy"
    assert last_progress(tail) == (2, 5)
    tail = b"busy 1\nprogress 1 5\nidle 1\n"
    assert (last_statement(tail), last_progress(tail)) == ("idle", (1, 5))
    assert last_statement(b"progress 1 5\n") == ""   # progress is no busy/idle word


def test_the_state_carries_the_progress_and_its_age(tmp_path):
    path = channel_path(tmp_path, "vm1")
    path.write_bytes(b"busy 1\nprogress 1 5\nbusy 2\n")
    os.utime(path, (500.0, 500.0))
    assert read_work_state(path, 1000.0) == WorkState("busy", 500.0, False, (1, 5), 500.0)
    assert read_work_state(path, 400.0).progress_for_s == 0.0   # a clock that went back: never negative
    path.write_bytes(b"progress 3 5\n")   # progress alone: no busy/idle word, its age all the same
    os.utime(path, (900.0, 900.0))
    assert read_work_state(path, 1000.0) == WorkState("", 0.0, False, (3, 5), 100.0)
    path.write_bytes(b"busy 1\nprogress 9 5\n")   # out of bounds alone: busy, no progress
    os.utime(path, (900.0, 900.0))
    assert read_work_state(path, 1000.0) == WorkState("busy", 100.0)
    path.write_bytes(b"progress 9 5\n")
    assert read_work_state(path, 1000.0) is SILENT


def test_only_the_tail_is_read_and_a_cut_progress_line_does_not_count(tmp_path):
    path = channel_path(tmp_path, "vm1")
    path.write_bytes(b"progress 1 5\n" + b"x" * 10_000 + b"\nprogress 4 5\n")
    assert read_work_state(path, 2e9).progress == (4, 5)
    # the tail starts inside the first line, "notprogress 1 5", at "progress 1 5": a cut line
    path.write_bytes(b"notprogress 1 5\n" + b"#" * (TAIL_BYTES - 14) + b"\n")
    assert path.read_bytes()[-TAIL_BYTES:].startswith(b"progress 1 5\n")
    assert read_work_state(path, 2e9) is SILENT
    line = b"progress 11 15\n"
    # cut exactly at a line's start still counts as cut (the reader cannot tell): no statement
    path.write_bytes(b"a\n" + line + b"#" * (TAIL_BYTES - len(line) - 1) + b"\n")
    assert path.read_bytes()[-TAIL_BYTES:].startswith(line)
    assert read_work_state(path, 2e9) is SILENT


def test_a_flood_of_progress_is_read_from_its_tail_and_is_noisy(tmp_path):
    path = channel_path(tmp_path, "vm1")
    lines = b"".join(b"progress %d 1000000\n" % i for i in range(NOISY_BYTES // 10))
    path.write_bytes(lines)
    state = read_work_state(path, 2e9)
    assert state.noisy and state.progress == (NOISY_BYTES // 10 - 1, 1_000_000)
    path.write_bytes(b"progress 1 5" * (NOISY_BYTES // 12 + 1))   # no newline at all: nothing said
    assert read_work_state(path, 2e9) == WorkState("", 0.0, True)


def test_garbage_says_no_progress(tmp_path):
    path = channel_path(tmp_path, "vm1")
    path.write_bytes(bytes(range(256)) + b"\nprogress \xff 5\nprogress 1 5\x00\n")
    assert read_work_state(path, 2e9) is SILENT


def test_the_proto_fields_say_0_of_0_when_nothing_was_said():
    assert progress_fields(SILENT) == dict(progress_done=0, progress_total=0, progress_for_s=0.0)
    assert progress_fields(WorkState("busy", 3.0, False, (2, 7), 3.0)) == \
        dict(progress_done=2, progress_total=7, progress_for_s=3.0)
    assert MAX_PROGRESS_TOTAL == 10**15

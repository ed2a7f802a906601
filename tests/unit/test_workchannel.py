"""The work channel's file, read: the guest's last well-formed statement and its age."""
from __future__ import annotations

import os
import stat

import pytest

from gleaner_common.ids import MAX_WORK_AGE_SECONDS
from nodeagent.host.workchannel import (NOISY_BYTES, SILENT, TAIL_BYTES, WorkState, channel_path,
                                        last_statement, read_work_state)


@pytest.mark.parametrize("tail, whole, said", [
    (b"busy 1\n", True, "busy"),
    (b"busy 1\nidle 1\n", True, "idle"),
    (b"busy 1\nidle 1\nbusy 2\n", True, "busy"),
    (b"busy\n", True, "busy"),                        # the job number is optional
    (b"idle 1\r\n", True, "idle"),
    (b"busy 1\nidle 1\nbus", True, "idle"),           # a statement half written does not count yet
    (b"busy 1\nrm -rf /\n", True, "busy"),            # garbage is skipped, not taken for a state
    (b"dle 1\nbusy 2\n", False, "busy"),
    (b"dle 1\n", False, ""),                          # a cut first line is no statement
    (b"", True, ""),
    (b"busy 1", True, ""),
    (b"busy one\n", True, ""),
    (b"BUSY 1\n", True, ""),
    (b"busy 123456789012345678901\n", True, ""),      # 21 digits: no statement
    (b"idlers\n", True, ""),
])
def test_last_statement(tail, whole, said):
    assert last_statement(tail, whole) == said


def test_the_age_is_since_the_files_last_write(tmp_path):
    path = channel_path(tmp_path, "vm1")
    assert path == tmp_path / "vm1.work"
    assert read_work_state(path, 1000.0) is SILENT            # no channel (an older domain, or on-demand)
    path.write_bytes(b"busy 1\nidle 1\nbusy 2\n")
    os.utime(path, (500.0, 500.0))
    assert read_work_state(path, 1000.0) == WorkState("busy", 500.0)
    assert read_work_state(path, 400.0) == WorkState("busy", 0.0)   # a clock that went back: never negative
    os.utime(path, (1.0, 1.0))
    assert read_work_state(path, 1e12) == WorkState("busy", float(MAX_WORK_AGE_SECONDS))  # within the controller's bound
    path.write_bytes(b"")
    assert read_work_state(path, 1000.0) is SILENT


def test_only_the_tail_is_read_and_a_cut_line_does_not_count(tmp_path):
    path = channel_path(tmp_path, "vm1")
    path.write_bytes(b"x" * 10_000 + b"\nidle 7\n")
    assert read_work_state(path, 2e9).state == "idle"
    # the tail starts inside the first line, "notbusy 1", at "busy 1": a cut line, not a statement
    path.write_bytes(b"notbusy 1\n" + b"#" * (TAIL_BYTES - 8) + b"\n")
    assert path.read_bytes()[-TAIL_BYTES:].startswith(b"busy 1\n")
    assert read_work_state(path, 2e9) is SILENT


def test_a_symlink_is_not_followed(tmp_path):
    secret = tmp_path / "secret"
    secret.write_bytes(b"busy 1\n")
    channel_path(tmp_path, "vm1").symlink_to(secret)
    assert read_work_state(channel_path(tmp_path, "vm1"), 2e9) is SILENT


def test_what_is_not_a_regular_file_says_nothing_and_never_blocks(tmp_path):
    path = channel_path(tmp_path, "vm1")
    path.mkdir()
    assert read_work_state(path, 2e9) is SILENT
    path.rmdir()
    os.mkfifo(path)   # opening a FIFO for reading would wait for a writer without O_NONBLOCK
    assert read_work_state(path, 2e9) is SILENT
    path.unlink()
    os.mknod(path, 0o600 | stat.S_IFCHR, os.makedev(1, 3))   # /dev/null's numbers
    assert read_work_state(path, 2e9) is SILENT


def test_a_file_far_past_its_statements_is_noisy(tmp_path):
    path = channel_path(tmp_path, "vm1")
    path.write_bytes(b"busy 1\n" * (NOISY_BYTES // 7))
    assert read_work_state(path, 2e9).noisy is False
    path.write_bytes(b"busy 1\n" * (NOISY_BYTES // 7 + 1))
    assert read_work_state(path, 2e9) == WorkState("busy", read_work_state(path, 2e9).for_s, True)
    path.write_bytes(b"x" * (NOISY_BYTES + 1))
    assert read_work_state(path, 2e9) == WorkState("", 0.0, True)   # noisy, and says nothing

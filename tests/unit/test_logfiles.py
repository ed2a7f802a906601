"""virtlogd's files in the console directory: what goes with a domain, what expires, and that
nothing put there by hand is ever touched."""
from __future__ import annotations

import os

from nodeagent.host.logfiles import CONSOLE, WORK, domain_files, expired_names, remove_domain_files, remove_files


def make(path, age: float, now: float = 1e9) -> None:
    path.write_bytes(b"line\n")
    os.utime(path, (now - age, now - age))


def test_a_domains_files_of_a_kind_go_with_their_rotated_copies_and_nothing_else(tmp_path):
    keep = [tmp_path / "vm1.log", tmp_path / "vm1.log.0", tmp_path / "vm10.work", tmp_path / "vm1.work.x",
            tmp_path / "vm1.work.1x", tmp_path / "xvm1.work"]
    gone = [tmp_path / "vm1.work", tmp_path / "vm1.work.0", tmp_path / "vm1.work.2", tmp_path / "vm1.work.12"]
    for path in keep + gone:
        path.write_bytes(b"idle\n")
    (tmp_path / "vm2.work.3").mkdir()   # not a file: left, and no error
    remove_domain_files(tmp_path, "vm1", [WORK])
    remove_domain_files(tmp_path, "vm1", [WORK])   # twice: nothing left to remove is no error
    remove_domain_files(tmp_path, "vm2", [WORK])
    assert [p.exists() for p in keep] == [True] * len(keep) and [p.exists() for p in gone] == [False] * len(gone)
    assert (tmp_path / "vm2.work.3").is_dir()
    remove_domain_files(tmp_path, "vm1", [CONSOLE, WORK])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["vm1.work.1x", "vm1.work.x", "vm10.work", "vm2.work.3",
                                                         "xvm1.work"]


def test_a_domains_files_expire_together_by_the_newest_one(tmp_path):
    now = 1e9
    make(tmp_path / "old.log", 7200, now)
    make(tmp_path / "old.log.0", 9000, now)
    make(tmp_path / "old.work.1", 8000, now)
    make(tmp_path / "rotating.log.0", 7200, now)   # its older copy is old, its log was written just now
    make(tmp_path / "rotating.log", 10, now)
    make(tmp_path / "recent.log", 3500, now)
    make(tmp_path / "orphan.work.2", 4000, now)    # a work channel's copy left by a crash: expires too
    assert expired_names(tmp_path, now, 3600) == ["old", "orphan"]
    assert expired_names(tmp_path, now, 0) == ["old", "orphan", "recent", "rotating"]
    assert expired_names(tmp_path / "missing", now, 0) == []   # no directory yet: nothing, no error
    assert domain_files(tmp_path, "old") == [(tmp_path / "old.log", now - 7200), (tmp_path / "old.log.0", now - 9000),
                                             (tmp_path / "old.work.1", now - 8000)]
    assert [p.name for p, _ in domain_files(tmp_path, "old", [WORK])] == ["old.work.1"]
    assert domain_files(tmp_path, "ol") == []   # another name's files are not its own


def test_what_was_put_there_by_hand_never_expires(tmp_path):
    now = 1e9
    secret = tmp_path / "secret"
    make(secret, 9999, now)
    (tmp_path / "link.log").symlink_to(secret)   # removing it would not delete the secret, but it is not ours
    (tmp_path / "dir.log").mkdir()
    os.mkfifo(tmp_path / "fifo.log")
    for name in ("notes.txt", "UPPER CASE.log", "-dash.log", "vm.log.bak", "vm.txt.1", ".hidden.log"):
        make(tmp_path / name, 9999, now)
    os.utime(tmp_path / "dir.log", (now - 9999, now - 9999))
    assert expired_names(tmp_path, now, 60) == []
    assert domain_files(tmp_path, "link") == [] and domain_files(tmp_path, "dir") == []


def test_remove_files_counts_what_it_deleted_and_logs_what_it_could_not(tmp_path, caplog):
    make(tmp_path / "a.log", 0)
    make(tmp_path / "file", 0)
    caplog.set_level("WARNING")
    # gone already: no error; under a file (NotADirectoryError, as a read-only filesystem's
    # error would be an OSError): logged and left, the rest still removed
    assert remove_files([tmp_path / "b.log", tmp_path / "file" / "x.log", tmp_path / "a.log"]) == 1
    assert not (tmp_path / "a.log").exists()
    [record] = [r for r in caplog.records if r.getMessage() == "console.remove_failed"]
    assert "x.log" in str(record.__dict__)

"""Overlay deletion is confined to the agent's overlay directory (issue 23): a domain's metadata
names its overlay, and whoever could write that metadata must not make the agent delete any
other file. Real files: a path elsewhere, a `..` escape and a symlink out are refused and
logged, and the file stays; the agent's own overlay is deleted."""
from __future__ import annotations

import logging

import pytest

from nodeagent.host.images import confined, delete_overlay, list_overlays, overlay_path


@pytest.fixture
def dirs(tmp_path):
    overlays = tmp_path / "state" / "overlays"
    overlays.mkdir(parents=True)
    victim = tmp_path / "elsewhere" / "precious.qcow2"
    victim.parent.mkdir()
    victim.write_bytes(b"not an overlay")
    return overlays, victim


def refusals(caplog) -> list[tuple[str, str]]:
    return [(r.path, r.reason) for r in caplog.records if r.getMessage() == "overlay.delete_refused"]


def test_the_agents_own_overlay_is_deleted(dirs, caplog):
    overlays, _victim = dirs
    path = overlay_path(overlays, "vm1")
    path.write_bytes(b"overlay")
    assert delete_overlay(path, overlays) and not path.exists()
    assert not delete_overlay(path, overlays)   # already gone: no error, nothing refused
    assert refusals(caplog) == []


def test_paths_outside_the_overlay_directory_are_refused_and_left(dirs, caplog):
    overlays, victim = dirs
    link = overlays / "vm-link.qcow2"
    link.symlink_to(victim)
    nested = overlays / "sub"
    nested.mkdir()
    (nested / "vm.qcow2").write_bytes(b"x")
    cases = [(victim, "the path is not in the overlay directory"),
             (overlays / ".." / ".." / "elsewhere" / "precious.qcow2", "the path has a '..' part"),
             (link, "the path is a symlink"),
             (nested / "vm.qcow2", "the path is not in the overlay directory")]
    with caplog.at_level(logging.WARNING, logger="nodeagent.host.images"):
        for path, _reason in cases:
            assert delete_overlay(path, overlays) is False
    assert victim.read_bytes() == b"not an overlay" and link.is_symlink() and (nested / "vm.qcow2").exists()
    assert refusals(caplog) == [(str(path), reason) for path, reason in cases]


def test_a_symlinked_state_directory_is_still_the_overlay_directory(tmp_path, caplog):
    """The admin's state_dir may be a symlink (to a bigger disk): its overlays are its own."""
    real = tmp_path / "big-disk" / "overlays"
    real.mkdir(parents=True)
    (tmp_path / "state").symlink_to(tmp_path / "big-disk")
    overlays = tmp_path / "state" / "overlays"
    path = overlay_path(overlays, "vm1")
    path.write_bytes(b"overlay")
    assert delete_overlay(path, overlays) and not (real / "vm1.qcow2").exists()
    assert refusals(caplog) == []


def test_the_orphan_sweep_lists_no_symlinks(dirs):
    overlays, victim = dirs
    (overlays / "vm-link.qcow2").symlink_to(victim)
    (overlays / "vm1.qcow2").write_bytes(b"overlay")
    assert list_overlays(overlays) == {"vm1": overlays / "vm1.qcow2"}


def test_confinement_is_one_rule_for_images_and_overlays(tmp_path):
    root = tmp_path / "root"
    (root / "inside").mkdir(parents=True)
    (root / "out").symlink_to(tmp_path)
    assert confined(root, root / "inside") == (root / "inside").resolve()
    assert confined(root, root / "inside" / ".." / "..") is None
    assert confined(root, root / "out" / "x") is None
    assert confined(root, tmp_path / "elsewhere") is None

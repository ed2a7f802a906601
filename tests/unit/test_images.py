"""Image resolution is confined to the image directory; overlays are real qcow2 files."""
from __future__ import annotations

import json
import subprocess

import pytest

from nodeagent.host.images import create_overlay, delete_overlay, list_overlays, resolve_image
from gleaner_common.ids import InvalidField


def qcow2(path, backing=None):
    cmd = ["qemu-img", "create", "-q", "-f", "qcow2"]
    if backing:
        cmd += ["-F", "qcow2", "-b", str(backing)]
    subprocess.run([*cmd, str(path), "16M"], check=True)
    return path


@pytest.fixture
def image_dir(tmp_path):
    images = tmp_path / "images"
    (images / "tiny").mkdir(parents=True)
    (images / "tiny" / "vmlinuz").write_bytes(b"kernel")
    (images / "tiny" / "initrd.img").write_bytes(b"initrd")
    qcow2(images / "tiny" / "disk.qcow2")
    (images / "raw.img").write_bytes(b"\0" * 4096)
    qcow2(images / "base.qcow2")
    qcow2(images / "child.qcow2", backing=images / "base.qcow2")
    return images


def test_kernel_bundle_and_disk_images_resolve(image_dir):
    tiny = resolve_image(image_dir, "tiny")
    assert tiny.boots_kernel and tiny.kernel == image_dir / "tiny" / "vmlinuz"
    assert tiny.disk == image_dir / "tiny" / "disk.qcow2" and tiny.disk_format == "qcow2"
    assert resolve_image(image_dir, "raw.img").disk_format == "raw"
    child = resolve_image(image_dir, "child.qcow2")  # a backing file inside the directory is fine
    assert not child.boots_kernel and child.disk_format == "qcow2"


def test_symlinks_inside_the_directory_are_followed(image_dir):
    (image_dir / "current").symlink_to("tiny")
    assert resolve_image(image_dir, "current").kernel == image_dir / "tiny" / "vmlinuz"


@pytest.mark.parametrize("make,ref,says", [
    (lambda d, o: (d / "out").symlink_to(o), "out", "resolves outside"),
    (lambda d, o: (d / "tiny" / "vmlinuz").unlink() or (d / "tiny" / "vmlinuz").symlink_to(o / "k"), "tiny",
     "resolves outside"),
    (lambda d, o: qcow2(d / "evil.qcow2", backing=qcow2(o / "secret.qcow2")), "evil.qcow2", "backing file outside"),
    (lambda d, o: None, "../outside", "'..' path part"),
    (lambda d, o: None, "/etc/passwd", "is absolute"),
    (lambda d, o: None, ".hidden", "starting with a letter or digit"),
    (lambda d, o: None, "missing", "no image"),
])
def test_anything_leading_outside_is_refused(image_dir, tmp_path, make, ref, says):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "k").write_bytes(b"k")
    make(image_dir, outside)
    with pytest.raises(InvalidField) as err:
        resolve_image(image_dir, ref)
    assert err.value.field == "image" and says in str(err.value)


def test_overlay_is_a_qcow2_on_the_base_and_is_replaced_when_stale(image_dir, tmp_path):
    overlays = tmp_path / "overlays"
    base = image_dir / "tiny" / "disk.qcow2"
    path = create_overlay(overlays, "vm1", base, "qcow2")
    path.write_bytes(b"stale junk")
    path = create_overlay(overlays, "vm1", base, "qcow2")
    info = json.loads(subprocess.run(["qemu-img", "info", "--output=json", str(path)], check=True,
                                     capture_output=True, text=True).stdout)
    assert info["format"] == "qcow2" and info["backing-filename"] == str(base)
    assert oct(path.stat().st_mode & 0o777) == "0o600"
    assert list_overlays(overlays) == {"vm1": path}
    assert delete_overlay(path, overlays) and not delete_overlay(path, overlays)

"""Boot images and per-domain overlays; the one module that runs qemu-img.

An image is named relative to the image directory and is either
* a kernel bundle: a directory with ``vmlinuz`` and ``initrd.img`` and optionally a base
  disk ``disk.qcow2`` (the project's tiny guest), or
* a disk image: a qcow2 or raw file that boots from its own bootloader.

Whatever the name, the resolved file must stay inside the image directory: absolute
paths, ``..`` and symlinks that lead out are refused, and so is a qcow2 whose backing
file lies outside. Every domain with a disk runs on its own qcow2 overlay, so the base
is never written and nothing a VM writes survives it.
"""
from __future__ import annotations

import json
import logging
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

from gleaner_common import ids
from gleaner_common.ids import InvalidField
from gleaner_common.logs import log_event

from .errors import HostExhausted, HostRefused, says_exhausted

log = logging.getLogger(__name__)


KERNEL_FILE = "vmlinuz"
INITRD_FILE = "initrd.img"
BASE_DISK_FILE = "disk.qcow2"
QCOW2_MAGIC = b"QFI\xfb"


class OverlayError(HostRefused):
    """qemu-img failed: the image cannot be used as it is (corrupt, unreadable, not installed)."""


class OverlayNoSpace(OverlayError, HostExhausted):
    """qemu-img or the overlay's file failed for want of disk space or memory."""


class ImageUnusable(InvalidField, HostRefused):
    """The request names an image this host does not have, or has broken: a fault of the host's
    image directory, not of the request's form (FAILED_PRECONDITION rather than INVALID_ARGUMENT)."""


@dataclass(frozen=True)
class BootImage:
    name: str
    kernel: Path | None
    initrd: Path | None
    disk: Path | None
    disk_format: str | None

    @property
    def boots_kernel(self) -> bool:
        return self.kernel is not None


def confined(root: Path, path: Path) -> Path | None:
    """`path` with every symlink and `..` resolved, if that lies inside `root` (itself resolved);
    else None. The one test of confinement, for images and overlays alike."""
    resolved = path.resolve()
    return resolved if resolved.is_relative_to(root.resolve()) else None


def _inside(root: Path, path: Path, image: str) -> Path:
    resolved = confined(root, path)
    if resolved is None:
        raise InvalidField("image", f"{image!r} resolves outside the image directory")
    return resolved


def _disk_format(path: Path) -> str:
    with open(path, "rb") as handle:
        return "qcow2" if handle.read(4) == QCOW2_MAGIC else "raw"


def _check_backing_chain(root: Path, disk: Path, image: str) -> None:
    """A qcow2 may name a backing file; it must lie inside the image directory too."""
    try:
        info = _qemu_img(["info", "--output=json", "--backing-chain", "-f", "qcow2", str(disk)])
    except OverlayError as exc:
        raise ImageUnusable("image", f"{image!r} is not a usable qcow2 image ({exc})") from None
    for layer in json.loads(info):
        backing = layer.get("full-backing-filename") or layer.get("backing-filename")
        if backing and not Path(backing).resolve().is_relative_to(root):
            raise InvalidField("image", f"{image!r} has a backing file outside the image directory")


def resolve_image(image_dir: Path, image: str) -> BootImage:
    """Find the image named `image`, confined to image_dir, or raise InvalidField."""
    ids.image(image)
    root = image_dir.resolve()
    path = _inside(root, root / image, image)
    if path.is_dir():
        kernel = _inside(root, path / KERNEL_FILE, image)
        initrd = _inside(root, path / INITRD_FILE, image)
        for part in (kernel, initrd):
            if not part.is_file():
                raise ImageUnusable("image", f"{image!r} is a directory without {part.name}")
        disk = path / BASE_DISK_FILE
        if disk.exists() or disk.is_symlink():
            disk = _inside(root, disk, image)
            _check_backing_chain(root, disk, image)
            return BootImage(image, kernel, initrd, disk, "qcow2")
        return BootImage(image, kernel, initrd, None, None)
    if path.is_file():
        fmt = _disk_format(path)
        if fmt == "qcow2":
            _check_backing_chain(root, path, image)
        return BootImage(image, None, None, path, fmt)
    raise ImageUnusable("image", f"no image {image!r} in the image directory")


def _qemu_img(args: list[str]) -> str:
    try:
        result = subprocess.run(["qemu-img", *args], capture_output=True, text=True, timeout=60)
    except FileNotFoundError:
        raise OverlayError("qemu-img is not installed (package qemu-utils)") from None
    except subprocess.TimeoutExpired:
        raise OverlayError(f"qemu-img {args[0]} took longer than 60 s") from None
    if result.returncode != 0:
        message = f"qemu-img {args[0]} failed: {result.stderr.strip()}"
        raise (OverlayNoSpace if says_exhausted(message) else OverlayError)(message)
    return result.stdout


def overlay_path(overlay_dir: Path, domain: str) -> Path:
    return overlay_dir / f"{domain}.qcow2"


def create_overlay(overlay_dir: Path, domain: str, base: Path, base_format: str) -> Path:
    """A fresh qcow2 overlay on `base` for `domain`; a stale one of the same name is replaced."""
    path = overlay_path(overlay_dir, domain)
    try:
        overlay_dir.mkdir(parents=True, exist_ok=True)
        path.unlink(missing_ok=True)
        _qemu_img(["create", "-q", "-f", "qcow2", "-F", base_format, "-b", str(base), str(path)])
        path.chmod(0o600)
    except OSError as exc:   # the directory or the file: said as qemu-img's failures are
        message = f"overlay {path}: {exc.strerror or exc}"
        raise (OverlayNoSpace if says_exhausted(message) else OverlayError)(message) from None
    return path


def overlay_refusal(overlay_dir: Path, path: Path) -> str:
    """Why `path` may not be deleted as an overlay ("" if it may): it must name an entry right
    in the overlay directory (after resolving that directory and any `..`), and not a symlink.
    A domain's metadata names its overlay; whoever could write that metadata could otherwise
    have the agent delete any file on the host."""
    if ".." in path.parts:
        return "the path has a '..' part"
    path = path.absolute()
    if confined(overlay_dir, path.parent) != overlay_dir.resolve():
        return "the path is not in the overlay directory"
    if path.is_symlink():
        return "the path is a symlink"
    return ""


def delete_overlay(path: Path, overlay_dir: Path) -> bool:
    """Remove an overlay, confined to the overlay directory; True if there was one. A path
    outside it (or a symlink) is never deleted: the refusal is logged, and False returned."""
    refusal = overlay_refusal(overlay_dir, path)
    if refusal:
        log_event(log, "overlay.delete_refused", logging.WARNING, path=str(path), overlay_dir=str(overlay_dir),
                  reason=refusal, note="a domain's metadata named this file as its overlay; it was left alone")
        return False
    try:
        path.unlink()
        return True
    except FileNotFoundError:
        return False


def list_overlays(overlay_dir: Path) -> dict[str, Path]:
    """Overlays by domain name: the regular files (no symlinks) named NAME.qcow2."""
    if not overlay_dir.is_dir():
        return {}
    return {p.stem: p for p in overlay_dir.glob("*.qcow2") if p.is_file() and not p.is_symlink()}


MAX_LISTED_IMAGES = 256


def list_images(image_dir: Path) -> list[str]:
    """The names of the bootable images in image_dir (kernel bundles and disk files, up to
    ids.IMAGE_DEPTH levels deep), at most MAX_LISTED_IMAGES, for the controller's catalogue."""
    root = image_dir.resolve()
    found: list[str] = []

    def visit(directory: Path, depth: int) -> None:
        try:
            entries = sorted(directory.iterdir())
        except OSError:
            return
        for entry in entries:
            if len(found) >= MAX_LISTED_IMAGES:
                return
            name = entry.relative_to(root).as_posix()
            try:
                ids.image(name)
            except InvalidField:
                continue
            if entry.is_symlink() and not entry.resolve().is_relative_to(root):
                continue
            if entry.is_dir():
                if (entry / KERNEL_FILE).is_file() and (entry / INITRD_FILE).is_file():
                    found.append(name)
                elif depth < ids.IMAGE_DEPTH:
                    visit(entry, depth + 1)
            elif entry.is_file() and entry.suffix in (".qcow2", ".img", ".raw"):
                found.append(name)
    if root.is_dir():
        visit(root, 1)
    return found

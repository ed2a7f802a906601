#!/usr/bin/env python3
"""Build Gleaner's tiny guest image from Debian packages.

The image is a directory ``<out>/<name>/`` holding:

* ``vmlinuz``      the current Debian cloud kernel (package linux-image-cloud-amd64)
* ``initrd.img``   a busybox initramfs: our /init, busybox acpid for clean ACPI shutdown,
                   the modules it needs (resolved from modules.dep) and the static probe
* ``disk.qcow2``   an empty base disk; every VM runs on its own qcow2 overlay of it
* ``manifest.json`` what went in, and the cache key

Only the standard library is used, so the set-up script can run this before the
project's virtual environment exists. The build is cached: a second run with the same
kernel package and the same guest sources does nothing.

Usage: python3 images/build.py [--out DIR] [--name NAME] [--force]
"""
from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

GUEST_SOURCES = Path(__file__).resolve().parent / "guest"
KERNEL_META_PACKAGE = "linux-image-cloud-amd64"
# evdev + button: busybox acpid sees the power button; virtio: disk and network for benchmarks;
# virtio_console: the work channel a backfill guest tells its agent when it is busy on.
WANTED_MODULES = ("evdev", "button", "virtio_pci", "virtio_blk", "virtio_net", "virtio_console")
BASE_DISK_SIZE = "256M"
DEFAULT_OUT = Path("/var/lib/gleaner/images")
DEFAULT_CACHE = Path("/var/cache/gleaner/image-build")
STEPS = 7


class BuildError(RuntimeError):
    """A build step failed; the message says which and why."""


def step(number: int, text: str) -> None:
    print(f"[images] [{number}/{STEPS}] {text}", flush=True)


def run(cmd: list[str], cwd: Path | None = None, stdout=None) -> str:
    try:
        result = subprocess.run(cmd, cwd=cwd, stdout=stdout or subprocess.PIPE,
                                stderr=subprocess.PIPE, text=stdout is None)
    except FileNotFoundError:
        raise BuildError(f"{cmd[0]} is not installed (run the set-up script)") from None
    if result.returncode != 0:
        err = result.stderr if isinstance(result.stderr, str) else result.stderr.decode()
        raise BuildError(f"command failed ({result.returncode}): {' '.join(cmd)}\n{err.strip()}")
    return result.stdout if isinstance(result.stdout, str) else ""


def kernel_package() -> tuple[str, str]:
    """The versioned kernel package the cloud meta-package depends on, and its version."""
    deps = run(["apt-cache", "depends", KERNEL_META_PACKAGE])
    for line in deps.splitlines():
        line = line.strip()
        if line.startswith("Depends: linux-image-"):
            package = line.split()[1]
            version = run(["apt-cache", "policy", package])
            for pline in version.splitlines():
                if pline.strip().startswith("Candidate:"):
                    return package, pline.split()[1]
    raise BuildError(f"cannot resolve {KERNEL_META_PACKAGE}: run 'apt-get update' first")


def sources_digest() -> str:
    digest = hashlib.sha256(Path(__file__).read_bytes())
    for path in sorted(GUEST_SOURCES.rglob("*")):
        if path.is_file():
            digest.update(str(path.relative_to(GUEST_SOURCES)).encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def fetch_kernel(package: str, cache: Path) -> tuple[Path, str]:
    """Download and unpack the kernel package; return the unpacked root and kernel release."""
    root = cache / package
    if not (root / "boot").is_dir():
        debs = cache / "debs"
        debs.mkdir(parents=True, exist_ok=True)
        if not list(debs.glob(f"{package}_*.deb")):
            run(["apt-get", "download", package], cwd=debs)
        deb = sorted(debs.glob(f"{package}_*.deb"))[-1]
        partial = cache / f"{package}.partial"
        shutil.rmtree(partial, ignore_errors=True)
        run(["dpkg-deb", "-x", str(deb), str(partial)])
        partial.rename(root)
    releases = sorted(p.name for p in (root / "lib/modules").iterdir())
    if len(releases) != 1:
        raise BuildError(f"expected one kernel release in {package}, found {releases}")
    return root, releases[0]


def parse_modules_dep(text: str) -> dict[str, list[str]]:
    """modules.dep maps a module's path to the paths it depends on."""
    deps: dict[str, list[str]] = {}
    for line in text.splitlines():
        if ":" in line:
            module, rest = line.split(":", 1)
            deps[module.strip()] = rest.split()
    return deps


def module_load_order(deps: dict[str, list[str]], wanted: tuple[str, ...]) -> list[str]:
    """Paths of the wanted modules and everything they need, each after its dependencies.

    A wanted module that is built into the kernel is not in modules.dep and is skipped.
    """
    by_name = {Path(p).name.split(".ko")[0].replace("-", "_"): p for p in deps}
    order: list[str] = []

    def visit(path: str) -> None:
        if path in order:
            return
        for dep in deps.get(path, []):
            visit(dep)
        order.append(path)

    for name in wanted:
        if name in by_name:
            visit(by_name[name])
    return order


def busybox_applets(busybox: Path) -> list[str]:
    return run([str(busybox), "--list"]).split()


def assemble_initramfs(tree: Path, kernel_root: Path, release: str, probe: Path) -> list[str]:
    """Lay out the initramfs tree; return the modules it loads, in order."""
    for sub in ("bin", "dev", "proc", "sys", "tmp", "run", "etc/gleaner", "lib/modules"):
        (tree / sub).mkdir(parents=True, exist_ok=True)
    busybox = Path("/bin/busybox")
    if not busybox.exists():
        raise BuildError("/bin/busybox is missing: install the busybox-static package")
    shutil.copy2(busybox, tree / "bin/busybox")
    for applet in busybox_applets(busybox):
        link = tree / "bin" / applet
        if not link.exists():
            link.symlink_to("busybox")
    shutil.copy2(probe, tree / "bin/gleaner-probe")
    shutil.copy2(GUEST_SOURCES / "init", tree / "init")
    shutil.copytree(GUEST_SOURCES / "acpi", tree / "etc/acpi")

    modules_dir = kernel_root / "lib/modules" / release
    run(["depmod", "-b", str(kernel_root), release])
    deps = parse_modules_dep((modules_dir / "modules.dep").read_text())
    order = module_load_order(deps, WANTED_MODULES)
    missing = [m for m in ("evdev", "button") if not any(Path(p).name.startswith(m + ".ko") for p in order)]
    if missing:
        raise BuildError(f"kernel {release} lacks required modules {missing}")
    names = []
    for path in order:
        name = Path(path).name
        shutil.copy2(modules_dir / path, tree / "lib/modules" / name)
        names.append(name)
    (tree / "etc/gleaner/modules.order").write_text("\n".join(names) + "\n")
    return names


def write_cpio(tree: Path, target: Path) -> None:
    """A gzip'd newc archive with sorted names and zero timestamps, so builds are repeatable."""
    names = sorted(str(p.relative_to(tree)) for p in tree.rglob("*"))
    listing = "\n".join(["."] + names) + "\n"
    raw = subprocess.run(["cpio", "--quiet", "-o", "-H", "newc", "--reproducible", "-R", "0:0"],
                         cwd=tree, input=listing.encode(), stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, check=False)
    if raw.returncode != 0:
        raise BuildError(f"cpio failed: {raw.stderr.decode().strip()}")
    with open(target, "wb") as out, gzip.GzipFile(fileobj=out, mode="wb", mtime=0) as gz:
        gz.write(raw.stdout)


def build(out: Path, name: str, cache: Path, force: bool) -> Path:
    started = time.monotonic()
    image_dir = out / name
    step(1, f"resolving the current Debian cloud kernel ({KERNEL_META_PACKAGE})")
    package, version = kernel_package()
    key = f"{package}={version}/{sources_digest()}"
    manifest_path = image_dir / "manifest.json"
    if not force and manifest_path.exists():
        try:
            if json.loads(manifest_path.read_text()).get("cache_key") == key:
                print(f"[images] up to date: {image_dir} ({package} {version}); nothing to do",
                      flush=True)
                return image_dir
        except (OSError, ValueError):
            pass  # an unreadable manifest means rebuild

    cache.mkdir(parents=True, exist_ok=True)
    step(2, f"downloading and unpacking {package} {version} into {cache}")
    kernel_root, release = fetch_kernel(package, cache)

    out.mkdir(parents=True, exist_ok=True)
    os.chmod(out, 0o755)
    with tempfile.TemporaryDirectory(dir=out, prefix=f".{name}.build-") as work_str:
        work = Path(work_str)
        step(3, "compiling the static latency probe (gleaner-probe)")
        probe = work / "gleaner-probe"
        run(["gcc", "-static", "-O2", "-Wall", "-o", str(probe), str(GUEST_SOURCES / "probe.c")])

        step(4, "assembling the initramfs tree (busybox, init, acpid, modules)")
        modules = assemble_initramfs(work / "tree", kernel_root, release, probe)

        staged = work / "image"
        staged.mkdir()
        step(5, "packing initrd.img")
        write_cpio(work / "tree", staged / "initrd.img")
        shutil.copy2(kernel_root / "boot" / f"vmlinuz-{release}", staged / "vmlinuz")

        step(6, f"creating the {BASE_DISK_SIZE} base disk")
        run(["qemu-img", "create", "-q", "-f", "qcow2", str(staged / "disk.qcow2"), BASE_DISK_SIZE])

        step(7, f"installing into {image_dir}")
        manifest = {"name": name, "kernel_package": package, "kernel_version": version,
                    "kernel_release": release, "modules": modules, "cache_key": key,
                    "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        (staged / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
        for path in staged.iterdir():
            os.chmod(path, 0o644)
        os.chmod(staged, 0o755)
        old = work / "old"
        if image_dir.exists():
            image_dir.rename(old)
        staged.rename(image_dir)
    size = sum(p.stat().st_size for p in image_dir.iterdir()) / 2**20
    print(f"[images] built {image_dir} ({size:.1f} MiB, kernel {release}, {len(modules)} modules) "
          f"in {time.monotonic() - started:.1f}s", flush=True)
    return image_dir


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"image directory (default {DEFAULT_OUT})")
    parser.add_argument("--name", default="tiny", help="image name (default tiny)")
    parser.add_argument("--cache", type=Path, default=DEFAULT_CACHE, help=f"download cache (default {DEFAULT_CACHE})")
    parser.add_argument("--force", action="store_true", help="rebuild even when up to date")
    args = parser.parse_args(argv)
    try:
        build(args.out, args.name, args.cache, args.force)
    except BuildError as exc:
        print(f"[images] error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Build the Vagrant lab's box (vagrant-libvirt) from Debian's archive, and add it to Vagrant.

The lab's VMs (vagrant/) boot this box. It is a Debian 12 root filesystem made with debootstrap
(minbase) plus systemd, openssh-server, sudo, the cloud kernel and everything a Gleaner node
needs already installed (libvirt daemon, QEMU, Python), so provisioning a lab VM only installs
the project itself. The root filesystem goes into an ext4 file system made with
``mkfs.ext4 -d`` (no partition table, no boot loader) in a qcow2 disk; the VM boots the
rootfs's own kernel and initrd directly (vagrant-libvirt's ``kernel``/``initrd``/``cmd_line``,
set by the Vagrantfile inside the box). Both are copied beside the box, where libvirt reads
them. The box has the user ``vagrant`` (password-less sudo, Vagrant's well-known insecure key,
which ``vagrant up`` replaces) and no SSH host keys: each VM makes its own at first boot, and
an empty machine-id, so each VM gets its own (and its own DHCP lease).

Output (``--out``, default /var/lib/gleaner/lab/box)::

    gleaner-lab.box        the box: metadata.json, Vagrantfile, box.img (qcow2)
    vmlinuz, initrd.img    the kernel and initrd the lab VMs boot
    manifest.json          what went in, the cache key, and how long each step took

The build is cached by a digest of this file and the kernel package's version: a second run
finds the box and, unless ``vagrant box list`` lacks it, does nothing. Run as root.

With ``--wheelhouse DIR`` (the lab passes the one vagrant/prepare.py builds) the box also has
/opt/gleaner, a virtual environment with every wheel there but the project's own installed, so
provisioning a VM installs one wheel; those wheels' names are part of the cache key.

Usage: python3 images/labbox.py [--out DIR] [--name NAME] [--force] [--no-add] [--wheelhouse DIR]
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

DEFAULT_OUT = Path("/var/lib/gleaner/lab/box")
DEFAULT_NAME = "gleaner-lab"
SUITE = "bookworm"
MIRROR = "http://deb.debian.org/debian"
KERNEL_META_PACKAGE = "linux-image-cloud-amd64"
DISK_SIZE_GIB = 16          # the ext4 file system's size; qcow2 keeps it sparse
# debootstrap's own resolver takes the base; apt (in the chroot) the rest, Recommends off.
BASE_PACKAGES = ("systemd", "systemd-sysv", "udev", "dbus", "openssh-server", "sudo", "iproute2", "ca-certificates",
                 "kmod", "python3", "apt-utils")
NODE_PACKAGES = (
    KERNEL_META_PACKAGE, "initramfs-tools",
    # what a Gleaner node runs: the same hypervisor packages as scripts/setup.sh installs
    "libvirt-daemon-system", "libvirt-clients", "qemu-system-x86", "qemu-utils",
    "python3-venv", "python3-pip", "busybox-static", "cpio",
    # lab conveniences: vagrant's rsync, a resolver for DHCP's DNS, and tools to look around
    "rsync", "systemd-resolved", "procps", "less", "iputils-ping", "curl",
)
VAGRANT_INSECURE_KEY = Path("/usr/share/rubygems-integration/all/gems/vagrant-2.3.4/keys/vagrant.pub")
# quiet: the kernel's messages cross an emulated serial port, slow under TCG (warnings still do)
CMDLINE = "root=/dev/vda rw console=ttyS0 net.ifnames=0 quiet systemd.show_status=error"
STEPS = 6


class BuildError(RuntimeError):
    """A build step failed; the message says which and why."""


def step(number: int, text: str) -> None:
    print(f"[labbox] [{number}/{STEPS}] {text}", flush=True)


def run(cmd: list[str], quiet: bool = True, env: dict | None = None) -> str:
    try:
        done = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              env={**os.environ, **(env or {})})
    except FileNotFoundError:
        raise BuildError(f"{cmd[0]} is not installed (run scripts/lab-host.sh)") from None
    if done.returncode != 0:
        tail = "\n".join(done.stdout.strip().splitlines()[-25:])
        raise BuildError(f"command failed ({done.returncode}): {' '.join(cmd)}\n{tail}")
    if not quiet:
        print(done.stdout, end="")
    return done.stdout


def insecure_key() -> str:
    candidates = [VAGRANT_INSECURE_KEY, *Path("/usr/share/rubygems-integration/all/gems").glob("vagrant-*/keys/vagrant.pub"),
                  *Path("/opt/vagrant/embedded/gems").glob("gems/vagrant-*/keys/vagrant.pub")]
    for path in candidates:
        if path.is_file():
            return path.read_text().strip()
    raise BuildError("Vagrant's insecure public key (keys/vagrant.pub) was not found: install vagrant first")


def kernel_version() -> str:
    """The candidate version of the cloud kernel package: part of the cache key."""
    out = run(["apt-cache", "policy", KERNEL_META_PACKAGE])
    for line in out.splitlines():
        if line.strip().startswith("Candidate:") and "(none)" not in line:
            return line.split()[1]
    raise BuildError(f"apt knows no {KERNEL_META_PACKAGE}: run 'apt-get update' first")


def dependency_wheels(wheelhouse: Path | None) -> list[Path]:
    """The wheelhouse's wheels but the project's own: what the box's /opt/gleaner is seeded with."""
    if wheelhouse is None:
        return []
    wheels = sorted(p for p in wheelhouse.glob("*.whl") if not p.name.startswith("gleaner-"))
    if not wheels:
        raise BuildError(f"no wheels in {wheelhouse}")
    return wheels


def cache_key(wheels: list[Path]) -> str:
    digest = hashlib.sha256(Path(__file__).read_bytes())
    digest.update(kernel_version().encode())
    for wheel in wheels:
        digest.update(wheel.name.encode())
    return digest.hexdigest()[:16]


def boxes_known(name: str) -> bool:
    out = run(["vagrant", "box", "list", "--machine-readable"])
    return any(line.split(",")[3:4] == ["box-name"] and line.split(",")[4] == name for line in out.splitlines()
               if line.count(",") >= 4)


class Chroot:
    """/proc, /sys and /dev mounted in the root while packages install there; unmounted after."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.mounted: list[Path] = []

    def __enter__(self) -> "Chroot":
        for kind, target in (("proc", "proc"), ("sysfs", "sys")):
            run(["mount", "-t", kind, kind, str(self.root / target)])
            self.mounted.append(self.root / target)
        run(["mount", "--bind", "/dev", str(self.root / "dev")])
        self.mounted.append(self.root / "dev")
        run(["mount", "--bind", "/dev/pts", str(self.root / "dev/pts")])
        self.mounted.append(self.root / "dev/pts")
        return self

    def __exit__(self, *exc) -> None:
        for path in reversed(self.mounted):
            subprocess.run(["umount", "-l", str(path)], check=False)

    def run(self, *cmd: str) -> str:
        return run(["chroot", str(self.root), *cmd],
                   env={"DEBIAN_FRONTEND": "noninteractive", "LC_ALL": "C.UTF-8",
                        "PATH": "/usr/sbin:/usr/bin:/sbin:/bin"})


FIRSTBOOT_UNIT = """\
[Unit]
Description=Make this VM's own SSH host keys (the lab box ships none)
Before=ssh.service
ConditionPathExistsGlob=!/etc/ssh/ssh_host_*_key

[Service]
Type=oneshot
# ed25519 and ECDSA only (see sshd_config.d/gleaner-lab.conf): an RSA key takes minutes under TCG.
ExecStart=/usr/bin/ssh-keygen -q -t ed25519 -N "" -f /etc/ssh/ssh_host_ed25519_key
ExecStart=/usr/bin/ssh-keygen -q -t ecdsa -N "" -f /etc/ssh/ssh_host_ecdsa_key

[Install]
WantedBy=multi-user.target
"""

NETWORK_UNIT = """\
# The first NIC is Vagrant's management network: DHCP. Vagrant configures the others.
[Match]
Name=eth0

[Network]
DHCP=ipv4
"""


def configure(root: Path, key: str) -> None:
    (root / "etc/hostname").write_text("gleaner-lab\n")
    (root / "etc/hosts").write_text("127.0.0.1 localhost\n127.0.1.1 gleaner-lab\n::1 localhost ip6-localhost\n")
    (root / "etc/fstab").write_text("/dev/vda / ext4 defaults,errors=remount-ro 0 1\n")
    (root / "etc/systemd/network/10-mgmt.network").write_text(NETWORK_UNIT)
    (root / "etc/systemd/system/gleaner-lab-hostkeys.service").write_text(FIRSTBOOT_UNIT)
    wants = root / "etc/systemd/system/multi-user.target.wants"
    wants.mkdir(parents=True, exist_ok=True)
    for unit, target in (("gleaner-lab-hostkeys.service", "/etc/systemd/system/gleaner-lab-hostkeys.service"),
                         ("systemd-networkd.service", "/lib/systemd/system/systemd-networkd.service"),
                         ("systemd-resolved.service", "/lib/systemd/system/systemd-resolved.service")):
        link = wants / unit
        if not link.exists():
            link.symlink_to(target)
    # A serial console to log in on (virsh console), and no wait for a network that may be slow.
    getty = wants / "serial-getty@ttyS0.service"
    if not getty.exists():
        getty.symlink_to("/lib/systemd/system/serial-getty@.service")
    (root / "etc/sudoers.d/vagrant").write_text("vagrant ALL=(ALL) NOPASSWD:ALL\nDefaults:vagrant !requiretty\n")
    os.chmod(root / "etc/sudoers.d/vagrant", 0o440)
    ssh = root / "home/vagrant/.ssh"
    ssh.mkdir(parents=True, exist_ok=True)
    (ssh / "authorized_keys").write_text(key + "\n")
    os.chmod(ssh, 0o700)
    os.chmod(ssh / "authorized_keys", 0o600)
    uid = gid = None
    for line in (root / "etc/passwd").read_text().splitlines():  # the chroot's vagrant, not this host's
        fields = line.split(":")
        if fields[0] == "vagrant":
            uid, gid = int(fields[2]), int(fields[3])
    if uid is None:
        raise BuildError("the vagrant user is missing from the root file system")
    for path in (root / "home/vagrant", ssh, ssh / "authorized_keys"):
        os.chown(path, uid, gid)  # sshd reads authorized_keys as the user
    (root / "etc/ssh/sshd_config.d/gleaner-lab.conf").write_text(
        "UseDNS no\nPasswordAuthentication no\n"
        "HostKey /etc/ssh/ssh_host_ed25519_key\nHostKey /etc/ssh/ssh_host_ecdsa_key\n")
    # network-online.target (the Gleaner units want it) waits for one configured link, not all:
    # the lab network's NIC is configured by Vagrant only after the first boot.
    wait_online = root / "etc/systemd/system/systemd-networkd-wait-online.service.d"
    wait_online.mkdir(parents=True, exist_ok=True)
    (wait_online / "any.conf").write_text(
        "[Service]\nExecStart=\nExecStart=/lib/systemd/systemd-networkd-wait-online --any --timeout=60\n")
    # Nothing runs at boot that a lab VM does not need: under TCG every unit costs seconds of a
    # boot the three VMs share two cores for (systemd-analyze blame, last lab run: e2scrub_reap
    # 25.6 s, libvirtd 15.7 s probing QEMU on the controller VM too, libvirt-guests 12.0 s). Masked:
    # apt's timers, the file-system scrubs and libvirt-guests; libvirtd is not started at boot
    # here (an agent's set-up enables it, and the agent's unit wants it).
    for unit in ("apt-daily.timer", "apt-daily-upgrade.timer", "e2scrub_reap.service", "e2scrub_all.timer",
                 "libvirt-guests.service", "fstrim.timer", "man-db.timer"):
        (root / "etc/systemd/system" / unit).unlink(missing_ok=True)
        (root / "etc/systemd/system" / unit).symlink_to("/dev/null")
    for enabled in ("multi-user.target.wants/libvirtd.service", "sockets.target.wants/libvirtd.socket",
                    "sockets.target.wants/libvirtd-ro.socket", "sockets.target.wants/libvirtd-admin.socket"):
        (root / "etc/systemd/system" / enabled).unlink(missing_ok=True)
    for old in (root / "etc/ssh").glob("ssh_host_*"):
        old.unlink()
    (root / "etc/machine-id").write_text("")  # systemd makes one at first boot: every VM its own
    (root / "var/lib/dbus/machine-id").unlink(missing_ok=True)
    shutil.rmtree(root / "var/cache/apt/archives", ignore_errors=True)
    (root / "var/cache/apt/archives/partial").mkdir(parents=True, exist_ok=True)
    for lists in (root / "var/lib/apt/lists").glob("*_Packages"):
        lists.unlink()


BOX_VAGRANTFILE = """\
# The Gleaner lab box boots its own kernel directly (no boot loader in the image).
Vagrant.configure("2") do |config|
  config.vm.provider :libvirt do |libvirt|
    libvirt.kernel = "{kernel}"
    libvirt.initrd = "{initrd}"
    libvirt.cmd_line = "{cmdline}"
    libvirt.disk_bus = "virtio"
  end
end
"""


def build(out: Path, name: str, force: bool, add: bool, wheelhouse: Path | None = None) -> Path:
    started = time.monotonic()
    if os.geteuid() != 0:
        raise BuildError("run as root: debootstrap, chroot and mount need it")
    out.mkdir(parents=True, exist_ok=True)
    box = out / f"{name}.box"
    manifest_path = out / "manifest.json"
    wheels = dependency_wheels(wheelhouse)
    key = cache_key(wheels)
    try:
        manifest = json.loads(manifest_path.read_text())
    except (OSError, ValueError):
        manifest = {}
    timings: dict[str, float] = {}
    rebuilt = False
    if not force and manifest.get("cache_key") == key and box.exists():
        step(1, f"box up to date ({box}, key {key}); skipping the build")
    else:
        key_text = insecure_key()
        with tempfile.TemporaryDirectory(prefix="labbox-", dir=out) as tmp:
            root = Path(tmp) / "root"
            t = time.monotonic()
            step(1, f"debootstrap {SUITE} (minbase + {', '.join(BASE_PACKAGES)}) from {MIRROR}")
            run(["debootstrap", "--variant=minbase", f"--include={','.join(BASE_PACKAGES)}", SUITE, str(root), MIRROR])
            timings["debootstrap_s"] = round(time.monotonic() - t, 1)
            t = time.monotonic()
            step(2, f"installing the node's packages: {' '.join(NODE_PACKAGES)}")
            (root / "usr/sbin/policy-rc.d").write_text("#!/bin/sh\nexit 101\n")  # start no service in the chroot
            os.chmod(root / "usr/sbin/policy-rc.d", 0o755)
            (root / "etc/apt/sources.list").write_text(
                f"deb {MIRROR} {SUITE} main\ndeb {MIRROR} {SUITE}-updates main\n"
                f"deb http://deb.debian.org/debian-security {SUITE}-security main\n")
            with Chroot(root) as chroot:
                chroot.run("apt-get", "update", "-q")
                chroot.run("apt-get", "install", "-y", "-q", "--no-install-recommends", *NODE_PACKAGES)
                chroot.run("useradd", "--create-home", "--shell", "/bin/bash", "--groups", "sudo,libvirt,kvm",
                           "vagrant")
                chroot.run("apt-get", "clean")
                if wheels:
                    # /opt/gleaner with the project's dependencies already in (from the host's
                    # wheelhouse): provisioning then installs only the project's own wheel.
                    step(2, f"seeding /opt/gleaner with {len(wheels)} dependency wheels from {wheelhouse}")
                    seed = root / "tmp/wheels"
                    seed.mkdir(parents=True, exist_ok=True)
                    for wheel in wheels:
                        shutil.copy2(wheel, seed / wheel.name)
                    # with a pip of its own (Debian's bundled wheel, no index): provisioning then runs
                    # one interpreter, not Debian's pip re-running itself inside the venv (pip
                    # --python), which cost about twice the start-up under TCG
                    chroot.run("python3", "-m", "venv", "/opt/gleaner")
                    chroot.run("/opt/gleaner/bin/pip", "install", "-q", "--no-index", "--no-deps",
                               *[f"/tmp/wheels/{w.name}" for w in wheels])
                    shutil.rmtree(seed)
            (root / "usr/sbin/policy-rc.d").unlink()
            timings["packages_s"] = round(time.monotonic() - t, 1)
            t = time.monotonic()
            step(3, "configuring: vagrant user and key, sudo, networkd DHCP, first-boot SSH host keys, machine-id")
            configure(root, key_text)
            kernels = sorted((root / "boot").glob("vmlinuz-*"))
            if not kernels:
                raise BuildError(f"{KERNEL_META_PACKAGE} left no kernel in /boot")
            release = kernels[-1].name.removeprefix("vmlinuz-")
            shutil.copyfile(kernels[-1], out / "vmlinuz")
            shutil.copyfile(root / "boot" / f"initrd.img-{release}", out / "initrd.img")
            for f in ("vmlinuz", "initrd.img"):
                os.chmod(out / f, 0o644)
            step(4, f"mkfs.ext4 -d: the root file system into a {DISK_SIZE_GIB} GiB ext4 image, then qcow2")
            raw = Path(tmp) / "root.img"
            run(["mkfs.ext4", "-q", "-L", "gleaner-lab", "-d", str(root), str(raw), f"{DISK_SIZE_GIB}G"])
            boxdir = Path(tmp) / "box"
            boxdir.mkdir()
            run(["qemu-img", "convert", "-O", "qcow2", str(raw), str(boxdir / "box.img")])
            raw.unlink()
            shutil.rmtree(root)
            timings["image_s"] = round(time.monotonic() - t, 1)
            t = time.monotonic()
            step(5, f"packaging {box}")
            (boxdir / "metadata.json").write_text(json.dumps(
                {"provider": "libvirt", "format": "qcow2", "virtual_size": DISK_SIZE_GIB}))
            (boxdir / "Vagrantfile").write_text(BOX_VAGRANTFILE.format(
                kernel=out / "vmlinuz", initrd=out / "initrd.img", cmdline=CMDLINE))
            partial = box.with_suffix(".box.partial")
            with tarfile.open(partial, "w") as tar:  # uncompressed: qcow2 is already sparse
                for item in ("metadata.json", "Vagrantfile", "box.img"):
                    tar.add(boxdir / item, arcname=item)
            partial.replace(box)
            timings["package_s"] = round(time.monotonic() - t, 1)
        manifest = {"cache_key": key, "name": name, "suite": SUITE, "kernel_release": release,
                    "packages": [*BASE_PACKAGES, *NODE_PACKAGES], "cmdline": CMDLINE,
                    "seeded_wheels": [w.name for w in wheels],
                    "box_bytes": box.stat().st_size, "timings": timings,
                    "build_s": round(time.monotonic() - started, 1)}
        manifest_path.write_text(json.dumps(manifest, indent=2) + "\n")
        rebuilt = True
    if add:
        if not rebuilt and boxes_known(name) and manifest.get("added_key") == key:
            step(6, f"vagrant already has the box {name}")
        else:
            step(6, f"vagrant box add --name {name} {box}")
            run(["vagrant", "box", "add", "--force", "--name", name, str(box)])
            manifest["added_key"] = key
            manifest_path.write_text(json.dumps(manifest, indent=2) + "\n")
    print(f"[labbox] done in {time.monotonic() - started:.0f}s: {box}", flush=True)
    return box


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"box directory (default {DEFAULT_OUT})")
    parser.add_argument("--name", default=DEFAULT_NAME, help=f"box name in Vagrant (default {DEFAULT_NAME})")
    parser.add_argument("--force", action="store_true", help="rebuild even when up to date")
    parser.add_argument("--no-add", action="store_true", help="build only; do not 'vagrant box add'")
    parser.add_argument("--wheelhouse", type=Path, help="seed /opt/gleaner with these wheels (all but gleaner's)")
    args = parser.parse_args(argv)
    try:
        build(args.out, args.name, args.force, not args.no_add, args.wheelhouse)
    except BuildError as exc:
        print(f"[labbox] failed: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env bash
# Gleaner set-up for a Debian 12 hypervisor host, run as root from the repository.
# Installs the Debian packages, starts virtlogd and libvirtd, makes the virtual
# environment with the project in it, and builds the tiny guest image.
# Idempotent: a second run finds everything in place and changes nothing.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$REPO/.venv"
IMAGE_DIR="${GLEANER_IMAGE_DIR:-/var/lib/gleaner/images}"
PACKAGES=(
    libvirt-daemon-system libvirt-clients qemu-system-x86 qemu-utils   # hypervisor
    libvirt-dev pkg-config gcc libc6-dev python3-dev python3-venv      # building libvirt-python, the probe
    busybox-static cpio kmod                                           # the guest image
)

say() { printf '[setup] %s\n' "$*"; }

if [ "$(id -u)" -ne 0 ]; then
    echo "setup.sh: run as root (it installs packages and starts libvirtd)" >&2
    exit 1
fi

missing=()
for pkg in "${PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
# The image builder asks apt which kernel is current, so the package lists must exist.
# (Captured first: with pipefail, grep -q closing the pipe early would fail the check.)
kernel_policy="$(apt-cache policy linux-image-cloud-amd64 2>/dev/null || true)"
if [ ${#missing[@]} -gt 0 ] || ! grep -q 'Candidate: [0-9]' <<<"$kernel_policy"; then
    say "apt: updating package lists"
    apt-get update -q
fi
if [ ${#missing[@]} -gt 0 ]; then
    say "apt: installing ${missing[*]}"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"
else
    say "apt: all ${#PACKAGES[@]} packages already installed"
fi

if [ -e /dev/kvm ]; then
    getent group kvm >/dev/null || groupadd --system kvm
    if [ "$(stat -c %G:%a /dev/kvm)" != "kvm:660" ]; then
        say "/dev/kvm: group kvm, mode 0660"
        chgrp kvm /dev/kvm
        chmod 0660 /dev/kvm
    fi
fi

say "libvirt: making sure virtlogd and libvirtd run"
bash "$REPO/scripts/libvirt-services.sh"

PYTHON="${PYTHON:-python3}"
stamp="$VENV/.gleaner-installed"
want="$(sha256sum "$REPO/pyproject.toml" | cut -d' ' -f1)"
if [ ! -x "$VENV/bin/python" ]; then
    say "python: creating $VENV"
    "$PYTHON" -m venv "$VENV"
fi
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
    say "python: installing the project and its test tools into $VENV"
    "$VENV/bin/pip" install -q --upgrade pip
    "$VENV/bin/pip" install -q -e "$REPO[test]"
    echo "$want" > "$stamp"
else
    say "python: $VENV is up to date"
fi

say "image: building the tiny guest into $IMAGE_DIR"
"$VENV/bin/python" "$REPO/images/build.py" --out "$IMAGE_DIR"
say "done"

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
    prometheus                                                         # tests the shipped alert rules and dashboard
)

SETUP_TAG=setup
# shellcheck source=scripts/setup-lib.sh
source "$REPO/scripts/setup-lib.sh"

require_root setup.sh "it installs packages and starts libvirtd"

missing_packages "${PACKAGES[@]}"
missing=("${MISSING[@]}")
# The image builder asks apt which kernel is current, so the package lists must exist.
# (Captured first: with pipefail, grep -q closing the pipe early would fail the check.)
kernel_policy="$(apt-cache policy linux-image-cloud-amd64 2>/dev/null || true)"
if [ ${#missing[@]} -gt 0 ] || ! grep -q 'Candidate: [0-9]' <<<"$kernel_policy"; then
    say "apt: updating package lists"
    apt-get update -q
fi
if [ ${#missing[@]} -gt 0 ]; then
    apt_install "${missing[@]}"
else
    say "apt: all ${#PACKAGES[@]} packages already installed"
fi

kvm_device_group
start_libvirt "$REPO/scripts"

PYTHON="${PYTHON:-python3}"
stamp="$VENV/.gleaner-installed"
LOCK="$REPO/requirements.lock"
want="$(cat "$REPO/pyproject.toml" "$LOCK" | sha256sum | cut -d' ' -f1)"
if [ ! -x "$VENV/bin/python" ]; then
    say "python: creating $VENV"
    "$PYTHON" -m venv "$VENV"
fi
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
    # Every dependency (and the test tools, and pip itself) at the version and hashes in
    # requirements.lock; then the project, editable, with nothing more to fetch.
    say "python: installing the locked dependencies (requirements.lock, hash-checked) into $VENV"
    install_locked "$VENV/bin/python" "$LOCK"
    say "python: installing the project (editable) into $VENV"
    "$VENV/bin/python" -m pip install -q --no-deps --no-build-isolation -e "$REPO"
    echo "$want" > "$stamp"
else
    say "python: $VENV is up to date"
fi
install_gleanctl "$VENV"   # gleanctl on PATH

say "image: building the tiny guest into $IMAGE_DIR"
"$VENV/bin/python" "$REPO/images/build.py" --out "$IMAGE_DIR"
# The test suite validates the lab's Vagrantfile, so the lab's host tools come too.
bash "$REPO/scripts/lab-host.sh"
say "done"

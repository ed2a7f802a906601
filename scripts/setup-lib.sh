# Shared set-up steps, sourced by scripts/setup.sh (a development host) and
# scripts/setup-role.sh (a pool's controller and agent hosts, and the Vagrant lab's VMs).
# Each step is idempotent. Callers set SETUP_TAG (the prefix of every message) first.

say() { printf '[%s] %s\n' "${SETUP_TAG:-setup}" "$*"; }

# require_root SCRIPT WHY
require_root() {
    if [ "$(id -u)" -ne 0 ]; then
        echo "$1: run as root ($2)" >&2
        exit 1
    fi
}

# missing_packages PKG...: sets MISSING to those not installed
missing_packages() {
    MISSING=()
    local pkg
    for pkg in "$@"; do
        dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || MISSING+=("$pkg")
    done
}

# apt_install PKG...: install without recommends, non-interactively
apt_install() {
    say "apt: installing $*"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "$@"
}

# ensure_packages PKG...: install those missing (updating the package lists first), else say so
ensure_packages() {
    missing_packages "$@"
    if [ ${#MISSING[@]} -gt 0 ]; then
        say "apt: updating package lists"
        apt-get update -q
        apt_install "${MISSING[@]}"
    else
        say "apt: all $# packages already installed"
    fi
}

# /dev/kvm for group kvm, mode 0660, where the host has it
kvm_device_group() {
    if [ -e /dev/kvm ]; then
        getent group kvm >/dev/null || groupadd --system kvm
        if [ "$(stat -c %G:%a /dev/kvm)" != "kvm:660" ]; then
            say "/dev/kvm: group kvm, mode 0660"
            chgrp kvm /dev/kvm
            chmod 0660 /dev/kvm
        fi
    fi
}

# start_libvirt SCRIPTS_DIR: virtlogd and libvirtd running, libvirtd answering
start_libvirt() {
    say "libvirt: making sure virtlogd and libvirtd run"
    bash "$1/libvirt-services.sh"
}

# lock_subset LOCK NAME...: the entries of a hashed requirements file (requirements.lock, or a
# wheelhouse's requirements.txt) for the packages NAME... only, each with its hashes
lock_subset() {
    local lock="$1"
    shift
    awk -v names="$*" '
        BEGIN { n = split(tolower(names), list, " "); for (i = 1; i <= n; i++) { gsub(/[_.]/, "-", list[i]); want[list[i]] = 1 } }
        /^[A-Za-z0-9]/ { split($1, spec, "=="); name = tolower(spec[1]); gsub(/[_.]/, "-", name); on = (name in want) }
        /^#/ { on = 0 }
        on { print }
    ' "$lock"
}

# install_locked PYTHON LOCK [PIP_ARGS...]: every package of LOCK at its pinned version, each file
# checked against the lock's hashes. pip and setuptools from the lock first, so that the pinned
# pip does the rest, and sdists (libvirt-python) build with the pinned setuptools, not with
# whatever build isolation would fetch unchecked.
install_locked() {
    local python="$1" lock="$2" boot
    shift 2
    boot="$(mktemp)"
    lock_subset "$lock" pip setuptools > "$boot"
    "$python" -m pip install -q --require-hashes --no-deps "$@" -r "$boot"
    rm -f "$boot"
    "$python" -m pip install -q --require-hashes --no-build-isolation "$@" -r "$lock"
}

# install_gleanctl VENV [BIN_DIR]: gleanctl on PATH, as BIN_DIR/gleanctl (default /usr/local/bin),
# a two-line wrapper that runs VENV's gleanctl, so admins type `gleanctl` anywhere. Idempotent;
# a gleanctl there that this function did not write is left alone (said, not overwritten).
GLEANCTL_MARK="# gleanctl wrapper written by Gleaner's set-up (scripts/setup-lib.sh)"
install_gleanctl() {
    local venv="$1" dir="${2:-/usr/local/bin}"
    local target="$dir/gleanctl" want tmp
    want="$(printf '#!/bin/sh\n%s\nexec "%s/bin/python" -m controller.gleanctl "$@"\n' "$GLEANCTL_MARK" "$venv")"
    if [ -e "$target" ] && ! grep -qF "$GLEANCTL_MARK" "$target"; then
        say "gleanctl: $target exists and was not written by set-up; left alone (run $venv/bin/gleanctl)"
        return 0
    fi
    if [ "$(cat "$target" 2>/dev/null)" = "$want" ]; then
        say "gleanctl: $target is in place"
        return 0
    fi
    mkdir -p "$dir"
    tmp="$(mktemp "$dir/.gleanctl.XXXXXX")"
    printf '%s\n' "$want" > "$tmp"
    chmod 0755 "$tmp"
    mv -f "$tmp" "$target"   # whole or not at all: a shell never runs a half-written wrapper
    say "gleanctl: $target runs $venv/bin/python -m controller.gleanctl"
}

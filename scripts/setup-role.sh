#!/usr/bin/env bash
# Install Gleaner on one host of a pool, by role, as a service that starts at boot:
#
#   setup-role.sh controller|agent [--payload DIR | --payload-device DEV] [--wheelhouse DIR]
#
# Run as root on a Debian 12 host. Shares its steps with scripts/setup.sh (scripts/setup-lib.sh).
#   agent       the hypervisor packages, /dev/kvm for group kvm, virtlogd and libvirtd running,
#               the tiny guest image in /var/lib/gleaner/images
#   both        the project in a virtual environment at /opt/gleaner, from a wheelhouse
#               (pip --no-index: the host needs no PyPI) or, without one, from this repository;
#               the systemd unit deploy/systemd/gleaner-ROLE.service, enabled and (re)started
#               when /etc/gleaner/ROLE.toml exists
#
# --payload DIR is what the Vagrant lab provides (vagrant/prepare.py makes it; --payload-device
# mounts it read-only from the lab VM's second disk, e.g. LABEL=gleaner-payload): common/wheels,
# common/repo (these scripts and deploy/), common/images/tiny, and node/ with this host's
# ROLE.toml, pki/ (its certificate and key, the CA certificate, the deny list) and hosts
# (lines for /etc/hosts). A real host gets its configuration and certificate by hand (README,
# "Operations"); this script then only installs and starts.
# Idempotent: a second run reinstalls the project's own wheel and restarts the service.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROLE="${1:-}"
shift || true
PAYLOAD=""
PAYLOAD_DEVICE=""
WHEELHOUSE=""
while [ $# -gt 0 ]; do
    case "$1" in
        --payload) PAYLOAD="$2"; shift 2 ;;
        --payload-device) PAYLOAD_DEVICE="$2"; shift 2 ;;
        --wheelhouse) WHEELHOUSE="$2"; shift 2 ;;
        *) echo "setup-role.sh: unknown argument $1" >&2; exit 2 ;;
    esac
done
case "$ROLE" in
    controller|agent) ;;
    *) echo "usage: setup-role.sh controller|agent [--payload DIR] [--wheelhouse DIR]" >&2; exit 2 ;;
esac
if [ -n "$PAYLOAD_DEVICE" ]; then  # the lab's payload disk, read-only for this run
    PAYLOAD="$(mktemp -d /run/gleaner-payload.XXXXXX)"
    mount -o ro "$PAYLOAD_DEVICE" "$PAYLOAD"
    trap 'umount "$PAYLOAD" && rmdir "$PAYLOAD"' EXIT
fi
if [ -n "$PAYLOAD" ]; then
    SCRIPTS="$PAYLOAD/common/repo/scripts"
    DEPLOY="$PAYLOAD/common/repo/deploy"
    WHEELHOUSE="${WHEELHOUSE:-$PAYLOAD/common/wheels}"
else
    SCRIPTS="$HERE"
    DEPLOY="$HERE/../deploy"
fi
[ -f "$SCRIPTS/setup-lib.sh" ] || SCRIPTS="$HERE"
SETUP_TAG="setup-$ROLE"
# shellcheck source=scripts/setup-lib.sh
source "$SCRIPTS/setup-lib.sh"
require_root setup-role.sh "it installs packages and services"

PREFIX=/opt/gleaner
ETC=/etc/gleaner
IMAGE_DIR=/var/lib/gleaner/images
SERVICE="gleaner-$ROLE"
PACKAGES=(python3 python3-venv ca-certificates)
if [ "$ROLE" = agent ]; then
    PACKAGES+=(libvirt-daemon-system libvirt-clients qemu-system-x86 qemu-utils)
    [ -n "$PAYLOAD" ] || PACKAGES+=(busybox-static cpio kmod)  # the tiny guest is built here then
fi
started=$(date +%s)

ensure_packages "${PACKAGES[@]}"

if [ "$ROLE" = agent ]; then
    kvm_device_group
    # libvirtd at boot (Debian enables it; the lab box does not, so its controller VM boots lighter)
    systemctl enable -q libvirtd.service 2>/dev/null || true
    start_libvirt "$SCRIPTS"
    if [ -e /dev/kvm ]; then
        say "kvm: /dev/kvm present; guests use KVM where the agent finds it usable (domain_type auto)"
    else
        say "kvm: no /dev/kvm; guests run under TCG"
    fi
    install -d -m 0755 "$IMAGE_DIR"
    if [ -n "$PAYLOAD" ] && [ -f "$PAYLOAD/common/images/tiny/manifest.json" ]; then
        if ! cmp -s "$PAYLOAD/common/images/tiny/manifest.json" "$IMAGE_DIR/tiny/manifest.json"; then
            say "image: the tiny guest from the payload into $IMAGE_DIR/tiny"
            rm -rf "$IMAGE_DIR/tiny.new"
            cp -r "$PAYLOAD/common/images/tiny" "$IMAGE_DIR/tiny.new"
            rm -rf "$IMAGE_DIR/tiny"
            mv "$IMAGE_DIR/tiny.new" "$IMAGE_DIR/tiny"
        fi
    elif [ -f "$HERE/../images/build.py" ]; then
        say "image: building the tiny guest into $IMAGE_DIR"
        python3 "$HERE/../images/build.py" --out "$IMAGE_DIR"
    fi
fi

if [ ! -x "$PREFIX/bin/python" ]; then
    say "python: creating $PREFIX"
    python3 -m venv "$PREFIX"
fi
# The venv may have no pip of its own (one made by an older lab box): then
# Debian's pip installs into it (pip --python).
if [ -x "$PREFIX/bin/pip" ]; then PIP=("$PREFIX/bin/pip"); else PIP=(python3 -m pip --python "$PREFIX/bin/python"); fi
if [ -n "$WHEELHOUSE" ]; then
    say "python: installing gleaner and what it needs from the wheelhouse $WHEELHOUSE (no index)"
    # --force-reinstall --no-deps: the project's own wheel again (same version, new code); then
    # the dependencies, which are usually in place already (one pip run each, slow under TCG)
    "${PIP[@]}" install -q --no-index --no-compile --find-links "$WHEELHOUSE" --force-reinstall --no-deps gleaner
    # every other wheel there already installed at its version (the lab box has them): done
    if ! "$PREFIX/bin/python" - "$WHEELHOUSE" <<'PY'
import importlib.metadata as md, pathlib, sys
for wheel in pathlib.Path(sys.argv[1]).glob("*.whl"):
    name, version = wheel.name.split("-")[:2]
    if name == "gleaner":
        continue
    try:
        if md.version(name) != version:
            sys.exit(1)
    except md.PackageNotFoundError:
        sys.exit(1)
PY
    then
        "${PIP[@]}" install -q --no-index --no-compile --find-links "$WHEELHOUSE" gleaner
    fi
else
    say "python: installing gleaner from $HERE/.. (needs PyPI for its dependencies)"
    "${PIP[@]}" install -q "$HERE/.."
fi

install -d -m 0755 "$ETC"
if [ -n "$PAYLOAD" ] && [ -d "$PAYLOAD/node" ]; then
    say "config: $ETC/$ROLE.toml and $ETC/pki from the payload"
    install -m 0644 "$PAYLOAD/node/$ROLE.toml" "$ETC/$ROLE.toml"
    install -d -m 0700 "$ETC/pki"
    for f in "$PAYLOAD"/node/pki/*; do
        case "$f" in *.key) mode=0600 ;; *) mode=0644 ;; esac
        install -m "$mode" "$f" "$ETC/pki/$(basename "$f")"
    done
    if [ -f "$PAYLOAD/node/hostname" ]; then
        name="$(cat "$PAYLOAD/node/hostname")"
        say "hostname: $name"
        hostnamectl set-hostname "$name" 2>/dev/null || { echo "$name" > /etc/hostname; hostname "$name"; }
    fi
    if [ -f "$PAYLOAD/node/lab.network" ]; then
        say "network: the lab network (systemd-networkd, /etc/systemd/network/20-lab.network)"
        install -m 0644 "$PAYLOAD/node/lab.network" /etc/systemd/network/20-lab.network
        networkctl reload
        address="$(sed -n 's/^Address=//p' "$PAYLOAD/node/lab.network")"
        for _ in $(seq 1 30); do
            ip -o addr show | grep -q " ${address%/*}/" && break
            sleep 1
        done
        ip -o addr show | grep -q " ${address%/*}/" || { echo "setup-role.sh: the lab address $address did not come up" >&2; exit 1; }
    fi
    if [ -f "$PAYLOAD/node/hosts" ]; then
        say "hosts: the pool's names in /etc/hosts"
        sed -i '/# gleaner-lab$/d' /etc/hosts
        sed 's/$/ # gleaner-lab/' "$PAYLOAD/node/hosts" >> /etc/hosts
    fi
fi

say "systemd: $SERVICE.service"
install -m 0644 "$DEPLOY/systemd/$SERVICE.service" "/etc/systemd/system/$SERVICE.service"
if [ ! -d /run/systemd/system ]; then
    say "systemd is not running here: start $PREFIX/bin/$SERVICE --config $ETC/$ROLE.toml yourself"
    exit 0
fi
systemctl daemon-reload
if [ ! -f "$ETC/$ROLE.toml" ]; then
    systemctl enable "$SERVICE.service"
    say "no $ETC/$ROLE.toml yet: write it (README: Configuration reference), then 'systemctl start $SERVICE'"
    exit 0
fi
systemctl enable "$SERVICE.service"
systemctl restart "$SERVICE.service"
for _ in $(seq 1 60); do
    if systemctl is-active -q "$SERVICE.service"; then
        say "$SERVICE is running ($(( $(date +%s) - started ))s)"
        exit 0
    fi
    sleep 1
done
systemctl status --no-pager "$SERVICE.service" || true
journalctl -u "$SERVICE.service" -n 30 --no-pager || true
echo "setup-role.sh: $SERVICE did not start" >&2
exit 1

#!/usr/bin/env bash
# Install Gleaner on one host of a pool, by role, as a service that starts at boot:
#
#   setup-role.sh controller|agent [--payload DIR | --payload-device DEV] [--wheelhouse DIR]
#
# Run as root on a Debian 12 host. Shares its steps with scripts/setup.sh (scripts/setup-lib.sh).
#   agent       the hypervisor packages, /dev/kvm for group kvm, virtlogd and libvirtd running,
#               the tiny guest image in /var/lib/gleaner/images
#   controller  the system user gleaner-controller, which the service runs as: it owns its
#               key in /etc/gleaner/pki (0600) and its state directory
#   both        the project in a virtual environment at /opt/gleaner, from a wheelhouse
#               (pip --no-index --require-hashes: the host needs no PyPI; the wheelhouse's
#               requirements.txt holds each wheel's hash) or, without one, from this repository
#               (requirements.lock, hash-checked, then the project);
#               gleanctl on PATH (/usr/local/bin/gleanctl, a wrapper for /opt/gleaner's);
#               the systemd unit deploy/systemd/gleaner-ROLE.service, enabled and (re)started
#               when /etc/gleaner/ROLE.toml exists, and the documents it names in
#               /usr/share/doc/gleaner
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
DOCS="$DEPLOY/../docs"
[ -f "$SCRIPTS/setup-lib.sh" ] || SCRIPTS="$HERE"
SETUP_TAG="setup-$ROLE"
# shellcheck source=scripts/setup-lib.sh
source "$SCRIPTS/setup-lib.sh"
require_root setup-role.sh "it installs packages and services"

PREFIX=/opt/gleaner
ETC=/etc/gleaner
IMAGE_DIR=/var/lib/gleaner/images
SERVICE="gleaner-$ROLE"
SERVICE_USER=gleaner-controller   # the controller's; the agent runs as root (libvirt, cgroups, tc)
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
    say "python: installing gleaner and what it needs from the wheelhouse $WHEELHOUSE (no index, hash-checked)"
    HASHED="$WHEELHOUSE/requirements.txt"   # every wheel there, name==version and its sha256
    [ -f "$HASHED" ] || { echo "setup-role.sh: $HASHED is missing (vagrant/prepare.py writes it)" >&2; exit 1; }
    own="$(mktemp)"
    lock_subset "$HASHED" gleaner > "$own"
    # --force-reinstall --no-deps: the project's own wheel again (same version, new code); then
    # the dependencies, which are usually in place already (one pip run each, slow under TCG)
    "${PIP[@]}" install -q --no-index --no-compile --find-links "$WHEELHOUSE" --require-hashes --force-reinstall \
        --no-deps -r "$own"
    rm -f "$own"
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
        "${PIP[@]}" install -q --no-index --no-compile --find-links "$WHEELHOUSE" --require-hashes -r "$HASHED"
    fi
else
    say "python: installing gleaner's locked dependencies from PyPI (requirements.lock, hash-checked), then gleaner"
    install_locked "$PREFIX/bin/python" "$HERE/../requirements.lock"
    "$PREFIX/bin/python" -m pip install -q --no-deps --no-build-isolation "$HERE/.."
fi

if [ "$ROLE" = controller ] && ! getent passwd "$SERVICE_USER" >/dev/null; then
    say "user: $SERVICE_USER (system user, no login, no home), which the controller runs as"
    useradd --system --user-group --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin "$SERVICE_USER"
fi

install -d -m 0755 "$ETC"
if [ -n "$PAYLOAD" ] && [ -d "$PAYLOAD/node" ]; then
    # The lab's node added by README's steps has neither: its admin's steps make them
    if [ -f "$PAYLOAD/node/$ROLE.toml" ]; then
        say "config: $ETC/$ROLE.toml and $ETC/pki from the payload"
        install -m 0644 "$PAYLOAD/node/$ROLE.toml" "$ETC/$ROLE.toml"
    fi
    if [ -d "$PAYLOAD/node/pki" ]; then
        install -d -m 0700 "$ETC/pki"
        for f in "$PAYLOAD"/node/pki/*; do
            case "$f" in *.key) mode=0600 ;; *) mode=0644 ;; esac
            install -m "$mode" "$f" "$ETC/pki/$(basename "$f")"
        done
    fi
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

if [ "$ROLE" = controller ] && [ -d "$ETC/pki" ]; then
    # The controller runs as $SERVICE_USER: it reads the directory (group), the certificates
    # and deny list (0644) and its own key, which it owns and nobody else may read (0600).
    say "pki: $ETC/pki readable by $SERVICE_USER, its key owned by it (0600)"
    chown "root:$SERVICE_USER" "$ETC/pki"
    chmod 0750 "$ETC/pki"
    # the key its configuration names ([tls] key), else the lab's and gleanctl pki's name for it
    keys="$(python3 - "$ETC/controller.toml" <<'PY' 2>/dev/null || true
import sys, tomllib
print(tomllib.load(open(sys.argv[1], "rb")).get("tls", {}).get("key", ""))
PY
)"
    for key in ${keys:-"$ETC"/pki/controller-*.key}; do
        [ -f "$key" ] || continue
        chown "$SERVICE_USER:$SERVICE_USER" "$key"
        chmod 0600 "$key"
    done
fi

# gleanctl on PATH (/usr/local/bin), as scripts/setup.sh does: README's "Adding a node" runs
# `gleanctl pki request` on the node right after this script
install_gleanctl "$PREFIX"

say "systemd: $SERVICE.service, its documents in /usr/share/doc/gleaner"
install -m 0644 "$DEPLOY/systemd/$SERVICE.service" "/etc/systemd/system/$SERVICE.service"
install -d -m 0755 /usr/share/doc/gleaner
for doc in "$ROLE.md" security.md; do   # what the unit's Documentation= names
    if [ -f "$DOCS/$doc" ]; then
        install -m 0644 "$DOCS/$doc" "/usr/share/doc/gleaner/$doc"
    else
        say "warning: $DOCS/$doc not found; the unit's Documentation= will not resolve"
    fi
done
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

#!/usr/bin/env bash
# Host set-up for the Vagrant lab (vagrant/), run as root from the repository after
# scripts/setup.sh: installs Vagrant with its libvirt provider, debootstrap (the lab box is
# built from Debian's archive) and dnsmasq-base (libvirt's NAT networks hand out addresses with
# it), and makes sure libvirtd runs. Idempotent: a second run changes nothing.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
LAB_PACKAGES=(
    vagrant vagrant-libvirt                # the lab's machines, on this host's libvirtd
    debootstrap e2fsprogs qemu-utils       # the lab box: a Debian root filesystem in an ext4 qcow2
    dnsmasq-base                           # DHCP and DNS on the lab's libvirt networks
    openssh-client rsync ruby              # vagrant reaches the VMs over SSH; the settings loader
)
SETUP_TAG=lab-host
# shellcheck source=scripts/setup-lib.sh
source "$REPO/scripts/setup-lib.sh"

require_root lab-host.sh "it installs packages and starts libvirtd"

ensure_packages "${LAB_PACKAGES[@]}"
start_libvirt "$REPO/scripts"
say "done"

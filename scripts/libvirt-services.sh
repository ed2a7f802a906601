#!/usr/bin/env bash
# Make sure virtlogd and libvirtd run, and wait until libvirtd answers. Idempotent.
# Uses systemd where it is PID 1; otherwise starts the daemons directly (containers, CI).
set -euo pipefail

if [ -d /run/systemd/system ]; then
    systemctl start virtlogd.socket libvirtd.socket libvirtd.service
else
    pgrep -x virtlogd >/dev/null || virtlogd --daemon
    pgrep -x libvirtd >/dev/null || libvirtd --daemon
fi

for _ in $(seq 1 100); do
    if virsh -c qemu:///system version >/dev/null 2>&1; then
        exit 0
    fi
    sleep 0.1
done
echo "libvirt-services: libvirtd did not answer on qemu:///system within 10s" >&2
exit 1

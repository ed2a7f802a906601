#!/usr/bin/env bash
# Make sure virtlogd and libvirtd run, and wait until libvirtd answers. Idempotent.
# Uses systemd where it is PID 1; otherwise starts the daemons directly (containers, CI).
#
# Also makes sure QEMU hands console output to virtlogd (qemu.conf's stdio_handler = "logd",
# libvirt's default): virtlogd bounds each console log and work channel, QEMU's own "file"
# handler does not, and the agent refuses to start without it. A qemu.conf that says otherwise
# is set back to "logd", and a running libvirtd restarted to read it (running guests survive).
# QEMU_CONF names another qemu.conf (tests).
set -euo pipefail

QEMU_CONF=${QEMU_CONF:-/etc/libvirt/qemu.conf}

stdio_handler() {   # the effective setting: the last assignment not commented out, else "logd"
    local value=""
    if [ -f "$QEMU_CONF" ]; then
        value=$(sed -nE "s/^[[:space:]]*stdio_handler[[:space:]]*=[[:space:]]*[\"']([^\"']*)[\"'].*/\\1/p" \
                "$QEMU_CONF" | tail -n 1)
    fi
    echo "${value:-logd}"
}

restart=no
handler=$(stdio_handler)
if [ "$handler" != logd ]; then
    sed -i -E 's/^[[:space:]]*stdio_handler[[:space:]]*=.*/stdio_handler = "logd"/' "$QEMU_CONF"
    echo "libvirt-services: $QEMU_CONF had stdio_handler = \"$handler\"; set it to \"logd\"" \
         "(virtlogd bounds console logs)" >&2
    restart=yes
fi

if [ -d /run/systemd/system ]; then
    if [ "$restart" = yes ] && systemctl is-active --quiet libvirtd.service; then
        echo "libvirt-services: restarting libvirtd to read $QEMU_CONF" >&2
        systemctl restart libvirtd.service
    fi
    systemctl start virtlogd.socket libvirtd.socket libvirtd.service
else
    pid=$(pgrep -x libvirtd || true)
    if [ "$restart" = yes ] && [ -n "$pid" ]; then
        echo "libvirt-services: restarting libvirtd (pid $pid) to read $QEMU_CONF" >&2
        kill "$pid"
        for _ in $(seq 1 150); do
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.1
        done
    fi
    pgrep -x virtlogd >/dev/null || virtlogd --daemon
    pgrep -x libvirtd >/dev/null || libvirtd --daemon
fi

if [ "$(stdio_handler)" != logd ]; then
    echo "libvirt-services: $QEMU_CONF still does not set stdio_handler = \"logd\"; set it by hand" >&2
    exit 1
fi
for _ in $(seq 1 100); do
    if virsh -c qemu:///system version >/dev/null 2>&1; then
        exit 0
    fi
    sleep 0.1
done
echo "libvirt-services: libvirtd did not answer on qemu:///system within 10s" >&2
exit 1

"""What the agent needs of libvirt's own configuration, checked at start-up.

Console logs and work channels are bounded by virtlogd (its max_size and max_backups): QEMU
hands a domain's serial output to virtlogd only when qemu.conf's `stdio_handler` is "logd",
libvirt's default. With "file", QEMU writes the files itself, without any bound, and a chatty
guest fills the agent's state directory (which also holds the overlays). So the agent refuses
to start unless the effective setting is "logd"; scripts/libvirt-services.sh sets it back.
"""
from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import urlsplit

QEMU_CONF = Path("/etc/libvirt/qemu.conf")   # the system QEMU driver's (libvirtd reads it at start)
REQUIRED_HANDLER = "logd"                    # also libvirt's default, when qemu.conf says nothing
# `stdio_handler = "file"`, not commented out; libvirt's conf syntax allows either quote
_SETTING = re.compile(r"""\s*stdio_handler\s*=\s*(["'])(?P<value>[^"']*)\1\s*(#.*)?""")


class LibvirtConfError(RuntimeError):
    """libvirt is configured in a way the agent cannot work with; the message says how to fix it."""


def stdio_handler(text: str) -> str:
    """The effective stdio_handler of a qemu.conf: its last assignment, or libvirt's default."""
    value = REQUIRED_HANDLER
    for line in text.splitlines():
        match = _SETTING.fullmatch(line)
        if match:
            value = match["value"]
    return value


def uses_system_qemu_conf(uri: str) -> bool:
    """Whether libvirt at `uri` is this host's system QEMU driver, which reads /etc/libvirt/qemu.conf
    (qemu:///system, qemu+unix:///system); a session, a remote host or test:/// do not."""
    parts = urlsplit(uri)
    return parts.scheme in ("qemu", "qemu+unix") and parts.hostname in (None, "", "localhost") \
        and parts.path.rstrip("/") == "/system"


def check_stdio_handler(uri: str, conf: Path | None = None) -> None:
    """Raise LibvirtConfError unless QEMU's console output goes through virtlogd."""
    if not uses_system_qemu_conf(uri):
        return
    conf = conf or QEMU_CONF
    try:
        text = conf.read_text(errors="replace")
    except FileNotFoundError:
        return   # libvirt's defaults: logd
    except OSError as exc:
        raise LibvirtConfError(f"cannot read {conf} to check its stdio_handler setting ({exc.strerror}); the "
                               f"agent needs stdio_handler = \"{REQUIRED_HANDLER}\" there") from None
    value = stdio_handler(text)
    if value != REQUIRED_HANDLER:
        raise LibvirtConfError(
            f"{conf} sets stdio_handler = \"{value}\"; the agent needs \"{REQUIRED_HANDLER}\" (virtlogd bounds "
            f"each console log and work channel; QEMU's own file handler does not). Set stdio_handler = "
            f"\"{REQUIRED_HANDLER}\" in {conf} and restart libvirtd (bash scripts/libvirt-services.sh does both)")

"""What the two all-in-one demos share (nodeagent.demo, controller.demo): how they speak, and
whether this host is itself a VM. Here, so the controller's demo needs nothing of the agent's."""
from __future__ import annotations

from pathlib import Path


def say(text: str) -> None:
    print(f"[demo] {text}", flush=True)


def running_nested() -> bool:
    """Inside a VM, nested KVM works but is far too slow to boot guests; TCG is faster."""
    try:
        return " hypervisor" in Path("/proc/cpuinfo").read_text()
    except OSError:
        return False

"""The agent's report: what it says of each VM's CPU (the controller's idle_first reads it)."""
from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path
from types import SimpleNamespace

from gleaner_common.vocabulary import PriorityClass
from nodeagent.host.domainxml import GleanerMetadata
from nodeagent.host.workchannel import channel_path
from nodeagent.inventory import guest_work
from nodeagent.reporter import Reporter


class Inventory:
    """Two running volunteers, as the agent's inventory lists them. `roles`: their classes;
    `channels`: whether each was launched with the work channel (a goal's dedicated VM)."""

    def __init__(self, console_dir: Path | None = None, roles=(PriorityClass.VOLUNTEER, PriorityClass.VOLUNTEER),
                 channels=(False, False)) -> None:
        self.console_dir = console_dir or Path("/nonexistent")
        self.roles = roles
        self.channels = channels

    def work_state(self, name, meta):
        return guest_work(self.console_dir, name, meta)

    def host_facts(self):
        return SimpleNamespace(cpus=2, memory_mib=4096)

    def running(self):
        shape = SimpleNamespace(vcpus=1, memory_mib=128)
        return [(name, GleanerMetadata(role=role, lease_id="L", launched_at=datetime.now(timezone.utc), image="tiny",
                                       kernel_cmdline="", overlay="", priority_class=role, work_channel=channel),
                 shape) for name, role, channel in zip(("sampled", "new"), self.roles, self.channels)]


class Sampler:
    """A sample that has a figure for one VM only (the other started since the last one)."""

    def latest(self):
        return SimpleNamespace(domains=[SimpleNamespace(name="sampled", cpu_cores=0.01)], host={"cpu_busy_cores": 0.5},
                               residual=SimpleNamespace(foreground_cpu_demand_cores=0.4, residual_cpu_cores=1.6,
                                                        residual_memory_bytes=2**30))


def test_a_vm_without_a_cpu_sample_is_reported_as_such_not_as_idle(tmp_path: Path):
    config = SimpleNamespace(agent_id="n1", reachable_address="n1:7451", image_dir=tmp_path, cpu_allocation_ratio=1.0)
    report = Reporter(config, Inventory(), Sampler()).build()
    vms = {vm.name: vm for vm in report.vms}
    assert (vms["sampled"].cpu_cores, vms["sampled"].cpu_sampled) == (0.01, True)
    assert (vms["new"].cpu_cores, vms["new"].cpu_sampled) == (0.0, False)


def test_a_backfill_guests_word_on_its_work_channel_is_reported_and_an_on_demand_vms_is_not(tmp_path: Path):
    config = SimpleNamespace(agent_id="n1", reachable_address="n1:7451", image_dir=tmp_path, cpu_allocation_ratio=1.0)
    for name in ("sampled", "new"):
        channel_path(tmp_path, name).write_bytes(b"busy 1\nidle 1\nbusy 2\n")
    report = Reporter(config, Inventory(tmp_path, (PriorityClass.VOLUNTEER, PriorityClass.FOREGROUND)), Sampler()).build()
    vms = {vm.name: vm for vm in report.vms}
    assert vms["sampled"].work_state == "busy" and 0 <= vms["sampled"].work_for_s < 60
    assert (vms["new"].role, vms["new"].work_state, vms["new"].work_for_s) == ("on_demand", "", 0.0)
    assert vms["sampled"].role == "backfill"   # the wire speaks of roles; the metadata of classes
    channel_path(tmp_path, "sampled").unlink()
    report = Reporter(config, Inventory(tmp_path), Sampler()).build()
    assert [(vm.work_state, vm.work_for_s) for vm in report.vms] == [("", 0.0), ("busy", report.vms[1].work_for_s)]


def test_a_dedicated_vms_word_is_reported_and_an_on_demand_vms_without_the_channel_is_not(tmp_path: Path):
    """A goal's dedicated VM is foreground with the work channel: its guest's progress is reported
    as a volunteer's is. A foreground VM launched without it is not read, even if a file of its
    name is there."""
    config = SimpleNamespace(agent_id="n1", reachable_address="n1:7451", image_dir=tmp_path, cpu_allocation_ratio=1.0)
    for name in ("sampled", "new"):
        channel_path(tmp_path, name).write_bytes(b"progress 3 10\nidle 3\n")
    foreground = (PriorityClass.FOREGROUND, PriorityClass.FOREGROUND)
    report = Reporter(config, Inventory(tmp_path, foreground, channels=(True, False)), Sampler()).build()
    vms = {vm.name: vm for vm in report.vms}
    assert (vms["sampled"].role, vms["sampled"].work_state) == ("on_demand", "idle")
    assert (vms["sampled"].progress_done, vms["sampled"].progress_total) == (3, 10)
    assert (vms["new"].work_state, vms["new"].progress_done, vms["new"].progress_total) == ("", 0, 0)


def test_an_agent_waiting_to_report_again_stops_waiting_once_its_controller_listens():
    """A restarted controller is reported to at once, not after the rest of the back-off."""
    import socket
    import threading
    from nodeagent.reporter import wait_for_listener
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    stop = threading.Event()
    # nothing listens: the whole (short) pause is waited, and it says so
    assert wait_for_listener(f"127.0.0.1:{port}", 0.3, stop, every=0.05) is False
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    threading.Timer(0.2, lambda: (listener.bind(("127.0.0.1", port)), listener.listen())).start()
    try:   # a back-off of an hour ends as soon as the port listens
        assert wait_for_listener(f"127.0.0.1:{port}", 3600, stop, every=0.05) is True
    finally:
        listener.close()
    stop.set()   # and stopping the agent ends the wait too
    assert wait_for_listener(f"127.0.0.1:{port}", 3600, stop, every=0.05) is False

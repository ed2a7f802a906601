"""Priority classes on the real cgroup v1 hierarchy with real QEMU domains."""
from __future__ import annotations

import os
import queue
import subprocess
import threading
import time
import uuid
from pathlib import Path

import grpc
import pytest

from protos import agent_pb2, agent_pb2_grpc
from tests.agentproc import (TEST_ROOT, AgentProcess, domain_cgroup_dir, launch_request, read_cgroup_int,
                             remove_test_domains, unique_name, wait_for, wait_for_console)


def cpu_knobs(name: str) -> tuple[int, int]:
    """(cpu.idle, cpu.shares) of the domain's real cgroup."""
    group = domain_cgroup_dir(name)
    return read_cgroup_int(group, "cpu.idle"), read_cgroup_int(group, "cpu.shares")


def persistent_shares(name: str) -> int:
    out = subprocess.run(["virsh", "-c", "qemu:///system", "schedinfo", name, "--config"], check=True,
                         capture_output=True, text=True).stdout
    return int(next(line.split(":")[1] for line in out.splitlines() if line.startswith("cpu_shares")))


class EventWatcher:
    """Collects the agent's WatchEvents stream in a thread."""

    def __init__(self, agent: AgentProcess) -> None:
        self.events: queue.Queue = queue.Queue()
        self.seen: list[agent_pb2.Event] = []
        self.channel = agent.channel(agent.env.pki.viewer)
        self.stream = agent_pb2_grpc.NodeAgentStub(self.channel).WatchEvents(agent_pb2.WatchEventsRequest())
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        try:
            for event in self.stream:
                self.events.put(event)
        except grpc.RpcError:
            pass  # cancelled by close()

    def expect(self, kind: str, domain: str, timeout: float = 15) -> agent_pb2.Event:
        """The first not yet expected event of this kind for this domain, in arrival order."""
        deadline = time.monotonic() + timeout
        while True:
            for event in self.seen:
                if event.kind == kind and event.domain == domain:
                    self.seen.remove(event)
                    return event
            if time.monotonic() >= deadline:
                break
            try:
                self.seen.append(self.events.get(timeout=0.2))
            except queue.Empty:
                continue
        raise AssertionError(f"no {kind} event for {domain} within {timeout}s")

    def close(self) -> None:
        self.stream.cancel()
        self.channel.close()


def test_classes_are_applied_at_launch(stub):
    fg, vol = unique_name("cls-fg"), unique_name("cls-vol")
    stub.LaunchDomain(launch_request(fg, agent_pb2.ROLE_ON_DEMAND))
    stub.LaunchDomain(launch_request(vol, agent_pb2.ROLE_BACKFILL))
    assert cpu_knobs(fg) == (0, 1024)
    idle, shares = cpu_knobs(vol)
    assert idle == 1 and shares == 3  # the kernel's idle weight, which cpu.shares reports while idle
    # Every domain starts at the normal weight (a starved QEMU start-up stalls libvirt);
    # the volunteer's class is put on the moment it runs.
    assert persistent_shares(vol) == 1024 and persistent_shares(fg) == 1024
    listed = {d.name: d for d in stub.ListDomains(agent_pb2.ListDomainsRequest()).domains}
    assert listed[vol].priority_class == agent_pb2.PRIORITY_CLASS_VOLUNTEER
    assert listed[fg].priority_class == agent_pb2.PRIORITY_CLASS_FOREGROUND


def test_promote_and_demote_change_the_cgroup_and_are_reported(agent, stub):
    name = unique_name("promote")
    stub.LaunchDomain(launch_request(name, agent_pb2.ROLE_BACKFILL))
    watcher = EventWatcher(agent)
    try:
        time.sleep(0.3)  # let the stream subscribe
        promoted = stub.SetDomainClass(agent_pb2.SetDomainClassRequest(name=name,
                                                                       priority_class=agent_pb2.PRIORITY_CLASS_FOREGROUND))
        assert promoted.priority_class == agent_pb2.PRIORITY_CLASS_FOREGROUND
        assert promoted.role == agent_pb2.ROLE_BACKFILL  # still preemptible
        assert cpu_knobs(name) == (0, 1024)
        event = watcher.expect("class.changed", name)
        assert dict(event.fields) == {"from": "volunteer", "to": "foreground"}
        stub.SetDomainClass(agent_pb2.SetDomainClassRequest(name=name, priority_class=agent_pb2.PRIORITY_CLASS_VOLUNTEER))
        assert cpu_knobs(name)[0] == 1
        watcher.expect("class.changed", name)
    finally:
        watcher.close()


def test_a_promotion_survives_an_agent_restart(test_env):
    agent = AgentProcess(test_env, name="persist-class").start()
    try:
        name = unique_name("keep-class")
        agent.stub().LaunchDomain(launch_request(name, agent_pb2.ROLE_BACKFILL))
        agent.stub().SetDomainClass(agent_pb2.SetDomainClassRequest(name=name,
                                                                    priority_class=agent_pb2.PRIORITY_CLASS_FOREGROUND))
        agent.stop()
        agent.start()
        listed = {d.name: d for d in agent.stub().ListDomains(agent_pb2.ListDomainsRequest()).domains}
        assert listed[name].priority_class == agent_pb2.PRIORITY_CLASS_FOREGROUND
        assert cpu_knobs(name) == (0, 1024)
    finally:
        agent.stop()


def test_settings_changed_behind_the_agents_back_are_put_back(agent, stub):
    vol, fg = unique_name("drift-vol"), unique_name("drift-fg")
    stub.LaunchDomain(launch_request(vol, agent_pb2.ROLE_BACKFILL))
    stub.LaunchDomain(launch_request(fg, agent_pb2.ROLE_ON_DEMAND))
    watcher = EventWatcher(agent)
    try:
        time.sleep(0.3)
        (domain_cgroup_dir(vol) / "cpu.idle").write_text("0")   # as an admin or libvirtd might
        (domain_cgroup_dir(fg) / "cpu.shares").write_text("64")
        event = watcher.expect("drift.corrected", vol)
        assert "cpu.idle 0 -> 1" in event.detail
        event = watcher.expect("drift.corrected", fg)
        assert "cpu.shares 64 -> 1024" in event.detail
        assert cpu_knobs(vol)[0] == 1 and cpu_knobs(fg) == (0, 1024)
    finally:
        watcher.close()


def test_a_launch_under_way_is_not_taken_for_drift(test_env):
    """A reconcile pass between a domain's start and its class being put on finds the class not
    yet applied: that is a launch under way, not drift. The agent pauses there for 2.5 s (its
    passes run every second) to let passes run exactly then."""
    agent = AgentProcess(test_env, name="launch-drift").start(env={"GLEANER_AGENT_PAUSE_AT": "launch.after_start:2.5"})
    watcher = EventWatcher(agent)
    try:
        name = unique_name("paused-vol")
        agent.stub().LaunchDomain(launch_request(name, agent_pb2.ROLE_BACKFILL), timeout=60)
        assert "point=launch.after_start" in agent.log_text()
        assert cpu_knobs(name)[0] == 1   # the launch put the volunteer class on
        time.sleep(2.5)                  # passes after the launch: nothing to correct either
        while not watcher.events.empty():
            watcher.seen.append(watcher.events.get())
        assert not [e.detail for e in watcher.seen if e.kind == "drift.corrected"]
    finally:
        watcher.close()
        agent.stop()


def test_set_class_checks_its_fields(stub):
    for request, code in [
        (agent_pb2.SetDomainClassRequest(name="a/b", priority_class=agent_pb2.PRIORITY_CLASS_FOREGROUND),
         grpc.StatusCode.INVALID_ARGUMENT),
        (agent_pb2.SetDomainClassRequest(name=unique_name(), priority_class=agent_pb2.ROLE_UNSPECIFIED),
         grpc.StatusCode.INVALID_ARGUMENT),
        (agent_pb2.SetDomainClassRequest(name=unique_name("ghost"), priority_class=agent_pb2.PRIORITY_CLASS_FOREGROUND),
         grpc.StatusCode.NOT_FOUND),
    ]:
        try:
            stub.SetDomainClass(request)
        except grpc.RpcError as err:
            assert err.code() == code
        else:
            raise AssertionError(f"{request} was accepted")


def volunteer_cpu_per_period(agent: AgentProcess, guard: bool, seconds: float = 24) -> tuple[list[float], float]:
    """A foreground hog and a volunteer hog pinned to host CPU 1. Returns the volunteer's CPU
    seconds in each guard period after the first, and the foreground's share of the CPU."""
    stub = agent.stub()
    fg, vol = unique_name("starve-fg"), unique_name("starve-vol")
    hog = "gleaner.workload=hog"
    # The volunteer boots first: beside a running foreground hog it would starve in its boot.
    for name, role in ((vol, agent_pb2.ROLE_BACKFILL), (fg, agent_pb2.ROLE_ON_DEMAND)):
        reply = stub.LaunchDomain(launch_request(name, role, kernel_cmdline=hog, cpuset="1"))
        wait_for_console(reply.domain.console_log, "GLEANER-READY", timeout=60)
    period = agent.settings["guard_period_seconds"]

    def cpu() -> dict[str, int]:
        return {d.name: d.cpu_time_ns for d in stub.ListDomains(agent_pb2.ListDomainsRequest()).domains}

    time.sleep(period)  # the guard needs one whole period of samples before it judges
    start, t0 = cpu(), time.monotonic()
    marks = [start]
    while time.monotonic() - t0 < seconds:
        time.sleep(period)
        marks.append(cpu())
    elapsed = time.monotonic() - t0
    per_period = [(b[vol] - a[vol]) / 1e9 for a, b in zip(marks, marks[1:])]
    fg_share = (marks[-1][fg] - start[fg]) / 1e9 / elapsed
    for name in (fg, vol):
        stub.TerminateDomain(agent_pb2.TerminateDomainRequest(name=name, force=True))
    return per_period, fg_share


def test_starvation_guard_gives_a_starved_volunteer_its_slice(test_env):
    period, slice_ms = 4.0, 400.0
    results = {}
    for guard in (True, False):
        agent = AgentProcess(test_env, name=f"guard-{str(guard).lower()}",
                             settings=dict(guard_enabled=guard, guard_period_seconds=period,
                                           guard_slice_ms=slice_ms, guard_tick_seconds=0.1)).start()
        try:
            results[guard] = volunteer_cpu_per_period(agent, guard)
            if guard:
                assert "event=guard.boost" in agent.log_text() and "event=guard.release" in agent.log_text()
        finally:
            agent.stop()
    (on, fg_on), (off, fg_off) = results[True], results[False]
    slice_s = slice_ms / 1000
    # With the guard on: at least e per p, within 25%: boosts fall on tick boundaries, and on
    # a loaded 2-core host the agent's ticks themselves run late.
    assert min(on) >= slice_s * 0.75, on
    # With it off: almost nothing (cpu.idle leaves a volunteer a sliver).
    assert max(off) < slice_s * 0.25, off
    # The foreground's loss to the guard stays within e/p of a CPU (plus 5 points of noise).
    assert fg_off - fg_on <= slice_s / period + 0.05, (fg_on, fg_off)


def live_disk_caps(name: str) -> tuple[int, int]:
    import xml.etree.ElementTree as ET
    root = ET.fromstring(subprocess.run(["virsh", "-c", "qemu:///system", "dumpxml", name], check=True,
                                        capture_output=True, text=True).stdout)
    iotune = root.find("devices/disk/iotune")
    if iotune is None:
        return 0, 0
    return int(iotune.findtext("total_bytes_sec") or 0), int(iotune.findtext("total_iops_sec") or 0)


def test_disk_priority_follows_the_scheduler_and_the_class(agent, stub):
    host = stub.DescribeHost(agent_pb2.DescribeHostRequest())
    scheduler = subprocess.run(["cat", "/sys/block/vda/queue/scheduler"], capture_output=True, text=True).stdout
    assert f"[{host.disk_scheduler}]" in scheduler
    assert host.volunteer_disk_mechanism == ("weights" if host.disk_scheduler == "bfq" else "caps")
    vol, fg = unique_name("disk-vol"), unique_name("disk-fg")
    stub.LaunchDomain(launch_request(vol, agent_pb2.ROLE_BACKFILL))
    stub.LaunchDomain(launch_request(fg, agent_pb2.ROLE_ON_DEMAND))
    capped = (20 * 2**20, 200) if host.volunteer_disk_mechanism == "caps" else (0, 0)
    assert live_disk_caps(vol) == capped
    assert live_disk_caps(fg) == (0, 0)  # foreground I/O is never shaped
    watcher = EventWatcher(agent)
    try:
        stub.SetDomainClass(agent_pb2.SetDomainClassRequest(name=vol, priority_class=agent_pb2.PRIORITY_CLASS_FOREGROUND))
        assert live_disk_caps(vol) == (0, 0)
        stub.SetDomainClass(agent_pb2.SetDomainClassRequest(name=vol, priority_class=agent_pb2.PRIORITY_CLASS_VOLUNTEER))
        assert live_disk_caps(vol) == capped
        if host.volunteer_disk_mechanism == "caps":  # an admin lifts the cap behind the agent's back
            subprocess.run(["virsh", "-c", "qemu:///system", "blkdeviotune", vol, "vda", "--total-bytes-sec", "0",
                            "--total-iops-sec", "0", "--live"], check=True, capture_output=True)
            event = watcher.expect("drift.corrected", vol)
            assert "disk caps 0 B/s, 0 IOPS" in event.detail
            assert live_disk_caps(vol) == capped
    finally:
        watcher.close()


def run(*args: str) -> str:
    return subprocess.run(list(args), check=True, capture_output=True, text=True).stdout


@pytest.fixture
def bfq_state_dir():
    """A state directory on a filesystem whose block device runs BFQ: a loop device over a
    sparse file, its scheduler set to bfq, ext4 on it. Always unmounted and detached."""
    TEST_ROOT.mkdir(parents=True, exist_ok=True)
    base = TEST_ROOT / f"bfq-{uuid.uuid4().hex[:8]}"
    image, mount = base.with_suffix(".img"), base
    device, mounted = "", False
    try:
        with open(image, "wb") as sparse:
            sparse.truncate(512 * 2**20)
        device = run("losetup", "--find", "--show", str(image)).strip()
        queue_scheduler = Path("/sys/block") / Path(device).name / "queue" / "scheduler"
        queue_scheduler.write_text("bfq")
        assert "[bfq]" in queue_scheduler.read_text()
        run("mkfs.ext4", "-q", device)
        mount.mkdir(mode=0o755)
        run("mount", device, str(mount))
        mounted = True
        mount.chmod(0o755)  # QEMU runs as libvirt-qemu and must reach the overlays below
        yield mount / "state", device
    finally:
        remove_test_domains()  # their QEMUs hold overlays on the mount
        if mounted:
            try:
                wait_for(lambda: subprocess.run(["umount", str(mount)], capture_output=True).returncode == 0,
                         20, f"{mount} to unmount", interval=0.5)
            except TimeoutError:  # something still holds it: detach it now, the kernel frees it later
                subprocess.run(["umount", "--lazy", str(mount)], check=False)
        if device:
            subprocess.run(["losetup", "-d", device], check=False)
        if mount.exists():
            mount.rmdir()
        image.unlink(missing_ok=True)


def libvirt_blkio_weight(name: str) -> int:
    """The weight `virsh blkiotune` reports for the running domain."""
    out = run("virsh", "-c", "qemu:///system", "blkiotune", name)
    return int(next(line.split(":")[1] for line in out.splitlines() if line.split(":")[0].strip() == "weight"))


def live_xml_weight(name: str) -> int:
    import xml.etree.ElementTree as ET
    return int(ET.fromstring(run("virsh", "-c", "qemu:///system", "dumpxml", name)).findtext("blkiotune/weight"))


def kernel_blkio_weight(name: str) -> int:
    """The weight in the domain's v1 blkio cgroup. This kernel has no blkio.weight (the CFQ-era
    file); libvirt writes blkio.bfq.weight, which is what BFQ reads."""
    group = domain_cgroup_dir(name, "blkio")
    assert not (group / "blkio.weight").exists()
    return read_cgroup_int(group, "blkio.bfq.weight")


def test_disk_weights_act_under_bfq_and_are_put_back(test_env, bfq_state_dir):
    state_dir, device = bfq_state_dir
    agent = AgentProcess(test_env, name="bfq", settings=dict(state_dir=state_dir)).start()
    watcher = None
    try:
        stub = agent.stub()
        host = stub.DescribeHost(agent_pb2.DescribeHostRequest())
        assert (host.disk_scheduler, host.volunteer_disk_mechanism) == ("bfq", "weights")
        vol, fg = unique_name("bfq-vol"), unique_name("bfq-fg")
        stub.LaunchDomain(launch_request(vol, agent_pb2.ROLE_BACKFILL))
        stub.LaunchDomain(launch_request(fg, agent_pb2.ROLE_ON_DEMAND))
        for name in (vol, fg):  # the overlays really are on the BFQ loop device
            assert os.stat(state_dir / "overlays" / f"{name}.qcow2").st_dev == os.stat(device).st_rdev
        for name, weight in ((vol, 100), (fg, 1000)):
            assert libvirt_blkio_weight(name) == weight
            assert live_xml_weight(name) == weight
            assert kernel_blkio_weight(name) == weight
            assert live_disk_caps(name) == (0, 0)  # under BFQ weights do the work: no caps on anyone
        watcher = EventWatcher(agent)
        time.sleep(0.3)
        run("virsh", "-c", "qemu:///system", "blkiotune", vol, "--weight", "500", "--live")  # behind its back
        # libvirt sends no event for a blkiotune change: the reconciler finds it in its full re-read of
        # every domain XML (every 30th pass, about 30 s here).
        event = watcher.expect("drift.corrected", vol, timeout=90)
        assert "disk weight 500 -> 100" in event.detail
        assert wait_for(lambda: kernel_blkio_weight(vol) == 100 and libvirt_blkio_weight(vol) == 100, 10,
                        "the weight to be put back")
        assert live_disk_caps(vol) == (0, 0) and kernel_blkio_weight(fg) == 1000
    finally:
        if watcher:
            watcher.close()
        agent.stop()


def tap_of(name: str) -> str:
    import xml.etree.ElementTree as ET
    root = ET.fromstring(subprocess.run(["virsh", "-c", "qemu:///system", "dumpxml", name], check=True,
                                        capture_output=True, text=True).stdout)
    return root.find("devices/interface/target").get("dev")


def root_tbf_rate(dev: str) -> str | None:
    """The rate of a tbf at the root of `dev`, as the stock tc tool prints it."""
    out = subprocess.run(["tc", "qdisc", "show", "dev", dev, "root"], check=True, capture_output=True, text=True).stdout
    words = out.split()
    return words[words.index("rate") + 1] if "tbf" in words else None


def kernel_can_police_ingress() -> bool:
    """An independent probe with the stock tc tool: can an ingress qdisc with a u32 police
    filter be made on a scratch tap (this kernel may have no dummy interfaces)?"""
    dev = f"gprobe{uuid.uuid4().hex[:6]}"
    subprocess.run(["ip", "tuntap", "add", "dev", dev, "mode", "tap"], check=True, capture_output=True)
    try:
        if subprocess.run(["tc", "qdisc", "add", "dev", dev, "ingress"], capture_output=True).returncode:
            return False
        return subprocess.run(["tc", "filter", "add", "dev", dev, "parent", "ffff:", "protocol", "all", "prio", "1",
                               "u32", "match", "u32", "0", "0", "action", "police", "rate", "8mbit", "burst", "16k",
                               "drop"], capture_output=True).returncode == 0
    finally:
        subprocess.run(["ip", "link", "del", dev], check=False, capture_output=True)


def ingress_police_rate(dev: str) -> str | None:
    """The rate of a police action on `dev`'s ingress filters, as the stock tc tool prints it."""
    words = run("tc", "filter", "show", "dev", dev, "ingress").split()
    return words[words.index("rate") + 1] if "police" in words and "rate" in words else None


def has_ingress_qdisc(dev: str) -> bool:
    return "ingress" in run("tc", "qdisc", "show", "dev", dev).split()


def test_volunteer_taps_are_shaped_and_foreground_taps_never(test_env):
    can_police = kernel_can_police_ingress()
    agent = AgentProcess(test_env, name="net", settings=dict(network_attach="ethernet")).start()
    watcher = None
    try:
        stub = agent.stub()
        watcher = EventWatcher(agent)  # before the first volunteer: network.limited comes with it
        time.sleep(0.3)
        vol, fg = unique_name("net-vol"), unique_name("net-fg")
        stub.LaunchDomain(launch_request(vol, agent_pb2.ROLE_BACKFILL))
        stub.LaunchDomain(launch_request(fg, agent_pb2.ROLE_ON_DEMAND))
        vol_tap, fg_tap = tap_of(vol), tap_of(fg)
        assert root_tbf_rate(vol_tap) == "100Mbit"  # the default 12.5 MB/s into the guest
        assert root_tbf_rate(fg_tap) is None
        # From the guest: policed where the kernel can, else said once, and nothing half-made left.
        assert ingress_police_rate(fg_tap) is None and not has_ingress_qdisc(fg_tap)
        if can_police:
            assert ingress_police_rate(vol_tap) == "100Mbit"  # the default 12.5 MB/s out of the guest
        else:
            event = watcher.expect("network.limited", vol)
            assert "cannot police traffic from the guest" in event.detail and "police action" in event.detail
            assert event.fields["interface"] == vol_tap
            assert not has_ingress_qdisc(vol_tap) and ingress_police_rate(vol_tap) is None
            assert "event=network.limited" in agent.log_text()
        stub.SetDomainClass(agent_pb2.SetDomainClassRequest(name=vol, priority_class=agent_pb2.PRIORITY_CLASS_FOREGROUND))
        assert root_tbf_rate(vol_tap) is None
        assert ingress_police_rate(vol_tap) is None and not has_ingress_qdisc(vol_tap)
        stub.SetDomainClass(agent_pb2.SetDomainClassRequest(name=vol, priority_class=agent_pb2.PRIORITY_CLASS_VOLUNTEER))
        assert root_tbf_rate(vol_tap) == "100Mbit"
        assert ingress_police_rate(vol_tap) == ("100Mbit" if can_police else None)
        # Nothing drifted so far: a reconcile pass must never put back a class it read just
        # before a change (and call that drift). Let a few passes go by to be sure.
        time.sleep(2.5)
        while not watcher.events.empty():
            watcher.seen.append(watcher.events.get())
        assert not [e.detail for e in watcher.seen if e.kind == "drift.corrected"]
        subprocess.run(["tc", "qdisc", "del", "dev", vol_tap, "root"], check=True)  # behind the agent's back
        event = watcher.expect("drift.corrected", vol)
        assert f"{vol_tap} to-guest cap 0 -> 12500000 B/s" in event.detail
        assert root_tbf_rate(vol_tap) == "100Mbit"
        if not can_police:  # once per distinct note: re-shaping the volunteer did not say it again
            while not watcher.events.empty():
                watcher.seen.append(watcher.events.get())
            assert not any(e.kind == "network.limited" for e in watcher.seen)
            assert agent.log_text().count("event=network.limited") == 1
            assert not has_ingress_qdisc(vol_tap)
    finally:
        if watcher:
            watcher.close()
        agent.stop()

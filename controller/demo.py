"""The all-in-one pool on this host: controller, one agent, backfill, one preemption.

    python -m controller.demo [--keep] [--state-dir DIR] [--domain-type auto|kvm|qemu]

It makes a lab CA, starts gleaner-controller (its SQLite store under the state directory) and
gleaner-agent, both with mutual TLS on loopback, and the agent reports to the controller. Then
it does what a new admin would do in the first five minutes, showing each gleanctl command:
enables backfill so the host fills with volunteer VMs, asks for an on-demand VM that needs the
room of the most recent backfill VM (which is hibernated, the default: saved to the node's disk),
shows the pool's status and audit log, releases the on-demand VM and shows the saved VM resumed
where it stopped. Without --keep it then releases every VM and stops; with --keep the pool runs
until Ctrl-C.
"""
from __future__ import annotations

import argparse
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import grpc

from gleaner_common.config import TlsConfig, tls_section, toml_text
from gleaner_common.demo import running_nested, say
from gleaner_common.identity import Role
from gleaner_common.pki import TlsFiles, ensure_lab_pki
from gleaner_common.rpc import channel_to, wait_until_serving
from protos import controller_pb2, controller_pb2_grpc

from .config import ControllerConfig
from .config import to_toml as controller_toml

READY_TIMEOUT = 240  # a volunteer booting at idle priority on a busy host is slow
NODE = "node1"


def tls_config(files: TlsFiles, deny_list: Path) -> TlsConfig:
    return TlsConfig(ca=files.ca, cert=files.cert, key=files.key, deny_list=deny_list)


class Lab:
    def __init__(self, state_dir: Path, port: int, domain_type: str, image_dir: Path) -> None:
        self.state_dir = state_dir
        self.port = port
        # One certificate per identity: the controller, the node's agent, and an admin for gleanctl.
        self.pki = ensure_lab_pki(state_dir / "pki", (NODE,))
        self.controller_address = f"127.0.0.1:{port}"
        self.agent_dir = state_dir / "agent"
        (state_dir / "controller.toml").write_text(controller_toml(ControllerConfig(
            listen=self.controller_address, state_dir=state_dir / "controller", vm_name_prefix="pool-",
            metrics_listen=f"127.0.0.1:{port + 3}", tls=tls_config(self.pki.controller, self.pki.deny_list))))
        # The agent's own file, written as TOML here: the agent (a subprocess) checks it strictly,
        # and the controller's side never imports the agent's package.
        (state_dir / "agent.toml").write_text(toml_text({
            "agent": {"id": NODE, "listen": f"127.0.0.1:{port + 1}", "state_dir": self.agent_dir,
                      "image_dir": image_dir},
            "libvirt": {"domain_type": domain_type}, "lifecycle": {"grace_seconds": 15},
            "metrics": {"listen": f"127.0.0.1:{port + 2}"},
            "controller": {"address": self.controller_address, "report_seconds": 1.0},
            "tls": tls_section(tls_config(self.pki.agent(NODE), self.pki.deny_list))}))
        client = self.pki.admin
        self.gleanctl_config = state_dir / "gleanctl.toml"
        self.gleanctl_config.write_text(f'[gleanctl]\ncontroller = "{self.controller_address}"\n[tls]\n'
                                        f'ca = "{client.ca}"\ncert = "{client.cert}"\nkey = "{client.key}"\n')
        self.processes: list[subprocess.Popen] = []

    def start(self, module: str, config: str) -> None:
        log_path = self.state_dir / f"{config}.log"
        say(f"starting {module.replace('nodeagent', 'gleaner-agent').replace('controller', 'gleaner-controller')}"
            f" (log: {log_path})")
        with open(log_path, "ab") as log:
            self.processes.append(subprocess.Popen([sys.executable, "-m", module, "--config",
                                                    str(self.state_dir / f"{config}.toml")],
                                                   stdout=log, stderr=subprocess.STDOUT))

    def stop(self) -> None:
        for process in reversed(self.processes):
            process.terminate()
            try:
                process.wait(15)
            except subprocess.TimeoutExpired:
                process.kill()

    def gleanctl(self, *args: str, show: bool = True) -> str:
        command = [sys.executable, "-m", "controller.gleanctl", "--config", str(self.gleanctl_config), *args]
        if show:
            print(f"\n$ gleanctl {' '.join(args)}", flush=True)
        done = subprocess.run(command, capture_output=True, text=True)
        if show:
            print((done.stdout + done.stderr).rstrip(), flush=True)
        return done.stdout


def wait_for(predicate, timeout: float, what: str, every: float = 0.5):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(every)
    raise TimeoutError(f"gave up after {timeout:.0f}s waiting for {what}")


def settled_backfill(stub, seen: dict) -> tuple[list] | None:
    """(backfill leases,) once none is starting and their number held for 5 seconds (10 when
    there are none); None while the launcher is still at work."""
    leases = stub.ListVms(controller_pb2.ListVmsRequest(), timeout=10).leases
    backfill = [l for l in leases if l.role == "backfill"]
    if any(l.state != "running" for l in backfill):
        seen.clear()
        return None
    if seen.get("count") != len(backfill):
        seen.update(count=len(backfill), since=time.monotonic())
        if backfill:
            say(f"{len(backfill)} backfill VM(s) running")
    return (backfill,) if time.monotonic() - seen["since"] >= (5 if backfill else 10) else None


def guest_ready(agent_dir: Path, vm_name: str) -> bool:
    try:
        return "GLEANER-READY" in (agent_dir / "console" / f"{vm_name}.log").read_text(errors="replace")
    except FileNotFoundError:
        return False


def run_pool(lab: Lab, stub, keep: bool) -> None:
    node = wait_for(lambda: [n for n in stub.ListNodes(controller_pb2.ListNodesRequest(), timeout=10).nodes
                             if n.state == "up"], 60, "the agent to report")[0]
    say(f"node {node.node_id} reported: {node.cpus} CPUs, {node.memory_mib} MiB")
    lab.gleanctl("nodes")
    lab.gleanctl("backfill", "set", "enabled=true", "memory_mb=128", "vcpus=1", "grace_seconds=15",
                 "retry_seconds=20")
    say("the backfill launcher fills the idle host (one VM per free vCPU the foreground leaves); it looks "
        "again every 20 s here (retry_seconds), so the demo's saved VM resumes soon after its room returns")
    seen: dict = {}
    (backfill,) = wait_for(lambda: settled_backfill(stub, seen), READY_TIMEOUT, "backfill VMs to start")
    if not backfill:
        node = stub.ListNodes(controller_pb2.ListNodesRequest(), timeout=10).nodes[0]
        raise TimeoutError(f"the launcher started no backfill VM: the host's foreground CPU demand is predicted at "
                           f"{node.predicted_foreground_cpu_cores:.2f} of {node.cpus} cores (potential productivity "
                           f"{node.potential_productivity:.2f}), so there is no idle CPU to harvest; stop what "
                           "keeps the host busy and run the demo again")
    for lease in backfill:
        wait_for(lambda: guest_ready(lab.agent_dir, lease.vm_name), READY_TIMEOUT, f"{lease.vm_name} to boot")
    say("every backfill guest has booted")
    lab.gleanctl("vms")
    allocated = sum(l.vcpus for l in stub.ListVms(controller_pb2.ListVmsRequest(), timeout=10).leases)
    vcpus = min(node.cpus - allocated + 1, node.cpus)  # one vCPU more than is free: a backfill VM must go
    say(f"an on-demand request for {vcpus} vCPU(s): more than is free, so the most recent backfill VM makes room")
    lab.gleanctl("request", "--vcpus", str(vcpus), "--memory", "128", "--owner", "new-admin")
    for lease in stub.ListVms(controller_pb2.ListVmsRequest(), timeout=10).leases:
        if lease.role == "on_demand":
            wait_for(lambda: guest_ready(lab.agent_dir, lease.vm_name), READY_TIMEOUT, f"{lease.vm_name} to boot")
            say(f"the on-demand guest {lease.vm_name} has booted")
    # its victim is saved (or shuts down) beside it: shown once it is gone, so status counts it
    wait_for(lambda: not [l for l in stub.ListVms(controller_pb2.ListVmsRequest(), timeout=10).leases
                          if l.state in ("on_notice", "preempting")], READY_TIMEOUT, "the preempted backfill VM to stop")
    saved = [l for l in stub.ListVms(controller_pb2.ListVmsRequest(), timeout=10).leases if l.state == "hibernated"]
    say("the preempted backfill VM was saved to disk (hibernated): it keeps its lease and its work" if saved
        else "the preempted backfill VM has shut down")
    lab.gleanctl("vms")
    lab.gleanctl("status")
    lab.gleanctl("events", "--limit", "12")
    if saved:
        show_resume(lab, stub, saved[0])
    if keep:
        stop = threading.Event()
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, lambda *_: stop.set())
        say(f"the pool keeps running; try: gleanctl --config {lab.gleanctl_config} status  (Ctrl-C to stop)")
        stop.wait()


def show_resume(lab: Lab, stub, saved) -> None:
    """Release the on-demand VM: the room goes back to backfill, and the saved VM resumes first."""
    for lease in stub.ListVms(controller_pb2.ListVmsRequest(), timeout=10).leases:
        if lease.role == "on_demand":
            say("releasing the on-demand VM: its room goes back to backfill, the saved VM first")
            lab.gleanctl("release", lease.lease_id)
    wait_for(lambda: [l for l in stub.ListVms(controller_pb2.ListVmsRequest(), timeout=10).leases
                      if l.lease_id == saved.lease_id and l.state == "running"], READY_TIMEOUT,
             f"{saved.vm_name} to resume")
    say(f"{saved.vm_name} resumed from its saved state, its work kept")
    lab.gleanctl("events", "--limit", "4")


def release_everything(lab: Lab, stub) -> None:
    """Every way out of the demo comes here: backfill off, and every VM it launched released."""
    say("releasing every VM and stopping")
    try:
        lab.gleanctl("backfill", "disable", show=False)
        for lease in stub.ListVms(controller_pb2.ListVmsRequest(), timeout=10).leases:
            lab.gleanctl("release", lease.lease_id)
    except grpc.RpcError as exc:
        say(f"could not release every VM ({exc.code().name}: {exc.details()}); list them with "
            f"'gleanctl --config {lab.gleanctl_config} vms' and release them by hand")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--state-dir", type=Path, default=Path("/var/lib/gleaner/pool"))
    parser.add_argument("--image-dir", type=Path, default=Path("/var/lib/gleaner/images"))
    parser.add_argument("--port", type=int, default=7450, help="controller port; the agent takes the next two")
    parser.add_argument("--domain-type", choices=("auto", "kvm", "qemu"))
    parser.add_argument("--keep", action="store_true", help="keep the pool running until Ctrl-C")
    args = parser.parse_args(argv)
    domain_type = args.domain_type or ("qemu" if running_nested() else "auto")
    if args.domain_type is None and domain_type == "qemu":
        say("this host is itself a VM: using TCG (domain type qemu), nested KVM is too slow to boot guests")
    args.state_dir.mkdir(parents=True, exist_ok=True)
    lab = Lab(args.state_dir, args.port, domain_type, args.image_dir)
    lab.start("controller", "controller")
    lab.start("nodeagent", "agent")
    try:
        with channel_to(Role.CONTROLLER, "", lab.controller_address, lab.pki.admin) as channel:
            if not wait_until_serving(channel, 30, alive=lambda: lab.processes[0].poll() is None):
                say(f"the controller did not start; see {args.state_dir / 'controller.log'}")
                return 1
            stub = controller_pb2_grpc.ControllerStub(channel)
            try:
                run_pool(lab, stub, args.keep)
            finally:
                release_everything(lab, stub)
    except TimeoutError as exc:
        say(f"{exc}; see {args.state_dir}/controller.log and agent.log")
        return 1
    finally:
        lab.stop()
    say("controller and agent stopped; the store stays in " + str(args.state_dir / "controller"))
    return 0


if __name__ == "__main__":
    sys.exit(main())

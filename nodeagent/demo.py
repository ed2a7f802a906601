"""The all-in-one demo: an agent on this host running one foreground and one volunteer VM.

    python -m nodeagent.demo [--once] [--domain-type auto|kvm|qemu] [--state-dir DIR]

It makes a lab CA, starts gleaner-agent with mutual TLS on loopback, launches a
foreground VM running the latency probe and a volunteer VM running a CPU hog, waits for
both guests to say they are ready, and lists them. Then it keeps the agent running until
Ctrl-C (or at once with --once), terminates both VMs gracefully and stops the agent.
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

from gleaner_common.demo import running_nested, say
from gleaner_common.identity import Role
from gleaner_common.pki import ensure_lab_pki
from gleaner_common.rpc import channel_to, wait_until_serving
from protos import agent_pb2, agent_pb2_grpc

from .config import AgentConfig, TlsConfig, to_toml

DEMO_VMS = (  # name, role, kernel command line
    ("demo-foreground", agent_pb2.ROLE_ON_DEMAND, "gleaner.workload=probe"),
    ("demo-volunteer", agent_pb2.ROLE_BACKFILL, "gleaner.workload=hog"),
)
ROLE_NAMES = {agent_pb2.ROLE_ON_DEMAND: "on_demand", agent_pb2.ROLE_BACKFILL: "backfill"}
# Every call has a deadline, so a stuck agent ends the demo with an error instead of a hang.
CALL_TIMEOUT = 30.0
LAUNCH_TIMEOUT = 120.0                                          # an overlay, then QEMU starting
TERMINATE_TIMEOUT = AgentConfig().grace_seconds + CALL_TIMEOUT  # a clean stop may wait out the grace


DEMO_NODE = "demo"


def write_config(state_dir: Path, port: int, domain_type: str, image_dir: Path) -> Path:
    tls = ensure_lab_pki(state_dir / "pki", (DEMO_NODE,)).agent(DEMO_NODE)
    path = state_dir / "agent.toml"
    path.write_text(to_toml(AgentConfig(agent_id=DEMO_NODE, listen=f"127.0.0.1:{port}",
                                        metrics_listen=f"127.0.0.1:{port + 1}", state_dir=state_dir / "agent",
                                        image_dir=image_dir, domain_type=domain_type,
                                        tls=TlsConfig(ca=tls.ca, cert=tls.cert, key=tls.key))))
    return path


def wait_ready(console_log: str, launched: float, timeout: float = 120) -> float:
    """Seconds from `launched` (a monotonic time) until the guest printed its ready line."""
    while time.monotonic() - launched < timeout:
        try:
            if "GLEANER-READY" in Path(console_log).read_text(errors="replace"):
                return time.monotonic() - launched
        except FileNotFoundError:
            pass
        time.sleep(0.1)
    raise TimeoutError(f"no ready line in {console_log} after {timeout}s")


def print_domains(stub: agent_pb2_grpc.NodeAgentStub) -> None:
    domains = stub.ListDomains(agent_pb2.ListDomainsRequest(), timeout=CALL_TIMEOUT).domains
    print(f"{'NAME':<18}{'ROLE':<12}{'STATE':<10}{'VCPUS':>6}{'MEM MiB':>9}{'CPU s':>8}  CONSOLE")
    for d in domains:
        state = agent_pb2.DomainState.Name(d.state).removeprefix("DOMAIN_STATE_").lower()
        print(f"{d.name:<18}{ROLE_NAMES.get(d.role, '?'):<12}{state:<10}{d.vcpus:>6}{d.memory_mib:>9}"
              f"{d.cpu_time_ns / 1e9:>8.1f}  {d.console_log}")


def run_demo(stub: agent_pb2_grpc.NodeAgentStub, once: bool) -> None:
    host = stub.DescribeHost(agent_pb2.DescribeHostRequest(), timeout=CALL_TIMEOUT)
    say(f"host {host.hostname}: {host.cpus} CPUs, {host.memory_mib} MiB, libvirt {host.libvirt_version}, "
        f"QEMU {host.qemu_version}, cgroup v{host.cgroup_version}, domain type {host.domain_type}")
    consoles = {}
    for name, role, cmdline in DEMO_VMS:
        launched = time.monotonic()
        reply = stub.LaunchDomain(agent_pb2.LaunchDomainRequest(
            name=name, role=role, vcpus=1, memory_mib=128, image="tiny", kernel_cmdline=cmdline),
            timeout=LAUNCH_TIMEOUT)
        consoles[name] = (reply.domain.console_log, launched)
        say(f"launched {name} ({ROLE_NAMES[role]}, {cmdline})" + ("" if reply.created else " - already running"))
    for name, (console, launched) in consoles.items():
        say(f"{name} ready {wait_ready(console, launched):.1f}s after its launch (console: {console})")
    print_domains(stub)
    if not once:
        stop = threading.Event()
        signal.signal(signal.SIGINT, lambda *_: stop.set())
        signal.signal(signal.SIGTERM, lambda *_: stop.set())
        say("the agent keeps running; press Ctrl-C to terminate the VMs gracefully and stop")
        stop.wait()
    for name, _role, _cmdline in DEMO_VMS:
        result = stub.TerminateDomain(agent_pb2.TerminateDomainRequest(name=name), timeout=TERMINATE_TIMEOUT)
        outcome = agent_pb2.TerminationOutcome.Name(result.outcome).removeprefix("TERMINATION_OUTCOME_").lower()
        say(f"terminated {name}: {outcome} in {result.duration_seconds:.1f}s ({result.detail})")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--state-dir", type=Path, default=Path("/var/lib/gleaner/demo"))
    parser.add_argument("--image-dir", type=Path, default=Path("/var/lib/gleaner/images"))
    parser.add_argument("--port", type=int, default=7443)
    parser.add_argument("--domain-type", choices=("auto", "kvm", "qemu"))
    parser.add_argument("--once", action="store_true", help="terminate the VMs and stop right after listing them")
    args = parser.parse_args(argv)

    domain_type = args.domain_type or ("qemu" if running_nested() else "auto")
    if args.domain_type is None and domain_type == "qemu":
        say("this host is itself a VM: using TCG (domain type qemu), nested KVM is too slow to boot guests")
    args.state_dir.mkdir(parents=True, exist_ok=True)
    config = write_config(args.state_dir, args.port, domain_type, args.image_dir)
    log_path = args.state_dir / "agent.log"
    say(f"starting gleaner-agent with mutual TLS on 127.0.0.1:{args.port} (log: {log_path})")
    with open(log_path, "ab") as log:
        agent = subprocess.Popen([sys.executable, "-m", "nodeagent", "--config", str(config)],
                                 stdout=log, stderr=subprocess.STDOUT)
    try:
        # The demo drives the agent as the controller would, with the controller's certificate.
        controller_tls = ensure_lab_pki(args.state_dir / "pki", (DEMO_NODE,)).controller
        with channel_to(Role.AGENT, DEMO_NODE, f"127.0.0.1:{args.port}", controller_tls) as channel:
            if not wait_until_serving(channel, 30, alive=lambda: agent.poll() is None):
                say(f"the agent did not start; see {log_path}")
                return 1
            run_demo(agent_pb2_grpc.NodeAgentStub(channel), args.once)
    except grpc.RpcError as exc:
        say(f"the agent refused: {exc.code().name}: {exc.details()}")
        return 1
    finally:
        agent.terminate()
        agent.wait(15)
    say("agent stopped")
    return 0


if __name__ == "__main__":
    sys.exit(main())

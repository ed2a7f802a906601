"""Helpers for tests and benchmarks: a real gleaner-agent process, its client, and cleanup.

Everything here drives the real thing: the agent binary as a subprocess, the local
libvirtd, real QEMU domains. Test domains are named with TEST_PREFIX, which carries a tag of
this test run, so cleanup finds every one of them, even after a failed test, and never touches
another run's domains (two test runs or benchmarks may share the host).
"""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import libvirt

from gleaner_common.config import TlsConfig
from gleaner_common.identity import Role
from gleaner_common.pki import LabPki, TlsFiles, ensure_lab_pki
from gleaner_common.rpc import channel_to, is_serving
from nodeagent.config import AgentConfig, to_toml
from protos import agent_pb2, agent_pb2_grpc

REPO = Path(__file__).resolve().parent.parent
ANY_TEST_PREFIX = "gtest-"
# One tag per run, inherited by subprocesses (a benchmark's helpers clean up the same domains).
RUN_TAG = os.environ.setdefault("GLEANER_TEST_RUN", uuid.uuid4().hex[:4])
TEST_PREFIX = f"{ANY_TEST_PREFIX}{RUN_TAG}-"
TEST_ROOT = Path("/var/lib/gleaner-test")
SYSTEM_IMAGE_DIR = Path(os.environ.get("GLEANER_IMAGE_DIR", "/var/lib/gleaner/images"))
LIBVIRT_URI = "qemu:///system"


def modules_loaded_by(modules: list[str], watched: tuple[str, ...]) -> list[str]:
    """Which of `watched` (top-level packages, or dotted modules) a fresh interpreter has loaded
    after importing `modules`: this test process has long since imported them all."""
    code = (f"import sys, {', '.join(modules)}; "
            f"print(' '.join(w for w in {watched!r} if any(m == w or m.startswith(w + '.') for m in sys.modules)))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=60,
                          check=True)
    return done.stdout.split()


def unique_name(label: str = "vm") -> str:
    return f"{TEST_PREFIX}{label}-{uuid.uuid4().hex[:8]}"


PORTS = (20000, 32000)   # below Linux's ephemeral range (32768-60999 by default)


def free_port() -> int:
    """A free TCP port on 127.0.0.1 for a test daemon to listen on later. Not one the kernel
    would hand out itself: a port from the ephemeral range can be taken as the source port of
    any connection (an agent's to its controller) between this pick and the daemon's bind,
    which failed a replay run's agent with "another process holds it"."""
    import random
    import socket
    for _ in range(200):
        port = random.randrange(*PORTS)
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port in {PORTS[0]}-{PORTS[1] - 1} after 200 tries")


def wait_for(predicate, timeout: float, what: str, interval: float = 0.05):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise TimeoutError(f"timed out after {timeout}s waiting for {what}")


def console_text(path: str | Path) -> str:
    try:
        return Path(path).read_text(errors="replace")
    except FileNotFoundError:
        return ""


def wait_for_console(path: str | Path, marker: str, timeout: float = 60) -> float:
    """Seconds until `marker` appears in the console log."""
    started = time.monotonic()
    wait_for(lambda: marker in console_text(path), timeout, f"{marker!r} in {path}")
    return time.monotonic() - started


@dataclass
class LabEnv:
    """A private state directory, image directory and lab PKI for one test session."""

    root: Path
    image_dir: Path
    pki: LabPki

    def tls(self, files: TlsFiles) -> TlsConfig:
        """A server's [tls] settings: its certificate, the lab CA and the lab's deny list."""
        return TlsConfig(ca=files.ca, cert=files.cert, key=files.key, deny_list=self.pki.deny_list)

    @classmethod
    def create(cls) -> "LabEnv":
        TEST_ROOT.mkdir(parents=True, exist_ok=True)
        TEST_ROOT.chmod(0o755)  # QEMU runs as libvirt-qemu and must reach overlays below
        root = TEST_ROOT / uuid.uuid4().hex[:10]
        root.mkdir()
        root.chmod(0o755)
        image_dir = root / "images"
        image_dir.mkdir()
        image_dir.chmod(0o755)
        link_image(SYSTEM_IMAGE_DIR / "tiny", image_dir / "tiny")
        return cls(root=root, image_dir=image_dir, pki=ensure_lab_pki(root / "pki"))

    @classmethod
    def in_dir(cls, root: Path, nodes: tuple[str, ...] = ()) -> "LabEnv":
        """An environment for a controller without VMs in `root` (a test's temporary directory):
        an empty image directory and a lab PKI with an agent certificate per node."""
        (root / "images").mkdir()
        return cls(root=root, image_dir=root / "images", pki=ensure_lab_pki(root / "pki", nodes=nodes))

    def remove(self) -> None:
        if os.environ.get("GLEANER_TEST_KEEP"):  # keep the logs and state of a run to read them after
            print(f"kept {self.root} (GLEANER_TEST_KEEP)", file=sys.stderr)
            return
        shutil.rmtree(self.root, ignore_errors=True)


def link_image(source: Path, target: Path) -> None:
    """Hard-link (or copy) an image bundle: a symlink would point outside the image directory."""
    target.mkdir(mode=0o755)
    for item in source.iterdir():
        try:
            os.link(item, target / item.name)
        except OSError:
            shutil.copy2(item, target / item.name)


class ServiceProcess:
    """Start, health-wait and stop for a Gleaner server subprocess (agent or controller).

    Subclasses give `module`, `address`, `config_path`, `log_path`, `env`, `process`,
    `identity` (the (role, name) its certificate names) and write_config()."""

    module = ""

    def start(self, env: dict[str, str] | None = None):
        """Start the server (with `env` added to its environment) and wait until it serves."""
        self.write_config()
        log = open(self.log_path, "ab")
        self.process = subprocess.Popen([sys.executable, "-m", self.module, "--config", str(self.config_path)],
                                        stdout=log, stderr=subprocess.STDOUT, cwd=REPO,
                                        env={**os.environ, **env} if env else None)
        log.close()
        try:
            wait_for(self._serving, 20, f"{self.module} on {self.address} to serve")
        except TimeoutError:
            self.stop()
            raise RuntimeError(f"{self.module} did not start; its log:\n{self.log_text()}") from None
        return self

    def _serving(self) -> bool:
        if self.process is not None and self.process.poll() is not None:
            raise RuntimeError(f"{self.module} exited with {self.process.returncode}:\n{self.log_text()}")
        with self.channel(self.env.pki.viewer) as channel:
            return is_serving(channel)

    def channel(self, tls: TlsFiles) -> grpc.Channel:
        """A channel with `tls` that reaches only this server's identity."""
        return channel_to(*self.identity, self.address, tls)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None

    def log_text(self) -> str:
        return console_text(self.log_path)


@dataclass
class AgentProcess(ServiceProcess):
    """A gleaner-agent subprocess with mutual TLS, and a client stub for it."""

    module = "nodeagent"

    env: LabEnv
    name: str = "agent"
    grace_seconds: int = 10
    reap_interval: float = 1.0
    port: int = field(default_factory=free_port)
    process: subprocess.Popen | None = None
    settings: dict = field(default_factory=dict)  # further AgentConfig fields
    metrics_port: int = field(default_factory=free_port)

    @property
    def state_dir(self) -> Path:
        return self.env.root / self.name

    @property
    def config_path(self) -> Path:
        return self.state_dir / "agent.toml"

    @property
    def log_path(self) -> Path:
        return self.state_dir / "agent.log"

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def identity(self) -> tuple[Role, str]:
        return Role.AGENT, self.name

    def write_config(self) -> None:
        self.state_dir.mkdir(exist_ok=True)
        values = dict(agent_id=self.name, listen=self.address, state_dir=self.state_dir,
                      image_dir=self.env.image_dir, log_level="debug", libvirt_uri=LIBVIRT_URI, domain_type="qemu",
                      grace_seconds=self.grace_seconds, reap_interval_seconds=self.reap_interval,
                      reconcile_interval_seconds=1.0, metrics_listen=f"127.0.0.1:{self.metrics_port}",
                      tls=self.env.tls(self.env.pki.agent(self.name)))
        self.config_path.write_text(to_toml(AgentConfig(**{**values, **self.settings})))

    def stub(self, tls: TlsFiles | None = None) -> agent_pb2_grpc.NodeAgentStub:
        """A stub with the controller's identity (the only one that may change domains) unless `tls`."""
        return agent_pb2_grpc.NodeAgentStub(self.channel(tls or self.env.pki.controller))


def launch_request(name: str, role: int = agent_pb2.ROLE_BACKFILL, vcpus: int = 1, memory_mib: int = 128,
                   image: str = "tiny", kernel_cmdline: str = "", lease_id: str = "",
                   cpuset: str = "", retire_after_seconds: int = 0,
                   work_channel: bool = False) -> agent_pb2.LaunchDomainRequest:
    return agent_pb2.LaunchDomainRequest(name=name, role=role, vcpus=vcpus, memory_mib=memory_mib, image=image,
                                         kernel_cmdline=kernel_cmdline, lease_id=lease_id, cpuset=cpuset,
                                         retire_after_seconds=retire_after_seconds, work_channel=work_channel)


def remove_test_domains(uri: str = LIBVIRT_URI) -> list[str]:
    """Destroy and undefine every domain of this test run (its name starts with TEST_PREFIX)."""
    conn = libvirt.open(uri)
    removed = []
    try:
        for dom in conn.listAllDomains(0):
            if not dom.name().startswith(TEST_PREFIX):
                continue
            try:
                if dom.isActive():
                    dom.destroy()
                if dom.isPersistent():
                    dom.undefine()
                removed.append(dom.name())
            except libvirt.libvirtError:
                pass
    finally:
        conn.close()
    return removed


def domain_names(uri: str = LIBVIRT_URI) -> set[str]:
    conn = libvirt.open(uri)
    try:
        return {d.name() for d in conn.listAllDomains(0)}
    finally:
        conn.close()


def restart_libvirtd() -> None:
    """Stop libvirtd and start it again the way the set-up does; running guests survive."""
    subprocess.run(["pkill", "-x", "libvirtd"], check=False)
    wait_for(lambda: subprocess.run(["pgrep", "-x", "libvirtd"], capture_output=True).returncode != 0,
             15, "libvirtd to exit")
    subprocess.run(["bash", str(REPO / "scripts/libvirt-services.sh")], check=True)


def domain_cgroup_dir(name: str, controller: str = "cpu") -> Path:
    """The real cgroup (v1) libvirt made for a domain, found independently of the agent's code."""
    matches = list(Path(f"/sys/fs/cgroup/{controller}/machine").glob(f"qemu-*-{name}.libvirt-qemu"))
    assert len(matches) == 1, f"expected one cgroup for {name}, found {matches}"
    return matches[0]


def read_cgroup_int(group: Path, knob: str) -> int:
    return int((group / knob).read_text().split()[0])


def exit_cleanly_on_sigterm() -> None:
    """Turn SIGTERM (timeout(1), Ctrl-C in CI) into SystemExit, so `finally` removes domains."""
    signal.signal(signal.SIGTERM, lambda _sig, _frame: sys.exit(143))


def odd_certificate(lab: LabPki, out: Path, name: str, sans: list, valid_days: tuple[float, float] = (-1, 1)
                    ) -> TlsFiles:
    """A certificate from the lab CA that `gleanctl pki` would never issue (for attacks in tests):
    any subject alternative names, valid from/until these days around now."""
    import datetime

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    ca_key = serialization.load_pem_private_key((lab.directory / "ca.key").read_bytes(), password=None)
    ca_cert = x509.load_pem_x509_certificate((lab.directory / "ca.pem").read_bytes())
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(x509.Name([])).issuer_name(ca_cert.subject)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now + datetime.timedelta(days=valid_days[0]))
            .not_valid_after(now + datetime.timedelta(days=valid_days[1]))
            .add_extension(x509.SubjectAlternativeName(sans), critical=False)
            .sign(ca_key, hashes.SHA256()))
    files = TlsFiles(lab.directory / "ca.pem", out / f"{name}.pem", out / f"{name}.key")
    files.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    files.key.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                            serialization.NoEncryption()))
    return files

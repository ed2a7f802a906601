"""The Vagrant lab (vagrant/): its Vagrantfile validates with the default and with changed
settings, bad settings stop Vagrant with messages naming the key, and its teardown leaves
nothing of the lab on the host. No lab VM boots here (python -m tests.bench.lab does that).

Needs Vagrant with vagrant-libvirt and Ruby (bash scripts/lab-host.sh); the teardown test also
needs libvirtd. They fail, never skip, when those are missing.
"""
from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import uuid
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
VAGRANT_DIR = REPO / "vagrant"
VIRSH = ["virsh", "-q", "-c", "qemu:///system"]


def need(tool: str) -> None:
    if shutil.which(tool) is None:
        pytest.fail(f"{tool} is not installed; run 'bash scripts/lab-host.sh'", pytrace=False)


@pytest.fixture
def isolated(tmp_path, monkeypatch):
    """Settings, state, payload and Vagrant's machine records of a lab of the test's own, so a
    real lab on this host (vagrant/.vagrant, /var/lib/gleaner/lab) is never touched."""
    monkeypatch.setenv("GLEANER_LAB_STATE", str(tmp_path / "state"))
    monkeypatch.setenv("GLEANER_LAB_PAYLOAD", str(tmp_path / "payload"))
    monkeypatch.setenv("VAGRANT_DOTFILE_PATH", str(tmp_path / "dotvagrant"))
    monkeypatch.delenv("GLEANER_LAB_SETTINGS", raising=False)
    return tmp_path


def settings_file(tmp_path: Path, text: str) -> Path:
    path = tmp_path / f"settings-{uuid.uuid4().hex[:6]}.yml"
    path.write_text(text)
    return path


def validate(settings: Path | None = None) -> subprocess.CompletedProcess:
    need("vagrant")
    env = dict(os.environ)
    if settings is not None:
        env["GLEANER_LAB_SETTINGS"] = str(settings)
    return subprocess.run(["vagrant", "validate", "--ignore-provider"], cwd=VAGRANT_DIR, env=env, text=True,
                          capture_output=True, timeout=120, stdin=subprocess.DEVNULL)


def resolved(settings: Path | None = None) -> subprocess.CompletedProcess:
    need("ruby")
    args = ["ruby", str(VAGRANT_DIR / "lib/lab_settings.rb"), "--json"] + ([str(settings)] if settings else [])
    return subprocess.run(args, text=True, capture_output=True, timeout=60)


def test_the_vagrantfile_validates_with_the_default_settings(isolated):
    done = validate()
    assert done.returncode == 0, done.stdout + done.stderr
    assert "validated successfully" in done.stdout
    for machine in ("controller", "node1", "node2"):
        assert f"==> {machine}:" in done.stdout
    lab = json.loads(resolved().stdout)
    assert [m["name"] for m in lab["machines"]] == ["controller", "node1", "node2"]
    # the last agent joins by README.md's "Adding a node" steps (labctl.py add-node), not by provisioning
    assert [m["joins"] for m in lab["machines"]] == ["provisioning", "provisioning", "readme"]
    assert lab["management_network"]["address"] != "192.168.121.0/24"
    assert lab["storage_pool"]["name"] != "default"
    assert lab["driver"] in ("kvm", "qemu")


def test_the_vagrantfile_validates_with_changed_settings(isolated):
    changed = settings_file(isolated, """\
agents: 4
name_prefix: labx-
controller: {cpus: 2, memory_mib: 768}
agent: {cpus: 1, memory_mib: 1536, domain_type: qemu}
libvirt_driver: kvm
storage_pool: {name: labx, path: /var/lib/labx/pool}
management_network: {name: labx-mgmt, address: 192.168.130.0/24}
lab_network: {name: labx-net, subnet: 10.99.0.0/24}
""")
    done = validate(changed)
    assert done.returncode == 0, done.stdout + done.stderr
    for machine in ("controller", "node1", "node2", "node3", "node4"):
        assert f"==> {machine}:" in done.stdout
    lab = json.loads(resolved(changed).stdout)
    assert [(m["domain"], m["ip"], m["cpus"], m["memory_mib"]) for m in lab["machines"]] == [
        ("labx-controller", "10.99.0.10", 2, 768), ("labx-node1", "10.99.0.11", 1, 1536),
        ("labx-node2", "10.99.0.12", 1, 1536), ("labx-node3", "10.99.0.13", 1, 1536),
        ("labx-node4", "10.99.0.14", 1, 1536)]
    assert lab["driver"] == "kvm" and lab["controller_address"] == "10.99.0.10:7450"
    assert lab["box"] == "gleaner-lab"  # what the change leaves alone keeps its default
    assert [m["joins"] for m in lab["machines"]][-2:] == ["provisioning", "readme"]


@pytest.mark.parametrize("text, message", [
    ("agents: 0\n", "agents must be a whole number within 1..40, not 0"),
    ("agents: many\n", 'agents must be a whole number within 1..40, not "many"'),
    ("agent_count: 3\n", 'unknown key "agent_count"'),
    ("agent: {cpus: 2, memory_mib: 100}\n", "agent.memory_mib must be a whole number within 512..262144"),
    ("agent: {cpu: 2}\n", "unknown key agent.cpu"),
    ("libvirt_driver: xen\n", "libvirt_driver must be one of auto, kvm, qemu"),
    ("management_network: {name: m, address: 192.168.121.0/24}\n", "vagrant-libvirt's default 192.168.121.0/24"),
    ("management_network: {name: m, address: 10.77.0.0/16}\n", "overlap"),
    ("lab_network: {name: n, subnet: 10.77.0.5/24}\n", "has host bits set"),
    ("lab_network: {name: n, subnet: banana}\n", "lab_network.subnet must be an IPv4 network"),
    ("storage_pool: {name: default, path: /var/lib/libvirt/images}\n", "must not be libvirt's 'default' pool"),
    ("name_prefix: Lab\n", "name_prefix must be lower-case"),
    ("readme_node: maybe\n", 'readme_node must be true or false, not "maybe"'),
    ("agents: [\n", "not valid YAML"),
])
def test_bad_settings_stop_with_a_message_naming_the_key(isolated, text, message):
    bad = settings_file(isolated, text)
    done = resolved(bad)
    assert done.returncode == 1
    assert message in done.stderr, done.stderr
    assert str(bad) in done.stderr  # which file


def test_vagrant_itself_refuses_bad_settings_before_doing_anything(isolated):
    bad = settings_file(isolated, "agents: 0\nlibvirt_driver: xen\n")
    done = validate(bad)
    assert done.returncode != 0
    text = done.stdout + done.stderr
    assert "gleaner lab: invalid lab settings" in text
    assert "agents must be a whole number" in text and "libvirt_driver must be one of" in text


def test_a_missing_settings_file_is_named(isolated):
    done = resolved(isolated / "nope.yml")
    assert done.returncode == 1 and "cannot read lab settings" in done.stderr and "nope.yml" in done.stderr


def load_labctl():
    spec = importlib.util.spec_from_file_location("labctl_under_test", VAGRANT_DIR / "labctl.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def virsh(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*VIRSH, *args], text=True, capture_output=True, timeout=60)


@pytest.mark.libvirt
def test_destroy_removes_everything_the_lab_made_and_nothing_else(isolated, monkeypatch, libvirt_host):
    """Without booting anything: a pool with volumes (the box image and a VM disk), both networks
    and stopped domains named like the lab's, as vagrant-libvirt leaves them after a `vagrant
    destroy` that lost track; labctl's destroy removes them all, and leaves a look-alike alone."""
    need("vagrant")
    tag = uuid.uuid4().hex[:6]
    prefix, pool_path = f"glt{tag}-", isolated / "pool"
    settings = settings_file(isolated, f"""\
name_prefix: {prefix}
agents: 1
storage_pool: {{name: glt{tag}-pool, path: {pool_path}}}
management_network: {{name: glt{tag}-mgmt, address: 192.168.131.0/24}}
lab_network: {{name: glt{tag}-net, subnet: 10.98.0.0/24}}
""")
    monkeypatch.setenv("GLEANER_LAB_SETTINGS", str(settings))
    labctl = load_labctl()
    lab = labctl.settings()
    assert labctl.leftovers(lab) == []
    bystander = f"glu{tag}-bystander"  # not the lab's prefix: must survive
    made = []
    try:
        pool_path.mkdir()
        for args in (("pool-define-as", lab["storage_pool"]["name"], "dir", "--target", str(pool_path)),
                     ("pool-start", lab["storage_pool"]["name"]),
                     ("vol-create-as", lab["storage_pool"]["name"], "box.img", "8M", "--format", "qcow2"),
                     ("vol-create-as", lab["storage_pool"]["name"], f"{prefix}node1.img", "8M", "--format", "qcow2")):
            done = virsh(*args)
            assert done.returncode == 0, done.stderr
        for name, subnet in ((lab["management_network"]["name"], "192.168.131"),
                             (lab["lab_network"]["name"], "10.98.0")):
            xml = isolated / f"{name}.xml"
            xml.write_text(f"<network><name>{name}</name><bridge name='glt{tag}{name[-3:]}'/>"
                           f"<ip address='{subnet}.1' netmask='255.255.255.0'/></network>")
            assert virsh("net-define", str(xml)).returncode == 0
            made.append(("net", name))
        for name in (f"{prefix}node1", bystander):
            xml = isolated / f"{name}.xml"
            xml.write_text(f"<domain type='qemu'><name>{name}</name><memory unit='MiB'>64</memory><vcpu>1</vcpu>"
                           "<os><type arch='x86_64'>hvm</type></os></domain>")
            assert virsh("define", str(xml)).returncode == 0, name
            made.append(("domain", name))
        for path in (labctl.state_dir() / "console", labctl.state_dir() / "pki", labctl.payload_dir() / "common"):
            path.mkdir(parents=True, exist_ok=True)
            (path / "file").write_text("x")
        found = labctl.leftovers(lab)
        assert f"domain {prefix}node1" in found and f"pool glt{tag}-pool" in found
        assert f"network glt{tag}-mgmt" in found and f"network glt{tag}-net" in found
        assert f"volume {prefix}node1.img" in found and "volume box.img" in found
        assert not any(bystander in item for item in found)

        assert labctl.destroy(lab) == []
        assert labctl.leftovers(lab) == []
        assert lab["storage_pool"]["name"] not in labctl.names("pool")
        assert not pool_path.exists()
        assert bystander in labctl.names("domain")
    finally:
        for kind, name in made:
            if kind == "net":
                virsh("net-undefine", name)
            else:
                virsh("undefine", name)
        virsh("pool-destroy", f"glt{tag}-pool")
        virsh("pool-undefine", f"glt{tag}-pool")


def unit_settings(path: Path) -> dict[str, list[str]]:
    settings: dict[str, list[str]] = {}
    for line in path.read_text().splitlines():
        if "=" in line and not line.startswith(("#", "[")):
            key, value = line.split("=", 1)
            settings.setdefault(key.strip(), []).append(value.strip())
    return settings


@pytest.mark.parametrize("role", ["controller", "agent"])
def test_the_systemd_units_restart_keep_state_and_are_hardened(role):
    """The units real hosts and the lab install (scripts/setup-role.sh)."""
    unit = unit_settings(REPO / "deploy" / "systemd" / f"gleaner-{role}.service")
    assert unit["ExecStart"] == [f"/opt/gleaner/bin/gleaner-{role} --config /etc/gleaner/{role}.toml"]
    assert unit["Restart"] == ["on-failure"]
    assert unit["StateDirectory"] == [f"gleaner/{role}"]
    assert unit["StateDirectoryMode"] == ["0711" if role == "agent" else "0700"]  # QEMU traverses the agent's
    assert unit["WantedBy"] == ["multi-user.target"]
    assert unit["Type"] == ["notify"] and unit["WatchdogSec"] == ["30"]   # gleaner_common/watchdog.py
    for key in ("NoNewPrivileges", "ProtectHome", "PrivateTmp", "ProtectKernelModules", "RestrictSUIDSGID",
                "MemoryDenyWriteExecute", "LockPersonality", "RestrictNamespaces"):
        assert unit[key] == ["yes"], key
    assert unit["SystemCallFilter"][0] == "@system-service" and unit["ProtectProc"] == ["invisible"]
    if role == "controller":
        assert unit["User"] == ["gleaner-controller"]   # setup-role.sh makes it
        assert unit["CapabilityBoundingSet"] == [""] and unit["ProtectSystem"] == ["strict"]
        assert unit["PrivateDevices"] == ["yes"]
    else:
        # the agent drives libvirtd's socket, cgroupfs and tc: nothing may take those away
        assert "User" not in unit and unit["ProtectSystem"] == ["full"]
        assert "CAP_NET_ADMIN" in unit["CapabilityBoundingSet"][0].split()
        assert "CAP_SYS_PTRACE" in unit["CapabilityBoundingSet"][0].split()   # QEMU's /proc under ProtectProc
        for key in ("PrivateDevices", "ProtectControlGroups", "ProtectKernelTunables", "PrivateNetwork",
                    "ProcSubset", "PrivateUsers"):
            assert key not in unit, key
        assert "AF_NETLINK" in unit["RestrictAddressFamilies"][0]
        assert "libvirtd.service" in unit["After"][0]


def test_the_agent_config_the_lab_writes_is_one_the_agent_accepts(isolated, monkeypatch):
    """prepare.py writes each node's configuration with the daemons' own classes; read it back."""
    spec = importlib.util.spec_from_file_location("prepare_under_test", VAGRANT_DIR / "prepare.py")
    prepare = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(prepare)
    from controller.config import load_config as load_controller
    from nodeagent.config import load_config as load_agent
    lab = prepare.settings()
    ca = isolated / "ca"
    ca.mkdir()
    for stem in ("ca", "revoked", "controller-main", "agent-node1"):
        for suffix in (".pem", ".key", ".txt"):
            (ca / f"{stem}{suffix}").write_text("x")
    for machine in lab["machines"][:2]:
        prepare.node_payload(lab, machine, ca)
    node = prepare.PAYLOAD / "nodes"
    agent = load_agent(node / "node1" / "agent.toml")
    assert agent.agent_id == "node1" and agent.advertise_address == "10.77.0.11:7443"
    assert agent.controller_address == "10.77.0.10:7450" and agent.domain_type == "auto"
    assert str(agent.tls.cert) == "/etc/gleaner/pki/agent-node1.pem"
    controller = load_controller(node / "controller" / "controller.toml")
    assert controller.listen == "0.0.0.0:7450" and controller.down_after_seconds > controller.suspect_after_seconds
    assert (node / "node1" / "pki" / "agent-node1.key").exists()
    assert not (node / "node1" / "pki" / "controller-main.key").exists()  # each node holds its own key only
    # Each VM's name and lab address come from its payload, not from Vagrant's slow steps
    assert (node / "node1" / "hostname").read_text() == "node1\n"
    network = (node / "node1" / "lab.network").read_text()
    assert "Name=eth1" in network and "Address=10.77.0.11/24" in network
    assert "Address=10.77.0.10/24" in (node / "controller" / "lab.network").read_text()
    vagrantfile = (VAGRANT_DIR / "Vagrantfile").read_text()
    assert "auto_config: false" in vagrantfile and "vm.hostname" not in vagrantfile


def test_the_node_added_by_the_readme_gets_no_certificate_or_config_from_the_lab(isolated):
    """Its key is made on it and its certificate signed by README's steps (labctl.py add-node):
    the lab CA issues none for it, and its payload holds only its name, lab address and the
    pool's names."""
    spec = importlib.util.spec_from_file_location("prepare_under_test", VAGRANT_DIR / "prepare.py")
    prepare = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(prepare)
    lab = prepare.settings()
    node2 = lab["machines"][-1]
    assert node2["joins"] == "readme"
    out = prepare.PAYLOAD / "nodes" / "node2"
    (out / "pki").mkdir(parents=True)    # from an earlier lab with readme_node false
    (out / "agent.toml").write_text("x")
    prepare.node_payload(lab, node2, isolated / "no-ca-needed")
    assert sorted(p.name for p in out.iterdir()) == ["hostname", "hosts", "lab.network"]
    vagrantfile = (VAGRANT_DIR / "Vagrantfile").read_text()
    assert 'next if m["joins"] == "readme"' in vagrantfile   # booted, not provisioned
    ca = prepare.ensure_pki(lab)
    assert (ca / "agent-node1.pem").exists() and (ca / "controller-main.pem").exists()
    assert not list(ca.glob("agent-node2.*"))

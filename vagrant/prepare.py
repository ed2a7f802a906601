"""Prepare the host for the Vagrant lab; run by the Vagrantfile's trigger before `vagrant up`.

    .venv/bin/python vagrant/prepare.py        (as root, from anywhere)
    .venv/bin/python vagrant/prepare.py --wheelhouse-only     build the wheelhouse, print its path

Idempotent and quick once done. It makes, for the settings in force (vagrant/settings.yml and
GLEANER_LAB_SETTINGS):

* the lab's own libvirt storage pool (settings' storage_pool), where vagrant-libvirt puts the box
  image and the VMs' disks, and the directory the VMs' serial consoles are written to;
* a wheelhouse of the project and its dependencies, built here with `pip wheel` (lab VMs cannot
  verify PyPI's certificate; they install with `pip install --no-index --find-links`);
* the lab CA and, with `gleanctl pki issue`, a controller certificate, one agent certificate
  per node (NODE.agent.gleaner, plus its lab address and name) but the one README's "Adding a
  node" steps add (settings' readme_node: its key is made on it, labctl.py add-node) and an admin certificate for
  gleanctl on this host; the CA key never leaves this host;
* each node's configuration (/etc/gleaner/controller.toml or agent.toml in the VM), written with
  the project's own configuration classes, so a lab config is always one the daemons accept;
* the payload provisioning reads (vagrant/.lab/payload): the wheelhouse, the set-up scripts,
  the systemd units, the tiny guest image (agents), and per node its certificate and config;
  per VM it goes into a small ext4 disk (PREFIX-NAME-payload.img) in the lab's pool, which the
  VM gets as its second disk;
* GLEANER_LAB_STATE/gleanctl.toml, with which gleanctl on this host reaches the lab's controller.
"""
from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import re
import sys
import tempfile
import tomllib
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from controller.config import ControllerConfig  # noqa: E402
from controller.config import to_toml as controller_toml  # noqa: E402
from gleaner_common.config import TlsConfig  # noqa: E402
from nodeagent.config import AgentConfig  # noqa: E402
from nodeagent.config import to_toml as agent_toml  # noqa: E402

STATE = Path(os.environ.get("GLEANER_LAB_STATE", "/var/lib/gleaner/lab"))
PAYLOAD = Path(os.environ.get("GLEANER_LAB_PAYLOAD", REPO / "vagrant" / ".lab" / "payload"))
WHEEL_CACHE = Path(os.environ.get("GLEANER_LAB_WHEELS", "/var/cache/gleaner/lab-wheels"))
IMAGE_DIR = Path(os.environ.get("GLEANER_IMAGE_DIR", "/var/lib/gleaner/images"))
PYTHON = Path(sys.executable)
VIRSH = ["virsh", "-q", "-c", "qemu:///system"]
# In the VMs (scripts/setup-role.sh puts them there)
VM_PKI = Path("/etc/gleaner/pki")
# The lab controller's deadlines (see node_payload); the defaults (30, 6, 20) suit real hardware.
LAB_AGENT_TIMEOUT_S = 120.0
LAB_SUSPECT_AFTER_S = 15.0
LAB_DOWN_AFTER_S = 45.0
# The lab's controller records its inputs and outcomes ([record]): the smoke run replays them
# through the simulator (tests.bench.lab, controller/sim/replay.py), the simulator against a
# pool of real QEMU guests. In the state directory systemd makes for the unit.
LAB_RECORD_PATH = ControllerConfig().state_dir / "record.jsonl"   # tests/bench/lab.py reads it there
# systemd-networkd, in the VM: the lab network is its second NIC (eth1: the box boots with
# net.ifnames=0, and vagrant-libvirt attaches the management network first).
LAB_NETWORK_UNIT = """\
# The Gleaner lab's private network (vagrant/prepare.py)
[Match]
Name=eth1

[Network]
Address={address}
LinkLocalAddressing=no
"""
LOCK = "requirements.lock"
HASHED = "requirements.txt"   # in the wheelhouse: its wheels' hashes
PROJECT_SOURCES = ("pyproject.toml", "README.md", "gleaner_common", "nodeagent", "controller", "protos")
SCRIPTS = ("setup-role.sh", "setup-lib.sh", "libvirt-services.sh")


def say(text: str) -> None:
    print(f"[lab-prepare] {text}", flush=True)


def run(cmd: list[str], **kwargs) -> subprocess.CompletedProcess:
    done = subprocess.run(cmd, text=True, capture_output=True, **kwargs)
    if done.returncode != 0:
        raise SystemExit(f"[lab-prepare] failed: {' '.join(map(str, cmd))}\n{(done.stdout + done.stderr).strip()}")
    return done


def settings() -> dict:
    """The resolved settings, from the same loader the Vagrantfile uses."""
    done = subprocess.run(["ruby", str(REPO / "vagrant/lib/lab_settings.rb"), "--json"], text=True,
                          capture_output=True)
    if done.returncode != 0:
        raise SystemExit(done.stderr.strip())
    return json.loads(done.stdout)


def ensure_pool(lab: dict) -> None:
    name, path = lab["storage_pool"]["name"], Path(lab["storage_pool"]["path"])
    if subprocess.run([*VIRSH, "pool-info", name], capture_output=True).returncode != 0:
        say(f"storage pool {name} at {path}")
        path.mkdir(parents=True, exist_ok=True)
        run([*VIRSH, "pool-define-as", name, "dir", "--target", str(path)])
    info = run([*VIRSH, "pool-info", name]).stdout
    if "running" not in info:
        run([*VIRSH, "pool-build", name])
        run([*VIRSH, "pool-start", name])
    (STATE / "console").mkdir(parents=True, exist_ok=True)


def digest(paths: list[Path]) -> str:
    h = hashlib.sha256()
    for root in paths:
        files = [root] if root.is_file() else sorted(p for p in root.rglob("*") if p.is_file()
                                                      and "__pycache__" not in p.parts)
        for f in files:
            h.update(str(f.relative_to(REPO)).encode())
            h.update(f.read_bytes())
    return h.hexdigest()[:16]


def wheelhouse() -> Path:
    """The project's wheel and every runtime dependency's, cached: dependencies by
    requirements.lock (downloaded with pip --require-hashes: each file checked against the lock),
    the project's own wheel by its sources. Built from a copy of the sources (no build/ in the
    tree). Its requirements.txt pins every wheel there by name, version and sha256, for
    setup-role.sh's `pip install --no-index --require-hashes`."""
    deps_key = digest([REPO / "pyproject.toml", REPO / LOCK])
    src_key = digest([REPO / p for p in PROJECT_SOURCES])
    house = WHEEL_CACHE / deps_key
    stamp = house / ".project"
    if house.is_dir() and stamp.exists() and stamp.read_text() == src_key and (house / HASHED).exists():
        return house
    house.mkdir(parents=True, exist_ok=True)
    for old in house.glob("gleaner-*.whl"):
        old.unlink()
    if not (house / ".deps").exists():
        locked_wheels(house)
    with tempfile.TemporaryDirectory(prefix="lab-src-") as tmp:
        for item in PROJECT_SOURCES:
            source = REPO / item
            if source.is_dir():
                shutil.copytree(source, Path(tmp) / item, ignore=shutil.ignore_patterns("__pycache__"))
            else:
                shutil.copy2(source, Path(tmp) / item)
        say(f"wheelhouse: the project's wheel into {house}")
        run([str(PYTHON), "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "--wheel-dir", str(house),
             tmp])
    write_hashes(house)
    stamp.write_text(src_key)
    return house


def locked_wheels(house: Path) -> None:
    """Every locked package as a wheel (pip --require-hashes; libvirt-python's sdist built here
    with the venv's pinned setuptools), then only those the project needs at run time kept."""
    with tempfile.TemporaryDirectory(prefix="lab-wheels-") as tmp:
        say(f"wheelhouse: pip wheel --require-hashes -r {LOCK} into {house}")
        run([str(PYTHON), "-m", "pip", "wheel", "-q", "--require-hashes", "--no-deps", "--no-build-isolation",
             "--wheel-dir", tmp, "-r", str(REPO / LOCK)])
        wanted = runtime_closure(REPO / "pyproject.toml", {wheel_name(w): w for w in Path(tmp).glob("*.whl")})
        for wheel in Path(tmp).glob("*.whl"):
            if wheel_name(wheel) in wanted:
                shutil.move(str(wheel), house / wheel.name)
    (house / ".deps").write_text("\n".join(sorted(wanted)) + "\n")


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def wheel_name(wheel: Path) -> str:
    return canonical(wheel.name.split("-")[0])


def runtime_closure(pyproject: Path, wheels: dict[str, Path]) -> set[str]:
    """The packages the project needs at run time: its [project] dependencies and theirs, read
    from the wheels' metadata (markers evaluated for this Python, no extras): not the test tools."""
    from packaging.requirements import Requirement
    todo = [Requirement(r) for r in tomllib.loads(pyproject.read_text())["project"]["dependencies"]]
    seen: set[str] = set()
    while todo:
        req = todo.pop()
        name = canonical(req.name)
        if name in seen or (req.marker is not None and not req.marker.evaluate({"extra": ""})):
            continue
        if name not in wheels:
            raise SystemExit(f"[lab-prepare] {LOCK} has no {name}, which the project needs at run time; "
                             "regenerate it (docs/development.md)")
        seen.add(name)
        with zipfile.ZipFile(wheels[name]) as zf:
            meta = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
            text = zf.read(meta).decode()
        todo += [Requirement(line.split(":", 1)[1].strip()) for line in text.splitlines()
                 if line.startswith("Requires-Dist:")]
    return seen


def write_hashes(house: Path) -> None:
    lines = []
    for wheel in sorted(house.glob("*.whl")):
        name, version = wheel.name.split("-")[:2]
        lines.append(f"{name}=={version} --hash=sha256:{hashlib.sha256(wheel.read_bytes()).hexdigest()}")
    (house / HASHED).write_text("# Every wheel here, hash-pinned (vagrant/prepare.py)\n" + "\n".join(lines) + "\n")


def gleanctl(*args: str) -> None:
    run([str(PYTHON), "-m", "controller.gleanctl", "pki", *args], cwd=REPO)


def ensure_pki(lab: dict) -> Path:
    """The lab CA and one certificate per identity, issued with `gleanctl pki`; kept between runs."""
    ca = STATE / "pki"
    if not (ca / "ca.pem").exists():
        say(f"pki: a lab CA in {ca} (its key stays on this host)")
        gleanctl("init", str(ca))
    (ca / "revoked.txt").touch()
    wanted = [("admin", "lab-admin", [])]
    for m in lab["machines"]:
        if m.get("joins") == "readme":   # its key is made on it, its certificate signed by README's steps
            continue
        role, name = ("controller", "main") if m["role"] == "controller" else ("agent", m["name"])
        wanted.append((role, name, [m["ip"], m["name"]]))
    for role, name, hosts in wanted:
        if not (ca / f"{role}-{name}.pem").exists():
            say(f"pki: gleanctl pki issue {ca} {role} {name}" + "".join(f" --host {h}" for h in hosts))
            gleanctl("issue", str(ca), role, name, *[arg for h in hosts for arg in ("--host", h)])
    return ca


def node_payload(lab: dict, m: dict, ca: Path) -> None:
    out = PAYLOAD / "nodes" / m["name"]
    shutil.rmtree(out, ignore_errors=True)   # what it held for other settings (readme_node) must go
    out.mkdir(parents=True)
    lab_network(lab, m, out)
    if m.get("joins") == "readme":
        # Only what a real host has before its admin starts (its name, address, the pool's names):
        # no certificate, no configuration; README's "Adding a node" steps make those.
        return
    pki = out / "pki"
    pki.mkdir()
    stem = "controller-main" if m["role"] == "controller" else f"agent-{m['name']}"
    for f in ("ca.pem", "revoked.txt", f"{stem}.pem", f"{stem}.key"):
        shutil.copy2(ca / f, pki / f)
    tls = TlsConfig(ca=VM_PKI / "ca.pem", cert=VM_PKI / f"{stem}.pem", key=VM_PKI / f"{stem}.key",
                    deny_list=VM_PKI / "revoked.txt")
    if m["role"] == "controller":
        # Under TCG a lab agent takes longer than real hardware to launch a guest, and its
        # reports come late when the host is busy: wider deadlines than the defaults.
        text = controller_toml(ControllerConfig(listen=f"0.0.0.0:{lab['controller_port']}", tls=tls,
                                                agent_timeout_seconds=LAB_AGENT_TIMEOUT_S,
                                                suspect_after_seconds=LAB_SUSPECT_AFTER_S,
                                                down_after_seconds=LAB_DOWN_AFTER_S, record_path=LAB_RECORD_PATH))
        (out / "controller.toml").write_text(text)
    else:
        text = agent_toml(AgentConfig(
            agent_id=m["name"], listen=f"0.0.0.0:{lab['agent_port']}",
            advertise_address=f"{m['ip']}:{lab['agent_port']}", controller_address=lab["controller_address"],
            domain_type=lab["agent"]["domain_type"], tls=tls))
        (out / "agent.toml").write_text(text)


def lab_network(lab: dict, m: dict, out: Path) -> None:
    """The VM's name, lab address and /etc/hosts lines, which setup-role.sh installs from the payload."""
    (out / "hosts").write_text("".join(f"{x['ip']} {x['name']}\n" for x in lab["machines"]))
    # The VM's name and its lab address, set by provisioning (one step each) rather than by
    # Vagrant, whose hostname and network steps take a minute or more of SSH round trips under TCG.
    (out / "hostname").write_text(f"{m['name']}\n")
    prefix = lab["lab_network"]["subnet"].split("/")[1]
    (out / "lab.network").write_text(LAB_NETWORK_UNIT.format(address=f"{m['ip']}/{prefix}"))


def link_or_copy(source: str, target: str) -> None:
    try:
        os.link(source, target)
    except OSError:
        shutil.copy2(source, target)


def common_payload(house: Path) -> None:
    common = PAYLOAD / "common"
    for sub in ("wheels", "repo", "images"):
        shutil.rmtree(common / sub, ignore_errors=True)
    shutil.copytree(house, common / "wheels", ignore=shutil.ignore_patterns(".project", ".deps"), copy_function=link_or_copy)
    (common / "repo/scripts").mkdir(parents=True)
    for script in SCRIPTS:
        shutil.copy2(REPO / "scripts" / script, common / "repo/scripts" / script)
    shutil.copytree(REPO / "deploy", common / "repo/deploy")
    (common / "repo/docs").mkdir()
    for doc in ("controller.md", "agent.md", "security.md"):   # what the units' Documentation= names
        shutil.copy2(REPO / "docs" / doc, common / "repo/docs" / doc)
    tiny = IMAGE_DIR / "tiny"
    if not (tiny / "manifest.json").exists():
        say(f"image: building the tiny guest into {IMAGE_DIR}")
        subprocess.run([str(PYTHON), str(REPO / "images/build.py"), "--out", str(IMAGE_DIR)], check=True)
    shutil.copytree(tiny, common / "images/tiny")


def payload_disks(lab: dict) -> None:
    """Each VM's payload (common/ and its own node/) as a small read-only ext4 disk in the lab's
    pool, attached as a second disk: provisioning mounts it instead of copying ~50 MB over SSH,
    which a TCG guest encrypts slowly. Each disk holds only its own node's key."""
    pool = lab["storage_pool"]["name"]
    target = Path(lab["storage_pool"]["path"])
    for m in lab["machines"]:
        image = target / f"{lab['name_prefix']}{m['name']}-payload.img"
        stamp = PAYLOAD / "nodes" / f"{m['name']}.disk"  # what the disk holds, to rebuild it only on change
        h = hashlib.sha256()
        for root in (PAYLOAD / "common", PAYLOAD / "nodes" / m["name"]):
            for f in sorted(p for p in root.rglob("*") if p.is_file()):
                h.update(str(f.relative_to(PAYLOAD)).encode())
                h.update(f.read_bytes())
        if image.exists() and stamp.exists() and stamp.read_text() == h.hexdigest():
            continue
        with tempfile.TemporaryDirectory(prefix="lab-payload-") as tmp:
            tree = Path(tmp) / "tree"
            shutil.copytree(PAYLOAD / "common", tree / "common")
            shutil.copytree(PAYLOAD / "nodes" / m["name"], tree / "node")
            size_mib = 32 + sum(f.stat().st_size for f in tree.rglob("*") if f.is_file()) * 2 // 2**20
            fresh = Path(tmp) / "payload.img"
            run(["mkfs.ext4", "-q", "-L", "gleaner-payload", "-d", str(tree), str(fresh), f"{size_mib}M"])
            os.chmod(fresh, 0o644)
            shutil.move(str(fresh), image)  # a running VM keeps the disk it has until it restarts
        stamp.write_text(h.hexdigest())
    run([*VIRSH, "pool-refresh", pool])


def main(argv: list[str]) -> int:
    if os.geteuid() != 0:
        raise SystemExit("[lab-prepare] run as root (it defines a libvirt storage pool)")
    if argv == ["--wheelhouse-only"]:  # for the box build (labctl build): print where it is
        print(wheelhouse())
        return 0
    lab = settings()
    STATE.mkdir(parents=True, exist_ok=True)
    with open(STATE / ".prepare.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one VM's trigger at a time; the others find it done
        ensure_pool(lab)
        ca = ensure_pki(lab)
        house = wheelhouse()
        common_payload(house)
        for m in lab["machines"]:
            node_payload(lab, m, ca)
        payload_disks(lab)
        admin = ca
        (STATE / "gleanctl.toml").write_text(
            f'[gleanctl]\ncontroller = "{lab["controller_address"]}"\n[tls]\nca = "{admin / "ca.pem"}"\n'
            f'cert = "{admin / "admin-lab-admin.pem"}"\nkey = "{admin / "admin-lab-admin.key"}"\n')
        (STATE / "settings.json").write_text(json.dumps(lab, indent=2) + "\n")
    say(f"ready: payload in {PAYLOAD}; gleanctl --config {STATE / 'gleanctl.toml'} status")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

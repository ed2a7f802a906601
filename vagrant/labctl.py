"""The Vagrant lab from the host: build the box, bring the lab up, show it, tear it all down.

    .venv/bin/python vagrant/labctl.py build      the lab box (images/labbox.py; cached)
    .venv/bin/python vagrant/labctl.py up         vagrant up (prepare.py runs first, by trigger), then add-node
    .venv/bin/python vagrant/labctl.py add-node   the last agent joins by README.md's "Adding a node" steps
                                                  (settings' readme_node), run as written; waits until it is up
    .venv/bin/python vagrant/labctl.py status     vagrant status, then gleanctl nodes
    .venv/bin/python vagrant/labctl.py gleanctl ARGS...   gleanctl against the lab's controller
    .venv/bin/python vagrant/labctl.py destroy    vagrant destroy, then everything else the lab made
    .venv/bin/python vagrant/labctl.py leftovers  what of the lab is still on the host (exit 1 if any)

Run as root. The settings in force are vagrant/settings.yml with GLEANER_LAB_SETTINGS merged
over them. `destroy` removes the VMs, their volumes and the box image in the lab's storage pool,
the pool itself and its directory, the lab's two networks, the console logs, the certificates
and the payload; it keeps the box (in Vagrant and in /var/lib/gleaner/lab/box), so the next `up`
needs no build. Nothing outside the lab's names is touched.
"""
from __future__ import annotations

import base64
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
VAGRANT_DIR = REPO / "vagrant"
sys.path.insert(0, str(VAGRANT_DIR))
import readme_steps  # noqa: E402


def state_dir() -> Path:
    """Console logs, the lab CA, gleanctl.toml (the box stays in /var/lib/gleaner/lab/box)."""
    return Path(os.environ.get("GLEANER_LAB_STATE", "/var/lib/gleaner/lab"))


def payload_dir() -> Path:
    return Path(os.environ.get("GLEANER_LAB_PAYLOAD", VAGRANT_DIR / ".lab" / "payload"))


def dotfile_dir() -> Path:
    """Vagrant's records of the lab's machines (VAGRANT_DOTFILE_PATH moves them)."""
    path = Path(os.environ.get("VAGRANT_DOTFILE_PATH", ".vagrant"))
    return path if path.is_absolute() else VAGRANT_DIR / path

VIRSH = ["virsh", "-q", "-c", "qemu:///system"]
PYTHON = REPO / ".venv" / "bin" / "python"


def say(text: str) -> None:
    print(f"[lab] {text}", file=sys.stderr, flush=True)


def settings() -> dict:
    done = subprocess.run(["ruby", str(VAGRANT_DIR / "lib/lab_settings.rb"), "--json"], text=True,
                          capture_output=True)
    if done.returncode != 0:
        raise SystemExit(done.stderr.strip())
    return json.loads(done.stdout)


def virsh(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*VIRSH, *args], text=True, capture_output=True)


def vagrant(*args: str, check: bool = True, capture: bool = False) -> subprocess.CompletedProcess:
    # Vagrant's own output goes to stderr: a caller's stdout stays for its results (bench JSON).
    output = {"capture_output": True} if capture else {"stdout": sys.stderr}
    done = subprocess.run(["vagrant", *args], cwd=VAGRANT_DIR, text=True, stdin=subprocess.DEVNULL, **output)
    if check and done.returncode != 0:
        raise SystemExit(f"[lab] vagrant {' '.join(args)} failed ({done.returncode})"
                         + (f":\n{done.stdout}{done.stderr}" if capture else ""))
    return done


def names(kind: str) -> list[str]:
    """Every libvirt domain / network / pool name on the host."""
    command = {"domain": ("list", "--all", "--name"), "network": ("net-list", "--all", "--name"),
               "pool": ("pool-list", "--all", "--name")}[kind]
    out = virsh(*command).stdout
    return [line.strip() for line in out.splitlines() if line.strip()]


def lab_dirs(lab: dict) -> list[Path]:
    return [Path(lab["storage_pool"]["path"]), state_dir() / "console", state_dir() / "pki", payload_dir()]


def leftovers(lab: dict | None = None) -> list[str]:
    """What the lab made that is still on the host; [] when the lab is gone."""
    lab = lab or settings()
    found = [f"domain {d}" for d in names("domain") if d.startswith(lab["name_prefix"])]
    found += [f"network {n}" for n in names("network")
              if n in (lab["management_network"]["name"], lab["lab_network"]["name"])]
    pool = lab["storage_pool"]["name"]
    if pool in names("pool"):
        found.append(f"pool {pool}")
        found += [f"volume {v.split()[0]}" for v in virsh("vol-list", pool).stdout.splitlines() if v.strip()]
    for path in lab_dirs(lab):
        # the Vagrantfile makes empty payload directories whenever it is read: only files count
        if path.exists() and (path != payload_dir() or any(p.is_file() for p in path.rglob("*"))):
            found.append(f"directory {path}")
    machines = dotfile_dir() / "machines"
    for machine in machines.glob("*/libvirt/id") if machines.exists() else ():
        found.append(f"vagrant machine record {machine.parent.parent.name}")
    return found


def destroy(lab: dict | None = None) -> list[str]:
    """vagrant destroy, then every lab resource vagrant leaves behind; returns what remains."""
    lab = lab or settings()
    say("vagrant destroy -f")
    vagrant("destroy", "-f", check=False)
    for domain in names("domain"):  # a VM vagrant lost track of (its record gone) but named as the lab's
        if domain.startswith(lab["name_prefix"]):
            say(f"removing domain {domain}")
            virsh("destroy", domain)
            virsh("undefine", domain, "--remove-all-storage", "--nvram")
    pool = lab["storage_pool"]["name"]
    if pool in names("pool"):
        for line in virsh("vol-list", pool).stdout.splitlines():
            if line.strip():
                say(f"removing volume {line.split()[0]} (pool {pool})")
                virsh("vol-delete", line.split()[0], "--pool", pool)
        say(f"removing storage pool {pool}")
        virsh("pool-destroy", pool)
        virsh("pool-delete", pool)
        virsh("pool-undefine", pool)
    for network in (lab["lab_network"]["name"], lab["management_network"]["name"]):
        if network in names("network"):
            say(f"removing network {network}")
            virsh("net-destroy", network)
            virsh("net-undefine", network)
    for path in lab_dirs(lab):
        if path.exists():
            shutil.rmtree(path)
    for stale in ("gleanctl.toml", "settings.json", ".prepare.lock"):
        (state_dir() / stale).unlink(missing_ok=True)
    machines = dotfile_dir() / "machines"
    if machines.exists():
        shutil.rmtree(machines)
    remaining = leftovers(lab)
    say("nothing of the lab is left on the host" if not remaining else f"still there: {', '.join(remaining)}")
    return remaining


def gleanctl(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    done = subprocess.run([str(PYTHON), "-m", "controller.gleanctl", "--config", str(state_dir() / "gleanctl.toml"), *args],
                          cwd=REPO, text=True, capture_output=True)
    if check and done.returncode != 0:
        raise RuntimeError(f"gleanctl {' '.join(args)} failed ({done.returncode}): {done.stdout}{done.stderr}")
    return done


def build() -> None:
    """The box, its /opt/gleaner seeded with the dependencies from the lab's wheelhouse."""
    house = subprocess.run([str(PYTHON), str(VAGRANT_DIR / "prepare.py"), "--wheelhouse-only"], text=True,
                           stdout=subprocess.PIPE, check=True).stdout.strip().splitlines()[-1]
    subprocess.run([sys.executable, str(REPO / "images/labbox.py"), "--wheelhouse", house], check=True,
                   stdout=sys.stderr)


def up() -> float:
    """vagrant up; returns the seconds it took."""
    started = time.monotonic()
    vagrant("up")
    return time.monotonic() - started


class VagrantNode:
    """A lab VM as README's node: each step as root over `vagrant ssh` (sudo: root's PATH, with
    /usr/local/bin). The lab's payload disk stands in for the checkout and the wheelhouse: the
    README's `bash scripts/setup-role.sh agent` runs in its copy of the repository's scripts,
    with `--payload` (the wheelhouse, the tiny guest, the VM's lab name and address; no
    certificate or configuration for this node)."""
    SETUP = "bash scripts/setup-role.sh agent"

    def __init__(self, name: str, timeout: float = 1800) -> None:
        self.name, self.timeout = name, timeout

    def ssh(self, script: str) -> subprocess.CompletedProcess:
        packed = base64.b64encode(script.encode()).decode()
        return subprocess.run(["vagrant", "ssh", self.name, "-c", f'sudo bash -ec "$(echo {packed} | base64 -d)"'],
                              cwd=VAGRANT_DIR, text=True, capture_output=True, stdin=subprocess.DEVNULL,
                              timeout=self.timeout)

    def checked(self, script: str) -> str:
        done = self.ssh(script)
        if done.returncode != 0:
            raise readme_steps.StepFailed(f"on {self.name}, exit {done.returncode}: "
                                          f"{(done.stdout + done.stderr).strip()[-1500:]}")
        return done.stdout

    def run(self, command: str) -> str:
        if command == self.SETUP or command.startswith(self.SETUP + " "):
            command = ('payload=$(mktemp -d /run/gleaner-readme.XXXXXX); mount -o ro LABEL=gleaner-payload "$payload"\n'
                       "trap 'cd /; umount \"$payload\"; rmdir \"$payload\"' EXIT\n"
                       f'cd "$payload/common/repo"\n{command} --payload "$payload"')
        return self.checked(command)

    def read(self, path: str) -> bytes:
        return base64.b64decode(self.checked(f"base64 -w0 {shlex.quote(path)}").strip())

    def write(self, directory: str, name: str, data: bytes) -> None:
        target = shlex.quote(f"{directory or '/root'}/{name}")
        self.checked(f"echo {base64.b64encode(data).decode()} | base64 -d > {target}")


def readme_node(lab: dict) -> dict | None:
    return next((m for m in lab["machines"] if m.get("joins") == "readme"), None)


def node_joined(node: str) -> bool:
    """NODE is up in `gleanctl nodes` and the controller's node.joined event names it."""
    listed = gleanctl("--json", "nodes", check=False)
    events = gleanctl("--json", "events", "--kind", "node.joined", "--limit", "100", check=False)
    try:
        up = any(n["node_id"] == node and n["state"] == "up" for n in json.loads(listed.stdout))
        return up and any(e.get("node_id") == node for e in json.loads(events.stdout))
    except (ValueError, KeyError, TypeError):
        return False   # the controller busy or restarting: not yet


def add_node(lab: dict, timeout: float = 300) -> dict:
    """The lab's readme node joins the pool by README.md's "Adding a node" steps, read from the
    README now and run as written with the lab's names; then waits until `gleanctl nodes` shows it
    up and the controller's node.joined event names it. Returns the node, the seconds it took
    (added_node_s) and each step's. StepFailed or ReadmeError name the README line at fault."""
    m = readme_node(lab)
    if m is None:
        raise SystemExit("[lab] no node joins by README's steps (settings' readme_node is false)")
    steps = readme_steps.substitute(readme_steps.parse((REPO / "README.md").read_text()), {
        "node1": m["name"], "node1.example.org": m["name"], "ctl.example.org:7450": lab["controller_address"],
        "/root/gleaner-ca": str(state_dir() / "pki")})
    started = time.monotonic()
    gleanctl_here = [str(PYTHON), "-m", "controller.gleanctl"]
    with tempfile.TemporaryDirectory(prefix="lab-readme-") as work:
        env = {"PYTHONPATH": str(REPO)}
        machines = {"node": VagrantNode(m["name"]),
                    "ca": readme_steps.HostMachine(gleanctl_here, Path(work), env),
                    "admin": readme_steps.HostMachine(gleanctl_here, Path(work),
                                                      {**env, "GLEANER_CONFIG": str(state_dir() / "gleanctl.toml")})}
        timings = readme_steps.follow(steps, machines, say)
    deadline = time.monotonic() + timeout
    while not node_joined(m["name"]):
        if time.monotonic() > deadline:
            raise RuntimeError(f"{m['name']} followed README's steps but did not join within {timeout:.0f}s "
                               "(gleanctl nodes, events --kind node.joined)")
        time.sleep(2)
    seconds = round(time.monotonic() - started, 1)
    say(f"{m['name']} joined by README's steps in {seconds}s")
    return {"node": m["name"], "added_node_s": seconds, "steps": timings}


def add_node_command(lab: dict) -> int:
    try:
        print(json.dumps(add_node(lab)))
    except (readme_steps.ReadmeError, readme_steps.StepFailed, RuntimeError) as exc:
        print(f"labctl: adding a node by README's steps failed: {exc}", file=sys.stderr)
        return 1
    return 0


def main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__)
        return 0 if argv else 2
    if os.geteuid() != 0:
        print("labctl: run as root (vagrant-libvirt and virsh on qemu:///system)", file=sys.stderr)
        return 2
    command, rest = argv[0], argv[1:]
    if command == "build":
        build()
    elif command == "up":
        say(f"vagrant up took {up():.0f}s")
        lab = settings()
        node = readme_node(lab)
        if node and not node_joined(node["name"]):
            return add_node_command(lab)
        say(f"try: {sys.argv[0]} status")
    elif command == "add-node":
        return add_node_command(settings())
    elif command == "status":
        vagrant("status")
        done = gleanctl("nodes", check=False)
        print(done.stdout + done.stderr, end="")
    elif command == "gleanctl":
        done = gleanctl(*rest, check=False)
        print(done.stdout + done.stderr, end="")
        return done.returncode
    elif command == "destroy":
        return 1 if destroy() else 0
    elif command == "leftovers":
        remaining = leftovers()
        print("\n".join(remaining) or "nothing of the lab is on the host")
        return 1 if remaining else 0
    else:
        print(f"labctl: unknown command {command!r}\n{__doc__}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

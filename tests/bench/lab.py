"""The Vagrant lab's smoke run: a real multi-node pool, booted and provisioned like production.

    python -m tests.bench.lab [--keep] [--no-build] [--reuse]     (as root, from the repository)

It builds the lab box if needed (images/labbox.py, cached), removes anything a previous lab left,
brings the lab up (vagrant/, the settings in force: vagrant/settings.yml and
GLEANER_LAB_SETTINGS), adds the last agent to the pool by README.md's "Adding a node" steps (read
from the README and run as written: vagrant/labctl.py add-node), and drives the pool from this host with gleanctl (the config the lab
writes, an admin certificate): it enables backfill, waits until the backfill VMs have booted,
makes an on-demand request one vCPU larger than any node has free, so the most recent backfill VM
on a node is preempted, then cuts one agent VM's power, watches its node go suspect and down,
boots it again (the services start at boot) and watches the node rejoin. Then it tears the whole
lab down and checks nothing of it is left (without --keep). It prints one JSON object:

  box_s              building the box (0 when cached) -- not part of total_s' lab figures below
  up_s               from `vagrant up` until every agent node reports to the controller as up:
                     VMs defined and booted (TCG), provisioned (wheelhouse, certificates,
                     systemd units) and the services running
  vagrant_up_s       the `vagrant up` command alone
  nodes              agent nodes up after up_s
  added_node         the agent added by README.md's "Adding a node" steps (settings' readme_node;
                     null when false): booted but not provisioned by `vagrant up`
  added_node_s       from the first of those steps (setup-role.sh agent on the node, its key and
                     request, the certificate signed by the lab CA on this host, the files copied,
                     agent.toml written, the unit enabled) until `gleanctl nodes` shows it up and
                     the controller's node.joined event names it; part of up_s
  added_node_joined  it did (the verdict requires it when there is such a node)
  added_node_steps   per README step: its line, where it ran, the seconds it took
  backfill_vms       backfill VMs running (and their guests booted) before the request
  backfill_s         from enabling backfill until those guests printed GLEANER-READY
  on_demand_start_s  from `gleanctl request` until the on-demand lease is running (the agent
                     started the domain)
  on_demand_ready_s  ... until its guest printed GLEANER-READY (it boots beside the victim)
  preempted_outcome  how the most recent backfill VM stopped (clean_shutdown or destroyed), from
                     the controller's vm.preempted audit event
  preempted_path     instant (started beside the victim) or wait (waited for its memory)
  preempted_most_recent  the victim was the most recent backfill VM on the on-demand VM's node
  suspect_s          from powering the last agent VM off (virsh destroy: a power cut) until the
                     controller's node.suspect
                     event (the time of the event as the controller recorded it)
  down_detected_s    ... until its node.down event
  rejoined           the node reported again after `vagrant up NODE` (a reboot, not provisioned
                     again: the units start at boot)
  rejoin_s           from `vagrant up NODE` until the controller's node.rejoined (or node.up) event
  destroy_s          the whole teardown, including the check that nothing is left
  cleaned            nothing of the lab is left on the host: VMs, volumes, networks, pool
  services           per lab VM, its Gleaner unit as systemd shows it at the end (Type, User,
                     ActiveState, NRestarts: a tripped watchdog restarts it), the user its main
                     process runs as, its Documentation= files present, the controller's key owner
  replay             the controller's recording of the whole run (vagrant/prepare.py turns [record]
                     on in the lab; --recording FILE keeps a copy) replayed through the simulator
                     (controller/sim/replay.py): the simulator against a pool of real QEMU guests.
                     identical_share, items, unexplained and differences (each placement and its
                     victims, live against the replay, as tests.bench.replay compares them),
                     backfill_made (per node, live and replayed; "cut": live ones recorded after
                     the last job line, read mid-fill), recording_lines,
                     report_vms_left_out (and the first of them, with why); error if the recording
                     could not be read
  total_s            everything above, box build included
  ok, failure_kind, problems   the verdict (verdict()): ok only when the node added by the
                     README's steps joined, the most recent backfill VM
                     was preempted and shut down cleanly, the node rejoined, the units ran as
                     designed, the recording replayed with no unexplained difference and nothing
                     was left; failure_kind "infrastructure" (exit code 75)
                     when the lab itself failed to come up (vagrant, a boot timeout), the only
                     failure CI tries again; "product" (exit code 1) for anything else
"""
from __future__ import annotations

import argparse
import base64
import importlib.util
import json
import subprocess
import sys
import time
from pathlib import Path

from controller.config import ControllerConfig
from controller.recording import parse_recording

REPO = Path(__file__).resolve().parents[2]
LAB_RECORD_PATH = ControllerConfig().state_dir / "record.jsonl"   # as vagrant/prepare.py writes [record]
INFRA_EXIT = 75   # EX_TEMPFAIL: the lab could not be brought up; .ci/run tries once more
PRODUCT_EXIT = 1
# What each lab VM's Gleaner unit must be once it has run the whole smoke run.
UNIT_EXPECTED = {"controller": {"Type": "notify", "User": "gleaner-controller", "ActiveState": "active",
                                "NRestarts": "0", "process_user": "gleaner-controller",
                                "key": "gleaner-controller:600", "docs": "present"},
                 "agent": {"Type": "notify", "User": "", "ActiveState": "active", "NRestarts": "0",
                           "process_user": "root", "docs": "present"}}


class InfrastructureError(RuntimeError):
    """The lab itself failed (vagrant, libvirt, a VM that did not boot in time), not Gleaner:
    the one kind of failure worth a second try."""


def vagrant_checked(*args: str) -> float:
    """vagrant ARGS, its output passed on to stderr as it comes; the seconds it took. A failure
    is the product's when a provisioning script (setup-role.sh) failed, else infrastructure's."""
    started = time.monotonic()
    proc = subprocess.Popen(["vagrant", *args], cwd=REPO / "vagrant", text=True, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    tail: list[str] = []
    for line in proc.stdout:
        sys.stderr.write(line)
        tail = (tail + [line])[-200:]
    if proc.wait() != 0:
        text = "".join(tail)
        what = f"vagrant {' '.join(args)} failed ({proc.returncode})"
        if "SSH command responded with a non-zero exit status" in text:   # setup-role.sh failed
            raise RuntimeError(f"{what}: provisioning failed")
        raise InfrastructureError(what + (": a VM did not boot in time" if "Timed out" in text else ""))
    return time.monotonic() - started


def verdict(result: dict, keep: bool = False) -> dict:
    """The smoke run's verdict over its result (plain data): ok, failure_kind (None,
    "infrastructure" or "product") and the problems found. An infrastructure error explains
    the figures it kept from being taken, so it alone decides the kind; any other problem is
    the product's."""
    if result.get("failure_kind") == "infrastructure":
        return {"ok": False, "failure_kind": "infrastructure", "problems": [result.get("error", "infrastructure")]}
    problems = [result["error"]] if result.get("error") else []
    if result.get("added_node") and result.get("added_node_joined") is not True:
        problems.append(f"{result['added_node']} did not join by README.md's 'Adding a node' steps")
    if result.get("preempted_most_recent") is not True:
        problems.append("the most recent backfill VM was not the one preempted")
    if result.get("preempted_outcome") != "clean_shutdown":
        problems.append(f"the victim was not shut down cleanly ({result.get('preempted_outcome')})")
    if not result.get("rejoined"):
        problems.append("the powered-off node did not rejoin")
    replayed = result.get("replay") or {}
    if replayed.get("error") or not replayed.get("items"):
        problems.append(f"the controller's recording was not replayed: {replayed.get('error', 'no decision in it')}")
    elif replayed.get("unexplained"):
        problems.append(f"the replay of the controller's recording differs, unexplained: {replayed['differences']}")
    if not keep and not result.get("cleaned"):
        problems.append(f"the lab left things behind: {result.get('left_behind')}")
    services = result.get("services") or {}
    if not services:
        problems.append("the lab VMs' units were not checked")
    for machine, seen in services.items():
        want = UNIT_EXPECTED[seen.get("role", "")] if seen.get("role") in UNIT_EXPECTED else {}
        for key, value in want.items():
            if seen.get(key) != value:
                problems.append(f"{machine}: {key} is {seen.get(key)!r}, not {value!r}")
    return {"ok": not problems, "failure_kind": "product" if problems else None, "problems": problems}


def exit_code(decided: dict) -> int:
    if decided["ok"]:
        return 0
    return INFRA_EXIT if decided["failure_kind"] == "infrastructure" else PRODUCT_EXIT


def load_labctl():
    spec = importlib.util.spec_from_file_location("labctl", REPO / "vagrant" / "labctl.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


labctl = load_labctl()


def say(text: str) -> None:
    print(f"[bench.lab] {text}", file=sys.stderr, flush=True)


def wait_for(predicate, timeout: float, what: str, every: float = 1.0):
    """predicate() until it is truthy; gleanctl failing meanwhile (the controller restarting,
    a slow answer) counts as not yet, and the last failure is named if time runs out."""
    deadline = time.monotonic() + timeout
    last_error = ""
    while time.monotonic() < deadline:
        try:
            value = predicate()
        except RuntimeError as exc:
            value, last_error = None, str(exc).strip()
        if value:
            return value
        time.sleep(every)
    raise TimeoutError(f"gave up after {timeout:.0f}s waiting for {what}" + (f" ({last_error})" if last_error else ""))


def gleanctl_json(*args: str, timeout: float = 60):
    """gleanctl --json ARGS' answer; anything else (an error, no JSON: the lab controller busy or
    restarting under TCG) raises RuntimeError, which wait_for counts as not yet."""
    done = labctl.gleanctl("--json", "--timeout", str(timeout), *args, check=False)
    if done.returncode in (0, 1):
        try:
            return json.loads(done.stdout)
        except ValueError:
            pass
    raise RuntimeError(f"gleanctl {' '.join(args)} failed ({done.returncode}): "
                       f"{(done.stdout + done.stderr).strip()[-400:]}")


def consoles(lab: dict, lines: int = 30) -> None:
    """The end of each lab VM's serial console on stderr, read from its file on this host: it
    needs no SSH, so it says where a VM that never got an address stopped booting."""
    for m in lab["machines"]:
        path = labctl.state_dir() / "console" / f"{m['name']}.log"
        try:
            tail = path.read_text(errors="replace").splitlines()[-lines:]
        except OSError as exc:
            tail = [f"(not readable: {exc.strerror or exc})"]
        say(f"--- {m['name']}: serial console {path} (last {lines} lines)\n" + "\n".join(tail))


def journals(lab: dict) -> None:
    """The end of each lab VM's Gleaner journal on stderr: what a failed run leaves to go on."""
    for m in lab["machines"]:
        unit = f"gleaner-{m['role']}"
        done = subprocess.run(["vagrant", "ssh", m["name"], "-c", f"sudo journalctl -u {unit} -n 40 --no-pager"],
                              cwd=REPO / "vagrant", text=True, capture_output=True, stdin=subprocess.DEVNULL,
                              timeout=120, check=False)
        say(f"--- {m['name']}: journalctl -u {unit} (last 40 lines)\n{done.stdout.strip() or done.stderr.strip()}")


UNIT_PROBE = r"""
u={unit}; systemctl show -p Type -p User -p ActiveState -p NRestarts -p MainPID -p Documentation $u
pid=$(systemctl show -p MainPID --value $u); echo "process_user=$(ps -o user= -p $pid 2>/dev/null)"
docs=present; for d in $(systemctl show -p Documentation --value $u); do [ -f "${{d#file://}}" ] || docs="missing ${{d}}"; done
echo "docs=$docs"
for k in $(python3 -c 'import tomllib;print(tomllib.load(open("/etc/gleaner/controller.toml","rb"))["tls"]["key"])' 2>/dev/null); do
  echo "key=$(stat -c %U:%a $k)"; done
"""


def services(lab: dict) -> dict[str, dict]:
    """Each lab VM's Gleaner unit as systemd shows it (see UNIT_EXPECTED), read over vagrant ssh."""
    seen = {}
    for m in lab["machines"]:
        unit = f"gleaner-{m['role']}"
        script = base64.b64encode(UNIT_PROBE.format(unit=unit).encode()).decode()
        done = subprocess.run(["vagrant", "ssh", m["name"], "-c", f"echo {script} | base64 -d | sudo bash"],
                              cwd=REPO / "vagrant", text=True, capture_output=True, stdin=subprocess.DEVNULL,
                              timeout=180, check=False)
        fields = dict(line.split("=", 1) for line in done.stdout.splitlines() if "=" in line)
        seen[m["name"]] = {"role": m["role"], **{k: v.strip() for k, v in fields.items()}}
    return seen


def nodes() -> dict[str, dict]:
    try:
        return {n["node_id"]: n for n in gleanctl_json("nodes")}
    except (RuntimeError, ValueError):
        return {}


def leases() -> list[dict]:
    return gleanctl_json("vms")


def ready_vms(node: str) -> set[str]:
    """Guests on NODE whose console shows GLEANER-READY (read in the lab VM over vagrant ssh)."""
    done = subprocess.run(["vagrant", "ssh", node, "-c",
                           "sudo sh -c 'grep -l GLEANER-READY /var/lib/gleaner/agent/console/*.log' 2>/dev/null || true"],
                          cwd=REPO / "vagrant", text=True, capture_output=True, stdin=subprocess.DEVNULL)
    return {Path(line.strip()).stem for line in done.stdout.splitlines() if line.strip().endswith(".log")}


def all_ready(vms: list[dict]) -> bool:
    by_node: dict[str, set[str]] = {}
    for lease in vms:
        by_node.setdefault(lease["node_id"], set()).add(lease["vm_name"])
    return all(names <= ready_vms(node) for node, names in by_node.items())


def node_event(node: str, kind: str, after: float) -> dict | None:
    """The first KIND audit event of NODE at or after the wall-clock time AFTER."""
    events = gleanctl_json("events", "--kind", kind, "--limit", "50")
    return min((e for e in events if e.get("node_id") == node and e.get("at", 0) >= after),
               key=lambda e: e["at"], default=None)


def settled_backfill(seen: dict) -> list[dict] | None:
    backfill = [l for l in leases() if l["role"] == "backfill"]
    if not backfill or any(l["state"] != "running" for l in backfill):
        seen.clear()
        return None
    if seen.get("count") != len(backfill):
        seen.update(count=len(backfill), since=time.monotonic())
        say(f"{len(backfill)} backfill VM(s) running")
    return backfill if time.monotonic() - seen["since"] >= 10 else None


def smoke(lab: dict, result: dict, reuse: bool = False, keep_recording: Path | None = None) -> None:
    agents = [m["name"] for m in lab["machines"] if m["role"] == "agent"]
    started = time.monotonic()
    if not reuse:
        say("vagrant up")
        result["vagrant_up_s"] = round(vagrant_checked("up"), 1)
        added = labctl.readme_node(lab)
        result["added_node"] = added["name"] if added else None
        if added:
            result["added_node_joined"] = False
            say(f"{added['name']} joins by README.md's 'Adding a node' steps")
            done = labctl.add_node(lab)
            result.update(added_node_joined=True, added_node_s=done["added_node_s"], added_node_steps=done["steps"])
    up = wait_for(lambda: (lambda n: n if all(n.get(a, {}).get("state") == "up" for a in agents) else None)(nodes()),
                  300, "every agent node to report up")
    result["up_s"] = None if reuse else round(time.monotonic() - started, 1)
    result["nodes"] = sum(1 for n in up.values() if n["state"] == "up")
    say(f"lab up in {result['up_s']}s: {result['nodes']} nodes; {labctl.gleanctl('nodes').stdout.strip()}")

    t = time.monotonic()
    # victims terminated: the verdict checks the clean shutdown of the ACPI path (hibernation, the
    # default, is proven on real VMs by tests/integration/test_hibernate_pool.py)
    wait_for(lambda: gleanctl_json("backfill", "set", "enabled=true", "image=tiny", "memory_mb=128", "vcpus=1",
                                   "grace_seconds=20", "retry_seconds=15", "interruption=terminate"), 120,
             "backfill to be enabled")
    seen: dict = {}
    backfill = wait_for(lambda: settled_backfill(seen), 600, "backfill VMs to start")
    wait_for(lambda: all_ready(backfill), 600, "the backfill guests to boot", every=5)
    result["backfill_vms"] = len(backfill)
    result["backfill_s"] = round(time.monotonic() - t, 1)
    say(f"{len(backfill)} backfill guest(s) booted in {result['backfill_s']}s")

    current = nodes()
    free = {n: current[n]["cpus"] - current[n]["allocated_vcpus"] for n in agents}
    vcpus = min(max(free.values()) + 1, max(current[n]["cpus"] for n in agents))
    say(f"free vCPUs per node {free}: an on-demand request for {vcpus} vCPU(s) must preempt")
    t = time.monotonic()
    request_id = f"lab-bench-{int(time.time())}"   # the same request when asked again after a failed call

    def answer():
        reply = gleanctl_json("request", "--vcpus", str(vcpus), "--memory", "128", "--owner", "lab-bench",
                              "--request-id", request_id, timeout=300)
        return None if reply.get("outcome") == "pending" else reply   # still deciding: ask again
    reply = wait_for(answer, 600, "an answer to the on-demand request")
    if reply.get("outcome") != "placed":
        raise RuntimeError(f"the on-demand request was {reply.get('outcome')}: {reply.get('reason')}")
    lease = reply["lease"]
    wait_for(lambda: any(l["lease_id"] == lease["lease_id"] and l["state"] == "running" for l in leases()), 300,
             "the on-demand VM to run", every=0.5)
    result["on_demand_start_s"] = round(time.monotonic() - t, 1)
    victims = [p["lease_id"] for p in reply.get("preempted", [])]
    youngest = max((l for l in backfill if l["node_id"] == lease["node_id"]), key=lambda l: -l["age_seconds"])
    result["preempted_most_recent"] = victims == [youngest["lease_id"]]
    wait_for(lambda: lease["vm_name"] in ready_vms(lease["node_id"]), 300, "the on-demand guest to boot", every=3)
    result["on_demand_ready_s"] = round(time.monotonic() - t, 1)
    say(f"on-demand {lease['vm_name']} on {lease['node_id']}: running in {result['on_demand_start_s']}s, "
        f"booted in {result['on_demand_ready_s']}s; preempted {victims}")

    def preempted_event():
        events = gleanctl_json("events", "--kind", "vm.preempted", "--limit", "50")
        return next((e for e in events if e.get("lease_id") in victims), None)
    event = wait_for(preempted_event, 180, "the victim's vm.preempted event", every=2) if victims else None
    result["preempted_outcome"] = event["detail"].get("stopped") if event else None
    result["preempted_path"] = event["detail"].get("path") if event else None

    victim_node = agents[-1]
    domain = next(m["domain"] for m in lab["machines"] if m["name"] == victim_node)
    # A power cut (virsh destroy of the lab's own VM), not `vagrant halt --force`, which first
    # asks the guest to shut down through ACPI and waits for it (minutes under TCG).
    say(f"powering {victim_node} off (virsh destroy {domain})")
    done = labctl.virsh("destroy", domain)
    off_at = time.time()  # the controller's events say when it noticed
    if done.returncode != 0:
        raise RuntimeError(f"virsh destroy {domain} failed: {done.stderr.strip()}")
    wait_for(lambda: node_event(victim_node, "node.down", off_at), 300, f"{victim_node} down", every=2)
    result["suspect_s"] = round(node_event(victim_node, "node.suspect", off_at)["at"] - off_at, 1)
    result["down_detected_s"] = round(node_event(victim_node, "node.down", off_at)["at"] - off_at, 1)
    say(f"{victim_node}: suspect after {result['suspect_s']}s, down after {result['down_detected_s']}s")
    t, up_at = time.monotonic(), time.time()
    vagrant_checked("up", victim_node)
    try:
        back = wait_for(lambda: (node_event(victim_node, "node.rejoined", up_at)
                                 or node_event(victim_node, "node.up", up_at)), 600, f"{victim_node} to rejoin", every=2)
        wait_for(lambda: nodes().get(victim_node, {}).get("state") == "up", 120, f"{victim_node} up")
        result["rejoined"] = True
        result["rejoin_s"] = round(back["at"] - up_at, 1)
    except TimeoutError:
        result["rejoined"] = False
        result["rejoin_s"] = round(time.monotonic() - t, 1)
    say(f"{victim_node} rejoined: {result['rejoined']} after {result['rejoin_s']}s")
    result["services"] = services(lab)
    say(f"units: {json.dumps(result['services'], sort_keys=True)}")
    result["replay"] = replay_of_recording(lab, keep_recording)
    say(f"replay of the controller's recording: {json.dumps(result['replay'], sort_keys=True)}")


def recording_lines(lab: dict) -> list[dict]:
    """The lab controller's recording as written so far (read over vagrant ssh; the recorder
    flushes every second, and a torn last line is left out as read_recording does)."""
    controller = next(m["name"] for m in lab["machines"] if m["role"] == "controller")
    done = subprocess.run(["vagrant", "ssh", controller, "-c", f"sudo cat {LAB_RECORD_PATH}"], cwd=REPO / "vagrant",
                          capture_output=True, stdin=subprocess.DEVNULL, timeout=300, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"reading {LAB_RECORD_PATH} on {controller}: {done.stderr.decode(errors='replace')[-300:]}")
    return parse_recording(done.stdout.decode().splitlines(keepends=True), f"{controller}:{LAB_RECORD_PATH}")


def replay_of_recording(lab: dict, keep_at: Path | None = None) -> dict:
    """The recording replayed and compared, decision by decision (tests.bench.replay's check);
    the recording also written to `keep_at` if given."""
    from controller.sim.replay import load, replay
    from controller.sim.replay_compare import compare
    try:
        lines = recording_lines(lab)
        if keep_at is not None:
            keep_at.write_text("".join(json.dumps(line) + "\n" for line in lines))
        recording = load(lines)
        sim, replay_lines = replay(recording)
        result = compare(recording.lines, replay_lines, sim.agents.unrecorded)
    except Exception as exc:   # noqa: BLE001 - a measurement never costs the run its result and verdict
        return {"error": f"{type(exc).__name__}: {exc}"}
    return dict(identical_share=round(result.identical_share, 4), items=result.items,
                unexplained=result.unexplained, differences=result.differences[:5],
                backfill_made=result.backfill_made, recording_lines=len(lines),
                unrecorded_calls=len(sim.agents.unrecorded), report_vms_left_out=sim.recorded_reports.left_out,
                report_vms_left_out_first=sim.recorded_reports.left_out_first)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keep", action="store_true", help="leave the lab running (tear down with labctl destroy)")
    parser.add_argument("--no-build", action="store_true", help="do not build the box (it must be in Vagrant)")
    parser.add_argument("--reuse", action="store_true",
                        help="drive a lab that is already up (after labctl.py up, with backfill off); up_s is null")
    parser.add_argument("--recording", type=Path, metavar="FILE",
                        help="also keep the controller's recording here (JSON lines, as read for the replay)")
    args = parser.parse_args(argv)
    started = time.monotonic()
    lab = labctl.settings()
    result: dict = {"box_s": 0.0}
    if not args.no_build and not args.reuse:
        t = time.monotonic()
        try:
            labctl.build()
        except (subprocess.SubprocessError, OSError) as exc:
            result.update(error=f"building the box: {exc}", failure_kind="infrastructure")
            print(json.dumps({**result, **verdict(result)}, sort_keys=True))
            return INFRA_EXIT
        result["box_s"] = round(time.monotonic() - t, 1)
    if not args.reuse and labctl.leftovers(lab):
        say(f"a previous lab is still here ({', '.join(labctl.leftovers(lab))}); destroying it first")
        labctl.destroy(lab)
    failure = None
    try:
        smoke(lab, result, args.reuse, args.recording)
    except (TimeoutError, RuntimeError, SystemExit, ValueError, subprocess.SubprocessError) as exc:
        failure = str(exc)
        result["error"] = failure
        if isinstance(exc, InfrastructureError):
            result["failure_kind"] = "infrastructure"
        say(f"failed: {failure}")
        consoles(lab)   # before the journals: those need SSH, which a VM that did not boot lacks
        try:
            journals(lab)
        except (OSError, subprocess.SubprocessError) as exc2:
            say(f"(no journals: {exc2})")
    finally:
        if not args.keep:
            t = time.monotonic()
            remaining = labctl.destroy(lab)
            result["destroy_s"] = round(time.monotonic() - t, 1)
            result["cleaned"] = not remaining
            if remaining:
                result["left_behind"] = remaining
    result["total_s"] = round(time.monotonic() - started, 1)
    decided = verdict(result, args.keep)
    result.update(decided)
    print(json.dumps(result, sort_keys=True))
    if not decided["ok"]:
        say(f"{decided['failure_kind']} failure: {'; '.join(decided['problems'])}")
    return exit_code(decided)


if __name__ == "__main__":
    sys.exit(main())

"""The Vagrant lab's smoke run: a real multi-node pool, booted and provisioned like production.

    python -m tests.bench.lab [--keep] [--no-build] [--reuse]     (as root, from the repository)

It builds the lab box if needed (images/labbox.py, cached), removes anything a previous lab left,
brings the lab up (vagrant/, the settings in force: vagrant/settings.yml and
GLEANER_LAB_SETTINGS), and drives the pool from this host with gleanctl (the config the lab
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
  backfill_vms       backfill VMs running (and their guests booted) before the request
  backfill_s         from enabling backfill until those guests printed GLEANER-READY
  on_demand_start_s  from `gleanctl request` until the on-demand lease is running (the agent
                     started the domain)
  on_demand_ready_s  ... until its guest printed GLEANER-READY (it boots beside the victim)
  preempted_outcome  how the most recent backfill VM stopped (clean_shutdown or destroyed), from
                     the controller's vm.preempted audit event
  preempted_path     instant (started beside the victim) or wait (waited for its memory)
  suspect_s          from powering the last agent VM off (virsh destroy: a power cut) until the
                     controller's node.suspect
                     event (the time of the event as the controller recorded it)
  down_detected_s    ... until its node.down event
  rejoined           the node reported again after `vagrant up NODE` (a reboot, not provisioned
                     again: the units start at boot)
  rejoin_s           from `vagrant up NODE` until the controller's node.rejoined (or node.up) event
  destroy_s          the whole teardown, including the check that nothing is left
  cleaned            nothing of the lab is left on the host: VMs, volumes, networks, pool
  total_s            everything above, box build included
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


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


def journals(lab: dict) -> None:
    """The end of each lab VM's Gleaner journal on stderr: what a failed run leaves to go on."""
    for m in lab["machines"]:
        unit = f"gleaner-{m['role']}"
        done = subprocess.run(["vagrant", "ssh", m["name"], "-c", f"sudo journalctl -u {unit} -n 40 --no-pager"],
                              cwd=REPO / "vagrant", text=True, capture_output=True, stdin=subprocess.DEVNULL,
                              timeout=120, check=False)
        say(f"--- {m['name']}: journalctl -u {unit} (last 40 lines)\n{done.stdout.strip() or done.stderr.strip()}")


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


def smoke(lab: dict, result: dict, reuse: bool = False) -> None:
    agents = [m["name"] for m in lab["machines"] if m["role"] == "agent"]
    started = time.monotonic()
    if not reuse:
        say("vagrant up")
        result["vagrant_up_s"] = round(labctl.up(), 1)
    up = wait_for(lambda: (lambda n: n if all(n.get(a, {}).get("state") == "up" for a in agents) else None)(nodes()),
                  300, "every agent node to report up")
    result["up_s"] = None if reuse else round(time.monotonic() - started, 1)
    result["nodes"] = sum(1 for n in up.values() if n["state"] == "up")
    say(f"lab up in {result['up_s']}s: {result['nodes']} nodes; {labctl.gleanctl('nodes').stdout.strip()}")

    t = time.monotonic()
    wait_for(lambda: gleanctl_json("backfill", "set", "enabled=true", "image=tiny", "memory_mb=128", "vcpus=1",
                                   "grace_seconds=20", "retry_seconds=15"), 120, "backfill to be enabled")
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
    labctl.vagrant("up", victim_node)
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keep", action="store_true", help="leave the lab running (tear down with labctl destroy)")
    parser.add_argument("--no-build", action="store_true", help="do not build the box (it must be in Vagrant)")
    parser.add_argument("--reuse", action="store_true",
                        help="drive a lab that is already up (after labctl.py up, with backfill off); up_s is null")
    args = parser.parse_args(argv)
    started = time.monotonic()
    lab = labctl.settings()
    result: dict = {"box_s": 0.0}
    if not args.no_build and not args.reuse:
        t = time.monotonic()
        labctl.build()
        result["box_s"] = round(time.monotonic() - t, 1)
    if not args.reuse and labctl.leftovers(lab):
        say(f"a previous lab is still here ({', '.join(labctl.leftovers(lab))}); destroying it first")
        labctl.destroy(lab)
    failure = None
    try:
        smoke(lab, result, args.reuse)
    except (TimeoutError, RuntimeError, SystemExit, ValueError, subprocess.SubprocessError) as exc:
        failure = str(exc)
        result["error"] = failure
        say(f"failed: {failure}")
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
    print(json.dumps(result, sort_keys=True))
    ok = (failure is None and result.get("rejoined") and result.get("preempted_outcome")
          and (args.keep or result.get("cleaned")))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

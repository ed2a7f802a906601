"""Overlay deletion is confined to the agent's overlay directory (issue 23), with real domains:
a domain's metadata, as libvirt stores it, is rewritten to name a file in /etc (or a `..` escape)
as its overlay. Terminate and the reaper then remove the domain but never that file, and log
the refusal; the domain's real overlay, left in the overlay directory, is swept as an orphan."""
from __future__ import annotations

import dataclasses
import uuid
from pathlib import Path

import libvirt
import pytest

from nodeagent.host.domainxml import NAMESPACE, PREFIX, metadata_xml, read_metadata
from protos import agent_pb2
from tests.agentproc import AgentProcess, LIBVIRT_URI, domain_names, launch_request, unique_name, wait_for

pytestmark = pytest.mark.libvirt


@pytest.fixture
def victims():
    """Files outside the overlay directory that a forged overlay path names."""
    made = [Path(f"/etc/gleaner-test-victim-{uuid.uuid4().hex[:8]}.qcow2")]
    made[0].write_text("an admin's file\n")
    yield made
    for path in made:
        path.unlink(missing_ok=True)


def forge_overlay(name: str, overlay: str) -> None:
    """Rewrite the overlay path in the domain's Gleaner metadata, live and persistent."""
    conn = libvirt.open(LIBVIRT_URI)
    try:
        dom = conn.lookupByName(name)
        meta = read_metadata(dom.XMLDesc(0))
        assert meta is not None
        flags = libvirt.VIR_DOMAIN_AFFECT_CONFIG | (libvirt.VIR_DOMAIN_AFFECT_LIVE if dom.isActive() else 0)
        dom.setMetadata(libvirt.VIR_DOMAIN_METADATA_ELEMENT, metadata_xml(dataclasses.replace(meta, overlay=overlay)),
                        PREFIX, NAMESPACE, flags)
        assert read_metadata(dom.XMLDesc(libvirt.VIR_DOMAIN_XML_INACTIVE)).overlay == overlay
    finally:
        conn.close()


def destroy_behind_the_agents_back(name: str) -> None:
    conn = libvirt.open(LIBVIRT_URI)
    try:
        conn.lookupByName(name).destroy()
    finally:
        conn.close()


def refused(agent: AgentProcess, path: str) -> bool:
    return any("event=overlay.delete_refused" in line and path in line for line in agent.log_text().splitlines())


def test_forged_overlay_paths_are_never_deleted_and_the_real_overlays_still_go(test_env, victims):
    agent = AgentProcess(test_env, name="overlays").start()
    try:
        stub = agent.stub()
        overlays = agent.state_dir / "overlays"
        etc_victim = victims[0]
        escape_victim = agent.state_dir / "escape-victim.qcow2"    # reached by '..' from the overlay dir
        escape_victim.write_text("not an overlay\n")
        escape = str(overlays / ".." / escape_victim.name)
        normal, by_terminate, by_reaper = unique_name("ovl"), unique_name("ovletc"), unique_name("ovlesc")
        for name in (normal, by_terminate, by_reaper):
            stub.LaunchDomain(launch_request(name), timeout=120)
            assert (overlays / f"{name}.qcow2").is_file()

        stub.TerminateDomain(agent_pb2.TerminateDomainRequest(name=normal, force=True), timeout=60)
        assert not (overlays / f"{normal}.qcow2").exists()   # the normal path: deleted

        forge_overlay(by_terminate, str(etc_victim))
        stub.TerminateDomain(agent_pb2.TerminateDomainRequest(name=by_terminate, force=True), timeout=60)
        assert by_terminate not in domain_names()
        assert etc_victim.read_text() == "an admin's file\n"
        assert refused(agent, str(etc_victim))

        forge_overlay(by_reaper, escape)   # a backfill VM that stops on its own: the reaper removes it
        destroy_behind_the_agents_back(by_reaper)
        wait_for(lambda: by_reaper not in domain_names(), 30, "the reaper to remove the stopped volunteer")
        wait_for(lambda: refused(agent, escape), 10, "the reaper's refusal to be logged")
        assert escape_victim.read_text() == "not an overlay\n"

        # Their real overlays, in the overlay directory with no domain, are orphans the reaper sweeps.
        wait_for(lambda: not any((overlays / f"{n}.qcow2").exists() for n in (by_terminate, by_reaper)), 30,
                 "the orphan overlays to be swept")
        assert etc_victim.exists() and escape_victim.exists()
    finally:
        agent.stop()

"""Shared fixtures. Integration tests need the real libvirtd and the built guest image:
when either is missing the tests fail with a message saying how to get them; they never skip."""
from __future__ import annotations

import pytest

from tests.agentproc import (LIBVIRT_URI, SYSTEM_IMAGE_DIR, AgentProcess, LabEnv, remove_test_domains)


@pytest.fixture(scope="session")
def libvirt_host() -> str:
    import libvirt
    try:
        conn = libvirt.open(LIBVIRT_URI)
    except libvirt.libvirtError as exc:
        pytest.fail(f"libvirtd is not reachable at {LIBVIRT_URI} ({exc}); run 'bash scripts/setup.sh'",
                    pytrace=False)
    conn.close()
    for part in ("vmlinuz", "initrd.img", "disk.qcow2"):
        if not (SYSTEM_IMAGE_DIR / "tiny" / part).is_file():
            pytest.fail(f"the guest image is not built ({SYSTEM_IMAGE_DIR}/tiny/{part} is missing); "
                        "run 'bash scripts/setup.sh'", pytrace=False)
    return LIBVIRT_URI


@pytest.fixture(scope="session")
def test_env(libvirt_host):
    env = LabEnv.create()
    yield env
    remove_test_domains()
    env.remove()


@pytest.fixture(scope="session")
def agent(test_env):
    """One agent shared by the tests that do not restart it."""
    proc = AgentProcess(test_env, name="shared").start()
    yield proc
    proc.stop()


@pytest.fixture
def stub(agent):
    return agent.stub()


@pytest.fixture(autouse=True)
def _no_leftover_domains(request):
    """Every test leaves no domain behind, even when it fails."""
    yield
    # A module-scoped pool (the controller tests: `pool`, `big_pool`...) builds on its VMs from test
    # to test; it cleans up itself.
    if "test_env" in request.fixturenames and not any(name.endswith("pool") for name in request.fixturenames):
        remove_test_domains()


# Fixtures that reach the local libvirtd (and so may start QEMU): a test that uses one, directly
# or through another fixture, is marked `libvirt`, so `pytest -m "not libvirt"` starts no VM.
LIBVIRT_FIXTURES = {"libvirt_host", "test_env", "agent", "stub"}


def pytest_collection_modifyitems(config, items):
    for item in items:
        if LIBVIRT_FIXTURES.intersection(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.libvirt)


LOG_TAIL_LINES = 40


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """A failed test over real processes shows the end of their logs (this run's agents and
    controllers): CI keeps nothing else once the test directory is removed."""
    outcome = yield
    report = outcome.get_result()
    if report.failed and item.get_closest_marker("libvirt") is not None:
        for log in recent_process_logs():
            lines = log.read_text(errors="replace").splitlines()[-LOG_TAIL_LINES:]
            report.sections.append((f"last {len(lines)} lines of {log}", "\n".join(lines)))


def recent_process_logs(within_seconds: float = 900, limit: int = 6) -> list:
    import time
    from tests.agentproc import TEST_ROOT
    logs = [p for pattern in ("*/*/agent.log", "*/*/controller.log") for p in TEST_ROOT.glob(pattern)]
    fresh = [p for p in logs if time.time() - p.stat().st_mtime < within_seconds]
    return sorted(fresh, key=lambda p: p.stat().st_mtime, reverse=True)[:limit]

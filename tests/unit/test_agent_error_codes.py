"""Agent errors map to the status codes gRPC intends (issue 23): libvirt's by its error code
(virErrorNumber), the host's by kind, and only bugs to INTERNAL. The real gRPC answers, with
real libvirt, are in tests/integration/test_agent_error_paths.py."""
from __future__ import annotations

import grpc
import libvirt
import pytest

from gleaner_common.ids import InvalidField
from nodeagent.domains import DomainConflict, LaunchBug, LaunchFailed, rolled_back
from nodeagent.host.hypervisor import (HypervisorError, HypervisorExhausted, HypervisorRefused, HypervisorUnavailable,
                                       NoSuchDomain, error_class)
from nodeagent.host.images import ImageUnusable, OverlayError, OverlayNoSpace
from nodeagent.inventory import DomainNotFound
from nodeagent.server import ERROR_CODES, AgentBug, bugs_as_internal
from nodeagent.validation import BeyondHost, HostLimits, validate_memory, validate_vcpus

S = grpc.StatusCode


def code_of(exc: BaseException) -> S:
    """What the agent answers: the first class in ERROR_CODES the error is an instance of; any
    other error becomes an AgentBug on its way (bugs_as_internal)."""
    if not isinstance(exc, tuple(cls for cls, _ in ERROR_CODES)):
        exc = AgentBug(str(exc))
    return next(code for cls, code in ERROR_CODES if isinstance(exc, cls))


@pytest.mark.parametrize("code,message,lost,expected", [
    (libvirt.VIR_ERR_NO_DOMAIN, "Domain not found", False, NoSuchDomain),
    (libvirt.VIR_ERR_INTERNAL_ERROR, "End of file while reading data", True, HypervisorUnavailable),
    (libvirt.VIR_ERR_NO_CONNECT, "no connection driver available", False, HypervisorUnavailable),
    (libvirt.VIR_ERR_OPERATION_TIMEOUT, "cannot acquire state change lock", False, HypervisorUnavailable),
    (libvirt.VIR_ERR_RPC, "cannot send data", False, HypervisorUnavailable),
    (libvirt.VIR_ERR_INTERNAL_ERROR, "cannot set up guest memory 'pc.ram': Cannot allocate memory", False,
     HypervisorExhausted),
    (libvirt.VIR_ERR_SYSTEM_ERROR, "write failed: No space left on device", False, HypervisorExhausted),
    (libvirt.VIR_ERR_NO_MEMORY, "out of memory", False, HypervisorExhausted),
    (libvirt.VIR_ERR_INTERNAL_ERROR, "qemu unexpectedly closed the monitor: could not load kernel", False,
     HypervisorRefused),
    (libvirt.VIR_ERR_OPERATION_INVALID, "domain is not running", False, HypervisorRefused),
    (libvirt.VIR_ERR_CONFIG_UNSUPPORTED, "does not support virt type 'kvm'", False, HypervisorRefused),
    (libvirt.VIR_ERR_XML_ERROR, "XML error: missing name", False, HypervisorError),
])
def test_libvirt_errors_are_classified_by_their_code(code, message, lost, expected):
    assert error_class(code, message, lost) is expected


@pytest.mark.parametrize("exc,expected", [
    (InvalidField("name", "bad"), S.INVALID_ARGUMENT),
    (BeyondHost("memory_mib", "1099511627776 MiB is outside 32..24105 MiB (this host's memory)"),
     S.RESOURCE_EXHAUSTED),
    (ImageUnusable("image", "no image 'x' in the image directory"), S.FAILED_PRECONDITION),
    (DomainNotFound("no domain"), S.NOT_FOUND),
    (NoSuchDomain("gone meanwhile"), S.NOT_FOUND),
    (DomainConflict("exists with another spec"), S.ALREADY_EXISTS),
    (HypervisorUnavailable("cannot connect"), S.UNAVAILABLE),
    (HypervisorExhausted("Cannot allocate memory"), S.RESOURCE_EXHAUSTED),
    (HypervisorRefused("could not load kernel"), S.FAILED_PRECONDITION),
    (OverlayNoSpace("No space left on device"), S.RESOURCE_EXHAUSTED),
    (OverlayError("qemu-img create failed"), S.FAILED_PRECONDITION),
    (LaunchFailed("vanished right after it started"), S.FAILED_PRECONDITION),
    (HypervisorError("XML error"), S.INTERNAL),
    (AgentBug("unexpected"), S.INTERNAL),
])
def test_each_error_has_its_intended_code(exc, expected):
    assert code_of(exc) == expected


def test_a_rolled_back_launch_keeps_its_causes_code():
    for cause, expected in ((HypervisorUnavailable("lost"), S.UNAVAILABLE),
                            (OverlayNoSpace("No space left on device"), S.RESOURCE_EXHAUSTED),
                            (HypervisorRefused("could not load kernel"), S.FAILED_PRECONDITION),
                            (NoSuchDomain("undefined meanwhile"), S.FAILED_PRECONDITION)):
        error = rolled_back("vm1", cause)
        assert code_of(error) == expected and "'vm1' failed and was rolled back" in str(error)
    assert not isinstance(LaunchBug("no metadata"), tuple(cls for cls, _ in ERROR_CODES))   # a bug: INTERNAL


def test_more_than_the_host_has_is_exhaustion_and_less_than_anything_is_invalid():
    limits = HostLimits(cpus=2, memory_mib=1024)
    for call, value in ((validate_vcpus, 3), (validate_memory, 1025)):
        with pytest.raises(BeyondHost):
            call(value, limits)
    for call, value in ((validate_vcpus, 0), (validate_memory, 16)):
        with pytest.raises(InvalidField) as err:
            call(value, limits)
        assert not isinstance(err.value, BeyondHost)


def test_an_unexpected_exception_is_a_bug_answered_internal_with_its_traceback_logged(caplog):
    @bugs_as_internal
    def method(self, request, context):
        return {}[request]

    with pytest.raises(AgentBug, match=r"the agent failed unexpectedly \(KeyError: 'x'\); its log has the traceback"):
        method(None, "x", None)
    [record] = [r for r in caplog.records if r.getMessage() == "rpc.bug"]
    assert record.method == "method" and record.exc_info[0] is KeyError

    @bugs_as_internal
    def refused(self, request, context):
        raise ImageUnusable("image", "no image 'x' in the image directory")
    with pytest.raises(ImageUnusable):   # an expected error passes through untouched
        refused(None, None, None)


def rpc_error(message: str, code: int = libvirt.VIR_ERR_SYSTEM_ERROR, domain: int = libvirt.VIR_FROM_RPC
              ) -> libvirt.libvirtError:
    """A libvirt error as the client library raises it (its .err is what virGetLastError gave)."""
    exc = libvirt.libvirtError(message)
    exc.err = (code, domain, message, libvirt.VIR_ERR_ERROR, None, None, None, 0, 0)
    return exc


def test_a_broken_connection_is_unavailable_even_when_another_thread_dropped_it_first():
    """Chaos, libvirtd restarted mid-restore: the reporter's reconnect failed first and left the
    agent without a connection; the restore's "End of file" was then answered FAILED_PRECONDITION
    and the controller discarded the saved VM. Judged on the call's own connection, it is
    UNAVAILABLE, and the controller asks again."""
    from nodeagent.host.hypervisor import Hypervisor
    hv = Hypervisor("test:///default")

    def restore(conn):
        hv._conn = None   # what the other thread's failed reconnect left behind
        raise rpc_error("End of file while reading data: Input/output error")

    with pytest.raises(HypervisorUnavailable, match="End of file"):
        hv._call("restore from x.save", restore, retry=False)
    refused = rpc_error("operation failed: domain is already running", libvirt.VIR_ERR_OPERATION_FAILED,
                        libvirt.VIR_FROM_QEMU)

    def refuse(conn):
        raise refused

    with pytest.raises(HypervisorRefused):   # an answer from a live connection stays what it is
        hv._call("restore from x.save", refuse, retry=False)
    hv.close()

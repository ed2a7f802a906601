"""Logs (issue 27, item 5): gRPC's C-core lines and APScheduler's warnings come out as structured
logfmt lines like every other, and booleans print as lowercase true/false.

The C-core lines are provoked in a real controller process (mutual TLS) by what the issue saw: a
TLS client asking for a server name the controller's certificate does not hold, and a plain-text
client on the TLS port. APScheduler's warning is a real scheduler skipping a job."""
from __future__ import annotations

import io
import logging
import os
import socket
import ssl
import threading

import pytest
from apscheduler.schedulers.background import BackgroundScheduler

from gleaner_common.logs import LogfmtFormatter, log_event, native_line
from gleaner_common.pki import ensure_lab_pki
from tests.agentproc import LabEnv, wait_for
from tests.controllerproc import ControllerProcess


def formatted(logger_name: str) -> tuple[logging.Logger, io.StringIO, logging.Handler]:
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(LogfmtFormatter())
    logger = logging.getLogger(logger_name)
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    return logger, out, handler


def test_booleans_print_lowercase():
    logger, out, handler = formatted("test.booleans")
    try:
        log_event(logger, "thing.done", ok=True, failed=False, count=1, word="True")
    finally:
        logger.removeHandler(handler)
    line = out.getvalue().strip()
    assert line.endswith(" event=thing.done ok=true failed=false count=1 word=True"), line


def test_apschedulers_warning_is_an_event_with_its_text():
    logger, out, handler = formatted("apscheduler")
    gate = threading.Event()
    scheduler = BackgroundScheduler(daemon=True)
    try:
        scheduler.start()
        scheduler.add_job(gate.wait, "interval", seconds=0.2, max_instances=1, id="slow")   # the first run blocks
        wait_for(lambda: "scheduler.job_skipped" in out.getvalue(), 10, "APScheduler to skip the second run")
    finally:
        gate.set()
        scheduler.shutdown(wait=False)
        logger.removeHandler(handler)
    line = next(l for l in out.getvalue().splitlines() if "scheduler.job_skipped" in l)
    assert line.startswith("ts=") and " level=warning logger=apscheduler." in line
    assert ' event=scheduler.job_skipped text="Execution of job ' in line and "maximum number of running instances" \
        in line, line


def test_native_lines_parse_by_their_letter():
    level, event, fields = native_line("E1126 14:50:08.664808    1854 ssl_transport_security.cc:3238] No match "
                                       "found for server name: nomatch.example")
    assert (level, event, fields) == (logging.ERROR, "grpc.core", {"where": "ssl_transport_security.cc:3238",
                                                                    "text": "No match found for server name: "
                                                                            "nomatch.example"})
    assert native_line("I0101 00:00:00.000000 1 a.cc:1] hi")[0] == logging.INFO
    assert native_line("something else") == (logging.WARNING, "stderr.line", {"text": "something else"})


@pytest.fixture
def controller(tmp_path):
    (tmp_path / "images").mkdir()
    env = LabEnv(root=tmp_path, image_dir=tmp_path / "images", pki=ensure_lab_pki(tmp_path / "pki"))
    proc = ControllerProcess(env, name="logs-ctl")
    saved = {k: os.environ.pop(k) for k in ("GRPC_VERBOSITY", "GRPC_TRACE") if k in os.environ}
    try:
        proc.start()   # with the environment of an admin's shell: no gRPC settings
    finally:
        os.environ.update(saved)
    yield proc
    proc.stop()


def test_grpc_core_lines_come_out_structured_from_a_real_controller(controller):
    with socket.create_connection(("127.0.0.1", controller.port)) as plain:   # plain text on the TLS port
        plain.sendall(b"GET / HTTP/1.0\r\n\r\n")
        plain.settimeout(5)
        try:
            plain.recv(100)
        except OSError:
            pass
    admin = controller.env.pki.admin
    context = ssl.create_default_context(cafile=str(admin.ca))
    context.load_cert_chain(str(admin.cert), str(admin.key))
    context.check_hostname = False
    try:   # a server name its certificate does not hold: the server logs it (and may go on)
        with context.wrap_socket(socket.create_connection(("127.0.0.1", controller.port)),
                                 server_hostname="nomatch.example"):
            pass
    except (ssl.SSLError, OSError):
        pass
    wait_for(lambda: "No match found for server name" in controller.log_text(), 10, "the C core's line")
    controller.stop()
    lines = controller.log_text().splitlines()
    raw = [l for l in lines if not l.startswith("ts=")]
    assert raw == [], raw[:5]
    core = [l for l in lines if " event=grpc.core " in l]
    assert any(" level=error logger=native event=grpc.core where=ssl_transport_security.cc:" in l
               and 'text="No match found for server name: nomatch.example"' in l for l in core), core
    # GRPC_VERBOSITY is ERROR unless the environment says otherwise: the handshake's info line is not written
    assert not any("Handshake failed" in l for l in core), core
    assert any(" backfill=off" in l for l in lines)   # and the controller's own lines are as before

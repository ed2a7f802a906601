"""The agent checks at start-up that QEMU hands console output to virtlogd (qemu.conf's
stdio_handler = "logd"), which bounds console logs and work channels (issue 23). Real files."""
from __future__ import annotations

import pytest

from nodeagent import cli
from nodeagent.host import libvirtconf
from nodeagent.host.libvirtconf import LibvirtConfError, check_stdio_handler, stdio_handler


@pytest.mark.parametrize("text,effective", [
    ("", "logd"),                                             # libvirt's default
    ('#stdio_handler = "file"\n', "logd"),                    # commented out
    ('stdio_handler = "file"\n', "file"),
    ("  stdio_handler='file'   # mine\n", "file"),
    ('stdio_handler = "file"\nstdio_handler = "logd"\n', "logd"),   # the last one counts
    ('stdio_handler = "logd"\nstdio_handler = "file"\n', "file"),
    ('my_stdio_handler = "file"\n', "logd"),
])
def test_the_effective_setting_is_the_last_one_not_commented_out(text, effective):
    assert stdio_handler(text) == effective


def test_file_is_refused_naming_the_file_and_the_setting(tmp_path):
    conf = tmp_path / "qemu.conf"
    conf.write_text('stdio_handler = "file"\n')
    with pytest.raises(LibvirtConfError) as err:
        check_stdio_handler("qemu:///system", conf)
    assert str(err.value).startswith(f'{conf} sets stdio_handler = "file"; the agent needs "logd"')
    assert "restart libvirtd" in str(err.value)
    check_stdio_handler("test:///default", conf)        # no qemu.conf behind these: nothing to check
    check_stdio_handler("qemu:///session", conf)
    conf.write_text('stdio_handler = "logd"\n')
    check_stdio_handler("qemu:///system", conf)
    check_stdio_handler("qemu:///system", tmp_path / "missing.conf")   # no file: libvirt's default


def test_the_daemon_refuses_to_start_with_the_file_handler(tmp_path, monkeypatch, capsys):
    conf = tmp_path / "qemu.conf"
    conf.write_text('stdio_handler = "file"\n')
    monkeypatch.setattr(libvirtconf, "QEMU_CONF", conf)
    (tmp_path / "a-file").write_text("")   # a state directory that cannot be made: without the check,
    config = tmp_path / "agent.toml"      # the agent would fail later, with 1, rather than serve
    config.write_text(f'[agent]\nlisten = "unix:{tmp_path}/agent.sock"\nstate_dir = "{tmp_path}/a-file/state"\n')
    assert cli.main(["--config", str(config), "--insecure"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f'gleaner-agent: {conf} sets stdio_handler = "file"; the agent needs "logd"')

"""Configuration: strict parsing, clear errors, and insecure mode only where it is safe."""
from __future__ import annotations

from pathlib import Path

import pytest

import tomllib

from nodeagent.config import AgentConfig, ConfigError, TlsConfig, load_config, parse_config, to_toml, with_overrides

TLS = '[tls]\nca = "/pki/ca.pem"\ncert = "/pki/s.pem"\nkey = "/pki/s.key"\n'


def load(tmp_path, text: str) -> AgentConfig:
    path = tmp_path / "agent.toml"
    path.write_text(text)
    return with_overrides(load_config(path), source=str(path))


def test_full_config_is_read(tmp_path):
    config = load(tmp_path, '[agent]\nlisten = "0.0.0.0:9000"\nstate_dir = "/srv/g"\n'
                            '[libvirt]\ndomain_type = "kvm"\n[lifecycle]\ngrace_seconds = 45\n'
                            'reap_interval_seconds = 2\nconsole_keep_seconds = 0\n' + TLS)
    assert config.listen == "0.0.0.0:9000" and config.state_dir == Path("/srv/g")
    assert config.domain_type == "kvm" and config.grace_seconds == 45 and config.reap_interval_seconds == 2.0
    assert config.tls.ca == Path("/pki/ca.pem") and not config.tls.insecure
    assert config.overlay_dir == Path("/srv/g/overlays")
    assert config.console_keep_seconds == 0.0 and AgentConfig().console_keep_seconds == 3 * 86400


@pytest.mark.parametrize("text,says", [
    ('[agent]\nlisen = "x:1"\n' + TLS, "unknown key agent.lisen"),
    ('[agnet]\n' + TLS, "unknown section [agnet]"),
    ('[lifecycle]\ngrace_seconds = "30"\n' + TLS, "lifecycle.grace_seconds: expected int"),
    ('[lifecycle]\ngrace_seconds = true\n' + TLS, "expected int"),
    ('[lifecycle]\ngrace_seconds = 99999\n' + TLS, "grace_seconds must be within 0..3600"),
    ('[libvirt]\ndomain_type = "xen"\n' + TLS, "domain_type must be one of auto, kvm, qemu"),
    ('[agent]\nlisten = "nowhere"\n' + TLS, "must be HOST:PORT or unix:PATH"),
    ('[agent]\nlisten = "0.0.0.0:1"\n', "mutual TLS needs [tls] ca, cert, key"),
    ('[agent]\nlisten = "0.0.0.0:1"\n[tls]\ninsecure = true\n', "only allowed on a unix socket"),
    ('[agent]\nlisten = "127.0.0.1:1"\n[tls]\ninsecure = true\n', "only allowed on a unix socket"),
    ('not toml at all [', "not valid TOML"),
    ('[agent]\nid = "has space"\n' + TLS, "agent.id: 'has space' is not valid"),
    ('[agent]\nid = "Node1"\n' + TLS, "a DNS label"),
    ('[guard]\nperiod_seconds = 1\nslice_ms = 1000\n' + TLS, "slice_ms must be shorter than"),
    ('[priority]\nvolunteer_weight_v1 = 1\n' + TLS, "volunteer_weight_v1 must be within 2..262144"),
    ('[network]\nattach = "bridge:br0;rm"\n' + TLS, "network.attach 'bridge:br0;rm' must be none, ethernet"),
    ('[disk]\nvolunteer_weight = 5\n' + TLS, "disk.volunteer_weight must be within 100..1000"),
    ('[metrics]\nlisten = "nowhere"\n' + TLS, "metrics.listen 'nowhere' must be HOST:PORT"),
    ('[lifecycle]\nconsole_keep_seconds = -1\n' + TLS, "console_keep_seconds must be within 0..31622400"),
    ('[lifecycle]\nconsole_keep_seconds = nan\n' + TLS, "console_keep_seconds must be within"),
    ('[lifecycle]\nconsole_keep_seconds = inf\n' + TLS, "console_keep_seconds must be within"),
])
def test_bad_config_is_refused_with_a_clear_message(tmp_path, text, says):
    with pytest.raises(ConfigError) as err:
        load(tmp_path, text)
    assert says in str(err.value) and "agent.toml" in str(err.value)


def test_missing_file_is_named():
    with pytest.raises(ConfigError, match="cannot read config /nonexistent.toml"):
        load_config(Path("/nonexistent.toml"))


def test_overrides_apply_before_the_check():
    config = with_overrides(AgentConfig(), listen="unix:/run/gleaner/agent.sock", insecure=True)
    assert config.tls.insecure and config.listen == "unix:/run/gleaner/agent.sock"
    for listen in ("127.0.0.1:7000", "localhost:7000", "[::1]:7000", "192.168.1.5:7000"):
        with pytest.raises(ConfigError, match="only allowed on a unix socket"):
            with_overrides(AgentConfig(), listen=listen, insecure=True)


def test_to_toml_round_trips():
    config = AgentConfig(listen="[::1]:9", state_dir=Path('/srv/with "quote"'), domain_type="kvm", grace_seconds=7,
                         reap_interval_seconds=0.5, tls=TlsConfig(ca=Path("/p/ca.pem"), cert=Path("/p/c.pem"),
                                                                  key=Path("/p/c.key"), deny_list=Path("/p/r.txt")))
    assert parse_config(tomllib.loads(to_toml(config))) == config
    insecure = AgentConfig(tls=TlsConfig(insecure=True))
    assert parse_config(tomllib.loads(to_toml(insecure))) == insecure

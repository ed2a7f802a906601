"""TOML configuration shared by the agent, the controller and gleanctl: strict parsing (unknown
sections and keys are errors, so a typo never silently leaves a default in force), the [tls]
section, and the rule that TLS is off only on a unix socket."""
from __future__ import annotations

import json
import re
import tomllib
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any, Callable

from .pki import TlsFiles

HOST_PORT = re.compile(r"(\[[0-9a-fA-F:]+\]|[A-Za-z0-9.-]+):\d{1,5}")


class ConfigError(ValueError):
    """The configuration is unusable; the message names the file, key and problem."""


@dataclass(frozen=True)
class TlsConfig:
    ca: Path | None = None
    cert: Path | None = None
    key: Path | None = None
    deny_list: Path | None = None     # revoked serials (see pki.py); servers read it at start and on
                                      # SIGHUP, clients whenever it changes (they check whom they dial)
    insecure: bool = False

    @property
    def files(self) -> TlsFiles | None:
        """The certificate files, or None without TLS."""
        if self.insecure or self.ca is None or self.cert is None or self.key is None:
            return None
        return TlsFiles(self.ca, self.cert, self.key, self.deny_list)


_TLS_KEYS = {f.name: (Path if f.name != "insecure" else bool) for f in fields(TlsConfig)}
Schema = dict[str, dict[str, tuple[str, type]]]


def _coerce(where: str, value: Any, kind: type) -> Any:
    if kind is Path:
        if not isinstance(value, str) or not value:
            raise ConfigError(f"{where}: expected a path string, got {value!r}")
        return Path(value)
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise ConfigError(f"{where}: expected {kind.__name__}, got {value!r}")
    return value


def parse_sections(data: dict[str, Any], schema: Schema, source: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """Check a TOML document against {section: {key: (attribute, type)}} plus [tls];
    returns (attributes, tls fields). Unknown sections, keys and wrong types are errors."""
    values: dict[str, Any] = {}
    tls: dict[str, Any] = {}
    for section, body in data.items():
        if not isinstance(body, dict):
            raise ConfigError(f"{source}: [{section}] must be a table")
        if section == "tls":
            keys = {k: (k, t) for k, t in _TLS_KEYS.items()}
            target = tls
        elif section in schema:
            keys, target = schema[section], values
        else:
            raise ConfigError(f"{source}: unknown section [{section}]; known: "
                              f"{', '.join(sorted([*schema, 'tls']))}")
        for key, value in body.items():
            if key not in keys:
                raise ConfigError(f"{source}: unknown key {section}.{key}; known: {', '.join(sorted(keys))}")
            attr, kind = keys[key]
            target[attr] = _coerce(f"{source}: {section}.{key}", value, kind)
    return values, tls


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return json.dumps(str(value)) if isinstance(value, (str, Path)) else str(value)


def toml_text(sections: dict[str, dict[str, Any]]) -> str:
    """Sections of plain values (strings, paths, numbers, booleans) as TOML; None is left out."""
    lines = []
    for section, values in sections.items():
        lines.append(f"[{section}]")
        lines += [f"{key} = {_toml_value(value)}" for key, value in values.items() if value is not None]
    return "\n".join(lines) + "\n"


def tls_section(tls: TlsConfig) -> dict[str, Any]:
    return {key: getattr(tls, key) for key in _TLS_KEYS}


def sections_to_toml(config: Any, schema: Schema, tls: TlsConfig) -> str:
    """A configuration as TOML that parse_sections reads back to the same values."""
    sections = {section: {key: getattr(config, attr) for key, (attr, _) in keys.items()}
                for section, keys in schema.items()}
    return toml_text({**sections, "tls": tls_section(tls)})


def read_toml(path: Path) -> dict[str, Any]:
    try:
        return tomllib.loads(path.read_text())
    except OSError as exc:
        raise ConfigError(f"cannot read config {path}: {exc.strerror}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from None


def check_listen(listen: str, key: str, source: str) -> None:
    if not (listen.startswith("unix:") or HOST_PORT.fullmatch(listen)):
        raise ConfigError(f"{source}: {key} {listen!r} must be HOST:PORT or unix:PATH")


def check_tls(tls: TlsConfig, listen: str, source: str) -> None:
    """Mutual TLS, unless insecure on a unix socket: on loopback TCP any local user could drive
    a server that runs as root, so plaintext is allowed only where file permissions guard it."""
    if tls.insecure:
        if not listen.startswith("unix:"):
            raise ConfigError(f"{source}: insecure mode (no TLS) is only allowed on a unix socket "
                              f"(unix:/run/gleaner/NAME.sock), not on {listen!r}: on TCP, even loopback, any "
                              "local user could connect; configure [tls] ca, cert and key instead")
        return
    missing = [k for k in ("ca", "cert", "key") if getattr(tls, k) is None]
    if missing:
        raise ConfigError(f"{source}: mutual TLS needs [tls] {', '.join(missing)} "
                          "(or --insecure on a unix socket for local use)")


def with_overrides(config: Any, check: Callable[[Any, str], None], listen: str | None = None,
                   insecure: bool = False, source: str = "configuration") -> Any:
    """Apply --listen / --insecure from the command line, then check the whole configuration."""
    if listen:
        config = replace(config, listen=listen)
    if insecure:
        config = replace(config, tls=replace(config.tls, insecure=True))
    check(config, source)
    return config

"""TOML configuration shared by the agent, the controller and gleanctl: strict parsing (unknown
sections and keys are errors, so a typo never silently leaves a default in force), bounds on
every number, the [tls] section, the rule that TLS is off only on a unix socket, and what a
network address may be."""
from __future__ import annotations

import ipaddress
import json
import math
import re
import tomllib
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any, Callable

from .ids import InvalidField, bounded
from .pki import TlsFiles

# A DNS name as RFC 1123 has it: labels of letters, digits and '-', neither first nor last.
DNS_LABEL = re.compile(r"[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?")
MAX_DNS_NAME = 253
MAX_ADDRESS_LENGTH = MAX_DNS_NAME + len(":65535")
# gRPC reads NAME:REST as a URI when NAME is one of its resolvers' schemes (in any case):
# "unix:80" is the socket ./80, "dns:80" the host 80. A host so named is refused (grpcio 1.85
# knows all but vsock, which newer releases add).
GRPC_SCHEMES = frozenset({"dns", "ipv4", "ipv6", "unix", "unix-abstract", "vsock", "xds", "google-c2p", "fake"})


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
Range = tuple[float, float]   # inclusive bounds of a number setting
# {section: {key: (attribute, type)}}; a number (int or float) also has its Range third.
Schema = dict[str, dict[str, tuple]]
NUMBERS = (int, float)


def number_keys(schema: Schema) -> dict[str, tuple[str, Range]]:
    """{"section.key": (attribute, range)} for every number in `schema`. A number without a range
    is a programming error, raised at import (where the schema is checked), never at a start."""
    found = {}
    for section, keys in schema.items():
        for key, (attr, kind, *rest) in keys.items():
            if kind in NUMBERS:
                if len(rest) != 1 or not rest[0][0] <= rest[0][1]:
                    raise TypeError(f"setting {section}.{key} is a number without a (low, high) range")
                found[f"{section}.{key}"] = (attr, rest[0])
    return found


def _number(value: float) -> str:
    """1e+07 as 10000000, 0.5 as 0.5: bounds and values as an admin writes them."""
    if isinstance(value, float) and math.isfinite(value) and value.is_integer() and abs(value) < 1e16:
        return str(int(value))
    return str(value)


def check_range(source: str, key: str, value: float, low: float, high: float, unit: str = "") -> None:
    """A number within [low, high], finite (NaN and the infinities are within no range: TOML has
    them, and nan slips through any `value <= 0`); ConfigError names the file, key, value, range."""
    try:
        bounded(value, low, high, key)
    except InvalidField:
        suffix = f" {unit}" if unit else ""
        raise ConfigError(f"{source}: {key} must be within {_number(low)}..{_number(high)}{suffix} "
                          f"(a finite number), not {_number(value)}") from None


def check_numbers(config: Any, schema: Schema, source: str) -> None:
    """Every number setting of `config` within its schema range."""
    for key, (attr, (low, high)) in number_keys(schema).items():
        check_range(source, key, getattr(config, attr), low, high)


def _coerce(where: str, value: Any, kind: type, bounds: Range | None = None) -> Any:
    if kind is Path:
        if not isinstance(value, str) or not value:
            raise ConfigError(f"{where}: expected a path string, got {value!r}")
        return Path(value)
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        within = f" within {_number(bounds[0])}..{_number(bounds[1])}" if bounds else ""
        raise ConfigError(f"{where}: expected {kind.__name__}{within}, got {value!r}")
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
            attr, kind, *bounds = keys[key]
            target[attr] = _coerce(f"{source}: {section}.{key}", value, kind, *bounds)
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
    sections = {section: {key: getattr(config, entry[0]) for key, entry in keys.items()}
                for section, keys in schema.items()}
    return toml_text({**sections, "tls": tls_section(tls)})


def read_toml(path: Path) -> dict[str, Any]:
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"cannot read config {path}: {exc.strerror}") from None
    try:
        text = data.decode("utf-8")   # TOML is UTF-8, whatever the locale says
    except UnicodeDecodeError as exc:
        line = data[:exc.start].count(b"\n") + 1
        raise ConfigError(f"{path}: not valid TOML: not UTF-8 (byte {data[exc.start]:#04x} at line {line}, "
                          f"offset {exc.start}); TOML files are UTF-8 text") from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from None


def host_port_problem(address: str, port_zero: bool = False) -> str | None:
    """What is wrong with `address` as HOST:PORT (None: nothing). HOST is an IPv4 literal, an IPv6
    literal in brackets, or a DNS name of RFC 1123 labels; PORT is 1..65535 (0 too with
    `port_zero`, for a listener that takes any port). Nothing else: no scheme, path, user or
    spaces, so gRPC can only read it as a host and port (never unix:, dns:, ...)."""
    if not isinstance(address, str) or not address:
        return "it is empty"
    if len(address) > MAX_ADDRESS_LENGTH:
        return f"it is longer than {MAX_ADDRESS_LENGTH} characters"
    host, sep, port = address.rpartition(":")
    if not sep or not host:
        return "it has no HOST before a :PORT"
    low = 0 if port_zero else 1
    if not (port.isascii() and port.isdigit() and len(port) <= 5 and low <= int(port) <= 65535
            and (port == "0" or not port.startswith("0"))):
        return f"port {port[:8]!r} is not a number within {low}..65535"
    if host.startswith("[") and host.endswith("]"):
        return _ipv6_problem(host[1:-1])
    return _host_problem(host)


def _ipv6_problem(literal: str) -> str | None:
    try:
        if "%" in literal:   # a zone belongs to one host's interfaces, not to an address others dial
            raise ValueError
        ipaddress.IPv6Address(literal)
    except ValueError:
        return f"[{literal[:45]}] is not an IPv6 address"
    return None


def _host_problem(host: str) -> str | None:
    if re.fullmatch(r"[0-9.]+", host):   # digits and dots are an IPv4 literal or nothing
        try:
            ipaddress.IPv4Address(host)
        except ValueError:
            return f"{host[:20]!r} is not an IPv4 address"
        return None
    labels = host.split(".")
    if len(host) > MAX_DNS_NAME or not all(DNS_LABEL.fullmatch(label) for label in labels):
        return (f"host {host[:80]!r} is not an IPv4 address, a [bracketed] IPv6 address or a DNS name "
                "(labels of letters, digits and '-', at most 63 each, 253 in all)")
    if labels[-1].isdigit():
        return f"host {host[:80]!r}: a DNS name's last label is not all digits"
    if host.lower() in GRPC_SCHEMES:
        return f"host {host!r} is a gRPC scheme ({host.lower()}:...), not a host; name the host fully"
    return None


def is_loopback(host: str) -> bool:
    """Whether HOST (a name or an address literal, without brackets) is this machine only."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_address(address: str, key: str, source: str, port_zero: bool = False) -> None:
    """ConfigError unless `address` is HOST:PORT (host_port_problem)."""
    problem = host_port_problem(address, port_zero)
    if problem:
        raise ConfigError(f"{source}: {key} {address[:80]!r} must be HOST:PORT: {problem}")


def check_listen(listen: str, key: str, source: str) -> None:
    if listen.startswith("unix:"):
        return
    problem = host_port_problem(listen, port_zero=True)
    if problem:
        raise ConfigError(f"{source}: {key} {listen[:80]!r} must be HOST:PORT or unix:PATH: {problem}")


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

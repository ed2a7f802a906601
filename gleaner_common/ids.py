"""The rules for every id and name a client may send, and for the numbers checked with them, in
one place for agent, controller and gleanctl. Pure: a value in, the same value out or
InvalidField naming the field."""
from __future__ import annotations

import re


class InvalidField(ValueError):
    """A field is invalid; `field` names it, so the client knows what to fix."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


# Node ids are DNS labels (as Kubernetes node names are): each agent's certificate carries
# NODE.agent.gleaner, which the controller checks when it dials the agent.
NODE_ID = re.compile(r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?")
# What a backfill guest may say of its work on its channel ("": nothing yet), and the oldest age
# an agent reports for it: the agent clamps to it and the controller refuses more, so the two
# can never disagree and cost a node its reports.
WORK_STATES = ("", "idle", "busy")
MAX_WORK_AGE_SECONDS = 10 * 365 * 86400
# libvirt domain names Gleaner makes and accepts.
VM_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,62}")
LEASE_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}")
REQUEST_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
# Owners of VMs and the people named in admin and viewer certificates.
PERSON = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.@-]{0,63}")
IMAGE_PART = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
IMAGE_DEPTH = 4
VM_NAME_PREFIX = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,30}")


def _check(pattern: re.Pattern[str], value: str, field: str, rule: str) -> str:
    if not isinstance(value, str) or not pattern.fullmatch(value):
        shown = value if isinstance(value, str) and len(value) <= 80 else f"{str(value)[:77]}..."
        raise InvalidField(field, f"{shown!r} is not valid: {rule}")
    return value


def node_id(value: str, field: str = "node_id") -> str:
    return _check(NODE_ID, value, field, "1-63 lowercase letters, digits or '-', starting and ending "
                                         "with a letter or digit (a DNS label)")


def vm_name(value: str, field: str = "name") -> str:
    return _check(VM_NAME, value, field, "1-63 letters, digits, '-' or '_', starting with a letter or digit")


def lease_id(value: str, field: str = "lease_id") -> str:
    return _check(LEASE_ID, value, field, "1-64 letters, digits, '.', ':', '-' or '_', starting with a "
                                          "letter or digit")


def request_id(value: str, field: str = "request_id") -> str:
    return _check(REQUEST_ID, value, field, "1-64 letters, digits, '.', '-' or '_', starting with a "
                                            "letter or digit")


def person(value: str, field: str = "owner") -> str:
    return _check(PERSON, value, field, "1-64 letters, digits, '.', '-', '_' or '@', starting with a "
                                        "letter or digit")


def vm_name_prefix(value: str, field: str = "vm_name_prefix") -> str:
    return _check(VM_NAME_PREFIX, value, field, "1-31 letters, digits, '-' or '_', starting with a letter "
                                                "or digit")


def image(value: str, field: str = "image") -> str:
    """An image is named relative to the agents' image directory: 1 to 4 plain path parts."""
    if not isinstance(value, str) or not value:
        raise InvalidField(field, "is required")
    if value.startswith("/"):
        raise InvalidField(field, f"{value[:80]!r} is absolute; name an image inside the image directory")
    parts = value.split("/")
    if len(parts) > IMAGE_DEPTH:
        raise InvalidField(field, f"{value[:80]!r} has {len(parts)} path parts; at most {IMAGE_DEPTH}")
    for part in parts:
        if part in ("", ".", ".."):
            raise InvalidField(field, f"{value[:80]!r} has an empty, '.' or '..' path part")
        if not IMAGE_PART.fullmatch(part):
            raise InvalidField(field, f"{value[:80]!r}: path part {part[:80]!r} must be 1-64 letters, digits, "
                                      "'.', '-' or '_', starting with a letter or digit")
    return value


def bounded(value: int | float, low: int | float, high: int | float, field: str, unit: str = "") -> int | float:
    """A number within [low, high]; the error names the range."""
    if not low <= value <= high:
        suffix = f" {unit}" if unit else ""
        raise InvalidField(field, f"{value}{suffix} is outside {low}..{high}{suffix}")
    return value


def number(value: object, low: float, high: float, field: str, unit: str = "") -> float:
    """A finite number within [low, high] (not a bool), or InvalidField naming the field and the range."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidField(field, f"{value!r} is not a number")
    return float(bounded(value, low, high, field, unit))   # NaN fails the range too


def whole(value: object, high: int, field: str, unit: str) -> int:
    """A whole number within 0..high (not a bool), or InvalidField naming the field and the range."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidField(field, f"{value!r} is not a whole number of {unit}")
    return int(bounded(value, 0, high, field, unit))

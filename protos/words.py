"""The vocabulary's words on the wire (gleaner_common/vocabulary.py <-> the protos' enums).

A word such as ``on_demand`` or ``on_notice`` travels as an enum value named PREFIX + WORD in
capitals (VM_ROLE_ON_DEMAND, LEASE_STATE_ON_NOTICE); number 0, UNSPECIFIED, is what a sender that
did not set the field (a previous release) leaves, and then the string field beside it is the
word (docs/development.md, mixed versions)."""
from __future__ import annotations

from google.protobuf.internal.enum_type_wrapper import EnumTypeWrapper

VM_ROLE = "VM_ROLE_"
LEASE_STATE = "LEASE_STATE_"
REQUEST_OUTCOME = "REQUEST_OUTCOME_"


def to_wire(enum: EnumTypeWrapper, prefix: str, word: str) -> int:
    """The enum value of a word; 0 (UNSPECIFIED) for a word the enum does not have."""
    try:
        return enum.Value(prefix + word.upper())
    except ValueError:
        return 0


def from_wire(enum: EnumTypeWrapper, prefix: str, number: int, string: str = "") -> str:
    """The word an enum value names; `string` (the older field) when it is UNSPECIFIED. A number
    this release does not know (a newer sender) raises ValueError."""
    if number == 0:
        return string
    return enum.Name(number).removeprefix(prefix).lower()

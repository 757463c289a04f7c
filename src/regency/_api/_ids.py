"""``Uid`` and ``ProcId``: Monarch's identity values, parsed and printed in Monarch's syntax.

Pure values (no I/O). A uid is a *singleton* (a label alone: ``"trainer"``) or an *instance*
(an optional label and a 64-bit value in base 58: ``"trainer<4ER>"``, ``"<4ER>"``). Labels
start with a lowercase letter, end with a lowercase letter or digit, and hold lowercase
letters, digits, ``-`` and ``_``.
"""

from __future__ import annotations

import re
import secrets

__all__ = ["ProcId", "Uid"]

_ALPHABET = "123456789abcdefghijkmnopqrstuvwxyzABCDEFGHJKLMNPQRSTUVWXYZ"
_DIGIT = {c: i for i, c in enumerate(_ALPHABET)}
_LABEL = re.compile(r"[a-z](?:[a-z0-9_-]*[a-z0-9])?")
_MAX = (1 << 64) - 1


def _encode(value: int) -> str:
    digits = ""
    while True:
        value, rest = divmod(value, 58)
        digits = _ALPHABET[rest] + digits
        if not value:
            return digits


def _decode(text: str) -> int:
    value = 0
    for char in text:
        if char not in _DIGIT:
            raise ValueError(f"invalid uid: invalid base58 uid: {text}")
        value = value * 58 + _DIGIT[char]
    if not text or value > _MAX:
        raise ValueError(f"invalid uid: invalid base58 uid: {text}")
    return value


def _check_label(label: str) -> str:
    if not _LABEL.fullmatch(label):
        raise ValueError(f"invalid uid: invalid label {label!r}: a label starts with a "
                         "lowercase letter, ends with a lowercase letter or digit, and holds "
                         "lowercase letters, digits, '-' and '_'")
    return label


class Uid:
    """A unique identifier: a singleton label, or a fresh (or given) 64-bit instance value."""

    __slots__ = ("_label", "_value")
    _label: str | None
    _value: int | None

    def __init__(self) -> None:
        raise TypeError("make a Uid with Uid.instance(), Uid.anonymous(), "
                        "Uid.instance_from_value() or Uid.from_string()")

    @classmethod
    def _make(cls, label: str | None, value: int | None) -> Uid:
        self = object.__new__(cls)
        self._label = _check_label(label) if label is not None else None
        if value is not None and not 0 <= value <= _MAX:
            raise ValueError(f"a uid value is a 64-bit unsigned integer, not {value}")
        self._value = value
        return self

    @staticmethod
    def anonymous() -> Uid:
        """A fresh instance uid with no label."""
        return Uid._make(None, secrets.randbits(64))

    @staticmethod
    def instance(label: str | None = None) -> Uid:
        """A fresh instance uid, with an optional label."""
        return Uid._make(label, secrets.randbits(64))

    @staticmethod
    def instance_from_value(value: int, label: str | None = None) -> Uid:
        """An instance uid with the given 64-bit value."""
        return Uid._make(label, value)

    @staticmethod
    def from_string(uid: str) -> Uid:
        """Parse ``"label"``, ``"label<value>"`` or ``"<value>"``.

        Raises:
            ValueError: the text is not a uid.
        """
        if uid.endswith(">") and "<" in uid:
            label, _, rest = uid[:-1].partition("<")
            return Uid._make(label or None, _decode(rest))
        return Uid._make(uid, None)

    @property
    def label(self) -> str | None:
        """The label, if any."""
        return self._label

    @property
    def is_instance(self) -> bool:
        """Whether this uid has an instance value."""
        return self._value is not None

    @property
    def is_singleton(self) -> bool:
        """Whether this uid is a label alone."""
        return self._value is None

    @property
    def instance_value(self) -> int | None:
        """The 64-bit instance value (None for a singleton)."""
        return self._value

    def __str__(self) -> str:
        label = self._label or ""
        return label if self._value is None else f"{label}<{_encode(self._value)}>"

    def __repr__(self) -> str:
        return f"Uid({str(self)!r})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Uid):
            return NotImplemented
        return (self._label, self._value) == (other._label, other._value)

    def __hash__(self) -> int:
        return hash((self._label, self._value))

    def __reduce__(self) -> tuple[object, tuple[str]]:
        return (Uid.from_string, (str(self),))


class ProcId:
    """The identity of a proc: a :class:`Uid`."""

    __slots__ = ("_uid",)

    def __init__(self, uid: Uid) -> None:
        if not isinstance(uid, Uid):
            raise TypeError(f"ProcId needs a Uid, not {type(uid).__name__}")
        self._uid = uid

    @staticmethod
    def from_string(proc_id: str) -> ProcId:
        """Parse a proc id (the text of its uid)."""
        try:
            return ProcId(Uid.from_string(proc_id))
        except ValueError as exc:
            raise ValueError(f"invalid proc id: {exc}") from None

    @property
    def uid(self) -> Uid:
        """The proc's uid."""
        return self._uid

    @property
    def label(self) -> str | None:
        """The uid's label."""
        return self._uid.label

    def __str__(self) -> str:
        return str(self._uid)

    def __repr__(self) -> str:
        return f"ProcId({str(self)!r})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ProcId):
            return NotImplemented
        return self._uid == other._uid

    def __hash__(self) -> int:
        return hash(("proc", self._uid))

    def __reduce__(self) -> tuple[object, tuple[Uid]]:
        return (ProcId, (self._uid,))

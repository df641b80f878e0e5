"""Memory kinds: what an item is, with a stable one-byte code and a class.

The codes are part of the wire format and of content ids: never renumber them.

>>> memory_kind_code("summary")
3
>>> memory_kind_class("message")
'episodic'
"""

from __future__ import annotations

import enum

from .errors import InvalidInput, UnknownKind, shown

__all__ = ["MemoryClass", "MemoryKind", "memory_kind_class", "memory_kind_code", "parse_kind"]


class MemoryClass(enum.StrEnum):
    """The broad class of a memory kind."""

    SEMANTIC = "semantic"
    EPISODIC = "episodic"
    PROCEDURAL = "procedural"

    @classmethod
    def _missing_(cls, value: object) -> MemoryClass:
        # Still a ValueError, as the enum's own, with what the classes are.
        raise InvalidInput(
            f"unknown memory class {shown(value)}; use one of: {', '.join(c.value for c in cls)}"
        )


class MemoryKind(enum.StrEnum):
    """The kind of a memory item; its value is the lowercase word the API takes."""

    FACT = "fact"
    MESSAGE = "message"
    SUMMARY = "summary"
    ENTITY = "entity"
    FEEDBACK = "feedback"
    PROCEDURE = "procedure"

    @classmethod
    def _missing_(cls, value: object) -> MemoryKind:
        """``MemoryKind(word)`` reads a word as `parse_kind` does (any case); an unknown
        one is `UnknownKind`, still a ValueError as the enum's own was."""
        if isinstance(value, str):
            known = _BY_WORD.get(str.lower(value))  # a subclass's own lower is not asked
            if known is not None:
                return known
        raise _unknown_kind(value)

    @property
    def code(self) -> int:
        """The stable one-byte code written on the log."""
        return _CODES[self]

    @property
    def memory_class(self) -> MemoryClass:
        return _CLASSES[self]

    @classmethod
    def from_code(cls, code: int) -> MemoryKind:
        # An int only: True was code 1 (fact), and a list a raw TypeError.
        kind = _BY_CODE.get(code) if type(code) is int else None
        if kind is None:
            raise UnknownKind(
                f"unknown memory kind code {shown(code)}; known codes are "
                f"{', '.join(f'{c} ({k.value})' for c, k in sorted(_BY_CODE.items()))}"
            )
        return kind


_CODES: dict[MemoryKind, int] = {
    MemoryKind.FACT: 1,
    MemoryKind.MESSAGE: 2,
    MemoryKind.SUMMARY: 3,
    MemoryKind.ENTITY: 4,
    MemoryKind.FEEDBACK: 5,
    MemoryKind.PROCEDURE: 6,
}
_BY_CODE = {code: kind for kind, code in _CODES.items()}
_CLASSES: dict[MemoryKind, MemoryClass] = {
    MemoryKind.FACT: MemoryClass.SEMANTIC,
    MemoryKind.SUMMARY: MemoryClass.SEMANTIC,
    MemoryKind.ENTITY: MemoryClass.SEMANTIC,
    MemoryKind.FEEDBACK: MemoryClass.SEMANTIC,
    MemoryKind.MESSAGE: MemoryClass.EPISODIC,
    MemoryKind.PROCEDURE: MemoryClass.PROCEDURAL,
}


def parse_kind(kind: str | MemoryKind) -> MemoryKind:
    """Return the `MemoryKind` for a kind word; an unknown word raises `UnknownKind`."""
    if isinstance(kind, MemoryKind):
        return kind
    if isinstance(kind, str):
        if type(kind) is not str:  # a subclass: its own hash and methods are not asked
            kind = str.__str__(kind)
        known = _BY_WORD.get(kind)
        if known is not None:  # the common case, without the enum's own lookup
            return known
        return MemoryKind(kind)  # another case, or `UnknownKind` saying what is known
    raise _unknown_kind(kind)


def _unknown_kind(value: object) -> UnknownKind:
    return UnknownKind(
        f"unknown memory kind {shown(value)}; use one of: {', '.join(k.value for k in MemoryKind)}"
    )


def memory_kind_code(kind: str | MemoryKind) -> int:
    """The stable one-byte code of a kind (fact 1, message 2, summary 3, entity 4,
    feedback 5, procedure 6)."""
    return parse_kind(kind).code


def memory_kind_class(kind: str | MemoryKind) -> str:
    """The class of a kind: ``semantic``, ``episodic`` or ``procedural``."""
    return parse_kind(kind).memory_class.value


_BY_WORD = {kind.value: kind for kind in MemoryKind}

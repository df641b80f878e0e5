"""Identifiers: memory ids, conversation ids, agent ids, and content ids.

A `MemoryId` is 16 bytes. A random one is time-ordered: 48 bits of Unix
milliseconds, then 80 random bits, so ids minted in a later millisecond sort later
(the ids of one ``remember_many`` batch share its millisecond). Its printed
form is 26 characters of Crockford base32 (the ULID alphabet), which sorts the
same way as the bytes.

A content id (``dedup=True``) is a 128-bit BLAKE2b digest of the owner scope
(stream, tenant, agent, user, application), the kind code and the body. The
conversation is deliberately not part of it, so the same fact remembered in two
conversations is one item, while two users never share an id. Lineage is not
part of it either.

>>> MemoryId.parse(str(MemoryId.content("fact", b"x"))) == MemoryId.content("fact", b"x")
True
"""

from __future__ import annotations

import hashlib
import os
import re
from typing import Self

from .clock import SYSTEM_CLOCK, Clock, _CheckedClock, validate_clock
from .errors import InvalidBody, InvalidId, InvalidName, shown
from .kinds import MemoryKind, parse_kind

__all__ = [
    "AgentId",
    "ConversationId",
    "MemoryId",
    "memory_id_content",
    "validate_name",
]


class _RandomBytes:
    """The random parts of new ids, 10 bytes each, cut from `os.urandom` drawn 4,000 bytes
    at a time: a system call per id was a twentieth of a `remember` on Kafka. A forked
    child starts a pool of its own (two processes sharing one would mint the same ids).

    No lock: each part is taken with one ``list.pop``, which is atomic (under the GIL,
    and with the per-object locks of free-threaded builds), so two threads never get
    the same part; threads that find the pool empty together each draw a fresh one. A
    lock taken per id cost more than the rest of the draw (0.67 -> 0.22 us)."""

    def __init__(self) -> None:
        self._parts: list[bytes] = []

    def ten(self) -> bytes:
        """Ten random bytes, never handed out before in this process."""
        try:
            return self._parts.pop()
        except IndexError:
            block = os.urandom(4000)
            parts = [block[at : at + 10] for at in range(0, 4000, 10)]
            part = parts.pop()
            self._parts = parts
            return part

    def forget(self) -> None:
        self._parts = []


_RANDOM = _RandomBytes()
os.register_at_fork(after_in_child=_RANDOM.forget)


def new_id_bytes(clock: Clock = SYSTEM_CLOCK) -> bytes:
    """The 16 bytes of a new random id (`MemoryId.new`'s), for a writer that needs only
    the bytes: the clock's millisecond, then 10 random bytes. A clock other than the
    machine's is read as `validate_clock` checks it."""
    if clock is not SYSTEM_CLOCK and type(clock) is not _CheckedClock:
        clock = validate_clock(clock)
    return (clock.now_ms() % (1 << 48)).to_bytes(6, "big") + _RANDOM.ten()


_ALPHABET = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
_DECODE = {c: i for i, c in enumerate(_ALPHABET)}
# Crockford base32 reads these as their look-alikes.
_DECODE.update({"I": 1, "L": 1, "O": 0})
_CONTENT_DOMAIN = b"laser-memory/content-id/v1"
MAX_NAME_BYTES = 255
_CONTROL = re.compile("[\x00-\x1f\x7f]")


def validate_name(value: str, what: str, *, allow_empty: bool = False) -> str:
    """Check a name that goes into a record (scope field, namespace, key)."""
    if not isinstance(value, str):
        raise InvalidName(f"{what} must be a string, got {type(value).__name__}")
    if type(value) is not str:  # a subclass: the text it holds, not its own methods
        value = str.__str__(value)
    if not value and not allow_empty:
        raise InvalidName(f"{what} must not be empty")
    try:
        encoded = value.encode("utf-8")
        bad_unicode = False
    except UnicodeEncodeError:
        encoded = value.encode("utf-8", "surrogatepass")
        bad_unicode = True
    if len(encoded) > MAX_NAME_BYTES:
        raise InvalidName(
            f"{what} is {len(encoded)} bytes long; at most {MAX_NAME_BYTES} bytes fit in a record"
        )
    if _CONTROL.search(value):
        raise InvalidName(f"{what} {shown(value)} contains a control character; remove it")
    if bad_unicode:
        raise InvalidName(f"{what} {shown(value)} is not valid Unicode text")
    return value


class MemoryId:
    """A 16-byte memory item id.

    >>> mid = MemoryId.new()
    >>> len(mid.bytes), len(str(mid))
    (16, 26)
    """

    __slots__ = ("_bytes", "also", "receipt")

    def __init__(self, raw: bytes) -> None:
        #: Where the write that returned this id landed (topic, partition, offset,
        #: append time); None for an id that was not returned by a write.
        self.receipt = None
        #: Where the other records the write needed landed (a remember that
        #: ``supersedes`` writes a `Superseded` record too): ``after=`` and ``as_of``
        #: take them into account.
        self.also: tuple = ()
        if not isinstance(raw, bytes | bytearray | memoryview) or len(raw) != 16:
            got = f"{len(raw)} bytes" if hasattr(raw, "__len__") else repr(raw)
            raise InvalidId(f"a memory id is exactly 16 bytes, got {got}")
        self._bytes = bytes(raw)

    @classmethod
    def _of(cls, raw: bytes) -> Self:
        # An id the library made itself (16 bytes): built without the checks.
        mid = object.__new__(cls)
        mid._bytes, mid.receipt, mid.also = raw, None, ()
        return mid

    @classmethod
    def new(cls, clock: Clock = SYSTEM_CLOCK) -> Self:
        """A random id, ordered by the clock's time (the machine's unless given)."""
        return cls._of(new_id_bytes(clock))

    @classmethod
    def parse(cls, value: str | bytes | MemoryId) -> Self:
        """Read an id from its printed form (26 base32 characters), 32 hex digits, or 16 bytes."""
        if isinstance(value, MemoryId):
            return cls(value.bytes)
        if isinstance(value, bytes | bytearray):
            return cls(bytes(value))
        if not isinstance(value, str):
            raise InvalidId(f"a memory id is a string or 16 bytes, got {type(value).__name__}")
        if type(value) is not str:  # a subclass: the text it holds, not its own methods
            value = str.__str__(value)
        text = value.strip()
        if len(text) == 32:
            try:
                return cls(bytes.fromhex(text))
            except ValueError:
                pass
        if len(text) != 26:
            raise InvalidId(
                f"{shown(value)} is not a memory id: expected 26 base32 characters "
                "(as printed by laser-memory) or 32 hex digits"
            )
        number = 0
        for ch in text.upper():
            digit = _DECODE.get(ch)
            if digit is None:
                raise InvalidId(
                    f"{shown(value)} is not a memory id: {shown(ch)} is not a base32 character"
                )
            number = (number << 5) | digit
        if number >> 128:
            raise InvalidId(f"{shown(value)} is not a memory id: it encodes more than 128 bits")
        return cls(number.to_bytes(16, "big"))

    @classmethod
    def content(
        cls,
        kind: str | MemoryKind,
        body: bytes | str,
        *,
        stream: str | None = None,
        tenant: str = "",
        agent: str | None = None,
        user: str | None = None,
        application: str | None = None,
    ) -> Self:
        """The content id of a body: the same owner scope, kind and body give the same id
        in every process and version."""
        code = parse_kind(kind).code
        # What a remember takes as a body, read as a remember reads it: `bytes(5)` made
        # the id of five zero bytes (and `bytes(10**12)` a terabyte) from a number.
        data = body_bytes(body)
        digest = hashlib.blake2b(digest_size=16, person=b"laser-memory")
        digest.update(_CONTENT_DOMAIN)
        for what, field in (
            ("stream", stream),
            ("tenant", tenant),
            ("agent", agent),
            ("user", user),
            ("application", application),
        ):
            if field is not None and not isinstance(field, str):
                raise InvalidName(f"{what} must be a string or None, got {shown(field)}")
            try:
                raw = str.encode(field or "", "utf-8")
            except UnicodeEncodeError:
                raise InvalidName(f"{what} {shown(field)} is not valid Unicode text") from None
            digest.update(len(raw).to_bytes(4, "big"))
            digest.update(raw)
        digest.update(bytes([code]))
        digest.update(len(data).to_bytes(8, "big"))
        digest.update(data)
        return cls(digest.digest())

    @property
    def bytes(self) -> bytes:
        return self._bytes

    @property
    def millis(self) -> int:
        """The millisecond timestamp of a random id (meaningless for a content id)."""
        return int.from_bytes(self._bytes[:6], "big")

    def __str__(self) -> str:
        number = int.from_bytes(self._bytes, "big")
        out = []
        for _ in range(26):
            out.append(_ALPHABET[number & 31])
            number >>= 5
        return "".join(reversed(out))

    def __repr__(self) -> str:
        return f"MemoryId('{self}')"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, MemoryId) and other._bytes == self._bytes

    def __lt__(self, other: MemoryId) -> bool:
        if not isinstance(other, MemoryId):
            return NotImplemented  # Python's TypeError, not an AttributeError of ours
        return self._bytes < other._bytes

    def __hash__(self) -> int:
        return hash(self._bytes)


def body_bytes(value: object) -> bytes:
    """A body's bytes: text as UTF-8 (never a subclass's own ``encode``), or bytes; what a
    remember takes and its content id hashes. Anything else is `InvalidBody`."""
    if isinstance(value, str):
        try:
            return str.encode(value, "utf-8")
        except UnicodeEncodeError as exc:
            raise InvalidBody(f"the body is not valid Unicode text: {exc}") from None
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value)
    raise InvalidBody(
        f"a body is str or bytes, got {type(value).__name__}; give a structured value as "
        "its JSON text (json.dumps(value))"
    )


def memory_id_content(
    kind: str | MemoryKind,
    body: bytes | str,
    *,
    stream: str | None = None,
    tenant: str = "",
    agent: str | None = None,
    user: str | None = None,
    application: str | None = None,
) -> MemoryId:
    """Compute the content id that ``remember(..., dedup=True)`` would use, writing nothing.

    >>> memory_id_content("entity", b"node-7 rotates keys monthly", agent="planner")
    MemoryId('1VNCH7FHRP38NE1KR9G3P1T1CA')
    """
    return MemoryId.content(
        kind, body, stream=stream, tenant=tenant, agent=agent, user=user, application=application
    )


class ConversationId(str):
    """A conversation id: any non-empty name up to 255 bytes; `new()` mints a random one.

    >>> ConversationId("support-42")
    'support-42'
    """

    __slots__ = ()

    def __new__(cls, value: str) -> Self:
        return super().__new__(cls, validate_name(value, "conversation id"))

    @classmethod
    def new(cls) -> Self:
        return cls("conv-" + str(MemoryId.new()).lower())


class AgentId(str):
    """An agent id: a non-empty name up to 255 bytes, such as ``"planner"``."""

    __slots__ = ()

    def __new__(cls, value: str) -> Self:
        return super().__new__(cls, validate_name(value, "agent id"))

"""The records that go on the memory log, and their wire format.

Every write the memory makes is one of seven frozen, tagged records. They are
the whole persistent state of laser-memory: folders rebuild everything else
from them.

Wire format (schema version 1)
------------------------------
One log record per memory record:

- **key**: the partition key. Writes that must stay in order share one.

  ==================================  ==========================================
  record                              key (UTF-8)
  ==================================  ==========================================
  remember / feedback / forget /      ``c/<conversation>``: a conversation's
  embedded with a conversation        records share a partition, in write order
  the same without a conversation,    ``n/<namespace>``: every fold of a
  and superseded                      conversation reads it too, so it sees
                                      forgets, feedback and replacements of items
                                      of any conversation
  named.set / named.patch /           ``<namespace>/<key>``: every write to one
  named.remove                        named item shares a partition
  ==================================  ==========================================

- **value**: the record as a MessagePack map, with the tag in field ``op`` and
  the schema version in field ``v``. Bodies, ids and patches are binary.
- **headers** (all UTF-8): ``lm-ns`` the namespace, ``lm-op`` the tag,
  ``lm-v`` the schema version in decimal, ``lm-tenant`` the tenant. A reader
  can skip another namespace's or tenant's records without decoding the value.

Schema evolution rules: within a version, new fields are only added with a
default and old readers ignore fields they do not know; a new record type (a new
tag) may be added, and a reader that predates it sets it aside; removing or
re-typing a field, or changing a meaning, takes a new version number. A record
whose version is newer than `SCHEMA_VERSION` is refused with
`UnsupportedSchemaVersion`, never half-read. Encoded bytes of every version
are kept under ``tests/fixtures/`` and must keep decoding.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Sequence
from typing import NamedTuple

import msgspec

from .doorkeeper import Doorkeeper
from .errors import InvalidRecord, RecordDecodeError, UnsupportedSchemaVersion, shown
from .scope import Lifetime, MemoryScope

__all__ = [
    "HEADER_NAMESPACE",
    "HEADER_OPERATION",
    "HEADER_TENANT",
    "HEADER_VERSION",
    "MAX_DIMENSIONS",
    "MAX_NAMED_PATHS",
    "MAX_NAMED_VECTOR_BYTES",
    "MAX_WEIGHT",
    "NAMED_RECORDS",
    "SCHEMA_VERSION",
    "Embedded",
    "Feedback",
    "Forget",
    "HeaderReading",
    "MemoryRecord",
    "NamedPatch",
    "NamedRemove",
    "NamedSet",
    "Origin",
    "Producer",
    "Remember",
    "Retrieved",
    "Superseded",
    "WireRecord",
    "body_digest",
    "decode_record",
    "encode_record",
    "encode_value",
    "header_value",
    "partition_key",
    "read_headers",
    "record_headers",
]

SCHEMA_VERSION = 1
#: The largest feedback weight one record may carry (either sign); sums stay finite.
MAX_WEIGHT = 1e9
#: The most float32 values a record's embedding may hold (and an embedder make).
MAX_DIMENSIONS = 65536
#: At most this many search paths (each a name: at most 255 bytes, no control
#: character), and this many bytes of vectors, on one `NamedSet`.
MAX_NAMED_PATHS = 64
MAX_NAMED_VECTOR_BYTES = 4 << 20

HEADER_NAMESPACE = "lm-ns"
HEADER_OPERATION = "lm-op"
HEADER_VERSION = "lm-v"
HEADER_TENANT = "lm-tenant"

Headers = Sequence[tuple[str, bytes]]


class Origin(msgspec.Struct, frozen=True, omit_defaults=True, kw_only=True, gc=False):
    """The log record that motivated an item (for example the message a fact came from)."""

    stream: str = ""
    topic: str
    partition: int
    offset: int
    generation: str = ""


class Producer(msgspec.Struct, frozen=True, omit_defaults=True, kw_only=True, gc=False):
    """Who wrote an item: an agent, an extraction policy or a consolidator, with a version."""

    name: str
    version: str = ""


class _Record(msgspec.Struct, frozen=True, tag_field="op", kw_only=True, gc=False):
    v: int = SCHEMA_VERSION
    ns: str
    scope: MemoryScope = MemoryScope()


class Remember(_Record, tag="remember"):
    """An item remembered: id, kind code, body, scope, lifetime, lineage, optional
    embedding, optional expiry.

    ``embedding`` holds little-endian float32 values when present; ``embedder`` is the
    label (``<provider>/<model>``) of the model that made it, so a search never
    compares vectors of two models. An embedding given without an embedder has none.
    """

    id: bytes
    kind: int
    body: bytes
    lifetime: Lifetime = "session"
    origin: Origin | None = None
    producer: Producer | None = None
    embedding: bytes | None = None
    embedder: str | None = None
    #: When the item stops counting, in milliseconds since the epoch (None: never).
    #: Reads leave it out from then on; the retention sweeper forgets it.
    expires_at: int | None = None
    #: The id of an item this one replaces (a corrected fact), as lineage; the
    #: `Superseded` record written with it is what replaces that item.
    supersedes: bytes | None = None


class Feedback(_Record, tag="feedback"):
    """A feedback weight added to an item; with a conversation in its scope it only
    applies to an item remembered in that conversation."""

    target: bytes
    weight: float


class Forget(_Record, tag="forget"):
    """A tombstone for an item; with a conversation in its scope it only applies to an
    item remembered in that conversation.

    ``seen`` holds, per partition in partition order, the end offset of the topic when
    the forget was written: it forgets every remember of its target below those offsets
    (and, in its own partition, before it), and no later one, whatever the clocks say.
    Forgets written before ``seen`` existed (None) fall back to append times.

    ``only_seen`` forgets below ``seen`` alone, in its own partition too: a forget decided
    on a fold (expiry, purge, consolidation) ends exactly what that fold saw, so a remember
    of the item written meanwhile (a renewal) stays, whichever partition it lands in."""

    target: bytes
    seen: tuple[int, ...] | None = None
    only_seen: bool = False


class Embedded(_Record, tag="embedded"):
    """Another model's vector for a remembered item (``laser-memory reembed``), so a
    namespace can move to a new embedder without rewriting its items.

    It applies to the item's remembers in its conversation (or in any, without one)
    whose body has ``body_digest`` (`body_digest`), so a vector never outlives the
    text it was computed from. ``embedding`` is little-endian float32; ``embedder``
    the model's label."""

    target: bytes
    body_digest: bytes
    embedding: bytes
    embedder: str


def body_digest(body: bytes) -> bytes:
    """The 16-byte BLAKE2b digest of a body, as `Embedded.body_digest` holds it."""
    return hashlib.blake2b(body, digest_size=16).digest()


class Superseded(_Record, tag="superseded"):
    """Item ``target`` was replaced by item ``by`` (a corrected fact): it leaves
    default recall for good, and stays in history and in the past. Written without a
    conversation, with the remember of ``by``, so every fold of the namespace reads it
    whichever conversation the replaced item lives in."""

    target: bytes
    by: bytes


class Retrieved(_Record, tag="retrieved"):
    """Item ``target`` entered an agent session's context for ``query``
    (`Session.record_retrieval`): its history shows every answer it went into. It
    changes nothing a recall returns. ``session`` is the session record acted on."""

    target: bytes
    query: str = ""
    session: Origin | None = None


class NamedSet(_Record, tag="named.set"):
    """A named item set to a whole new body.

    A searchable named item (the LangGraph store's) also names the JSON paths its
    search text is read from (``index``; ``()``: not searched) and may carry the
    vectors of those texts, float32 rows one after another, with their embedder's
    label, so a fold never calls a model. A later patch keeps them; a set replaces them.
    """

    key: str
    body: bytes
    index: tuple[str, ...] | None = None
    vectors: bytes | None = None
    embedder: str | None = None


class NamedPatch(_Record, tag="named.patch"):
    """An RFC 7386 JSON merge patch for a named item. The patch itself is the record, so
    two concurrent updates both apply in log order."""

    key: str
    patch: bytes


class NamedRemove(_Record, tag="named.remove"):
    """A named item removed. With ``if_version``, only if the item is still at that
    version when the fold reaches this record (a sweep must not remove a newer write)."""

    key: str
    if_version: int | None = None


MemoryRecord = (
    Remember
    | Feedback
    | Forget
    | Embedded
    | Superseded
    | Retrieved
    | NamedSet
    | NamedPatch
    | NamedRemove
)


class _Envelope(msgspec.Struct):
    """Just enough of any version of any record to say which version it is."""

    v: int = 0
    op: str = ""


class WireRecord(msgspec.Struct, frozen=True, gc=False):
    """A record as it goes on the log: key, value, headers. Untracked by the garbage
    collector, as the records are: bytes and tuples of them hold no cycle."""

    key: bytes
    value: bytes
    headers: tuple[tuple[str, bytes], ...]


_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder(MemoryRecord)
_envelope_decoder = msgspec.msgpack.Decoder(_Envelope)


#: The named item records, tested on every record by exact type: isinstance against
#: Struct types cost 300 ns (600 with `A | B`, which makes a union object each call),
#: more than the rest of `partition_key`. Records are never subclassed (a subclass
#: would carry a tag no reader decodes).
NAMED_RECORDS = frozenset({NamedSet, NamedPatch, NamedRemove})


def partition_key(record: MemoryRecord) -> bytes:
    """The key a record is written under; see the module documentation."""
    if type(record) in NAMED_RECORDS:
        return f"{record.ns}/{record.key}".encode()
    if record.scope.conversation is not None:
        return _conversation_key(record.scope.conversation)
    return _namespace_key(record.ns)


# Writers meet the same conversations, namespaces and tenants record after record:
# their key and header bytes are made once (a name that cannot encode raises, uncached).
@functools.lru_cache(maxsize=4096)
def _conversation_key(conversation: str) -> bytes:
    return f"c/{conversation}".encode()


@functools.lru_cache(maxsize=1024)
def _namespace_key(namespace: str) -> bytes:
    return f"n/{namespace}".encode()


@functools.lru_cache(maxsize=1 << 14)  # tenants by the ten thousand, as reads meet them
def _headers(namespace: str, operation: str, tenant: str) -> tuple[tuple[str, bytes], ...]:
    return (
        (HEADER_NAMESPACE, namespace.encode()),
        (HEADER_OPERATION, operation.encode()),
        (HEADER_VERSION, str(SCHEMA_VERSION).encode()),
        (HEADER_TENANT, tenant.encode()),
    )


def encode_record(record: MemoryRecord) -> WireRecord:
    """Encode a record with its partition key and headers."""
    value = encode_value(record)
    return WireRecord(partition_key(record), value, record_headers(record))


def encode_value(record: MemoryRecord) -> bytes:
    """A record's value on the log; raises `InvalidRecord` for one that cannot be
    written (another schema version, a field msgpack cannot carry)."""
    if record.v != SCHEMA_VERSION:
        raise InvalidRecord(
            f"this version writes schema version {SCHEMA_VERSION}, not {record.v}; "
            "build records without setting v"
        )
    try:
        return _encoder.encode(record)
    except (TypeError, ValueError, OverflowError) as exc:
        raise InvalidRecord(f"record cannot be encoded: {exc}") from None


def record_headers(record: MemoryRecord) -> tuple[tuple[str, bytes], ...]:
    """A record's headers on the log: one shared tuple per namespace, tag and tenant."""
    return _headers(record.ns, type(record).__struct_config__.tag, record.scope.tenant)


def header_value(headers: Headers, name: str) -> bytes | None:
    """The first value of a header, or None."""
    for key, value in headers:
        if key == name:
            return value
    return None


def plain_tenant_header(headers: Headers) -> bytes | None:
    """The bytes of the first tenant header (as `header_value` finds it) when
    ``headers`` are a tuple of (str, bytes) pairs, as the logs hand them; None when
    there is none, or for headers of any other shape (`read_headers` reads those).

    A fold bound to one tenant passes over another's records by it: for such headers
    `read_headers` names another tenant exactly when these bytes differ from the
    tenant's own, encoded (a header that is no UTF-8 names no tenant, and differs).

    >>> plain_tenant_header((("lm-ns", b"notes"), ("lm-tenant", b"acme")))
    b'acme'
    """
    plain = _plain_pairs(headers)
    return None if plain is None else plain[1]


_VERSION_HEADER = str(SCHEMA_VERSION).encode()


class HeaderReading(NamedTuple):
    """What a record's headers say, read once for each distinct set of headers.

    ``namespace`` and ``tenant`` are the names the headers give (None: no such header;
    bytes: a header that is no UTF-8, which names no namespace or tenant). ``refusal``
    is why no record under these headers can be read (a version header newer than
    this laser-memory reads, or one that is no number), or None.
    """

    namespace: str | bytes | None
    tenant: str | bytes | None
    refusal: tuple[type[RecordDecodeError], str] | None


#: The last headers set read and its reading, replaced whole (the view's fold and an
#: in-process one may run on two threads). A log read hands out one tuple per distinct
#: set, so most records are read by this one identity test.
_last_reading: tuple[object, HeaderReading] = ((), HeaderReading(None, None, None))
#: Every set read lately, by its value: records of several tenants or namespaces
#: interleave (so the last set rarely matches), and a Kafka read hands out a tuple of
#: its own for every record. Sets of more than `_MAX_READ_HEADER_BYTES` are not kept:
#: `_MAX_READINGS` of them could hold gigabytes. As many as ten thousand tenants'
#: records, of three types each, meet (see `laser_memory.log.local`'s shared sets).
_READINGS: dict[tuple, HeaderReading] = {}
_MALFORMED = HeaderReading(
    None,
    None,
    (RecordDecodeError, "its headers are not (name, bytes) pairs, as the log port hands them"),
)
_MAX_READINGS = 1 << 14
#: Once the readings overflow, a set is kept from its second reading on: one met once
#: (a tenant of one record) was an entry the garbage collector walked at each full
#: collection (see `laser_memory.doorkeeper`).
_READINGS_MET = Doorkeeper()
_MAX_READ_HEADER_BYTES = 1024


def read_headers(headers: Headers) -> HeaderReading:
    """What ``headers`` say: the namespace and tenant they name, and whether records
    under them can be read at all. Reads pass over records of other namespaces and
    tenants by it, unread; `decode_record` refuses what it refuses."""
    global _last_reading
    last = _last_reading
    if last[0] is headers:
        return last[1]
    try:
        reading = _READINGS.get(headers)  # type: ignore[call-overload]
    except Exception:  # a set that cannot be hashed (a custom log's lists): read it
        reading = None
    if reading is None:
        try:
            reading = HeaderReading(
                _header_text(headers, HEADER_NAMESPACE),
                _header_text(headers, HEADER_TENANT),
                _version_refusal(header_value(headers, HEADER_VERSION)),
            )
        except (TypeError, ValueError, AttributeError):
            # Not (name, bytes) pairs: a log of one's own that breaks the port. Its
            # records are set aside with this reason; raising here stopped the fold.
            return _MALFORMED
        plain = _plain_pairs(headers)
        if plain is None:
            return reading  # it could change: read again next time
        if plain[0] <= _MAX_READ_HEADER_BYTES:
            _READINGS_MET.keep(_READINGS, headers, reading, _MAX_READINGS)
    _last_reading = (headers, reading)
    return reading


def _plain_pairs(headers: Headers) -> tuple[int, bytes | None] | None:
    """For a tuple of (str, bytes) pairs, which cannot change once read: their bytes,
    and the first tenant header's value (None if there is none); None for anything
    else (a custom log's lists)."""
    if type(headers) is not tuple:
        return None
    size = 0
    tenant = None
    for header in headers:
        if not (
            type(header) is tuple
            and len(header) == 2
            and type(header[0]) is str
            and type(header[1]) is bytes
        ):
            return None
        size += len(header[0]) + len(header[1])
        if tenant is None and header[0] == HEADER_TENANT:
            tenant = header[1]
    return size, tenant


def _header_text(headers: Headers, name: str) -> str | bytes | None:
    raw = header_value(headers, name)
    if raw is None:
        return None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        # Kept as bytes, which equal no name: decoded with replacement, b"\xff" read as
        # "\ufffd" and matched a namespace of that name that replay (comparing bytes) skips.
        return raw


def _version_refusal(version_header: bytes | None) -> tuple[type[RecordDecodeError], str] | None:
    if version_header is None or version_header == _VERSION_HEADER:
        return None
    try:
        version = int(version_header)
    except ValueError:
        shown_header = shown(version_header)
        return RecordDecodeError, f"header {HEADER_VERSION} is {shown_header}, not a number"
    if version > SCHEMA_VERSION:
        return UnsupportedSchemaVersion, _too_new_message(version)
    return None


def decode_record(value: bytes, headers: Headers = ()) -> MemoryRecord:
    """Decode a record's value; raises `RecordDecodeError` (or its subclass
    `UnsupportedSchemaVersion`) with the reason, never returns garbage."""
    last = _last_reading
    reading = last[1] if last[0] is headers else read_headers(headers)
    if reading.refusal is not None:
        error, message = reading.refusal
        raise error(message)
    try:
        record = _decoder.decode(value)
    except msgspec.DecodeError as exc:
        try:
            envelope = _envelope_decoder.decode(value)
        except msgspec.DecodeError:
            envelope = None
        if envelope is not None and envelope.v > SCHEMA_VERSION:
            raise _too_new(envelope.v) from exc
        if not value:
            # A Kafka tombstone (a null value) is read as empty: say so, not "truncated".
            raise RecordDecodeError(
                "not a memory record: its value is empty (a tombstone, or an empty message)"
            ) from None
        raise RecordDecodeError(f"not a memory record: {exc}") from exc
    if record.v > SCHEMA_VERSION:
        raise _too_new(record.v)
    if record.v < 1:
        raise RecordDecodeError(f"schema version {record.v} does not exist; versions start at 1")
    return record


def _too_new(version: int) -> UnsupportedSchemaVersion:
    return UnsupportedSchemaVersion(_too_new_message(version))


def _too_new_message(version: int) -> str:
    return (
        f"record has schema version {version}, newer than {SCHEMA_VERSION} which this "
        "laser-memory reads; upgrade laser-memory to read it"
    )

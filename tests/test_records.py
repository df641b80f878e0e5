"""The wire format: records decode from bytes written by earlier versions, and bad bytes
are refused with a reason, never read as garbage."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import laser_memory.records as records_module
from hostile_text import LyingText
from laser_memory.errors import (
    InvalidName,
    InvalidRecord,
    RecordDecodeError,
    UnsupportedSchemaVersion,
)
from laser_memory.records import (
    Embedded,
    Feedback,
    Forget,
    MemoryRecord,
    NamedPatch,
    NamedRemove,
    NamedSet,
    Origin,
    Producer,
    Remember,
    Retrieved,
    Superseded,
    decode_record,
    encode_record,
    header_value,
)
from laser_memory.scope import MemoryScope

FIXTURES = Path(__file__).parent / "fixtures" / "records-v1"
SCOPE = MemoryScope(
    stream="prod", tenant="acme", agent="planner", user="u1", application="app", conversation="c-1"
)

# What each fixture, written by schema version 1, must keep decoding to.
EXPECTED_V1 = {
    "remember": Remember(
        ns="stream:prod/notes",
        scope=SCOPE,
        id=bytes(range(16)),
        kind=1,
        body=b"node-7 sits in the eu-west pool",
        lifetime="durable",
        origin=Origin(stream="prod", topic="sessions", partition=2, offset=41, generation="g1"),
        producer=Producer(name="fact-extractor", version="2"),
        embedding=b"\x00\x00\x80?\x00\x00\x00@",
    ),
    "remember-minimal": Remember(ns="notes", id=bytes(16), kind=2, body=b"hi"),
    # Written once records named the embedder of their vector (a field added with a
    # default inside version 1; the fixtures above predate it and decode with None).
    "remember-embedded": Remember(
        ns="notes",
        id=bytes(16),
        kind=1,
        body=b"rotate keys",
        embedding=b"\x00\x00\x80?\x00\x00\x00@",
        embedder="test/word-hash",
    ),
    "feedback": Feedback(ns="stream:prod/notes", scope=SCOPE, target=bytes(range(16)), weight=-1.5),
    "forget": Forget(
        ns="stream:prod/notes",
        scope=MemoryScope(stream="prod", tenant="acme"),
        target=bytes(range(16)),
    ),
    # Written once forgets carried the end offsets their writer saw (a field added with a
    # default inside version 1; "forget" above predates it and decodes with seen=None).
    "forget-seen": Forget(
        ns="stream:prod/notes",
        scope=MemoryScope(stream="prod", tenant="acme"),
        target=bytes(range(16)),
        seen=(3, 0, 17, 2),
    ),
    # Written once forgets decided on a fold said so (a field added with a default inside
    # version 1; "forget-seen" above predates it and decodes with only_seen=False).
    "forget-only-seen": Forget(
        ns="stream:prod/notes",
        scope=MemoryScope(stream="prod", tenant="acme", conversation="c-1"),
        target=bytes(range(16)),
        seen=(3, 0, 17, 2),
        only_seen=True,
    ),
    # Written when reembed arrived (a record type added inside version 1).
    "embedded": Embedded(
        ns="stream:prod/notes",
        scope=MemoryScope(stream="prod", tenant="acme", conversation="c-1"),
        target=bytes(range(16)),
        body_digest=bytes.fromhex("184de41debdcf98901af654a1c1ab03e"),
        embedding=b"\x00\x00\x80?\x00\x00\x00@",
        embedder="sentence-transformers/all-MiniLM-L6-v2",
    ),
    # Written when expiry and supersession arrived (fields and a record type added
    # inside version 1).
    "remember-expiring": Remember(
        ns="notes",
        id=bytes(range(16)),
        kind=1,
        body=b"the office is in York",
        expires_at=1_800_000_000_000,
        supersedes=bytes(16),
    ),
    # Pinned since 2026-12-06: an origin and a producer that set only their required
    # fields, which write nothing else (the fixtures above set every field of both).
    "remember-bare-lineage": Remember(
        ns="notes",
        id=bytes(range(16)),
        kind=1,
        body=b"the office is in York",
        origin=Origin(topic="sessions", partition=0, offset=3),
        producer=Producer(name="fact-extractor"),
    ),
    "superseded": Superseded(
        ns="stream:prod/notes",
        scope=MemoryScope(stream="prod", tenant="acme"),
        target=bytes(16),
        by=bytes(range(16)),
    ),
    "named-set": NamedSet(ns="stream:prod/notes", scope=SCOPE, key="prefs", body=b'{"a":1}'),
    "named-patch": NamedPatch(
        ns="stream:prod/notes", scope=SCOPE, key="prefs", patch=b'{"a":null,"b":2}'
    ),
    "named-remove": NamedRemove(ns="stream:prod/notes", scope=SCOPE, key="prefs"),
    # Written when the LangGraph store arrived (fields added with defaults inside
    # version 1: search paths and vectors of a named set, a conditional remove).
    "named-set-indexed": NamedSet(
        ns="langgraph",
        scope=MemoryScope(tenant="acme"),
        key="users.u1..prefs",
        body=b'{"value":{"text":"dark mode"}}',
        index=("text",),
        vectors=b"\x00\x00\x80?\x00\x00\x00@",
        embedder="test/word-hash",
    ),
    "named-remove-if-version": NamedRemove(
        ns="langgraph", scope=MemoryScope(tenant="acme"), key="users.u1..prefs", if_version=3
    ),
    # Written with agent sessions (`Session.record_retrieval`), pinned since 2026-12-05.
    "retrieved": Retrieved(
        ns="stream:prod/notes",
        scope=SCOPE,
        target=bytes(range(16)),
        query="where does node-7 sit?",
        session=Origin(stream="prod", topic="prod.agent.sessions", partition=1, offset=7),
    ),
}


@pytest.mark.parametrize("name", sorted(EXPECTED_V1))
def test_v1_fixtures_keep_decoding(name: str):
    raw = (FIXTURES / f"{name}.bin").read_bytes()
    assert decode_record(raw) == EXPECTED_V1[name]


def test_every_fixture_is_checked():
    assert {p.stem for p in FIXTURES.glob("*.bin")} == set(EXPECTED_V1)


def test_every_record_type_and_field_is_in_a_fixture():
    """A record's encoding is pinned only where a fixture holds it: `Retrieved` had none,
    so a change of its fields' order or names would have passed every test, and the
    logs it was written to would no longer fold. Every type of the union has a fixture,
    and every optional field but the version is set in one of its type's."""
    for kind in MemoryRecord.__args__:
        fixtures = [record for record in EXPECTED_V1.values() if type(record) is kind]
        assert fixtures, f"no fixture of {kind.__name__}"
        for field in msgspec.inspect.type_info(kind).fields:
            if field.required or field.name == "v":
                continue
            default = (
                field.default if field.default is not msgspec.NODEFAULT else field.default_factory()
            )
            assert any(getattr(record, field.name) != default for record in fixtures), (
                f"no fixture of {kind.__name__} sets {field.name}"
            )


@pytest.mark.parametrize("name", sorted(EXPECTED_V1))
def test_a_record_is_written_as_its_fixture_holds_it(name: str):
    """What a writer puts on the log today is what the fixture of its version holds,
    field by field (the scope, origins and producers too, which write only the fields
    they set), but for fields added to the version since, at their defaults. Writing an
    origin's unset fields passed every test that only decodes."""
    record = EXPECTED_V1[name]
    written = msgspec.msgpack.decode(encode_record(record).value)
    pinned = msgspec.msgpack.decode((FIXTURES / f"{name}.bin").read_bytes())
    assert {key: written[key] for key in pinned} == pinned
    # A scope writes only the fields it sets (an empty scope is an empty map).
    assert None not in written["scope"].values() and "" not in written["scope"].values()
    fields = {f.name: f for f in msgspec.inspect.type_info(type(record)).fields}
    for key in written.keys() - pinned.keys():
        assert written[key] == msgspec.to_builtins(fields[key].default), key


@pytest.mark.parametrize("name", sorted(EXPECTED_V1))
def test_a_record_and_its_parts_cannot_change_once_made(name: str):
    # Records are handed to governors, replays and folds alike: none may change one
    # under the others (and a fold keeps the records it folded).
    record = EXPECTED_V1[name]
    parts = [record, record.scope]
    parts += [p for p in (getattr(record, "origin", None), getattr(record, "producer", None)) if p]
    for part in parts:
        field = part.__struct_fields__[-1]
        with pytest.raises(AttributeError):
            setattr(part, field, getattr(part, field))
        hash(part)


@pytest.mark.parametrize(
    "field", ["stream", "tenant", "agent", "user", "application", "conversation"]
)
def test_a_scope_is_checked_as_the_plain_text_it_holds(field: str):
    with pytest.raises(InvalidName, match=field):
        MemoryScope(**{field: "a\x00b"}).validated()
    with pytest.raises(InvalidName, match="not valid Unicode text"):
        MemoryScope(**{field: "a\ud800"}).validated()  # a lone surrogate: no UTF-8 holds it
    MemoryScope(**{field: "c1"}).validated()  # checked, and kept as checked
    # Text that claims to equal the checked scope's, and hashes as it does, is checked
    # itself: never taken for the scope it claims to be.
    with pytest.raises(InvalidName, match=field):
        MemoryScope(**{field: LyingText("a\x00b")}).validated()
    taken = MemoryScope(**{field: LyingText("c9")}).validated()
    assert type(getattr(taken, field)) is str and getattr(taken, field) == "c9"


_NAMES = ["", "ok", "acme", "a\x00b", "x" * 300, "é", "a\ud800", "c1"]


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(
            *(st.sampled_from(_NAMES) for _ in range(2)),
            *(st.one_of(st.none(), st.sampled_from(_NAMES)) for _ in range(4)),
            st.booleans(),
        ),
        min_size=1,
        max_size=12,
    )
)
def test_a_scope_checks_as_each_of_its_names_checks_whatever_came_before(scopes):
    # Scopes and their owner's names are kept once checked (a fold of a conversation
    # per item checked its stream and tenant again each record): whatever was checked
    # before, a scope passes exactly when each of its names passes on its own, and
    # text that only claims to be a checked name is checked itself.
    from laser_memory.ids import validate_name

    fields = ("stream", "tenant", "agent", "user", "application", "conversation")
    for *values, lying in scopes:
        given = [LyingText(v) if lying and v else v for v in values]
        try:
            for field, value in zip(fields, values, strict=True):
                if value is not None:
                    validate_name(value, field, allow_empty=field in ("stream", "tenant"))
            expected = None
        except InvalidName as exc:
            expected = exc
        try:
            scope = MemoryScope(**dict(zip(fields, given, strict=True))).validated()
        except InvalidName as exc:
            assert expected is not None and str(exc) == str(expected)
            continue
        assert expected is None
        assert all(
            type(getattr(scope, f)) is str and getattr(scope, f) == v
            for f, v in zip(fields, values, strict=True)
            if v is not None
        )


@pytest.mark.parametrize("name", sorted(EXPECTED_V1))
def test_round_trip_with_headers(name: str):
    record = EXPECTED_V1[name]
    wire = encode_record(record)
    assert decode_record(wire.value, wire.headers) == record
    assert header_value(wire.headers, "lm-ns") == record.ns.encode()
    assert header_value(wire.headers, "lm-v") == b"1"
    assert header_value(wire.headers, "lm-tenant") == record.scope.tenant.encode()
    assert (
        header_value(wire.headers, "lm-op")
        == name.replace("-minimal", "")
        .replace("-only-seen", "")
        .replace("-seen", "")
        .replace("-embedded", "")
        .replace("-expiring", "")
        .replace("-bare-lineage", "")
        .replace("-indexed", "")
        .replace("-if-version", "")
        .replace("-", ".")
        .encode()
    )


def test_partition_keys_keep_order_where_it_matters():
    conv = MemoryScope(conversation="c-1")
    remember = Remember(ns="n", scope=conv, id=bytes(16), kind=1, body=b"x")
    forget = Forget(ns="n", scope=conv, target=bytes(16))
    assert encode_record(remember).key == encode_record(forget).key == b"c/c-1"
    unscoped = Feedback(ns="n", target=bytes(16), weight=1.0)
    assert encode_record(unscoped).key == b"n/n"
    writes = [NamedSet(ns="n", key="k", body=b"{}"), NamedRemove(ns="n", scope=conv, key="k")]
    assert {encode_record(w).key for w in writes} == {b"n/k"}


def test_newer_schema_version_is_refused_from_header():
    wire = encode_record(EXPECTED_V1["forget"])
    headers = tuple((k, b"2" if k == "lm-v" else v) for k, v in wire.headers)
    with pytest.raises(UnsupportedSchemaVersion, match="schema version 2"):
        decode_record(wire.value, headers)
    # Headers are read once per distinct set (by identity, then by value): others are
    # still checked, and a list (which could change) is checked every time.
    assert decode_record(wire.value, wire.headers) == EXPECTED_V1["forget"]
    with pytest.raises(UnsupportedSchemaVersion):
        decode_record(wire.value, headers)
    listed = [list(header) for header in wire.headers]
    listed = [tuple(header) for header in listed]
    assert decode_record(wire.value, listed) == EXPECTED_V1["forget"]
    listed[2] = ("lm-v", b"2")
    with pytest.raises(UnsupportedSchemaVersion):
        decode_record(wire.value, listed)
    # Readable sets are also remembered by value (a Kafka read hands out a tuple per
    # record; tenants interleave): a copy of one passes, a copy of the newer one never.
    for _ in range(3):
        assert decode_record(wire.value, tuple(map(tuple, wire.headers))) == EXPECTED_V1["forget"]
        with pytest.raises(UnsupportedSchemaVersion):
            decode_record(wire.value, tuple(map(tuple, headers)))
    unreadable = tuple((k, b"two" if k == "lm-v" else v) for k, v in wire.headers)
    for _ in range(2):
        with pytest.raises(RecordDecodeError, match="not a number"):
            decode_record(wire.value, tuple(unreadable))


_HEADER_NAMES = st.sampled_from(["lm-ns", "lm-tenant", "lm-op", "lm-v", "x-other"])
_HEADER_VALUES = st.one_of(
    st.sampled_from([b"acme", b"globex", b"", b"\xff", "caf\u00e9".encode(), b"notes"]),
    st.binary(max_size=4),
)
_HEADER = st.one_of(
    st.tuples(_HEADER_NAMES, _HEADER_VALUES),
    st.tuples(_HEADER_NAMES, _HEADER_VALUES).map(list),  # a custom log's pairs
    st.tuples(_HEADER_NAMES, st.sampled_from(["acme", "globex"])),  # text, not bytes
    st.tuples(_HEADER_NAMES, _HEADER_VALUES.map(bytearray)),
    st.tuples(_HEADER_NAMES),
)


@settings(max_examples=400, deadline=None)
@given(
    headers=st.one_of(
        st.lists(_HEADER, max_size=6).map(tuple), st.lists(_HEADER, max_size=6), st.integers()
    ),
    own=st.sampled_from(["acme", "globex", "", "caf\u00e9"]),
)
def test_a_bound_fold_passes_over_by_the_tenant_bytes_as_by_the_full_reading(headers, own):
    """A fold bound to one tenant passes over another tenant's record by its tenant
    header's bytes (`plain_tenant_header`) before reading its headers in full: whenever
    those bytes are given, they name another tenant exactly when the full reading does,
    duplicated tenant headers, bytes that are no UTF-8 and empty names included; headers
    of any other shape give none, and are read in full."""
    from laser_memory.records import HEADER_TENANT, plain_tenant_header, read_headers

    tenant_bytes = plain_tenant_header(headers)
    reading = read_headers(headers)
    if tenant_bytes is None:
        plain = type(headers) is tuple and all(
            type(h) is tuple and len(h) == 2 and type(h[0]) is str and type(h[1]) is bytes
            for h in headers
        )
        assert not plain or reading.tenant is None
        return
    assert reading.tenant is not None  # its text, or bytes that are no UTF-8
    assert (tenant_bytes != own.encode()) == (reading.tenant is not None and reading.tenant != own)
    assert tenant_bytes == dict(reversed(headers))[HEADER_TENANT]  # the first one


def test_every_copy_of_a_headers_set_reads_as_the_set_says():
    """Reads pass over other namespaces' and tenants' records by what their headers say,
    remembered per distinct set: whatever was read before (sets interleaved, the same
    set as a new tuple as a Kafka read makes, more sets than are remembered, a set too
    large to keep, a list that changes), each read says what its own headers say."""
    from laser_memory.records import read_headers

    def headers(ns: str, tenant: bytes | None, version: bytes = b"1", pad: int = 0):
        out = [("lm-ns", ns.encode()), ("lm-op", b"remember"), ("lm-v", version)]
        if tenant is not None:
            out.append(("lm-tenant", tenant))
        if pad:
            out.append(("x-pad", b"p" * pad))
        return out

    cases = [
        (headers("a", b"acme"), ("a", "acme", None)),
        (headers("a", b"globex"), ("a", "globex", None)),
        (headers("b", None), ("b", None, None)),
        (headers("a", b"\xff"), ("a", b"\xff", None)),
        (headers("a", b"acme", b"2"), ("a", "acme", UnsupportedSchemaVersion)),
        (headers("a", b"acme", b"two"), ("a", "acme", RecordDecodeError)),
        # A version header that is a number no newer than this one's: the value says.
        (headers("a", b"acme", b"01"), ("a", "acme", None)),
        (headers("a", b"globex", pad=2_000), ("a", "globex", None)),
    ]
    for _ in range(3):
        for listed, (ns, tenant, refused) in cases:
            for copy in (tuple(listed), tuple(map(tuple, listed))):
                reading = read_headers(copy)
                assert (reading.namespace, reading.tenant) == (ns, tenant)
                assert (reading.refusal and reading.refusal[0]) is refused
                assert read_headers(copy) == reading
    # More sets than are remembered: every one still read for what it says.
    for n in range(5_000):
        assert read_headers(tuple(headers("n", str(n).encode()))).tenant == str(n)
    assert read_headers(tuple(cases[1][0])).tenant == "globex"
    # ... and kept no more of them than they may (a topic can hold millions of sets);
    # nor a set too large to keep.
    assert 0 < len(records_module._READINGS) <= records_module._MAX_READINGS
    large = tuple(cases[-1][0])
    assert read_headers(large).tenant == "globex"
    assert large not in records_module._READINGS
    # A list can change between two reads of the same object: read each time. So can
    # a tuple of lists, or of pairs with a bytearray (a custom log's), which no hash holds.
    changing = headers("a", b"acme")
    assert read_headers(changing).tenant == "acme"
    changing[3] = ("lm-tenant", b"globex")
    assert read_headers(changing).tenant == "globex"
    inner = tuple(map(list, headers("a", b"acme")))
    assert read_headers(inner).tenant == "acme"
    inner[3][1] = b"globex"
    assert read_headers(inner).tenant == "globex"
    value = bytearray(b"acme")
    mutable = (*map(tuple, headers("a", None)), ("lm-tenant", value))
    assert read_headers(mutable).tenant == "acme"
    value[:] = b"globex"
    assert read_headers(mutable).tenant == "globex"


def test_newer_schema_version_is_refused_from_value_even_if_its_shape_changed():
    future = msgspec.msgpack.encode({"op": "remember", "v": 7, "ns": "n", "id": "not bytes"})
    with pytest.raises(UnsupportedSchemaVersion, match="upgrade"):
        decode_record(future)
    future_same_shape = msgspec.msgpack.encode({"op": "forget", "v": 3, "ns": "n", "target": b"x"})
    with pytest.raises(UnsupportedSchemaVersion):
        decode_record(future_same_shape)


def test_unknown_fields_of_the_same_version_are_ignored():
    raw = msgspec.msgpack.encode(
        {"op": "forget", "v": 1, "ns": "n", "target": bytes(16), "added_later": [1, 2]}
    )
    assert decode_record(raw) == Forget(ns="n", target=bytes(16))


@pytest.mark.parametrize(
    "raw",
    [
        b"",
        b"\xc1not msgpack",
        msgspec.msgpack.encode({"op": "rename", "v": 1, "ns": "n"}),
        msgspec.msgpack.encode({"op": "forget", "v": 1}),
        msgspec.msgpack.encode(
            {"op": "feedback", "v": 1, "ns": "n", "target": b"x", "weight": "big"}
        ),
        msgspec.msgpack.encode({"op": "forget", "v": 0, "ns": "n", "target": b"x"}),
        msgspec.msgpack.encode([1, 2, 3]),
    ],
)
def test_bad_bytes_are_a_decode_error_with_a_reason(raw: bytes):
    with pytest.raises(RecordDecodeError) as info:
        decode_record(raw)
    assert str(info.value)
    # A record of this version that is bad is not "newer": upgrading would not read it.
    assert type(info.value) is RecordDecodeError


def test_an_empty_value_says_it_is_empty():
    # A Kafka tombstone (a null value) reaches a fold as an empty value: its set-aside
    # reason read "Input data was truncated".
    with pytest.raises(RecordDecodeError, match="its value is empty"):
        decode_record(b"")


def test_bad_version_header_is_a_decode_error():
    with pytest.raises(RecordDecodeError, match="lm-v"):
        decode_record(b"", (("lm-v", b"one"),))


def test_writing_another_version_is_refused():
    with pytest.raises(InvalidRecord, match="schema version 1"):
        encode_record(Forget(ns="n", target=bytes(16), v=2))


@pytest.mark.parametrize(
    "record",
    [
        Remember(ns="n", id=bytes(16), kind=1 << 70, body=b"x"),  # past msgpack's ints
        Remember(ns="n", id=bytes(16), kind=1, body=object()),  # type: ignore[arg-type]
        Feedback(ns="n", target=bytes(16), weight=1j),  # type: ignore[arg-type]
    ],
)
def test_a_record_msgpack_cannot_carry_is_refused_when_encoded(record):
    """Structs are not checked when built, and anyone may build one: what msgpack cannot
    encode is an `InvalidRecord` naming why, never a raw `OverflowError` or `TypeError`
    (no test built one)."""
    with pytest.raises(InvalidRecord, match="record cannot be encoded: "):
        encode_record(record)

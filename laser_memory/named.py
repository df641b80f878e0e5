"""Named items: key rules, strict JSON, and RFC 7386 JSON merge patch.

JSON here is strict: no ``NaN`` or ``Infinity`` (other parsers reject them), and
at most `MAX_JSON_DEPTH` levels of nesting, checked before anything parses it,
so no body or patch can exhaust the parser's recursion, in the writer or in a
fold.

>>> merge_patch({"a": 1, "b": {"c": 2}}, {"b": {"c": None, "d": 3}})
{'a': 1, 'b': {'d': 3}}
"""

from __future__ import annotations

import json
import re
from typing import Any

import msgspec
import numpy as np

from .errors import InvalidBody, InvalidInput, InvalidPatch, shown
from .ids import validate_name

__all__ = [
    "MAX_JSON_DEPTH",
    "MAX_VERSION",
    "apply_patch_bytes",
    "dump_json",
    "encode_body",
    "encode_patch",
    "json_depth",
    "json_too_deep",
    "load_json",
    "merge_patch",
    "validate_key",
    "validate_version",
]

#: The highest version a named item's write count may name (a record stores it as an
#: int64; past it the fold would set the record aside).
MAX_VERSION = (1 << 63) - 1

#: The deepest nesting of arrays and objects a named body or patch may have.
MAX_JSON_DEPTH = 100

_STRINGS = re.compile(rb'"(?:[^"\\]|\\.)*"', re.DOTALL)


def validate_key(key: str) -> str:
    """A named item key: non-empty text up to 255 bytes without control characters."""
    return validate_name(key, "named item key")


def validate_version(version: object, what: str) -> None:
    """Refuse a version that is no int from 1 to `MAX_VERSION` (`InvalidInput`); None
    is left to the caller."""
    if isinstance(version, bool) or not isinstance(version, int) or not 1 <= version <= MAX_VERSION:
        raise InvalidInput(f"{what} counts writes from 1 to 2**63-1, got {shown(version)}")


def json_depth(data: bytes) -> int:
    """How deeply arrays and objects nest in JSON text (0 for a scalar), counted
    without parsing, so text of any depth is measured safely."""
    bare = np.frombuffer(_STRINGS.sub(b"", data), dtype=np.uint8)
    if bare.size == 0:
        return 0
    steps = (
        (bare == ord("[")).astype(np.int32)
        + (bare == ord("{"))
        - (bare == ord("]"))
        - (bare == ord("}"))
    )
    return int(np.cumsum(steps).max(initial=0))


def json_too_deep(data: bytes, limit: int = MAX_JSON_DEPTH) -> bool:
    """Whether JSON text nests more than ``limit`` levels (`json_depth`). Text with at
    most ``limit`` brackets that open cannot: counting them costs a sixtieth of
    measuring the depth (0.24 against 14 us for a store's item), which every named
    item read and written paid."""
    return data.count(b"[") + data.count(b"{") > limit and json_depth(data) > limit


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


#: JSON text parsed by msgspec first: 0.2 us for a store's item against 2.7 for
#: ``json.loads`` with a ``parse_constant`` (which makes a decoder each call), and every
#: named item read, patched or folded is parsed. What msgspec refuses goes to
#: ``json.loads``, which has the last word: it also reads a UTF-8 BOM, UTF-16 and UTF-32
#: text, lone surrogates (escaped or encoded), and a number past a float's range as
#: infinity, so a body parses to the same value, or fails the same way, as it always has.
_json_decoder = msgspec.json.Decoder()


def load_json(data: bytes | str, what: str = "the body") -> Any:
    """Parse strict JSON; raises `InvalidBody` for text that is not JSON, too deep, or
    holding NaN or Infinity."""
    raw = str.encode(data, "utf-8", "surrogatepass") if isinstance(data, str) else bytes(data)
    if json_too_deep(raw):
        raise InvalidBody(
            f"{what} nests {json_depth(raw)} levels deep; at most {MAX_JSON_DEPTH} are allowed"
        )
    try:
        return _json_decoder.decode(raw)
    except msgspec.DecodeError:
        pass  # json.loads takes it, or says what is wrong with it
    try:
        return json.loads(raw, parse_constant=_no_constant)
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise InvalidBody(f"{what} is not valid JSON: {exc}") from None


def dump_json(value: Any, what: str = "the body", most: int = MAX_JSON_DEPTH) -> bytes:
    """Compact strict JSON bytes; raises `InvalidBody` for values JSON cannot hold.
    ``most`` is the depth the caller allows ``what`` (named in the error when the value
    is too deep to write at all): less than `MAX_JSON_DEPTH` for a value stored inside
    another object."""
    try:
        text = json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
        return text.encode("utf-8")
    except (TypeError, ValueError, RecursionError) as exc:  # UnicodeEncodeError too
        reason: object = exc
        if type(exc) is ValueError and "Out of range float" in str(exc):
            # NaN and infinities, or a number past a double's range (``1e400``) that a
            # stored body held and was read as infinity: JSON has no way to write them.
            reason = (
                "it holds NaN, an infinity or a number past a 64-bit float's range (such "
                "as 1e400, read as infinity); write such numbers as strings"
            )
        elif type(exc) is RecursionError:
            # Python's own words ("maximum recursion depth exceeded") name no limit of ours.
            raise InvalidBody(
                f"{what} nests more levels deep than JSON can be written here; at most "
                f"{most} are allowed"
            ) from None
        raise InvalidBody(f"{what} cannot be written as JSON: {reason}") from None


def merge_patch(target: Any, patch: Any) -> Any:
    """Apply an RFC 7386 merge patch: fields overwrite, ``null`` removes, objects merge."""
    if not isinstance(patch, dict):
        return patch
    result = dict(target) if isinstance(target, dict) else {}
    for name, value in patch.items():
        if value is None:
            result.pop(name, None)
        else:
            result[name] = merge_patch(result.get(name), value)
    return result


def encode_body(body: bytes | str | dict | list) -> bytes:
    """A named item body as bytes: bytes as given, text as UTF-8, objects and lists as
    JSON. Raises `InvalidBody` for text that is not Unicode and for JSON too deep or
    holding NaN or Infinity."""
    if isinstance(body, bytes | bytearray | memoryview):
        data = bytes(body)
    elif isinstance(body, str):
        try:
            data = str.encode(body, "utf-8")  # not a subclass's own encode
        except UnicodeEncodeError as exc:
            raise InvalidBody(f"the body is not valid Unicode text: {exc}") from None
    elif isinstance(body, dict | list):
        data = dump_json(body)
    else:
        raise InvalidBody(
            f"a named item body is bytes, str, dict or list, got {type(body).__name__}"
        )
    # Text that looks like JSON is what a later patch parses: keep it within the depth.
    if data.lstrip()[:1] in (b"{", b"[") and json_too_deep(data):
        raise InvalidBody(
            f"the body nests {json_depth(data)} levels deep; at most {MAX_JSON_DEPTH} are allowed"
        )
    return data


def encode_patch(patch: bytes | str | dict) -> bytes:
    """Check a merge patch is a JSON object and return its canonical bytes."""
    if isinstance(patch, bytes | bytearray | str):
        try:
            parsed = load_json(patch, "the patch")
        except InvalidBody as exc:
            raise InvalidPatch(str(exc)) from None
    else:
        parsed = patch
    if not isinstance(parsed, dict):
        raise InvalidPatch(
            f"a merge patch must be a JSON object, got {type(parsed).__name__}; "
            "to replace the whole value use set(key, body)"
        )
    try:
        data = dump_json(parsed, "the patch")
        if json_too_deep(data):
            raise InvalidBody(
                f"the patch nests {json_depth(data)} levels deep; at most {MAX_JSON_DEPTH} "
                "are allowed"
            )
    except InvalidBody as exc:
        raise InvalidPatch(str(exc)) from None
    return data


def apply_patch_bytes(current: bytes | None, patch: bytes) -> bytes:
    """Apply an encoded patch to an encoded body. A body that is not JSON (or too deep
    to be read) counts as absent, as RFC 7386 treats a non-object target. Raises
    `InvalidPatch` for a patch that is not a JSON object, and `InvalidBody` when the
    result nests too deep."""
    target: Any = None
    if current is not None:
        try:
            target = load_json(current)
        except InvalidBody:
            target = None
    try:
        parsed = load_json(patch, "the patch")
    except InvalidBody as exc:
        raise InvalidPatch(str(exc)) from None
    if not isinstance(parsed, dict):
        raise InvalidPatch(f"a merge patch is a JSON object, not {type(parsed).__name__}")
    merged = dump_json(merge_patch(target, parsed), "the merged body")
    if json_too_deep(merged):
        raise InvalidBody(
            f"the merged body would nest more than {MAX_JSON_DEPTH} levels; patch refused"
        )
    return merged

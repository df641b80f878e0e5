"""Named items: key rules and RFC 7386 JSON merge patch.

>>> merge_patch({"a": 1, "b": {"c": 2}}, {"b": {"c": None, "d": 3}})
{'a': 1, 'b': {'d': 3}}
"""

from __future__ import annotations

import json
from typing import Any

from .errors import InvalidPatch
from .ids import validate_name

__all__ = ["apply_patch_bytes", "encode_body", "encode_patch", "merge_patch", "validate_key"]


def validate_key(key: str) -> str:
    """A named item key: non-empty text up to 255 bytes without control characters."""
    return validate_name(key, "named item key")


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
    """A named item body as bytes: bytes as given, text as UTF-8, objects and lists as JSON."""
    if isinstance(body, bytes | bytearray | memoryview):
        return bytes(body)
    if isinstance(body, str):
        return body.encode("utf-8")
    if isinstance(body, dict | list):
        return json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    raise InvalidPatch(f"a named item body is bytes, str, dict or list, got {type(body).__name__}")


def encode_patch(patch: bytes | str | dict) -> bytes:
    """Check a merge patch is a JSON object and return its canonical bytes."""
    if isinstance(patch, bytes | bytearray | str):
        try:
            parsed = json.loads(patch)
        except (ValueError, UnicodeDecodeError) as exc:
            raise InvalidPatch(f"the patch is not valid JSON: {exc}") from None
    else:
        parsed = patch
    if not isinstance(parsed, dict):
        raise InvalidPatch(
            f"a merge patch must be a JSON object, got {type(parsed).__name__}; "
            "to replace the whole value use set(key, body)"
        )
    try:
        return json.dumps(
            parsed, separators=(",", ":"), ensure_ascii=False, allow_nan=False
        ).encode()
    except (TypeError, ValueError) as exc:
        raise InvalidPatch(f"the patch cannot be written as JSON: {exc}") from None


def apply_patch_bytes(current: bytes | None, patch: bytes) -> bytes:
    """Apply an encoded patch to an encoded body. A body that is not JSON counts as
    absent, as RFC 7386 treats a non-object target."""
    target: Any = None
    if current is not None:
        try:
            target = json.loads(current)
        except (ValueError, UnicodeDecodeError):
            target = None
    result = merge_patch(target, json.loads(patch))
    return json.dumps(result, separators=(",", ":"), ensure_ascii=False).encode("utf-8")

"""JSON Schema, as the field table uses it (:mod:`.fieldtable`): the keywords its declarations
write (:func:`nullable`, :func:`integer`), the check of a value against one (:func:`valid`)
and what one asks in words (:func:`describe`, a 400's message)."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Mapping
from typing import Any

NULL = {"type": "null"}


def nullable(schema: dict[str, Any]) -> dict[str, Any]:
    """``schema`` or null."""
    if isinstance(schema.get("type"), str) and "enum" not in schema:
        return {**schema, "type": [schema["type"], "null"]}
    return {"anyOf": [schema, NULL]}


def integer(low: int, high: int | None = None, **more: Any) -> dict[str, Any]:
    return {"type": "integer", "minimum": low, **({"maximum": high} if high is not None else {}), **more}


def whole(value: Any) -> int | None:
    """``value`` as an int when it is a whole number (``3`` or ``3.0``, as JSON Schema and vLLM
    take integers), else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return None


def token_ids(value: Any) -> list[int] | None:
    """``value`` as a non-empty list of token ids (whole numbers), else None."""
    if not isinstance(value, list) or not value:
        return None
    ids = [whole(t) for t in value]
    return ids if all(t is not None for t in ids) else None  # type: ignore[return-value]  # all() above proves no None; mypy cannot narrow the list


_TYPES: dict[str, Callable[[Any], bool]] = {
    "null": lambda v: v is None,
    "boolean": lambda v: isinstance(v, bool),
    "integer": lambda v: whole(v) is not None,
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v),
    "string": lambda v: isinstance(v, str),
    "array": lambda v: isinstance(v, list),
    "object": lambda v: isinstance(v, dict),
}


def valid(schema: Mapping[str, Any], value: Any) -> bool:
    """``value`` satisfies ``schema`` (the JSON Schema keywords of this module's declarations:
    type, enum, bounds, lengths, pattern, items, properties, anyOf)."""
    types = schema.get("type")
    if types is not None and not any(_TYPES[t](value) for t in ([types] if isinstance(types, str) else types)):
        return False
    if "enum" in schema and not any(value == e and type(value) is type(e) for e in schema["enum"]):
        return False
    if "anyOf" in schema and not any(valid(s, value) for s in schema["anyOf"]):
        return False
    if _TYPES["number"](value):
        if value < schema.get("minimum", -math.inf) or value > schema.get("maximum", math.inf):
            return False
        if "exclusiveMinimum" in schema and value <= schema["exclusiveMinimum"]:
            return False
    if isinstance(value, str):
        if not schema.get("minLength", 0) <= len(value) <= schema.get("maxLength", math.inf):
            return False
        if "pattern" in schema and not re.search(schema["pattern"], value):
            return False
    if isinstance(value, list):
        if not schema.get("minItems", 0) <= len(value) <= schema.get("maxItems", math.inf):
            return False
        if schema.get("uniqueItems") and len({json.dumps(v, sort_keys=True) for v in value}) != len(value):
            return False
        if "items" in schema and not all(valid(schema["items"], v) for v in value):
            return False
    if isinstance(value, dict):
        properties = schema.get("properties", {})
        if any(k not in value for k in schema.get("required", ())) or len(value) > schema.get(
            "maxProperties", math.inf
        ):
            return False
        extra = schema.get("additionalProperties", True)
        for k, v in value.items():
            sub = properties.get(k, extra)
            if sub is False or (isinstance(sub, dict) and not valid(sub, v)):
                return False
    return True


def describe(schema: Mapping[str, Any]) -> str:
    """What ``schema`` asks, in words (a field's error message)."""
    if "description" in schema:
        return schema["description"]
    if "enum" in schema:
        return f"one of {json.dumps(schema['enum'])}"
    kind = schema.get("type")
    low, high = schema.get("minimum"), schema.get("maximum")
    if kind in ("integer", "number"):
        noun = "an integer" if kind == "integer" else "a number"
        if low is not None and high is not None:
            return f"{noun} in [{low}, {high}]"
        return f"{noun} >= {low}" if low is not None else noun
    if kind == "boolean":
        return "true or false"
    return f"a value of this schema: {json.dumps(schema)[:200]}"


def jsonable(value: Any) -> bool:
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return False
    return True

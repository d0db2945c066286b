"""A checker for the small JSON Schema subset ``config.SCHEMA`` uses.

Why not ``jsonschema``: importing it loads every optional format checker
installed beside it (rfc3987-syntax builds a lark grammar at import), which
cost 2-7 s per ``mlflow run`` here - more than the whole overhead budget of
the backend. The subset is: one flat object with ``additionalProperties:
false``; per property ``type`` (string, integer, number, boolean, object),
``minimum``, ``maximum``, ``exclusiveMinimum``, ``minLength``, ``maxLength``,
``enum``, ``pattern``; for objects ``propertyNames.pattern`` and
``additionalProperties`` (a schema for the values). The test suite checks that
it agrees with ``jsonschema`` on the same schema.

``first_error(schema, doc)`` returns ``(key, problem)`` for the first
offending key (unknown keys first, then keys in sorted order) or None.
"""
from __future__ import annotations

import json
import re
from typing import Any

_TYPE_WORDS = {"string": "a string", "integer": "an integer", "number": "a number",
               "boolean": "true or false", "object": "a JSON object"}


def _is_type(value: Any, t: str) -> bool:
    if t == "integer":
        # JSON Schema: 2.0 is an integer too
        return (isinstance(value, int) or (isinstance(value, float) and value.is_integer())) \
            and not isinstance(value, bool)
    if t == "number":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    return isinstance(value, {"string": str, "boolean": bool, "object": dict}[t])


def check_value(schema: dict, value: Any) -> str | None:
    """The problem with one value, in words; None when it is fine."""
    t = schema.get("type")
    if t is not None and not _is_type(value, t):
        return f"must be {_TYPE_WORDS.get(t, t)}, got {json.dumps(value)}"
    if "enum" in schema and value not in schema["enum"]:
        return f"must be one of {', '.join(map(repr, schema['enum']))}, got {value!r}"
    if "minimum" in schema and value < schema["minimum"]:
        return f"must be >= {schema['minimum']}, got {value}"
    if "maximum" in schema and value > schema["maximum"]:
        return f"must be <= {schema['maximum']}, got {value}"
    if "exclusiveMinimum" in schema and value <= schema["exclusiveMinimum"]:
        return f"must be > {schema['exclusiveMinimum']}, got {value}"
    if "minLength" in schema and len(value) < schema["minLength"]:
        return "must not be empty" if schema["minLength"] == 1 else \
            f"must be at least {schema['minLength']} characters"
    if "maxLength" in schema and len(value) > schema["maxLength"]:
        return f"must be at most {schema['maxLength']} characters"
    if "pattern" in schema and not re.search(schema["pattern"], value):
        return f"{value!r} is not valid (expected e.g. http://host:8888/)"
    return None


def first_error(schema: dict, doc: dict) -> tuple[str, str] | None:
    props = schema["properties"]
    unknown = sorted(k for k in doc if k not in props)
    if unknown and schema.get("additionalProperties") is False:
        return unknown[0], "unknown key; allowed: " + ", ".join(sorted(props))
    for key in sorted(doc):
        sub, value = props[key], doc[key]
        problem = check_value(sub, value)
        if problem:
            return key, problem
        if sub.get("type") == "object":
            names = (sub.get("propertyNames") or {}).get("pattern")
            for name in sorted(value):
                if names and not re.search(names, name):
                    return key, f"{name!r} is not a valid environment variable name"
            values = sub.get("additionalProperties")
            for name in sorted(value):
                problem = check_value(values, value[name]) if isinstance(values, dict) else None
                if problem:
                    return f"{key}.{name}", problem
    return None

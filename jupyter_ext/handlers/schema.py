"""The OpenAPI document and the request-body validators made from it.

One document drives three things: what ``openapi.json`` serves, how bodies
are checked here (so the document cannot drift from the checks), and the
schemathesis fuzz in the tests.
"""
from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any, Optional

from jsonschema import Draft4Validator

# OpenAPI 3.0 schemas are (close to) JSON Schema draft 4: boolean
# exclusiveMinimum, no type arrays; "nullable" only appears in answers.
DOC_PATH = Path(__file__).resolve().parent.parent / "openapi.json"


@functools.lru_cache(maxsize=1)
def openapi() -> dict:
    return json.loads(DOC_PATH.read_text())


@functools.lru_cache(maxsize=None)
def validator(schema_name: str) -> Draft4Validator:
    doc = openapi()
    root = {"components": doc["components"], "$ref": f"#/components/schemas/{schema_name}"}
    return Draft4Validator(root)


def first_error(schema_name: str, body: Any) -> Optional[tuple[str, str]]:
    """(message, where) of the most relevant problem in ``body``, or None if valid."""
    errors = list(validator(schema_name).iter_errors(body))
    if not errors:
        return None
    # the deepest error names the field; among equals prefer the first found
    err = max(errors, key=lambda e: len(e.absolute_path))
    where = "body" + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in err.absolute_path)
    return _explain(err), where


def _explain(err) -> str:
    """A short message: jsonschema's own quotes the whole (maybe huge) value."""
    v = err.validator
    if v == "additionalProperties":
        allowed = sorted(err.schema.get("properties", {}))
        extra = sorted(set(err.instance) - set(allowed)) if isinstance(err.instance, dict) else []
        return f"unknown field(s) {', '.join(map(repr, extra))}; allowed: {', '.join(allowed)}"
    if v == "required":
        return err.message
    if v == "type":
        return f"must be of type {err.validator_value}, got {type(err.instance).__name__}"
    if v in ("maximum", "minimum") and {"minimum", "maximum"} <= set(err.schema):
        # the documented `field: problem` wording, as the service's own checks say it
        return f"must be between {err.schema['minimum']:g} and {err.schema['maximum']:g}, got {err.instance:g}"
    if v in ("maximum", "minimum", "maxLength", "minLength", "maxItems", "minItems", "maxProperties"):
        return f"{v} is {err.validator_value}" + (f", got {err.instance}" if isinstance(err.instance, (int, float)) else "")
    if v == "enum":
        return f"must be one of {', '.join(map(str, err.validator_value))}"
    if v == "not" and isinstance(err.instance, dict) and "gpus" in err.instance and "cell_type" in err.instance:
        return "give either gpus or cell_type, not both"
    if v == "pattern":
        return f"must match {err.validator_value}"
    if v == "oneOf":
        return "must be a non-empty string or a non-empty list of strings"
    msg = err.message
    return msg if len(msg) <= 200 else msg[:200] + "..."

"""The OpenAPI document and the request-body validators made from it.

One document drives three things: what ``openapi.json`` serves, how bodies
are checked here (so the document cannot drift from the checks), and the
schemathesis fuzz in the tests.
"""
from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

import fastjsonschema
from jsonschema import Draft4Validator, ValidationError, validators

# OpenAPI 3.0 schemas are (close to) JSON Schema draft 4: boolean
# exclusiveMinimum, no type arrays; "nullable" only appears in answers.
DOC_PATH = Path(__file__).resolve().parent.parent / "openapi.json"


@functools.lru_cache(maxsize=1)
def openapi() -> dict:
    doc = json.loads(DOC_PATH.read_text())
    _job_limits(doc["components"]["schemas"]["JobSubmit"]["properties"])
    return doc


def _job_limits(props: dict) -> None:
    """The job body's bounds, from their one definition (hived.service.payload.LIMITS),
    placed where JSON schema wants each one."""
    from hived.service.payload import LIMITS
    for key, bounds in LIMITS.items():
        target = props[key]
        if key == "command":
            string, array = target["oneOf"]
            string["maxLength"] = array["items"]["maxLength"] = bounds["maxLength"]
            array["maxItems"] = bounds["maxItems"]
        elif key in ("env", "labels"):
            target["maxProperties"] = bounds["maxProperties"]
            target["additionalProperties"]["maxLength"] = bounds["maxLength"]
        elif key == "groups":
            target["maxItems"] = bounds["maxItems"]
        elif key == "needs":
            for paths in target["properties"].values():
                paths["maxItems"] = bounds["maxItems"]
                paths["items"]["maxLength"] = bounds["maxLength"]
        else:
            target.update(bounds)
    group = props["groups"]["items"]["properties"]
    for key in ("pods", "gpus", "cpus", "memory_gb"):
        group[key].update(LIMITS[key])


def _first_error_only(keyword, size_limit):
    """A keyword check that stops at its first error, and is skipped for a
    container over its size limit (that keyword reports it).

    The stock ``items``/``additionalProperties`` look at every element and
    report every bad one, and ``oneOf`` keeps all of them as context and
    quotes the whole value: a 600 KB list took seconds on the IOLoop. One
    error is all we report, and a bounded container is cheap to walk."""
    def check(validator, value, instance, schema):
        limit = schema.get(size_limit)
        if limit is not None and hasattr(instance, "__len__") and len(instance) > limit:
            return
        for error in keyword(validator, value, instance, schema):
            yield error
            return
    return check


def _one_of(validator, subschemas, instance, schema):
    # like jsonschema's, without quoting the (maybe huge) instance; the
    # schemas here are disjoint by type, so "valid under several" cannot happen
    context = []
    for index, sub in enumerate(subschemas):
        errors = list(validator.descend(instance, sub, schema_path=index))
        if not errors:
            return
        context.extend(errors)
    yield ValidationError("is not valid under any of the given schemas", context=context)


def _type(validator, types, instance, schema):
    types = [types] if isinstance(types, str) else types
    if not any(validator.is_type(instance, t) for t in types):
        yield ValidationError(f"is not of type {', '.join(map(repr, types))}")


def _size(bound: str, longest: bool):
    def check(validator, limit, instance, schema):
        kind = {"maxItems": "array", "minItems": "array", "maxProperties": "object",
                "maxLength": "string", "minLength": "string"}[bound]
        if validator.is_type(instance, kind) and (len(instance) > limit if longest else len(instance) < limit):
            yield ValidationError(f"{bound} is {limit}")
    return check


# jsonschema's messages quote the instance (a repr of up to a megabyte, made
# even when the error is later dropped); ours are made by _explain anyway
_BoundedValidator = validators.extend(Draft4Validator, {
    "type": _type,
    **{bound: _size(bound, bound.startswith("max"))
       for bound in ("maxItems", "minItems", "maxProperties", "maxLength", "minLength")},
    "items": _first_error_only(Draft4Validator.VALIDATORS["items"], "maxItems"),
    "additionalProperties": _first_error_only(Draft4Validator.VALIDATORS["additionalProperties"], "maxProperties"),
    "oneOf": _one_of,
})


@functools.cache
def validator(schema_name: str) -> Draft4Validator:
    doc = openapi()
    root = {"components": doc["components"], "$ref": f"#/components/schemas/{schema_name}"}
    return _BoundedValidator(root)


@functools.cache
def fast_check(schema_name: str):
    """The same schema compiled to Python by fastjsonschema: about 100 times
    quicker on a valid megabyte body, the common case. It only says valid or
    not; jsonschema then finds the field and words the message."""
    doc = openapi()
    root = {"components": doc["components"], "$ref": f"#/components/schemas/{schema_name}"}
    return fastjsonschema.compile(root, use_default=False)


def first_error(schema_name: str, body: Any) -> tuple[str, str] | None:
    """(message, where) of the most relevant problem in ``body``, or None if valid."""
    try:
        fast_check(schema_name)(body)
        return None
    except fastjsonschema.JsonSchemaException:
        pass
    errors = list(validator(schema_name).iter_errors(body))
    if not errors:
        return None
    # the deepest error names the field; among equals prefer the first found
    err = max(errors, key=lambda e: len(e.absolute_path))
    if err.validator == "oneOf":
        # right shape, wrong size or text: name the item and the bound, as the service does
        inner = [e for e in err.context or () if e.validator in ("pattern", "maxLength", "maxItems")]
        if inner:
            err = max(inner, key=lambda e: len(e.absolute_path))
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
        got = f", got {err.instance}" if isinstance(err.instance, (int, float)) else ""
        return f"{v} is {err.validator_value}{got}"
    if v == "enum":
        return f"must be one of {', '.join(map(str, err.validator_value))}"
    if v == "not" and isinstance(err.instance, dict) and "gpus" in err.instance and "cell_type" in err.instance:
        return "give either gpus or cell_type, not both"
    if v == "pattern":
        if isinstance(err.instance, str) and "\x00" in err.instance:
            return "must not contain a NUL character"
        if err.validator_value.startswith("^/"):
            return "must be an absolute path"
        return f"must match {err.validator_value}"
    if v == "oneOf":
        # right shape, wrong text: say what is wrong with the text
        wording = [e for e in err.context or () if e.validator == "pattern"]
        if wording:
            return _explain(wording[0])
        return "must be a non-empty string or a non-empty list of strings"
    msg = err.message
    return msg if len(msg) <= 200 else msg[:200] + "..."

"""A yes/no JSON Schema check for the common case: a valid file.

jsonschema (with referencing, rpds, attrs) costs ~35 ms to import, more than the rest of a
one-file check; a pre-commit hook pays it on every commit. This module decides, with the
shipped schema itself (nothing restated by hand), whether an instance is valid under Draft
2020-12 for the keywords those schemas use. It answers True only when every keyword met is one
it implements; False or None (a keyword it does not know) sends the caller to jsonschema, which
explains the errors. tests/test_fast_schema.py compares its verdict with jsonschema's."""

from __future__ import annotations

import re

# Keywords that never make an instance invalid (annotations, this package's own x-* keywords).
_ANNOTATIONS = frozenset({
    "$schema", "$id", "$defs", "$comment", "title", "description", "default", "examples", "deprecated",
    "deprecationMessage", "doNotSuggest", "errorMessage", "readOnly", "writeOnly", "markdownDescription",
})
_PATTERNS: dict = {}


class _Undecided(Exception):
    """A keyword this checker does not implement."""


def is_valid(root, instance) -> bool | None:
    """True/False by Draft 2020-12 with msprobe's integers (an int, not a bool, not 1.0);
    None when the schema uses a keyword not implemented here."""
    try:
        return _valid(root, root, instance, 0)
    except (_Undecided, RecursionError, re.error):
        return None


def _is_type(t: str, x) -> bool:
    if t == "object":
        return isinstance(x, dict)
    if t == "array":
        return isinstance(x, list)
    if t == "string":
        return isinstance(x, str)
    if t == "integer":
        return isinstance(x, int) and not isinstance(x, bool)
    if t == "number":
        return isinstance(x, (int, float)) and not isinstance(x, bool)
    if t == "boolean":
        return isinstance(x, bool)
    if t == "null":
        return x is None
    raise _Undecided(t)


def _eq(a, b) -> bool:
    """JSON equality: true is not 1, 1 is 1.0, containers compared deeply."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a is b
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_eq(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_eq(a[k], b[k]) for k in a)
    if isinstance(a, (list, dict)) or isinstance(b, (list, dict)):
        return False
    return a == b


def resolve_pointer(root, ref: str):
    """The node a local `$ref` ('#/$defs/x') names in `root`; LookupError when there is none."""
    node = root
    for part in ref[1:].split("/"):
        if not part:
            continue
        part = part.replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            raise LookupError(ref)
    return node


def _ref(root, ref: str):
    if not ref.startswith("#"):
        raise _Undecided(ref)
    try:
        return resolve_pointer(root, ref)
    except LookupError:
        raise _Undecided(ref) from None


def _valid(root, schema, x, depth: int) -> bool:
    if schema is True or schema == {}:
        return True
    if schema is False:
        return False
    if not isinstance(schema, dict) or depth > 64:
        raise _Undecided("schema")
    for key, v in schema.items():
        if key in _ANNOTATIONS or key.startswith("x-") or key in ("then", "else"):
            continue
        if key == "type":
            if not any(_is_type(t, x) for t in (v if isinstance(v, list) else [v])):
                return False
        elif key == "$ref":
            if not _valid(root, _ref(root, v), x, depth + 1):
                return False
        elif key == "const":
            if not _eq(x, v):
                return False
        elif key == "enum":
            if not any(_eq(x, e) for e in v):
                return False
        elif key == "properties":
            if isinstance(x, dict):
                for k, sub in v.items():
                    if k in x and not _valid(root, sub, x[k], depth + 1):
                        return False
        elif key == "required":
            if isinstance(x, dict) and not all(k in x for k in v):
                return False
        elif key == "additionalProperties":
            if isinstance(x, dict):
                if "patternProperties" in schema:
                    raise _Undecided(key)
                known = schema.get("properties", {})
                for k, val in x.items():
                    if k not in known and not _valid(root, v, val, depth + 1):
                        return False
        elif key == "items":
            if "prefixItems" in schema:
                raise _Undecided(key)
            if isinstance(x, list) and not all(_valid(root, v, e, depth + 1) for e in x):
                return False
        elif key == "contains":
            if "minContains" in schema or "maxContains" in schema:
                raise _Undecided(key)
            if isinstance(x, list) and not any(_valid(root, v, e, depth + 1) for e in x):
                return False
        elif key in ("minItems", "maxItems"):
            if isinstance(x, list) and (len(x) < v if key == "minItems" else len(x) > v):
                return False
        elif key == "uniqueItems":
            if v and isinstance(x, list) and any(_eq(x[i], x[j]) for i in range(len(x))
                                                 for j in range(i + 1, len(x))):
                return False
        elif key in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
            if isinstance(x, (int, float)) and not isinstance(x, bool):
                bad = {"minimum": x < v, "maximum": x > v, "exclusiveMinimum": x <= v,
                       "exclusiveMaximum": x >= v}[key]
                if bad:
                    return False
        elif key in ("minLength", "maxLength"):
            if isinstance(x, str) and (len(x) < v if key == "minLength" else len(x) > v):
                return False
        elif key == "pattern":
            if isinstance(x, str):
                rx = _PATTERNS.get(v) or _PATTERNS.setdefault(v, re.compile(v))
                if not rx.search(x):
                    return False
        elif key == "allOf":
            if not all(_valid(root, s, x, depth + 1) for s in v):
                return False
        elif key == "anyOf":
            if not any(_valid(root, s, x, depth + 1) for s in v):
                return False
        elif key == "oneOf":
            if sum(1 for s in v if _valid(root, s, x, depth + 1)) != 1:
                return False
        elif key == "not":
            if _valid(root, v, x, depth + 1):
                return False
        elif key == "if":
            branch = schema.get("then") if _valid(root, v, x, depth + 1) else schema.get("else")
            if branch is not None and not _valid(root, branch, x, depth + 1):
                return False
        else:
            raise _Undecided(key)
    return True


def resolve(schema: dict, node):
    """Follow a local `$ref` ('#/$defs/x') in `schema`; other nodes come back as they are."""
    seen = 0
    while isinstance(node, dict) and isinstance(node.get("$ref"), str) and node["$ref"].startswith("#") and seen < 20:
        try:
            target = resolve_pointer(schema, node["$ref"])
        except LookupError:
            return node
        node, seen = target, seen + 1
    return node


def properties(schema: dict, node) -> dict:
    """The `properties` a (possibly $ref'd) subschema declares."""
    node = resolve(schema, node)
    props = node.get("properties") if isinstance(node, dict) else None
    return props if isinstance(props, dict) else {}

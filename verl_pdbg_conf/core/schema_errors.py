"""The findings for a file that fails its schema: jsonschema's errors in words, at the
offending value's line and column, with the schema's own annotations (schema.py)."""

from __future__ import annotations

import json
import re

from verl_pdbg_conf.core.document import Document
from verl_pdbg_conf.core.findings import Finding, Severity, format_path
from verl_pdbg_conf.core.fast_schema import properties, resolve
from verl_pdbg_conf.core.suggest import did_you_mean

_JSON_TYPES = {"object": "an object", "array": "an array", "string": "a string", "integer": "an integer",
               "number": "a number", "boolean": "true or false", "null": "null"}


def _pick(value, validator: str):
    """An annotation's text: a string, or a mapping keyed by the failing keyword."""
    if isinstance(value, dict):
        value = value.get(validator)
    return value if isinstance(value, str) else None


def _chain(root: dict, err) -> list:
    """The subschemas from the root to the one where `err` arose. `$ref` is not on
    jsonschema's schema path, so follow it when the next step is not found."""
    node = root
    chain = [node]
    for part in list(err.absolute_schema_path)[:-1]:
        if isinstance(node, dict) and part not in node:
            node = resolve(root, node)
        try:
            node = node[part]
        except (KeyError, IndexError, TypeError):
            break
        chain.append(node)
    chain.append(err.schema)
    return [resolve(root, n) if isinstance(n, dict) else n for n in chain]


def _annotations(root: dict, err) -> dict:
    """errorMessage, x-hint, x-rule and x-severity for `err`: from the innermost
    subschema on its path that has them; mapping forms are keyed by the failing keyword."""
    found: dict = {}
    for sub in _chain(root, err):
        if not isinstance(sub, dict):
            continue
        for k in ("x-rule", "x-severity"):
            if isinstance(sub.get(k), str):
                found[k] = sub[k]
        for k in ("errorMessage", "x-hint"):
            text = _pick(sub.get(k), err.validator)
            if text:
                found[k] = text
        if "examples" in sub or "default" in sub:
            found["example"] = _example(sub)
        if isinstance(sub.get("description"), str):
            found["description"] = sub["description"]
    return found


def _type_name(x) -> str:
    if x is None:
        return "null"
    if isinstance(x, bool):
        return "a boolean"
    if isinstance(x, int):
        return "an integer"
    if isinstance(x, float):
        return "a number"
    if isinstance(x, str):
        return "a string"
    if isinstance(x, list):
        return "an array"
    if isinstance(x, dict):
        return "an object"
    return type(x).__name__


def _got(x) -> str:
    return "null" if x is None else f"{_type_name(x)} {_show(x)}"


def _show(x) -> str:
    try:
        text = json.dumps(x, ensure_ascii=False)
    except (TypeError, ValueError):
        text = repr(x)
    return text if len(text) <= 60 else text[:57] + "..."


def _types_phrase(t) -> str:
    ts = t if isinstance(t, list) else [t]
    words = [_JSON_TYPES.get(x, str(x)) for x in ts]
    return " or ".join(words)


def _example(node) -> str:
    if isinstance(node, dict):
        ex = node.get("examples")
        if isinstance(ex, list) and ex:
            return _show(ex[0])
        if "default" in node:
            return _show(node["default"])
    return ""


def _describe(root: dict, err, name: str) -> tuple[str, str]:
    """(message, hint) for one jsonschema error, without annotations."""
    v, inst, arg = err.validator, err.instance, err.validator_value
    example = _example(resolve(root, err.schema))
    if v == "type":
        hint = f"use {_types_phrase(arg)}" + (f", e.g. {example}" if example else "")
        return f"{name} must be {_types_phrase(arg)}, not {_got(inst)}", hint
    if v == "enum":
        choices = [c for c in arg if c is not None]
        shown = ", ".join(_show(c) for c in choices) + (" or null" if None in arg else "")
        return (f"{name}: {_show(inst)} is not an allowed value{did_you_mean(inst, choices)}",
                f"use one of {shown}")
    if v == "const":
        return f"{name} must be {_show(arg)}", f"set it to {_show(arg)}"
    if v == "required":
        missing = [k for k in arg if isinstance(inst, dict) and k not in inst]
        keys = " and ".join(f"'{k}'" for k in missing) or "a key"
        return f"{name} is missing the required key{'s' if len(missing) > 1 else ''} {keys}", f"add {keys}"
    if v in ("minItems", "maxItems"):
        n = len(inst) if isinstance(inst, list) else "?"
        bound = "at least" if v == "minItems" else "at most"
        return (f"{name} must have {bound} {arg} item{'s' if arg != 1 else ''}, it has {n}",
                f"give {bound} {arg} item{'s' if arg != 1 else ''}")
    if v in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
        op = {"minimum": ">=", "maximum": "<=", "exclusiveMinimum": ">", "exclusiveMaximum": "<"}[v]
        return f"{name} must be {op} {arg}, not {_show(inst)}", f"use a value {op} {arg}"
    if v == "pattern":
        return f"{name}: {_show(inst)} does not have the expected form", (f"e.g. {example}" if example else "")
    if v == "uniqueItems":
        return f"{name} holds the same item twice", "remove the duplicate"
    if v == "not":
        return f"{name}: {_show(inst)} is not allowed here", ""
    if v in ("minLength", "maxLength"):
        return f"{name} is too {'short' if v == 'minLength' else 'long'} ({err.message})", ""
    return f"{name}: {err.message}", ""


def _first_sentence(text: str) -> str:
    return text.split(". ")[0].rstrip(".") if text else "see the schema for this key"


def _branch_errors(err) -> list:
    """The anyOf/oneOf branch errors worth showing: drop type mismatches of branches
    whose type did not fit when another branch's type did."""
    subs = list(err.context or [])
    typed = [e for e in subs if e.validator != "type"]
    return typed or subs


def _unknown_keys(doc: Document, root: dict, err, path: tuple, rule: str, sev: Severity) -> list[Finding]:
    """One finding per key that `additionalProperties: false` (or unevaluatedProperties)
    refuses, at the key itself, with a did-you-mean among the declared keys."""
    inst = err.instance if isinstance(err.instance, dict) else {}
    node = resolve(root, err.schema)
    known = list(properties(root, node))
    pats = node.get("patternProperties", {}) if isinstance(node, dict) else {}
    extra = [k for k in inst if k not in known and not any(re.search(p, str(k)) for p in pats)]
    return [doc.finding(rule, sev, f"unknown key '{format_path(path + (k,))}'{did_you_mean(k, known)}",
                        path + (k,), hint="remove it or fix its spelling", key=True) for k in extra]


def _finding(doc: Document, root: dict, err, rule: str) -> list[Finding]:
    path = tuple(err.absolute_path)
    name = format_path(path) or "the top level"
    ann = _annotations(root, err)
    rule = ann.get("x-rule", rule)
    try:
        sev = Severity(ann.get("x-severity", "error"))
    except ValueError:
        sev = Severity.ERROR
    if err.validator in ("additionalProperties", "unevaluatedProperties") and "errorMessage" not in ann:
        found = _unknown_keys(doc, root, err, path, rule, sev)
        if found:
            return found
    if err.validator in ("anyOf", "oneOf"):
        branches = _branch_errors(err)
        if branches and all(e.validator == "type" for e in branches):
            types: list = []
            for e in branches:
                ts = e.validator_value if isinstance(e.validator_value, list) else [e.validator_value]
                types += [t for t in ts if t not in types]
            detail = f"must be {_types_phrase(types)}, not {_got(err.instance)}"
            msg, hint = f"{name} {detail}", ""
        elif len(branches) == 1:
            inner = branches[0]
            msg, hint = _describe(root, inner, format_path(tuple(inner.absolute_path)) or name)
            detail = _describe(root, inner, "value")[0]
        else:
            detail = ""
            msg, hint = f"{name}: {_show(err.instance)} matches none of the allowed forms", ""
        if "errorMessage" in ann:
            msg = f"{name}: {ann['errorMessage']}" + (f" ({detail})" if detail else f" (got {_show(err.instance)})")
    else:
        msg, hint = _describe(root, err, name)
        if "errorMessage" in ann:
            msg = f"{name}: {ann['errorMessage']}"
            if err.validator in ("pattern", "type", "enum", "const", "not"):
                msg += f" (got {_show(err.instance)})"
    if not hint and ann.get("example"):
        hint = f"e.g. {ann['example']}"
    hint = ann.get("x-hint") or hint or _first_sentence(ann.get("description", ""))
    return [doc.finding(rule, sev, msg, path, hint=hint)]


def findings(doc: Document, root: dict, errors: list, rule: str) -> list[Finding]:
    """Every error as a Finding. Per location, a wrong type hides the other complaints about
    that value."""
    typed: dict = {}  # path -> the one type error reported there, a plain one if any
    for e in errors:
        if e.validator == "type":
            at = tuple(e.absolute_path)
            if at not in typed or ("x-rule" in _annotations(root, typed[at]) and "x-rule" not in _annotations(root, e)):
                typed[at] = e
    out: list[Finding] = []
    seen = set()
    for err in sorted(errors, key=lambda e: (len(e.absolute_path), [str(p) for p in e.absolute_path])):
        at = tuple(err.absolute_path)
        if at in typed and err is not typed[at]:
            continue
        for f in _finding(doc, root, err, rule):
            k = (f.rule, f.path, f.message)
            if k not in seen:
                seen.add(k)
                out.append(f)
    return out

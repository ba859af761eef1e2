"""JSON Schema validation that reports findings at a file's line and column.

Generic over the schemas shipped in `verl_pdbg_conf/schemas/`. Schemas may carry
these extra keywords, read from the subschema where an error arises (or one that
encloses it): `errorMessage` (a string, or a mapping from the failing keyword to
a string, as in ajv-errors; VS Code shows the string form too), `x-hint` (the fix),
`x-rule` (rule id) and `x-severity` (error, warning or info). A valid file is judged by
fast_schema.py alone; jsonschema and the words for its errors (schema_errors.py) are
imported for a file with errors."""

from __future__ import annotations

import functools
import json
import os

from verl_pdbg_conf.core.document import Document
from verl_pdbg_conf.core.fast_schema import is_valid, properties, resolve  # noqa: F401 - also this module's names
from verl_pdbg_conf.core.findings import Finding

SCHEMAS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "schemas")


def _schema_file(name: str) -> str:
    return name if name.endswith(".json") else f"{name}.schema.json"


@functools.lru_cache(maxsize=None)
def load_schema(name: str) -> dict:
    """The schema `name` ('msprobe-config' or its file name) from the installed package (read
    as a file: importlib.resources costs a validator start-up some 5 ms of imports)."""
    with open(os.path.join(SCHEMAS, _schema_file(name)), encoding="utf-8") as f:
        return json.load(f)


@functools.lru_cache(maxsize=None)
def validator(name: str):
    """A compiled Draft 2020-12 validator, built once. jsonschema is imported here,
    not at module import, to keep the CLI's start-up short; no format checker."""
    from jsonschema import Draft202012Validator, validators

    # msprobe and verl test ints with isinstance(x, int): 1.0 is not an integer for them.
    types = Draft202012Validator.TYPE_CHECKER.redefine(
        "integer", lambda _checker, x: isinstance(x, int) and not isinstance(x, bool))
    cls = validators.extend(Draft202012Validator, type_checker=types)
    return cls(load_schema(name))


def schema_findings(doc: Document, schema_name: str, rule: str = "msprobe-schema") -> list[Finding]:
    """Every schema violation in `doc` as a Finding at the offending value's line and
    column. Per location, a wrong type hides the other complaints about that value."""
    if not doc.ok:
        return []
    root = load_schema(schema_name)
    if is_valid(root, doc.data) is True:  # the common case, without importing jsonschema
        return []
    from verl_pdbg_conf.core.schema_errors import findings  # only for a file with errors

    return findings(doc, root, list(validator(schema_name).iter_errors(doc.data)), rule)

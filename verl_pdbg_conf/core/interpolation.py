"""Resolve OmegaConf interpolations (`${oc.select:...}`, `${oc.env:...}`, `${a.b}`) in a
loaded config the way verl's TaskRunner will, value by value, so one that cannot be
resolved here becomes an Unknown instead of failing the whole file."""

from __future__ import annotations

from verl_pdbg_conf.core.document import MISSING, Document, Unknown, get, is_unknown, walk

MAX_INTERPOLATION = 4096  # a real interpolation is a line; OmegaConf's grammar is slow on huge ones


def _paths_with_interpolation(data):
    return [p for p, v in walk(data) if isinstance(v, str) and "${" in v and not is_unknown(v)]


def resolve(doc: Document) -> None:
    """Resolve in place. Cheap when the file has no `${`: omegaconf is not imported."""
    paths = _paths_with_interpolation(doc.data)
    if not paths or not isinstance(doc.data, dict):
        return
    from omegaconf import OmegaConf

    try:
        cfg = OmegaConf.create(_plain(doc.data))
    except Exception as e:  # keys OmegaConf refuses (ints mixed with str, ...)
        for p in paths:
            _set(doc.data, p, Unknown(get(doc.data, p), f"not an OmegaConf config: {e}"))
        return
    whole = None
    if all(len(get(doc.data, p)) <= MAX_INTERPOLATION for p in paths):
        try:  # one pass for the common case; value by value only when something fails
            whole = OmegaConf.to_container(cfg, resolve=True)
        except Exception:
            whole = None
    resolved = {}
    for p in paths:
        raw = get(doc.data, p)
        if len(raw) > MAX_INTERPOLATION:
            resolved[p] = Unknown(raw, f"interpolation longer than {MAX_INTERPOLATION} characters")
            continue
        if whole is not None:
            value = get(whole, p, MISSING)  # MISSING: a key _plain turned into a string
            if value is not MISSING:
                resolved[p] = value
                continue
        try:
            node = cfg
            for part in p[:-1]:
                node = node[part]
            value = node[p[-1]]
            if OmegaConf.is_config(value):
                value = OmegaConf.to_container(value, resolve=True)
            resolved[p] = value
        except Exception as e:  # any resolver failure: unset env var, missing key, bad grammar
            resolved[p] = Unknown(get(doc.data, p), str(e).splitlines()[0] if str(e) else type(e).__name__)
    for p, v in resolved.items():
        _set(doc.data, p, v)


def _plain(data):
    if isinstance(data, dict):
        return {str(k): _plain(v) for k, v in data.items()}
    if isinstance(data, list):
        return [_plain(v) for v in data]
    if is_unknown(data):
        return "???"  # OmegaConf's missing value: a reference to it fails, so it stays unknown
    if isinstance(data, str):
        return str(data)
    if isinstance(data, (int, float, bool)) or data is None:
        return data
    return str(data)  # dates and other YAML scalars OmegaConf cannot hold


def _set(data, path, value):
    for p in path[:-1]:
        data = data[p]
    data[path[-1]] = value

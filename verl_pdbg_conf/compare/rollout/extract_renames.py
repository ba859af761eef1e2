"""Read off the installed transformers how it renames a checkpoint's weights at load (its checkpoint conversion
mapping, `transformers.conversion_mapping`), and write it as data for the rollout compare (renames.py), which
never imports transformers: the engine names its modules as the checkpoint does, the trainer's model as
transformers renamed them (Mixtral's `block_sparse_moe` is `mlp` in transformers 5).

Per model type, the transforms transformers applies to a checkpoint key, in its order (every renaming, then at
most one converter; `legacy`'s renamings appended, as `get_model_conversion_mapping` does): each as its
compiled source pattern and the target it puts in place of the match. A model type holding a transform whose
renaming is not this one (GroupWeightRename's guarded groups) is listed under `not_read`. renames.rename_key,
the compare's own renaming, is checked here against transformers' `rename_source_key` on keys made from every
pattern, so that the compare follows the library.

    python -m verl_pdbg_conf.compare.rollout.extract_renames OUT.json     (in a venv with transformers 5)"""

from __future__ import annotations

import json
import re
import sys

PROBE_PREFIXES = ("", "model.layers.0.", "model.language_model.layers.1.")
PROBE_LEAVES = ("weight", "bias")


def _transforms():
    from transformers import conversion_mapping as CM

    mapping = CM._build_checkpoint_conversion_mapping()
    legacy = list(mapping.get("legacy") or ())
    return {name: list(ts) + legacy for name, ts in mapping.items() if name != "legacy"}


def _rule(t) -> dict | None:
    from transformers import core_model_loading as L

    if isinstance(t, L.GroupWeightRename) or type(t).rename_source_key is not L.WeightTransform.rename_source_key:
        return None
    kind = "convert" if isinstance(t, L.WeightConverter) else "rename" if isinstance(t, L.WeightRenaming) else None
    if kind is None:
        return None
    return {"kind": kind, "pattern": t.compiled_sources.pattern, "target": t.target_patterns[0]}


def _samples(pattern: str) -> list[str]:
    """Keys a pattern may match: its literal text, indices as 0, under a few prefixes."""
    text = re.sub(r"\(\?[^)]*\)", "", pattern)  # lookarounds and named-group openers
    text = text.replace(r"\d+", "0").replace(".*", "0").replace("\\", "").replace("^", "").replace("$", "")
    text = re.sub(r"[()|+?]", "", text).replace("*", "0")
    out = []
    for prefix in PROBE_PREFIXES:
        key = (prefix + text.lstrip(".")).replace("..", ".")
        out += [key, f"{key}.{PROBE_LEAVES[0]}"]
    return out


def read() -> dict:
    from transformers import core_model_loading as L

    from verl_pdbg_conf.compare.rollout import renames as R

    rules: list[dict] = []
    index: dict[str, int] = {}
    models: dict[str, list[int]] = {}
    not_read: dict[str, str] = {}
    checked = 0
    for name, transforms in sorted(_transforms().items()):
        ids = []
        for t in transforms:
            rule = _rule(t)
            if rule is None:
                not_read[name] = f"{type(t).__name__} (its renaming is not the plain pattern's)"
                break
            key = json.dumps(rule, sort_keys=True)
            if key not in index:
                index[key] = len(rules)
                rules.append(rule)
            ids.append(index[key])
        if name in not_read:
            continue
        models[name] = ids
        renamings = [t for t in transforms if not isinstance(t, L.WeightConverter)]
        converters = [t for t in transforms if isinstance(t, L.WeightConverter)]
        mine = [rules[i] for i in ids]
        for t in transforms:
            for source in t.source_patterns:
                for key in _samples(source):
                    want, _ = L.rename_source_key(key, renamings, converters)
                    got = R.rename_key(key, mine)
                    assert got == want, f"{name}: {key!r} -> {got!r}, transformers {want!r}"
                    checked += 1
    return {"rules": rules, "models": models, "not_read": not_read, "checked": checked}


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    import transformers

    doc = {"library": "transformers", "version": transformers.__version__, **read()}
    with open(argv[0], "w") as fh:
        json.dump(doc, fh, indent=0, sort_keys=True)
        fh.write("\n")
    print(f"{argv[0]}: {len(doc['models'])} model types, {len(doc['rules'])} transforms, {doc['checked']} keys "
          f"renamed as transformers does; not read: {', '.join(sorted(doc['not_read'])) or 'none'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

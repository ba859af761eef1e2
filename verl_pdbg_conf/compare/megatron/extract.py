"""Read, off the installed mbridge and megatron-core, which Megatron parameter each Hugging Face parameter
becomes, and write it as data (`mbridge-<version>.json` beside this script), so the compare pairs the two
backends' modules by the packages' own tables, never by names typed here.

    python -m verl_pdbg_conf.compare.megatron.extract      (in a venv holding mbridge and megatron-core)

Per model type mbridge registers: each name of its tables (`_DIRECT_MAPPING`, and `_ATTENTION_MAPPING`,
`_MLP_MAPPING`, `_OTHER_MAPPING` under a probe layer's `decoder.layers.N.`) run through the bridge's own
`_weight_name_mapping_mcore_to_hf`, the layer number put back as `{layer}`; a key that names a module
(Qwen2-MoE's `pre_mlp_layernorm`, its experts' `mlp.experts.linear_fc1`) is probed with the parameter its
Hugging Face names hold (`.weight`), as megatron-core names its parameters. A key whose Hugging Face names
hold an expert (`{expert_id}`) is probed as mbridge names one expert's weight, TransformerEngine's grouped
linear's (`mlp.experts.linear_fc1.weight<E>`, the global expert after `weight`, as mbridge's own expert-
parallel mapping reads it), the expert put back as `{expert}`; an MLP-table key the bridge refuses under the
layer (Qwen2-MoE's `shared_experts.linear_fc1.weight`) is tried under the layer's `mlp.`, where megatron-core's
MoE layer holds it. Plus megatron-core's local layer spec's `sharded_state_dict_keys_map` (its module names ->
TransformerEngine's fused ones)."""

from __future__ import annotations

import argparse
import json
import os
from importlib import metadata

HERE = os.path.dirname(os.path.abspath(__file__))
PROBE = 7  # a layer number no table holds, put back as {layer}
PROBE_EXPERT = 6  # an expert number, put back as {expert}
FORMAT = 2


def _probes(bridge) -> list[list[str]]:
    """Per table key, the names to try in order (the first the bridge maps stands)."""
    out = [[k] for k in getattr(bridge, "_DIRECT_MAPPING", {})]
    for table in ("_ATTENTION_MAPPING", "_MLP_MAPPING", "_OTHER_MAPPING"):
        for k, hf in (getattr(bridge, table, {}) or {}).items():
            if "{layer_number}" in k:  # a key holding its own template (the VLMs') stands whole
                out.append([k.replace("{layer_number}", str(PROBE))])
                continue
            param = hf[0].rpartition(".")[2] if hf else ""  # weight, bias: what the Hugging Face name holds
            if param and param not in k.rpartition(".")[2]:  # a key naming the module (`pre_mlp_layernorm`)
                k = f"{k}.{param}"
            if any("{expert_id}" in h for h in hf):  # one expert's weight, as mbridge names it
                k += str(PROBE_EXPERT)
            names = [f"decoder.layers.{PROBE}.{k}"]
            if table == "_MLP_MAPPING" and not k.startswith("mlp."):
                names.append(f"decoder.layers.{PROBE}.mlp.{k}")
            out.append(names)
    return out


def _template(name: str) -> str:
    name = name.replace(f".{PROBE}.", ".{layer}.").replace(f".{PROBE_EXPERT}.", ".{expert}.")
    return name[:-len(str(PROBE_EXPERT))] + "{expert}" if name.endswith(f".weight{PROBE_EXPERT}") else name


def bridge_table(cls) -> tuple[list, list]:
    """[(mcore name, [hf names])] of one bridge class, and the names its mapping refused."""
    bridge = cls.__new__(cls)  # the tables are class attributes; the mapping needs no config
    rows, refused = [], []
    for names in _probes(bridge):
        for i, name in enumerate(names):
            try:
                hf = bridge._weight_name_mapping_mcore_to_hf(name)
            except Exception as e:  # noqa: BLE001 - a bridge that needs its config for this name
                if i == len(names) - 1:
                    refused.append([_template(names[0]), f"{type(e).__name__}: {e}"[:200]])
                continue
            if hf:
                rows.append([_template(name), [_template(h) for h in hf]])
            break
    return rows, refused


def local_spec_keys() -> dict:
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec

    spec = get_gpt_layer_local_spec(normalization="RMSNorm")
    return dict(getattr(spec.submodules, "sharded_state_dict_keys_map", {}) or {})


def extract() -> dict:
    import mbridge.models  # noqa: F401 - registers every bridge
    from mbridge.core.bridge import _MODEL_REGISTRY

    models, refused = {}, {}
    for model_type, cls in sorted(_MODEL_REGISTRY.items()):
        rows, bad = bridge_table(cls)
        models[model_type] = {"bridge": cls.__name__, "params": rows}
        if bad:
            refused[model_type] = bad
    return {"format": FORMAT, "mbridge": metadata.version("mbridge"),
            "megatron_core": metadata.version("megatron-core"),
            "layer_template": "decoder.layers.{layer}.", "expert_placeholder": "{expert}",
            "local_spec_keys": local_spec_keys(),
            "models": models, "refused": refused}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", help="output file (default: mbridge-<version>.json beside this script)")
    args = ap.parse_args(argv)
    doc = extract()
    out = args.out or os.path.join(HERE, f"mbridge-{doc['mbridge']}.json")
    with open(out, "w") as f:
        json.dump(doc, f, indent=1, sort_keys=True)
        f.write("\n")
    print(f"{out}: {len(doc['models'])} model types")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

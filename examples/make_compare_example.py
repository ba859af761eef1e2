"""Make the two small runs `verl-pdbg-compare` is tried on: examples/compare/golden and target.

    python examples/make_compare_example.py     # rewrites examples/compare/ (needs the [test] extras)

Each run has the layout a verl run with the precision_debugger profiler writes
(`step_1/<stage>/step0/rank0/dump.json`), made by this package's runtime profiler on CPU torch:
a tiny decoder-shaped model as the actor (embedding, 3 pre-norm MLP layers, LM head; random
weights, seed 0), one profiled step, two stages (`actor_compute_log_prob`: a forward;
`actor_update`: forward, backward and an SGD step), msprobe's statistics at mix level (modules and
APIs, so each node has its module path), rank 0 of a one-process gloo group. The target differs in
one place: layer 1's `mlp.down_proj` weight is multiplied by 1.01.

Each run is made in a process of its own (msprobe wraps torch for the life of a process) with one
thread, fixed seeds and fixed data, so a second generation writes the same statistics. The absolute
paths msprobe writes in stack.json (this checkout, the Python installation) are cut to paths
relative to them, so the files name no machine. The README's compare output names lines of this
file (stack.json records the calling line): after editing it, run it, then
`python tests/doc_commands.py` to rewrite the shown outputs.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
OUT = HERE / "compare"
STAGES = ("actor_compute_log_prob", "actor_update")
CONFIG = {"task": "statistics", "rank": [], "step": [], "level": "mix", "async_dump": False,
          "statistics": {"scope": [], "list": [], "tensor_list": [], "data_mode": ["all"],
                         "summary_mode": "statistics"}}
LAYERS, PLANTED_LAYER, WIDTH, VOCAB = 3, 1, 8, 32


def build_model(run: str):
    """A decoder-shaped toy (embedding, pre-norm MLP blocks with residuals, final norm, LM head):
    module names as in an LLM, a few records per layer."""
    import torch
    from torch import nn

    class MLP(nn.Module):
        def __init__(self):
            super().__init__()
            self.up_proj = nn.Linear(WIDTH, 2 * WIDTH, bias=False)
            self.down_proj = nn.Linear(2 * WIDTH, WIDTH, bias=False)

        def forward(self, x):
            return self.down_proj(torch.nn.functional.silu(self.up_proj(x)))

    class Layer(nn.Module):
        def __init__(self):
            super().__init__()
            self.norm, self.mlp = nn.RMSNorm(WIDTH), MLP()

        def forward(self, x):
            return x + self.mlp(self.norm(x))

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed_tokens = nn.Embedding(VOCAB, WIDTH)
            self.layers = nn.ModuleList(Layer() for _ in range(LAYERS))
            self.norm = nn.RMSNorm(WIDTH)

        def forward(self, ids):
            x = self.embed_tokens(ids)
            for layer in self.layers:
                x = layer(x)
            return self.norm(x)

    class TinyLM(nn.Module):
        def __init__(self):
            super().__init__()
            self.model, self.lm_head = Model(), nn.Linear(WIDTH, VOCAB, bias=False)

        def forward(self, ids):
            return self.lm_head(self.model(ids))

    torch.manual_seed(0)
    lm = TinyLM()
    if run == "target":
        with torch.no_grad():
            lm.model.layers[PLANTED_LAYER].mlp.down_proj.weight.mul_(1.01)
    return lm


def one_run(run: str, save_path: str, config_path: str) -> None:
    """The child process: one run's dumps under save_path."""
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
    from verl_pdbg_conf.runtime import PrecisionDebuggerProfiler

    model = build_model(run)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, foreach=False)
    prof = PrecisionDebuggerProfiler({"config_path": config_path, "stages": list(STAGES), "strict": True},
                                     rank=0, save_path=save_path)
    torch.manual_seed(1)
    ids = torch.randint(0, VOCAB, (2, 6))
    prof.start(profile_step=1)
    with prof.stage("actor_compute_log_prob", model=model), torch.no_grad():
        model(ids).log_softmax(-1)
    with prof.stage("actor_update", model=model):
        torch.nn.functional.cross_entropy(model(ids[:, :-1]).flatten(0, 1), ids[:, 1:].flatten()).backward()
        opt.step()
    prof.stop()
    dist.destroy_process_group()


def scrub(root: Path, replacements: list[tuple[str, str]]) -> None:
    """Cut this machine's absolute paths out of every file msprobe wrote."""
    for path in sorted(root.rglob("*.json")):
        text = path.read_text(encoding="utf-8")
        for old, new in replacements:
            text = text.replace(old, new)
        path.write_text(text, encoding="utf-8")


def _machine_paths(tmp: str) -> list[tuple[str, str]]:
    """(absolute prefix, what it becomes), longest first: site-packages/torch/..., examples/..."""
    paths = sysconfig.get_paths()
    cuts = [(paths["purelib"], "site-packages"), (paths["platlib"], "site-packages"),
            (paths["stdlib"], "python"), (tmp, ""), (str(HERE.parent), "")]
    return [(old + os.sep, new + "/" if new else "") for old, new in sorted(set(cuts), key=lambda c: -len(c[0]))]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--run", choices=("golden", "target"), help=argparse.SUPPRESS)  # the child process
    ap.add_argument("--save-path", help=argparse.SUPPRESS)
    ap.add_argument("--config", help=argparse.SUPPRESS)
    ap.add_argument("--out", type=Path, default=OUT, help="where the two runs go; its golden/ and target/ are replaced (default: examples/compare)")
    a = ap.parse_args()
    if a.run:
        one_run(a.run, a.save_path, a.config)
        return
    with tempfile.TemporaryDirectory(prefix="pdbg-example-") as tmp:
        config = Path(tmp, "config.json")
        config.write_text(json.dumps(CONFIG))
        env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONHASHSEED="0")
        env["PYTHONPATH"] = os.pathsep.join([str(HERE.parent)] + [p for p in [env.get("PYTHONPATH")] if p])
        for run in ("golden", "target"):
            subprocess.run([sys.executable, __file__, "--run", run, "--save-path", str(Path(tmp, run)),
                            "--config", str(config)], check=True, env=env, cwd=tmp)
        scrub(Path(tmp), _machine_paths(tmp))
        a.out.mkdir(parents=True, exist_ok=True)
        for run in ("golden", "target"):
            shutil.rmtree(a.out / run, ignore_errors=True)
            shutil.copytree(Path(tmp, run), a.out / run)
    total = sum(p.stat().st_size for p in a.out.rglob("*") if p.is_file())
    shown = os.path.relpath(a.out) if a.out.is_relative_to(Path.cwd()) else a.out
    print(f"wrote {shown}: golden and target, {total // 1024} KB")


if __name__ == "__main__":
    main()

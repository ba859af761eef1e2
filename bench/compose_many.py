"""Many compositions in one process, as a batch of launch scripts pays for them: the same
override lists composed

- before: Hydra's compose on verl's real installed trainer/config, one Hydra session per
  composition (what compose_verl did before the release facts and the cache), and
- after: compose_verl's Composer on the shipped facts of the same release (group selections
  composed once and cached, key overrides applied by Hydra's own function on a copy),

checks that both give the same config for each, and prints compositions/s and the ratio. Then the
whole compose_verl (positions, resolution) with the cache on and off.

    python bench/compose_many.py [--n 60]
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)


def workload(n: int) -> list[tuple[str, list[str]]]:
    """Override lists in the shapes verl's example scripts use: a few group selections shared by
    many scripts, and per-script key values."""
    groups = [[], ["+profiler=precision_debugger_l1"], ["model_engine=megatron"],
              ["+profiler=precision_debugger_l1", "actor@actor_rollout_ref.actor=dp_actor"]]
    out = []
    for i in range(n):
        name = "ppo_megatron_trainer" if i % 5 == 4 else "ppo_trainer"
        keys = [f"data.train_batch_size={32 * (1 + i % 8)}", f"trainer.experiment_name=exp_{i}",
                "actor_rollout_ref.actor.optim.lr=1e-6", f"actor_rollout_ref.rollout.n={1 + i % 4}",
                "algorithm.adv_estimator=grpo", "trainer.logger=[console,wandb]",
                f"global_profiler.steps=[{1 + i % 3}]", "trainer.total_epochs=15",
                "actor_rollout_ref.model.path=Qwen/Qwen2.5-0.5B-Instruct", "+trainer.extra_key=1"]
        out.append((name, groups[i % len(groups)] + keys))
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=60)
    args = ap.parse_args()
    spec = importlib.util.find_spec("verl")
    if spec is None:
        print("needs verl installed for the 'before' side (Hydra on the real tree)")
        return 2
    real = os.path.join(list(spec.submodule_search_locations)[0], "trainer", "config")

    from hydra import compose
    from omegaconf import OmegaConf

    from verl_pdbg_conf.verl_facts import compose as C
    from verl_pdbg_conf.verl_facts import facts_source, releases

    release = releases.judging()[0]
    C._ensure_search_path_plugin()
    facts_source.ensure_registered()
    work = workload(args.n)

    t = time.perf_counter()
    before = []
    for name, ov in work:
        with C._hydra_session(real):
            before.append(OmegaConf.to_container(compose(name, overrides=ov)))
    t_before = time.perf_counter() - t

    main_src = f"{facts_source.SCHEME}://{release}"
    C._COMPOSE_CACHE.clear()
    t = time.perf_counter()
    after = []
    for name, ov in work:
        with C._hydra_session(main_src):
            after.append(OmegaConf.to_container(C.Composer(main_src, None, None).compose(name, ov)))
    t_after = time.perf_counter() - t
    assert after == before, "the cached composition on the facts differs from Hydra on the real tree"
    print(f"verl {release}, {len(work)} compositions, same configs: yes")
    print(f"Hydra on the real tree (before): {len(work) / t_before:7.1f} compositions/s")
    print(f"Composer on the facts (after):   {len(work) / t_after:7.1f} compositions/s")
    print(f"ratio after/before:              {t_before / t_after:7.1f}x")

    for label, size in (("compose_verl, cache off", 0), ("compose_verl, cache on", 64)):
        C._CACHE_SIZE = size
        C._COMPOSE_CACHE.clear()
        C._BASE_CACHE.clear()
        t = time.perf_counter()
        for name, ov in work:
            r = C.compose_verl([], ov, config_name=name, release=release)
            assert r.ok, [f.message for f in r.findings]
        dt = time.perf_counter() - t
        print(f"{label + ':':32} {len(work) / dt:7.1f} compositions/s")
    return 0


if __name__ == "__main__":
    sys.exit(main())

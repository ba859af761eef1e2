"""What verl 0.9.1's trainer does to a batch before a stage sees it, for the run makers that stand in for it
(docs/compare-trainer-runs.md, "The run makers against the real trainer").

- `balanced_partitions`: `RayPPOTrainer._balance_batch` (trainer.balance_batch, on by default, at every
  data-parallel size, 1 included): each row's workload from its attention-mask length (verl's
  `calculate_workload`), partitions of equal size by verl's `get_seqlen_balanced_partitions`, each ordered
  smallest at both ends; rank r is handed partition r (the DP_COMPUTE_PROTO dispatch chunks the reordered batch).
- `stage_token_count`: the FSDP engine's `forward_backward_batch` start: the rank's `loss_mask.sum()`
  all-reduced over the data-parallel group (msprobe records `Tensor.sum` and `Distributed.all_reduce` on an
  int64 scalar first in every stage).
- `token_mean_loss`: `agg_loss(loss_agg_mode="token-mean")` with that global count:
  masked sum / global tokens x dp size, so that the ranks' gradients, averaged, are the one-rank run's.
- `pad_to_longest`: a micro-batch is padded to its own longest row, not the batch's.

verl's functions are called, not copied, where verl's are functions; the ordering within a partition is inline in
`_balance_batch` (and ray_trainer.py does not import without cachetools, which the test environment lacks), so
its two lines are repeated here.
"""

from __future__ import annotations


def balanced_partitions(seqlens: list[int], dp: int) -> list[list[int]]:
    """The rows each data-parallel rank is handed, in the order it holds them (ray_trainer.py _balance_batch)."""
    import torch
    from verl.utils.seqlen_balancing import calculate_workload, get_seqlen_balanced_partitions

    workload = calculate_workload(torch.tensor(seqlens)).tolist()
    parts = get_seqlen_balanced_partitions(workload, k_partitions=dp, equal_size=True)
    out = []
    for part in parts:
        part = sorted(part, key=lambda i: (workload[i], i))
        out.append(part[::2] + part[1::2][::-1])
    return out


def stage_token_count(loss_mask):
    """The global token count the stage's loss is scaled by, all-reduced as verl's FSDP engine does."""
    import torch.distributed as dist

    n = loss_mask.sum()
    dist.all_reduce(n, op=dist.ReduceOp.SUM)
    return n


def token_mean_loss(loss_mat, loss_mask, global_tokens, dp: int):
    """agg_loss's token-mean over the global batch (core_algos.py)."""
    return (loss_mat * loss_mask).sum() / global_tokens * dp


def pad_to_longest(ids, mask):
    """A micro-batch cut to its own longest row (right padding), as verl's micro-batches are; done before the
    stage starts, so that the dump holds no op of ours."""
    width = int(mask.sum(-1).max())
    return ids[..., :width].clone(), mask[..., :width].clone()

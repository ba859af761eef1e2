"""How one pair is aligned, decided once from what the two runs are: the pairing (by name or by signature,
anchored on modules or not) and the judging (whether another layout of the same tensor is a difference)
follow from it, instead of flags set from several places."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class Kinship(Enum):
    """What the two runs of a pair have in common."""

    SAME_CODE = "same code"  # one code base and layout: API calls are numbered alike and pair by name
    # ranks put together (parallel/): a vocabulary shard masks its ids with calls of its own, shares of the batch
    # are concatenated along an axis of their own
    SHARDS = "parallel ranks merged"
    FAMILIES = "modules one per index against one"  # experts as modules against fused (trees.indexed_parts)
    BACKENDS = "two backends"  # Megatron against a Hugging Face model, modules paired by mbridge's table
    BACKENDS_L1 = "two backends at L1"  # the same without module records: nothing anchors an API call


@dataclass(frozen=True)
class AlignmentPlan:
    kinship: Kinship = Kinship.SAME_CODE
    # modules whose inner API calls the two runs compute otherwise, in another order (an MoE router: Megatron
    # takes the top-k of the logits, then their softmax; transformers the softmax, then its top-k): paired
    # by module only, compared at the module's boundary (either run's path)
    opaque: frozenset = frozenset()

    @property
    def by_name(self) -> bool:
        """API calls pair by their msprobe name first: only runs of the same code number them alike."""
        return self.kinship is Kinship.SAME_CODE

    @property
    def layout_free(self) -> bool:
        """[s, b, h] against [b, s, h], or parts and shards put together: another layout is no difference."""
        return self.kinship not in (Kinship.SAME_CODE, Kinship.FAMILIES)

    @property
    def anchored(self) -> bool:
        """Module records anchor the API calls between them (none at L1 across backends)."""
        return self.kinship is not Kinship.BACKENDS_L1

    @property
    def bracketed(self) -> bool:
        """Records between two pairs count as compared at them, unless the pairs themselves are guesses."""
        return self.anchored


def plan_for(backends: bool, l1_backends: bool, merged: bool, opaque: frozenset = frozenset(),
             families: bool = False) -> AlignmentPlan:
    """backends: two backends' module trees paired by a table; l1_backends: one side runs Megatron at L1;
    merged: ranks were put together on either side (parallel/kinds.py); opaque: AlignmentPlan.opaque;
    families: one run's modules one per index against one module of the other (their parameters laid out
    otherwise)."""
    if l1_backends:
        return AlignmentPlan(Kinship.BACKENDS_L1)
    if backends:
        return AlignmentPlan(Kinship.BACKENDS, opaque)
    if merged:
        return AlignmentPlan(Kinship.SHARDS)
    if families:
        return AlignmentPlan(Kinship.FAMILIES)
    return AlignmentPlan()

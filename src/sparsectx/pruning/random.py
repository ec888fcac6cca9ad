"""Random pruning: a uniform k-subset of one image's post-merger tokens (spec 2.7).

The sanity baseline of every experiment, and one of the training-time compressors of EPIC (Wen et al.,
NeurIPS 2025). The selection depends only on the passed generator, so a rollout's indices can be stored
and reused in the training forward.
"""

from __future__ import annotations

import torch

from sparsectx.pruning.base import PRE_LLM, PrunerSpec
from sparsectx.visual import ImageTokens, Selection


def select_random(
    image: ImageTokens,
    question_embeds: torch.Tensor,
    k: int,
    generator: torch.Generator,
) -> Selection:
    """Returns a uniformly random subset of k of ``image``'s tokens, indices ascending.

    Every k-subset is equally likely (first k entries of a random permutation). The question is ignored.

    Args:
        image: the image's N post-merger tokens.
        question_embeds: (T_q, D) question embeddings; unused.
        k: tokens to keep, 1 <= k <= N.
        generator: seeded generator; the permutation is drawn on its device.
    """
    perm = torch.randperm(image.num_tokens, generator=generator, device=generator.device)
    return Selection.gather(image, perm[:k].to(image.embeds.device))


SPEC = PrunerSpec(name="random", stage=PRE_LLM, select=select_random, seeded=True)

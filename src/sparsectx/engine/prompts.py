"""What the decode engine generates from: prompts whose contexts are built only when a slot takes them.

A ``Prompts`` knows each prompt's context length (to sort and size the cache) and builds the left-padded
``ContextBatch`` of any subset on demand, so continuous batching can encode and prefill the next items while
others decode, and nothing is built for an item before a slot is free for it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from sparsectx.context import ContextBatch, build_context
from sparsectx.encoding import EncodedSample
from sparsectx.layer_selection import LayerSelection
from sparsectx.models.adapter import VLMAdapter
from sparsectx.visual import Selection


@dataclass
class Prompts:
    """Prompts to generate from.

    Attributes:
        lengths: each prompt's context length in tokens (pruned visual tokens + text).
        build: returns the left-padded contexts of the prompts at the given indices, in that order.
        shared: prompts with equal entries have the same context (Pass@K's n draws, a GRPO group): the
            engine prefills such prompts once per slot refill and copies the keys/values; None = all distinct.
    """

    lengths: list[int]
    build: Callable[[Sequence[int]], ContextBatch]
    shared: list[int] | None = None

    def __len__(self) -> int:
        return len(self.lengths)

    def context_key(self, index: int) -> int:
        """Returns the key of prompt ``index``'s context: equal keys, identical contexts."""
        return index if self.shared is None else self.shared[index]


def select_prompts(prompts: Prompts, indices: Sequence[int]) -> Prompts:
    """Returns the prompts at ``indices``, in that order, as their own ``Prompts`` (contexts still built on
    demand, by ``prompts.build``)."""
    return Prompts(
        [prompts.lengths[i] for i in indices],
        lambda idx: prompts.build([indices[i] for i in idx]),
        shared=None if prompts.shared is None else [prompts.shared[i] for i in indices],
    )


def context_length(sample: EncodedSample, selections: Sequence[Selection]) -> int:
    """Returns the length of ``sample``'s context when each image keeps its selection.

    An in-LLM selection (``LayerSelection``) drops nothing before the LLM: its layers < K cache every token.
    """
    dropped = sum(
        image.num_tokens - s.indices.numel()
        for image, s in zip(sample.images, selections, strict=True)
        if not isinstance(s, LayerSelection)
    )
    return sample.prompt_ids.numel() - dropped


def pruned_prompts(
    adapter: VLMAdapter, samples: Sequence[EncodedSample], selections: Sequence[Sequence[Selection]]
) -> Prompts:
    """Returns the prompts of encoded samples with their per-image selections (contexts via ``build_context``).

    Prompts that repeat the same sample object with the same selection objects (a GRPO group's G copies)
    are marked as one context (``Prompts.shared``), so the engine prefills it once per refill.
    """
    lengths = [context_length(s, sel) for s, sel in zip(samples, selections, strict=True)]
    identity = [(id(s), *map(id, sel)) for s, sel in zip(samples, selections, strict=True)]
    first = {key: index for index, key in reversed(list(enumerate(identity)))}
    shared = [first[key] for key in identity]
    return Prompts(
        lengths,
        lambda idx: build_context(adapter, [samples[i] for i in idx], [list(selections[i]) for i in idx]),
        shared=None if len(first) == len(identity) else shared,
    )

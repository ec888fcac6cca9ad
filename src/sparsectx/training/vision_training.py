"""A trained vision tower (``method.train_vision``): LT-OPD updates the vision encoder and merger too.

Seed 000 App. B: "We train the student language model, vision encoder, and native visual merger with
full-parameter updates." The step's no-grad phase is unchanged: the tower runs once with the current weights
for the pruner's signals, the selection and the rollouts. Two passes are added per micro-batch:

* the student's loss forward recomputes the tower with gradients on the same pixels, and every selection is
  replayed on the new vectors (``pruning.replay_selection``: the same kept tokens, invariant 5), so the
  divergence's gradient reaches the tower's weights;
* every teacher but the current student itself recomputes the tower with its own weights (the frozen copy's,
  or the EMA swapped in) inside its view, so a frozen teacher stays the initial model, vision included.

Families: the Qwen-VL adapters (Qwen2.5-VL, Qwen3-VL, Qwen3.5, GLM-4.6V), whose tower returns the merged
vectors (and DeepStack levels) of the whole batch in raster order.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch

from sparsectx.encoding import EncodedSample
from sparsectx.models.adapter import VLMAdapter
from sparsectx.models.qwen_common import QwenVLAdapter
from sparsectx.pruning import replay_selection
from sparsectx.pruning.config import PrunerConfig
from sparsectx.visual import Selection


@dataclass
class VisionInputs:
    """A micro-batch's images as the tower reads them, on the model's device.

    Attributes:
        pixel_values: the processor's patches of every image, in prompt order.
        grid_thw: (n_images, 3) int64 patch grids.
        repeats: consecutive rows of the micro-batch that share each prompt's images (its
            ``method.rollouts_per_prompt`` rollouts): the tower runs once per prompt and its vectors serve
            every one of its rows (the gradient sums over them).
    """

    pixel_values: torch.Tensor
    grid_thw: torch.Tensor
    repeats: int = 1


def check_trainable_tower(adapter: VLMAdapter) -> None:
    """Raises ValueError naming ``method.train_vision`` when the family's tower cannot be trained here."""
    if not isinstance(adapter, QwenVLAdapter):
        raise ValueError(
            f"method.train_vision=true is supported on the Qwen-VL, Qwen3.5 and GLM-4.6V families, not "
            f"{adapter.family!r}; set method.train_vision=false"
        )


def tower_vectors(adapter: VLMAdapter, vision: VisionInputs) -> list[tuple[torch.Tensor, tuple[torch.Tensor, ...]]]:
    """Returns per image its (N, D) merged vectors and DeepStack levels from one tower pass, with gradients
    where they are enabled; no pruner signals are recorded."""
    visual = adapter.visual
    out = visual(vision.pixel_values.to(visual.dtype), grid_thw=vision.grid_thw)
    sizes = (vision.grid_thw.prod(-1) // adapter.merge_unit).tolist()
    embeds = torch.split(out.pooler_output, sizes)
    levels = [torch.split(f, sizes) for f in out.deepstack_features] if adapter.layout.has_deepstack else []
    return [(embeds[i], tuple(level[i] for level in levels)) for i in range(len(sizes))]


def row_vectors(
    adapter: VLMAdapter, vision: VisionInputs, samples: list[EncodedSample]
) -> list[tuple[torch.Tensor, tuple[torch.Tensor, ...]]]:
    """Returns the vectors of every image of ``samples``, in order, from one tower pass over the distinct
    prompts' pixels: each run of ``vision.repeats`` consecutive samples (one prompt's rows) shares its prompt's.

    Raises:
        RuntimeError: the pixels hold another number of images than the prompts.
    """
    vectors = tower_vectors(adapter, vision)
    out, cursor = [], 0
    for sample in samples[:: vision.repeats]:
        count = len(sample.images)
        out.extend(vectors[cursor : cursor + count] * vision.repeats)
        cursor += count
    if cursor != len(vectors):
        raise RuntimeError(f"{len(vectors)} recomputed images for prompts holding {cursor}")
    return out


def with_vectors(
    samples: list[EncodedSample], vectors: list[tuple[torch.Tensor, tuple[torch.Tensor, ...]]]
) -> list[EncodedSample]:
    """Returns ``samples`` whose images carry ``vectors`` (in order); prompts, positions and signals kept."""
    out, cursor = [], 0
    for sample in samples:
        images = []
        for image in sample.images:
            embeds, deepstack = vectors[cursor]
            if embeds.shape != image.embeds.shape:
                raise RuntimeError(
                    f"recomputed vision vectors of shape {tuple(embeds.shape)} for an image of "
                    f"{tuple(image.embeds.shape)}: the micro-batch's pixels and its prompts disagree"
                )
            images.append(replace(image, embeds=embeds, deepstack=deepstack))
            cursor += 1
        out.append(replace(sample, images=images))
    if cursor != len(vectors):
        raise RuntimeError(f"{len(vectors)} recomputed images for prompts holding {cursor}")
    return out


def trained_inputs(
    adapter: VLMAdapter,
    pruner: PrunerConfig,
    samples: list[EncodedSample],
    selections: list[list[Selection]],
    vision: VisionInputs,
) -> tuple[list[EncodedSample], list[list[Selection]]]:
    """Returns the student's samples and selections rebuilt from a tower pass with gradients: the same kept
    tokens, vectors that carry the tower's gradient (``replay_selection``)."""
    samples = with_vectors(samples, row_vectors(adapter, vision, samples))
    replayed = [
        [
            replay_selection(pruner.name, image, sample.question_embeds, selection, pruner.params)
            for image, selection in zip(sample.images, chosen, strict=True)
        ]
        for sample, chosen in zip(samples, selections, strict=True)
    ]
    return samples, replayed


def teacher_samples(adapter: VLMAdapter, samples: list[EncodedSample], vision: VisionInputs) -> list[EncodedSample]:
    """Returns ``samples`` with the vision vectors of the teacher ``adapter``'s own tower (no gradients)."""
    with torch.no_grad():
        return with_vectors(samples, row_vectors(adapter, vision, samples))

"""The adapter shared by the Qwen-VL families and GLM-4.6V, composed with a per-family ``VisionLayout``.

Qwen2.5-VL and Qwen3-VL differ, for our purposes, only in which vision block gives the pruner
signals, the order that block runs in (window order vs raster), and whether DeepStack features exist.
Each family module supplies those as a ``VisionLayout``; this class does the rest.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import torch
from torch import nn
from transformers import PreTrainedModel

from sparsectx.models.adapter import LLMInputs
from sparsectx.models.in_llm import LayerSignals, layer_signals, run_with_drop
from sparsectx.models.positions import rope_positions
from sparsectx.models.video_input import check_video_family
from sparsectx.models.vision_signals import merge_signals, merger_sensitivity, several_block_signals
from sparsectx.visual import ImageTokens, VisionSignals

QWEN_VL_SPECIAL_TOKENS = {
    151643: "<|endoftext|>",
    151644: "<|im_start|>",
    151645: "<|im_end|>",
    151652: "<|vision_start|>",
    151653: "<|vision_end|>",
    151655: "<|image_pad|>",
    151656: "<|video_pad|>",
}
"""The Qwen2-VL tokenizer's special tokens that Qwen2.5-VL's and Qwen3-VL's config.json ids and chat templates
name (its tokenizer_config.json added_tokens_decoder, ids 151643-151664; the vision ids as config.json declares)."""


@dataclass(frozen=True)
class VisionLayout:
    """Family-specific facts about the vision tower.

    Attributes:
        signal_block: returns the attention module of the last full-attention block.
        to_raster: returns the (M,) permutation from the blocks' merged-token order to raster order (every
            block and the merger input share one order), or None when they already run in raster order.
        has_deepstack: whether merged DeepStack features accompany the main tokens.
        object_block: returns the attention module of the object block, a middle vision block whose
            attention marks objects (HiPrune's anchors).
        merger_merges: whether the merger's input holds a merge unit of patches per merged token (Qwen);
            False when the tower merges before it (GLM-4.6V's downsampling conv): one input row per token.
    """

    signal_block: Callable[[nn.Module], nn.Module]
    to_raster: Callable[[nn.Module, torch.Tensor], torch.Tensor | None]
    has_deepstack: bool
    object_block: Callable[[nn.Module], nn.Module]
    merger_merges: bool = True


class QwenVLAdapter:
    """``VLMAdapter`` for HF Qwen-VL ``...ForConditionalGeneration`` models."""

    def __init__(self, family: str, model: PreTrainedModel, layout: VisionLayout, signal_chunk: int) -> None:
        self.family = family
        self.model = model
        self.layout = layout
        self.signal_chunk = signal_chunk
        self.image_token_id = int(model.config.image_token_id)
        self.video_token_id = int(model.config.video_token_id)
        self.merge_unit = int(model.config.vision_config.spatial_merge_size) ** 2
        self.vision_calls = 0
        self.vision_signals = VisionSignals()
        """The extra signals ``encode_images`` records: what the job's pruner declared."""

    @property
    def visual(self) -> nn.Module:
        """Returns the vision tower (patch embed, blocks, merger)."""
        return self.model.model.visual

    @property
    def language_model(self) -> nn.Module:
        """Returns the decoder-only text model."""
        return self.model.model.language_model

    def encode_images(self, pixel_values: torch.Tensor, grid_thw: torch.Tensor) -> list[ImageTokens]:
        """Returns one ``ImageTokens`` per image; the vision tower runs exactly once for the whole batch.

        The pruner signals (the last full-attention block's, plus what ``self.vision_signals`` asks for) come
        from the blocks' own attention calls when the tower runs the grouped attention
        (``model.vision_attention: grouped``), else from a recompute of those blocks.
        """
        visual, wanted = self.visual, self.vision_signals
        blocks = [self.layout.signal_block(visual)]
        if wanted.object_attention:
            blocks.append(self.layout.object_block(visual))
        with several_block_signals(blocks, self.signal_chunk) as records:
            out = visual(pixel_values.to(visual.dtype), grid_thw=grid_thw)
        self.vision_calls += 1
        to_raster = self.layout.to_raster(visual, grid_thw)
        received, keys = merge_signals(records[0].received, records[0].keys, self.merge_unit, to_raster)
        sizes = (grid_thw.prod(-1) // self.merge_unit).tolist()
        extra: dict[str, tuple[torch.Tensor, ...]] = {}
        if wanted.object_attention:
            extra["object_attention"] = torch.split(
                merge_signals(records[1].received, records[1].keys, self.merge_unit, to_raster)[0], sizes
            )
        if wanted.merger_probe is not None:
            unit = self.merge_unit if self.layout.merger_merges else 1
            sensitivity = merger_sensitivity(
                visual.merger, out.last_hidden_state, unit, wanted.merger_probe, self.signal_chunk
            )
            extra["merger_sensitivity"] = torch.split(
                sensitivity if to_raster is None else sensitivity[to_raster], sizes
            )
        embeds = torch.split(out.pooler_output, sizes)
        levels = [torch.split(f, sizes) for f in out.deepstack_features] if self.layout.has_deepstack else []
        merge = int(self.merge_unit**0.5)
        images = []
        for i, (t, h, w) in enumerate(grid_thw.tolist()):
            images.append(
                ImageTokens(
                    embeds=embeds[i],
                    grid=(int(t), int(h) // merge, int(w) // merge),
                    attention_received=torch.split(received, sizes)[i],
                    keys=torch.split(keys, sizes)[i],
                    deepstack=tuple(level[i] for level in levels),
                    **{name: parts[i] for name, parts in extra.items()},
                )
            )
        return images

    def encode_videos(
        self, pixel_values: torch.Tensor, grid_thw: torch.Tensor, second_per_grid: torch.Tensor | None
    ) -> list[ImageTokens]:
        """Returns one ``ImageTokens`` per video (the tower runs once for the batch's videos).

        ``second_per_grid`` is Qwen2.5-VL's ``second_per_grid_ts`` (None for the timestamp families): its
        temporal patches are ``tokens_per_second * int(second_per_grid_t)`` positions apart, as transformers
        5.17's ``get_rope_index`` spaces them. Qwen3-VL, Qwen3.5 and GLM-4.6V prompts hold each temporal
        patch as its own run between timestamps (``models.video_input``); GLM-4.6V's tower also encodes each
        temporal patch as its own image, and its patches are joined back into one video.

        Raises:
            ValueError: the family has no video path.
        """
        layout = check_video_family(self.family, "videos")
        if layout == "glm_frames":  # the tower sees each temporal patch as a (1, h, w) image, as HF's does
            frames = self.encode_images(pixel_values, _per_frame(grid_thw))
            counts = grid_thw[:, 0].tolist()
            starts = [sum(counts[:i]) for i in range(len(counts))]
            return [
                _join_frames(frames[start : start + count], tuple(frames[start].grid[1:]), count)
                for start, count in zip(starts, counts, strict=True)
            ]
        videos = self.encode_images(pixel_values, grid_thw)
        if layout == "timestamps":
            return [replace(video, split_frames=True) for video in videos]
        if second_per_grid is None:
            raise ValueError(f"model family {self.family!r}: videos need second_per_grid_ts from the processor")
        per_second = int(self.model.config.vision_config.tokens_per_second)
        steps = [per_second * int(seconds) for seconds in second_per_grid.tolist()]
        return [replace(video, temporal_step=step) for video, step in zip(videos, steps, strict=True)]

    def prompt_positions(self, ids: torch.Tensor, images: list[ImageTokens]) -> tuple[torch.Tensor, int]:
        """Returns the prompt's (3, L) unpruned M-RoPE positions and the next free position.

        ``images`` are the prompt's visual inputs in order, videos included (``ImageTokens.position_runs``).
        """
        runs = [run for image in images for run in image.position_runs()]
        return rope_positions(ids, self.image_token_id, [grid for grid, _ in runs], [step for _, step in runs])

    def embed_ids(self, ids: torch.Tensor) -> torch.Tensor:
        """Returns the LLM input embeddings of ``ids``."""
        return self.language_model.embed_tokens(ids)

    def run_llm(self, inputs: LLMInputs, cache: object | None) -> torch.Tensor:
        """Returns (B, L, D) final-norm hidden states of the text model on prepared inputs.

        With ``inputs.late`` the in-LLM hook runs instead (``sparsectx.models.in_llm.run_with_drop``).
        """
        if inputs.late is not None:
            return run_with_drop(self.language_model, inputs, cache, self.layout.has_deepstack)
        extra = {}
        if self.layout.has_deepstack and inputs.deepstack:
            extra = {
                "visual_pos_masks": inputs.visual_mask,
                "deepstack_visual_embeds": list(inputs.deepstack),
            }
        out = self.language_model(
            inputs_embeds=inputs.embeds,
            attention_mask=inputs.attention_mask,
            position_ids=inputs.positions,
            past_key_values=cache,
            use_cache=cache is not None,
            **extra,
        )
        return out.last_hidden_state

    def llm_signals(self, inputs: LLMInputs, layer: int, query_index: torch.Tensor) -> LayerSignals:
        """Returns layer ``layer`` - 1's pruner signals on full prompt contexts (``in_llm.layer_signals``)."""
        return layer_signals(self.language_model, inputs, layer, query_index, self.layout.has_deepstack)

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """Returns logits of ``hidden`` through the LM head."""
        return self.model.lm_head(hidden)


def _per_frame(grid_thw: torch.Tensor) -> torch.Tensor:
    """Returns the (sum t, 3) grids of every temporal patch as its own (1, h, w) image (GLM's video tower)."""
    spatial = torch.repeat_interleave(grid_thw[:, 1:], grid_thw[:, 0], dim=0)
    return torch.cat([torch.ones_like(spatial[:, :1]), spatial], dim=1)


def _join_frames(frames: list[ImageTokens], spatial: tuple[int, int], count: int) -> ImageTokens:
    """Returns one video's ``ImageTokens`` (grid (t, h, w), split into frame runs) from its t frames' own."""
    join = lambda name: torch.cat([getattr(f, name) for f in frames])  # noqa: E731
    optional = {
        name: join(name) for name in ("object_attention", "merger_sensitivity") if getattr(frames[0], name) is not None
    }
    return ImageTokens(
        embeds=join("embeds"),
        grid=(count, *spatial),
        attention_received=join("attention_received"),
        keys=join("keys"),
        deepstack=tuple(torch.cat(level) for level in zip(*(f.deepstack for f in frames), strict=True)),
        split_frames=True,
        **optional,
    )

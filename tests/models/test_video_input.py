"""Video and multi-image questions through every video-capable family (Qwen2.5-VL, Qwen3-VL, Qwen3.5).

On tiny random-weight instances of the real HF classes: budget 1.0 is the plain HF model (logits and greedy
text, videos given to HF as ``pixel_values_videos``), every position is the family's own ``get_rope_index``
for the video grids, kept tokens keep those positions, and a pruned video keeps exactly
k = clamp(round(b * N), 1, N) of its N tokens under every pre-LLM operator.
"""

from __future__ import annotations

import shutil
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from engine_setup import default_engine
from family_models import family_model
from omegaconf import OmegaConf
from tiny_models import noise_image
from transformers import GenerationConfig
from video_setup import BUILDERS, item_batches, synthetic_videos, video_family

from sparsectx.budget import tokens_to_keep
from sparsectx.context import build_context, keep_all
from sparsectx.data.video import Video, VideoError
from sparsectx.encoding import encode_samples
from sparsectx.engine import DecodeEngine, pruned_prompts
from sparsectx.generation import SamplingConfig
from sparsectx.models import resolve_model_path
from sparsectx.models.processor import load_processor
from sparsectx.prompting import PromptItem, processor_inputs
from sparsectx.pruning import declared_signals, select_tokens

FAMILIES = sorted(BUILDERS)
PRE_LLM = ("random", "divprune", "cdpruner", "visionzip", "hiprune", "zoo_prune")
CONF = Path(__file__).resolve().parents[2] / "conf" / "pruner"


@pytest.fixture(scope="module", params=FAMILIES)
def tiny(request, tmp_path_factory):  # noqa: ANN001, ANN201
    return video_family(request.param, tmp_path_factory.mktemp(request.param))


def _rope_index(model, batch) -> torch.Tensor:  # noqa: ANN001
    extra = {"second_per_grid_ts": batch["second_per_grid_ts"]} if "second_per_grid_ts" in batch else {}
    positions, _ = model.model.get_rope_index(
        batch["input_ids"],
        batch["mm_token_type_ids"],
        image_grid_thw=batch.get("image_grid_thw"),
        video_grid_thw=batch.get("video_grid_thw"),
        attention_mask=batch["attention_mask"],
        **extra,
    )
    return positions


@torch.no_grad()
def test_budget_one_equals_plain_hf_logits(tiny) -> None:  # noqa: ANN001
    for items in item_batches(tiny.name, tiny.patch):
        batch = processor_inputs(tiny.processor, items)
        videos = sum(len(item.videos) for item in items)
        assert (int((batch["mm_token_type_ids"] == 2).sum()) > 0) == (videos > 0)
        reference = tiny.adapter.model(**batch).logits
        samples = encode_samples(tiny.adapter, tiny.processor, items)
        assert [len(s.images) for s in samples] == [len(i.videos) + len(i.images) for i in items]
        ctx = build_context(tiny.adapter, samples, [keep_all(s) for s in samples])
        ours = tiny.adapter.logits(tiny.adapter.run_llm(ctx.inputs, None))
        real = batch["attention_mask"].bool()
        torch.testing.assert_close(ours[ctx.inputs.attention_mask.bool()], reference[real], atol=1e-5, rtol=0)


@torch.no_grad()
def test_budget_one_greedy_text_equals_hf_generate(tiny) -> None:  # noqa: ANN001
    tok = tiny.processor.tokenizer
    config = GenerationConfig(max_new_tokens=10, do_sample=False, eos_token_id=None, pad_token_id=tok.pad_token_id)
    engine = DecodeEngine(tiny.adapter, tok, default_engine())
    for items in item_batches(tiny.name, tiny.patch):
        batch = processor_inputs(tiny.processor, items)
        hf = tiny.adapter.model.generate(**batch, generation_config=config)
        hf_new = hf[:, batch["input_ids"].shape[1] :]
        samples = encode_samples(tiny.adapter, tiny.processor, items)
        prompts = pruned_prompts(tiny.adapter, samples, [keep_all(s) for s in samples])
        ours = engine.generate(prompts, SamplingConfig(10, False, 1.0, 1.0, 0, []))
        for row, gen in zip(hf_new, ours, strict=True):
            assert gen.token_ids.tolist() == row[: gen.token_ids.numel()].tolist()
            assert gen.text == tok.decode(row[: gen.token_ids.numel()], skip_special_tokens=True)


@torch.no_grad()
def test_positions_are_get_rope_index_and_kept_tokens_keep_them(tiny) -> None:  # noqa: ANN001
    gen = torch.Generator().manual_seed(7)
    for items in item_batches(tiny.name, tiny.patch):
        batch = processor_inputs(tiny.processor, items)
        want = _rope_index(tiny.adapter.model, batch)
        samples = encode_samples(tiny.adapter, tiny.processor, items)
        for b, sample in enumerate(samples):
            real = batch["attention_mask"][b].bool()
            assert torch.equal(sample.positions, want[:, b, real])
            assert sample.next_position == int(want[:, b, real].max()) + 1
        selections = [
            [select_tokens("random", im, s.question_embeds, 0.3, gen, {}) for im in s.images] for s in samples
        ]
        pruned = build_context(tiny.adapter, samples, selections)
        for b, (sample, sel) in enumerate(zip(samples, selections, strict=True)):
            slots = torch.nonzero(sample.prompt_ids == tiny.adapter.image_token_id).flatten()
            offsets = torch.tensor([0, *[im.num_tokens for im in sample.images]]).cumsum(0)
            kept = torch.cat([slots[offsets[i] + s.indices] for i, s in enumerate(sel)])
            mask = pruned.inputs.attention_mask[b].bool()
            visual = pruned.inputs.positions[:, b][:, mask][:, pruned.inputs.visual_mask[b][mask]]
            assert torch.equal(visual, sample.positions[:, kept])
            assert int(pruned.next_position[b]) == sample.next_position


@pytest.mark.parametrize("pruner", PRE_LLM)
@pytest.mark.parametrize("budget", [0.05, 0.3, 1.0])
@torch.no_grad()
def test_pruned_video_keeps_exactly_k_of_its_tokens(tiny, pruner: str, budget: float) -> None:  # noqa: ANN001
    params = OmegaConf.to_container(OmegaConf.load(CONF / f"{pruner}.yaml"))["params"]
    tiny.adapter.vision_signals = declared_signals(pruner, params, seed=0)
    items = item_batches(tiny.name, tiny.patch)[0]
    samples = encode_samples(tiny.adapter, tiny.processor, items)
    gen = torch.Generator().manual_seed(0)
    for sample, item in zip(samples, items, strict=True):
        for visual in sample.images[: len(item.videos)]:
            t, h, w = visual.grid
            assert t == 3 and visual.num_tokens == t * h * w  # 6 frames -> 3 temporal patches, one budget
            selection = select_tokens(pruner, visual, sample.question_embeds, budget, gen, params)
            assert selection.indices.numel() == tokens_to_keep(budget, visual.num_tokens)
            assert selection.indices.numel() == max(1, min(visual.num_tokens, round(budget * visual.num_tokens)))
    ctx = build_context(tiny.adapter, samples, [keep_all(s) for s in samples])
    assert ctx.kept_visual.tolist() == [sum(im.num_tokens for im in s.images) for s in samples]


def test_families_without_a_video_path_refuse_naming_the_family(tmp_path) -> None:  # noqa: ANN001
    family = "llava_onevision"
    _, processor = family_model(family, tmp_path)
    (question, clip), *_ = synthetic_videos(1)
    item = PromptItem("v", [], question, "s", "", videos=[clip])
    with pytest.raises(ValueError, match=f"model family '{family}' has no video input"):
        processor_inputs(processor, [item])


def test_a_frame_size_the_processor_cannot_take_is_an_error_naming_the_video(tiny) -> None:  # noqa: ANN001
    strip = [noise_image(tiny.patch * 300, tiny.patch, seed) for seed in range(4)]
    clip = Video(tuple(strip), (0, 1, 2, 3), 2.0, 4, "data/clips/strip.mp4")
    item = PromptItem("v", [], "what?", "s", "", videos=[clip])
    with pytest.raises(VideoError, match=r"data/clips/strip\.mp4: frame size .* cannot be processed"):
        processor_inputs(tiny.processor, [item])
    tight = replace(synthetic_videos(1)[0][1], max_tokens=2, source="tiny_video row 0")
    with pytest.raises(VideoError, match="tiny_video row 0: max_tokens=2 leaves no token for each of 3"):
        processor_inputs(tiny.processor, [PromptItem("v", [], "what?", "s", "", videos=[tight])])


@torch.no_grad()
def test_sub_second_temporal_patches_follow_hf_integer_seconds(tmp_path) -> None:  # noqa: ANN001
    # 6 frames at 4 fps: 0.5 s per temporal patch, which transformers 5.17's Qwen2.5-VL get_rope_index
    # truncates to int(0.5) = 0 seconds, so every temporal patch shares one temporal position.
    tiny = video_family("qwen2_5_vl", tmp_path)
    clip = replace(synthetic_videos(1)[0][1], fps=4.0)
    items = [PromptItem("fast", [], "what?", "s", "", videos=[clip])]
    batch = processor_inputs(tiny.processor, items)
    assert batch["second_per_grid_ts"].tolist() == [0.5]
    want = _rope_index(tiny.adapter.model, batch)[:, 0]
    (sample,) = encode_samples(tiny.adapter, tiny.processor, items)
    assert torch.equal(sample.positions, want)
    visual = sample.positions[:, sample.prompt_ids == tiny.adapter.image_token_id]
    assert visual[0].unique().numel() == 1 and sample.images[0].temporal_step == 0


def test_a_chat_template_without_video_parts_is_named(tmp_path) -> None:  # noqa: ANN001
    shipped = Path(resolve_model_path("package:tiny-vlm"))
    for name in ("tokenizer.json", "tokenizer_config.json", "processor_config.json"):
        shutil.copy(shipped / name, tmp_path / name)
    template = (shipped / "chat_template.jinja").read_text()
    video_part = "{%- elif part['type'] == 'video' -%}<|vision_start|><|video_pad|><|vision_end|>\n"
    assert video_part in template  # the shipped template renders videos; this copy drops that branch
    (tmp_path / "chat_template.jinja").write_text(template.replace(video_part, ""))
    processor = load_processor(tmp_path)
    item = PromptItem("v", [], "what?", "s", "", videos=[synthetic_videos(1)[0][1]])
    with pytest.raises(ValueError, match=r"1 videos were given but the prompts hold 0 markers .* chat template"):
        processor_inputs(processor, [item])

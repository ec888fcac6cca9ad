"""GLM-4.6V's analytic costs against FlopCounterMode on a tiny random instance, and the efficiency mode's
refusal of a family without a vision formula before anything is measured."""

from __future__ import annotations

import pytest
import torch
from family_models import family_model
from tiny_models import noise_image

from sparsectx.context import build_context
from sparsectx.encoding import encode_samples
from sparsectx.eval.costs import check_vision_family, counted_flops, prefill_flops, vision_flops
from sparsectx.eval.protocol import select_visual
from sparsectx.models import adapter_for
from sparsectx.prompting import PromptItem, processor_inputs
from sparsectx.pruning.config import PrunerConfig

PATCH = 14


@pytest.fixture(scope="module")
def glm(tmp_path_factory: pytest.TempPathFactory):
    model, processor = family_model("glm46v", tmp_path_factory.mktemp("glm46v"))
    return adapter_for(model, signal_chunk=64), processor


def _prompt() -> PromptItem:
    # Two images of different grids, so per-image attention segments are not all the same length.
    images = [noise_image(PATCH * 8, PATCH * 10, 1), noise_image(PATCH * 6, PATCH * 6, 2)]
    return PromptItem("0", images, "How many red circles are there?", "sys", "Think, then answer.")


@torch.no_grad()
def test_glm_vision_flops_match_the_counted_tally(glm) -> None:
    adapter, processor = glm
    batch = processor_inputs(processor, [_prompt()])
    grid = batch["image_grid_thw"]
    counted = counted_flops(lambda: adapter.visual(batch["pixel_values"], grid_thw=grid))
    analytic = vision_flops(adapter.model.config.vision_config, "glm46v", [tuple(g) for g in grid.tolist()])
    assert analytic == pytest.approx(counted, rel=0.02)


@torch.no_grad()
@pytest.mark.parametrize("budget", [1.0, 0.25])
def test_glm_prefill_flops_match_the_counted_tally(glm, budget) -> None:
    adapter, processor = glm
    samples = encode_samples(adapter, processor, [_prompt()])
    selection = select_visual(adapter, samples, PrunerConfig("random", "pre_llm", {}), budget, 0, "t")
    ctx = build_context(adapter, samples, selection)
    counted = counted_flops(lambda: adapter.logits(adapter.run_llm(ctx.inputs, None)))
    text = adapter.model.config.get_text_config()
    assert prefill_flops(text, ctx.inputs.embeds.shape[1], None)["total"] == pytest.approx(counted, rel=0.02)


def test_a_family_without_a_vision_formula_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match=r"family 'llava_onevision'; supported: glm46v, qwen2_5_vl, "):
        check_vision_family("llava_onevision")

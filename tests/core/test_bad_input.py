"""Bad input to the core gets errors that name the value, the sample or the fix."""

from __future__ import annotations

import pytest
import torch
from tiny_models import noise_image

from sparsectx.budget import tokens_to_keep
from sparsectx.encoding import encode_samples
from sparsectx.models import ModelConfig, load_model
from sparsectx.prompting import PromptItem
from sparsectx.pruning import select_tokens


def test_unknown_pruner_lists_available_names(tiny_vlm):
    samples = encode_samples(
        tiny_vlm.adapter, tiny_vlm.processor, [PromptItem("a", [noise_image(56, 56, 0)], "q", "s", "")]
    )
    with pytest.raises(KeyError, match="visionzip") as err:
        select_tokens("visonzip", samples[0].images[0], samples[0].question_embeds, 0.1, torch.Generator(), {})
    assert "Available" in str(err.value)


@pytest.mark.parametrize("budget", [0.0, -0.1, 1.5])
def test_budget_outside_unit_interval_names_the_value(budget):
    with pytest.raises(ValueError, match=str(budget)):
        tokens_to_keep(budget, 100)


def test_unreadable_image_names_the_sample(tiny_vlm):
    with pytest.raises(ValueError, match="'broken-7'"):
        encode_samples(tiny_vlm.adapter, tiny_vlm.processor, [PromptItem("broken-7", [None], "q", "s", "")])


def test_missing_model_path_says_how_to_point_at_a_checkpoint(tmp_path):
    cfg = ModelConfig("x", str(tmp_path / "nowhere"), "float32", "cpu", "sdpa", 64, "grouped", 1, 64, "auto")
    with pytest.raises(FileNotFoundError, match="model.path=/models/"):
        load_model(cfg)

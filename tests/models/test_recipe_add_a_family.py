"""The recipe of docs/families.md, "Add a family", followed with a toy family: Qwen2-VL (``qwen2_vl``), whose
transformers class exists and whose tower the Qwen-VL adapter reads, with widths named its own way.

The toy is exactly what the recipe says to write: one module in ``sparsectx.models`` ending with
``SPEC = FamilySpec(...)`` (here in a folder the package searches after its own, ``family_folder``), and one
``model/<name>.yaml`` preset pointing at a checkpoint (here in a user's ``--config-dir``). No other file is
written or edited: loading picks the toy's adapter and processor by the checkpoint's ``config.json``
``model_type``, the efficiency mode counts the tower by the toy's own formula, and the config check refuses an
in-LLM pruner with the reason the toy declares, naming the registry's pre-LLM pruners.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import torch
from component_folders import component_folder
from eval.test_runner_support import CONF, SIDE, base_overrides, write_bench
from hydra import compose
from tiny_models import _ids, _text_ids, char_processor, noise_image
from transformers.models.qwen2_vl import Qwen2VLConfig, Qwen2VLForConditionalGeneration

import sparsectx.models as models
from sparsectx.cli import config_search
from sparsectx.encoding import encode_samples
from sparsectx.eval.costs import check_vision_family, counted_flops, vision_flops
from sparsectx.eval.runner import run
from sparsectx.models import ModelConfig, load_model
from sparsectx.models.families import FAMILIES, register_families
from sparsectx.models.processor import load_processor
from sparsectx.prompting import PromptItem, processor_inputs
from sparsectx.pruning import pruners_at
from sparsectx.pruning.base import IN_LLM, PRE_LLM
from sparsectx.pruning.config import PrunerConfig

TOY_MODULE = '''
"""Qwen2-VL (``qwen2_vl``): a full-attention vision tower in raster order, a two-layer MLP, no DeepStack.

Its interfaces are the Qwen-VL adapter's (``model.model.visual``, ``pooler_output`` per merged token, M-RoPE
positions), so the family is a layout and a record. Its ``vision_config`` names the widths its own way
(transformers 5.17 ``Qwen2VLVisionConfig``: ``embed_dim``, ``mlp_ratio``, ``hidden_size`` = the merger's output).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from torch import nn
from transformers import PretrainedConfig
from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

from sparsectx.models.family import FamilySpec
from sparsectx.models.qwen_common import QWEN_VL_SPECIAL_TOKENS, QwenVLAdapter, VisionLayout
from sparsectx.models.vision_costs import Grid, attention_segments


def _last_block(visual: nn.Module) -> nn.Module:
    return visual.blocks[len(visual.blocks) - 1].attn


def _middle_block(visual: nn.Module) -> nn.Module:
    return visual.blocks[len(visual.blocks) // 2 - 1].attn


def _in_raster_order(visual: nn.Module, grid_thw: object) -> None:
    return None


LAYOUT = VisionLayout(
    signal_block=_last_block, to_raster=_in_raster_order, has_deepstack=False, object_block=_middle_block
)


def _adapter(model: nn.Module, signal_chunk: int) -> QwenVLAdapter:
    return QwenVLAdapter("qwen2_vl", model, LAYOUT, signal_chunk)


def _vision_flops(vision: PretrainedConfig, grids: Sequence[Grid]) -> float:
    """Returns the patch embedding, per block the qkv and output projections, attention per frame and the
    two-layer MLP (``embed_dim * mlp_ratio`` wide), and the merger (u D) -> (u D) -> ``hidden_size``."""
    width, unit = vision.embed_dim, vision.spatial_merge_size**2
    n = float(sum(t * h * w for t, h, w in grids))
    segments = [s for grid in grids for s in attention_segments(vision, grid, windowed=False)]
    block = 8 * n * width**2 + 4 * width * sum(s**2 for s in segments) + 4 * n * width**2 * vision.mlp_ratio
    embed = 2 * n * vision.in_channels * vision.temporal_patch_size * vision.patch_size**2 * width
    merged = n / unit
    merger = 2 * merged * (unit * width) ** 2 + 2 * merged * unit * width * vision.hidden_size
    return embed + vision.depth * block + merger


def _tiny_config(published: dict[str, Any]) -> dict[str, Any]:
    raise NotImplementedError("no published Qwen2-VL checkpoint is kept to shrink for the rehearsal")


SPEC = FamilySpec(
    name="qwen2_vl",
    model_types=("qwen2_vl",),
    architectures=("Qwen2VLForConditionalGeneration",),
    adapter=_adapter,
    special_tokens=QWEN_VL_SPECIAL_TOKENS,
    tiny_config=_tiny_config,
    image_processors={"Qwen2VLImageProcessor": Qwen2VLImageProcessorPil},
    image_marker="<|image_pad|>",
    vision_flops=_vision_flops,
    in_llm_unsupported="the toy's in-LLM hook is not checked against its HF forward",
    source="transformers 5.17 models/qwen2_vl",
)
'''

PRESET_YAML = """\
# Toy Qwen2-VL preset (tests/models/test_recipe_add_a_family.py): a tiny random-weight checkpoint on the CPU.
name: toy_qwen2_vl
path: {path}
revision: null  # a local folder: no Hub commit
local_files_only: true
dtype: float32
device: cpu
attn_implementation: sdpa
signal_chunk: 64
vision_attention: grouped
image_workers: 1
vision_mlp_multiple: 0
compile_blocks: "off"
tile_budget: null
thinking: null
answer_prefix: ""
max_visual_tokens: null
"""


@pytest.fixture
def family_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[str, str], Path]]:
    """Returns ``write(module, source)``, which writes ``<module>.py`` into a folder that ``sparsectx.models``
    searches after its own, as if the file were put beside the shipped families; then ``register_families()``
    finds it (``component_folder``)."""
    yield from component_folder(tmp_path / "family_modules", monkeypatch, models, FAMILIES)


def toy_checkpoint(folder: Path, weights: bool) -> Path:
    """Returns ``folder`` holding a tiny random-weight Qwen2-VL (2 vision blocks of width 32, a 2-layer decoder)
    with the tests' character processor (``config.json`` only when not ``weights``)."""
    tokenizer = char_processor(14, folder).tokenizer
    torch.manual_seed(0)
    config = Qwen2VLConfig(
        vision_config={"depth": 2, "embed_dim": 32, "mlp_ratio": 2, "num_heads": 2, "hidden_size": 64},
        text_config={
            "vocab_size": len(tokenizer),
            "hidden_size": 64,
            "intermediate_size": 128,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "max_position_embeddings": 512,
            **_text_ids(tokenizer),
            "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [2, 3, 3]},
        },
        **_ids(tokenizer),
    )
    model = Qwen2VLForConditionalGeneration(config)
    (model.save_pretrained if weights else model.config.save_pretrained)(folder)
    return folder


@pytest.fixture
def toy_family(family_folder, tmp_path: Path) -> Path:
    """Follows the recipe (the module, a preset naming a checkpoint) and returns the user's config folder."""
    conf = tmp_path / "my_conf"
    (conf / "model").mkdir(parents=True)
    family_folder("qwen2_vl", TOY_MODULE)
    checkpoint = toy_checkpoint(tmp_path / "toy_checkpoint", weights=True)
    (conf / "model" / "toy_qwen2_vl.yaml").write_text(PRESET_YAML.format(path=checkpoint))
    register_families()  # what importing sparsectx.models does for the modules beside the shipped ones
    return conf


def test_the_module_is_found_and_registered(toy_family):
    assert "qwen2_vl" in FAMILIES.names() and FAMILIES.for_model_type("qwen2_vl").name == "qwen2_vl"
    check_vision_family("qwen2_vl")


def test_a_module_without_a_spec_is_refused_naming_it(family_folder):
    path = family_folder("toy_forgotten", "def adapter(model):\n    return model\n")
    with pytest.raises(TypeError, match=rf"{path}: .* defines no SPEC .*Add a family"):
        register_families()


def test_loading_picks_the_toys_adapter_and_processor_by_model_type(toy_family, tmp_path):
    checkpoint = tmp_path / "toy_checkpoint"
    cfg = ModelConfig("toy_qwen2_vl", str(checkpoint), "float32", "cpu", "sdpa", 64, "grouped", 1, 0, "off")
    loaded = load_model(cfg)
    assert (loaded.adapter.family, loaded.processor.family) == ("qwen2_vl", "qwen2_vl")
    item = PromptItem("0", [noise_image(SIDE, SIDE, 1)], "How many circles are there?", "sys", "Answer.")
    batch = processor_inputs(loaded.processor, [item])
    grid = batch["image_grid_thw"]
    counted = counted_flops(lambda: loaded.adapter.visual(batch["pixel_values"], grid_thw=grid))
    vision = loaded.adapter.model.config.vision_config
    assert vision_flops(vision, "qwen2_vl", [tuple(g) for g in grid.tolist()]) == pytest.approx(counted, rel=1e-9)
    (image,) = encode_samples(loaded.adapter, loaded.processor, [item])[0].images
    assert image.num_tokens == int(grid.prod()) // 4 and image.attention_received.shape == (image.num_tokens,)


@pytest.mark.parametrize("name", pruners_at(IN_LLM))
def test_the_config_check_refuses_an_in_llm_pruner_with_the_toys_reason(toy_family, tmp_path, name):
    with config_search(CONF, toy_family, None):
        pruner = compose("evaluate", overrides=["model=toy_qwen2_vl", f"pruner={name}"]).pruner
    config = PrunerConfig(pruner.name, pruner.stage, dict(pruner.params), pruner.layer)
    with pytest.raises(ValueError) as refused:
        config.check_model(str(tmp_path / "toy_checkpoint"))
    assert str(refused.value) == (
        f"pruner.stage=llm (pruner.layer={pruner.layer}) is not supported on model family 'qwen2_vl': the toy's "
        f"in-LLM hook is not checked against its HF forward; choose a pre-LLM pruner "
        f"(pruner={', '.join(pruners_at(PRE_LLM))})"
    )


@pytest.mark.slow
def test_an_evaluation_and_the_efficiency_mode_run_on_the_toy(toy_family, tmp_path):
    bench = {"syn_ocr": write_bench(tmp_path / "syn_ocr.tsv", "syn_ocr", 2, SIDE)}

    def evaluate(checkpoint: Path, *extra: str) -> Path:
        overrides = ["model=toy_qwen2_vl", "bench=syn_ocr", "pruner=visionzip", "budget=0.25", *extra]
        with config_search(CONF, toy_family, None):
            (out,) = run(compose("evaluate", overrides=[*overrides, *base_overrides(checkpoint, tmp_path, bench, 4)]))
        return out

    assert json.loads(evaluate(tmp_path / "toy_checkpoint").read_text())["n_scored"] == 2
    config_only = toy_checkpoint(tmp_path / "config_only", weights=False)
    efficiency = ["mode=efficiency", "efficiency.bench=syn_ocr", "efficiency.budgets=[0.25]", "efficiency.num_items=1"]
    efficiency += ["efficiency.repetitions=1", "efficiency.warmup=0", "efficiency.decode_tokens=2"]
    full, pruned = json.loads(evaluate(config_only, *efficiency).read_text())["budgets"]
    grid = load_processor(config_only).process_images([noise_image(SIDE, SIDE, 0)])[1]
    vision = Qwen2VLConfig.from_pretrained(config_only).vision_config
    assert (
        full["flops"]["vision"]
        == pruned["flops"]["vision"]
        == FAMILIES.by_name("qwen2_vl").vision_flops(vision, [tuple(g) for g in grid.tolist()])
    )

"""Parameter counts on the meta device against independent references."""

from __future__ import annotations

import json
from pathlib import Path

import torch
import transformers

from sparsectx.models import resolve_model_path
from sparsectx.plan.architecture import architecture, architecture_of
from sparsectx.training.lora import apply_lora
from sparsectx.training.method import LoraSettings

TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def test_published_qwen2_5_vl_7b_has_8_29b_parameters() -> None:
    # docs/performance.md: "random Qwen2.5-VL-7B weights (8.29B parameters)"; check_lora_scope's 392 adapters
    arch = architecture("Qwen/Qwen2.5-VL-7B-Instruct")
    assert round(arch.total / 1e9, 2) == 8.29
    assert arch.lora(16, TARGETS) == 16 * 28 * (2 * (3584 + 3584) + 2 * (3584 + 512) + 3 * (3584 + 18944))


def test_published_qwen3_5_9b_has_9_41b_parameters() -> None:
    # docs/performance.md: "the Qwen3.5-9B architecture (--arch qwen3_5_9b, 9.41B parameters)"
    assert round(architecture("Qwen/Qwen3.5-9B").total / 1e9, 2) == 9.41


def test_meta_counts_equal_a_real_tiny_model_and_its_lora() -> None:
    folder = Path(resolve_model_path("package:tiny-vlm"))
    config = json.loads((folder / "config.json").read_text())
    arch = architecture_of(config, "tiny-vlm")
    cls = getattr(transformers, config["architectures"][0])
    torch.manual_seed(0)
    model = cls(cls.config_class(**{k: v for k, v in config.items() if k not in ("architectures", "model_type")}))
    assert arch.total == sum(p.numel() for p in model.parameters())
    assert arch.vision == sum(p.numel() for n, p in model.named_parameters() if n.startswith("model.visual."))
    peft = apply_lora(model, LoraSettings(enabled=True, r=4, alpha=8, dropout=0.0, target_modules=TARGETS))
    assert arch.lora(4, TARGETS) == sum(p.numel() for p in peft.parameters() if p.requires_grad)

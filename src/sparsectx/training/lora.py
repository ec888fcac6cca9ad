"""Which parameters train: LoRA on the language model's decoder layers only, or every language-model weight.

Name matching alone is not enough on Qwen-VL: Qwen2.5-VL's vision blocks also have ``gate_proj/up_proj/
down_proj``, so a plain ``target_modules`` list would adapt the ViT too (training-methods spec §1.9). The
target is therefore a regular expression anchored at ``language_model.layers.<i>``, and ``check_lora_scope``
verifies the result: the count of adapter tensors is layers x modules x 2 and none is in the vision tower.
"""

from __future__ import annotations

import re

import torch
from peft import LoraConfig, PeftModel, get_peft_model
from peft.tuners.tuners_utils import BaseTunerLayer
from transformers import PreTrainedModel

from sparsectx.training.method import LoraSettings

VISION_MARKERS = (".visual.", "vision_tower", "merger")


def lora_target_regex(modules: list[str]) -> str:
    """Returns the peft ``target_modules`` regex for ``modules`` inside ``language_model.layers.<i>`` only."""
    names = "|".join(re.escape(m) for m in modules)
    return rf".*\.language_model\.layers\.\d+\.(?:self_attn|mlp)\.(?:{names})"


def apply_lora(model: PreTrainedModel, settings: LoraSettings) -> PeftModel:
    """Returns ``model`` wrapped by peft with LoRA adapters on the language model (modified in place).

    The original module objects stay in place (peft injects its layers into them), so an adapter built on
    ``model`` before wrapping sees the adapters, and ``PeftModel.disable_adapter()`` gives the base weights.
    """
    config = LoraConfig(
        r=settings.r,
        lora_alpha=settings.alpha,
        lora_dropout=settings.dropout,
        target_modules=lora_target_regex(list(settings.target_modules)),
        bias="none",
    )
    peft_model = get_peft_model(model, config)
    check_lora_scope(peft_model, len(settings.target_modules))
    skip_input_casts(peft_model)
    return peft_model


def skip_input_casts(peft_model: PeftModel) -> None:
    """Returns None after telling every adapter layer not to cast its input to the adapters' fp32.

    Every forward of a half-precision student runs under autocast (``Student.compute``), which runs the
    adapter matmuls in the half dtype whatever their input dtype, so peft's fp32 copy of each adapted
    layer's input (690 MB per layer for a 32 x 1,500-token teacher pass at 7B) changes no number and costs
    memory traffic on every adapted linear. An fp32 student has fp32 inputs already.
    """
    for module in peft_model.modules():
        if isinstance(module, BaseTunerLayer):
            module.cast_input_dtype_enabled = False


def check_lora_scope(peft_model: PeftModel, modules_per_layer: int) -> None:
    """Returns None if the trainable tensors are exactly the LLM adapters; raises RuntimeError otherwise.

    Expected count = decoder layers x ``modules_per_layer`` x 2 (A and B), as the SCOPD authors assert
    (392 for Qwen2.5-VL-7B with 7 modules).
    """
    trainable = [name for name, p in peft_model.named_parameters() if p.requires_grad]
    layers = peft_model.base_model.model.config.get_text_config().num_hidden_layers
    expected = layers * modules_per_layer * 2
    vision = [name for name in trainable if any(marker in name for marker in VISION_MARKERS)]
    not_lora = [name for name in trainable if ".lora_" not in name]
    if vision or not_lora or len(trainable) != expected:
        raise RuntimeError(
            f"LoRA scope check failed: {len(trainable)} trainable tensors (expected {expected} = {layers} "
            f"layers x {modules_per_layer} modules x 2), vision tensors {vision[:3]}, non-adapter tensors "
            f"{not_lora[:3]}"
        )


def freeze_all_but_language_model(model: PreTrainedModel) -> None:
    """Returns None; full-parameter mode trains the language model and LM head, never the vision tower.

    The vision tower runs once per batch without gradients (encode once), so its weights cannot learn anyway;
    freezing them keeps them out of the optimizer and the gradient sync.
    """
    for name, param in model.named_parameters():
        param.requires_grad_(not any(marker in f".{name}" for marker in VISION_MARKERS))


def trainable_named(model: torch.nn.Module) -> dict[str, torch.nn.Parameter]:
    """Returns {name: parameter} of every parameter that requires grad, in registration order."""
    return {name: p for name, p in model.named_parameters() if p.requires_grad}

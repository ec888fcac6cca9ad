"""Which parameters train: LoRA on the language model's decoder layers only, or every language-model weight.

Name matching alone is not enough on Qwen-VL: Qwen2.5-VL's vision blocks also have ``gate_proj/up_proj/
down_proj``, so a plain ``target_modules`` list would adapt the ViT too (training-methods spec §1.9). The
target is therefore a regular expression anchored at ``language_model.layers.<i>``, and ``check_lora_scope``
verifies the result: the count of adapter tensors is 2 per target module each decoder layer holds (layers x
modules x 2 where every layer holds every module) and none is in the vision tower. A hybrid decoder's
layers hold different modules: Qwen3.5's linear-attention layers have ``linear_attn`` (in_proj_qkv,
in_proj_z, in_proj_a, in_proj_b, out_proj) where its full-attention layers have ``self_attn``.
"""

from __future__ import annotations

import re

import torch
from peft import LoraConfig, PeftModel, get_peft_model
from peft.tuners.tuners_utils import BaseTunerLayer
from transformers import PreTrainedModel

from sparsectx.model_parts import MIXERS, VISION_MARKERS
from sparsectx.training.method import LoraSettings


def lora_target_regex(modules: list[str]) -> str:
    """Returns the peft ``target_modules`` regex for ``modules`` inside ``language_model.layers.<i>`` only."""
    names = "|".join(re.escape(m) for m in modules)
    return rf".*\.language_model\.layers\.\d+\.(?:{'|'.join(MIXERS)})\.(?:{names})"


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
    expected = 2 * adapted_modules(model, list(settings.target_modules))
    peft_model = get_peft_model(model, config)
    check_lora_scope(peft_model, expected)
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


def adapted_modules(model: PreTrainedModel, modules: list[str]) -> int:
    """Returns how many target modules the decoder layers hold: per layer, the ``modules`` its mixers have.

    Raises:
        ValueError: a name of ``method.lora.target_modules`` is in no decoder layer (a typo would otherwise
            train fewer adapters than asked for).
    """
    layers = model.model.language_model.layers
    present = {name: 0 for name in modules}
    for layer in layers:
        for name in modules:
            present[name] += sum(hasattr(getattr(layer, mixer, None), name) for mixer in MIXERS)
    missing = [name for name, count in present.items() if count == 0]
    if missing:
        raise ValueError(
            f"method.lora.target_modules names {missing}, which no decoder layer of this "
            f"{model.config.model_type} model has (its layers have {sorted(_projections(layers[0]))} ...); "
            "list the language model's projection names"
        )
    return sum(present.values())


def _projections(layer: torch.nn.Module) -> set[str]:
    return {name for mixer in MIXERS for name, _ in getattr(layer, mixer, torch.nn.Module()).named_children()}


def check_lora_scope(peft_model: PeftModel, expected: int) -> None:
    """Returns None if the trainable tensors are exactly the LLM adapters; raises RuntimeError otherwise.

    ``expected`` = 2 (A and B) x the target modules the decoder layers hold (``adapted_modules``): for
    Qwen2.5-VL-7B with 7 modules in each of 28 layers 392, as the SCOPD authors assert.
    """
    trainable = [name for name, p in peft_model.named_parameters() if p.requires_grad]
    vision = [name for name in trainable if any(marker in name for marker in VISION_MARKERS)]
    not_lora = [name for name in trainable if ".lora_" not in name]
    if vision or not_lora or len(trainable) != expected:
        raise RuntimeError(
            f"LoRA scope check failed: {len(trainable)} trainable tensors (expected {expected} = 2 x the "
            f"target modules of the decoder layers), vision tensors {vision[:3]}, non-adapter tensors "
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

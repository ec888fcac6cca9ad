"""Load VLMs and talk to them through one adapter per family (Qwen-VL, Qwen3.5, GLM-4.6V, LLaVA-OneVision)."""

from sparsectx.models.adapter import LLMInputs, VLMAdapter
from sparsectx.models.loading import (
    LoadedModel,
    ModelConfig,
    adapter_for,
    load_model,
    resolve_model_path,
    route_vision_tower,
    set_vision_attention,
)

__all__ = [
    "LLMInputs",
    "LoadedModel",
    "ModelConfig",
    "VLMAdapter",
    "adapter_for",
    "load_model",
    "resolve_model_path",
    "route_vision_tower",
    "set_vision_attention",
]

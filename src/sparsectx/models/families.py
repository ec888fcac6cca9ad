"""The registry of model families: each family module's ``SPEC``, registered once (``sparsectx.models.family``)."""

from __future__ import annotations

from sparsectx.models import glm46v, llava_onevision, qwen2_5_vl, qwen3_5, qwen3_vl
from sparsectx.models.family import FamilyRegistry, FamilySpec

FAMILIES = FamilyRegistry(
    not_yet={
        "llavaonevision1_5": "LLaVA-OneVision-1.5 has no class in transformers 5.17, only remote code; "
        "conf/model/llava_onevision_qwen2_7b.yaml is the llava_onevision stand-in",
    }
)
for _module in (qwen2_5_vl, qwen3_vl, qwen3_5, glm46v, llava_onevision):
    FAMILIES.register(_module.SPEC)


def family_for(model_type: str) -> FamilySpec:
    """Returns the family record accepting ``model_type``; raises KeyError naming the supported model_types."""
    return FAMILIES.for_model_type(model_type)

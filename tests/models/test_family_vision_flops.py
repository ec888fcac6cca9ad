"""Each family's vision FLOPs formula lives in its record (``FamilySpec.vision_flops``); the efficiency mode's
``sparsectx.eval.costs.vision_flops`` asks the record, and a family without one is refused by name.

The recorded values are what ``costs.vision_flops`` gave with the formulas written in ``costs.py`` (before they
moved into the family modules) on each published checkpoint's ``config.json``: the move changed no bit.
"""

from __future__ import annotations

import pytest
from transformers import AutoConfig

from sparsectx.eval.costs import check_vision_family, vision_flops
from sparsectx.models.families import FAMILIES
from sparsectx.models.published import published_folder

GRIDS = {
    0: [(1, 36, 36)],
    2: [(2, 14, 22), (1, 8, 8)],
    4: [(1, 2, 2), (1, 98, 74), (3, 46, 10)],
}
"""Patch grids (t, h, w): one square image; a two-frame video beside a small image (window edges not aligned);
a tiny, a large and an odd-shaped three-frame input."""
RECORDED = {
    ("qwen2_5_vl", "Qwen2.5-VL-7B-Instruct", 0): 1710653112320.0,
    ("qwen2_5_vl", "Qwen2.5-VL-7B-Instruct", 2): 883210158080.0,
    ("qwen2_5_vl", "Qwen2.5-VL-7B-Instruct", 4): 12263860224000.0,
    ("qwen3_vl", "Qwen3-VL-4B-Instruct", 0): 1022613258240.0,
    ("qwen3_vl", "Qwen3-VL-4B-Instruct", 2): 468976664576.0,
    ("qwen3_vl", "Qwen3-VL-4B-Instruct", 4): 10946382135296.0,
    ("qwen3_5", "Qwen3.5-4B", 0): 969614032896.0,
    ("qwen3_5", "Qwen3.5-4B", 2): 441168429056.0,
    ("qwen3_5", "Qwen3.5-4B", 4): 10593217544192.0,
    ("qwen3_5", "Qwen3.5-9B", 0): 1305042223104.0,
    ("qwen3_5", "Qwen3.5-9B", 2): 599213850624.0,
    ("qwen3_5", "Qwen3.5-9B", 4): 13925963685888.0,
    ("glm46v", "GLM-4.6V-Flash", 0): 2149791694848.0,
    ("glm46v", "GLM-4.6V-Flash", 2): 1026607611904.0,
    ("glm46v", "GLM-4.6V-Flash", 4): 20523484413952.0,
}
"""``costs.vision_flops`` at commit d42f31e, before the formulas moved, exact."""


@pytest.mark.parametrize(("family", "checkpoint", "grids"), sorted(RECORDED))
def test_each_records_formula_gives_the_recorded_flops_bit_for_bit(family, checkpoint, grids):
    vision = AutoConfig.from_pretrained(published_folder(checkpoint)).vision_config
    recorded = RECORDED[family, checkpoint, grids]
    assert FAMILIES.by_name(family).vision_flops(vision, GRIDS[grids]) == recorded
    assert vision_flops(vision, family, GRIDS[grids]) == recorded


def test_the_supported_families_are_the_records_with_a_formula():
    with_formula = [spec.name for spec in FAMILIES if spec.vision_flops is not None]
    assert sorted(with_formula) == ["glm46v", "qwen2_5_vl", "qwen3_5", "qwen3_vl"]
    with pytest.raises(ValueError) as refused:
        check_vision_family("llava_onevision")
    assert str(refused.value) == (
        "mode=efficiency: no vision FLOPs formula for family 'llava_onevision'; "
        "supported: glm46v, qwen2_5_vl, qwen3_5, qwen3_vl"
    )
    with pytest.raises(ValueError, match="family 'no_such_family'; supported: glm46v, "):
        check_vision_family("no_such_family")

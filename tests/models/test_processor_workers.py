"""``model.image_workers``: threaded image decoding and preprocessing give exactly the sequential results."""

from __future__ import annotations

import time

import torch
from tiny_models import noise_image

from sparsectx.models import resolve_model_path
from sparsectx.models.processor import load_processor
from sparsectx.prompting import PromptItem, build_prompts, processor_inputs


def test_threaded_preprocessing_equals_one_sequential_call() -> None:
    source = resolve_model_path("package:tiny-vlm")
    sizes = [(448, 448), (300, 200), (97, 450), (448, 448), (640, 480), (28, 56), (512, 300)]
    items = [
        PromptItem(f"s{i}", [noise_image(w, h, seed=i)], f"q{i}?", "sys", "think", "") for i, (w, h) in enumerate(sizes)
    ]
    sequential = processor_inputs(load_processor(source, image_workers=1), items)
    threaded = processor_inputs(load_processor(source, image_workers=4), items)
    assert sequential.keys() == threaded.keys()
    for key in sequential:
        assert torch.equal(sequential[key], threaded[key]), key
    assert len(set(map(tuple, sequential["image_grid_thw"].tolist()))) > 2  # the images differ in size


def test_threaded_prompt_building_keeps_the_order_of_the_rows() -> None:
    def build(row: int) -> PromptItem:
        time.sleep(0.002 * ((7 * row) % 5))  # threads finish out of order
        return PromptItem(f"s{row}", [noise_image(28, 28, seed=row)], f"q{row}?", "sys", "think", "")

    rows = list(range(12))
    threaded = build_prompts(build, rows, workers=4)
    sequential = build_prompts(build, rows, workers=1)
    assert [p.sample_id for p in threaded] == [f"s{r}" for r in rows]
    assert [p.images[0].tobytes() for p in threaded] == [p.images[0].tobytes() for p in sequential]

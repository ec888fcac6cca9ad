"""Our M-RoPE positions (used by pretraining's data workers and the encoders) equal HF's get_rope_index."""

from __future__ import annotations

import pytest
import torch
from tiny_models import char_processor, noise_image, tiny_qwen2_5_vl

from sparsectx.encoding import rope_positions


@pytest.fixture(scope="module")
def processor(tmp_path_factory: pytest.TempPathFactory):
    return char_processor(14, tmp_path_factory.mktemp("proc"))


@pytest.mark.parametrize(
    "sizes", [[(112, 112)], [(84, 56)], [(56, 112), (112, 84)]], ids=["square", "wide", "two-images"]
)
def test_rope_positions_match_hf(processor, sizes: list[tuple[int, int]]) -> None:  # noqa: ANN001
    model = tiny_qwen2_5_vl(processor.tokenizer, seed=0)
    images = [noise_image(w, h, seed) for seed, (w, h) in enumerate(sizes)]
    content = [{"type": "image"} for _ in images] + [{"type": "text", "text": "where"}]
    messages = [{"role": "user", "content": content}]
    text = processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    inputs = processor(text=[text], images=images, return_tensors="pt")
    merge = model.config.vision_config.spatial_merge_size
    grids = [(t, h // merge, w // merge) for t, h, w in inputs["image_grid_thw"].tolist()]
    assert any(h != w for _, h, w in grids) or len(sizes) == 1

    want, _ = model.model.get_rope_index(
        inputs["input_ids"],
        inputs["mm_token_type_ids"],
        image_grid_thw=inputs["image_grid_thw"],
        attention_mask=inputs["attention_mask"],
    )
    got, next_position = rope_positions(inputs["input_ids"][0], model.config.image_token_id, grids)
    assert torch.equal(got, want[:, 0])
    assert next_position == int(want.max()) + 1

"""Builders for the runner, Pass@K and efficiency tests: a tiny model directory, tiny TSVs, configs.

Nothing here is a test; the test modules import these plain functions and wrap them in fixtures.
"""

from __future__ import annotations

import io
from pathlib import Path

from hydra import compose, initialize_config_dir
from omegaconf import DictConfig
from tiny_models import char_processor, noise_image, tiny_qwen2_5_vl, tiny_qwen3_vl

from sparsectx.data import Item, write_tsv

CONF = Path(__file__).resolve().parents[2] / "conf"
SYNTHETIC = ("syn_detail", "syn_count", "syn_spatial", "syn_ocr", "syn_pope", "syn_mcq")
PATCH = {"qwen2_5_vl": 14, "qwen3_vl": 16}
SIDE = 112
"""Test image side in pixels: 8x8 patches of 14, i.e. 16 merged tokens on Qwen2.5-VL."""


def build_model_dir(directory: Path, family: str, weights: bool) -> Path:
    """Returns ``directory`` holding a tiny random-weight model of ``family`` and its processor files.

    ``weights=False`` writes config.json and the processor files only (a config-only directory).
    """
    processor = char_processor(PATCH[family], directory)
    build = tiny_qwen2_5_vl if family == "qwen2_5_vl" else tiny_qwen3_vl
    model = build(processor.tokenizer, seed=0)
    if weights:
        model.save_pretrained(directory)
    else:
        model.config.save_pretrained(directory)
    return directory


def _png(seed: int, side: int) -> bytes:
    buffer = io.BytesIO()
    noise_image(side, side, seed).save(buffer, format="PNG")
    return buffer.getvalue()


def _row(bench: str, index: int) -> dict:
    """Returns the question, options, answer, category and subset of one synthetic-style row."""
    if bench == "syn_count":
        return {"question": "How many red circles are there?", "answer": "3", "category": "count_color_shape"}
    if bench == "syn_mcq":
        options = {"A": "red", "B": "blue", "C": "green", "D": "black"}
        return {"question": "What color is the star?", "options": options, "answer": "B", "category": "color"}
    if bench == "syn_pope":
        subset = ("random", "popular", "adversarial")[index % 3]
        answer = "yes" if index % 2 == 0 else "no"
        return {"question": "Is there a red star?", "answer": answer, "category": subset, "subset": subset}
    answers = {"syn_detail": "red", "syn_spatial": "left", "syn_ocr": "CAT"}
    return {"question": "What is it?", "answer": answers[bench], "category": "x"}


def write_bench(path: Path, bench: str, n: int, side: int) -> Path:
    """Returns ``path`` after writing ``n`` rows of ``bench`` in VLMEvalKit's TSV layout (noise images)."""
    items = []
    for index in range(n):
        row = _row(bench, index)
        items.append(
            Item(
                index=index,
                image_bytes=_png(index, side),
                question=row["question"],
                options=row.get("options", {}),
                answer=row["answer"],
                category=row["category"],
                family="",
                subset=row.get("subset", ""),
                trace="",
                scene="",
                extra={},
            )
        )
    write_tsv(path, items)
    return path


def compose_eval(overrides: list[str]) -> DictConfig:
    """Returns ``conf/evaluate.yaml`` composed with ``overrides`` through Hydra's compose API."""
    with initialize_config_dir(version_base=None, config_dir=str(CONF)):
        return compose("evaluate", overrides=overrides)


def base_overrides(model_dir: Path, results: Path, benches: dict[str, Path], max_new: int) -> list[str]:
    """Returns overrides that point the config at the test model, results root and TSVs, CPU-sized."""
    out = [f"model.path={model_dir}", "logger=none", f"results_root={results}", "max_failure_rate=1.0"]
    for bench, path in benches.items():
        out += [f"bench.{bench}.path={path}", f"bench.{bench}.max_new_tokens={max_new}"]
    return out

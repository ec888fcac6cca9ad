"""Small files shaped like the real downloads (LLaVA-CoT-100k, LLaVA-665K, OneThinker, PixMo, Vision-OPD,
OpenMMReasoner parquet), and the shipped recipes composed to read them from a temporary folder."""

from __future__ import annotations

import hashlib
import io
import json
from pathlib import Path

from hydra import compose, initialize_config_dir
from PIL import Image

from sparsectx.data.build import load_build_config
from sparsectx.data.sources import TrainingSetConfig

CONF_DIR = Path(__file__).resolve().parents[2] / "conf"


def png(seed: int, side: int = 40) -> bytes:
    """Returns a PNG whose pixels depend on ``seed`` (distinct images give distinct bytes)."""
    image = Image.new("RGB", (side, side), (seed * 37 % 256, seed * 91 % 256, seed * 13 % 256))
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return buffer.getvalue()


def write_image(root: Path, relative: str, seed: int, side: int = 40) -> None:
    """Writes ``png(seed)`` to ``root/relative``."""
    path = root / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(png(seed, side))


def cot_response(i: int) -> str:
    """Returns an original LLaVA-CoT response with its four tags."""
    return (
        f"<SUMMARY>plan {i}</SUMMARY>\n\n<CAPTION>image {i}</CAPTION>\n\n"
        f"<REASONING>step {i}</REASONING>\n\n<CONCLUSION>answer {i}</CONCLUSION>"
    )


def llava_row(i: int, image: str | None, question: str, response: str) -> dict[str, object]:
    """Returns a LLaVA conversation row (``id``, ``image``, ``conversations`` of from/value turns)."""
    row: dict[str, object] = {
        "id": f"r{i}",
        "conversations": [{"from": "human", "value": question}, {"from": "gpt", "value": response}],
    }
    if image is not None:
        row["image"] = image
    return row


def write_llava_cot(root: Path, count: int) -> Path:
    """Writes LLaVA-CoT-100k's layout: ``train.jsonl`` and images under ``root``; returns the jsonl."""
    lines = []
    for i in range(count):
        write_image(root, f"coco/train2017/{i:06d}.jpg", i)
        lines.append(json.dumps(llava_row(i, f"coco/train2017/{i:06d}.jpg", f"Question {i}?", cot_response(i))))
    path = root / "train.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


def write_llava_665k(root: Path, count: int, text_only: int) -> Path:
    """Writes ``llava_v1_5_mix665k.json`` (one array) with ``text_only`` ShareGPT-style rows without image."""
    rows = [llava_row(i, f"coco/{i}.jpg", f"<image>\nWhat is {i}?", f"It is {i}.") for i in range(count)]
    rows += [llava_row(count + i, None, f"Tell a story {i}.", "Once.") for i in range(text_only)]
    for i in range(count):
        write_image(root / "images", f"coco/{i}.jpg", 100 + i)
    path = root / "llava_v1_5_mix665k.json"
    path.write_text(json.dumps(rows))
    return path


def write_onethinker(root: Path, count: int, videos: int) -> Path:
    """Writes OneThinker-style rows (image rows and ``videos`` video rows) and their images."""
    rows = []
    for i in range(count):
        write_image(root, f"images/{i}.png", 200 + i)
        rows.append(
            {
                "problem_id": i,
                "problem": f"Which {i}?",
                "data_type": "image",
                "path": f"./images/{i}.png",
                "process": f"<think>look {i}</think>",
                "solution": f"<answer>{i}</answer>",
            }
        )
    rows += [
        {
            "problem_id": count + i,
            "problem": "v?",
            "data_type": "video",
            "path": "v.mp4",
            "process": "",
            "solution": "",
        }
        for i in range(videos)
    ]
    path = root / "onethinker_train.json"
    path.write_text(json.dumps(rows))
    return path


def write_pixmo(root: Path, count: int) -> Path:
    """Writes a PixMo parquet (image_url, image_sha256, question, answer) and images named by sha256."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    shas = [hashlib.sha256(png(300 + i)).hexdigest() for i in range(count)]
    for i, sha in enumerate(shas):
        write_image(root / "images", sha, 300 + i)
    table = pa.table(
        {
            "image_url": [f"https://example.org/{sha}.jpg" for sha in shas],
            "image_sha256": shas,
            "question": [f"Ask {i}" for i in range(count)],
            "answer": [f"Reply {i}" for i in range(count)],
        }
    )
    path = root / "train-00000-of-00001.parquet"
    pq.write_table(table, path, row_group_size=4)
    return path


def write_vision_opd(root: Path, count: int) -> Path:
    """Writes flat JSONL rows (id, image, question, answer) and their images."""
    lines = []
    for i in range(count):
        write_image(root, f"img/{i}.png", 400 + i)
        lines.append(json.dumps({"id": f"v{i}", "image": f"img/{i}.png", "question": f"Q{i}", "answer": f"A{i}"}))
    path = root / "train.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


def write_openmmreasoner(root: Path, count: int) -> Path:
    """Writes parquet rows with embedded images (a list of {bytes, path}) and think/answer responses."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    root.mkdir(parents=True, exist_ok=True)
    table = pa.table(
        {
            "id": [f"o{i}" for i in range(count)],
            "images": [[{"bytes": png(500 + i), "path": f"{i}.png"}] for i in range(count)],
            "conversations": [
                [
                    {"from": "human", "value": f"<image>Solve {i}"},
                    {"from": "gpt", "value": f"<think>work {i}</think><answer>{i}</answer>"},
                ]
                for i in range(count)
            ],
        }
    )
    path = root / "train-00000.parquet"
    pq.write_table(table, path, row_group_size=3)
    return path


def recipe(name: str, overrides: list[str]) -> TrainingSetConfig:
    """Returns the checked ``training_set`` of ``conf/data/sources/<name>.yaml`` with ``overrides``."""
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base=None):
        cfg = compose("build_data", overrides=[f"data/sources={name}", *overrides])
    training_set = load_build_config(cfg).training_set
    assert training_set is not None
    return training_set

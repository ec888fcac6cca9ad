"""Miniature copies of the training sets' downloads, in each release's own layout, for the rehearsal to convert.

The rehearsal's training file is made as a user makes the real one: ``build_training_set`` (``python
src/build_data.py data/sources=<recipe>``) run on these files. Each writer takes the recipe's source block
(``conf/data/sources/<recipe>.yaml``), writes ``count`` usable rows and their images under ``root`` as the
release lays them out (docs/training_data.md, "Reading the downloads"; the recipe's ``fields`` comments), with
the rows each release holds that the recipe filters out, and returns the block pointed at them. Images are 56
to 112 px, above every recipe's ``min_image_side``.
"""

from __future__ import annotations

import hashlib
import io
import json
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from PIL import Image

from sparsectx.data.sources import SourceConfig

SIZES = ((56, 56), (112, 84), (84, 112), (96, 64), (64, 96), (112, 112))
"""(width, height) of the pictures, in turn: square, landscape and portrait, all above one merged patch."""

QUESTIONS = (
    ("How many birds are on the wire?", "3"),
    ("What colour is the bus?", "red"),
    ("Which object is closer to the camera?\nA. the chair\nB. the lamp\nC. the table\nD. the door", "B"),
    ("What is written on the sign?", "stop"),
    ("Is the man wearing a hat?", "yes"),
    ("What is the value of the largest bar?", "42"),
)
"""(question, short answer) pairs the writers cycle through: counting, attribute, choice, text, yes/no, chart."""


def picture(seed: int, kind: str) -> bytes:
    """Returns the bytes of a seeded noise picture of the ``seed``-th size, encoded as ``kind`` (JPEG or PNG)."""
    width, height = SIZES[seed % len(SIZES)]
    pixels = np.random.default_rng(seed).integers(0, 256, (height, width, 3), dtype=np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format=kind)
    return buffer.getvalue()


def save(path: Path, data: bytes) -> None:
    """Writes ``data`` to ``path``, its folders created."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)


def conversation(question: str, response: str) -> list[dict[str, str]]:
    """Returns one LLaVA exchange: a ``human`` turn and the ``gpt`` turn answering it."""
    return [{"from": "human", "value": question}, {"from": "gpt", "value": response}]


def llava_cot_100k(source: SourceConfig, root: Path, count: int) -> SourceConfig:
    """Xkev/LLaVA-CoT-100k: ``train.jsonl`` rows ``{"id", "image", "conversations"}`` whose ``gpt`` turn carries
    the four stage tags (``<SUMMARY>``, ``<CAPTION>``, ``<REASONING>``, ``<CONCLUSION>``, blank lines between),
    the images under the unzipped ``image.zip`` folder by the dataset they come from (``coco/train2017/``,
    ``chartqa/train/png/``)."""
    lines = []
    for i in range(count):
        question, answer = QUESTIONS[i % len(QUESTIONS)]
        image = f"coco/train2017/{i:012d}.jpg" if i % 2 == 0 else f"chartqa/train/png/{i}.png"
        save(root / image, picture(i, "JPEG" if image.endswith(".jpg") else "PNG"))
        response = (
            f"<SUMMARY> I will look at the image and answer: {question.splitlines()[0]} </SUMMARY>\n\n"
            f"<CAPTION> The image shows a scene numbered {i}. </CAPTION>\n\n"
            f"<REASONING> Looking closely, the answer is {answer}. </REASONING>\n\n"
            f"<CONCLUSION> {answer} </CONCLUSION>"
        )
        lines.append(json.dumps({"id": f"{i:012d}", "image": image, "conversations": conversation(question, response)}))
    rows = root / "train.jsonl"
    save(rows, ("\n".join(lines) + "\n").encode())
    return replace(source, files=[str(rows)], image_root=str(root))


def llava_v1_5_mix665k(source: SourceConfig, root: Path, count: int) -> SourceConfig:
    """LLaVA-Instruct-665K: ``llava_v1_5_mix665k.json``, one JSON array of ``{"id", "image", "conversations"}``
    with ``<image>\\n`` opening the first question and several exchanges per row; ShareGPT's text-only rows have
    no ``image`` (filtered). Images under the COCO, GQA, OCR-VQA, TextVQA and VG folders."""
    folders = ("coco/train2017", "gqa/images", "ocr_vqa/images", "textvqa/train_images", "vg/VG_100K")
    rows: list[dict[str, object]] = []
    for i in range(count):
        question, answer = QUESTIONS[i % len(QUESTIONS)]
        image = f"{folders[i % len(folders)]}/{100 + i}.jpg"
        save(root / image, picture(100 + i, "JPEG"))
        turns = conversation(f"<image>\n{question}", answer) + conversation("Describe the scene.", "A street.")
        rows.append({"id": f"{100 + i:012d}", "image": image, "conversations": turns})
        if i % 4 == 0:
            rows.append({"id": f"sharegpt_{i}_0", "conversations": conversation("Write a haiku.", "Autumn wind.")})
    path = root / "llava_v1_5_mix665k.json"
    save(path, json.dumps(rows).encode())
    return replace(source, files=[str(path)], image_root=str(root))


def onethinker(source: SourceConfig, root: Path, count: int) -> SourceConfig:
    """OneThinker-train-data (layout unverified, as the recipe says): a JSON array of ``{"problem_id",
    "problem", "data_type", "path", "process", "solution"}``, ``process`` a ``<think>`` part and ``solution``
    an ``<answer>`` part; its video rows are filtered (``where: {data_type: image}``)."""
    rows = []
    for i in range(count):
        question, answer = QUESTIONS[i % len(QUESTIONS)]
        save(root / "images" / f"{200 + i}.png", picture(200 + i, "PNG"))
        rows.append(
            {
                "problem_id": 200 + i,
                "problem": question,
                "data_type": "image",
                "path": f"./images/{200 + i}.png",
                "process": f"<think>The picture shows it: {answer}.</think>",
                "solution": f"<answer>{answer}</answer>",
            }
        )
        if i % 4 == 0:
            rows.append(
                {
                    "problem_id": 900 + i,
                    "problem": "What happens after the door opens?",
                    "data_type": "video",
                    "path": f"./videos/{900 + i}.mp4",
                    "process": "<think>A person walks in.</think>",
                    "solution": "<answer>A person walks in.</answer>",
                }
            )
    path = root / "onethinker_train.json"
    save(path, json.dumps(rows).encode())
    return replace(source, files=[str(root / "*.json")], image_root=str(root))


def pixmo_ask_model_anything(source: SourceConfig, root: Path, count: int) -> SourceConfig:
    """allenai/pixmo-ask-model-anything: a parquet shard of ``image_url, image_sha256, question, answer``, some
    images asked about twice; the images, fetched from their URLs, named by their sha256 (no extension)."""
    shas, questions, answers = [], [], []
    for i in range(count):
        data = picture(300 + i // 2, "JPEG")  # two questions per image
        sha = hashlib.sha256(data).hexdigest()
        save(root / "images" / sha, data)
        question, answer = QUESTIONS[i % len(QUESTIONS)]
        shas.append(sha)
        questions.append(question)
        answers.append(f"The answer is {answer}.")
    table = pa.table(
        {
            "image_url": [f"https://example.org/pixmo/{sha}.jpg" for sha in shas],
            "image_sha256": shas,
            "question": questions,
            "answer": answers,
        }
    )
    path = root / "train-00000-of-00001.parquet"
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path)
    return replace(source, files=[str(path)], image_root=str(root / "images"))


def vision_opd(source: SourceConfig, root: Path, count: int) -> SourceConfig:
    """Vision-OPD training data (layout unverified, as the recipe says): JSON lines of flat ``{"id", "image",
    "question", "answer"}`` with the image path relative to the release's folder."""
    lines = []
    for i in range(count):
        question, answer = QUESTIONS[i % len(QUESTIONS)]
        save(root / "images" / f"{400 + i}.jpg", picture(400 + i, "JPEG"))
        row = {"id": f"vopd_{i}", "image": f"images/{400 + i}.jpg", "question": question, "answer": answer}
        lines.append(json.dumps(row))
    path = root / "train.jsonl"
    save(path, ("\n".join(lines) + "\n").encode())
    return replace(source, files=[str(path)], image_root=str(root))


DOWNLOADS: dict[str, dict[str, Callable[[SourceConfig, Path, int], SourceConfig]]] = {
    "llava_cot": {"llava_cot": llava_cot_100k},
    "lt_14k": {
        "llava_instruct_665k": llava_v1_5_mix665k,
        "onethinker": onethinker,
        "pixmo": pixmo_ask_model_anything,
        "vision_opd": vision_opd,
    },
}
"""Recipe (``conf/data/sources/<recipe>.yaml``) -> its source name -> the writer of that source's download."""

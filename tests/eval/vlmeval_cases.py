"""Hand-made benchmark files in VLMEvalKit's layouts, with predictions on the rules' edge cases, and a results
leaf for them written as ``evaluate.py`` writes one (``<bench>.json`` scored by the project's scorer through
the runner's own functions, ``<bench>.predictions.jsonl``).

Used by the VLMEvalKit bridge tests: VLMEvalKit's own ``evaluate`` must give these files the figures the
project's scorers gave them.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict
from pathlib import Path

import pytest

from sparsectx.eval.config import compose_bench
from sparsectx.eval.protocol import load_bench_items, sample_id, scored_item
from sparsectx.eval.scorers import score_items
from sparsectx.hashing import file_sha256
from sparsectx.paths import predictions_path, result_path
from sparsectx.rehearsal.benchmarks import png_b64
from sparsectx.rehearsal.benchmarks import write_rows as write_tsv

REPO = Path(__file__).resolve().parents[2]


def vlmeval_env() -> Path:
    """Returns the VLMEvalKit environment the tests use: ``$SPARSECTX_VLMEVAL_ENV`` or ``.vlmeval-env``."""
    return Path(os.environ.get("SPARSECTX_VLMEVAL_ENV", REPO / ".vlmeval-env"))


def require_vlmeval_env() -> Path:
    """Returns the environment's directory, or skips naming the command that builds it."""
    env = vlmeval_env()
    if not (env / "bin" / "python").is_file():
        pytest.skip(f"no VLMEvalKit environment at {env}: build it with `make vlmeval-env`")
    return env


YN_PREDICTIONS = [
    "Yes",
    "no",
    "**Yes**",
    "Yes, there is one.",
    "yes and no",
    "There is no dog.",
    "",
    None,
    "Yes.",
    "NO",
    "I cannot tell",
    "Yes\n",
    "no,",
    "Not at all",
    "yes!",
    "(no)",
]
"""Yes/no answers for the rules' edge cases: markup, both words, punctuation, empty, extraction miss."""


def pope_rows() -> tuple[list[dict[str, str]], list[str | None]]:
    """Returns POPE.tsv-like rows (comma-joined categories included) and their predictions."""
    categories = [
        "adversarial",
        "popular",
        "random",
        "adversarial,popular,random",
        "popular,random",
        "random",
    ]
    rows = [
        {
            "index": str(i),
            "image": png_b64(i),
            "question": f"Is there a thing {i} in the image?",
            "answer": "Yes" if i % 3 else "No",
            "category": categories[i % len(categories)],
            "image_source": f"COCO_{i}",
        }
        for i in range(len(YN_PREDICTIONS))
    ]
    return rows, list(YN_PREDICTIONS)


MME_CATEGORIES = (
    "OCR",
    "artwork",
    "celebrity",
    "color",
    "count",
    "existence",
    "landmark",
    "position",
    "posters",
    "scene",
    "code_reasoning",
    "commonsense_reasoning",
    "numerical_calculation",
    "text_translation",
)


def mme_rows() -> tuple[list[dict[str, str]], list[str | None]]:
    """Returns MME.tsv-like rows (two questions per (category, image_path), one image in two categories)."""
    rows, preds = [], []
    for c, category in enumerate(MME_CATEGORIES):
        images = [f"{category}/{c}.jpg"] + (["shared/0.jpg"] if c < 2 else [])
        for image_path in images:
            for answer in ("Yes", "No"):
                i = len(rows)
                rows.append(
                    {
                        "index": str(i),
                        "image": png_b64(i),
                        "question": f"Is it {category} {i}?",
                        "answer": answer,
                        "category": category,
                        "image_path": image_path,
                    }
                )
                preds.append(YN_PREDICTIONS[(i * 5) % len(YN_PREDICTIONS)])
    return rows, preds


def hallusionbench_rows() -> tuple[list[dict[str, str]], list[str | None]]:
    """Returns HallusionBench.tsv-like rows: string indexes whose fields 3/4/5 are set, figure, question ids,
    figures shared between questions through image references to another row's index."""
    rows, preds = [], []
    for category in ("VD", "VS"):
        for l2 in ("chart", "map"):
            for s in range(2):
                for f in range(2):
                    for q in range(2):
                        i = len(rows)
                        index = f"{category}_{l2}_{i % 3}_{s}_{f}_{q}"
                        image = png_b64(i) if q == 0 else rows[-1]["index"]  # question 1 shares question 0's
                        rows.append(
                            {
                                "index": index,
                                "image": image,
                                "question": f"Is it so {i}?",
                                "answer": "Yes" if (s + f + q + i // 8) % 2 else "No",
                                "category": category,
                                "l2-category": l2,
                            }
                        )
                        preds.append(YN_PREDICTIONS[(i * 3 + 1) % len(YN_PREDICTIONS)] if i % 4 else "Yes")
    return rows, preds


MCQ_PREDICTIONS = [
    "A",
    "The answer is B.",
    "I think C or D",
    "D. cat",
    "a",
    "Sorry, I cannot answer.",
    "cat",
    "(D) dog",
    "The picture shows a bird",
    "B",
    None,
    "D",
]


def mmbench_rows() -> tuple[list[dict[str, str]], list[str | None]]:
    """Returns MMBench_DEV_EN.tsv-like rows: 3 questions x 4 circular rotations (index q + k x 1e6)."""
    texts = ["cat", "dog", "bird", "fish"]
    rows = []
    for k in range(4):
        for q in range(3):
            rotated = texts[k:] + texts[:k]
            gold = "ABCD"[rotated.index(texts[q])]
            rows.append(
                {
                    "index": str(q + k * 1_000_000),
                    "image": png_b64(q),
                    "question": f"Which animal {q}?",
                    "hint": "",
                    **dict(zip("ABCD", rotated, strict=True)),
                    "answer": gold,
                    "category": ["identity", "count", "color"][q],
                    "l2-category": "perception",
                    "split": "dev",
                }
            )
    return rows, list(MCQ_PREDICTIONS)  # row i is question i % 3 in rotation i // 3: question 0 passes


HR_PREDICTIONS = [
    "A",
    "The answer is B.",
    "D",
    "fish",
    "I think C or D",
    "B",
    "bird",
    "Sorry, I cannot answer.",
    "D.",
    "cat",
    "C",
]


def hrbench_rows() -> tuple[list[dict[str, str]], list[str | None]]:
    """Returns HRBench4K.tsv-like rows: cycles of unequal sizes, a category absent from one cycle."""
    cycles = ["1", "1", "1", "1", "1", "2", "2", "3", "3", "3", "3"]
    categories = [
        "single",
        "single",
        "cross",
        "cross",
        "single",
        "single",
        "single",
        "cross",
        "single",
        "cross",
    ]
    categories.append("single")
    golds = "ABCDABCADBC"
    rows = [
        {
            "index": str(i),
            "image": png_b64(i),
            "question": f"Which animal {i}?",
            "A": "cat",
            "B": "dog",
            "C": "bird",
            "D": "fish",
            "answer": golds[i],
            "category": categories[i],
            "cycle_category": cycles[i],
        }
        for i in range(len(cycles))
    ]
    return rows, list(HR_PREDICTIONS)


def mmmu_rows() -> tuple[list[dict[str, str]], list[str | None]]:
    """Returns MMMU_DEV_VAL.tsv-like rows (one split): option questions and open ones (no options)."""
    cases = [
        ("B", True, "B"),
        ("C", True, "The answer is bird"),
        ("42", False, "The answer is 42"),
        ("42", False, "41"),
        ("x^2", False, "A"),
        ("Paris", False, "B"),
        ("7", False, "Other Answers"),
        ("A", True, "dog"),
        ("blue", False, "It is blue."),
        ("3", False, None),
    ]
    rows = []
    for i, (answer, options, _) in enumerate(cases):
        choices = {"A": "cat", "B": "dog", "C": "bird", "D": "fish"} if options else {}
        rows.append(
            {
                "index": str(i),
                "image": png_b64(i),
                "question": f"Question {i}?",
                "A": "",
                "B": "",
                "C": "",
                "D": "",
                **choices,
                "answer": answer,
                "category": "Art" if i % 2 else "Math",
                "split": "validation",
            }
        )
    return rows, [pred for *_, pred in cases]


OCR_CATEGORIES = (
    "Regular Text Recognition",
    "Handwriting Recognition",
    "Scene Text-centric VQA",
    "Doc-oriented VQA",
    "Key Information Extraction",
    "Handwritten Mathematical Expression Recognition",
)


def ocrbench_rows() -> tuple[list[dict[str, str]], list[str | None]]:
    """Returns OCRBench.tsv-like rows (answer lists) with case, newline, tab and space edge cases."""
    cases = [
        ("['Hello World']", "it says hello world"),
        ("['STOP', 'stop sign']", "Stop"),
        ("['12 5']", "125"),
        ("['a\\nb']", "A B"),
        ("['Total']", "to tal"),
        ("['x^2 + 1']", "x^2+1"),
        ("['x^{2}']", "x ^ { 2 }"),
        ("['\\\\frac{a}{b}']", "\\frac{a}\t{b}"),
        ("['Cafe']", ""),
        ("['Open']", None),
        ("['ok']", "OK\n"),
        ("['2024']", "in 2024."),
    ]
    rows = [
        {
            "index": str(i),
            "image": png_b64(i),
            "question": f"What is written {i}?",
            "answer": answer,
            "category": OCR_CATEGORIES[i % len(OCR_CATEGORIES)],
        }
        for i, (answer, _) in enumerate(cases)
    ]
    return rows, [pred for _, pred in cases]


CASES = {
    "pope": ("POPE", "pope", "none", "category", pope_rows),
    "mme": ("MME", "mme", "image", "none", mme_rows),
    "hallusionbench": (
        "HallusionBench",
        "hallusionbench",
        "none",
        "l2-category",
        hallusionbench_rows,
    ),
    "mmbench_en": ("MMBench_DEV_EN", "mmbench_circular", "circular", "none", mmbench_rows),
    "ocrbench": ("OCRBench", "ocrbench", "none", "none", ocrbench_rows),
    "hrbench4k": ("HRBench4K", "hrbench", "none", "cycle_category", hrbench_rows),
    "mmmu": ("MMMU_DEV_VAL", "mmmu_vlmeval", "none", "none", mmmu_rows),
}
"""bench name -> (VLMEvalKit dataset, project scorer, group_by, subset_field, rows): the scorer and grouping
are checked against ``conf/bench/<name>.yaml``, whose layout reads the rows."""


def make_leaf(root: Path, bench: str, rows: list[dict[str, str]], predictions: list[str | None]) -> Path:
    """Returns ``<leaf>/<bench>.json`` after writing the TSV, the predictions JSONL and the result JSON.

    The result is scored as ``runner._result`` scores it: ``load_bench_items``, ``scored_item`` and
    ``score_items`` of the benchmark's scorer on the extracted answers.
    """
    dataset, scorer, group_by, subset_field, _ = CASES[bench]
    data = write_tsv(root / f"{dataset}.tsv", rows)
    spec = compose_bench(bench, [f"bench.{bench}.path={data}", f"bench.{bench}.max_new_tokens=16"])
    assert (spec.dataset_name, spec.scorer) == (dataset, scorer)
    assert (spec.group_by, spec.subset_field) == (group_by, subset_field)
    items, skipped, _ = load_bench_items(spec, 0.0)
    assert not skipped and len(items) == len(predictions)
    leaf = root / "leaf"
    answers = dict(zip((sample_id(item) for item in items), predictions, strict=True))
    report = score_items(scorer, [scored_item(item, spec, answers[sample_id(item)]) for item in items], spec.headline)
    preds = predictions_path(leaf, bench)
    preds.parent.mkdir(parents=True, exist_ok=True)
    preds.write_text(
        "".join(
            json.dumps({"id": i, "answer": a, "output": f"<answer>{a}</answer>"}) + "\n" for i, a in answers.items()
        )
    )
    payload = {
        "benchmark": bench,
        "scorer": scorer,
        "score": report.metrics["score"],
        "metrics": report.metrics,
        "n_scored": len(items),
        "n_rows": len(items),
        "provenance": {"config": {"bench": {bench: asdict(spec)}}, "inputs": {"bench_sha256": file_sha256(data)}},
    }
    out = result_path(leaf, bench)
    out.write_text(json.dumps(payload, indent=2))
    return out

"""Yes/no benchmarks in their real layouts: the VLMEvalKit ``ImageYORNDataset`` family (MME, POPE,
HallusionBench)."""

from __future__ import annotations

from ..vlmeval_cases import png_b64
from . import RealFile

YES_NO = ((lambda _id, gold: gold), (lambda _id, gold: "No" if gold == "Yes" else "Yes"))
"""(right, wrong) answers of a yes/no row: the gold word, and the other one."""


def hallusionbench() -> RealFile:
    """HallusionBench.tsv: ``index, image, question, answer, category, l2-category`` with string indexes
    ``<category>_<l2-category>_<subcategory>_<set>_<figure>_<question>`` (VLMEvalKit's ``Hallusion_rating``
    splits them),
    answers ``Yes``/``No``, a second question on a figure referring to the first row's image by its index,
    and the visual-supplement rows asked without a figure: their ``image`` cell is empty, and VLMEvalKit's
    ``ImageBaseDataset.__init__`` drops them (``skip_noimg``), so the file's 1,129 rows score as 951."""
    rows = []
    for s, (category, l2) in enumerate([("VD", "chart"), ("VS", "map")]):
        first = f"{category}_{l2}_0_{s}_0_0"
        for q in range(2):
            rows.append(
                {
                    "index": f"{category}_{l2}_0_{s}_0_{q}", "image": png_b64(s) if q == 0 else first,
                    "question": f"Is the value in 2020 higher than in 2019 ({s}, {q})?",
                    "answer": "Yes" if (s + q) % 2 else "No", "category": category, "l2-category": l2,
                }
            )  # fmt: skip
    rows.append(
        {
            "index": "VS_map_0_2_1_0",
            "image": "",
            "question": "Is New York the largest city in the USA?",
            "answer": "Yes",
            "category": "VS",
            "l2-category": "map",
        }
    )  # the text-only visual-supplement question (no figure)
    return RealFile(rows, *YES_NO, dropped=1)


FILES = {"hallusionbench": hallusionbench}
"""Benchmark name -> builder of its miniature file."""

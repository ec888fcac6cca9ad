"""Yes/no benchmarks in their real layouts: the VLMEvalKit ``ImageYORNDataset`` family (MME, POPE,
HallusionBench).

``ImageYORNDataset`` (vlmeval/dataset/image_yorn.py, nvidia-vlmeval 26.3) has no ``build_prompt`` of its own:
``ImageBaseDataset.build_prompt`` sends the ``question`` cell as written after the image. Its ``evaluate``
compares the ``answer`` cell (``Yes``/``No``, case as written) with ``YOrN_Extraction``'s reading, then rates
with ``MME_rating`` (``category``, ``image_path``), ``POPE_rating`` (``category``, ``answer``) or
``Hallusion_rating`` (vlmeval/dataset/utils/yorn.py)."""

from __future__ import annotations

from . import RealFile, png_b64

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
                    "index": f"{category}_{l2}_0_{s}_0_{q}",
                    "image": png_b64(s) if q == 0 else first,
                    "question": f"Is the value in 2020 higher than in 2019 ({s}, {q})?",
                    "answer": "Yes" if (s + q) % 2 else "No",
                    "category": category,
                    "l2-category": l2,
                }
            )
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


def pope() -> RealFile:
    """POPE.tsv: ``index, image, question, answer, category, image_source`` (the columns VLMEvalKit reads:
    ``question`` in ``ImageBaseDataset.build_prompt``, ``answer`` and ``category`` in ``POPE_rating``;
    ``image_source`` is the COCO image id, as in the lmms-lab/POPE card's ``image_source``; the column order
    is not verified against the file). Quirks kept: a question asked in several subsets is stored once with
    a comma-joined ``category`` (``POPE_rating`` splits it on ``,`` and counts the row in each subset, so
    the 9,000 subset questions are ~5,100 rows); answers ``Yes``/``No`` capitalised; a COCO image asked about
    in several rows is stored once, later rows holding the first row's ``index`` in ``image`` (the
    shared-image reference ``ImageBaseDataset.__init__`` resolves). No row lacks an image: nothing dropped."""
    cases = [
        ("adversarial,popular,random", "Is there a person in the image?", "Yes"),
        ("adversarial", "Is there a dining table in the image?", "No"),
        ("popular,random", "Is there a car in the image?", "No"),
        ("random", "Is there a giraffe in the image?", "No"),
        ("popular", "Is there a chair in the image?", "Yes"),
    ]
    rows = []
    for i, (category, question, answer) in enumerate(cases):
        image = png_b64(10 + i // 2) if i % 2 == 0 else str(i - 1)  # odd rows share the previous row's image
        rows.append(
            {
                "index": str(i),
                "image": image,
                "question": question,
                "answer": answer,
                "category": category,
                "image_source": f"COCO_val2014_{310196 + i // 2:012d}",
            }
        )
    return RealFile(rows, *YES_NO)


def mme() -> RealFile:
    """MME.tsv: ``index, image, question, answer, category, image_path`` (VLMEvalKit reads ``question`` in
    ``ImageBaseDataset.build_prompt``; ``category``, ``image_path`` and ``answer`` in ``MME_rating``, which
    pairs the two questions of one picture by ``stats[category][image_path]``; the column order is not
    verified against the file). Quirks kept: each question ends with MME's own `` Please answer yes or no.``
    (the cell is asked as written, no suffix added); answers ``Yes``/``No``; the second question of a pair
    holds the first row's ``index`` in ``image`` (shared-image reference) and the same ``image_path``; two
    categories, one perception (``color``) and one cognition (``code_reasoning``), so a perfect run scores
    200 + 200 (acc + acc+ per category)."""
    rows = []
    for c, category in enumerate(("color", "code_reasoning")):
        for p in range(2):
            image_path = f"{category}/{1000 + p}.png"
            first = str(len(rows))
            for q, answer in enumerate(("Yes", "No")):
                rows.append(
                    {
                        "index": str(len(rows)),
                        "image": png_b64(40 + 2 * c + p) if q == 0 else first,
                        "question": f"Is the {['ball', 'output'][c]} {['red', '42'][q]}? Please answer yes or no.",
                        "answer": answer,
                        "category": category,
                        "image_path": image_path,
                    }
                )
    return RealFile(rows, *YES_NO, full_score=400.0)


FILES = {"hallusionbench": hallusionbench, "mme": mme, "pope": pope}
"""Benchmark name -> builder of its miniature file."""

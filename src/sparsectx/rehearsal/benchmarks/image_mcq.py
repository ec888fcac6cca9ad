"""Image multiple-choice benchmarks in their real layouts: the VLMEvalKit ``ImageMCQDataset`` family and its
subclasses."""

from __future__ import annotations

from . import RealFile, png_b64


def _letter_answers() -> tuple:
    """Returns (right, wrong) answer makers for letter-graded rows: the gold letter, and another letter."""
    return (lambda _id, gold: gold), (lambda _id, gold: "B" if gold != "B" else "A")


def mmbench_dev_en() -> RealFile:
    """MMBench_DEV_EN.tsv: ``index, question, hint, A, B, C, D, answer, category, image, source, l2-category,
    comment, split`` (open-compass/MMBench's released TSV, as VLMEvalKit's ``ImageMCQDataset`` reads it). Quirks
    kept: ``hint`` empty on most rows (pandas reads it as NaN, and ``build_prompt`` leaves out ``Hint:``); a
    three-option question leaves ``D`` empty; an option ``None`` and a hint ``N/A``, which pandas (and so
    VLMEvalKit) reads as missing cells; the circular copies (``index`` + k x 1,000,000, the options
    rotated) store the original row's ``index`` in their ``image`` cell (VLMEvalKit's shared-image reference)."""
    base = [
        ("What is the colour of the ball?", "The ball is on a table.", ["red", "blue", "green", "yellow"], "A"),
        ("How many people are there?", "", ["one", "two", "three"], "C"),
        ("Which one is a cat?", "N/A", ["the left one", "the right one", "both", "None"], "A"),
    ]
    rows = []
    for q, (question, hint, options, gold) in enumerate(base):
        gold_text = options["ABCD".index(gold)]
        for k in range(len(options)):
            rotated = options[k:] + options[:k]
            cells = dict(zip("ABCD", rotated + [""] * (4 - len(rotated)), strict=True))
            rows.append(
                {
                    "index": str(q + k * 1_000_000),
                    "question": question,
                    "hint": hint,
                    **cells,
                    "answer": "ABCD"[rotated.index(gold_text)],
                    "category": "attribute_recognition",
                    "image": png_b64(q + 1) if k == 0 else str(q),
                    "source": "MMBench",
                    "l2-category": "finegrained_perception (instance-level)",
                    "comment": "",
                    "split": "dev",
                }
            )
    return RealFile(rows, *_letter_answers())


def _images(*shades: int) -> tuple[str, str]:
    """Returns (image cell, image_path cell) of a multi-image row as VLMEvalKit writes them: Python lists of
    base64 images and of file names (``ImageBaseDataset.dump_image`` needs ``image_path`` for a list)."""
    return str([png_b64(s) for s in shades]), str([f"{shades[0]}_{k}.jpg" for k in range(len(shades))])


def lettered(options: list[str], letters: str) -> dict[str, str]:
    """Returns the option cells ``letters`` filled from ``options`` in order, the rest empty (NaN to pandas)."""
    return dict(zip(letters, options + [""] * (len(letters) - len(options)), strict=True))


def _mcq_rows(cases: list[tuple], letters: str, first: int = 0, **constant: str) -> list[dict[str, str]]:
    """Returns rows ``index, question, <letters>, answer, category, image`` (+ ``constant`` columns) from
    ``(question, options, gold, category)`` cases, each with its own image."""
    return [
        {
            "index": str(first + i),
            "question": question,
            **lettered(options, letters),
            "answer": gold,
            "category": category,
            "image": png_b64(first + i + 1),
            **constant,
        }
        for i, (question, options, gold, category) in enumerate(cases)
    ]


def mmstar() -> RealFile:
    """MMStar.tsv (``ImageMCQDataset``, DATASET_URL .../VLMEval/MMStar.tsv): ``index, question, A, B, C, D,
    answer, category, l2-category, image``. ``build_prompt`` reads ``question``, the A-Z cells and ``hint``
    (absent); ``report_acc`` groups by ``category`` and ``l2-category``. Quirk kept: MMStar's question text
    (Lin-Chen/MMStar) carries its options inline (``Options: A: ..., B: ...``), so VLMEvalKit's prompt lists
    them twice. A counting row has numbers for options (an item of SCOPD's numeric Pass@K cohort,
    ``sparsectx.eval.passk_cohort``). Column order and the inline options are from the dataset card, not read from
    the TSV itself."""
    cases = [
        (
            "Which option describe the object relationship in the image correctly?\nOptions: A: The cup is on "
            "the book., B: The cup is under the book., C: The cup is beside the book., D: The cup is in the box.",
            [
                "The cup is on the book.",
                "The cup is under the book.",
                "The cup is beside the book.",
                "The cup is in the box.",
            ],
            "C",
            "instance reasoning",
        ),
        (
            "What is the main topic of the image?\nOptions: A: sport, B: food, C: travel, D: music",
            ["sport", "food", "travel", "music"],
            "A",
            "coarse perception",
        ),
        (
            "How many apples are on the table?\nOptions: A: 3, B: 4, C: 5, D: 6",
            ["3", "4", "5", "6"],
            "B",
            "fine-grained perception",
        ),
    ]
    rows = _mcq_rows(cases, "ABCD")
    for row, l2 in zip(rows, ("object relationship", "image scene and topic", "object counting"), strict=True):
        row["l2-category"] = l2
    return RealFile(rows, *_letter_answers())


def realworldqa() -> RealFile:
    """RealWorldQA.tsv (``ImageMCQDataset``): ``index, image, question, A, B, C, D, answer, category``; rows
    have two to four options (the unused cells empty, NaN to pandas, left out by ``build_prompt``). Quirk kept:
    xAI's questions end with their own answer instruction, which VLMEvalKit keeps in ``Question:``."""
    cases = [
        (
            "Which car is closer to the camera?\nPlease answer directly with only the letter of the correct "
            "option and nothing else.",
            ["The red car", "The blue car"],
            "A",
            "real_world",
        ),
        ("In which direction is the road turning?", ["Left", "Straight", "Right"], "C", "real_world"),
        ("How many lanes does the road have?", ["one", "two", "three", "four lanes"], "B", "real_world"),
    ]
    return RealFile(_mcq_rows(cases, "ABCD"), *_letter_answers())


def blink() -> RealFile:
    """BLINK.tsv (``ImageMCQDataset``; val split): ``index, question, A, B, C, D, answer, category, image,
    image_path``. Multi-image sub-tasks (Multi-view Reasoning, Visual Similarity, Jigsaw, ...) keep a Python
    list of base64 images in ``image`` and of file names in ``image_path`` (``ImageBaseDataset.__init__``
    ``toliststr``; ``dump_image`` asserts ``image_path``); ``build_prompt`` puts every image first. Two- and
    four-option rows; the Counting sub-task's options are numbers (an item of SCOPD's numeric Pass@K cohort).
    Column order not read from the file itself."""
    cases = [
        ("Which point is closer to the camera?", ["A is closer", "B is closer"], "B", "Relative_Depth"),
        (
            "Which image is most similar to the reference image?",
            ["the second image", "the third image"],
            "A",
            "Visual_Similarity",
        ),
        (
            "Which option shows the missing part of the image?",
            ["the first piece", "the second piece", "the third piece", "the fourth piece"],
            "D",
            "Jigsaw",
        ),
        ("How many blue floats are there?", ["0", "1", "2", "3"], "D", "Counting"),
    ]
    rows = _mcq_rows(cases, "ABCD")
    for row, shades in ((rows[1], (40, 41, 42)), (rows[2], (50, 51))):
        row["image"], row["image_path"] = _images(*shades)
    for i in (0, 3):  # every row names its file once the column exists (toliststr of NaN fails)
        rows[i]["image_path"] = f"{i}.jpg"
    return RealFile(rows, *_letter_answers())


def visonlyqa() -> RealFile:
    """visonlyqa_vlmevalkit.tsv (``ImageMCQDataset``, DATASET_URL ryokamoi/VisOnlyQA_Eval_Real): ``index,
    question, A, B, C, D, E, answer, category, image``; true/false tasks as two options, the angle and
    size tasks with five. ``evaluate`` warns that its prompt differs from the original VisOnlyQA's (the
    prompt here is ``ImageMCQDataset.build_prompt``'s). Column order not read from the file itself."""
    cases = [
        ("Is the angle ABC a right angle?", ["True", "False"], "B", "geometry__angle"),
        (
            "What is the measure of angle BAC?",
            ["30 degrees", "45 degrees", "60 degrees", "90 degrees", "120 degrees"],
            "C",
            "geometry__angle",
        ),
        ("Which bar is the tallest?", ["a", "b", "c"], "A", "charts__extraction"),
    ]
    return RealFile(_mcq_rows(cases, "ABCDE"), *_letter_answers())


def hr_bench_4k() -> RealFile:
    """hr_bench_4k.tsv (``HRBenchDataset``, DATASET_URL DreamMr/HR-Bench): ``index, question, answer,
    category, cycle_category, image, A, B, C, D``; each question asked in several cycles with rotated options
    (``cycle_category``), later cycles referring to the first row's image by its ``index`` (VLMEvalKit's
    shared-image reference); ``category`` is ``single`` or ``cross`` (``report_acc_hrbench``)."""
    options = ["red", "green", "blue", "white"]
    rows = []
    for cycle in range(2):
        for q, (category, gold) in enumerate((("single", "red"), ("cross", "white"))):
            rotated = options[cycle:] + options[:cycle]
            rows.append(
                {
                    "index": str(cycle * 2 + q),
                    "question": f"What is the colour of object {q}?",
                    "answer": "ABCD"[rotated.index(gold)],
                    "category": category,
                    "cycle_category": f"cycle{cycle + 1}",
                    "image": png_b64(60 + q) if cycle == 0 else str(q),
                    **dict(zip("ABCD", rotated, strict=True)),
                }
            )
    return RealFile(rows, *_letter_answers())


def cv_bench() -> list[RealFile]:
    """CV-Bench-2D.tsv and CV-Bench-3D.tsv: upstream VLMEvalKit's ``CVBench`` (``image_mcq.py``, added in
    #909, absent from nvidia-vlmeval 26.3) reads the two files as two datasets; here they are one benchmark
    (the project concatenates them, new ``index`` = position). ``CVBench.build_prompt`` sends the dataset's
    own ``prompt`` cell as the whole text (nyu-visionx/CV-Bench: the question, ``Select from the following
    choices.`` and ``(A) ...`` lines); ``evaluate`` reads ``split`` (2D/3D), ``source`` (ADE20K, COCO, Omni3D),
    the A-Z cells and ``answer``. Columns: ``index, question, A, B, C, D, answer, prompt, split, source,
    category, image``; two-option Relation/Depth/Distance rows, four-option Count rows. Column order not read
    from the files themselves."""

    def rows(cases: list[tuple], split: str) -> list[dict[str, str]]:
        out = []
        for i, (question, options, gold, category, source) in enumerate(cases):
            lines = "".join(f"\n({letter}) {text}" for letter, text in zip("ABCD", options, strict=False))
            out.append(
                {
                    "index": str(i),
                    "question": question,
                    **lettered(options, "ABCD"),
                    "answer": gold,
                    "prompt": f"{question} Select from the following choices.{lines}",
                    "split": split,
                    "source": source,
                    "category": category,
                    "image": png_b64(70 + i + (10 if split == "3D" else 0)),
                }
            )
        return out

    two_d = [
        ("How many chairs are in the image?", ["3", "2", "1", "0"], "B", "Count", "ADE20K"),
        ("Where is the lamp located with respect to the bed?", ["left", "right"], "A", "Relation", "COCO"),
    ]
    three_d = [
        ("Which is closer to the camera, the table or the sofa?", ["table", "sofa"], "B", "Depth", "Omni3D"),
        ("Which is closer to the door, the chair or the bookshelf?", ["chair", "bookshelf"], "A", "Distance", "Omni3D"),
    ]
    return [RealFile(rows(two_d, "2D"), *_letter_answers()), RealFile(rows(three_d, "3D"), *_letter_answers())]


def vstar_bench() -> RealFile:
    """VStarBench.tsv: upstream VLMEvalKit files V* Bench (#1008, DATASET_URL xjtupanda/VStar_Bench) under
    ``ImageMCQDataset``, absent from nvidia-vlmeval 26.3; ``ImageMCQDataset.build_prompt`` is the same code
    in both, so 26.3's builds the reference (``vlmeval_dataset``). Columns ``index, question, A, B, C, D,
    answer, category, image``: ``direct_attributes`` rows with four options, ``relative_position`` rows with
    two. Column order not read from the file itself."""
    cases = [
        ("What is the color of the woman's bag?", ["black", "red", "white", "brown"], "D", "direct_attributes"),
        ("Is the dog on the left or right side of the bench?", ["left", "right"], "B", "relative_position"),
    ]
    return RealFile(_mcq_rows(cases, "ABCD"), *_letter_answers(), vlmeval_dataset="MMStar")


def mmmu_dev_val() -> RealFile:
    """MMMU_DEV_VAL.tsv (``MMMUDataset``): ``index, question, A..I, answer, category, image, image_path,
    split, id``. Quirks kept: ``<image k>`` tags in the question and in option cells (``split_MMMU`` moves
    image k there; the project puts every image first and keeps the tags, so it is compared with the text
    before splitting, ``unsplit``); multi-image rows (``image``/``image_path`` Python lists); open questions
    with every option cell empty and the answer text as gold (``MMMU_preproc`` makes them two-option at
    scoring); ``split`` dev and validation (``report_acc`` reports each)."""
    letters = "ABCDEFGHI"
    cases = [
        (
            "<image 1> What is the style of this painting?",
            ["Baroque", "Cubism", "Impressionism", "Realism"],
            "C",
            "Art",
            "dev",
        ),
        (
            "Which graph, <image 1> or <image 2>, shows a linear function?",
            ["<image 1>", "<image 2>"],
            "B",
            "Math",
            "validation",
        ),
        ("Compute the determinant of the matrix in <image 1>.", [], "42", "Math", "validation"),
    ]
    rows = []
    for i, (question, options, gold, category, split) in enumerate(cases):
        rows.append(
            {
                "index": str(i),
                "question": question,
                **lettered(options, letters),
                "answer": gold,
                "category": category,
                "image": png_b64(90 + i),
                "image_path": f"{i}.jpg",
                "split": split,
                "id": f"{split}_{category}_{i}",
            }
        )
    rows[1]["image"], rows[1]["image_path"] = _images(95, 96)
    return RealFile(rows, *_letter_answers(), unsplit=True)


def mmmu_pro_10c() -> RealFile:
    """MMMU_Pro_10c.tsv (``MMMUProDataset``, the standard setting): ``index, question, A..J, answer,
    category, image, image_path, id``; up to ten options (some rows fewer), ``<image k>`` tags in the
    question (``build_prompt`` ends with ``split_MMMU``; compared before splitting, ``unsplit``), multi-image
    rows as Python lists; a row whose options are all numbers (an item of SCOPD's numeric Pass@K cohort).
    ``build_prompt``: ``Question:``, ``Options:`` lines, then ``Answer directly with the option letter from the
    given choices.``, no hint. Column order not read from the file itself."""
    letters = "ABCDEFGHIJ"
    ten = [f"x = {v}" for v in range(10, 20)]
    cases = [
        ("<image 1> What is the value of x?", ten, "F", "Math"),
        ("Which structure in <image 1> matches <image 2>?", ["left", "middle", "right", "none", "all"], "C", "Biology"),
        ("<image 1> What is the angle x in degrees?", [str(v) for v in range(10, 20)], "F", "Math"),
    ]
    rows = []
    for i, (question, options, gold, category) in enumerate(cases):
        rows.append(
            {
                "index": str(i),
                "question": question,
                **lettered(options, letters),
                "answer": gold,
                "category": category,
                "image": png_b64(100 + i),
                "image_path": f"{i}.jpg",
                "id": f"validation_{category}_{i}",
            }
        )
    rows[1]["image"], rows[1]["image_path"] = _images(105, 106)
    return RealFile(rows, *_letter_answers(), unsplit=True)


def muirbench() -> RealFile:
    """MUIRBench.tsv (``MUIRDataset``): ``index, question, A..F, answer, image, image_path, task,
    image_relation, image_type``; 2-9 images per row as Python lists. ``<image>`` tags sit in the question and
    in option cells (an option that is an image); ``split_MUIR`` places image k at the k-th tag and drops the
    tags from the text. The project puts every image first and drops the tags too (``PromptParts.remove``), so
    the text values VLMEvalKit sends, joined, are compared (``interleaved``). Column order not read from the
    file itself."""
    cases = [
        (
            "<image><image>Which image shows the same object as the first one?",
            ["<image>", "<image>", "None of the choices provided"],
            "A",
            (110, 111, 112),
        ),
        ("<image><image>Are these two pictures taken at the same place?", ["yes", "no"], "B", (115, 116)),
    ]
    rows = []
    for i, (question, options, gold, shades) in enumerate(cases):
        image, paths = _images(*shades)
        rows.append(
            {
                "index": str(i),
                "question": question,
                **lettered(options, "ABCDEF"),
                "answer": gold,
                "image": image,
                "image_path": paths,
                "task": "Image-Text Matching",
                "image_relation": "Narrative",
                "image_type": "Photography",
            }
        )
    return RealFile(rows, *_letter_answers(), interleaved=True)


MRW_OPTIONS = ["(A) 1", "(B) 2", "(C) 3", "(D) 4", "(E) The image does not feature the objects"]


def mme_realworld_lite() -> RealFile:
    """mme_realworld_lite.tsv (``MMERealWorld.load_data``, DATASET yifanzhang114/MME-RealWorld-Base64):
    ``index, image, question, multi-choice options, answer, category, l2-category``; ``multi-choice options``
    is a Python list of five ``"(A) text"`` strings (``load_data`` evals it, joins it under ``The choices are
    listed below:`` and fills A-E with each string's text after 4 characters); ``answer`` is the letter;
    ``category`` is ``Task/Subtask`` and ``l2-category`` its dimension (``get_dimension_rating``)."""
    cases = [
        ("How many cars are in the parking lot?", MRW_OPTIONS, "B", "Perception/Monitoring", "counting/vehicle"),
        (
            "What does the sign say?",
            ["(A) STOP", "(B) YIELD", "(C) EXIT", "(D) ONE WAY", "(E) None of the above"],
            "D",
            "Perception/OCR with Complex Context",
            "text recognition",
        ),
        (
            "Should the car turn left here?",
            ["(A) Yes", "(B) No", "(C) Only at night", "(D) Only on weekdays", "(E) Cannot tell"],
            "A",
            "Reasoning/Autonomous_Driving",
            "intention",
        ),
    ]
    rows = [
        {
            "index": str(i),
            "image": png_b64(120 + i),
            "question": question,
            "multi-choice options": str(options),
            "answer": gold,
            "category": category,
            "l2-category": l2,
        }
        for i, (question, options, gold, category, l2) in enumerate(cases)
    ]
    return RealFile(rows, *_letter_answers())


FILES = {
    "mmbench_en": mmbench_dev_en,
    "mmstar": mmstar,
    "realworldqa": realworldqa,
    "blink": blink,
    "visonlyqa": visonlyqa,
    "hrbench4k": hr_bench_4k,
    "cvbench": cv_bench,
    "vstar": vstar_bench,
    "mmmu": mmmu_dev_val,
    "mmmu_pro": mmmu_pro_10c,
    "muirbench": muirbench,
    "mme_realworld_lite": mme_realworld_lite,
}
"""Benchmark name -> builder of its miniature file(s)."""

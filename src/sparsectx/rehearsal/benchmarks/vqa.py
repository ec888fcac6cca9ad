"""Short-answer and math benchmarks in their real layouts: VLMEvalKit's ``ImageVQADataset`` (TextVQA, GQA),
``OCRBench``, ``MathVista``, ``MathVerse`` and ``LogicVista``.

Which prompt each class builds (vlmeval/dataset/image_vqa.py, nvidia-vlmeval 26.3): ``ImageVQADataset``
appends ``"\\nAnswer the question using a single word or phrase."`` to the ``question`` cell; ``OCRBench``,
``MathVista`` and ``LogicVista`` keep ``ImageBaseDataset.build_prompt`` (the ``question`` cell as written);
``MathVerse.build_prompt`` asks the ``question`` cell, or ``query_cot`` for the ``*_cot`` sets only.
"""

from __future__ import annotations

import ast
from collections import Counter

from . import RealFile, png_b64


def _same(_id: str, gold: str) -> str:
    return gold


def _other(_id: str, gold: str) -> str:
    return "zzz not it"


def _most_common(_id: str, gold: str) -> str:
    """The answer most annotators gave (the project passes the list cell as the gold)."""
    return Counter(ast.literal_eval(gold)).most_common(1)[0][0]


def textvqa() -> RealFile:
    """TextVQA_VAL.tsv: ``index, image, question, answer`` with ``answer`` a Python list of the 10 annotators'
    answers (``process_line`` evals it when ``istype(answer, list)``; vlmeval/dataset/utils/vqa_eval.py) and
    the VQA score over them (``hit_calculate``'s TextVQA branch). Quirks kept: answers disagreeing and
    differing in case/punctuation (``"Nokia"``, ``"nokia."``); one photo asked twice, the second row
    holding the first row's ``index`` in ``image`` (shared-image reference; TextVQA's 5,000 val questions
    are on 3,166 images); a long majority answer (seven words: a question LT-OPD's efficiency protocol times,
    ``sparsectx.eval.efficiency_protocol``). Nothing is dropped."""
    answers = [
        ["nokia"] * 6 + ["Nokia", "nokia.", "nokia phone", "unanswerable"],
        ["5"] * 4 + ["five", "5:00", "5", "unanswerable", "4", "5"],
        ["stop"] * 10,
        ["welcome to the old mill road bakery"] * 7 + ["old mill road bakery", "Welcome to the Old Mill", "bakery"],
    ]
    questions = [
        "What brand is the phone?",
        "What time does the clock show?",
        "What does the sign say?",
        "What is written above the door?",
    ]
    rows = [
        {
            "index": str(34602 + i),
            "image": png_b64(60 + i) if i != 1 else "34602",
            "question": question,
            "answer": str(golds),
        }
        for i, (question, golds) in enumerate(zip(questions, answers, strict=True))
    ]
    return RealFile(rows, _most_common, _other)


def gqa() -> RealFile:
    """GQA_TestDev_Balanced.tsv: ``index, image, question, answer`` with one short answer per row (VLMEvalKit's
    ``ImageVQADataset.evaluate`` scores GQA with ``process_line(method='accuracy')``: gold and prediction
    stripped and lower-cased, equal). Quirks kept: the 12,578 test-dev questions are on 398 images, so most
    rows hold another row's ``index`` in ``image`` (shared-image reference); yes/no and open answers."""
    cases = [
        ("Is the sky blue or white?", "blue"),
        ("Are there both cars and trucks in this picture?", "no"),
        ("What is the man holding?", "umbrella"),
        ("Which side is the tree on?", "left"),
    ]
    rows = [
        {
            "index": str(20240600 + i),
            "image": png_b64(70) if i == 0 else "20240600",
            "question": question,
            "answer": answer,
        }
        for i, (question, answer) in enumerate(cases)
    ]
    return RealFile(rows, _same, _other)


def ocrbench() -> RealFile:
    """OCRBench.tsv: ``index, image, question, answer, category`` with ``answer`` a Python list of accepted
    answers (``OCRBench.evaluate`` evals it and counts a hit when one answer is a substring of the
    prediction; vlmeval/dataset/image_vqa.py) and ``category`` one of the ten OCRBench categories (the
    handwritten-maths one compared without spaces, case kept). Quirks kept: several accepted answers; a
    LaTeX answer with backslashes and braces. A perfect run of the 4 rows scores 1000 (the project's
    ``score`` = 1000 x hits / n, VLMEvalKit's Final Score on the full 1,000 questions)."""
    cases = [
        ("what is written in the image?", "['CENTRAL']", "Regular Text Recognition"),
        ("What is the price of the coffee?", "['$3.50', '3.50']", "Scene Text-centric VQA"),
        ("What is the date on the invoice?", "['2021-03-04', '04/03/2021']", "Key Information Extraction"),
        (
            "Please write out the expression of the formula in the image using LaTeX format.",
            "['\\\\frac{a}{b}+1']",
            "Handwritten Mathematical Expression Recognition",
        ),
    ]
    rows = [
        {"index": str(i), "image": png_b64(80 + i), "question": q, "answer": a, "category": c}
        for i, (q, a, c) in enumerate(cases)
    ]
    return RealFile(rows, lambda _id, gold: ast.literal_eval(gold)[0], _other, full_score=1000.0)


def mathvista() -> RealFile:
    """MathVista_MINI.tsv: ``index, image, question, answer, question_type, answer_type, choices, precision,
    unit, answer_option, task, skills`` (VLMEvalKit reads ``question`` in ``ImageBaseDataset.build_prompt``;
    ``question_type``, ``answer_type``, ``answer``, ``answer_option`` and ``choices`` in
    vlmeval/dataset/utils/mathvista.py ``post_check``; ``task`` and ``skills`` in ``MathVista_acc``; the
    rest are MathVista's own fields, AI4Math/MathVista card; the column order is not verified). Quirks kept:
    the ``question`` cell is MathVista's ``query``, which already holds the hint line, the question and, for
    a multiple-choice row, its ``Choices:`` lines, so VLMEvalKit asks it as written; ``answer`` is the
    option's text (``answer_option`` its letter) on a multiple-choice row; ``choices`` a Python list there
    and empty on free-form rows; ``skills`` a Python list."""
    rows = [
        {
            "index": "1",
            "image": png_b64(90),
            "question": "Hint: Please answer the question and provide the correct option letter, e.g., A, B, C, "
            "D, at the end.\nQuestion: What fraction of the shape is blue?\nChoices:\n(A) 3/11\n(B) 8/11\n"
            "(C) 6/11\n(D) 3/5",
            "answer": "8/11",
            "question_type": "multi_choice",
            "answer_type": "text",
            "choices": "['3/11', '8/11', '6/11', '3/5']",
            "precision": "",
            "unit": "",
            "answer_option": "B",
            "task": "geometry problem solving",
            "skills": "['arithmetic reasoning']",
        },
        {
            "index": "2",
            "image": png_b64(91),
            "question": "Hint: Please answer the question requiring an integer answer and provide the final value, "
            "e.g., 1, 2, 3, at the end.\nQuestion: what is the total volume of the measuring cup? (Unit: g)",
            "answer": "1000",
            "question_type": "free_form",
            "answer_type": "integer",
            "choices": "",
            "precision": "",
            "unit": "g",
            "answer_option": "",
            "task": "figure question answering",
            "skills": "['numeric commonsense', 'arithmetic reasoning']",
        },
        {
            "index": "3",
            "image": png_b64(92),
            "question": "Hint: Please answer the question requiring a floating-point number with one decimal "
            "place and provide the final value, e.g., 1.2, 1.3, 1.4, at the end.\nQuestion: What is the "
            "fraction of females facing the camera?",
            "answer": "0.6",
            "question_type": "free_form",
            "answer_type": "float",
            "choices": "",
            "precision": "1.0",
            "unit": "",
            "answer_option": "",
            "task": "figure question answering",
            "skills": "['arithmetic reasoning']",
        },
    ]
    return RealFile(rows, _same, _other)


def mathverse_vo() -> RealFile:
    """MathVerse_MINIVOnly.tsv (``MathVerse_MINI_Vision_Only``'s ``DATASET_URL``): ``index, image, question,
    answer, question_type, problem_version, metadata, query_cot, question_for_eval`` (VLMEvalKit reads
    ``question`` in ``MathVerse.build_prompt``, which takes ``query_cot`` only for the ``*_cot`` sets;
    ``question_for_eval`` and ``answer`` in ``build_mathverse_gpt4_score_prompt``; ``metadata`` (a dict
    written with single quotes) and ``problem_version`` in ``MathVerse_acc``; vlmeval/dataset/utils/
    mathverse.py. The fields are the AI4Math/MathVerse card's). Quirk kept: in the Vision Only version the
    whole problem is drawn in the figure, so the asked cell is the instruction alone (MathVerse's
    ``query_wo``: "According to the question shown in the image, ..."), and the problem text is only in
    ``question_for_eval``; the gold is an option letter on a multiple-choice row, a value otherwise."""
    meta = "{'split': 'testmini', 'source': 'GeoQA', 'subject': 'Plane Geometry', 'subfield': 'Angle'}"
    rows = [
        {
            "index": "1",
            "image": png_b64(100),
            "question": "According to the question shown in the image, please directly answer the question and "
            "provide the correct option letter, e.g., A, B, C, D.",
            "answer": "B",
            "question_type": "multi-choice",
            "problem_version": "Vision Only",
            "metadata": meta,
            "query_cot": "According to the question shown in the image, please first conduct reasoning, and "
            "then answer the question and provide the correct option letter, e.g., A, B, C, D, at the end.",
            "question_for_eval": "As shown in the figure, AB is parallel to CD, angle 1 = 50, then angle 2 is "
            "()\nChoices:\nA:40\nB:50\nC:130\nD:140",
        },
        {
            "index": "2",
            "image": png_b64(101),
            "question": "According to the question shown in the image, please directly answer the question and "
            "provide the final value, e.g., 1, 2.5, 300.",
            "answer": "5",
            "question_type": "free-form",
            "problem_version": "Vision Only",
            "metadata": meta,
            "query_cot": "According to the question shown in the image, please first conduct reasoning, and "
            "then answer the question and provide the final value, e.g., 1, 2.5, 300, at the end.",
            "question_for_eval": "Find the length of BC.",
        },
    ]
    return RealFile(rows, _same, _other)


def logicvista() -> RealFile:
    """LogicVista.tsv: ``index, image, question, answer, skill`` (VLMEvalKit reads ``question`` in
    ``ImageBaseDataset.build_prompt`` and ``build_prompt_logicvista``; ``answer``, split on ``", "``, in
    ``LogicVista_auxeval``; ``skill`` in ``evaluate_logicvista``, matched by substring: a cell may name
    several skills; vlmeval/dataset/utils/logicvista.py). Quirks kept: no option columns, the options are
    in the question text or drawn in the figure; a question with several right letters (gold ``"A, C"``,
    compared as a sorted letter set); a question whose inline options are numbers (an item of SCOPD's numeric
    Pass@K cohort)."""
    rows = [
        {
            "index": "0",
            "image": png_b64(110),
            "question": "Which of the boxes comes next in the sequence? Select from A-E",
            "answer": "D",
            "skill": "inductive",
        },
        {
            "index": "1",
            "image": png_b64(111),
            "question": "Which two figures are rotations of the object? Choices: A. left B. middle C. right",
            "answer": "A, C",
            "skill": "spatial, deductive",
        },
        {
            "index": "2",
            "image": png_b64(112),
            "question": "What is the next number in the sequence 2, 4, 8, 16? Choices: A. 24 B. 32 C. 30 D. 20",
            "answer": "B",
            "skill": "numerical, inductive",
        },
    ]
    return RealFile(rows, _same, lambda _id, gold: "E")


FILES = {
    "gqa": gqa,
    "logicvista": logicvista,
    "mathverse_vo": mathverse_vo,
    "mathvista": mathvista,
    "ocrbench": ocrbench,
    "textvqa": textvqa,
}
"""Benchmark name -> builder of its miniature file."""

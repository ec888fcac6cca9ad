"""Video benchmarks in their real layouts: VLMEvalKit's ``MVBench``, ``MLVU_MCQ``, ``VideoMME``,
``TempCompass_MCQ`` and Video-TT.

Each VLMEvalKit video class writes its TSV itself in ``prepare_dataset`` (nvidia-vlmeval 26.3, vlmeval/dataset/
mvbench.py, mlvu.py, videomme.py, tempcompass.py; Video-TT: upstream open-compass/VLMEvalKit@e8e78f05 vlmeval/
dataset/videott.py) with ``pandas.DataFrame.to_csv(sep='\\t', index=False)``: Python lists are written as their
``repr`` (``candidates``), ``True``/``False`` as such, ``None`` as an empty cell, and ``index`` is appended last
where ``assign(index=...)`` adds it. The clips sit beside the TSV (``prepare_dataset`` returns that folder as
``root``): each fixture's ``media`` writes tiny real clips (PyAV mp4 files, JPEG frame folders) there, so the rows
load and VLMEvalKit's own readers (decord) can sample them.
"""

from __future__ import annotations

from pathlib import Path

import av
import numpy as np
from PIL import Image

from . import RealFile

LETTER = ((lambda _id, gold: gold), (lambda _id, gold: "B" if gold == "A" else "A"))
"""(right, wrong) answers of a multiple-choice row: the gold letter, and another letter."""


def write_clip(path: Path, count: int, fps: int) -> None:
    """Writes a ``count``-frame mp4 at ``fps`` (32x32, each frame one grey level) with PyAV (decord, which
    VLMEvalKit reads clips with, misreads 16x16 frames as 6 channels)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with av.open(str(path), "w") as container:
        stream = container.add_stream("mpeg4", rate=fps)
        stream.width, stream.height, stream.pix_fmt = 32, 32, "yuv420p"
        for i in range(count):
            shade = np.full((32, 32, 3), (3 * i) % 256, dtype=np.uint8)
            container.mux(stream.encode(av.VideoFrame.from_ndarray(shade, format="rgb24")))
        container.mux(stream.encode())


def write_frames(folder: Path, count: int) -> None:
    """Writes ``count`` JPEG frames named ``00001.jpg``... (MVBench's TVQA frame folders, read by
    ``MVBench.read_frame`` as ``f'{frame_index:05d}.jpg'`` from 1)."""
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(1, count + 1):
        Image.new("RGB", (16, 16), (4 * i % 256,) * 3).save(folder / f"{i:05d}.jpg")


def mvbench() -> RealFile:
    """MVBench.tsv (``MVBench.prepare_dataset`` ``generate_tsv``): ``task_type, prefix, data_type, bound, start,
    end, video, question, answer, candidates, index``. ``prefix`` is the task's folder under the download
    (``'your_data_path/star/Charades_v1_480/'`` with ``your_data_path`` -> ``video``); ``video`` a file name with
    its extension, or a folder of frames for ``data_type`` ``frame`` (Episodic Reasoning, TVQA at 3 fps);
    ``bound`` is True for the tasks whose clips are cut to ``start``..``end`` seconds (empty cells otherwise);
    ``answer`` is the right candidate's text, ``candidates`` a list repr."""
    rows = [
        {
            "task_type": "Action Antonym",
            "prefix": "video/ssv2_video/",
            "data_type": "video",
            "bound": "False",
            "start": "",
            "end": "",
            "video": "166.mp4",
            "question": "What is the action performed by the person in the video?",
            "answer": "Pushing something from left to right",
            "candidates": str(
                ["Not sure", "Pushing something from left to right", "Pushing something from right to left"]
            ),
            "index": "0",
        },
        {
            "task_type": "Action Sequence",
            "prefix": "video/star/Charades_v1_480/",
            "data_type": "video",
            "bound": "True",
            "start": "1.0",
            "end": "6.2",
            "video": "6H78U.mp4",
            "question": "What happened after the person took the food?",
            "answer": "Ate the medicine.",
            "candidates": str(
                [
                    "Ate the medicine.",
                    "Tidied up the blanket.",
                    "Put down the cup/glass/bottle.",
                    "Took the person's box.",
                ]
            ),
            "index": "1",
        },
        {
            "task_type": "Episodic Reasoning",
            "prefix": "video/tvqa/frames_fps3_hq/",
            "data_type": "frame",
            "bound": "True",
            "start": "2.0",
            "end": "15.5",
            "video": "castle_s07e04_seg02_clip_14",
            "question": "Why did Castle say it's just like the old days?",
            "answer": "Because they are working a case together.",
            "candidates": "['Because they are at the precinct.', 'Because they are working a case together.', "
            "'Because Beckett is angry.', 'Because Castle is writing.', 'Because they are on a date.']",
            "index": "2",
        },
    ]

    def media(folder: Path) -> None:
        # Shorter than the 32 frames the config asks, as many real ssv2 clips and TVQA windows are: VLMEvalKit's
        # MVBench.get_index repeats frames of them, so the rows are kept (a skip would refuse the file).
        write_clip(folder / "video" / "ssv2_video" / "166.mp4", 20, fps=12)
        write_clip(folder / "video" / "star" / "Charades_v1_480" / "6H78U.mp4", 80, fps=8)  # window: 41 frames
        tvqa = folder / "video" / "tvqa" / "frames_fps3_hq" / "castle_s07e04_seg02_clip_14"
        write_frames(tvqa, 30)  # window 2.0-15.5 s at 3 fps: frames 6..30, cut at the folder's end

    return RealFile(rows, *LETTER, media=media)


def mlvu() -> RealFile:
    """MLVU_MCQ.tsv (``MLVU_MCQ.prepare_dataset`` ``generate_tsv``): ``task_type, prefix, duration, video,
    question, answer, candidates, index``; ``prefix`` ``./MLVU/video/<n>_<task>`` (no trailing slash), ``video`` a
    file name with its extension, ``answer`` the right candidate's text."""
    rows = [
        {
            "task_type": "plotQA",
            "prefix": "./MLVU/video/1_plotQA",
            "duration": "431.0",
            "video": "movie101_66.mp4",
            "question": "What color is the main male character in the video?",
            "answer": "Yellow",
            "candidates": str(["Yellow", "Red", "Green", "Blue"]),
            "index": "0",
        },
        {
            "task_type": "needle",
            "prefix": "./MLVU/video/2_needle",
            "duration": "192.5",
            "video": "needle_32.mp4",
            "question": "What does the hand coming out of the computer do?",
            "answer": "Delivers a product",
            "index": "1",
            "candidates": str(
                [
                    "Delivers a product",
                    "Shakes the woman's hand",
                    "Takes the woman's credit card",
                    "Points at the screen",
                ]
            ),
        },
    ]

    def media(folder: Path) -> None:
        write_clip(folder / "MLVU" / "video" / "1_plotQA" / "movie101_66.mp4", 40, fps=4)
        write_clip(folder / "MLVU" / "video" / "2_needle" / "needle_32.mp4", 48, fps=4)

    return RealFile(rows, *LETTER, media=media)


def videomme() -> RealFile:
    """Video-MME.tsv (``VideoMME.prepare_dataset`` ``generate_tsv``): ``index, video, video_path, duration,
    domain, candidates, sub_category, task_type, subtitle_path, question, answer``; ``video`` the videoID (no
    extension; the clip is ``video/<id>.mp4``), ``candidates`` the parquet's ``options`` as a list repr of
    ``"A. text"`` strings, ``answer`` a letter."""
    rows = [
        {
            "index": "0",
            "video": "fFjv93ACGo8",
            "video_path": "./video/fFjv93ACGo8.mp4",
            "duration": "short",
            "domain": "Knowledge",
            "candidates": str(
                ["A. Apples.", "B. Candles.", "C. Berries.", "D. The three kinds are of the same number."]
            ),
            "sub_category": "Humanity & History",
            "task_type": "Counting Problem",
            "subtitle_path": "./subtitle/fFjv93ACGo8.srt",
            "question": "When demonstrating the Germany modern Christmas tree is initially decorated with apples, "
            "candles and berries, which kind of the decoration has the largest number?",
            "answer": "C",
        },
        {
            "index": "1",
            "video": "Xc-jnBRbCbk",
            "video_path": "./video/Xc-jnBRbCbk.mp4",
            "duration": "medium",
            "domain": "Film & Television",
            "candidates": str(["A. A cat.", "B. A dog.", "C. The girl's bike.", "D. A bird."]),
            "sub_category": "Animation",
            "task_type": "Object Recognition",
            "subtitle_path": "./subtitle/Xc-jnBRbCbk.srt",
            "question": "What does the girl chase?",
            "answer": "B",
        },
    ]

    def media(folder: Path) -> None:
        write_clip(folder / "video" / "fFjv93ACGo8.mp4", 40, fps=8)
        write_clip(folder / "video" / "Xc-jnBRbCbk.mp4", 36, fps=8)

    return RealFile(rows, *LETTER, media=media)


def tempcompass_mcq() -> RealFile:
    """TempCompass_MCQ.tsv (``TempCompass_MCQ.prepare_dataset`` ``generate_tsv``): ``task_type, prefix, suffix,
    video, question, answer, dim, candidates, index``; ``prefix`` ``./videos``, ``suffix`` ``.mp4``, ``question``
    the first line of the source question and ``candidates`` its other lines as written (``"A. text"`` for
    multi-choice, ``"Caption A: text"`` for caption matching, the forms ``eval_rule_multi_choice`` and
    ``eval_rule_caption_matching`` in utils/tempcompass.py read), ``answer`` as written in the source. One
    ``video`` id is not all digits: VLMEvalKit's ``load`` (pandas) reads an all-digit column as integers, and
    then its own ``check_integrity`` fails on ``item['video'] + item['suffix']`` (whether the real ids are all
    digits was not checked here)."""
    rows = [
        {
            "task_type": "multi-choice",
            "prefix": "./videos",
            "suffix": ".mp4",
            "video": "1006391545",
            "question": "Which direction is the car moving?",
            "answer": "B. from right to left",
            "dim": "direction",
            "candidates": str(["A. from left to right", "B. from right to left", "C. towards the camera"]),
            "index": "0",
        },
        {
            "task_type": "caption_matching",
            "prefix": "./videos",
            "suffix": ".mp4",
            "video": "cm4fk3_dribble",
            "question": "Which caption matches the video better?",
            "answer": "Caption A: The man dribbles the ball faster and faster.",
            "dim": "speed",
            "candidates": str(
                [
                    "Caption A: The man dribbles the ball faster and faster.",
                    "Caption B: The man dribbles the ball slower and slower.",
                ]
            ),
            "index": "1",
        },
    ]

    def media(folder: Path) -> None:
        write_clip(folder / "videos" / "1006391545.mp4", 40, fps=8)
        write_clip(folder / "videos" / "cm4fk3_dribble.mp4", 20, fps=8)  # short: save_video_frames repeats frames

    return RealFile(rows, *LETTER, media=media)


def video_tt() -> RealFile:
    """Video-TT.tsv (upstream ``VideoTT.prepare_dataset`` ``generate_tsv``, not in nvidia-vlmeval 26.3): ``index,
    video, video_path, duration, question, question_prompt, capability, answer``; ``video`` the video_id (the clip
    is ``video/<id>.mp4``), ``question_prompt`` the options one ``"A. text"`` per line (the form upstream
    utils/videott.py ``extract_option`` reads; its exact text unverified here), ``answer`` a letter (compared with
    ``extract_characters_regex``'s A-D)."""
    rows = [
        {
            "index": "0",
            "video": "7374719349286653194",
            "video_path": "./video/7374719349286653194.mp4",
            "duration": "15.2",
            "question": "How many times does the cat jump onto the table?",
            "question_prompt": "A. Once.\nB. Twice.\nC. Three times.\nD. It never jumps.",
            "capability": "Event Counting",
            "answer": "B",
        },
        {
            "index": "1",
            "video": "7401234567890123456",
            "video_path": "./video/7401234567890123456.mp4",
            "duration": "28.0",
            "question": "Why does the man's shadow move before he does?",
            "question_prompt": "A. The video is reversed.\nB. There is a second person.\n"
            "C. The shadow is edited in.\nD. The light source moves.",
            "capability": "Objective Causality (Videography Phenomenon & Illusion)",
            "answer": "C",
        },
    ]

    def media(folder: Path) -> None:
        write_clip(folder / "video" / "7374719349286653194.mp4", 40, fps=8)
        write_clip(folder / "video" / "7401234567890123456.mp4", 40, fps=8)

    return RealFile(rows, *LETTER, media=media)


FILES: dict = {
    "mvbench": mvbench,
    "mlvu": mlvu,
    "videomme": videomme,
    "tempcompass_mcq": tempcompass_mcq,
    "video_tt": video_tt,
}
"""Benchmark name -> builder of its miniature file."""

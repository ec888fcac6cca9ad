"""Writes the frame indices VLMEvalKit's own video classes pick for given clips; run in the VLMEvalKit environment
(``make vlmeval-env``) by ``tests/eval/test_video_sampling.py``.

    <vlmeval env>/bin/python vlmeval_frame_indices.py --cases cases.json --work-dir <dir> --out out.json

A standalone script (standard library, ``numpy``, ``PIL`` and ``vlmeval`` only). ``--cases`` is a JSON list of
``{"key", "method", "total", "fps", "nframe", "bound"}``; each case runs the VLMEvalKit method that reads the
clip, unchanged, on a bare instance of its class, with only the reader under it replaced by one that reports
``total`` frames at ``fps`` and records every frame index asked of it:

- ``"MVBench.read_video"``: ``decord.VideoReader`` (the name ``mvbench`` imports) replaced; ``bound`` is null or
  ``[start, end]`` seconds, as ``save_video_into_images`` passes it.
- ``"MVBench.read_frame"``: a real folder of ``total`` empty files (``os.listdir`` counts them) and ``Image.open``
  recording the file number it opens (``00001.jpg`` is 1); ``read_frame``'s own default fps (3) applies.
- ``"<Class>.save_video_frames"`` for ``VideoMME``, ``MLVU_MCQ``, ``TempCompass_MCQ`` and ``VideoBaseDataset``:
  ``decord.VideoReader`` (the module-level ``decord`` each uses) replaced; frames are written to a fresh folder.

``--out`` receives ``{key: {"indices": [...]}}`` or ``{key: {"error": ...}}`` (VLMEvalKit raising on a clip).

Exit status: 0 done; 2 bad input; 3 ``import vlmeval`` failed.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import types
from pathlib import Path
from typing import Any, NoReturn

BAD_INPUT, BROKEN_ENV = 2, 3


def _fail(code: int, message: str) -> NoReturn:
    print(message, file=sys.stderr)
    sys.exit(code)


class Reader:
    """Stands for ``decord.VideoReader``: ``total`` frames at ``fps``; records each index read."""

    def __init__(self, total: int, fps: float, seen: list[int]) -> None:
        self.total, self.fps, self.seen = total, fps, seen

    def __len__(self) -> int:
        return self.total

    def get_avg_fps(self) -> float:
        return self.fps

    def __getitem__(self, index: int) -> Any:
        import numpy as np

        index = int(index)
        if not 0 <= index < self.total:
            raise IndexError(f"frame {index} of a {self.total}-frame clip")
        self.seen.append(index)
        return types.SimpleNamespace(asnumpy=lambda: np.zeros((2, 2, 3), dtype=np.uint8))


def _decord(total: int, fps: float, seen: list[int]) -> types.SimpleNamespace:
    return types.SimpleNamespace(VideoReader=lambda *args, **kwargs: Reader(total, fps, seen))


def _save_video_frames(module: Any, cls: type, case: dict[str, Any], work: Path, seen: list[int]) -> None:
    dataset = cls.__new__(cls)
    dataset.nframe, dataset.fps = case["nframe"], -1
    dataset.data_root = str(work)
    dataset.frame_root = str(work / "frames")
    dataset.frame_tmpl, dataset.frame_tmpl_fps = "frame-{}-of-{}.jpg", "frame-{}-of-{}-{}fps.jpg"
    module.decord = _decord(case["total"], case["fps"], seen)
    if cls.__name__ == "VideoMME" or cls.__name__ == "VideoBaseDataset":
        cls.save_video_frames(dataset, "clip")
    elif cls.__name__ == "MLVU_MCQ":
        cls.save_video_frames(dataset, {"prefix": "p", "video": "clip.mp4"})
    else:
        cls.save_video_frames(dataset, {"prefix": "p", "video": "clip", "suffix": ".mp4"})


def indices_of(case: dict[str, Any], work: Path) -> list[int]:
    """Returns the frame indices VLMEvalKit's method reads for one case, in the order it reads them."""
    import numpy as np
    from vlmeval.dataset import mlvu, mvbench, tempcompass, video_base, videomme

    seen: list[int] = []
    owner, method = case["method"].split(".")
    bound = tuple(case["bound"]) if case["bound"] is not None else None
    if owner == "MVBench":
        dataset = mvbench.MVBench.__new__(mvbench.MVBench)
        dataset.num_segments = case["nframe"]
        dataset.transform = lambda images: images
        if method == "read_video":
            mvbench.VideoReader = lambda *args, **kwargs: Reader(case["total"], case["fps"], seen)
            dataset.read_video("clip.mp4", bound)
            return seen
        folder = work / "tvqa"
        folder.mkdir()
        for number in range(1, case["total"] + 1):
            (folder / f"{number:05d}.jpg").touch()
        real_image = mvbench.Image

        def record(path: str) -> Any:
            number = int(Path(path).stem)
            if not Path(path).exists():
                raise FileNotFoundError(path)
            seen.append(number)
            return real_image.fromarray(np.zeros((2, 2, 3), dtype=np.uint8))

        mvbench.Image = types.SimpleNamespace(open=record, fromarray=real_image.fromarray)
        try:
            dataset.read_frame(str(folder), bound)
        finally:
            mvbench.Image = real_image
        return seen
    modules = {
        "VideoMME": videomme,
        "MLVU_MCQ": mlvu,
        "TempCompass_MCQ": tempcompass,
        "VideoBaseDataset": video_base,
    }
    module = modules[owner]
    _save_video_frames(module, getattr(module, owner), case, work, seen)
    return seen


def main(argv: list[str] | None = None) -> None:
    """Returns None after writing ``--out``; exits non-zero when the environment or the cases are unusable."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", required=True, type=Path)
    parser.add_argument("--work-dir", required=True, type=Path)
    parser.add_argument("--out", required=True, type=Path)
    args = parser.parse_args(argv)
    if not args.cases.is_file():
        _fail(BAD_INPUT, f"no file at {args.cases}")
    args.work_dir.mkdir(parents=True, exist_ok=True)
    os.environ["LMUData"] = str(args.work_dir.resolve())  # noqa: SIM112  (VLMEvalKit spells it so)
    try:
        import vlmeval.dataset.mvbench  # noqa: F401
    except Exception as error:  # noqa: BLE001  (any import failure means the environment is unusable)
        _fail(BROKEN_ENV, f"import vlmeval failed: {type(error).__name__}: {error}")
    out: dict[str, Any] = {}
    for number, case in enumerate(json.loads(args.cases.read_text())):
        work = args.work_dir / f"case{number}"
        work.mkdir()
        try:
            out[case["key"]] = {"indices": [int(i) for i in indices_of(case, work)]}
        except Exception as error:  # noqa: BLE001  (reported per case; the test names it)
            out[case["key"]] = {"error": f"{type(error).__name__}: {error}"}
    args.out.write_text(json.dumps(out))


if __name__ == "__main__":
    main()

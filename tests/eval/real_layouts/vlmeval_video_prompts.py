"""Writes what VLMEvalKit's own video classes build for every row of a benchmark folder; run in the VLMEvalKit
environment (``make vlmeval-env``) by ``tests/eval/test_real_video_prompts.py``.

    <vlmeval env>/bin/python vlmeval_video_prompts.py --jobs jobs.json --work-dir <dir> --out out.json

A standalone script (standard library and ``vlmeval`` only). ``--jobs`` is a JSON list of ``{"key", "module",
"class", "dataset", "folder"}``: the folder holds the class's TSV and its clips as its ``prepare_dataset`` leaves
them. Each class runs its own ``prepare_dataset`` on that folder (VLMEvalKit's ``get_cache_path`` answers the
folder and ``md5`` the class's ``MD5``, so its ``check_integrity`` checks the clips and nothing is downloaded),
then its ``build_prompt(line, video_llm=False)`` for every row: the frames are sampled by VLMEvalKit itself
(decord) from the fixture's clips, so a clip VLMEvalKit cannot find or read fails the job. Each row is recorded
as ``{"index", "messages": [{"type", "role", "value"}]}`` (image values dropped). ``--out`` receives ``{key:
{"rows": [...]}}`` or ``{key: {"error": ...}}``, and ``"constants"``: VLMEvalKit text the tests restate
(``VideoMME.FRAMES_TMPL_NOSUB``, the text upstream's ``VideoTT.FRAMES_EVAL_PROMPT`` repeats).

Exit status: 0 done; 2 bad input; 3 ``import vlmeval`` failed.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
import traceback
from pathlib import Path
from typing import Any, NoReturn

BAD_INPUT, BROKEN_ENV = 2, 3
NFRAME = 8
"""Frames VLMEvalKit samples per clip here (the fixtures' clips hold more; the text does not depend on it)."""


def _fail(code: int, message: str) -> NoReturn:
    print(message, file=sys.stderr)
    sys.exit(code)


def prompts_of(job: dict[str, Any]) -> dict[str, Any]:
    """Returns the ``build_prompt`` messages of every row of one job's folder, built by its own class."""
    module = importlib.import_module(job["module"])
    cls = getattr(module, job["class"])
    folder = str(Path(job["folder"]).resolve())
    module.get_cache_path = lambda *args, **kwargs: folder
    module.md5 = lambda path: cls.MD5
    dataset = cls(dataset=job["dataset"], nframe=NFRAME)
    rows = []
    for position in range(len(dataset.data)):
        line = dataset.data.iloc[position].copy()
        messages = dataset.build_prompt(line, video_llm=False)
        rows.append(
            {
                "index": str(dataset.data.iloc[position]["index"]),
                "messages": [
                    {
                        "type": message["type"],
                        "role": message.get("role", "user"),
                        "value": str(message["value"]) if message["type"] == "text" else "",
                    }
                    for message in messages
                ],
            }
        )
    return {"rows": rows}


def main(argv: list[str] | None = None) -> None:
    """Returns None after writing ``--out``; exits non-zero when the environment or the jobs are unusable."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", required=True, type=Path)
    parser.add_argument("--work-dir", required=True, type=Path)
    parser.add_argument("--out", required=True, type=Path)
    args = parser.parse_args(argv)
    if not args.jobs.is_file():
        _fail(BAD_INPUT, f"no file at {args.jobs}")
    args.work_dir.mkdir(parents=True, exist_ok=True)
    os.environ["LMUData"] = str(args.work_dir.resolve())  # noqa: SIM112  (VLMEvalKit spells it so)
    try:
        from vlmeval.dataset.videomme import VideoMME
    except Exception as error:  # noqa: BLE001  (any import failure means the environment is unusable)
        _fail(BROKEN_ENV, f"import vlmeval failed: {type(error).__name__}: {error}")
    out: dict[str, Any] = {"constants": {"VideoMME.FRAMES_TMPL_NOSUB": VideoMME.FRAMES_TMPL_NOSUB}}
    for job in json.loads(args.jobs.read_text()):
        try:
            out[job["key"]] = prompts_of(job)
        except Exception as error:  # noqa: BLE001  (reported per job; the test names it)
            out[job["key"]] = {"error": f"{type(error).__name__}: {error}\n{traceback.format_exc()[-2000:]}"}
    args.out.write_text(json.dumps(out))


if __name__ == "__main__":
    main()

"""Writes what VLMEvalKit's own ``build_prompt`` builds for every row of a benchmark file; run in the VLMEvalKit
environment (``make vlmeval-env``) by ``tests/eval/test_real_benchmarks.py``.

    <vlmeval env>/bin/python vlmeval_prompts.py --jobs jobs.json --work-dir <dir> --out out.json

A standalone script (standard library, pandas and ``vlmeval`` only), run once for every benchmark of the
suite (``import vlmeval`` alone takes seconds). ``--jobs`` is a JSON list of ``{"key", "dataset", "data",
"unsplit"}``. For each job it builds the dataset class VLMEvalKit files ``dataset`` under, with the class's
own ``load_data`` and ``__init__`` (so its own row filters and post-processing run: ``skip_noimg``,
shared-image references, MME-RealWorld's option joining), except that ``prepare_tsv`` reads ``data`` instead
of downloading the official file into ``$LMUData``. Then, for every row VLMEvalKit kept, it records the
message list ``build_prompt`` returns: ``{"index", "kinds": ["image", ..., "text"], "texts": [the text
values in order]}``. ``unsplit`` runs the class's own ``build_prompt`` with its image-interleaving step
(``split_MMMU`` of MMMU and MMMU-Pro) left as the identity: the text before the images are moved to its
``<image k>`` tags. ``--out`` receives ``{key: {"dataset", "class", "rows": [...]}}``, or ``{key: {"error":
...}}`` for a job whose dataset failed.

Exit status: 0 done; 2 bad input; 3 ``import vlmeval`` failed.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any, NoReturn

BAD_INPUT, BROKEN_ENV = 2, 3


def _fail(code: int, message: str) -> NoReturn:
    print(message, file=sys.stderr)
    sys.exit(code)


def _dataset(name: str, data: Path, unsplit: bool = False) -> Any:
    """Returns VLMEvalKit's dataset object for ``name`` whose file is read from ``data`` (with ``split_MMMU``
    the identity when ``unsplit``)."""
    from vlmeval.dataset import DATASET_CLASSES
    from vlmeval.smp import load

    for base in DATASET_CLASSES:
        if name in base.supported_datasets():
            members: dict[str, Any] = {"prepare_tsv": lambda self, url, file_md5=None: load(str(data))}
            if unsplit:
                members["split_MMMU"] = staticmethod(lambda msgs: msgs)
            return type(base.__name__, (base,), members)(dataset=name)
    _fail(BAD_INPUT, f"VLMEvalKit has no dataset named {name!r}")


def prompts_of(job: dict[str, Any]) -> dict[str, Any]:
    """Returns the dataset class and the ``build_prompt`` messages of every row of one job."""
    dataset = _dataset(job["dataset"], Path(job["data"]), bool(job.get("unsplit")))
    cls = type(dataset).__mro__[1]
    build = dataset.build_prompt
    rows = []
    for position in range(len(dataset.data)):
        line = dataset.data.iloc[position]
        messages = build(line)
        rows.append(
            {
                "index": str(line["index"]),
                "kinds": [message["type"] for message in messages],
                "texts": [str(message["value"]) for message in messages if message["type"] == "text"],
            }
        )
    return {"dataset": job["dataset"], "class": cls.__name__, "rows": rows}


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
        import vlmeval  # noqa: F401
    except Exception as error:  # any failure of the environment's import chain is a broken environment
        _fail(BROKEN_ENV, f"import vlmeval failed: {type(error).__name__}: {error}")
    out = {}
    for job in json.loads(args.jobs.read_text()):
        try:
            out[job["key"]] = prompts_of(job)
        except Exception as error:  # reported per job: the test names the benchmark and the error
            out[job["key"]] = {"error": f"{type(error).__name__}: {error}"}
    args.out.write_text(json.dumps(out, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()

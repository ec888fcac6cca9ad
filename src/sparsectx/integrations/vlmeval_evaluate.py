"""Runs VLMEvalKit's own ``evaluate`` of one dataset on a predictions file; run in the VLMEvalKit environment.

    <vlmeval env>/bin/python vlmeval_evaluate.py --dataset POPE --data data/POPE.tsv \
        --predictions preds.tsv --work-dir <empty dir> --judge exact_matching --out metrics.json
    SPARSECTX_VLMEVAL_JUDGE_KEY=<key or empty> <vlmeval env>/bin/python vlmeval_evaluate.py --dataset MathVista_MINI \
        ... --judge <served model id> --judge-api-base http://127.0.0.1:8000/v1/chat/completions

A standalone script (standard library, pandas and ``vlmeval`` only; ``sparsectx`` need not be installed
beside it), started by ``sparsectx.eval.vlmeval_bridge`` through ``subprocess``. It builds the dataset class
VLMEvalKit files ``--dataset`` under, but reads the rows from ``--data`` (the benchmark TSV the
predictions were made on) instead of ``$LMUData/<dataset>.tsv``: VLMEvalKit's own loader checks the file's
MD5 and downloads the official one on a mismatch, so a local or hand-made file could not be scored
offline. The predictions TSV (the dataset's columns without ``image``, plus ``prediction``) is read as
strings, as VLMEvalKit's inference keeps them, and written as the ``.xlsx`` file ``evaluate`` expects
(its Y/N and MCQ evaluators name their side files by replacing ``.xlsx``). ``--out`` receives, once
``evaluate`` has returned, the JSON ``{"dataset", "class", "judge", "judge_requests", "vlmeval_version",
"result"}`` where ``result`` is ``{"type": "table", "columns", "rows"}`` for a DataFrame or ``{"type": "dict",
"value"}``.

A judge (``--judge`` other than ``exact_matching``) is VLMEvalKit's own: the dataset's ``evaluate`` gets the
judge kwargs ``run.py`` passes (``model``, ``nproc``) plus ``api_base`` (``--judge-api-base``) and ``key`` (from
``$SPARSECTX_VLMEVAL_JUDGE_KEY``, never the command line), which ``build_judge`` hands to ``OpenAIWrapper``
(vlmeval/dataset/utils/judge_util.py ``build_judge``, vlmeval/api/gpt.py ``OpenAIWrapper.__init__``: a given
``key`` is sent, ``$OPENAI_API_KEY`` is not read). Three of VLMEvalKit's habits would otherwise change the
result silently, so: its yes/no, multiple-choice and LogicVista evaluators judge only when ``$OPENAI_API_KEY``
starts with ``sk-`` (vlmeval/smp/vlm.py ``gpt_key_set``), which is set to such a placeholder here (never sent);
they fall back to exact matching when the judge fails ``BaseAPI.working`` (vlmeval/api/base.py), which is
checked here first (exit 4); ``$LOCAL_LLM`` would replace the judge's model name (``build_judge``), so it is
removed. ``judge_requests`` counts the requests ``evaluate`` sent (``OpenAIWrapper.generate_inner`` calls).

Exit status: 0 done; 2 bad input (unknown dataset, unreadable file, a dataset that needs a judge given
``exact_matching``); 3 ``import vlmeval`` failed; 4 the judge did not answer.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from importlib import metadata
from pathlib import Path
from typing import Any, NoReturn

BAD_INPUT, BROKEN_ENV, JUDGE_DOWN = 2, 3, 4
EXACT_MATCHING = "exact_matching"
JUDGE_KEY_VARIABLE = "SPARSECTX_VLMEVAL_JUDGE_KEY"
GATE_PLACEHOLDER = "sk-sparsectx-placeholder-never-sent"
"""``$OPENAI_API_KEY`` while a judge runs: opens ``gpt_key_set``; the judge sends ``key`` instead."""
JUDGE_ONLY = (
    "MathVista",
    "MathVerse",
    "MathVision",
    "Physics_yale",
    "LogicVista",
    "LLaVABench",
    "MMVet",
    "QSpatial",
    "MMSci_Captioning",
    "OCR_Reasoning",
)
"""Dataset classes whose ``evaluate`` scores only with a judge (vlmeval/dataset/image_vqa.py: each builds one
without an ``exact_matching`` branch, or, LogicVista, returns nothing without one)."""


def _fail(code: int, message: str) -> NoReturn:
    """Exits with ``code`` after writing ``message`` on stderr (the caller shows it)."""
    print(message, file=sys.stderr)
    sys.exit(code)


def _version() -> str:
    """Returns the installed VLMEvalKit distribution and version (PyPI name first)."""
    for name in ("nvidia-vlmeval", "vlmeval", "ms-vlmeval"):
        try:
            return f"{name} {metadata.version(name)}"
        except metadata.PackageNotFoundError:
            continue
    return "vlmeval (version unknown)"


def _dataset_class(name: str) -> type:
    """Returns the VLMEvalKit class that supports dataset ``name`` (as ``build_dataset`` picks it)."""
    from vlmeval.dataset import DATASET_CLASSES

    for cls in DATASET_CLASSES:
        if name in cls.supported_datasets():
            return cls
    _fail(BAD_INPUT, f"VLMEvalKit has no dataset named {name!r}; set the dataset name VLMEvalKit spells")


def _read_strings(path: Path) -> Any:
    """Returns the TSV at ``path`` as a DataFrame of strings, the index column as int when all are digits."""
    import pandas as pd

    frame = pd.read_csv(path, sep="\t", dtype=str, keep_default_na=False)
    if "index" in frame and all(str(x).lstrip("-").isdigit() for x in frame["index"]):
        frame["index"] = [int(x) for x in frame["index"]]
    return frame


def _local_dataset(name: str, data: Path) -> Any:
    """Returns VLMEvalKit's dataset object for ``name`` with its rows read from ``data``."""
    from vlmeval.smp import load

    base = _dataset_class(name)
    local = type(base.__name__, (base,), {"load_data": lambda self, dataset: load(str(data))})
    return local(dataset=name)


def _jsonable(result: Any) -> dict[str, Any]:
    """Returns ``evaluate``'s DataFrame or dict as plain JSON values (numpy scalars become numbers)."""
    import pandas as pd

    plain = lambda value: value.item() if hasattr(value, "item") else value  # noqa: E731
    if isinstance(result, pd.DataFrame):
        rows = [[plain(v) for v in row] for row in result.itertuples(index=False)]
        return {"type": "table", "columns": [str(c) for c in result.columns], "rows": rows}
    if isinstance(result, dict):
        return {"type": "dict", "value": json.loads(json.dumps(result, default=plain))}
    _fail(BAD_INPUT, f"evaluate returned a {type(result).__name__}, neither a DataFrame nor a dict")


def _judge_kwargs(judge: str, api_base: str | None) -> dict[str, Any]:
    """Returns the judge kwargs for ``evaluate``: ``run.py``'s (``model``, ``nproc``) and, for a judge model, the
    endpoint and key that ``build_judge`` passes on to ``OpenAIWrapper``."""
    kwargs: dict[str, Any] = {"model": judge, "nproc": 1}
    if judge != EXACT_MATCHING:
        kwargs.update(api_base=api_base, key=os.environ.get(JUDGE_KEY_VARIABLE, ""))
    return kwargs


def _count_requests() -> list[int]:
    """Returns a one-item counter that ``OpenAIWrapper.generate_inner`` (every judge request) increments."""
    from vlmeval.api.gpt import OpenAIWrapper

    counter = [0]
    send = OpenAIWrapper.generate_inner

    def counted(self: Any, inputs: Any, **kwargs: Any) -> Any:
        counter[0] += 1
        return send(self, inputs, **kwargs)

    OpenAIWrapper.generate_inner = counted
    return counter


def _check_judge(kwargs: dict[str, Any]) -> None:
    """Exits ``JUDGE_DOWN`` unless the judge answers ``BaseAPI.working``'s request (one try each, no waits: the
    datasets' own check would fall back to exact matching in silence)."""
    from vlmeval.dataset.utils.judge_util import build_judge

    judge = build_judge(**{**kwargs, "retry": 1, "wait": 0})
    if not judge.working():
        _fail(JUDGE_DOWN, f"the judge {kwargs['model']!r} at {kwargs['api_base']} gave no usable answer")


def main(argv: list[str] | None = None) -> None:
    """Returns None after evaluating the predictions and writing ``--out``; exits non-zero on failure."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", required=True, help="VLMEvalKit's dataset name, e.g. POPE")
    parser.add_argument("--data", required=True, type=Path, help="the benchmark TSV the predictions answer")
    parser.add_argument("--predictions", required=True, type=Path, help="TSV: dataset columns + prediction")
    parser.add_argument("--work-dir", required=True, type=Path, help="empty directory for VLMEvalKit's files")
    parser.add_argument("--judge", default=EXACT_MATCHING, help="VLMEvalKit's judge (exact_matching or a model)")
    parser.add_argument("--judge-api-base", help="a judge's chat completions URL (its key: $" + JUDGE_KEY_VARIABLE)
    parser.add_argument("--out", required=True, type=Path, help="the JSON file written on success")
    args = parser.parse_args(argv)
    for path in (args.data, args.predictions):
        if not path.is_file():
            _fail(BAD_INPUT, f"no file at {path}")
    args.work_dir.mkdir(parents=True, exist_ok=True)
    if args.judge != EXACT_MATCHING and not args.judge_api_base:
        _fail(BAD_INPUT, f"--judge {args.judge} needs --judge-api-base (the judge's chat completions URL)")
    os.environ["LMUData"] = str(args.work_dir.resolve())  # noqa: SIM112  (VLMEvalKit spells it so)
    os.environ.pop("LOCAL_LLM", None)
    if args.judge != EXACT_MATCHING:
        os.environ["OPENAI_API_KEY"] = GATE_PLACEHOLDER
    try:
        import vlmeval  # noqa: F401  (imports torchvision, turns off HTTPS checks: this process only)
    except Exception as error:  # any failure of the environment's import chain is a broken environment
        _fail(BROKEN_ENV, f"import vlmeval failed: {type(error).__name__}: {error}")
    from vlmeval.smp import dump

    dataset = _local_dataset(args.dataset, args.data)
    name = type(dataset).__mro__[1].__name__
    if args.judge == EXACT_MATCHING and name in JUDGE_ONLY:
        _fail(
            BAD_INPUT,
            f"{name}'s evaluate scores only with a judge (vlmeval/dataset/image_vqa.py {name}.evaluate): set "
            "judge_model=<served model id> with judge_base_url / judge_api_key_env (docs/harnesses.md)",
        )
    kwargs = _judge_kwargs(args.judge, args.judge_api_base)
    if args.judge != EXACT_MATCHING:
        _check_judge(kwargs)
    requests = _count_requests()
    eval_file = args.work_dir / f"sparsectx_{args.dataset}.xlsx"
    dump(_read_strings(args.predictions), str(eval_file))
    result = dataset.evaluate(str(eval_file), **kwargs)
    payload = {
        "dataset": args.dataset,
        "class": name,
        "judge": args.judge,
        "judge_requests": requests[0],
        "vlmeval_version": _version(),
        "result": _jsonable(result),
    }
    args.out.write_text(json.dumps(payload, indent=2, sort_keys=True) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()

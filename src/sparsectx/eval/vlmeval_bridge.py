"""Scores a results leaf through VLMEvalKit itself, in its own environment, beside the project's scorers.

``python src/vlmeval_score.py result=<leaf>/<bench>.json`` (``conf/vlmeval_score.yaml``) turns the
benchmark's predictions into VLMEvalKit's prediction file, runs the dataset's own ``evaluate`` in the
environment ``make vlmeval-env`` builds (``sparsectx.integrations.vlmeval_evaluate``, run by path with that
environment's python, never imported here: ``import vlmeval`` imports torchvision and turns off HTTPS
certificate checks for the whole process), and adds VLMEvalKit's figures to the result JSON under
``vlmeval``, atomically, beside the project's ``metrics``.

``judge_model=exact_matching`` (the default) scores by VLMEvalKit's rules, offline. ``judge_model=<model id>``
hands the answers VLMEvalKit's own code puts to a judge (all of MathVista's, MathVerse's and LogicVista's
that its rules cannot read; HallusionBench's, POPE's, MME's Unknown yes/no answers; the multiple-choice
answers no option is read from) to the OpenAI-compatible endpoint ``judge_base_url`` (a local vLLM/LMDeploy
server, or OpenAI's API when null), with the key in the variable ``judge_api_key_env``; VLMEvalKit's
``build_judge`` (vlmeval/dataset/utils/judge_util.py) builds the judge the datasets ask. A judge's key goes
only over https or to a loopback host (the rules of ``sparsectx.eval.judge.check_endpoint``), is required for
any other host, and is passed to the environment's process in its environment, never on its command line.

The prediction file holds the benchmark TSV's rows (every column but ``image``, as VLMEvalKit's inference
writes them) for the scored items, with ``prediction`` = the answer the project extracted (``answer`` of the
predictions JSONL, what the project's scorer read; ``prediction=output`` passes the raw generation).
Nothing is written unless every step succeeded: a TSV that lacks a column the dataset's ``evaluate``
reads, a POPE category outside adversarial/popular/random, a benchmark file changed since the predictions
were made, a missing or broken environment each raise naming the file, the column or the command.
"""

from __future__ import annotations

import csv
import json
import math
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from sparsectx.eval.judge import chat_completions_url, check_endpoint, is_loopback
from sparsectx.eval.results import write_json
from sparsectx.eval.scorers import SCORERS
from sparsectx.hashing import file_sha256
from sparsectx.io import read_jsonl
from sparsectx.paths import predictions_path
from sparsectx.redact import redact_text

ENV_COMMAND = "make vlmeval-env"
SCRIPT = Path(__file__).resolve().parents[1] / "integrations" / "vlmeval_evaluate.py"
BAD_INPUT, BROKEN_ENV, JUDGE_DOWN = 2, 3, 4
"""Exit statuses of ``vlmeval_evaluate.py``."""
PREDICTION_SOURCES = ("answer", "output")
EXACT_MATCHING = "exact_matching"
"""VLMEvalKit's judge name for its rules alone (``run.py --judge exact_matching``)."""
OPENAI_BASE_URL = "https://api.openai.com/v1"
"""Where ``judge_base_url=null`` sends a judge's requests: VLMEvalKit's default endpoint (vlmeval/api/gpt.py
``APIBASES['OFFICIAL']``, its ``/chat/completions``)."""
JUDGE_KEY_VARIABLE = "SPARSECTX_VLMEVAL_JUDGE_KEY"
"""The variable that carries the judge's key to ``vlmeval_evaluate.py`` (the environment, not the command line)."""


@dataclass(frozen=True)
class BridgeConfig:
    """``conf/vlmeval_score.yaml``: which result to score and with which environment."""

    result: str
    """A result JSON of ``evaluate.py`` (``<leaf>/<bench>.json``); its predictions JSONL sits beside it."""
    env: str = ".vlmeval-env"
    judge_model: str = EXACT_MATCHING
    """VLMEvalKit's judge (``run.py --judge``): ``exact_matching`` (its rules) or the served model's id. Not
    ``judge``: Hydra would read ``judge=`` as a choice of the config group conf/judge/ (``judge_answers.py``'s)."""
    judge_base_url: str | None = None
    """A judge's OpenAI-compatible endpoint (``/chat/completions`` appended); None = ``OPENAI_BASE_URL``."""
    judge_api_key_env: str | None = None
    """The variable holding the judge's key (sent as a Bearer token); None: no key (a loopback endpoint only)."""
    dataset: str | None = None
    """VLMEvalKit's dataset name; None = the benchmark config's ``dataset_name``."""
    prediction: str = "answer"
    timeout_s: int = 3600

    def __post_init__(self) -> None:
        if self.prediction not in PREDICTION_SOURCES:
            raise ValueError(f"prediction={self.prediction!r}: choose one of {PREDICTION_SOURCES}")
        if self.timeout_s < 1:
            raise ValueError(f"timeout_s={self.timeout_s} must be >= 1")
        check_judge(self)

    @property
    def judged(self) -> bool:
        """Whether a judge model scores (not VLMEvalKit's rules alone)."""
        return self.judge_model != EXACT_MATCHING

    @property
    def judge_endpoint(self) -> str:
        """The judge's base URL: ``judge_base_url``, else OpenAI's API."""
        return self.judge_base_url or OPENAI_BASE_URL


def check_judge(cfg: BridgeConfig) -> None:
    """Returns None if the judge settings are usable; raises ``ValueError`` naming the setting otherwise (nothing
    is read from the environment and nothing is sent).

    Refused: ``judge_base_url``/``judge_api_key_env`` without a judge; a judge name with ``/`` (VLMEvalKit names
    its files after the judge, e.g. vlmeval/dataset/image_vqa.py ``MathVista.evaluate``'s
    ``<eval file>_<judge>.xlsx``, so ``/`` would be a folder); credentials in the URL (the key goes through
    ``judge_api_key_env`` only); what ``sparsectx.eval.judge.check_endpoint`` refuses (not http(s), a key over
    plain http to another machine); no key for an endpoint that is not this machine.
    """
    if not cfg.judged:
        for key in ("judge_base_url", "judge_api_key_env"):
            if getattr(cfg, key) is not None:
                raise ValueError(
                    f"{key}={getattr(cfg, key)!r} is used only with a judge: set judge_model=<the served model id>, "
                    f"or {key}=null for judge_model=exact_matching"
                )
        return
    if "/" in cfg.judge_model:
        raise ValueError(
            f"judge_model={cfg.judge_model!r}: VLMEvalKit names its files after the judge, so a '/' would make a "
            "folder; serve the model under a name without one (vLLM: --served-model-name) and set judge_model= to it"
        )
    url = urlsplit(cfg.judge_endpoint)
    if "@" in url.netloc or url.query:
        raise ValueError(
            "credentials in judge_base_url (user:token@ or a query) are not passed to VLMEvalKit's judge: put the "
            "key in an environment variable and name it with judge_api_key_env"
        )
    try:
        check_endpoint(cfg.judge_endpoint, cfg.judge_api_key_env)
    except ValueError as err:  # its messages name judge_answers.py's keys (judge.base_url): name this config's
        message = str(err).replace("judge.base_url", "judge_base_url").replace("judge.api_key_env", "judge_api_key_env")
        raise ValueError(message) from err
    if cfg.judge_api_key_env is None and not is_loopback(url.hostname):
        raise ValueError(
            f"judge_model={cfg.judge_model} sends the answers to {cfg.judge_endpoint}, which needs a key: set "
            "judge_api_key_env=<the variable holding it> (e.g. OPENAI_API_KEY), or judge_base_url="
            "http://127.0.0.1:<port>/v1 for a local OpenAI-compatible server (vLLM, LMDeploy)"
        )


def judge_environment(cfg: BridgeConfig) -> dict[str, str]:
    """Returns the variables ``vlmeval_evaluate.py`` is run with for ``cfg``'s judge: the key (read here, so a
    missing one is refused before anything runs), and for a loopback endpoint ``NO_PROXY`` naming its host (a
    loopback request never goes through the environment's proxy, as in ``sparsectx.eval.judge.openai_chat``).

    Raises:
        ValueError: ``judge_api_key_env`` names a variable that is not set.
    """
    if not cfg.judged:
        return {}
    key = ""
    if cfg.judge_api_key_env is not None:
        key = os.environ.get(cfg.judge_api_key_env, "")
        if not key:
            raise ValueError(
                f"judge_api_key_env={cfg.judge_api_key_env} names the variable holding the judge's key, but "
                f"{cfg.judge_api_key_env} is not set: export it, or set judge_api_key_env=null for a loopback "
                "server that needs no key"
            )
    out = {JUDGE_KEY_VARIABLE: key}
    host = urlsplit(cfg.judge_endpoint).hostname
    if is_loopback(host):
        for name in ("NO_PROXY", "no_proxy"):
            out[name] = ",".join(part for part in (os.environ.get(name, ""), str(host)) if part)
    return out


def env_python(env: str | Path) -> Path:
    """Returns the python of the VLMEvalKit environment; raises naming the command that builds it."""
    python = Path(env) / "bin" / "python"
    if not python.is_file():
        raise FileNotFoundError(
            f"no VLMEvalKit environment at {Path(env).resolve()} ({python} is missing): build it with "
            f"`{ENV_COMMAND}` (or set env= to one that has nvidia-vlmeval installed)"
        )
    return python


def read_rows(path: Path) -> tuple[list[str], dict[str, dict[str, str]]]:
    """Returns the header and the rows by ``index`` of a benchmark TSV, every cell a string as written."""
    csv.field_size_limit(2**31 - 1)
    with open(path, encoding="utf-8", newline="") as handle:
        reader = csv.DictReader(handle, delimiter="\t")
        header = list(reader.fieldnames or [])
        if "index" not in header:
            raise ValueError(f"{path}: no 'index' column (header {header}); not a VLMEvalKit-layout TSV")
        rows = {row["index"]: row for row in reader}
    return header, rows


def check_columns(path: Path, header: list[str], scorer: str, rows: dict[str, dict[str, str]]) -> None:
    """Raises ``ValueError`` naming the file and column when ``evaluate`` could not read the benchmark.

    Read from the scorer's VLMEvalKit reading (``ScorerSpec.vlmeval``; none: nothing to check): a column of its
    ``columns`` missing, or a row its ``row_problem`` finds VLMEvalKit would misread (a yes/no answer not spelt
    ``Yes``/``No``, a POPE category outside adversarial/popular/random, a HallusionBench index without
    set/figure/question fields).
    """
    reading = SCORERS.get(scorer).vlmeval
    if reading is None:
        return
    missing = [column for column in reading.columns if column not in header]
    if missing:
        raise ValueError(
            f"{path}: no column {', '.join(repr(c) for c in missing)}, which VLMEvalKit's evaluate reads for "
            f"scorer {scorer!r} (header: {header}); use VLMEvalKit's file for this benchmark"
        )
    if reading.row_problem is None:
        return
    for index, row in rows.items():
        problem = reading.row_problem(index, row)
        if problem is not None:
            raise ValueError(f"{path}: {problem}")


def write_prediction_tsv(
    out: Path, header: list[str], rows: dict[str, dict[str, str]], predictions: dict[str, str]
) -> None:
    """Writes VLMEvalKit's prediction table: the scored rows' columns but ``image``, then ``prediction``."""
    columns = [c for c in header if c != "image"] + ["prediction"]
    with open(out, "w", encoding="utf-8", newline="") as handle:
        writer = csv.writer(handle, delimiter="\t", lineterminator="\n")
        writer.writerow(columns)
        for index, prediction in predictions.items():
            writer.writerow([*(rows[index][c] for c in columns[:-1]), prediction])


LABEL_COLUMNS = ("split", "cycle", "type")
"""Columns that name a row of VLMEvalKit's tables (report_acc's split, report_acc_hrbench's cycle and type)."""


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def flatten(result: dict[str, Any]) -> dict[str, float]:
    """Returns ``evaluate``'s output as ``{name: number}``.

    A table row is named by its label cells (``LABEL_COLUMNS`` and any other text cell, joined by
    ``/``): ``<split>/<column>`` for report_acc and POPE_rating, ``<cycle>/<type>/accuracy`` for HR-Bench,
    the column alone for a one-row numeric table (MME), ``<row>/<column>`` for other numeric tables;
    nested dicts join their keys with ``/`` (OCRBench), list items their positions (MVBench's ``overall/0``).
    Non-numeric values are left out.
    """
    out: dict[str, float] = {}

    def put(key: str, value: Any) -> None:
        if isinstance(value, dict):
            for name, inner in value.items():
                put(f"{key}/{name}" if key else str(name), inner)
        elif isinstance(value, list):  # the video ratings' [hits, rows, "xx.xx%"]
            for number, inner in enumerate(value):
                put(f"{key}/{number}", inner)
        elif _number(value):
            out[key] = float(value)

    if result["type"] == "dict":
        put("", result["value"])
        return out
    columns, rows = result["columns"], result["rows"]
    for number, row in enumerate(rows):
        cells = dict(zip(columns, row, strict=True))
        labels = [c for c in columns if c in LABEL_COLUMNS or isinstance(cells[c], str)]
        label = "/".join(str(cells.pop(c)) for c in labels) or ("" if len(rows) == 1 else str(number))
        put(label, cells)
    return out


def run_evaluate(
    python: Path, dataset: str, data: Path, predictions: Path, work: Path, cfg: BridgeConfig
) -> dict[str, Any]:
    """Returns the JSON ``vlmeval_evaluate.py`` wrote after running it in the VLMEvalKit environment with
    ``cfg``'s judge (its key in the process's environment: ``judge_environment``).

    Raises:
        RuntimeError: the environment's ``import vlmeval`` fails (names ``make vlmeval-env``), the judge does not
            answer (names its endpoint), or the script fails or times out (names the command and the end of its
            stderr).
    """
    out = work / "vlmeval_result.json"
    options = {
        "--dataset": dataset,
        "--data": data,
        "--predictions": predictions,
        "--work-dir": work / "vlmeval",
        "--judge": cfg.judge_model,
        "--out": out,
    }
    command = [str(python), str(SCRIPT), *(str(part) for option in options.items() for part in option)]
    if cfg.judged:
        command += ["--judge-api-base", chat_completions_url(cfg.judge_endpoint)]
    shown = " ".join(command)
    env = {**os.environ, **judge_environment(cfg)}
    env.pop("SPARSECTX_VLMEVAL_MODELS", None)  # vlmeval_register's models file: run.py's, never read for scoring
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=cfg.timeout_s, check=False, env=env)
    except subprocess.TimeoutExpired as err:
        raise RuntimeError(f"VLMEvalKit's evaluate ran past timeout_s={cfg.timeout_s}: {shown}") from err
    except OSError as err:
        raise RuntimeError(f"could not start {python} ({err}); rebuild it with `{ENV_COMMAND}`") from err
    tail = done.stderr.strip()[-2000:]
    if done.returncode == BROKEN_ENV:
        raise RuntimeError(f"the VLMEvalKit environment is broken ({tail}); rebuild it with `{ENV_COMMAND}`")
    if done.returncode == JUDGE_DOWN:
        raise RuntimeError(
            f"the judge {cfg.judge_model!r} at {cfg.judge_endpoint} did not answer VLMEvalKit's check ({tail[-500:]}); "
            "start the server or fix judge_base_url / judge_api_key_env"
        )
    if done.returncode != 0 or not out.is_file():
        raise RuntimeError(f"VLMEvalKit's evaluate failed (exit {done.returncode}): {shown}\n{tail}")
    return json.loads(out.read_text(encoding="utf-8"))


def _predictions(path: Path, rows: dict[str, dict[str, str]], n_scored: int, source: str) -> dict[str, str]:
    """Returns index -> prediction text of a finished predictions JSONL (a miss becomes "")."""
    records = read_jsonl(path)
    if not records:
        raise FileNotFoundError(f"no predictions at {path}; run evaluate.py for this benchmark first")
    if len(records) != n_scored:
        raise ValueError(f"{path} holds {len(records)} rows, its result JSON scored {n_scored}; rerun evaluate.py")
    out = {}
    for record in records:
        if record["id"] not in rows:
            raise ValueError(f"{path}: prediction id {record['id']!r} is no index of the benchmark TSV")
        out[record["id"]] = record.get(source) or ""
    return out


def _load_result(path: Path) -> dict[str, Any]:
    """Returns a result JSON of ``evaluate.py``; raises naming the file when it is missing or not one."""
    if not path.is_file():
        raise FileNotFoundError(f"no result JSON at {path}; run evaluate.py for this benchmark first")
    payload = json.loads(path.read_text(encoding="utf-8"))
    needed = ("benchmark", "scorer", "metrics", "n_scored", "provenance")
    if not isinstance(payload, dict) or any(key not in payload for key in needed):
        raise ValueError(f"{path} is not a result JSON of evaluate.py (it needs the keys {needed})")
    return payload


def _benchmark_file(result: Path, payload: dict[str, Any]) -> tuple[dict[str, Any], Path]:
    """Returns the benchmark's config and TSV, checked to be the file the predictions were made on."""
    bench = payload["benchmark"]
    spec = payload["provenance"]["config"]["bench"][bench]
    data = Path(spec["path"])
    if not data.is_file():
        raise FileNotFoundError(f"{result}: its benchmark file {data.resolve()} (bench.{bench}.path) is missing")
    recorded = payload["provenance"].get("inputs", {}).get("bench_sha256")
    if recorded is not None and file_sha256(data) != recorded:
        raise ValueError(
            f"{data} changed since {result} was evaluated (its sha256 is not the recorded bench_sha256); "
            "rerun evaluate.py on it first"
        )
    return spec, data


def _compare(scorer: str, headline: str | None, metrics: dict[str, float], project: dict[str, float]) -> dict[str, Any]:
    """Returns VLMEvalKit's headline beside the project metric it should equal (None where none is known: the
    scorer's ``ScorerSpec.vlmeval``); for a scorer with several headlines, VLMEvalKit's figure for the result's
    (``headline``, ``ScorerSpec.vlmeval_headlines``)."""
    spec = SCORERS.get(scorer)
    reading = spec.vlmeval if headline is None else spec.vlmeval_headlines[headline]
    if reading is None:
        return {"score": None, "headline": None, "project_key": None, "project_score": None, "agrees": None}
    try:
        headline = reading.headline(metrics)
    except KeyError as err:
        raise RuntimeError(
            f"VLMEvalKit's result has no {err} for {reading.describe!r}; it reported {sorted(metrics)}"
        ) from err
    score = None if headline is None else float(headline)
    mine = project.get(reading.project_key)
    agrees = None if mine is None or score is None else math.isclose(score, mine, rel_tol=1e-9, abs_tol=1e-6)
    return {
        "score": score,
        "headline": reading.describe,
        "project_key": reading.project_key,
        "project_score": mine,
        "agrees": agrees,
    }


def score_with_vlmeval(cfg: BridgeConfig) -> dict[str, Any]:
    """Returns the ``vlmeval`` block after adding it to the result JSON (atomically, only when all succeeded).

    VLMEvalKit's side files (its ``.xlsx`` prediction file, ``_auxmatch``, ``_score``/``_acc`` tables) stay
    in ``<leaf>/<bench>.vlmeval/``, emptied first: VLMEvalKit reuses a stale ``_auxmatch`` file it finds.
    """
    judge_environment(cfg)  # a key variable that is not set is refused before anything else
    result = Path(cfg.result)
    payload = _load_result(result)
    bench, scorer = payload["benchmark"], payload["scorer"]
    spec, data = _benchmark_file(result, payload)
    python = env_python(cfg.env)
    header, rows = read_rows(data)
    check_columns(data, header, scorer, rows)
    predictions = _predictions(predictions_path(result.parent, bench), rows, payload["n_scored"], cfg.prediction)
    work = result.parent / f"{bench}.vlmeval"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    write_prediction_tsv(work / "predictions.tsv", header, rows, predictions)
    dataset = cfg.dataset or spec["dataset_name"]
    raw = run_evaluate(python, dataset, data, work / "predictions.tsv", work, cfg)
    metrics = flatten(raw["result"])
    compared = _compare(scorer, spec.get("headline"), metrics, payload["metrics"])
    if cfg.judged:  # a judge reads answers the project's rule cannot: its figure is not expected to be equal
        compared["agrees"] = None
    block = {
        "dataset": dataset,
        "class": raw["class"],
        "judge": raw["judge"],
        "version": raw["vlmeval_version"],
        "judge_endpoint": redact_text(cfg.judge_endpoint) if cfg.judged else None,
        "judge_requests": raw["judge_requests"],
        "prediction": cfg.prediction,
        "n": len(predictions),
        "metrics": metrics,
        **compared,
    }
    write_json(result, {**payload, "vlmeval": block})
    return block


def summary_line(result: str | Path, block: dict[str, Any]) -> str:
    """Returns one line: the result file, VLMEvalKit's dataset and headline, the project's, whether equal."""

    def fmt(value: float | None) -> str:
        return "-" if value is None else f"{value:.4f}"

    agrees = {True: "equal", False: "DIFFER", None: "-"}[block["agrees"]]
    return (
        f"{block['dataset']:<16} vlmeval {fmt(block['score']):>10}  sparsectx {fmt(block['project_score']):>10}"
        f"  {agrees:<6} {result}"
    )

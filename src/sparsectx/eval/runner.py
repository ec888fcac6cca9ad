"""The job behind ``src/evaluate.py``: ``run(cfg)`` scores, samples or times one model x pruner x budget.

Modes (``mode=``): ``greedy`` writes per benchmark ``<leaf>/<bench>.json`` (a ``BenchResult``) and
``<leaf>/<bench>.predictions.jsonl``; ``passk`` writes ``<leaf>/<bench>.passk.json``
(``sparsectx.eval.passk_mode``; benchmarks run together under ``passk.cohort=paper_numeric`` also
``passk_pool.json``); ``efficiency`` writes one JSON beside the budget leaves
(``sparsectx.eval.efficiency``). The leaf is ``sparsectx.paths.leaf_dir(results_root, experiment,
model.name, method, pruner.name, budget)``; with ``checkpoint=`` set, its training record names the method
(``sparsectx.eval.trained``), so a trained model never writes the untrained ``base`` leaf. A benchmark
whose output holds the same run-key hash (config, benchmark file content, weights) is skipped unless
``force=true``; an interrupted benchmark resumes from its predictions file. Greedy evaluation splits over
processes with ``shard`` (``sparsectx.eval.sharding``): a shard writes its part, a merge scores the parts.
Each benchmark's outputs are written under a lock file (``output_lock``): a second evaluation of the same
outputs is refused at once, naming the job that holds them.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf
from tqdm import tqdm

from sparsectx.data import Item, Skip
from sparsectx.data.media import decode_chunks
from sparsectx.eval.checkpoints import eval_model_info, load_eval_model, weights_folder
from sparsectx.eval.config import BenchSpec, EvalConfig, load_eval_config
from sparsectx.eval.extract import EXTRACTOR_VERSION
from sparsectx.eval.protocol import (
    bench_digest,
    bench_files,
    check_scorable,
    generate_rows,
    load_bench_items,
    sample_id,
    scored_item,
    video_source,
)
from sparsectx.eval.results import (
    RUN_KEY_HASH,
    BenchResult,
    as_dict,
    finished,
    provenance,
    resume_rows,
    run_key,
    write_json,
    write_rows,
)
from sparsectx.eval.scorers import score_items
from sparsectx.eval.sharding import Shard, barrier, merge_parts, part_path, pin_local_gpu, resolve_shard, shard_span
from sparsectx.eval.slots_budget import SlotChoice, bench_slots, record_slots, use_slots
from sparsectx.eval.summary import (
    efficiency_summary,
    greedy_summary,
    is_efficiency_output,
    is_passk_output,
    passk_summary,
    summary_line,
)
from sparsectx.eval.trained import leaf_method
from sparsectx.generation import SamplingConfig
from sparsectx.hashing import config_hash
from sparsectx.io import append_jsonl
from sparsectx.locks import exclusive
from sparsectx.models import LoadedModel
from sparsectx.models.loading import snapshot_identity
from sparsectx.paths import budget_tag, leaf_dir, path_name, predictions_path, result_path
from sparsectx.protocol.runlog import PROTOCOL_STAGES, run_deviations
from sparsectx.pruning import declared_signals
from sparsectx.tracking import Tracker, start_run

log = logging.getLogger(__name__)


@dataclass
class EvalJob:
    """What every benchmark of one invocation shares: the config, the leaf, the tracker and the model.

    The model and the tracker start on first use, so an invocation whose outputs are all finished loads
    nothing and opens no W&B run.
    """

    cfg: EvalConfig
    resolved: dict[str, Any]
    """The composed config with interpolations resolved (saved in every output)."""
    leaf: Path
    shard: Shard
    """This process's share of every benchmark (count 1: all of it), or a merge of the shares."""
    slots: dict[str, SlotChoice]
    """Each benchmark's engine batch and queue (``slots_budget.bench_slots``: ``auto`` resolved)."""
    _model: tuple[LoadedModel, dict[str, Any]] | None = field(default=None, repr=False)
    _tracker: Tracker | None = field(default=None, repr=False)
    _weights: str | None = field(default=None, repr=False)
    _digests: dict[str, str] = field(default_factory=dict, repr=False)

    def use_slots(self, bench: str) -> None:
        """Sets the config's and the record's batch and queue to ``bench``'s, for the benchmark about to run (they run
        one after another): what its engine calls, shard plan, result and run key then hold."""
        use_slots(self.cfg, self.slots[bench])
        record_slots(self.resolved, self.slots[bench])

    def model(self) -> tuple[LoadedModel, dict[str, Any]]:
        """Returns the loaded model and its provenance, loading it on first use (finished runs never load)."""
        if self._model is None:
            self._model = load_eval_model(self.cfg.model, self.cfg.checkpoint, self.cfg.seed)
            pruner, adapter = self.cfg.pruner, self._model[0].adapter
            adapter.vision_signals = declared_signals(pruner.name, pruner.params, self.cfg.seed)
        return self._model

    def model_info(self) -> dict[str, Any]:
        """Returns the model's provenance, from its files when it was not loaded (a merge loads no model)."""
        if self._model is not None:
            return self._model[1]
        return eval_model_info(self.cfg.model, self.cfg.checkpoint)

    def tracker(self) -> Tracker:
        """Returns the run's tracker, starting it on first use."""
        if self._tracker is None:
            self._tracker = _tracker(self.cfg, self.resolved)
        return self._tracker

    def close(self) -> None:
        """Finishes the tracker if it was started."""
        if self._tracker is not None:
            self._tracker.finish()

    def key_hash(self, bench: str) -> tuple[dict[str, Any], str]:
        """Returns the run key of ``bench`` and its hash.

        The key holds the content of every input, not only its path: the benchmark file's sha256
        (``protocol.bench_digest``), so a file fixed or rebuilt in place is evaluated again, and the weights'
        identity (``loading.snapshot_identity``: a hub snapshot's commit, else a fingerprint of the folder), so
        a checkpoint retrained in place or a hub id updated upstream is too.
        """
        if self._weights is None:
            self._weights = snapshot_identity(weights_folder(self.cfg.model, self.cfg.checkpoint))
        if bench not in self._digests:
            self._digests[bench] = bench_digest(self.cfg.bench[bench])
        key = {
            **run_key(self.resolved, bench),
            "bench_sha256": self._digests[bench],
            "weights": self._weights,
        }
        return key, config_hash(key, **RUN_KEY_HASH)


def run(cfg: DictConfig) -> list[Path]:
    """Returns the output files after running the configured mode on every chosen benchmark.

    Raises:
        ValueError / KeyError: the config is invalid (unknown keys, out-of-range values, unknown scorer).
        FileNotFoundError: a benchmark file is missing (the message says how to build or get it).
        RuntimeError: a benchmark's failure rate passed ``max_failure_rate``.
    """
    from sparsectx.eval.efficiency import run_efficiency
    from sparsectx.eval.passk_mode import run_passk, write_pool

    eval_cfg = load_eval_config(cfg)
    for line in run_deviations(cfg, PROTOCOL_STAGES[eval_cfg.mode]):  # the protocol card lists them too
        log.warning("protocol: %s", line)
    resolved = OmegaConf.to_container(cfg, resolve=True)
    del resolved["shard"]  # how the work is split is no part of the result: a merge records one process's config
    shard = resolve_shard(eval_cfg.shard, os.environ)
    method = leaf_method(eval_cfg.method_name, eval_cfg.checkpoint)  # a conflicting method= raises
    if method != eval_cfg.method_name:  # method= left out: the checkpoint's record names it
        eval_cfg.method = resolved["method"] = {"name": method}
    for spec in eval_cfg.bench.values():  # fail before loading anything when an input is missing
        path_name(spec.name, f"bench.{spec.name}.name")  # it names the benchmark's output files
        if eval_cfg.mode != "efficiency" or spec.name == eval_cfg.efficiency.bench:
            bench_files(spec)
    weights = weights_folder(eval_cfg.model, eval_cfg.checkpoint)  # a hub id: its pinned snapshot, or an error
    eval_cfg.pruner.check_model(weights)  # an in-LLM K against the LLM's depth, from config.json alone
    # batch_size / queue_size auto -> ints per benchmark, before anything reads them or a run key is hashed
    slots = bench_slots(eval_cfg, generates=not shard.merge)
    if not shard.one_process:  # more shards than a benchmark's engine calls: refused before any work
        for spec in eval_cfg.bench.values():
            count = len(load_bench_items(spec, eval_cfg.max_skip_fraction).items)
            shard_span(count, slots[spec.name].queue_size, shard.index, shard.count, spec.name)
    if shard.barrier:
        pin_local_gpu(eval_cfg.model.device, os.environ)
    job = EvalJob(eval_cfg, resolved, leaf_of(eval_cfg), shard, slots)
    try:
        if eval_cfg.mode == "efficiency":
            job.use_slots(eval_cfg.efficiency.bench)
            with output_lock(job, None):
                return [run_efficiency(job)]
        step = evaluate_benchmark if eval_cfg.mode == "greedy" else run_passk
        outs = [held(job, spec, step) for spec in eval_cfg.bench.values()]
        pool = write_pool(job, outs) if eval_cfg.mode == "passk" else None
        if pool is not None:
            outs.append(pool)
        return _merge_after_barrier(job, outs) if shard.barrier else outs
    finally:
        job.close()


def _merge_after_barrier(job: EvalJob, parts: list[Path]) -> list[Path]:
    """Returns rank 0's merged results (another rank: its own parts) once every torchrun rank wrote its parts."""
    barrier(job.cfg.shard.barrier_timeout_s)
    if job.shard.index != 0:
        return parts
    job.shard = replace(job.shard, merge=True)
    return [held(job, spec, evaluate_benchmark) for spec in job.cfg.bench.values()]


def output_lock(job: EvalJob, bench: str | None) -> AbstractContextManager[None]:
    """Returns the lock (``sparsectx.locks.exclusive``) of the files this process writes for ``bench`` (None:
    the efficiency file), so that a second evaluation of them is refused at once instead of interleaving rows.

    One lock per benchmark and mode, not per leaf: the pipeline scores a leaf's benchmarks as parallel jobs.
    ``<leaf>/<bench>.lock`` guards the predictions and result (a one-process run, or the merge of shards),
    ``<bench>.shard-<i>-of-<n>.lock`` one shard's part, ``<bench>.passk.lock`` the Pass@K draws and summary,
    and ``efficiency.lock`` beside ``efficiency.json`` that file.
    """
    from sparsectx.eval.efficiency import efficiency_path

    cfg, shard = job.cfg, job.shard
    if bench is None:
        out = efficiency_path(cfg.results_root, cfg.experiment, cfg.model.name, cfg.method_name, cfg.pruner.name)
        return exclusive(out.with_suffix(".lock"), "evaluation", f"{out}")
    if cfg.mode == "passk":
        name = f"{bench}.passk"
    elif shard.merge or shard.one_process:
        name = bench
    else:
        name = f"{bench}.shard-{shard.index}-of-{shard.count}"
    return exclusive(job.leaf / f"{name}.lock", "evaluation", f"the {cfg.mode} outputs of {bench} in {job.leaf}")


def held(job: EvalJob, spec: BenchSpec, step: Callable[[EvalJob, BenchSpec], Path]) -> Path:
    """Returns ``step(job, spec)`` (one benchmark's evaluation) run under its ``output_lock``, with its batch and
    queue (``EvalJob.use_slots``)."""
    job.use_slots(spec.name)
    with output_lock(job, spec.name):
        return step(job, spec)


def leaf_of(cfg: EvalConfig) -> Path:
    """Returns the results leaf of the config (a pure function of it)."""
    return leaf_dir(cfg.results_root, cfg.experiment, cfg.model.name, cfg.method_name, cfg.pruner.name, cfg.budget)


def _tracker(cfg: EvalConfig, resolved: dict[str, Any]) -> Tracker:
    """Returns the W&B run of this evaluation job: one per leaf, seed, mode and benchmarks (a per-benchmark job
    has its own), under the id they name (``sparsectx.tracking.run_id``), so a rerun continues it."""
    budget = budget_tag(cfg.budget)
    benches = [cfg.efficiency.bench] if cfg.mode == "efficiency" else sorted(cfg.bench)
    name = f"eval/{cfg.model.name}/{cfg.method_name}/{cfg.pruner.name}/b{budget}/s{cfg.seed}/{cfg.mode}/"
    cell = {"model": cfg.model.name, "method": cfg.method_name, "pruner": cfg.pruner.name, "budget": budget}
    cell |= {"seed": cfg.seed, "mode": cfg.mode, "bench": benches}
    return start_run(cfg.logger, name + "+".join(benches), cfg.experiment, "evaluate", [], resolved, cell=cell)


def evaluate_benchmark(job: EvalJob, spec: BenchSpec) -> Path:
    """Returns the result JSON of one benchmark, generating only the predictions not already on disk.

    A shard of a data-parallel run (``shard.count`` > 1) generates only its share, into its predictions
    part, and returns that part; a merge generates nothing and scores the finished parts instead.
    """
    key, chash = job.key_hash(spec.name)
    out, preds = result_path(job.leaf, spec.name), predictions_path(job.leaf, spec.name)
    if not job.cfg.force and finished(out, chash):
        log.info("%s: finished with inputs and config %s, skipping (force=true recomputes)", spec.name, chash)
        return out
    started = time.perf_counter()
    items, skipped, dropped = load_bench_items(spec, job.cfg.max_skip_fraction)
    check_scorable(items, spec)  # a file the scorer refuses as a whole fails now, not after the generation
    shard = job.shard
    if shard.merge:
        ids = [sample_id(item) for item in items]
        done = merge_parts(job.leaf, spec.name, ids, job.cfg.queue_size, shard.count, chash)
        return _finish(job, spec, (items, skipped, dropped), done, key, 0, started)
    if shard.one_process:
        done, resumed = _generate(job, spec, items, preds, chash)
        return _finish(job, spec, (items, skipped, dropped), done, key, resumed, started)
    span = shard_span(len(items), job.cfg.queue_size, shard.index, shard.count, spec.name)
    part, mine = part_path(job.leaf, spec.name, shard.index, shard.count), items[span.start : span.stop]
    done, _ = _generate(job, spec, mine, part, chash)
    write_rows(part, [done[sample_id(item)] for item in mine])  # the finished part, in item order
    log.info(
        "%s: shard %d of %d wrote items %d-%d to %s",
        spec.name,
        shard.index,
        shard.count,
        span.start,
        span.stop - 1,
        part,
    )
    return part


def _generate(
    job: EvalJob, spec: BenchSpec, items: list[Item], path: Path, chash: str
) -> tuple[dict[str, dict[str, Any]], int]:
    """Returns every item's prediction row by sample id and how many came from ``path``'s interrupted run.

    Missing rows are generated ``queue_size`` items per engine call and appended to ``path`` after each call.
    """
    cfg = job.cfg
    if cfg.force:
        path.unlink(missing_ok=True)
    done = resume_rows(path, chash, {sample_id(item) for item in items}, "id")
    resumed = len(done)
    todo = [item for item in items if sample_id(item) not in done]
    loaded = job.model()[0]  # also when every row is resumed: loading verifies a trained checkpoint's weights
    sampling = cfg.decoding.sampling(spec.max_new_tokens)
    log.info("%s: %d items (%d resumed) -> %s", spec.name, len(items), resumed, path)
    with tqdm(total=len(items), initial=resumed, desc=spec.name, unit="item") as bar:
        for chunk in decode_chunks(todo, cfg.queue_size, video_source(spec)):  # within media.decode_budget_mib
            rows = generate_rows(
                loaded,
                chunk,
                spec,
                cfg.prompt,
                cfg.pruner,
                cfg.budget,
                cfg.seed,
                sampling,
                cfg.engine,
                cfg.batch_size,
            )
            records = [{**asdict(row), "config_hash": chash} for row in rows]
            append_jsonl(path, records)
            done.update((r["id"], r) for r in records)
            bar.update(len(chunk))
            log.info("%s: %d/%d items generated", spec.name, len(done), len(items))
    return done, resumed


def _finish(
    job: EvalJob,
    spec: BenchSpec,
    rows: tuple[list[Item], list[Skip], list[Skip]],
    done: dict[str, dict[str, Any]],
    key: dict[str, Any],
    resumed: int,
    started: float,
) -> Path:
    """Returns the result JSON after scoring every item's row and writing the result and the predictions.

    ``rows`` is the benchmark's (items, skipped rows, rows dropped as VLMEvalKit drops them)."""
    items = rows[0]
    out, preds = result_path(job.leaf, spec.name), predictions_path(job.leaf, spec.name)
    ordered = [done[sample_id(item)] for item in items]
    _check_failures(spec, ordered, job.cfg.max_failure_rate)
    sampling = job.cfg.decoding.sampling(spec.max_new_tokens)
    result = _result(job, spec, rows, ordered, job.model_info(), key, resumed, sampling)
    result.wall_time_s = time.perf_counter() - started
    if result.n_truncated:
        log.warning(
            "%s: %d of %d answers were cut by max_new_tokens=%d before they stopped (n_truncated in %s)",
            spec.name,
            result.n_truncated,
            len(ordered),
            spec.max_new_tokens,
            out,
        )
    write_rows(preds, ordered)  # the finished file: one row per item, in file order
    write_json(out, as_dict(result))
    log.info("finished in %.1f s: %s", result.wall_time_s, summary_line(out))
    _log(job, spec, items, ordered, result)
    return out


def truncated(rows: list[dict[str, Any]]) -> int:
    """Returns how many generated rows ran to the token cap without stopping (errors excluded)."""
    return sum(not row["stopped"] and row["status"] != "error" for row in rows)


def _check_failures(spec: BenchSpec, rows: list[dict[str, Any]], max_rate: float) -> None:
    failed = [row for row in rows if row["status"] in ("empty", "error")]
    if len(failed) / len(rows) > max_rate:
        errors = [row["error"] for row in failed if row["error"]]
        raise RuntimeError(
            f"benchmark {spec.name!r}: {len(failed)}/{len(rows)} items have no usable answer (empty "
            f"extraction or generation error), above max_failure_rate; first error: {errors[:1] or 'none'}. "
            "Failed generations are retried on the next run; raise max_failure_rate to accept them"
        )


def _result(
    job: EvalJob,
    spec: BenchSpec,
    bench_rows: tuple[list[Item], list[Skip], list[Skip]],
    rows: list[dict[str, Any]],
    model_info: dict[str, Any],
    key: dict[str, Any],
    resumed: int,
    sampling: SamplingConfig,
) -> BenchResult:
    """Returns the ``BenchResult`` of scored rows (wall time filled in by the caller)."""
    items, skipped, dropped = bench_rows
    try:
        report = score_items(
            spec.scorer,
            [scored_item(it, spec, r["answer"]) for it, r in zip(items, rows, strict=True)],
            spec.headline,
        )
    except ValueError as err:  # name the file whose rows the scorer refused; no result is written
        raise ValueError(f"benchmark {spec.name!r} ({spec.path}): {err}") from err
    statuses = {status: sum(r["status"] == status for r in rows) for status in ("tagged", "fallback", "empty", "error")}
    cfg = job.cfg
    return BenchResult(
        method=cfg.method_name,
        pruner=cfg.pruner.name,
        budget=cfg.budget,
        benchmark=spec.name,
        score=float(report.metrics["score"]),
        scorer_version=report.scorer_version,
        scorer=report.scorer,
        extractor_version=EXTRACTOR_VERSION,
        metrics=report.metrics,
        dataset_name=spec.dataset_name,
        experiment=cfg.experiment,
        seed=cfg.seed,
        pruner_params=dict(cfg.pruner.params),
        model=model_info,
        n_rows=len(items) + len(skipped) + len(dropped),
        n_scored=len(items),
        n_skipped=len(skipped),
        skipped=[{"index": s.index, "reason": s.reason} for s in skipped],
        n_dropped=len(dropped),
        drop_rows=list(spec.layout.drop_rows),
        extraction=statuses,
        n_failed=statuses["empty"] + statuses["error"],
        n_truncated=truncated(rows),
        mean_kept_visual=sum(r["kept_visual"] for r in rows) / len(rows),
        generation=asdict(sampling),
        batch_size=cfg.batch_size,
        resumed_rows=resumed,
        wall_time_s=0.0,
        provenance=provenance(job.resolved, key, cfg.model.device),
    )


PREDICTION_COLUMNS = [
    "image",
    "id",
    "question",
    "prediction",
    "answer",
    "correct",
    "kept_visual",
    "status",
    "output",
]
"""Columns of an evaluation's ``<bench>/predictions`` table (``prediction``: the extracted answer)."""


def _log(job: EvalJob, spec: BenchSpec, items: list[Item], rows: list[dict[str, Any]], result: BenchResult) -> None:
    """Logs the benchmark's summary metrics and its per-item predictions table, all in the run's current row
    (no step: a rerun's row follows the earlier ones, ``sparsectx.tracking.WandbTracker``)."""
    bench = result.benchmark
    tracker = job.tracker()
    tracker.log(
        {
            f"{bench}/score": result.score,
            f"{bench}/n_scored": float(result.n_scored),
            f"{bench}/n_skipped": float(result.n_skipped),
            f"{bench}/n_failed": float(result.n_failed),
            f"{bench}/mean_kept_visual": result.mean_kept_visual,
        }
    )
    metrics = [[name, float(value)] for name, value in sorted(result.metrics.items())]
    tracker.log_table(f"{bench}/metrics", ["metric", "value"], metrics)
    limit = job.cfg.logger.prediction_rows
    table = [
        [
            item.thumbnail(),
            row["id"],
            item.question,
            row["answer"],
            scored_item(item, spec, row["answer"]).reference,
            row["correct"],
            row["kept_visual"],
            row["status"],
            row["output"],
        ]
        for item, row in list(zip(items, rows, strict=True))[:limit]
    ]
    tracker.log_table(f"{bench}/predictions", PREDICTION_COLUMNS, table)


def format_summary(paths: list[Path]) -> str:
    """Returns the end-of-run summary of an invocation's outputs, the table of its mode
    (``sparsectx.eval.summary``): Pass@K files, the one efficiency file, or greedy results and shard parts."""
    if paths and all(is_passk_output(path) for path in paths):
        return passk_summary(paths)
    if len(paths) == 1 and is_efficiency_output(paths[0]):
        return efficiency_summary(paths[0])
    return greedy_summary(paths)

"""``mode=passk``: fixed-context Pass@K (SCOPD section 3.1 and App. A; spec training_methods.md section 7).

For every cohort item the visual tokens are selected **once** (seeded by ``protocol.pruner_seed``: run
seed + benchmark + sample id), the sparse context is built once, and one greedy response plus n sampled
responses (``passk.sampling``) are generated from that same context, so samples differ only in the
decoding trajectory. Correctness uses the benchmark scorer's per-item rule (``protocol.is_correct``).

Cohort (``passk.cohort``, ``sparsectx.eval.passk_cohort``): ``authors_code`` = the items the full-context
(budget 1.0) greedy model answers correctly, read from the ``<bench>.predictions.jsonl`` of
``passk.full_context_leaf``, or, when that is null, computed here by a full-context greedy pass with the
benchmark's own decoding settings; ``paper_numeric`` = the benchmark's free-form numerical questions (SCOPD
App. A's rule, as the project reads it) that a full-context greedy pass here answers, asked and scored as that
rule says, up to the source's cap. Several benchmarks run together under ``paper_numeric`` are also pooled
into ``passk_pool.json`` (``pool_passk``), with counts per source.

No-image control (``passk.no_image_control``): the same question asked **without its image** -- the
image and its placeholder are removed from the prompt, as in SCOPD App. A ("image and visual
placeholder removed") -- with the same decoding. It is not a "zero visual tokens" context: every
pruner keeps k >= 1 token, and an empty image span would still leave the vision markers in the prompt.

Outputs, in the leaf: ``<bench>.passk.samples.jsonl`` (every draw's text, extracted answer, status and
correctness, the kept token indices and the draw seed; written before aggregation and resumable per
item and condition) and ``<bench>.passk.json`` (pass@k in percent for k = 1, 2, 4, ..., n, Hit>=m@n,
greedy accuracy, per condition, and the gaps).
"""

from __future__ import annotations

import json
import logging
import random
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from tqdm import tqdm

from sparsectx.context import ContextBatch, build_context
from sparsectx.data import Item
from sparsectx.encoding import EncodedSample, encode_samples
from sparsectx.engine import Prompts, cache_positions, context_length, engine_for
from sparsectx.eval.config import AUTHORS_CODE, PAPER_NUMERIC, BenchSpec
from sparsectx.eval.extract import EXTRACTOR_VERSION, extract_answer
from sparsectx.eval.passk import hit_rate, k_values, pass_at_k_curve
from sparsectx.eval.passk_cohort import RULES, numeric_items, numeric_spec, pool_passk, source_cap
from sparsectx.eval.protocol import (
    generate_rows,
    is_correct,
    load_bench_items,
    prompt_item,
    sample_id,
    scored_item,
    select_visual,
    video_source,
)
from sparsectx.eval.results import RUN_KEY_HASH, finished, provenance, resume_rows, write_json, write_rows
from sparsectx.hashing import config_hash, file_sha256
from sparsectx.io import append_jsonl, read_jsonl
from sparsectx.models import LoadedModel
from sparsectx.models.adapter import LLMInputs, VLMAdapter
from sparsectx.models.video_input import check_video_family
from sparsectx.paths import predictions_path
from sparsectx.seeding import derive_seed

if TYPE_CHECKING:
    from sparsectx.eval.runner import EvalJob

log = logging.getLogger(__name__)

CONDITIONS = ("sparse", "no_image")


def passk_path(leaf: Path, bench: str) -> Path:
    """Returns the Pass@K summary JSON of one benchmark in a leaf."""
    return leaf / f"{bench}.passk.json"


def samples_path(leaf: Path, bench: str) -> Path:
    """Returns the raw Pass@K draws (JSONL) of one benchmark in a leaf."""
    return leaf / f"{bench}.passk.samples.jsonl"


def text_context(adapter: VLMAdapter, samples: list[EncodedSample]) -> ContextBatch:
    """Returns the left-padded context of image-less samples (``build_context`` needs image selections)."""
    width = max(s.prompt_ids.numel() for s in samples)
    ref = adapter.embed_ids(samples[0].prompt_ids[:1])
    batch = len(samples)
    embeds = ref.new_zeros(batch, width, ref.shape[-1])
    positions = torch.zeros(3, batch, width, dtype=torch.long, device=ref.device)
    mask = torch.zeros(batch, width, dtype=torch.long, device=ref.device)
    for b, sample in enumerate(samples):
        start = width - sample.prompt_ids.numel()
        embeds[b, start:] = adapter.embed_ids(sample.prompt_ids)
        positions[:, b, start:] = sample.positions
        mask[b, start:] = 1
    as_tensor = lambda v: torch.tensor(v, dtype=torch.long, device=ref.device)  # noqa: E731
    return ContextBatch(
        inputs=LLMInputs(embeds, mask, positions, torch.zeros_like(mask, dtype=torch.bool), ()),
        prompt_end=as_tensor([width] * batch),
        response_lengths=as_tensor([0] * batch),
        next_position=as_tensor([s.next_position for s in samples]),
        kept_visual=as_tensor([0] * batch),
    )


@dataclass(frozen=True)
class Cohort:
    """The items a Pass@K run draws from, the spec they are asked and scored under, and their record."""

    items: list[Item]
    spec: BenchSpec
    """The benchmark's spec, or (``paper_numeric``) ``numeric_spec`` of it."""
    source: str
    """Where the full-context answers came from."""
    counts: dict[str, int | None]
    """Rows read, qualifying rows, full-context answers checked and solved, the cap, and the cohort size."""


def select_cohort(job: EvalJob, spec: BenchSpec, items: list[Item]) -> Cohort:
    """Returns the cohort of one benchmark under ``passk.cohort`` (``sparsectx.eval.passk_cohort``)."""
    pk = job.cfg.passk
    if pk.cohort == AUTHORS_CODE:
        solved, source = cohort_ids(job, spec, items)
        kept = [item for item in items if sample_id(item) in solved][: pk.max_items]
        counts = {"rows": len(items), "solved": len(solved), "cap": pk.max_items, "size": len(kept)}
        return Cohort(kept, spec, source, counts)
    asked = numeric_spec(spec)
    candidates, counts = numeric_items(items)
    cap = source_cap(pk.source_caps, spec.name, pk.max_items)
    kept, checked, solved = solved_numeric(job, asked, candidates, cap)
    source = (
        "computed: full-context greedy pass on the free-form numerical questions "
        "(passk.full_context_leaf is not read: its predictions answer the benchmark's own prompts)"
    )
    counts = {**counts, "checked": checked, "solved": solved, "cap": cap, "size": len(kept)}
    return Cohort(kept, asked, source, counts)


def solved_numeric(
    job: EvalJob, spec: BenchSpec, candidates: list[Item], cap: int | None
) -> tuple[list[Item], int, int]:
    """Returns the first ``cap`` candidates (all when None) the full-context greedy model answers, put back in
    file order, with how many candidates were checked and how many of those it answered.

    Candidates are visited in a seeded order (``derive_seed(seed, "passk-cohort", bench)``), ``queue_size`` at
    a time, stopping once ``cap`` are answered: a capped source is a seeded sample of its solved items, and
    only the candidates needed to fill the cap are generated.
    """
    cfg = job.cfg
    order = list(range(len(candidates)))
    random.Random(derive_seed(cfg.seed, "passk-cohort", spec.name)).shuffle(order)
    sampling = cfg.decoding.sampling(cfg.passk.max_new_tokens)
    solved: list[int] = []
    checked = 0
    for start in tqdm(range(0, len(order), cfg.queue_size), desc=f"{spec.name} cohort", unit="chunk"):
        if cap is not None and len(solved) >= cap:
            break
        chunk = order[start : start + cfg.queue_size]
        rows = generate_rows(
            job.model()[0],
            [candidates[i] for i in chunk],
            spec,
            cfg.prompt,
            cfg.pruner,
            1.0,
            cfg.seed,
            sampling,
            cfg.engine,
            cfg.batch_size,
        )
        solved += [i for i, row in zip(chunk, rows, strict=True) if row.correct]
        checked += len(chunk)
    return [candidates[i] for i in sorted(solved[:cap])], checked, len(solved)


def cohort_ids(job: EvalJob, spec: BenchSpec, items: list[Item]) -> tuple[set[str], str]:
    """Returns the ids the full-context greedy model solves (``authors_code``), and where they came from."""
    cfg = job.cfg
    if cfg.passk.full_context_leaf is not None:
        path = predictions_path(Path(cfg.passk.full_context_leaf), spec.name)
        if not path.is_file():
            raise FileNotFoundError(
                f"passk.full_context_leaf: no {path}; run `python src/evaluate.py budget=1.0 "
                f"bench={spec.name}` "
                "with the same model first, or set passk.full_context_leaf=null to compute the cohort here"
            )
        return {row["id"] for row in read_jsonl(path) if row["correct"]}, str(path)
    loaded, _ = job.model()
    sampling = cfg.decoding.sampling(spec.max_new_tokens)
    solved: set[str] = set()
    for start in tqdm(range(0, len(items), cfg.queue_size), desc=f"{spec.name} cohort", unit="chunk"):
        chunk = items[start : start + cfg.queue_size]
        rows = generate_rows(
            loaded, chunk, spec, cfg.prompt, cfg.pruner, 1.0, cfg.seed, sampling, cfg.engine, cfg.batch_size
        )
        solved.update(row.id for row in rows if row.correct)
    return solved, "computed: full-context greedy pass"


def _judge(spec: BenchSpec, item: Item, text: str) -> dict[str, Any]:
    ext = extract_answer(text)
    correct = is_correct(spec.scorer, scored_item(item, spec, ext.lenient))
    return {"text": text, "answer": ext.lenient, "status": ext.status, "correct": correct}


@torch.no_grad()
def draw(job: EvalJob, loaded: LoadedModel, spec: BenchSpec, item: Item, condition: str) -> dict[str, Any]:
    """Returns one item's greedy and n sampled responses from a single fixed context, judged."""
    cfg, pk = job.cfg, job.cfg.passk
    sid = sample_id(item)
    prompt = prompt_item(item, spec.layout.prompt, cfg.prompt, condition == "sparse", video=video_source(spec))
    sample = encode_samples(loaded.adapter, loaded.processor, [prompt])[0]
    if condition == "sparse":
        selection = select_visual(loaded.adapter, [sample], cfg.pruner, cfg.budget, cfg.seed, spec.name)[0]
        context = lambda m: build_context(loaded.adapter, [sample] * m, [selection] * m)  # noqa: E731
        kept = [s.indices.tolist() for s in selection]
        length = context_length(sample, selection)
    else:
        context = lambda m: text_context(loaded.adapter, [sample] * m)  # noqa: E731
        kept, length = [], sample.prompt_ids.numel()
    copies = lambda m: Prompts([length] * m, lambda idx: context(len(idx)), shared=[0] * m)  # noqa: E731
    seed = derive_seed(cfg.seed, "passk", spec.name, sid, condition)
    generator = torch.Generator(device=loaded.adapter.model.device).manual_seed(seed)
    engine = engine_for(loaded.adapter, loaded.processor.tokenizer, cfg.engine)
    if engine.overlong(copies(1), pk.max_new_tokens):  # one item that cannot fit is a counted row, not an abort
        why = (
            f"prompt of {length} tokens plus passk.max_new_tokens={pk.max_new_tokens} needs "
            f"{cache_positions(length, pk.max_new_tokens)} cache positions, more than engine.max_length="
            f"{cfg.engine.max_length}: not drawn; raise engine.max_length or lower passk.max_new_tokens"
        )
        log.warning("benchmark %r Pass@K, row %s (%s): %s", spec.name, item.index, condition, why)
        return {"key": f"{sid}/{condition}", "id": sid, "condition": condition, "seed": seed, "error": why}
    greedy = engine.generate(copies(1), cfg.decoding.sampling(pk.max_new_tokens))[0]
    samples = engine.generate(copies(pk.n), pk.sampling.sampling(pk.max_new_tokens), generator, slots=pk.sample_batch)
    # judged as the benchmarks judge: the template's answer prefix (model.answer_prefix) then the generated text
    texts = [loaded.processor.response(out.text) for out in samples]
    return {
        "key": f"{sid}/{condition}",
        "id": sid,
        "condition": condition,
        "seed": seed,
        "kept_indices": kept,
        "greedy": _judge(spec, item, loaded.processor.response(greedy.text)),
        "samples": [_judge(spec, item, t) for t in texts],
    }


def summarize(rows: list[dict[str, Any]], hit_m: list[int]) -> dict[str, Any] | None:
    """Returns greedy accuracy, pass@k and Hit>=m@n (all percent) over one condition's rows; None if empty."""
    if not rows:
        return None
    flags = [[s["correct"] for s in row["samples"]] for row in rows]
    return {
        "n_items": len(rows),
        "greedy_accuracy": 100.0 * sum(row["greedy"]["correct"] for row in rows) / len(rows),
        "pass_at_k": {str(k): 100.0 * v for k, v in pass_at_k_curve(flags).items()},
        "hit_at_least": {str(m): 100.0 * hit_rate(flags, m) for m in hit_m},
        "mean_correct_samples": sum(map(sum, flags)) / len(flags),
    }


def run_passk(job: EvalJob, spec: BenchSpec) -> Path:
    """Returns the Pass@K JSON of one benchmark, drawing only the (item, condition) pairs not on disk."""
    key, chash = job.key_hash(spec.name)
    pk = job.cfg.passk
    if pk.cohort == AUTHORS_CODE and pk.full_context_leaf is not None:  # an input too: key it by its content
        cohort_file = predictions_path(Path(job.cfg.passk.full_context_leaf), spec.name)
        if cohort_file.is_file():
            key = {**key, "cohort_sha256": file_sha256(cohort_file)}
            chash = config_hash(key, **RUN_KEY_HASH)
    out, raw = passk_path(job.leaf, spec.name), samples_path(job.leaf, spec.name)
    if not job.cfg.force and finished(out, chash):
        log.info("%s: Pass@K finished with config %s, skipping", spec.name, chash)
        return out
    started = time.perf_counter()
    cohort = select_cohort(job, spec, load_bench_items(spec, job.cfg.max_skip_fraction).items)
    spec = cohort.spec
    conditions = CONDITIONS if pk.no_image_control else CONDITIONS[:1]
    keys = [f"{sample_id(item)}/{c}" for item in cohort.items for c in conditions]
    if job.cfg.force:
        raw.unlink(missing_ok=True)
    done = resume_rows(raw, chash, set(keys), "key")
    pending = [(item, c) for item in cohort.items for c in conditions if f"{sample_id(item)}/{c}" not in done]
    loaded = job.model()[0] if pending else None
    if loaded is not None and video_source(spec) is not None:
        check_video_family(loaded.adapter.family, f"bench.{spec.name}.video")
    for item, condition in tqdm(pending, desc=f"{spec.name} pass@k", unit="draw"):
        row = {**draw(job, loaded, spec, item, condition), "config_hash": chash}
        append_jsonl(raw, [row])
        done[row["key"]] = row
    rows = [done[k] for k in keys]
    write_rows(raw, rows)
    drawn = [row for row in rows if "error" not in row]
    per = {c: summarize([r for r in drawn if r["condition"] == c], pk.hit_m) for c in conditions}
    payload = _payload(job, spec, per, cohort, key)
    payload["not_drawn"] = [{k: row[k] for k in ("id", "condition", "error")} for row in rows if "error" in row]
    payload["wall_time_s"] = time.perf_counter() - started
    write_json(out, payload)
    if per["sparse"] is not None:
        job.tracker().log_table(
            f"{spec.name}/passk",
            ["k", "pass_at_k"],
            [[int(k), v] for k, v in per["sparse"]["pass_at_k"].items()],
        )
    return out


def _payload(job: EvalJob, spec: BenchSpec, per: dict[str, Any], cohort: Cohort, key: dict[str, Any]) -> dict[str, Any]:
    cfg, pk = job.cfg, job.cfg.passk
    sparse, control = per["sparse"], per.get("no_image")
    gap = None if sparse is None else sparse["pass_at_k"][str(pk.n)] - sparse["greedy_accuracy"]
    floor = None if control is None else control["pass_at_k"][str(pk.n)]
    return {
        "benchmark": spec.name,
        "dataset_name": spec.dataset_name,
        "method": cfg.method_name,
        "pruner": cfg.pruner.name,
        "budget": cfg.budget,
        "seed": cfg.seed,
        "n": pk.n,
        "k": k_values(pk.n),
        "cohort": {
            "protocol": pk.cohort,
            "rule": RULES[pk.cohort],
            "size": len(cohort.items),
            "source": cohort.source,
            "counts": cohort.counts,
            "ids": [sample_id(item) for item in cohort.items],
        },
        "sparse": sparse,
        "no_image": control,
        "gap": gap,
        "control_floor": floor,
        "gap_over_control": None if gap is None or floor is None else gap - floor,
        "scorer": spec.scorer,
        "extractor_version": EXTRACTOR_VERSION,
        "greedy": {"max_new_tokens": pk.max_new_tokens, "stop_strings": list(cfg.decoding.stop_strings)},
        "sampling": {**vars(pk.sampling), "max_new_tokens": pk.max_new_tokens},
        "model": job.model()[1] if cohort.items else {"name": cfg.model.name, "path": cfg.model.path},
        "provenance": provenance(job.resolved, key, cfg.model.device),
    }


POOL_FILE = "passk_pool.json"
"""The pooled summary of a leaf's benchmarks run together under ``paper_numeric`` (``write_pool``)."""


def write_pool(job: EvalJob, outputs: list[Path]) -> Path | None:
    """Returns ``<leaf>/passk_pool.json``, the sources' Pass@K pooled (``pool_passk``) with their counts and
    config hashes, when several benchmarks ran together under ``paper_numeric``; None otherwise."""
    if job.cfg.passk.cohort != PAPER_NUMERIC or len(outputs) < 2:
        return None
    payloads = [json.loads(path.read_text()) for path in outputs]
    pooled = pool_passk(payloads)
    pooled["config_hashes"] = {p["benchmark"]: p["provenance"]["config_hash"] for p in payloads}
    out = job.leaf / POOL_FILE
    write_json(out, pooled)
    return out

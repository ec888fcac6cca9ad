"""The evaluation protocol: benchmark items to prompts, seeded token selection, generation rows, scoring.

Prompt (LT-OPD App. D.1, SCOPD App. C): the system message, then a user turn with the image(s) before
the text; the text is the question (options listed for multiple choice, then the hint line) followed by
the think/answer instruction. All strings come from the config's ``prompt`` block, and the formatting
is ``sparsectx.data.format_question``, the one training uses. The assistant turn starts with what the
template's generation prompt opens (``model.thinking``) and ``model.answer_prefix`` (LT-OPD: an empty thinking
block, then ``<answer>``), as in training; answers are extracted from that prefix plus the generated text.
"""

from __future__ import annotations

import ast
import hashlib
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import NamedTuple

import torch

from sparsectx.budget import tokens_to_keep
from sparsectx.context import keep_all
from sparsectx.data import Item, Skip
from sparsectx.data.config import PromptConfig
from sparsectx.data.layout import PromptParts, apply_layout, render_question
from sparsectx.data.media import MediaError
from sparsectx.data.tsv import read_rows
from sparsectx.data.video import VideoSource, clip_problem, row_video
from sparsectx.encoding import EncodedSample, encode_samples
from sparsectx.engine import EngineConfig, Prompts, cache_positions, engine_for, pruned_prompts, select_prompts
from sparsectx.eval.config import BenchSpec
from sparsectx.eval.extract import extract_answer
from sparsectx.eval.scorers import SCORERS, ScoredItem, score_items
from sparsectx.generation import Generation, SamplingConfig
from sparsectx.hashing import file_sha256
from sparsectx.models import (
    LoadedModel,
)
from sparsectx.models.adapter import VLMAdapter
from sparsectx.models.video_input import check_video_family
from sparsectx.prompting import PromptItem, build_prompts, chat_messages
from sparsectx.pruning import select_tokens
from sparsectx.pruning.config import PrunerConfig
from sparsectx.pruning.layer import fused_prompts, select_in_llm
from sparsectx.seeding import derive_seed
from sparsectx.visual import Selection

BUILD_COMMAND = "python src/build_data.py"
log = logging.getLogger(__name__)


LMU_DATA = "LMUData"
"""VLMEvalKit's data folder variable (``vlmeval.smp.LMUDataRoot``: ``$LMUData``, else ``~/LMUData``)."""


def bench_files(spec: BenchSpec) -> list[Path]:
    """Returns the benchmark's file(s): ``spec.path`` (a file, or a folder holding ``layout.files``), else
    the first of VLMEvalKit's data folder (``$LMUData`` or ``~/LMUData``) and ``data/`` that holds them all.

    Raises:
        FileNotFoundError: a file is missing; the message names every place looked and how to get it.
    """
    names = spec.layout.files
    if spec.path is not None:
        given = Path(spec.path)
        folders = [given] if given.is_dir() else []
        if not folders and len(names) == 1 and given.is_file():
            return [given]
        places = [given / name for name in names] if folders else [given]
    else:
        folders = [lmu_data_root(), Path("data")]
        places = [folder / name for folder in folders for name in names]
    for folder in folders:
        paths = [folder / name for name in names]
        if all(path.is_file() for path in paths):
            return paths
    how = (
        f"The synthetic suite (data/tiny/syn_*.tsv) is built by `{BUILD_COMMAND}`"
        if spec.layout.source.startswith("sparsectx")
        else f"VLMEvalKit downloads it as {', '.join(names)} into $LMUData when it first runs {spec.dataset_name}"
    )
    raise FileNotFoundError(
        f"benchmark {spec.name!r}: no {' + '.join(names)} at {', '.join(str(p.resolve()) for p in places)} "
        f"(bench.{spec.name}.path={spec.path}). {how}; put the file(s) there, set $LMUData to VLMEvalKit's "
        f"data folder, or set bench.{spec.name}.path to the file (or the folder holding the files)."
    )


def bench_where(spec: BenchSpec) -> str:
    """Returns where the benchmark's rows come from, for messages: ``bench.<name>.path``, else its file names."""
    return spec.path or ", ".join(spec.layout.files)


def lmu_data_root() -> Path:
    """Returns VLMEvalKit's data folder as ``vlmeval.smp.LMUDataRoot`` finds it: ``$LMUData``, else ``~/LMUData``."""
    return Path(os.environ.get(LMU_DATA) or Path.home() / "LMUData").expanduser()


class BenchRows(NamedTuple):
    """A benchmark's usable items, its unusable rows (``Skip``), and the rows its layout drops as VLMEvalKit
    does (counted, never refusing the file)."""

    items: list[Item]
    skips: list[Skip]
    dropped: list[Skip]


def read_bench(spec: BenchSpec) -> BenchRows:
    """Returns the benchmark's rows read from its file(s) and shaped by its layout, before any skip check.

    Several files are concatenated as VLMEvalKit's ``ConcatDataset`` concatenates them: each read on its own
    (a shared-image reference points within its file), then ``index`` = position, with ``original_index`` and
    ``SUB_DATASET`` (the file's stem) kept as columns.
    """
    layout = spec.layout
    paths = bench_files(spec)
    parts = [read_rows(path, drop_no_image="no_image" in layout.drop_rows) for path in paths]
    items = [item for part in parts for item in part.items]
    skips = [skip for part in parts for skip in part.skips]
    dropped = [row for part in parts for row in part.dropped]
    if len(paths) > 1:
        items = concatenated(paths, [part.items for part in parts])
    items, unmapped = apply_layout(items, layout)
    return BenchRows(items, skips + unmapped, dropped)


def concatenated(paths: list[Path], parts: list[list[Item]]) -> list[Item]:
    """Returns the items of several files as one benchmark, as VLMEvalKit's ``ConcatDataset`` joins them:
    ``index`` = position, the file's own index kept as ``original_index`` and its stem as ``SUB_DATASET``."""
    out = []
    for path, items in zip(paths, parts, strict=True):
        for item in items:
            extra = {**item.extra, "original_index": str(item.index), "SUB_DATASET": path.stem}
            out.append(replace(item, index=len(out), extra=extra))
    return out


def no_options(spec: BenchSpec) -> str:
    """Returns why a row of a multiple-choice benchmark without options cannot be asked, with the fix."""
    where = (
        "its A-Z columns are empty"
        if spec.layout.options == "columns"
        else f"layout.options={spec.layout.options} found none in {spec.layout.options_column or 'the row'}"
    )
    return (
        f"no options: scorer {spec.scorer!r} reads an option letter, but {where}; point "
        f"bench.{spec.name}.layout.options (columns | list | lines) and options_column at where the file keeps them"
    )


def field_column(name: str, spec: BenchSpec) -> str:
    """Returns the file column ``scored_item`` fills the ``ScoredItem`` field ``name`` from (the cell to fix)."""
    layout = spec.layout
    return {
        "id": "index",
        "reference": layout.gold_column,
        "answers": layout.gold_column,
        "options": layout.options_column or "A-Z",
        "category": "category",
        "subset": spec.subset_field,
        "group": "image_path" if spec.group_by == "image" else "index",
    }[name]


def unscorable_rows(items: list[Item], spec: BenchSpec) -> tuple[list[Item], list[Skip]]:
    """Returns the items the benchmark's scorer can score whatever the model answers, and a ``Skip`` naming the
    column and why for each other: a list gold cell with no answer (``gold_answers``), or a row the scorer
    refuses (``ScorerSpec.unscorable``). Such a row is never generated, nor fails the scorer after the generation."""
    scored: dict[str, ScoredItem] = {}
    skips = []
    for item in items:
        try:
            scored[sample_id(item)] = scored_item(item, spec, None)
        except ValueError as err:
            skips.append(Skip(str(item.index), f"column {spec.layout.gold_column!r}: {err}"))
    problems = SCORERS.get(spec.scorer).unscorable(list(scored.values()))
    skips += [Skip(sid, f"column {field_column(name, spec)!r}: {why}") for sid, (name, why) in problems.items()]
    return [item for item in items if sample_id(item) in scored and sample_id(item) not in problems], skips


def check_scorable(items: list[Item], spec: BenchSpec) -> None:
    """Returns None when the benchmark's scorer accepts ``items`` scored with no answers; else raises
    ``ValueError`` naming the file: a fault of the rows as a whole (CV-Bench without any Omni3D row), found
    before greedy evaluation generates anything rather than by the scorer after it."""
    try:
        score_items(spec.scorer, [scored_item(item, spec, None) for item in items], spec.headline)
    except ValueError as err:
        raise ValueError(
            f"benchmark {spec.name!r}: scorer {spec.scorer!r} refuses the {len(items)} usable rows of "
            f"{bench_where(spec)} as a whole, before any generation: {err}. Fix or complete the file"
        ) from err


def load_bench_items(spec: BenchSpec, max_skip_fraction: float) -> BenchRows:
    """Returns the usable items of a benchmark, a ``Skip`` for every row left out, and the dropped rows.

    Rows the reader cannot use, the scorer could not score (``unscorable_rows``) or whose clip is unusable are
    skipped here, before any generation, and logged as a warning naming the file and the first reasons: a score
    over fewer rows than the file holds is not the benchmark's score, so it must never pass unseen. Rows the
    layout drops (as VLMEvalKit drops them) are logged with their count and never count as skips.

    Raises:
        FileNotFoundError: the file is missing (see ``bench_files``).
        ValueError: no row is usable, or more than ``max_skip_fraction`` of the rows are skipped.
    """
    items, skips, dropped = read_bench(spec)
    path = bench_where(spec)
    if SCORERS.get(spec.scorer).needs_options:  # caught here, not by the scorer after hours of generation
        skips += [Skip(str(item.index), no_options(spec)) for item in items if not item.options]
        items = [item for item in items if item.options]
    items, unscorable = unscorable_rows(items, spec)
    skips += unscorable
    source = video_source(spec)
    if source is not None:
        problems = {item.index: clip_problem(item, source) for item in items}
        skips += [Skip(str(index), reason) for index, reason in problems.items() if reason]
        items = [item for item in items if not problems[item.index]]
    if dropped:
        rules = ", ".join(spec.layout.drop_rows)
        log.info("benchmark %r: %d rows dropped as VLMEvalKit drops them (%s)", spec.name, len(dropped), rules)
    if not items and not skips:
        raise ValueError(f"benchmark {spec.name!r}: {path} has a header but no rows; rebuild or replace it")
    if not skips:
        return BenchRows(items, skips, dropped)
    total = len(items) + len(skips)
    summary = (
        f"benchmark {spec.name!r}: {len(skips)} of {total} rows of {path} are unusable and left out; "
        f"first reasons: {[f'row {s.index}: {s.reason}' for s in skips[:3]]}"
    )
    if not items or len(skips) > max_skip_fraction * total:
        raise ValueError(
            f"{summary}. That is above max_skip_fraction={max_skip_fraction}: fix or rebuild the file "
            f"(`{BUILD_COMMAND}` for the synthetic suite), or raise max_skip_fraction to score the rest "
            "(the tables then footnote the score)"
        )
    log.warning("%s; scoring the other %d (within max_skip_fraction=%s)", summary, len(items), max_skip_fraction)
    return BenchRows(items, skips, dropped)


def bench_digest(spec: BenchSpec) -> str:
    """Returns the sha256 of the benchmark's file (one file), or of its files' digests in order (several)."""
    digests = [file_sha256(path) for path in bench_files(spec)]
    return digests[0] if len(digests) == 1 else hashlib.sha256(":".join(digests).encode()).hexdigest()


def video_source(spec: BenchSpec, file: Path | None = None) -> VideoSource | None:
    """Returns where a video benchmark's clips are and how they are sampled; None for an image benchmark.

    ``file`` is the benchmark file (default: the first of ``bench_files``); a relative ``video.root`` (""
    included) resolves against its folder, where VLMEvalKit's video classes keep their clips (``prepare_dataset``
    returns that folder as ``root``), so a benchmark found in ``$LMUData``, ``data/`` or ``bench.<name>.path``
    finds its clips beside it; an absolute root is used as given.
    """
    if spec.video is None:
        return None
    video = spec.video
    file = file if file is not None else bench_files(spec)[0]
    return VideoSource(
        file,
        file.parent / video.root,
        video.suffix,
        video.frames,
        video.max_tokens,
        video.folder_fps,
        prefix_column=video.prefix_column,
        suffix_column=video.suffix_column,
        bound_column=video.bound_column,
        start_column=video.start_column,
        end_column=video.end_column,
        sampling=video.sampling,
    )


def sample_id(item: Item) -> str:
    """Returns the item's sample id: its ``index`` as a string."""
    return str(item.index)


def prompt_item(
    item: Item, parts: PromptParts, prompt: PromptConfig, with_image: bool, video: VideoSource | None = None
) -> PromptItem:
    """Returns the prompt of ``item``; ``with_image=False`` asks the same text without the image (or video).

    The question text is the benchmark's prompt ``parts`` (``bench.<name>.layout.prompt``: the text
    VLMEvalKit's ``build_prompt`` builds for real benchmarks, training's format for the synthetic ones). A
    video benchmark's row (``video`` from ``video_source``) asks about its sampled clip instead of an image.
    """
    visual = with_image and video is None
    return PromptItem(
        sample_id=sample_id(item),
        images=item.images() if visual else [],
        question=render_question(item, parts, prompt.mcq_hint),
        system=prompt.system,
        instruction=prompt.instruction,
        videos=[row_video(item, video)] if with_image and video is not None else [],
    )


def prompt_text(loaded: LoadedModel, item: PromptItem) -> str:
    """Returns the chat-templated prompt text (one image placeholder per image, not expanded) up to the
    generation prompt: the answer prefix the model also saw (``model.answer_prefix``) opens the row's
    ``output`` instead, so ``prompt + output`` holds it once."""
    text = loaded.processor.apply_chat_template(chat_messages(item), tokenize=False, add_generation_prompt=True)
    return text.removesuffix(loaded.answer_prefix)


def gold_answers(item: Item, spec: BenchSpec) -> tuple[str, tuple[str, ...]]:
    """Returns (reference, all accepted answers) of ``item`` under ``spec.layout.answer``: a ``list`` cell is
    read as VLMEvalKit's ``process_line`` reads it (a Python list, e.g. TextVQA's ten human answers; the
    reference is the first; a cell that does not evaluate to a list is the one answer, as ``istype`` finds),
    any other layout gives (the gold cell, ()).

    Raises:
        ValueError: the cell is an empty list: the row has no answer to score against.
    """
    if spec.layout.answer != "list":
        return item.answer, ()
    try:
        parsed = ast.literal_eval(item.answer)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        # what literal_eval raises on crafted cells (deep nesting...); VLMEvalKit's istype: the cell is one answer
        parsed = item.answer
    answers = tuple(str(a) for a in parsed) if isinstance(parsed, (list, tuple)) else (str(parsed),)
    if not answers:
        raise ValueError(f"the list {item.answer!r} holds no answer; write the accepted answers in it")
    return answers[0], answers


def scored_item(item: Item, spec: BenchSpec, prediction: str | None) -> ScoredItem:
    """Returns the scorer's view of one item with its extracted ``prediction`` (None = extraction miss)."""
    reference, answers = gold_answers(item, spec)
    group = ""
    if spec.group_by == "image":
        # VLMEvalKit's MME_rating pairs by the file's image_path column; the image hash only stands in
        # for files without it (the synthetic benchmarks).
        group = item.extra.get("image_path") or hashlib.sha256(item.image_bytes).hexdigest()[:16]
    elif spec.group_by == "circular":
        group = str(item.index % 1_000_000)
    subset = {
        "none": "",
        "subset": item.subset,
        "category": item.category,
        "l2-category": item.extra.get("l2-category", ""),
        "cycle_category": item.extra.get("cycle_category", ""),
        "source": item.extra.get("source", ""),
        "task_type": item.extra.get("task_type", ""),
    }[spec.subset_field]
    return ScoredItem(
        id=sample_id(item),
        prediction=prediction,
        reference=reference,
        answers=answers,
        options=dict(item.options),
        category=item.category,
        subset=subset,
        group=group,
    )


def is_correct(scorer: str, item: ScoredItem) -> bool:
    """Returns whether one item's prediction is right, by the rule its benchmark's scorer declares
    (``ScorerSpec.is_correct``; a miss, ``None``, never is). Used for the predictions file and for Pass@K."""
    return SCORERS.get(scorer).correct(item)


def pruner_seed(seed: int, bench: str, sid: str) -> int:
    """Returns the seed of one sample's token selection: ``derive_seed(seed, "pruner", bench, sample id)``.

    The mask of a random pruner depends only on the run seed and the sample, never on batch composition
    or order, so a resumed run, a different batch size and Pass@K's fixed context all see the same mask.
    """
    return derive_seed(seed, "pruner", bench, sid)


def select_visual(
    adapter: VLMAdapter,
    samples: list[EncodedSample],
    pruner: PrunerConfig,
    budget: float,
    seed: int,
    bench: str,
) -> list[list[Selection]]:
    """Returns per sample one ``Selection`` per image: every token at budget 1.0, else the pruner's choice.

    An in-LLM pruner (``pruner.stage: llm``) scores the batch's prompts at its layer K - 1 with ``adapter``
    and returns ``LayerSelection``s (tokens dropped before layer K).
    """
    if budget == 1.0:
        return [keep_all(sample) for sample in samples]
    if pruner.stage == "llm":
        return select_in_llm(adapter, samples, pruner.name, budget, pruner.params, pruner.layer)
    out = []
    for sample in samples:
        # A CPU generator: the same mask on every device.
        generator = torch.Generator().manual_seed(pruner_seed(seed, bench, sample.sample_id))
        embeds = sample.question_embeds
        out.append([select_tokens(pruner.name, im, embeds, budget, generator, pruner.params) for im in sample.images])
    return out


def eval_prompts(
    adapter: VLMAdapter,
    samples: list[EncodedSample],
    pruner: PrunerConfig,
    budget: float,
    seed: int,
    bench: str,
) -> tuple[Prompts, list[int]]:
    """Returns the engine prompts of ``samples`` at ``budget`` and each one's kept visual-token count.

    An in-LLM pruner below budget 1.0 chooses in the engine's own prefill (``fused_prompts``: layers < K
    run once); every other choice is made first (``select_visual``).
    """
    if pruner.stage == "llm" and budget < 1.0:
        kept = [sum(tokens_to_keep(budget, image.num_tokens) for image in s.images) for s in samples]
        return fused_prompts(adapter, samples, pruner.name, budget, pruner.params, pruner.layer), kept
    selections = select_visual(adapter, samples, pruner, budget, seed, bench)
    kept = [sum(s.indices.numel() for s in chosen) for chosen in selections]
    return pruned_prompts(adapter, samples, selections), kept


@dataclass
class GenerationRow:
    """One generated answer before it is written: what the predictions file stores for an item."""

    id: str
    prompt: str
    output: str
    """The response as read and scored (``ChatTemplating.response``): the answer prefix, then the generated text."""
    answer: str | None
    """The model's answer as extracted from ``output`` (lenient rules) and scored: not the reference."""
    strict: str | None
    """The model's answer from ``<answer>`` tags alone; None when the output has none."""
    status: str
    """``tagged`` / ``fallback`` / ``empty`` (see ``sparsectx.eval.extract``) or ``error``."""
    correct: bool
    kept_visual: int
    stopped: bool
    num_tokens: int
    error: str


def encode_in_batches(loaded: LoadedModel, prompts: list[PromptItem], batch_size: int) -> list[EncodedSample]:
    """Returns the encoded prompts, running the vision tower on ``batch_size`` prompts at a time."""
    return [
        sample
        for start in range(0, len(prompts), batch_size)
        for sample in encode_samples(loaded.adapter, loaded.processor, prompts[start : start + batch_size])
    ]


@torch.no_grad()
def generate_rows(
    loaded: LoadedModel,
    items: list[Item],
    spec: BenchSpec,
    prompt: PromptConfig,
    pruner: PrunerConfig,
    budget: float,
    seed: int,
    sampling: SamplingConfig,
    engine: EngineConfig,
    batch_size: int,
) -> list[GenerationRow]:
    """Returns one row per item; the engine decodes ``batch_size`` at a time, refilling finished slots.

    A runtime failure (e.g. out of memory) becomes ``status="error"`` rows for every item of the call; an item
    whose image or clip fails to decode only now (a clip truncated after a valid header, a damaged frame file)
    and a prompt too long for the engine's cache (``engine.max_length``, known once its image is encoded) each
    become an ``error`` row of their own naming why: recorded and counted, never scored as an answer.
    """
    video = video_source(spec)
    if video is not None:
        check_video_family(loaded.adapter.family, f"bench.{spec.name}.video")
    build = lambda item: prompt_item(item, spec.layout.prompt, prompt, with_image=True, video=video)  # noqa: E731
    built = build_prompts(lambda item: decoded_or_error(build, item), items, loaded.processor.image_workers)
    undecoded = {i: why for i, why in enumerate(built) if isinstance(why, str)}
    for i, why in undecoded.items():
        log.warning("benchmark %r (%s), row %s: %s", spec.name, bench_where(spec), items[i].index, why)
    decoded = [i for i in range(len(items)) if i not in undecoded]
    rows = generate_decoded(
        loaded,
        [items[i] for i in decoded],
        [built[i] for i in decoded],
        spec,
        pruner,
        budget,
        seed,
        sampling,
        engine,
        batch_size,
    )
    by_index = dict(zip(decoded, rows, strict=True))
    return [by_index[i] if i in by_index else error_row(items[i], "", 0, undecoded[i]) for i in range(len(items))]


def decoded_or_error(build: Callable[[Item], PromptItem], item: Item) -> PromptItem | str:
    """Returns ``build(item)``, or why it failed when its image or clip cannot be decoded (``MediaError``, or
    Pillow's ``OSError`` for a truncated file): one bad row becomes an error row, not an aborted benchmark."""
    try:
        return build(item)
    except (MediaError, OSError) as err:
        return f"its media could not be decoded: {err}"


def generate_decoded(
    loaded: LoadedModel,
    items: list[Item],
    prompts: list[PromptItem],
    spec: BenchSpec,
    pruner: PrunerConfig,
    budget: float,
    seed: int,
    sampling: SamplingConfig,
    engine: EngineConfig,
    batch_size: int,
) -> list[GenerationRow]:
    """Returns one row per item whose prompt (images decoded) is built: generated, or an ``error`` row."""
    if not items:
        return []
    texts = [prompt_text(loaded, p) for p in prompts]
    try:
        samples = encode_in_batches(loaded, prompts, batch_size)
        engine_prompts, kept = eval_prompts(loaded.adapter, samples, pruner, budget, seed, spec.name)
        decoder = engine_for(loaded.adapter, loaded.processor.tokenizer, engine)
        overlong = set(decoder.overlong(engine_prompts, sampling.max_new_tokens))
        fitting = [i for i in range(len(items)) if i not in overlong]
        outs = decoder.generate(select_prompts(engine_prompts, fitting), sampling, None, slots=batch_size)
    except RuntimeError as err:
        return [error_row(item, text, 0, repr(err)) for item, text in zip(items, texts, strict=True)]
    generated = dict(zip(fitting, outs, strict=True))
    rows = []
    for i, (item, text) in enumerate(zip(items, texts, strict=True)):
        if i in generated:
            rows.append(judged_row(loaded, item, spec, text, generated[i], kept[i]))
            continue
        why = too_long(engine_prompts.lengths[i], sampling.max_new_tokens, engine.max_length, spec.name)
        log.warning("benchmark %r (%s), row %s: %s", spec.name, bench_where(spec), item.index, why)
        rows.append(error_row(item, text, kept[i], why))
    return rows


def too_long(length: int, cap: int, max_length: int, bench: str) -> str:
    """Returns why a ``length``-token prompt is not generated: with ``cap`` new tokens it needs more cache
    positions than ``engine.max_length``, and the settings that would let it fit."""
    return (
        f"prompt of {length} tokens plus {cap} new tokens needs {cache_positions(length, cap)} cache positions, "
        f"more than engine.max_length={max_length}: not generated; raise engine.max_length or lower "
        f"bench.{bench}.max_new_tokens to generate it"
    )


def error_row(item: Item, prompt: str, kept_visual: int, error: str) -> GenerationRow:
    """Returns the row of an item that was not generated: ``status="error"``, no output, ``error`` saying why."""
    return GenerationRow(sample_id(item), prompt, "", None, None, "error", False, kept_visual, False, 0, error)


def judged_row(
    loaded: LoadedModel, item: Item, spec: BenchSpec, prompt: str, out: Generation, kept_visual: int
) -> GenerationRow:
    """Returns the row of one generated item: its response, the extracted answer and whether it is right."""
    response = loaded.processor.response(out.text)
    ext = extract_answer(response)
    correct = is_correct(spec.scorer, scored_item(item, spec, ext.lenient))
    return GenerationRow(
        sample_id(item),
        prompt,
        response,
        ext.lenient,
        ext.strict,
        ext.status,
        correct,
        kept_visual,
        out.stopped,
        int(out.token_ids.numel()),
        "",
    )

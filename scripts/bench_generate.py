"""Evaluation decode throughput: the project's engine against HF ``generate`` (dynamic and static cache).

    python scripts/bench_generate.py                  # CUDA, bf16, random Qwen2.5-VL-7B weights
    python scripts/bench_generate.py --tiny           # CPU smoke run on the shipped tiny model
    python scripts/bench_generate.py --batches 1 8 32 64 128 256 --contexts pruned --json out/pruned.json
    python scripts/bench_generate.py --batches 32 --queue-multiple 8 --methods engine   # evaluation's refills
    python scripts/bench_generate.py --batches 1 32 --new-tokens 155 --config /models/Qwen2.5-VL-7B-Instruct

For each context (``pruned``: 10% of a 1296-token image plus the prompt text; ``full``: all 1296 tokens)
and batch size it times, in the same process, greedy decoding of up to ``--new-tokens`` tokens by

* ``engine``: ``sparsectx.engine.DecodeEngine`` with ``conf/engine/default.yaml`` (CUDA graphs on CUDA),
  ``batch`` slots fed a queue of ``batch x --queue-multiple`` prompts (evaluation's ``batch_size`` and
  ``queue_size``, the queue a multiple of the slots: finished slots refill from it); it stops a sequence at
  an end-of-turn id or the stop string ``</answer>`` as evaluation does (``--ignore-stops``: never);
* ``engine-uncompiled``: the same with ``engine.compile=off`` (the captured step on HF's eager kernels),
  printed where the default compiles the step;
* ``hf-dynamic``: ``model.generate`` with the default DynamicCache;
* ``hf-static``: ``model.generate(cache_implementation="static")``.

HF decodes ``batch`` text prompts of the same length, exactly ``--new-tokens`` tokens each (``min_new_tokens``
and no eos: a fixed-length per-step baseline; decode cost depends on lengths, not on content; HF has no way
to keep pruned tokens at their unpruned positions). Every figure counts the tokens the call returned (the
engine's generations, each up to and including its end; HF's sequences after the prompt), never assumes
``--new-tokens``: a row's tokens per sequence (min / median / p90 / max) show whether sequences stopped
early. Printed per row: decode ms/step = slots x (time of the N-token call - time of the 1-token call) /
(tokens of the one - tokens of the other), the time of one decode step over ``batch`` busy slots (prefill
excluded; with nothing stopping early, (t_N - t_1) / (N - 1)); tokens/s = counted tokens / the call's time
(prefill included); the engine's speed-up over each row in decode ms/step. Times are the median-time run of
``--repeats`` after ``--warmup``; its tokens are that run's. A cell the GPU has no memory for prints ``OOM``
(HF's static cache at large batch) and the sweep goes on. ``--shared`` adds a table of the engine on
``batch`` copies of one context (Pass@K's n draws, a GRPO group): each copy prefilled, against one prefill
shared by all (``Prompts.shared``); prefill ms is the time of the 1-token call. ``--json PATH`` writes every
row (per-sequence lengths included) and the run's facts, rewritten after each row. Asserts nothing.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from functools import partial
from pathlib import Path

import torch
from omegaconf import OmegaConf
from transformers import AutoModelForImageTextToText, GenerationConfig, PreTrainedModel, PreTrainedTokenizerBase

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_common import (  # noqa: E402
    GeneratedLengths,
    architecture,
    engine_lengths,
    hf_lengths,
    median_run,
    rate_text,
    run_facts,
    timed_runs,
    tokens_per_second,
    unless_out_of_memory,
    write_json,
)

from sparsectx.context import ContextBatch  # noqa: E402
from sparsectx.engine import DecodeEngine, EngineConfig, Prompts  # noqa: E402
from sparsectx.generation import SamplingConfig  # noqa: E402
from sparsectx.models import adapter_for, resolve_model_path  # noqa: E402
from sparsectx.models.adapter import LLMInputs, VLMAdapter  # noqa: E402
from sparsectx.models.processor import load_processor  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
ENGINE_CONF = ROOT / "conf/engine/default.yaml"
VISUAL_TOKENS = 1296
TEXT_TOKENS = 60
BUDGET = 0.1
METHODS = ("engine", "engine-uncompiled", "hf-dynamic", "hf-static")
STOP_STRINGS = ["</answer>"]
"""The stop string evaluation checks (the answer tag of every benchmark prompt)."""


class ModuloTokenizer:
    """The tiny model's tokenizer for a model with a larger vocabulary: ids are decoded modulo its size.

    Stop checks and output decoding then cost what a real BPE decode of the same length costs.
    """

    def __init__(self, inner) -> None:
        self.inner = inner
        self.size = len(inner)
        self.eos_token_id, self.unk_token_id = inner.eos_token_id, inner.unk_token_id

    def __call__(self, text: str, add_special_tokens: bool = False):
        return self.inner(text, add_special_tokens=add_special_tokens)

    def convert_tokens_to_ids(self, token: str):
        return self.inner.convert_tokens_to_ids(token)

    def decode(self, ids, skip_special_tokens: bool = False) -> str:
        return self.inner.decode([int(i) % self.size for i in ids], skip_special_tokens=skip_special_tokens)


@dataclass
class Cell:
    """One method timed at one (context, batch): its N-token call and its 1-token call, each with what it
    generated (the median-time run of each)."""

    seconds: float
    one_token_seconds: float
    counted: GeneratedLengths
    one_token: GeneratedLengths

    def decode_ms_per_step(self, slots: int) -> float | None:
        """Returns the ms of one decode step over ``slots`` busy slots (module docstring), or None when the
        N-token call generated no more tokens than the 1-token call (nothing to divide by)."""
        decoded = self.counted.tokens - self.one_token.tokens
        return 1000 * slots * (self.seconds - self.one_token_seconds) / decoded if decoded > 0 else None

    def row(self, slots: int) -> dict[str, object]:
        """Returns the cell's ``--json`` fields: times, counted tokens, lengths, rate and decode ms/step."""
        return {
            "status": "ok",
            "seconds": self.seconds,
            "one_token_seconds": self.one_token_seconds,
            "tokens": self.counted.tokens,
            "lengths": self.counted.lengths,
            "length_summary": self.counted.summary(),
            "tokens_per_s": tokens_per_second(self.counted.tokens, self.seconds),
            "decode_ms_per_step": self.decode_ms_per_step(slots),
        }


@dataclass
class Bench:
    """What every row of a run times with: the model, its adapter, the tokenizer, the engine settings, the
    command line."""

    model: PreTrainedModel
    adapter: VLMAdapter
    tokenizer: PreTrainedTokenizerBase | ModuloTokenizer
    engine_cfg: EngineConfig
    args: argparse.Namespace


def random_prompts(
    model: PreTrainedModel,
    count: int,
    length: int,
    device: torch.device,
    copies: bool = False,
    shared: bool = False,
    seed: int = 0,
) -> Prompts:
    """Returns ``count`` prompts of ``length`` seeded random embeddings at positions 0..length-1.

    ``copies``: every prompt is the same context (Pass@K's n draws); ``shared`` also tells the engine so
    (``Prompts.shared``: one prefill for all of them).
    """
    dim = model.config.get_text_config().hidden_size
    dtype = model.get_input_embeddings().weight.dtype
    generator = torch.Generator(device=device).manual_seed(seed)
    shape = (1 if copies else count, length, dim)
    embeds = torch.randn(shape, generator=generator, device=device, dtype=dtype) * 0.02
    if copies:
        embeds = embeds.expand(count, length, dim)

    def build(idx) -> ContextBatch:
        rows = list(idx)
        size = len(rows)
        positions = torch.arange(length, device=device).expand(3, size, length)
        mask = torch.ones(size, length, dtype=torch.long, device=device)
        inputs = LLMInputs(embeds[rows], mask, positions, torch.zeros_like(mask, dtype=torch.bool), ())
        as_tensor = lambda v: torch.full((size,), v, dtype=torch.long, device=device)  # noqa: E731
        return ContextBatch(inputs, as_tensor(length), as_tensor(0), as_tensor(length), as_tensor(0))

    return Prompts([length] * count, build, shared=[0] * count if shared else None)


def engine_cell(bench: Bench, cfg: EngineConfig, prompts: Prompts, slots: int) -> Cell:
    """Returns the cell of a fresh engine of ``cfg``: ``prompts`` through ``slots`` slots, up to ``--new-tokens``
    and 1 token. The engine (its graphs and slot caches) is freed with this call's frame, also when it fails."""
    engine = DecodeEngine(bench.adapter, bench.tokenizer, cfg)
    stops = not bench.args.ignore_stops

    def run(new: int) -> GeneratedLengths:
        sampling = SamplingConfig(new, False, 1.0, 1.0, 0, STOP_STRINGS, honour_stops=stops)
        return engine_lengths(engine.generate(prompts, sampling, slots=slots))

    return timed_cell(run, engine.device, bench.args)


def hf_cell(model: PreTrainedModel, batch: int, length: int, cache: str | None, args: argparse.Namespace) -> Cell:
    """Returns HF ``generate``'s cell on ``batch`` seeded text prompts of ``length`` ids, exactly
    ``--new-tokens`` (and 1) new tokens each, counted from the sequences it returns."""
    vocab = model.config.get_text_config().vocab_size
    generator = torch.Generator(device=model.device).manual_seed(0)
    ids = torch.randint(vocab // 8, vocab // 2, (batch, length), generator=generator, device=model.device)

    def run(new: int) -> GeneratedLengths:
        config = GenerationConfig(
            max_new_tokens=new,
            min_new_tokens=new,
            do_sample=False,
            eos_token_id=None,
            pad_token_id=0,
            cache_implementation=cache,
        )
        out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), generation_config=config)
        return GeneratedLengths(hf_lengths(out, length, end_ids=()))  # no eos given: every column generated

    return timed_cell(run, model.device, args)


def timed_cell(run: Callable[[int], GeneratedLengths], device: torch.device, args: argparse.Namespace) -> Cell:
    """Returns the cell of ``run(n)`` (one call generating up to n tokens per sequence) at n = ``--new-tokens``
    and n = 1, each the median-time run with the lengths that run returned."""
    full, one = (
        median_run(timed_runs(lambda n=n: run(n), device, args.warmup, args.repeats)) for n in (args.new_tokens, 1)
    )
    return Cell(full[0], one[0], full[1], one[1])


def build(args: argparse.Namespace) -> tuple[PreTrainedModel, PreTrainedTokenizerBase | ModuloTokenizer]:
    """Returns (model, tokenizer) of the run: random 7B weights on CUDA, or the shipped tiny model on CPU."""
    tiny_dir = resolve_model_path("package:tiny-vlm")
    tokenizer = load_processor(tiny_dir).tokenizer
    if args.tiny:
        model = AutoModelForImageTextToText.from_pretrained(tiny_dir, dtype=torch.float32)
        return model.eval(), tokenizer
    torch.manual_seed(0)
    with torch.device("cuda"):
        model = AutoModelForImageTextToText.from_config(
            architecture(args.config), dtype=torch.bfloat16, attn_implementation="sdpa"
        )
    return model.eval(), ModuloTokenizer(tokenizer)


def engine_config() -> EngineConfig:
    """Returns the engine settings evaluation runs with (``conf/engine/default.yaml``)."""
    return EngineConfig(**OmegaConf.to_container(OmegaConf.load(ENGINE_CONF)))


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Returns the command line, refusing (before any model loads) a batch the engine's slots cannot hold."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tiny", action="store_true", help="CPU smoke run on the shipped tiny model")
    parser.add_argument("--config", default=None, help="a local model dir whose config.json to build")
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 8, 32], help="engine slots / HF batch")
    parser.add_argument(
        "--queue-multiple", type=int, default=1, help="prompts per engine call = batch x this (evaluation: 8)"
    )
    parser.add_argument("--new-tokens", type=int, default=155, help="most tokens per sequence (HF: exactly)")
    parser.add_argument("--contexts", nargs="+", default=["pruned", "full"], choices=["pruned", "full"])
    parser.add_argument("--methods", nargs="+", default=list(METHODS), choices=METHODS)
    parser.add_argument("--ignore-stops", action="store_true", help="the engine always decodes --new-tokens")
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--shared", action="store_true", help="also time copies of one context, shared prefill")
    parser.add_argument("--json", type=Path, default=None, help="also write every row to this JSON file")
    args = parser.parse_args(argv)
    slots = engine_config().max_slots
    for batch in args.batches:
        if not 1 <= batch <= slots:
            parser.error(
                f"--batches {batch}: the engine holds 1 to engine.max_slots={slots} sequences at once "
                f"({ENGINE_CONF.relative_to(ROOT)}); lower the batch or raise engine.max_slots there"
            )
    if args.queue_multiple < 1:
        parser.error(f"--queue-multiple {args.queue_multiple}: the queue must hold at least one prompt per slot")
    if args.new_tokens < 2:
        parser.error(f"--new-tokens {args.new_tokens}: a decode step needs at least 2 tokens (1 is the prefill's)")
    if args.repeats < 1 or args.warmup < 0:
        parser.error(f"--repeats {args.repeats} / --warmup {args.warmup}: time at least one run, warm up >= 0")
    return args


def main() -> None:
    """Prints the decode timing table (and writes it to ``--json``)."""
    args = parse_args()
    model, tokenizer = build(args)
    engine_cfg = engine_config()
    bench = Bench(model, adapter_for(model, signal_chunk=1024), tokenizer, engine_cfg, args)
    compiled = engine_cfg.compile_on(model.device)
    lengths = {"pruned": round(BUDGET * VISUAL_TOKENS) + TEXT_TOKENS, "full": VISUAL_TOKENS + TEXT_TOKENS}
    params = sum(p.numel() for p in model.parameters()) / 1e9
    record = {
        "script": "bench_generate.py",
        **run_facts(model.device),
        "params_b": params,
        "args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
        "engine": asdict(engine_cfg),
        "rows": [],
        "shared": [],
    }
    print(
        f"# {record['device']}, {params:.2f}B params, up to {args.new_tokens} new tokens "
        f"({'stops ignored' if args.ignore_stops else 'stops honoured'}), queue = batch x {args.queue_multiple}, "
        f"engine graphs={engine_cfg.graphs_on(model.device)}, compiled={compiled}, "
        f"sync_every={engine_cfg.sync_every}"
    )
    print(
        "| context | batch | queue | method | decode ms/step | tokens/s | tokens per sequence "
        "(min / median / p90 / max) | engine speed-up |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for context in args.contexts:
        for batch in args.batches:
            rows = batch_rows(bench, context, lengths[context], batch)
            record["rows"].extend(rows)
            if args.json is not None:
                write_json(args.json, record)
    if args.shared:
        shared_table(bench, lengths, record)


def batch_rows(bench: Bench, context: str, length: int, batch: int) -> list[dict[str, object]]:
    """Times every method at one (context, batch), prints its rows and returns them for ``--json``."""
    queue = batch * bench.args.queue_multiple
    cells = measure_cells(bench, random_prompts(bench.model, queue, length, bench.model.device), length, batch)
    base = cells.get("engine")
    base_step = base.decode_ms_per_step(batch) if isinstance(base, Cell) else None
    rows = []
    for name, cell in cells.items():
        row = {"context": context, "context_tokens": length, "batch": batch, "method": name}
        row["queue"] = queue if name.startswith("engine") else batch
        rows.append(row)
        if isinstance(cell, str):
            row.update(status="oom", error=cell)
            print(f"| {context} ({length}) | {batch} | {row['queue']} | {name} | OOM | OOM | | |", flush=True)
            continue
        row.update(cell.row(batch))
        step = row["decode_ms_per_step"]
        speed = step / base_step if name != "engine" and step is not None and base_step else None
        row["engine_speedup"] = speed
        print(
            f"| {context} ({length}) | {batch} | {row['queue']} | {name} | "
            f"{'n/a' if step is None else f'{step:.2f}'} | {rate_text(cell.counted.tokens, cell.seconds)} | "
            f"{cell.counted.text()} | {'' if speed is None else f'{speed:.2f}x'} |",
            flush=True,
        )
    return rows


def measure_cells(bench: Bench, prompts: Prompts, length: int, batch: int) -> dict[str, Cell | str]:
    """Returns each selected method's cell at ``batch``, or the out-of-memory message where the GPU could not
    hold it, in ``METHODS`` order. Each cell builds (and frees) its own engine, so nothing a failed or finished
    cell allocated is held while the next one runs."""
    args, model, cfg = bench.args, bench.model, bench.engine_cfg
    measures: dict[str, Callable[[], Cell]] = {}
    if "engine" in args.methods:
        measures["engine"] = partial(engine_cell, bench, cfg, prompts, batch)
    if "engine-uncompiled" in args.methods and cfg.compile_on(model.device):
        measures["engine-uncompiled"] = partial(engine_cell, bench, replace(cfg, compile="off"), prompts, batch)
    for name, cache in (("hf-dynamic", None), ("hf-static", "static")):
        if name in args.methods:
            measures[name] = partial(hf_cell, model, batch, length, cache, args)
    cells = {}
    for name, measure in measures.items():
        cell, out_of_memory = unless_out_of_memory(measure)
        cells[name] = out_of_memory if cell is None else cell
    return cells


def shared_table(bench: Bench, lengths: dict[str, int], record: dict[str, object]) -> None:
    """Prints the engine on ``batch`` copies of one context, each prefilled vs one shared prefill (Pass@K), and
    adds its rows to ``record["shared"]``."""
    model, args = bench.model, bench.args
    print(
        "\n| context | copies | prefill ms (each / shared) | tokens/s (each / shared) | tokens per sequence, "
        "each; shared (min / median / p90 / max) |"
    )
    print("| --- | --- | --- | --- | --- |")
    for context in args.contexts:
        length = lengths[context]
        for batch in args.batches:
            cells = {}
            for name, flag in (("engine-each", False), ("engine-shared", True)):
                prompts = random_prompts(model, batch, length, model.device, copies=True, shared=flag)
                cell, out_of_memory = unless_out_of_memory(
                    partial(engine_cell, bench, bench.engine_cfg, prompts, batch)
                )
                cells[name] = cell
                row = {"context": context, "context_tokens": length, "batch": batch, "queue": batch, "method": name}
                row.update({"status": "oom", "error": out_of_memory} if cell is None else cell.row(batch))
                record["shared"].append(row)
            (each_prefill, each_rate, each_lengths), (shared_prefill, shared_rate, shared_lengths) = (
                ("OOM", "OOM", "OOM")
                if cell is None
                else (
                    f"{1000 * cell.one_token_seconds:.1f}",
                    rate_text(cell.counted.tokens, cell.seconds),
                    cell.counted.text(),
                )
                for cell in cells.values()
            )
            print(
                f"| {context} ({length}) | {batch} | {each_prefill} / {shared_prefill} | {each_rate} / {shared_rate} | "
                f"{each_lengths}; {shared_lengths} |",
                flush=True,
            )
            if args.json is not None:
                write_json(args.json, record)


if __name__ == "__main__":
    main()

"""Evaluation decode throughput: the project's engine against HF ``generate`` (dynamic and static cache).

    python scripts/bench_generate.py                  # CUDA, bf16, random Qwen2.5-VL-7B weights
    python scripts/bench_generate.py --tiny           # CPU smoke run on the shipped tiny model
    python scripts/bench_generate.py --batches 1 32 --new-tokens 155 --config /models/Qwen2.5-VL-7B-Instruct

For each context (``pruned``: 10% of a 1296-token image plus the prompt text; ``full``: all 1296 tokens)
and batch size it times, in the same process, greedy decoding of ``--new-tokens`` tokens by

* ``engine``: ``sparsectx.engine.DecodeEngine`` with ``conf/engine/default.yaml`` (CUDA graphs on CUDA),
  stop string ``</answer>`` checked as in evaluation (random weights never emit it, so every run decodes
  the full length);
* ``engine-uncompiled``: the same with ``engine.compile=off`` (the captured step on HF's eager kernels),
  printed where the default compiles the step;
* ``hf-dynamic``: ``model.generate`` with the default DynamicCache;
* ``hf-static``: ``model.generate(cache_implementation="static")``.

HF decodes a text prompt of the same length (decode cost depends on lengths, not on content; HF has no way
to keep pruned tokens at their unpruned positions). Printed per row: decode ms per step, measured as
(time for N tokens - time for 1 token) / (N - 1), so prefill is excluded; tokens/s over the whole call
(prefill included); and the engine's speed-up over each HF variant. ``--shared`` adds a table of the engine
on ``batch`` copies of one context (Pass@K's n draws, a GRPO group): each copy prefilled, against one
prefill shared by all (``Prompts.shared``); prefill ms is the time for one token. Asserts nothing.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

import torch
from omegaconf import OmegaConf
from transformers import AutoModelForImageTextToText, GenerationConfig

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_common import architecture, median_seconds  # noqa: E402

from sparsectx.context import ContextBatch  # noqa: E402
from sparsectx.engine import DecodeEngine, EngineConfig, Prompts  # noqa: E402
from sparsectx.generation import SamplingConfig  # noqa: E402
from sparsectx.models import adapter_for, resolve_model_path  # noqa: E402
from sparsectx.models.adapter import LLMInputs  # noqa: E402
from sparsectx.models.processor import load_processor  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
VISUAL_TOKENS = 1296
TEXT_TOKENS = 60
BUDGET = 0.1


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


def random_prompts(
    model, batch: int, length: int, device: torch.device, copies: bool = False, shared: bool = False
) -> Prompts:
    """Returns ``batch`` prompts of ``length`` random embeddings at positions 0..length-1.

    ``copies``: every prompt is the same context (Pass@K's n draws); ``shared`` also tells the engine so
    (``Prompts.shared``: one prefill for all of them).
    """
    dim = model.config.get_text_config().hidden_size
    dtype = model.get_input_embeddings().weight.dtype
    embeds = torch.randn(1 if copies else batch, length, dim, device=device, dtype=dtype) * 0.02
    if copies:
        embeds = embeds.expand(batch, length, dim)

    def build(idx) -> ContextBatch:
        rows = list(idx)
        size = len(rows)
        positions = torch.arange(length, device=device).expand(3, size, length)
        mask = torch.ones(size, length, dtype=torch.long, device=device)
        inputs = LLMInputs(embeds[rows], mask, positions, torch.zeros_like(mask, dtype=torch.bool), ())
        as_tensor = lambda v: torch.full((size,), v, dtype=torch.long, device=device)  # noqa: E731
        return ContextBatch(inputs, as_tensor(length), as_tensor(0), as_tensor(length), as_tensor(0))

    return Prompts([length] * batch, build, shared=[0] * batch if shared else None)


def time_engine(engine: DecodeEngine, prompts: Prompts, new: int, args) -> tuple[float, float]:
    """Returns (seconds for ``new`` tokens, seconds for 1 token) of the engine on ``prompts``."""
    run = lambda n: engine.generate(prompts, SamplingConfig(n, False, 1.0, 1.0, 0, ["</answer>"]))  # noqa: E731
    return tuple(
        median_seconds(lambda n=n: run(n), engine.device, args.warmup, args.repeats) for n in (new, 1)
    )


def time_hf(model, batch: int, length: int, new: int, cache: str | None, args) -> tuple[float, float]:
    """Returns (seconds for ``new`` tokens, seconds for 1 token) of HF ``generate`` on a text prompt."""
    vocab = model.config.get_text_config().vocab_size
    ids = torch.randint(vocab // 8, vocab // 2, (batch, length), device=model.device)  # plain text ids

    def run(n: int) -> None:
        config = GenerationConfig(
            max_new_tokens=n, min_new_tokens=n, do_sample=False, eos_token_id=None, pad_token_id=0,
            cache_implementation=cache,
        )  # fmt: skip
        model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), generation_config=config)

    return tuple(
        median_seconds(lambda n=n: run(n), model.device, args.warmup, args.repeats) for n in (new, 1)
    )


def build(args):
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


def main() -> None:
    """Prints the decode timing table."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--tiny", action="store_true", help="CPU smoke run on the shipped tiny model")
    parser.add_argument("--config", default=None, help="a local model dir whose config.json to build")
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 8, 32])
    parser.add_argument("--new-tokens", type=int, default=155)
    parser.add_argument("--contexts", nargs="+", default=["pruned", "full"], choices=["pruned", "full"])
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--shared", action="store_true", help="also time copies of one context, shared prefill")
    args = parser.parse_args()
    model, tokenizer = build(args)
    engine_cfg = EngineConfig(**OmegaConf.to_container(OmegaConf.load(ROOT / "conf/engine/default.yaml")))
    adapter = adapter_for(model, signal_chunk=1024)
    engine = DecodeEngine(adapter, tokenizer, engine_cfg)
    eager = DecodeEngine(adapter, tokenizer, dataclasses.replace(engine_cfg, compile="off"))
    lengths = {"pruned": round(BUDGET * VISUAL_TOKENS) + TEXT_TOKENS, "full": VISUAL_TOKENS + TEXT_TOKENS}
    print(f"# {torch.cuda.get_device_name() if model.device.type == 'cuda' else 'cpu'}, "
          f"{sum(p.numel() for p in model.parameters()) / 1e9:.2f}B params, {args.new_tokens} new tokens, "
          f"engine graphs={engine.graphs}, compiled={engine.compiled}, sync_every={engine_cfg.sync_every}")  # fmt: skip
    print("| context | batch | method | decode ms/step | tokens/s | engine speed-up |")
    print("| --- | --- | --- | --- | --- | --- |")
    for context in args.contexts:
        length = lengths[context]
        for batch in args.batches:
            prompts = random_prompts(model, batch, length, model.device)
            rows = {"engine": time_engine(engine, prompts, args.new_tokens, args)}
            if engine.compiled:
                rows["engine-uncompiled"] = time_engine(eager, prompts, args.new_tokens, args)
            for name, cache in (("hf-dynamic", None), ("hf-static", "static")):
                rows[name] = time_hf(model, batch, length, args.new_tokens, cache, args)
            step = {k: (full - one) / (args.new_tokens - 1) for k, (full, one) in rows.items()}
            for name, (full, _) in rows.items():
                speed = "" if name == "engine" else f"{step[name] / step['engine']:.2f}x"
                print(f"| {context} ({length}) | {batch} | {name} | {1000 * step[name]:.2f} | "
                      f"{batch * args.new_tokens / full:.0f} | {speed} |", flush=True)  # fmt: skip
    if args.shared:
        shared_table(engine, model, lengths, args)


def shared_table(engine: DecodeEngine, model, lengths: dict[str, int], args) -> None:
    """Prints the engine on ``batch`` copies of one context, each prefilled vs one shared prefill (Pass@K)."""
    print("\n| context | copies | prefill ms (each / shared) | tokens/s (each / shared) |")
    print("| --- | --- | --- | --- |")
    new = args.new_tokens
    for context in args.contexts:
        length = lengths[context]
        for batch in args.batches:
            each, shared = (
                time_engine(engine, random_prompts(model, batch, length, model.device, True, flag), new, args)
                for flag in (False, True)
            )  # fmt: skip
            print(f"| {context} ({length}) | {batch} | {1000 * each[1]:.1f} / {1000 * shared[1]:.1f} | "
                  f"{batch * args.new_tokens / each[0]:.0f} / {batch * args.new_tokens / shared[0]:.0f} |",
                  flush=True)  # fmt: skip


if __name__ == "__main__":
    main()

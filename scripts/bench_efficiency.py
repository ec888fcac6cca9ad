"""The efficiency mode at the real sizes: prefill FLOPs, KV-cache (or state) bytes and latency ratios per budget.

    python scripts/bench_efficiency.py                                   # CUDA, bf16, random Qwen2.5-VL-7B
    python scripts/bench_efficiency.py --arch qwen3_5_4b --pruners visionzip cdpruner
    python scripts/bench_efficiency.py --arch glm46v_9b --budgets 0.05 0.1 0.2
    python scripts/bench_efficiency.py --tiny --items 1 --repeats 1      # CPU smoke run on the tiny model

What ``python src/evaluate.py mode=efficiency`` measures (``sparsectx.eval.efficiency.measure_budgets``, the
same function), run on the real architecture with random weights (``bench_common``) instead of a checkpoint:
per pruner, every budget and the unpruned model (budget 1.0) on the same ``--items`` noise images of
``--visual-tokens`` merged tokens, back to back; the config is ``conf/evaluate.yaml`` composed with
``model=<arch> pruner=<name> mode=efficiency`` and the flags below. FLOPs and cache bytes are analytic
(``sparsectx.eval.costs``, held to FlopCounterMode by the tests); latencies are medians of ``--repeats``
synchronised runs after ``--warmup`` untimed ones at batch size 1, decode ``--decode-tokens`` greedy engine
steps. A pruner the family refuses (FastV and DART on a hybrid decoder) prints the refusal. Asserts nothing.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import torch
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf
from transformers import AutoModelForImageTextToText

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_common import ARCHITECTURES, ROOT, noise_items, real_model  # noqa: E402

from sparsectx.eval.config import load_eval_config  # noqa: E402
from sparsectx.eval.efficiency import measure_budgets  # noqa: E402
from sparsectx.eval.runner import EvalJob  # noqa: E402
from sparsectx.models import LoadedModel, adapter_for, resolve_model_path  # noqa: E402
from sparsectx.models.processor import load_processor  # noqa: E402
from sparsectx.pruning import declared_signals  # noqa: E402


def efficiency_job(model: str, pruner: str, args: argparse.Namespace) -> EvalJob:
    """Returns an evaluation job of ``conf/evaluate.yaml`` in efficiency mode for ``model`` and ``pruner``."""
    budgets = ",".join(str(b) for b in args.budgets)
    overrides = [
        f"model={model}",
        f"pruner={pruner}",
        "mode=efficiency",
        "logger=none",
        f"efficiency.budgets=[{budgets}]",
        f"efficiency.num_items={args.items}",
        f"efficiency.repetitions={args.repeats}",
        f"efficiency.warmup={args.warmup}",
        f"efficiency.decode_tokens={args.decode_tokens}",
    ]
    with initialize_config_dir(version_base=None, config_dir=str(ROOT / "conf")):
        cfg = compose("evaluate", overrides=overrides)
    return EvalJob(load_eval_config(cfg), OmegaConf.to_container(cfg, resolve=True), Path("unused"))


def tiny_model(visual_tokens: int) -> tuple[LoadedModel, int]:
    """Returns the shipped tiny model (fp32, CPU) and the image side giving ``visual_tokens`` tokens."""
    path = resolve_model_path("package:tiny-vlm")
    model = AutoModelForImageTextToText.from_pretrained(path, dtype=torch.float32).eval()
    vision = model.config.vision_config
    side = vision.patch_size * vision.spatial_merge_size * round(visual_tokens**0.5)
    processor = load_processor(path, 1)
    processor.image_processor.size = {"shortest_edge": side * side, "longest_edge": side * side}
    return LoadedModel(adapter_for(model, signal_chunk=1024), processor), side


def print_rows(pruner: str, rows: list[dict]) -> None:
    """Prints one Markdown row per budget: kept tokens, FLOPs, cache bytes, stage latencies and ratios."""
    for row in rows:
        ratios, ms = row["ratios"], row["latency_ms"]
        print(
            f"| {pruner} | {row['budget']:g} | {row['kept_visual']:.0f} | {row['prefill_len']:.0f} | "
            f"{row['flops']['prefill'] / 1e12:.2f} | {ratios['prefill_flops']:.3f} | "
            f"{row['kv_cache_bytes'] / 2**20:.1f} | {ratios['kv_cache']:.3f} | {ms['vision']:.1f} | "
            f"{ms['selection']:.1f} | {ms['prefill']:.1f} | {ms['decode']:.0f} | {ms['total']:.0f} | "
            f"{ratios['latency']['prefill']:.3f} | {ratios['latency']['total']:.3f} |"
        )


def main() -> None:
    """Prints the efficiency table of every pruner on one architecture."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tiny", action="store_true", help="CPU smoke run on the shipped tiny model")
    parser.add_argument("--arch", default="qwen2_5_vl_7b", choices=sorted(ARCHITECTURES))
    parser.add_argument("--config", default=None, help="a local model dir whose config.json to build")
    parser.add_argument("--pruners", nargs="+", default=["visionzip", "cdpruner", "fastv", "dart"])
    parser.add_argument("--budgets", type=float, nargs="+", default=[0.05, 0.1, 0.2])
    parser.add_argument("--items", type=int, default=2, help="noise images, each measured at every budget")
    parser.add_argument("--visual-tokens", type=int, default=1296, help="merged visual tokens per image")
    parser.add_argument("--decode-tokens", type=int, default=128, help="LT-OPD replays a 128-token reference")
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        if args.tiny:
            loaded, side = tiny_model(args.visual_tokens)
        else:
            loaded, side = real_model(args.arch, args.config, args.visual_tokens, None, Path(scratch))
        items = noise_items(args.items, side, seed=0)
        device = loaded.adapter.model.device
        name = "tiny" if args.tiny else args.arch
        print(
            f"# {torch.cuda.get_device_name() if device.type == 'cuda' else 'cpu'}, {name}, {side}x{side} "
            f"images ({args.visual_tokens} visual tokens), {args.items} items, {args.decode_tokens} decode "
            f"tokens, median of {args.repeats} after {args.warmup} warm-up"
        )
        print(
            "| pruner | budget | kept | prefill len | prefill TFLOPs | FLOPs ratio | KV/state MiB | KV ratio | "
            "vision ms | select ms | prefill ms | decode ms | total ms | prefill latency ratio | "
            "total latency ratio |"
        )
        print("|" + " --- |" * 15)
        for pruner in args.pruners:
            job = efficiency_job("tiny" if args.tiny else args.arch, pruner, args)
            cfg = job.cfg
            loaded.adapter.vision_signals = declared_signals(cfg.pruner.name, cfg.pruner.params, cfg.seed)
            try:
                rows = measure_budgets(job, loaded, items)
            except ValueError as error:  # a family's refusal (in-LLM pruning on a hybrid decoder)
                print(f"| {pruner} | refused: {error} |")
                continue
            print_rows(pruner, rows)


if __name__ == "__main__":
    main()

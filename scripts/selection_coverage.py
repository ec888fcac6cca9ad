"""Where each pre-LLM pruner's kept tokens fall on the synthetic scenes; prints figures, asserts nothing.

    python scripts/selection_coverage.py                                  # tiny model, 10%, six benchmarks
    python scripts/selection_coverage.py --budget 0.2 --pruners visionzip divprune --items 50

Every synthetic item stores its scene (each object's centre, size and colour), so a selection can be read
against it. A post-merger token of the tiny model covers one 28x28 cell of the 448-px image (raster order);
a token is *on* an object when its cell meets the object's bounding box. For each pruner this prints, over
the items of each benchmark:

- ``objects hit``: the share of the scene's objects with at least one kept token on them;
- ``tokens on objects``: the share of kept tokens that lie on some object (the rest are background);
- ``kept``: the kept tokens per image.

The question the figures answer is docs/tiny_study.md's: why the diversity-based pruners (DivPrune, CDPruner) fall far
below VisionZip on the tiny world, where in SCOPD's Table 3 DivPrune is within 5 points of it. Selections are
the evaluation's own (``eval.protocol.select_visual``, the same seeds), from the config that
``src/evaluate.py`` composes.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

from hydra import compose, initialize_config_dir

from sparsectx.encoding import encode_samples
from sparsectx.eval.checkpoints import load_eval_model
from sparsectx.eval.config import EvalConfig, load_eval_config
from sparsectx.eval.protocol import load_bench_items, prompt_item, select_visual
from sparsectx.pruning import declared_signals

CONF = Path(__file__).resolve().parents[1] / "conf"
BENCHES = ("syn_detail", "syn_count", "syn_spatial", "syn_ocr", "syn_pope", "syn_mcq")


def covered_cells(obj: dict, cell: int, side: int) -> set[tuple[int, int]]:
    """Returns the (row, col) token cells that an object's bounding box meets."""
    half = obj["size"] / 2
    rows = range(max(0, int((obj["cy"] - half) // cell)), min(side, int((obj["cy"] + half) // cell) + 1))
    cols = range(max(0, int((obj["cx"] - half) // cell)), min(side, int((obj["cx"] + half) // cell) + 1))
    return {(r, c) for r in rows for c in cols}


def coverage(scene: dict, kept: list[int], cell: int, side: int) -> tuple[float, float]:
    """Returns (share of objects hit, share of kept tokens on an object) of one selection."""
    cells = {(i // side, i % side) for i in kept}
    boxes = [covered_cells(obj, cell, side) for obj in scene["objects"]]
    hit = sum(bool(box & cells) for box in boxes) / len(boxes) if boxes else 1.0
    on = set().union(*boxes) if boxes else set()
    return hit, sum(c in on for c in cells) / len(cells)


def eval_config(*overrides: str) -> EvalConfig:
    """Returns the config ``src/evaluate.py`` composes with ``overrides`` (logging off)."""
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return load_eval_config(compose("evaluate", overrides=["logger=none", *overrides]))


def main() -> None:
    """Prints the coverage table of every pruner on every benchmark.

    Each pruner re-encodes the items: the tower records only the signals that pruner declares.
    """
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--budget", type=float, default=0.1)
    parser.add_argument("--pruners", nargs="+", default=["visionzip", "divprune", "cdpruner", "random"])
    parser.add_argument("--benches", nargs="+", default=list(BENCHES))
    parser.add_argument("--items", type=int, default=100, help="items per benchmark (the first ones)")
    parser.add_argument("overrides", nargs="*", help="evaluate.py overrides, e.g. model=tiny_video_vlm")
    args = parser.parse_args()
    base = eval_config(*args.overrides)
    loaded, _ = load_eval_model(base.model, base.checkpoint, base.seed)
    config = loaded.adapter.model.config.vision_config
    cell = config.patch_size * config.spatial_merge_size
    print(f"budget {args.budget}; {args.items} items per benchmark; model {base.model.name}")
    print(f"{'pruner':10s} {'benchmark':12s} {'objects hit':>12s} {'tokens on objects':>18s} {'kept':>6s}")
    for pruner in args.pruners:
        for bench in args.benches:
            cfg = eval_config(f"pruner={pruner}", f"bench={bench}", *args.overrides)
            loaded.adapter.vision_signals = declared_signals(cfg.pruner.name, cfg.pruner.params, cfg.seed)
            items = load_bench_items(cfg.bench[bench], cfg.max_skip_fraction)[0][: args.items]
            hits, ons, kept = [], [], []
            for item in items:
                sample = encode_samples(loaded.adapter, loaded.processor, [prompt_item(item, cfg.prompt, True)])[0]
                (selection,) = select_visual(loaded.adapter, [sample], cfg.pruner, args.budget, cfg.seed, bench)[0]
                side = int(round(sample.images[0].num_tokens ** 0.5))
                hit, on = coverage(json.loads(item.scene), selection.indices.tolist(), cell, side)
                hits.append(hit)
                ons.append(on)
                kept.append(selection.indices.numel())
            print(
                f"{pruner:10s} {bench:12s} {100 * statistics.mean(hits):11.1f}% {100 * statistics.mean(ons):17.1f}% "
                f"{statistics.mean(kept):6.1f}"
            )


if __name__ == "__main__":
    main()

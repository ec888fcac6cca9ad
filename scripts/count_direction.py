"""Which way the counting answers miss: over, under or right, per results leaf; prints figures, asserts nothing.

    python scripts/count_direction.py results/tiny_scopd/tiny/base/visionzip/{1,0.1} \
        results/tiny_scopd/tiny/scopd/visionzip/0.1
    python scripts/count_direction.py --bench data/tiny-<digest>/syn_count.tsv results/seed1/.../0.1

Each leaf's ``syn_count.predictions.jsonl`` holds the scored (lenient) ``answer`` of every item; the reference
count is the benchmark TSV's ``answer`` of the same ``index``. An answer that is not a whole number is counted
as unparsed. The question it answers is docs/miniature_study.md's: does distillation at 10% leave counting
where it was, or move its errors (an issue saw counts overshoot after distillation)?
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from sparsectx.data import read_tsv


def directions(predictions: Path, reference: dict[str, str]) -> dict[str, int]:
    """Returns how many answers of ``predictions`` are over, under or equal to the reference, or unparsed."""
    counts = {"over": 0, "under": 0, "right": 0, "unparsed": 0}
    for line in predictions.read_text().splitlines():
        row = json.loads(line)
        try:
            answer, truth = int(row["answer"]), int(reference[str(row["id"])])
        except ValueError:
            counts["unparsed"] += 1
            continue
        counts["over" if answer > truth else "under" if answer < truth else "right"] += 1
    return counts


def main() -> None:
    """Prints one line per leaf: over / under / right / unparsed counts of its syn_count predictions."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("leaves", nargs="+", type=Path, help="results leaf folders holding syn_count predictions")
    parser.add_argument("--bench", type=Path, default=None, help="the syn_count TSV (default: data/tiny-*/)")
    args = parser.parse_args()
    bench = args.bench or sorted(Path("data").glob("tiny-*/syn_count.tsv"))[0]
    items, _ = read_tsv(bench)
    reference = {str(item.index): item.answer for item in items}
    print(f"reference: {bench}")
    print(f"{'leaf':70s} {'over':>5s} {'under':>6s} {'right':>6s} {'unparsed':>9s}")
    for leaf in args.leaves:
        c = directions(leaf / "syn_count.predictions.jsonl", reference)
        print(f"{str(leaf):70s} {c['over']:5d} {c['under']:6d} {c['right']:6d} {c['unparsed']:9d}")


if __name__ == "__main__":
    main()

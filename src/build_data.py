"""Writes the synthetic benchmark suite, a training set from downloaded datasets, and the tiny model's
tokenizer/processor.

    python src/build_data.py                       # data/tiny/*.tsv and src/sparsectx/assets/tiny-vlm/
    python src/build_data.py processor.write=false data.train.size=500
    python src/build_data.py data/sources=lt_14k   # data/lt_14k.tsv from your downloads (docs/training_data.md)

Tests call ``sparsectx.data.build.run(cfg)`` with a config from Hydra's compose API.
"""

from __future__ import annotations

import hydra
from omegaconf import DictConfig


@hydra.main(version_base=None, config_path="../conf", config_name="build_data")
def main(cfg: DictConfig) -> None:
    """Returns None after composing ``conf/build_data.yaml`` and running the build."""
    from sparsectx.data.build import run  # imported here: --help and --cfg skip transformers

    run(cfg)


if __name__ == "__main__":
    main()

"""Writes the synthetic benchmark suite, a training set from downloaded datasets, and the tiny model's
tokenizer/processor.

    python src/build_data.py                       # data/tiny/*.tsv and src/sparsectx/assets/tiny-vlm/
    python src/build_data.py processor.write=false data.train.size=500
    python src/build_data.py data/sources=lt_14k   # data/lt_14k.tsv from your downloads (docs/training_data.md)

Tests call ``sparsectx.data.build.run(cfg)`` with a config from Hydra's compose API.
"""

from __future__ import annotations

from omegaconf import DictConfig

from sparsectx.cli import config_check, entry


@entry("build_data")
def main(cfg: DictConfig) -> None:
    """Returns None after composing ``conf/build_data.yaml`` and running the build."""
    from sparsectx.data.build import load_build_config, run  # imported here: --help and --cfg skip transformers

    with config_check():  # a bad config is answered in one line (exit 2) before anything is written
        load_build_config(cfg)
    run(cfg)


if __name__ == "__main__":
    main()

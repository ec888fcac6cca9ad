"""The ``build_data`` job: write the synthetic suite, a training set drawn from downloaded datasets
(``training_set``, chosen with ``data/sources=<recipe>``), a synthetic video benchmark (``data/video=<family>``)
and, when asked, the tiny model's processor folder."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from omegaconf import DictConfig

from sparsectx.config_schema import load_config
from sparsectx.data.config import SuiteConfig
from sparsectx.data.sources import TrainingSetConfig, build_training_set
from sparsectx.data.synthetic import SuiteReport, build_suite, corpus_pairs
from sparsectx.data.video_family import VideoFamilyConfig, build_video_bench
from sparsectx.models.tiny_processor import ProcessorConfig, build_processor, chat_texts

log = logging.getLogger(__name__)


@dataclass
class BuildConfig:
    """Schema of ``conf/build_data.yaml``."""

    data: SuiteConfig
    write_suite: bool
    """Write <data.out_dir>/<bench>.tsv and train.tsv."""
    processor: ProcessorConfig
    training_set: TrainingSetConfig | None
    """A recipe from conf/data/sources/ (``data/sources=llava_cot``): write its TSV; null = none."""
    video: VideoFamilyConfig | None
    """A synthetic video family from conf/data/video/ (``data/video=tiny_video``): write its benchmark TSV
    to ``data.out_dir``; null = none."""


def load_build_config(cfg: DictConfig) -> BuildConfig:
    """Returns the composed config as a checked ``BuildConfig``; unknown, missing or mistyped keys raise, all at
    once."""
    return load_config(BuildConfig, cfg, "the build config (conf/build_data.yaml)")


def run(cfg: DictConfig) -> SuiteReport | None:
    """Returns the suite report (None when ``write_suite`` is false) after building what the config asks."""
    build = load_build_config(cfg)
    report = build_suite(build.data) if build.write_suite else None
    if build.training_set is not None:
        build_training_set(build.training_set)
    if build.video is not None:
        log.info("wrote %s", build_video_bench(build.data, build.video))
    if build.processor.write:
        proc = build.processor
        pairs = corpus_pairs(build.data, proc.corpus_per_family)
        texts = chat_texts(pairs, build.data.prompt.system, build.data.prompt.instruction)
        tokenizer = build_processor(
            out_dir=Path(proc.out_dir),
            texts=texts,
            vocab_size=proc.vocab_size,
            min_frequency=proc.min_frequency,
            image_size=build.data.scene.image_size,
            patch_size=proc.patch_size,
            merge_size=proc.merge_size,
            temporal_patch_size=proc.temporal_patch_size,
        )
        log.info("wrote processor to %s (vocabulary %d)", proc.out_dir, tokenizer.get_vocab_size())
    return report

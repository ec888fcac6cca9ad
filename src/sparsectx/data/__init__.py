"""Synthetic benchmark suite, VLMEvalKit-layout TSV reading/writing, and the prompt protocol."""

from sparsectx.data.config import SuiteConfig, load_suite_config
from sparsectx.data.families import FAMILIES, ItemSpec
from sparsectx.data.prompt import build_messages, format_question
from sparsectx.data.synthetic import (
    SuiteReport,
    build_suite,
    corpus_pairs,
    generate_bench,
    generate_train,
)
from sparsectx.data.tsv import Item, Skip, read_tsv, write_tsv

__all__ = [
    "FAMILIES",
    "Item",
    "ItemSpec",
    "Skip",
    "SuiteConfig",
    "SuiteReport",
    "build_messages",
    "build_suite",
    "corpus_pairs",
    "format_question",
    "generate_bench",
    "generate_train",
    "load_suite_config",
    "read_tsv",
    "write_tsv",
]

"""The rehearsal's data: each benchmark's miniature file(s) and the miniature training file, in their real
layouts, written where a real run reads them.

Benchmarks: ``write_benchmarks`` writes the file(s) ``conf/bench/<name>.yaml`` names (``layout.files``) into one
folder, which the rehearsal's jobs read as ``$LMUData`` (a config's ``path: null`` looks there first), with a
video benchmark's clips beside them as VLMEvalKit keeps them (``sparsectx.rehearsal.benchmarks``). Training:
``write_training_file`` runs the project's own conversion (``build_training_set``, the code behind ``python
src/build_data.py data/sources=<recipe>``) on miniature downloads in the releases' layouts
(``sparsectx.rehearsal.downloads``), with the recipe that writes that file name, as a user makes the real file
(docs/training_data.md).

A file is replaced only when its bytes change: Snakemake reruns a job whose inputs are newer than its outputs,
so preparing a rehearsal again leaves its finished jobs finished.
"""

from __future__ import annotations

import filecmp
import os
import tempfile
from collections.abc import Iterable
from dataclasses import replace
from pathlib import Path

from hydra import compose, initialize_config_dir

from sparsectx.data.build import load_build_config
from sparsectx.data.sources import TrainingSetConfig, build_training_set
from sparsectx.eval.config import CONF_DIR, compose_bench
from sparsectx.rehearsal.benchmarks import Builder, RealFile, image_mcq, video, vqa, write_rows, yes_no
from sparsectx.rehearsal.downloads import DOWNLOADS
from sparsectx.workflow import load_rehearsal

BUILDERS: dict[str, Builder] = {**image_mcq.FILES, **video.FILES, **vqa.FILES, **yes_no.FILES}
"""Benchmark name -> builder of its miniature file(s), every group's."""
SPARE_ROWS = 2
"""Usable rows each miniature download holds beyond its quota, so the seeded draw chooses, as the real one does."""
BATCH_OVERRIDE = "method.effective_batch_size="
"""The rehearsal's train override that sets the prompts per step (``conf/rehearsal.yaml``)."""


def real_files(name: str) -> list[RealFile]:
    """Returns benchmark ``name``'s miniature file(s), one per file its config names.

    Raises:
        KeyError: no builder writes ``name`` (names the benchmarks that have one).
    """
    if name not in BUILDERS:
        raise KeyError(f"no miniature file for benchmark {name!r}; the rehearsal writes {sorted(BUILDERS)}")
    built = BUILDERS[name]()
    return built if isinstance(built, list) else [built]


def write_benchmarks(names: Iterable[str], data_dir: Path) -> dict[str, list[Path]]:
    """Returns benchmark -> its file(s) under ``data_dir`` after writing each named benchmark's miniature file(s)
    under the name(s) its config gives (``compose_bench(name).layout.files``), and its media beside them.

    Raises:
        KeyError: a benchmark has no builder.
        ValueError: a config names another number of files than the builder writes, or two benchmarks name the
            same file.
    """
    data_dir.mkdir(parents=True, exist_ok=True)
    written: dict[str, list[Path]] = {}
    owners: dict[str, str] = {}
    with tempfile.TemporaryDirectory(dir=data_dir, prefix=".staging-") as tmp:
        staged = Path(tmp)
        for name in dict.fromkeys(names):
            files, parts = compose_bench(name).layout.files, real_files(name)
            if len(files) != len(parts):
                raise ValueError(f"benchmark {name!r}: its config names {files}, its builder writes {len(parts)}")
            for file, part in zip(files, parts, strict=True):
                if owners.setdefault(file, name) != name:
                    raise ValueError(f"benchmarks {owners[file]!r} and {name!r} both read {file}")
                write_rows(staged / file, part.rows)
                if part.media is not None:
                    part.media(staged)
            written[name] = [data_dir / file for file in files]
        publish(staged, data_dir)
    return written


def publish(staged: Path, target: Path) -> None:
    """Moves every file under ``staged`` to the same place under ``target`` (same file system), leaving in place
    a file that already has the same bytes."""
    for file in sorted(path for path in staged.rglob("*") if path.is_file()):
        destination = target / file.relative_to(staged)
        if destination.is_file() and filecmp.cmp(file, destination, shallow=False):
            continue
        destination.parent.mkdir(parents=True, exist_ok=True)
        os.replace(file, destination)


def training_recipe(name: str) -> TrainingSetConfig:
    """Returns the checked ``training_set`` of ``conf/data/sources/<name>.yaml``, composed as ``build_data.py``
    composes it."""
    with initialize_config_dir(version_base=None, config_dir=str(CONF_DIR)):
        cfg = compose("build_data", overrides=[f"data/sources={name}"])
    training_set = load_build_config(cfg).training_set
    if training_set is None:
        raise ValueError(f"conf/data/sources/{name}.yaml sets no training_set")
    return training_set


def recipe_for(path: Path) -> tuple[str, TrainingSetConfig]:
    """Returns (name, ``training_set``) of the recipe whose ``out_path`` has ``path``'s file name, among those
    with miniature downloads.

    Raises:
        ValueError: none writes that file name.
    """
    recipes = {name: training_recipe(name) for name in DOWNLOADS}
    for name, cfg in recipes.items():
        if Path(cfg.out_path).name == path.name:
            return name, cfg
    written = {name: cfg.out_path for name, cfg in recipes.items()}
    raise ValueError(f"no recipe the rehearsal can convert writes {path.name!r} (it converts {written})")


def rehearsal_batch_size() -> int:
    """Returns the prompts per step of the rehearsal's training jobs (``method.effective_batch_size`` among
    ``conf/rehearsal.yaml``'s train overrides).

    Raises:
        ValueError: the rehearsal does not set it.
    """
    for override in load_rehearsal().overrides.get("train", ()):
        if override.startswith(BATCH_OVERRIDE):
            return int(override.removeprefix(BATCH_OVERRIDE))
    raise ValueError(f"conf/rehearsal.yaml's train overrides set no {BATCH_OVERRIDE}<n>; pass batch_size")


def shares(total: int, parts: int) -> list[int]:
    """Returns ``total`` split into ``parts`` whole shares, the first ones one larger when it does not divide."""
    return [total // parts + (i < total % parts) for i in range(parts)]


def write_training_file(path: Path, rows: int = 32, batch_size: int | None = None) -> Path:
    """Returns ``path`` after writing there a miniature of the training file of that name, by the recipe that
    writes it (``recipe_for``) run on miniature downloads.

    Args:
        path: Where the preset's train jobs read it (``train_data.path``, e.g. ``data/lt_14k.tsv``).
        rows: The file's rows, shared equally among the recipe's sources (as LT-14K's stand-in quotas are).
        batch_size: A mixture's rows per balanced-sampler batch, which ``train_data.order=file`` trains as one
            step; None = the rehearsal's ``method.effective_batch_size``. Unused by a one-source recipe.

    Raises:
        ValueError: no recipe writes that file name, or a mixture's ``rows`` is not a whole number of batches.
    """
    recipe, cfg = recipe_for(path)
    writers = DOWNLOADS[recipe]
    geometry: dict[str, int | None] = {"batch_size": None, "num_batches": None}
    if cfg.batch_size is not None:
        batch = rehearsal_batch_size() if batch_size is None else batch_size
        if rows % batch:
            raise ValueError(f"{recipe}: rows={rows} is not a whole number of batches of {batch}")
        geometry = {"batch_size": batch, "num_batches": rows // batch}
    path.parent.mkdir(parents=True, exist_ok=True)
    with (
        tempfile.TemporaryDirectory() as downloads,
        tempfile.TemporaryDirectory(dir=path.parent, prefix=".staging-") as staged,
    ):
        sources = {
            name: replace(writers[name](cfg.sources[name], Path(downloads) / name, quota + SPARE_ROWS), quota=quota)
            for name, quota in zip(cfg.sources, shares(rows, len(cfg.sources)), strict=True)
        }
        out = Path(staged) / path.name
        build_training_set(replace(cfg, out_path=str(out), sources=sources, **geometry))
        if not (path.is_file() and filecmp.cmp(out, path, shallow=False)):
            os.replace(out, path)
    return path

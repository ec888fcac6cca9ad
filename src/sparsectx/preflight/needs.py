"""What a preset needs (``--list``): checkpoint, benchmark files, media folders and training files, each with
where it goes and how to get it."""

from __future__ import annotations

import glob
from dataclasses import dataclass
from pathlib import Path

from sparsectx.eval.config import BenchSpec
from sparsectx.eval.protocol import bench_files, lmu_data_root, video_source
from sparsectx.models.loading import PACKAGE_PREFIX
from sparsectx.preflight.benchmark import how_to_get
from sparsectx.preflight.checkpoint import checkpoint_folder
from sparsectx.preflight.training import training_recipes


@dataclass(frozen=True)
class Need:
    """One file or folder a preset needs: what, where it goes, how to get it, and whether it is there."""

    kind: str
    name: str
    where: str
    how: str
    present: bool

    def lines(self) -> list[str]:
        """Returns the need as printed lines."""
        mark = "found  " if self.present else "MISSING"
        return [f"[{mark}] {self.kind} {self.name}", f"          goes: {self.where}", f"          get:  {self.how}"]


def model_needs(name: str, path: str, revision: str | None = None) -> Need:
    """Returns the checkpoint folder model preset ``name`` reads from ``model.path`` (a hub id at the commit
    ``model.revision`` pins: a pinned download writes no ``refs/main``, so the lookup must name the commit)."""
    folder, _ = checkpoint_folder(path, revision)
    present = folder is not None and (folder / "config.json").is_file()
    if path.startswith(PACKAGE_PREFIX):
        return Need(
            "checkpoint",
            name,
            f"{folder} (shipped)",
            "ships with sparsectx (python src/pretrain_tiny.py rebuilds it)",
            present,
        )
    if not path.startswith(("/", ".", "~")) and not Path(path).exists():
        cache = f" ({folder})" if folder is not None else ""
        where = f"a local folder set as model.path (in the study: model_paths.{name}), or the HF cache{cache}"
    else:
        where = f"{path} (model.path; in the study model_paths.{name}=<folder>)"
    hub = path if "/" in path and not path.startswith(("/", ".", "~")) else "<the published checkpoint's hub id>"
    pin = f" --revision {revision}" if revision else ""
    how = (
        f"hf download {hub}{pin} (into the HF cache), or add --local-dir <folder> (config.json, tokenizer, "
        "processor files, chat template, weights)"
    )
    return Need("checkpoint", name, where, how, present)


def bench_needs(spec: BenchSpec) -> list[Need]:
    """Returns the file(s) and media folder a benchmark reads, where each goes and how to get it."""
    try:
        found = [str(p) for p in bench_files(spec)]
    except FileNotFoundError:
        found = []
    out = []
    for name in spec.layout.files:
        if spec.path is not None:
            where = f"bench.{spec.name}.path={spec.path}"
        else:
            where = f"$LMUData/{name} ({lmu_data_root() / name}), or data/{name}, or bench.{spec.name}.path=<file>"
        present = any(Path(p).name == name or len(spec.layout.files) == 1 for p in found)
        out.append(Need("benchmark", f"{spec.name} ({spec.dataset_name}): {name}", where, how_to_get(spec), present))
    if spec.video is not None:
        suffix = spec.video.suffix
        source = video_source(spec, Path(found[0])) if found else None
        root = source.root if source is not None else Path(f"<folder of {spec.layout.files[0]}>") / spec.video.root
        how = (
            f"VLMEvalKit's {spec.dataset_name} download fetches the clips with the TSV (its dataset class), or the "
            f"dataset's own instructions; unpack them so that <root>/<video cell>{suffix} exists"
        )
        where = f"{root} (bench.{spec.name}.video.root, relative to the benchmark file's folder)"
        clips = f"{spec.name}: the clips its 'video' column names"
        out.append(Need("video folder", clips, where, how, root.is_dir() and any(root.iterdir())))
    return out


def train_needs(path: str, conf_dir: Path) -> list[Need]:
    """Returns a training file and the downloads of the ``conf/data/sources`` recipe(s) that write it."""
    recipes = training_recipes(path, conf_dir)
    how = " or ".join(f"python src/build_data.py data/sources={name}" for name, _ in recipes)
    out = [
        Need(
            "training file",
            path,
            f"train_data.path={path}",
            how or "write it in the TSV layout (docs/training_data.md)",
            Path(path).is_file(),
        )
    ]
    for name, block in recipes:
        for source, spec in (block.get("sources") or {}).items():
            for pattern in spec.get("files", []):
                out.append(
                    Need(
                        f"download for data/sources={name}",
                        f"{source}: {pattern}",
                        pattern,
                        f"the {source} dataset's own release (conf/data/sources/{name}.yaml says which)",
                        bool(glob.glob(pattern)),
                    )
                )
            root = spec.get("image_root")
            if root:
                out.append(
                    Need(
                        f"images for data/sources={name}",
                        f"{source}: image folder",
                        root,
                        f"the {source} release's images, unpacked there",
                        Path(root).is_dir(),
                    )
                )
    return out

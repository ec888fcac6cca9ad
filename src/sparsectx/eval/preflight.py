"""The preflight: a model's checkpoint folder and a suite's benchmark files checked in seconds, before any job.

``python src/preflight.py model=<m> bench=<suite>`` (``src/preflight.py``, ``conf/preflight.yaml``) runs
``check_checkpoint`` on the model and ``check_benchmark`` on every benchmark of the suite (and
``check_train_file`` on each training file it is given), with no GPU and no weights loaded:

- checkpoint: ``config.json`` there and its ``model_type``/``architectures`` served by a family
  (``sparsectx.models.families``), the processor files and the chat template found
  (``sparsectx.models.templates``), one image marker per image, ``model.thinking`` honoured, the thinking
  prefix the generation prompt opens, the eos ids (tokenizer and ``generation_config.json``), and the
  visual-token count of a sample image at ``model.max_visual_tokens`` (the checkpoint's own processor);
- benchmark: its file(s) found (``protocol.bench_files``), the columns its layout reads present, every row
  usable (``tsv.read_rows``: index unique, image decodes, ...; ``layout.apply_layout``: options and a gold
  answer the scorer can read), options on every row of a multiple-choice scorer, each video row's clip there
  (``video.clip_problem``). Rows VLMEvalKit drops (``layout.drop_rows``) are counted, never problems.

Every problem is one ``Problem``: the file, the row (its ``index``), the column, what is wrong and the fix.
``needs`` lists what a preset needs (``--list``): checkpoint, benchmark files, media folders, training files,
with where each goes and how to get it. Nothing here generates anything.
"""

from __future__ import annotations

import csv
import glob
import json
import re
import string
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf
from PIL import Image

from sparsectx.data.layout import apply_layout
from sparsectx.data.tsv import VIDEO_COLUMNS, Item, Skip, missing_columns, read_rows, read_tsv
from sparsectx.data.video import clip_problem
from sparsectx.eval.config import BenchSpec
from sparsectx.eval.protocol import BUILD_COMMAND, bench_files, lmu_data_root, video_source
from sparsectx.eval.scorers import SCORERS

PACKAGE_PREFIX = "package:"
ASSETS_DIR = Path(__file__).resolve().parents[1] / "assets"
PROCESSOR_FILES = ("preprocessor_config.json", "processor_config.json")
"""Where a checkpoint declares its image processor (``processor.declared_image_processor``'s order)."""
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.json", "tokenizer.model")


@dataclass(frozen=True)
class Problem:
    """One thing that would make a run fail or score wrong: where it is and how to fix it."""

    file: str
    """The file (or folder) at fault."""
    what: str
    """What is wrong."""
    fix: str
    """What to do about it."""
    row: str = ""
    """The row's ``index`` as written (``line N`` when it has none); "" for a whole-file problem."""
    column: str = ""
    """The column at fault; "" when no single column is."""

    def line(self) -> str:
        """Returns the problem as one printed line: file, row, column, what, fix."""
        where = "".join([f", row {self.row}" if self.row else "", f", column {self.column!r}" if self.column else ""])
        return f"PROBLEM {self.file}{where}: {self.what} -> fix: {self.fix}"


@dataclass
class Checked:
    """One input the preflight looked at (a checkpoint, a benchmark, a training file) and what it found."""

    kind: str
    """``checkpoint``, ``benchmark`` or ``training file``."""
    name: str
    """The model preset, benchmark or training file's name."""
    file: str
    """Where it was looked for."""
    facts: list[str] = field(default_factory=list)
    """What was found (printed on the input's ``ok`` line)."""
    problems: list[Problem] = field(default_factory=list)

    def add(self, file: str, what: str, fix: str, row: str = "", column: str = "") -> None:
        """Returns None after recording a problem."""
        self.problems.append(Problem(str(file), what, fix, str(row), column))


# ---- checkpoint -----------------------------------------------------------------------------------------
def checkpoint_folder(path: str) -> tuple[Path | None, str]:
    """Returns (the local folder of ``model.path``, "") or (None, why not): ``package:<dir>`` is a shipped
    checkpoint, a path is a folder, anything else a hub id found only in the HF cache (no download here)."""
    if path.startswith(PACKAGE_PREFIX):
        return ASSETS_DIR / path[len(PACKAGE_PREFIX) :], ""
    local = Path(path).expanduser()
    if path.startswith(("/", ".", "~")) or local.exists():
        return local, ""
    from huggingface_hub import snapshot_download

    try:
        return Path(snapshot_download(path, local_files_only=True)), ""
    except Exception as error:  # LocalEntryNotFoundError, a malformed id: either way nothing local
        return None, f"a hub id, not in the local Hugging Face cache ({type(error).__name__})"


def check_checkpoint(name: str, model: Any, sample_size: Sequence[int] = (640, 480)) -> Checked:
    """Returns what the checkpoint folder of model preset ``name`` (``model``: a ``ModelConfig``) holds and
    every problem found, without loading weights.

    Checks run in order and stop at the first that leaves nothing to check further (no folder, no
    ``config.json``, a family not served, no tokenizer).
    """
    checked = Checked("checkpoint", name, model.path)
    folder, why = checkpoint_folder(model.path)
    key = f"model.path={model.path}"
    if folder is None:
        checked.add(
            model.path,
            f"{key} is {why}",
            f"download it (hf download {model.path} --local-dir /models/{Path(model.path).name}) and set "
            f"model.path=/models/{Path(model.path).name} (in the study: model_paths.{name}=<folder>)",
        )
        return checked
    checked.file = str(folder)
    if not folder.is_dir():
        checked.add(folder, f"{key}: no folder there", "point model.path at the checkpoint folder (config.json inside)")
        return checked
    spec = _family(checked, folder)
    if spec is None:
        return checked
    checked.facts.append(f"family {spec.name}")
    _processor_files(checked, folder, spec)
    tokenizer = _tokenizer(checked, folder)
    if tokenizer is None:
        return checked
    template = _template(checked, folder, tokenizer, spec, model.thinking)
    _eos_ids(checked, folder, tokenizer)
    if template is not None and not checked.problems:
        _sample_tokens(checked, folder, model, spec, sample_size)
    return checked


def _family(checked: Checked, folder: Path) -> Any:
    """Returns the family record of ``folder``'s config.json, or None after recording why not."""
    from sparsectx.models.families import FAMILIES

    config = folder / "config.json"
    if not config.is_file():
        checked.add(
            config,
            "no config.json: this is not a checkpoint folder (or not all of one)",
            "set model.path to the folder that holds the checkpoint's config.json, tokenizer and processor files, "
            "or copy its config.json from the published checkpoint",
        )
        return None
    try:
        parsed = json.loads(config.read_text())
    except json.JSONDecodeError as error:
        checked.add(config, f"not JSON ({error})", "re-download config.json from the published checkpoint")
        return None
    try:
        return FAMILIES.for_config(parsed, str(config))
    except KeyError as error:
        column = "model_type" if "architectures" not in str(error.args[0]) else "architectures"
        accepted = ", ".join(FAMILIES.model_types())
        checked.add(
            config,
            str(error.args[0]).removeprefix(f"{config}: "),
            f"point model.path at a checkpoint whose model_type is one of {accepted} (a checkpoint of another "
            "family needs its adapter in sparsectx.models first)",
            column=column,
        )
        return None


def _processor_files(checked: Checked, folder: Path, spec: Any) -> None:
    """Records the image processor the folder declares, or the problem with its files."""
    from sparsectx.models.processor import declared_image_processor

    if not any((folder / name).is_file() for name in PROCESSOR_FILES):
        checked.add(
            folder,
            f"no {' or '.join(PROCESSOR_FILES)}: the image processor's settings are missing",
            "copy preprocessor_config.json (or processor_config.json) from the published checkpoint",
        )
        return
    declared, where = declared_image_processor(folder)
    try:
        cls = spec.image_processor_class(declared, where)
    except ValueError as error:
        checked.add(
            where,
            str(error).removeprefix(f"{where}: "),
            "use the checkpoint's own processor files",
            column="image_processor_type",
        )
        return
    checked.facts.append(f"image processor {cls.__name__} ({Path(where).name})")


def _tokenizer(checked: Checked, folder: Path) -> Any:
    """Returns the folder's tokenizer, or None after recording why it does not load."""
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(str(folder))
    except Exception as error:  # a missing or corrupt tokenizer file; transformers raises many kinds
        present = [name for name in TOKENIZER_FILES if (folder / name).is_file()]
        checked.add(
            folder,
            f"the tokenizer does not load ({type(error).__name__}: {str(error)[:160]}); files present: {present}",
            "copy tokenizer.json and tokenizer_config.json from the published checkpoint",
        )
        return None


def _template(checked: Checked, folder: Path, tokenizer: Any, spec: Any, thinking: bool | None) -> Any:
    """Returns the checkpoint's chat template after checking its markers and thinking switch (None after
    recording a problem)."""
    from sparsectx.models.templates import (
        check_image_markers,
        find_chat_template,
        generation_prefix,
        template_thinking_default,
    )

    try:
        template = find_chat_template(folder, tokenizer)
    except FileNotFoundError:
        checked.add(
            folder,
            "no chat template: none in tokenizer_config.json's chat_template, chat_template.jinja or "
            "chat_template.json",
            "copy the checkpoint's chat_template.jinja (or chat_template.json) into the folder",
        )
        return None
    source = Path(template.source).name if template.source != "tokenizer" else "the tokenizer"
    column = "chat_template" if template.source.endswith(".json") else ""
    switches = {} if thinking is None or spec.thinking_switch is None else {spec.thinking_switch: thinking}
    if thinking is not None:
        if spec.thinking_switch is None:
            checked.add(
                template.source,
                f"model.thinking={thinking} but family {spec.name!r} has no thinking switch",
                "set model.thinking=null",
                column=column,
            )
            return None
        if template_thinking_default(tokenizer, template, spec.thinking_switch) is None:
            checked.add(
                template.source,
                f"model.thinking={thinking} but the template renders the same generation prompt "
                f"whatever {spec.thinking_switch} is",
                "use the checkpoint's own template, or model.thinking=null",
                column=column,
            )
            return None
    try:
        check_image_markers(tokenizer, template, spec.image_marker, switches)
    except ValueError:
        rendered = tokenizer.apply_chat_template(
            [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "x"}]}],
            chat_template=template.text,
            tokenize=False,
            add_generation_prompt=True,
            **switches,
        )
        checked.add(
            template.source,
            f"the chat template does not render one {spec.image_marker!r} per image part "
            f"({rendered.count(spec.image_marker)} for one image)",
            f"use the checkpoint's own template, which renders {spec.image_marker!r} for each image",
            column=column,
        )
        return None
    prefix = generation_prefix(tokenizer, template, switches, spec.thinking_tags)
    checked.facts.append(f"template {source}, one {spec.image_marker} per image, thinking prefix {prefix!r}")
    return template


def _eos_ids(checked: Checked, folder: Path, tokenizer: Any) -> None:
    """Records the eos ids of the tokenizer and ``generation_config.json``, or the problem with them."""
    ids: list[int] = [] if tokenizer.eos_token_id is None else [int(tokenizer.eos_token_id)]
    generation = folder / "generation_config.json"
    if generation.is_file():
        value = json.loads(generation.read_text()).get("eos_token_id")
        ids += [int(v) for v in (value if isinstance(value, list) else [value]) if v is not None]
    ids = sorted(set(ids))
    if not ids:
        checked.add(
            generation if generation.is_file() else folder / "tokenizer_config.json",
            "no eos token id in the tokenizer nor in generation_config.json: greedy decoding would never stop "
            "before its cap",
            "copy generation_config.json (its eos_token_id) from the published checkpoint",
            column="eos_token_id",
        )
        return
    outside = [i for i in ids if i >= len(tokenizer)]
    if outside:
        checked.add(
            generation,
            f"eos ids {outside} are outside the tokenizer's {len(tokenizer)} tokens",
            "use the generation_config.json of this checkpoint",
            column="eos_token_id",
        )
        return
    names = [tokenizer.convert_ids_to_tokens(i) for i in ids]
    checked.facts.append(f"eos ids {ids} ({', '.join(names)})")


def _sample_tokens(checked: Checked, folder: Path, model: Any, spec: Any, size: Sequence[int]) -> None:
    """Records the visual-token count of a ``size`` image under the checkpoint's processor and token cap."""
    from sparsectx.models.processor import load_processor

    try:
        processor = load_processor(folder, 1, model.max_visual_tokens, model.thinking)
        messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "x"}]}]
        text = processor.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        out = processor([text], [Image.new("RGB", tuple(size), (128, 128, 128))])
    except Exception as error:  # the processor's own refusal names the file; pass it on whole
        checked.add(
            folder,
            f"the processor does not prepare a {size[0]}x{size[1]} image ({error})",
            "use the checkpoint's own processor files",
        )
        return
    marker = processor.tokenizer.convert_tokens_to_ids(spec.image_marker)
    tokens = int((out["input_ids"] == marker).sum())
    cap = "the checkpoint's own pixel bound" if model.max_visual_tokens is None else f"cap {model.max_visual_tokens}"
    checked.facts.append(f"{size[0]}x{size[1]} image -> {tokens} visual tokens ({cap})")


# ---- benchmark ------------------------------------------------------------------------------------------
_LINE = re.compile(r"^lines? [\d-]+: ")
_COLUMN = re.compile(r"column '([^']+)'")
ROW_FIXES = (
    (
        "fields, header has",
        "",
        "the row has a tab too many or too few (an unescaped tab or quote in a cell); "
        "rewrite it, or re-download the file",
    ),
    ("unparseable TSV", "", "re-download the file (VLMEvalKit's TSV) or rewrite the row"),
    ("empty index", "index", "give the row its index (a unique integer or id)"),
    ("repeats an earlier row", "index", "give every row a unique index: predictions and scores are keyed by it"),
    ("empty question", "question", "fill the row's question, or delete the row"),
    ("empty answer", "answer", "fill the row's gold answer, or delete the row"),
    ("frame", "frames", "re-encode every frame as base64 of a PNG/JPEG, or re-download the file"),
    ("image refers to row", "image", "the row it names has no usable image: fix that row (or the reference)"),
    (
        "image",
        "image",
        "re-encode the image as base64 of a PNG/JPEG (VLMEvalKit's encode_image_to_base64), or re-download the file",
    ),
)
"""(reason text, column, fix) of the reader's skips (``tsv.read_rows``), first match wins."""


def row_problem(checked: Checked, file: Path, skip: Skip, spec: BenchSpec) -> None:
    """Records one unusable row (a reader or layout ``Skip``) as a problem naming its column and the fix."""
    match = _LINE.match(skip.reason)
    reason = skip.reason[match.end() :] if match else skip.reason
    row = skip.index if not match or skip.index.startswith("line") else f"{skip.index} ({match.group(0)[:-2]})"
    named = _COLUMN.search(reason)
    if named:
        column = named.group(1)
        fix = (
            f"fix the row's {column} cell, or the layout (bench.{spec.name}.layout.answer / gold_column / "
            "options) if the whole file reads this way"
        )
        checked.add(file, _COLUMN.sub("", reason, count=1).lstrip(": "), fix, row, column)
        return
    for text, column, fix in ROW_FIXES:
        if text in reason:
            checked.add(file, reason, fix, row, column)
            return
    checked.add(file, reason, "fix or delete the row", row)


def header(path: Path) -> list[str]:
    """Returns the first line of a TSV as its column names ([] for an empty file)."""
    csv.field_size_limit(2**31 - 1)
    with open(path, encoding="utf-8", newline="") as handle:
        return next(csv.reader(handle, delimiter="\t"), [])


def needed_columns(spec: BenchSpec, columns: list[str]) -> list[tuple[str, str]]:
    """Returns (column, why it is needed) for each column ``spec`` reads that ``columns`` lacks."""
    layout = spec.layout
    missing = [(c, "VLMEvalKit's layout has it in every benchmark file") for c in missing_columns(columns)]
    if layout.gold_column not in columns and layout.gold_column not in dict(missing):
        missing.append((layout.gold_column, f"bench.{spec.name}.layout.gold_column reads the gold answer there"))
    if layout.options in ("list", "lines") and layout.options_column not in columns:
        missing.append((layout.options_column, f"bench.{spec.name}.layout.options_column holds the options"))
    letters = [c for c in columns if len(c) == 1 and c in string.ascii_uppercase]
    if layout.options == "columns" and SCORERS.get(spec.scorer).needs_options and len(letters) < 2:
        missing.append(("A", f"scorer {spec.scorer} asks multiple-choice questions: options in columns A, B, ..."))
    if spec.video is not None and not any(c in columns for c in VIDEO_COLUMNS):
        missing.append(("video", "a video benchmark names each row's clip there (or embeds it in 'frames')"))
    if spec.video is not None:
        video = spec.video
        for key in ("prefix_column", "suffix_column", "bound_column", "start_column", "end_column"):
            column = getattr(video, key, "")
            if column and column not in columns:
                missing.append((column, f"bench.{spec.name}.video.{key} reads the clip's path or window there"))
    return missing


def check_benchmark(spec: BenchSpec) -> Checked:
    """Returns what the benchmark's file(s) hold and every problem found (each file read once)."""
    checked = Checked("benchmark", spec.name, spec.path or " + ".join(spec.layout.files))
    try:
        paths = bench_files(spec)
    except FileNotFoundError as error:
        where = str(error).split(" at ", 1)[1].split(" (bench.", 1)[0] if " at " in str(error) else checked.file
        checked.add(
            where,
            f"benchmark {spec.name!r}: file {' + '.join(spec.layout.files)} not found",
            how_to_get(spec) + f"; or set $LMUData, or bench.{spec.name}.path=<file or folder>",
        )
        return checked
    checked.file = ", ".join(map(str, paths))
    rows = dropped = 0
    for path in paths:
        missing = needed_columns(spec, header(path))
        for column, why in missing:
            checked.add(
                path,
                f"no column {column!r} ({why})",
                f"use the file VLMEvalKit writes for "
                f"{spec.dataset_name}, or point bench.{spec.name}.layout (or .video) at the file's columns",
                column=column,
            )
        if missing:
            continue
        items, skips, drops = read_rows(path, drop_no_image="no_image" in spec.layout.drop_rows)
        items, unmapped = apply_layout(items, spec.layout)
        for skip in [*skips, *unmapped]:
            row_problem(checked, path, skip, spec)
        _options_and_clips(checked, spec, path, items)
        rows, dropped = rows + len(items), dropped + len(drops)
    drop_note = f", {dropped} dropped as VLMEvalKit drops them ({', '.join(spec.layout.drop_rows)})" if dropped else ""
    checked.facts.append(f"{rows} usable rows{drop_note}")
    return checked


def _options_and_clips(checked: Checked, spec: BenchSpec, path: Path, items: list[Item]) -> None:
    """Records multiple-choice rows without options and video rows whose clip is not there."""
    if SCORERS.get(spec.scorer).needs_options:
        where = spec.layout.options_column or "A"
        for item in items:
            if not item.options:
                checked.add(
                    path,
                    f"no options, but scorer {spec.scorer} scores multiple choice",
                    f"put the row's options in {'columns A, B, ...' if where == 'A' else repr(where)}, or delete "
                    "the row",
                    item.index,
                    where,
                )
    if spec.video is None:
        return
    source = video_source(spec, path)
    for item in items:
        problem = clip_problem(item, source)
        if problem:
            fix = (
                f"put the clip there (VLMEvalKit's {spec.dataset_name} download, or the dataset's own), or set "
                f"bench.{spec.name}.video.root to the folder holding the clips"
            )
            checked.add(path, problem, fix, item.index, "frames" if item.frames else "video")


def how_to_get(spec: BenchSpec) -> str:
    """Returns how to get a benchmark's file(s): the build command, or VLMEvalKit's download under its name."""
    if spec.layout.source.startswith("sparsectx"):
        return f"build the synthetic suite: `{BUILD_COMMAND}`"
    if spec.video is not None:
        return (
            f"VLMEvalKit's {spec.dataset_name} class downloads the dataset and writes {' + '.join(spec.layout.files)} "
            f'beside its clips (python -c "from vlmeval.dataset import build_dataset; '
            f"build_dataset('{spec.dataset_name}')\"); point bench.{spec.name}.path at that folder "
            f"(conf/bench/{spec.name}.yaml says where it lands)"
        )
    return (
        f"VLMEvalKit downloads {spec.dataset_name} as {' + '.join(spec.layout.files)} into $LMUData when it first "
        f"runs it (python -c \"from vlmeval.dataset import build_dataset; build_dataset('{spec.dataset_name}')\")"
    )


# ---- training files -------------------------------------------------------------------------------------
def training_recipes(path: str, conf_dir: Path) -> list[tuple[str, dict[str, Any]]]:
    """Returns (recipe name, its ``training_set`` block) of each ``conf/data/sources`` recipe writing ``path``."""
    import yaml

    found = []
    for recipe in sorted((conf_dir / "data" / "sources").glob("*.yaml")):
        block = (yaml.safe_load(recipe.read_text()) or {}).get("training_set") or {}
        if block.get("out_path") == path:
            found.append((recipe.stem, block))
    return found


def check_train_file(path: str, max_skip_fraction: float, conf_dir: Path) -> Checked:
    """Returns what a training TSV holds and its problems: missing, a missing column, or more unusable rows
    than ``train_data.max_skip_fraction`` (the trainer refuses the file beyond it)."""
    checked = Checked("training file", Path(path).name, path)
    file = Path(path)
    if not file.is_file():
        recipes = training_recipes(path, conf_dir)
        how = " or ".join(f"`python src/build_data.py data/sources={name}`" for name, _ in recipes)
        checked.add(
            path,
            "training file not found",
            f"build it with {how or 'the recipe that writes it'} "
            "(python src/preflight.py --list names its downloads), or set train_data.path to it",
        )
        return checked
    columns = header(file)
    for column in [*missing_columns(columns), *(["trace"] if "trace" not in columns else [])]:
        checked.add(path, f"no column {column!r}", "rebuild it with python src/build_data.py", column=column)
    if checked.problems:
        return checked
    items, skips = read_tsv(file)
    total = len(items) + len(skips)
    if len(skips) > max_skip_fraction * total:
        for skip in skips[:5]:
            checked.add(
                path,
                f"{skip.reason} ({len(skips)} of {total} rows unusable, above "
                f"train_data.max_skip_fraction={max_skip_fraction})",
                "rebuild the file",
                skip.index,
            )
    checked.facts.append(f"{len(items)} usable rows ({len(skips)} unusable)")
    return checked


# ---- what a preset needs (--list) -----------------------------------------------------------------------
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


def model_needs(name: str, path: str) -> Need:
    """Returns the checkpoint folder model preset ``name`` reads from ``model.path``."""
    folder, _ = checkpoint_folder(path)
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
    how = f"hf download {hub} --local-dir <folder> (config.json, tokenizer, processor files, chat template, weights)"
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


# ---- report ---------------------------------------------------------------------------------------------
def report_lines(checks: Iterable[Checked], max_lines: int) -> list[str]:
    """Returns the printed report: an ``ok`` line per clean input, one line per problem (at most ``max_lines``
    per input, the rest counted), and the one-line summary last."""
    checks = list(checks)
    lines = []
    for check in checks:
        if not check.problems:
            lines.append(f"ok      {check.kind} {check.name} ({check.file}): {'; '.join(check.facts)}")
            continue
        lines += [problem.line() for problem in check.problems[:max_lines]]
        if len(check.problems) > max_lines:
            lines.append(
                f"PROBLEM ... and {len(check.problems) - max_lines} more in {check.kind} {check.name} "
                f"(max_lines={max_lines})"
            )
    lines.append(summary(checks))
    return lines


def summary(checks: Sequence[Checked]) -> str:
    """Returns the one-line verdict: how many inputs of each kind, how many failed, how many problems."""
    kinds: dict[str, int] = {}
    for check in checks:
        kinds[check.kind] = kinds.get(check.kind, 0) + 1
    counted = ", ".join(f"{n} {kind}{'s' if n > 1 else ''}" for kind, n in kinds.items())
    failed = [c for c in checks if c.problems]
    if not failed:
        return f"preflight passed: {counted} checked, no problem"
    problems = sum(len(c.problems) for c in failed)
    names = ", ".join(f"{c.kind} {c.name}" for c in failed)
    return (
        f"preflight FAILED: {problems} problem(s) in {len(failed)} of {len(checks)} inputs ({names}); {counted} checked"
    )


def report_json(checks: Sequence[Checked], seconds: float) -> dict[str, Any]:
    """Returns the report as data (the DAG's stamp): passed, seconds, every input with its facts and problems."""
    return {
        "passed": not any(c.problems for c in checks),
        "seconds": round(seconds, 2),
        "inputs": [asdict(c) for c in checks],
    }


# ---- the entry point's run ------------------------------------------------------------------------------
Compose = Callable[[list[str]], DictConfig]
"""Composes ``conf/preflight.yaml`` with the caller's overrides plus the given ones (``src/preflight.py``)."""


@dataclass
class PreflightConfig:
    """The keys of ``conf/preflight.yaml`` the preflight reads, checked (``load_preflight_config``)."""

    model: Any
    """The ``model`` group (a ``ModelConfig``)."""
    bench: dict[str, BenchSpec]
    list: bool
    models: list[str] | None
    model_paths: dict[str, str] | None
    train_files: list[str]
    train_max_skip_fraction: float
    sample_image: list[int]
    max_lines: int
    out: str | None

    def __post_init__(self) -> None:
        if len(self.sample_image) != 2 or min(self.sample_image) < 1:
            raise ValueError(f"sample_image={list(self.sample_image)} must be [width, height], both >= 1")
        if self.max_lines < 1:
            raise ValueError(f"max_lines={self.max_lines} must be >= 1")
        if not 0.0 <= self.train_max_skip_fraction < 1.0:
            raise ValueError(f"train_max_skip_fraction={self.train_max_skip_fraction} must lie in [0, 1)")


def load_preflight_config(cfg: DictConfig) -> PreflightConfig:
    """Returns the checked config; a mistyped key raises naming it. Keys the preflight does not read (a
    model's ``conf/model/scale/evaluate`` file also sets Pass@K sizes) are left out."""
    from sparsectx.models import ModelConfig

    schema = OmegaConf.structured(PreflightConfig)
    schema.model = OmegaConf.structured(ModelConfig)
    keys = [name for name in PreflightConfig.__dataclass_fields__ if name != "bench"]
    merged = OmegaConf.merge(schema, {"bench": {}, **{key: cfg[key] for key in keys}})
    merged.bench = {}
    checked: PreflightConfig = OmegaConf.to_object(merged)  # type: ignore[assignment]
    checked.bench = {name: bench_spec_from_node(node) for name, node in cfg.bench.items()}
    return checked


def bench_spec_from_node(node: DictConfig) -> BenchSpec:
    """Returns the checked ``BenchSpec`` of a composed ``bench.<name>`` node."""
    from sparsectx.eval.config import bench_spec_from

    return bench_spec_from(OmegaConf.to_container(node, resolve=True))


def model_config(node: DictConfig, name: str, paths: dict[str, str]) -> Any:
    """Returns the checked ``ModelConfig`` of a composed ``model`` node, its path replaced by ``paths[name]``."""
    from sparsectx.models import ModelConfig

    model = OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(ModelConfig), node))
    if name in paths:
        model.path = str(paths[name])
    return model


def grid_entries(grid: DictConfig | None, key: str) -> list[str] | None:
    """Returns the supported entries of ``grid.<key>`` (models, benchmarks), None without a grid."""
    if grid is None:
        return None
    return [name for name, spec in grid[key].items() if not (spec or {}).get("unsupported")]


def grid_train_files(grid: DictConfig | None) -> list[str]:
    """Returns the ``train_data.path`` the grid's train stage sets ([] when it sets none or has no methods)."""
    if grid is None or not grid.get("methods"):
        return []
    paths = [o.split("=", 1)[1] for o in grid.overrides.get("train", []) if o.startswith("train_data.path=")]
    return paths[-1:]


@dataclass
class Targets:
    """What one preflight call looks at."""

    models: list[tuple[str, Any]]
    """(model preset name, ``ModelConfig``) per checkpoint."""
    benches: dict[str, BenchSpec]
    train_files: list[str]


def targets(cfg: DictConfig, compose: Compose) -> Targets:
    """Returns the checkpoints, benchmarks and training files ``cfg`` names.

    ``models`` (a list of ``conf/model`` names) checks each, else the ``model`` group's one; an experiment
    preset (``experiment=<preset>``, whose ``grid`` is set) with ``models`` unset checks its grid's supported
    models and benchmarks and the training file its train stage reads. ``train_files`` adds training files.
    """
    paths = {str(k): str(v) for k, v in (cfg.model_paths or {}).items()}
    names = list(cfg.models) if cfg.models is not None else grid_entries(cfg.grid, "models")
    if names is None:
        models = [(cfg.model.name, model_config(cfg.model, cfg.model.name, paths))]
    else:
        models = [(name, model_config(compose([f"model={name}"]).model, name, paths)) for name in names]
    bench_node = cfg.bench
    preset_benches = grid_entries(cfg.grid, "benchmarks") if cfg.models is None else None
    if preset_benches:
        bench_node = compose([f"bench=[{','.join(preset_benches)}]"]).bench
    benches = {name: bench_spec_from_node(node) for name, node in bench_node.items()}
    train = [*(cfg.train_files or []), *(grid_train_files(cfg.grid) if cfg.models is None else [])]
    return Targets(models, benches, list(dict.fromkeys(train)))


def run(cfg: DictConfig, compose: Compose, conf_dir: Path) -> int:
    """Returns the exit status after printing the preflight's report (or with ``list=true`` what the inputs
    need): 0 when every input passed (or for a list), 1 when anything failed. With ``out`` set and every
    input passed, writes the report as JSON there (the DAG's stamp); nothing else is written."""
    start = time.perf_counter()
    load_preflight_config(cfg)  # a mistyped key fails before anything is read
    chosen = targets(cfg, compose)
    if cfg.list:
        needs = [model_needs(name, model.path) for name, model in chosen.models]
        needs += [need for spec in chosen.benches.values() for need in bench_needs(spec)]
        needs += [need for path in chosen.train_files for need in train_needs(path, conf_dir)]
        for need in needs:
            print("\n".join(need.lines()))
        missing = sum(not need.present for need in needs)
        print(f"preflight --list: {len(needs)} files and folders needed, {missing} missing here")
        return 0
    size = tuple(cfg.sample_image)
    checks = [check_checkpoint(name, model, size) for name, model in chosen.models]
    checks += [check_benchmark(spec) for spec in chosen.benches.values()]
    checks += [check_train_file(path, cfg.train_max_skip_fraction, conf_dir) for path in chosen.train_files]
    lines = report_lines(checks, cfg.max_lines)
    seconds = time.perf_counter() - start
    print("\n".join(lines[:-1] + [f"{lines[-1]} ({seconds:.1f} s)"]))
    passed = not any(c.problems for c in checks)
    if passed and cfg.out:
        from sparsectx.io import atomic_write_bytes

        atomic_write_bytes(Path(cfg.out), json.dumps(report_json(checks, seconds), indent=2).encode())
    return 0 if passed else 1

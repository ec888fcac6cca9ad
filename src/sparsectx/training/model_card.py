"""The model card (``README.md``) and training facts of a trained run's ``checkpoint/`` and ``adapter/``.

A Hugging Face model card is a Markdown file opened by YAML front matter between two ``---`` lines
(huggingface_hub ``repocard.RepoCard``: ``REGEX_YAML_BLOCK``, parsed by ``ModelCard.load``; the keys are those of
``repocard_data.ModelCardData``: ``base_model``, ``base_model_relation``, ``library_name``, ``pipeline_tag``,
``tags``; any other key is kept as given). The card names the base model, the method, the pruner and budget the
model was trained for, the training data, steps, seed and the method's key settings, and how to load it. The
same facts go, as JSON, into ``sparsectx_training.json`` (``training`` and ``base_model``), which the card
points at; the run's whole resolved config is ``config.yaml`` beside the folder.

When the model's evaluation results are known (``python src/export.py`` finds them, ``sparsectx.export``), the card
also carries them: a Markdown table for the reader and the Hub's ``model-index`` metadata, written by huggingface_hub's
own ``repocard_data.ModelCardData`` and ``EvalResult`` (``eval_results_to_model_index``), the format
``ModelCard.load`` parses back (``model_index_to_eval_results``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from huggingface_hub import EvalResult, ModelCardData

from sparsectx.checkpoints import CHECKPOINT_INFO
from sparsectx.models import ModelConfig
from sparsectx.models.loading import hub_commit, is_hub_id, resolve_model_path
from sparsectx.paths import budget_tag
from sparsectx.training.config import TrainConfig

CARD_FILE = "README.md"
"""The model card's file name (the Hub renders a repository's ``README.md`` as its card)."""

MERGED, ADAPTER = "merged", "adapter"
"""The two folders a card describes: the full model (LoRA merged, or full-parameter weights) or a PEFT adapter."""

EVAL_TASK = "image-text-to-text"
"""The ``model-index`` task type of every score: the Hub's pipeline tag of the model (``pipeline_tag``)."""


@dataclass(frozen=True)
class Evaluation:
    """One benchmark score of the model: a result JSON of ``python src/evaluate.py`` (``eval.results.BenchResult``)."""

    benchmark: str
    """The benchmark's config name (``<leaf>/<benchmark>.json``)."""
    dataset: str
    """Its dataset name (``BenchResult.dataset_name``: VLMEvalKit's name for a real benchmark)."""
    scorer: str
    score: float
    """The scorer's headline, on its own scale (percent; out of 1000 for OCRBench; summed for MME)."""
    pruner: str
    budget: float
    items: int
    """Items scored (``BenchResult.n_scored``)."""


@dataclass(frozen=True)
class BaseModel:
    """The checkpoint a run trained from, as a loader finds it again."""

    name_or_path: str
    """A hub id (``Org/Name``), or the absolute local folder (a ``package:`` or local ``model.path``)."""
    revision: str | None
    """The hub commit the run read (``model.revision``, else the commit of the cached snapshot); None for a folder."""
    snapshot: str
    """``loading.snapshot_identity`` of the folder read: ``Org/Name@<commit>`` or a fingerprint of its files."""

    def as_record(self) -> dict[str, str | None]:
        """Returns the base model as the JSON block ``sparsectx_training.json`` records."""
        return {"name_or_path": self.name_or_path, "revision": self.revision, "snapshot": self.snapshot}


def base_model(model: ModelConfig, snapshot: str) -> BaseModel:
    """Returns how the run's base checkpoint is named for peft and the Hub.

    A hub id keeps its id (portable) with the commit read; a local or shipped (``package:``) checkpoint is named by
    its absolute folder, since peft and transformers resolve nothing else (peft ``PeftModel.from_pretrained`` and
    transformers ``integrations.peft.maybe_load_adapters`` read ``base_model_name_or_path`` as a path or hub id).

    Args:
        model: the run's ``model`` config.
        snapshot: the run-defining ``model.snapshot`` (``training.config.run_defining``).
    """
    folder = resolve_model_path(model.path, model.revision, model.local_files_only)
    if is_hub_id(model.path):
        return BaseModel(model.path, model.revision or hub_commit(folder), snapshot)
    return BaseModel(str(Path(folder).absolute()), None, snapshot)


def training_facts(tc: TrainConfig, steps: int, samples_seen: int) -> dict[str, Any]:
    """Returns the settings that say what a checkpoint was trained for and how (plain JSON and YAML values).

    Recorded in ``sparsectx_training.json`` (``training``) and the card's front matter (``sparsectx``), so a reader
    of either needs no sparsectx code: which pruner and budget the model expects at inference, the data, the
    steps, the seed and the method's settings that change what it learns.
    """
    method = tc.method
    facts: dict[str, Any] = {
        "experiment": tc.experiment,
        "model": tc.model.name,
        "method": method.name,
        "run_tag": tc.run_tag or None,
        "pruner": tc.pruner.name,
        "budget": tc.budget,
        "budget_schedule": method.schedule.name,
        "train_data": tc.train_data.path,
        "steps": steps,
        "samples_seen": samples_seen,
        "effective_batch_size": method.effective_batch_size,
        "seed": tc.seed,
        "prefix": method.prefix,
        "objective": method.objective,
        "teacher": method.teacher.kind,
        "ema_decay": method.teacher.ema_decay,
        "divergence": method.divergence.name,
        "divergence_beta": method.divergence.beta,
        "positions": method.positions.name,
        "positions_fraction": method.positions.fraction,
        "lr": method.optim.lr,
        "lr_schedule": method.optim.lr_schedule,
        "dtype": tc.model.dtype,
        "train_vision": method.train_vision,
        "lora": None,
        "rl": None,
    }
    if method.lora.enabled:
        lora = method.lora
        facts["lora"] = {
            "r": lora.r,
            "alpha": lora.alpha,
            "dropout": lora.dropout,
            "target_modules": list(lora.target_modules),
        }
    if method.rl is not None:  # the reward's params are left out: a judge's settings may name credentials
        rl = method.rl
        facts["rl"] = {
            "group_size": rl.group_size,
            "reward": rl.reward.name,
            "importance_sampling_level": rl.importance_sampling_level,
            "epsilon_low": rl.epsilon_low,
            "epsilon_high": rl.epsilon_high,
            "beta": rl.beta,
            "num_iterations": rl.num_iterations,
        }
    return facts


def render_card(kind: str, base: BaseModel, facts: dict[str, Any], evaluations: Sequence[Evaluation] = ()) -> str:
    """Returns the model card of a run's ``checkpoint/`` (``kind`` ``MERGED``) or ``adapter/`` (``ADAPTER``).

    The front matter's ``base_model_relation`` is ``finetune`` for the full model and ``adapter`` for the adapter
    (huggingface_hub ``repocard_data.ModelCardData``: the Hub's relation names); ``library_name`` is what loads
    the folder (``transformers``, or ``peft``). ``evaluations`` (the model's known scores) add the body's
    evaluation table and the front matter's ``model-index`` (``model_index``); none, and the card has neither.
    """
    lora = facts["lora"] is not None
    tags = ["sparsectx", "visual-token-pruning", facts["method"], facts["pruner"], *(["lora"] if lora else [])]
    meta = {
        "base_model": base.name_or_path,
        "base_model_relation": "adapter" if kind == ADAPTER else "finetune",
        "library_name": "peft" if kind == ADAPTER else "transformers",
        "pipeline_tag": "image-text-to-text",
        "tags": tags,
        "sparsectx": facts,
    }
    evaluations = _trained_setting_first(evaluations, facts)
    if evaluations:
        meta["model-index"] = model_index(model_name(facts), evaluations)
    front = yaml.safe_dump(meta, sort_keys=False, allow_unicode=True)
    return f"---\n{front}---\n\n{_body(kind, base, facts, evaluations)}"


def model_name(facts: dict[str, Any]) -> str:
    """Returns the name the card's ``model-index`` gives the model: ``<model>-<method>-<pruner>-<budget>``."""
    return f"{facts['model']}-{facts['method']}-{facts['pruner']}-{budget_tag(facts['budget'])}"


def model_index(name: str, evaluations: Sequence[Evaluation]) -> list[dict[str, Any]]:
    """Returns the Hub's ``model-index`` of ``evaluations`` as huggingface_hub writes it (``ModelCardData.to_dict``,
    ``repocard_data.eval_results_to_model_index``): one result per dataset, one metric per pruner and budget.

    The pruner, budget and items scored of each score go into the metric's ``args`` (``EvalResult.metric_args``):
    the model-index has no field for the visual-token budget a score was measured at.
    """
    results = [
        EvalResult(
            task_type=EVAL_TASK,
            dataset_type=row.dataset,
            dataset_name=row.benchmark,
            metric_type=row.scorer,
            metric_value=row.score,
            metric_name=f"{row.scorer} ({row.pruner}, budget {budget_tag(row.budget)})",
            metric_args={"pruner": row.pruner, "budget": row.budget, "items": row.items},
        )
        for row in evaluations
    ]
    return ModelCardData(model_name=name, eval_results=results).to_dict()["model-index"]


def _is_trained_setting(row: Evaluation, facts: dict[str, Any]) -> bool:
    """Returns whether ``row`` was measured at the pruner and budget the model was trained for."""
    return row.pruner == facts["pruner"] and row.budget == facts["budget"]


def _trained_setting_first(evaluations: Sequence[Evaluation], facts: dict[str, Any]) -> list[Evaluation]:
    """Returns ``evaluations`` with the trained pruner and budget's first, then by pruner and budget (each group
    keeps its benchmarks' order)."""
    return sorted(evaluations, key=lambda row: (not _is_trained_setting(row, facts), row.pruner, row.budget))


def _evaluation_section(kind: str, facts: dict[str, Any], evaluations: Sequence[Evaluation]) -> list[str]:
    """Returns the card's evaluation table (no lines when no score is known)."""
    if not evaluations:
        return []
    measured = " on the merged copy of this adapter (the run's `checkpoint/`)" if kind == ADAPTER else ""
    return [
        "## Evaluation",
        "",
        f"Scores by sparsectx's `python src/evaluate.py` (greedy decoding){measured}, each on its scorer's scale "
        "(percent; OCRBench out of 1000; MME summed), the pruner and budget it was trained for first. The same "
        "figures are the front matter's `model-index`.",
        "",
        "| benchmark | pruner | budget | score | scorer | items |",
        "| --- | --- | --- | --- | --- | --- |",
        *(
            f"| {row.benchmark} | {row.pruner} | {budget_tag(row.budget)}"
            f"{' (as trained)' if _is_trained_setting(row, facts) else ''} | {row.score:.2f} | {row.scorer} | "
            f"{row.items} |"
            for row in evaluations
        ),
        "",
    ]


def _body(kind: str, base: BaseModel, facts: dict[str, Any], evaluations: Sequence[Evaluation]) -> str:
    """Returns the card's Markdown: what the folder holds, the training table, the evaluation table when scores
    are known, how to load it, the files."""
    budget = facts["budget"]
    at = f" at revision `{base.revision}`" if base.revision else ""
    if kind == ADAPTER:
        holds = f"the LoRA adapter (PEFT layout) of `{base.name_or_path}`{at}; its weights are not included"
    elif facts["lora"] is not None:
        holds = f"`{base.name_or_path}`{at} with the trained LoRA merged into its weights"
    else:
        holds = f"`{base.name_or_path}`{at} with its language model trained in full"
    lines = [
        f"# {facts['model']} · {facts['method']} · {facts['pruner']} at budget {budget_tag(budget)}",
        "",
        f"Post-trained with **{facts['method']}** (sparsectx) to answer from **{budget * 100:.4g}%** of its visual "
        f"tokens, kept by the **{facts['pruner']}** pruner. This folder holds {holds}.",
        "",
        "## Training",
        "",
        "| setting | value |",
        "| --- | --- |",
        f"| base model | `{base.name_or_path}`{' @ `' + base.revision + '`' if base.revision else ''} |",
        *(f"| {key} | {_cell(value)} |" for key, value in facts.items() if value is not None),
        "",
        *_evaluation_section(kind, facts, evaluations),
        "## How to load",
        "",
        *(_adapter_usage(base, facts) if kind == ADAPTER else _merged_usage(facts)),
        "",
        "## Files",
        "",
        f"- `{CHECKPOINT_INFO}`: the training record (JSON): `training` holds the settings above, `base_model` the "
        "checkpoint trained from (its snapshot identity), `config_hash` the run-defining config, `git` the code "
        "commit, `files_sha256` every other file's sha256 (checked before sparsectx loads the folder).",
        "- `../config.yaml` (in the run directory): the whole resolved training config.",
        "",
    ]
    return "\n".join(lines)


def _cell(value: Any) -> str:
    """Returns a table cell: lists and dicts as compact JSON-like text, other values as they print."""
    if isinstance(value, dict):
        return ", ".join(f"{key}={_cell(item)}" for key, item in value.items())
    if isinstance(value, list):
        return "[" + ", ".join(str(item) for item in value) + "]"
    return f"`{value}`"


def _merged_usage(facts: dict[str, Any]) -> list[str]:
    """Returns the loading instructions of a full model folder."""
    return [
        "```python",
        "from transformers import AutoModelForImageTextToText, AutoProcessor",
        "",
        'model = AutoModelForImageTextToText.from_pretrained("<this folder>", dtype="auto")',
        'processor = AutoProcessor.from_pretrained("<this folder>")  # Qwen-VL: needs torchvision',
        "```",
        "",
        "It was trained to see its visual tokens pruned; evaluate it as trained with sparsectx:",
        "",
        "```bash",
        f"python src/evaluate.py checkpoint=<this folder> pruner={facts['pruner']} "
        f"budget={budget_tag(facts['budget'])}",
        "```",
    ]


def _adapter_usage(base: BaseModel, facts: dict[str, Any]) -> list[str]:
    """Returns the loading instructions of a PEFT adapter folder."""
    revision = f', revision="{base.revision}"' if base.revision else ""
    dtype = facts["dtype"]
    return [
        "```python",
        "from peft import PeftModel",
        "from transformers import AutoModelForImageTextToText",
        "",
        '# in the dtype the run trained in; the base\'s stored dtype (dtype="auto") may be another',
        f'base = AutoModelForImageTextToText.from_pretrained("{base.name_or_path}"{revision}, dtype="{dtype}")',
        'model = PeftModel.from_pretrained(base, "<this folder>")  # model.merge_and_unload() for plain weights',
        "",
        "# or with a check that the base is the very checkpoint the adapter was trained on:",
        "from sparsectx.training.lora_export import load_lora_adapter",
        'model = load_lora_adapter("<this folder>")',
        "```",
        "",
        f"The processor is the base model's. A merged copy for `python src/evaluate.py checkpoint=...` (pruner="
        f"{facts['pruner']}, budget={budget_tag(facts['budget'])}): rerun the training command with "
        "`save_merged=true`, which writes `checkpoint/` from the run's final `state/` without training again.",
    ]

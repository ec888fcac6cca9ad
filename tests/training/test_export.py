"""``python src/export.py``: a finished run's ``adapter/`` or ``checkpoint/`` published to the Hub or a local folder,
read back with the tools a user of the Hub has (huggingface_hub's card parser, peft, transformers).

The Hub is a fake ``HfApi`` (``FakeHub``) that binds every call to the real method's signature and keeps the files
``upload_folder`` would send: the CI machine has no network. Every refusal (no credentials, offline mode, a run that
has not finished, a base model the adapter was not trained on) comes before any call and any file written.
"""

from __future__ import annotations

import inspect
import json
import os
import re
import shutil
import subprocess
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import huggingface_hub
import pytest
import torch
import yaml
from huggingface_hub import HfApi, ModelCard
from huggingface_hub.hf_api import RepoUrl
from hydra import compose, initialize_config_dir
from hydra.core.config_store import ConfigStore
from omegaconf import DictConfig
from peft import PeftModel
from tiny_models import tiny_qwen2_5_vl
from transformers import AutoModelForImageTextToText, Qwen2_5_VLForConditionalGeneration

from sparsectx.checkpoints import verify_checkpoint
from sparsectx.eval.runner import run as evaluate
from sparsectx.models.processor import load_processor
from sparsectx.paths import CHECKPOINT_INFO
from sparsectx.training import loop
from tests.eval.test_runner_support import SIDE, base_overrides, compose_eval, write_bench

from .test_hf_checkpoint import LOGIT_ATOL, LORA_RUN, logits, model_inputs
from .test_loop_support import CONF_DIR, TinyEnv, compose_train, shared_env, train_overrides

ROOT = Path(__file__).resolve().parents[2]
BENCH = "syn_count"
STUDY = "my_lora"
"""The training run's experiment: a study of one's own, not a preset."""
HUB_BASE = "org/tiny-vlm"
"""The hub id under which the tests' fake Hugging Face cache holds a byte-identical copy of the run's base."""
COMMIT = "0123456789abcdef0123456789abcdef01234567"


@pytest.fixture(scope="module")
def tiny_env(tmp_path_factory: pytest.TempPathFactory) -> TinyEnv:
    """Returns the session's tiny model directory and training TSV."""
    return shared_env(tmp_path_factory)


@pytest.fixture(scope="module")
def evaluated(tiny_env: TinyEnv, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    """Returns (run directory, results root, result JSON) of a 2-step SCOPD run of the tiny model whose merged
    checkpoint ``evaluate`` scored on 2 rows of one benchmark at the budget and pruner it was trained for."""
    root = tmp_path_factory.mktemp("export")
    # a study of one's own (python src/train.py experiment=my_lora registers it so, sparsectx.cli.name_studies),
    # evaluated as docs/checkpoints.md says, without experiment=: its results land under results/dev/
    ConfigStore.instance().store(group="experiment", name=STUDY, node={"experiment": STUDY}, package="_global_")
    training = [*train_overrides(tiny_env, root / "runs"), *LORA_RUN, f"experiment={STUDY}"]
    run_dir = loop.run(compose_train(training)).run_dir
    bench = {BENCH: write_bench(root / f"{BENCH}.tsv", BENCH, 2, SIDE)}
    overrides = [f"bench={BENCH}", *base_overrides(tiny_env.model_dir, root / "results", bench, 4)]
    (result,) = evaluate(compose_eval([*overrides, f"checkpoint={run_dir / 'checkpoint'}", "budget=0.1"]))
    assert result.parts[-6] == "dev" and run_dir.parts[-5] == STUDY
    return run_dir, root / "results", result


def compose_export(overrides: list[str]) -> DictConfig:
    """Returns ``conf/export.yaml`` composed with ``overrides`` (Hydra compose API)."""
    with initialize_config_dir(version_base=None, config_dir=str(CONF_DIR)):
        return compose("export", overrides=overrides)


def export(overrides: list[str]) -> str:
    """Returns what ``sparsectx.export.publish.run`` says it did with ``conf/export.yaml`` and ``overrides``."""
    from sparsectx.export.publish import run

    return run(compose_export(overrides))


class FakeHub:
    """Stands in for ``huggingface_hub.HfApi``: each call is bound to the real method's signature (a keyword the
    real API lacks fails here as it would there) and recorded; ``upload_folder`` keeps the bytes of every file of
    the folder it is given, read as the real one reads them (``HfApi._prepare_upload_folder_additions``: every
    ``path.is_file()`` under the folder, links followed)."""

    calls: list[tuple[str, dict[str, Any]]]
    files: dict[str, bytes]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        inspect.signature(HfApi.__init__).bind(self, *args, **kwargs)

    def _record(self, name: str, *args: Any, **kwargs: Any) -> dict[str, Any]:
        bound = inspect.signature(getattr(HfApi, name)).bind(self, *args, **kwargs).arguments
        arguments = {key: value for key, value in bound.items() if key != "self"}
        self.calls.append((name, arguments))
        return arguments

    def create_repo(self, *args: Any, **kwargs: Any) -> RepoUrl:
        arguments = self._record("create_repo", *args, **kwargs)
        return RepoUrl(f"https://huggingface.co/{arguments['repo_id']}")

    def upload_folder(self, *args: Any, **kwargs: Any) -> str:
        folder = Path(self._record("upload_folder", *args, **kwargs)["folder_path"])
        for path in sorted(folder.glob("**/*")):
            if path.is_file():
                self.files[path.relative_to(folder).as_posix()] = path.read_bytes()
        return "commit"


@pytest.fixture
def hub(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[type[FakeHub]]:
    """Returns the fake ``HfApi`` the export uses, with a token in ``HF_TOKEN``, online, and a Hugging Face cache
    (``HF_HUB_CACHE``) holding nothing yet."""
    import sparsectx.export.publish as publish

    class Recorded(FakeHub):
        calls: list[tuple[str, dict[str, Any]]] = []
        files: dict[str, bytes] = {}

    monkeypatch.setattr(publish, "HfApi", Recorded)
    monkeypatch.setenv("HF_TOKEN", "hf_fake")
    monkeypatch.delenv("HF_OIDC_RESOURCE", raising=False)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "hf-cache"))
    yield Recorded


def cache_copy(base: Path, cache: Path) -> Path:
    """Returns the snapshot folder of ``HUB_BASE`` in the Hugging Face cache ``cache``: a byte copy of ``base``,
    laid out as ``huggingface_hub.snapshot_download`` leaves a download (``models--org--name/snapshots/<commit>``,
    ``refs/main`` naming the commit)."""
    repo = cache / f"models--{HUB_BASE.replace('/', '--')}"
    snapshot = repo / "snapshots" / COMMIT
    shutil.copytree(base, snapshot)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(COMMIT)
    return snapshot


def materialize(files: dict[str, bytes], folder: Path) -> Path:
    """Returns ``folder`` holding ``files`` (what a download of the pushed repository gives)."""
    for name, data in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_bytes(data)
    return folder


def tree_bytes(folder: Path) -> dict[str, bytes]:
    """Returns {relative path: bytes} of every file under ``folder``."""
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.mark.slow
def test_push_sends_the_adapter_its_card_with_evaluations_and_a_hub_base(
    evaluated: tuple[Path, Path, Path], tiny_env: TinyEnv, hub: type[FakeHub], tmp_path: Path
) -> None:
    run_dir, results, result_file = evaluated
    cache_copy(tiny_env.model_dir, Path(huggingface_hub.constants.HF_HUB_CACHE))
    before = tree_bytes(run_dir)
    said = export(
        [f"run_dir={run_dir}", "repo_id=user/tiny-scopd", f"base_model={HUB_BASE}", f"results_root={results}"]
    )
    assert "https://huggingface.co/user/tiny-scopd" in said
    assert [name for name, _ in hub.calls] == ["create_repo", "upload_folder"]
    create, upload = (arguments for _, arguments in hub.calls)
    assert (create["repo_id"], create["private"], create["exist_ok"]) == ("user/tiny-scopd", True, True)
    assert upload["repo_id"] == "user/tiny-scopd"
    adapter = run_dir / "adapter"
    assert set(hub.files) == {p.name for p in adapter.iterdir()}  # the adapter folder (the default for LoRA)
    assert hub.files["adapter_model.safetensors"] == (adapter / "adapter_model.safetensors").read_bytes()
    assert tree_bytes(run_dir) == before  # the run's own folders are left as they were

    pushed = materialize(hub.files, tmp_path / "download")
    config = json.loads((pushed / "adapter_config.json").read_text())
    assert (config["base_model_name_or_path"], config["revision"]) == (HUB_BASE, COMMIT)
    card = ModelCard.load(pushed / "README.md")  # huggingface_hub's own parser, as the Hub reads the card
    assert (card.data.base_model, card.data.library_name) == (HUB_BASE, "peft")
    measured = json.loads(result_file.read_text())
    (found,) = card.data.eval_results
    assert (found.dataset_name, found.metric_type, found.metric_value) == (BENCH, measured["scorer"], measured["score"])
    assert (found.metric_args["pruner"], found.metric_args["budget"]) == ("visionzip", 0.1)
    row = f"| {BENCH} | visionzip | 0.1 (as trained) | {measured['score']:.2f} | {measured['scorer']} | 2 |"
    assert row in card.text  # the Markdown table a reader of the card sees
    assert verify_checkpoint(pushed)  # sparsectx_training.json lists the pushed files' sha256, card included
    record = json.loads((pushed / CHECKPOINT_INFO).read_text())
    assert record["base_model"]["name_or_path"] == HUB_BASE
    assert record["base_model_as_trained"]["name_or_path"] == str(tiny_env.model_dir)
    # what a user of the Hub does with it: the base named on the card, the adapter from the repository
    inputs = model_inputs(run_dir / "checkpoint")
    merged = logits(AutoModelForImageTextToText.from_pretrained(str(run_dir / "checkpoint")), inputs)
    base = AutoModelForImageTextToText.from_pretrained(str(tiny_env.model_dir), dtype=torch.float32)
    torch.testing.assert_close(
        logits(PeftModel.from_pretrained(base, str(pushed)), inputs), merged, atol=LOGIT_ATOL, rtol=0
    )


@pytest.mark.slow
def test_export_to_a_local_folder_gives_a_checkpoint_transformers_and_evaluate_read(
    evaluated: tuple[Path, Path, Path], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    run_dir, results, result_file = evaluated
    stale = result_file.with_name("syn_mcq.json")  # a leftover of an earlier training of the same run directory
    payload = json.loads(result_file.read_text())
    payload.update(benchmark="syn_mcq", dataset_name="syn_mcq", model={**payload["model"], "checkpoint_id": "0" * 16})
    stale.write_text(json.dumps(payload))
    try:
        target = tmp_path / "exported"
        export(
            [f"run_dir={run_dir}", "folder=checkpoint", "to=local", f"local_dir={target}", f"results_root={results}"]
        )
    finally:
        stale.unlink()
    assert verify_checkpoint(target)  # evaluate.py checkpoint=<target> checks these digests first
    meta = yaml.safe_load((target / "README.md").read_text().split("---\n", 2)[1])
    assert (
        meta["base_model"]
        == json.loads((run_dir / "checkpoint" / CHECKPOINT_INFO).read_text())["base_model"]["name_or_path"]
    )
    assert [entry["dataset"]["name"] for entry in meta["model-index"][0]["results"]] == [BENCH]  # not the stale one
    assert "syn_mcq.json" in caplog.text and "another checkpoint" in caplog.text
    inputs = model_inputs(run_dir / "checkpoint")
    want = logits(AutoModelForImageTextToText.from_pretrained(str(run_dir / "checkpoint")), inputs)
    torch.testing.assert_close(logits(AutoModelForImageTextToText.from_pretrained(str(target)), inputs), want)
    with pytest.raises(ValueError, match=r"local_dir=.*exported is not empty.*another local_dir"):
        export([f"run_dir={run_dir}", "folder=checkpoint", "to=local", f"local_dir={target}"])


@pytest.mark.slow
@pytest.mark.parametrize(
    ("setting", "message"),
    [
        ("no_token", r"no Hugging Face token.*HF_TOKEN.*hf auth login"),
        ("offline", r"HF_HUB_OFFLINE.*offline.*to=local"),
    ],
)
def test_push_without_credentials_or_online_hub_is_refused_before_any_work(
    setting: str,
    message: str,
    evaluated: tuple[Path, Path, Path],
    hub: type[FakeHub],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    if setting == "no_token":  # nothing where huggingface_hub.get_token looks
        monkeypatch.delenv("HF_TOKEN")
        monkeypatch.delenv("HUGGING_FACE_HUB_TOKEN", raising=False)
        monkeypatch.setattr(huggingface_hub.constants, "HF_TOKEN_PATH", str(tmp_path / "no-token"))
    else:
        monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    run_dir, _, _ = evaluated
    with pytest.raises(ValueError, match=message):
        export([f"run_dir={run_dir}", "repo_id=user/tiny-scopd"])
    assert hub.calls == []


@pytest.mark.slow
def test_the_command_line_refuses_a_push_without_credentials_in_one_line(
    evaluated: tuple[Path, Path, Path], tmp_path: Path
) -> None:
    run_dir, _, _ = evaluated
    env = {key: value for key, value in os.environ.items() if not key.startswith(("HF_", "HUGGING_FACE"))}
    env["HF_HOME"] = str(tmp_path / "hf-home")  # no token file under it
    command = [sys.executable, str(ROOT / "src" / "export.py"), f"run_dir={run_dir}", "repo_id=user/tiny-scopd"]
    done = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 2, done.stderr[-2000:]
    (line,) = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert "HF_TOKEN" in line and "hf auth login" in line
    assert not any(tmp_path.iterdir())  # nothing written: no log, no .hydra/, no token folder


def test_a_run_that_has_not_finished_is_refused(tmp_path: Path) -> None:
    run_dir = tmp_path / "runs" / "dev" / "tiny" / "scopd" / "visionzip" / "0.1"
    (run_dir / "state").mkdir(parents=True)
    (run_dir / "config.yaml").write_text("experiment: dev\n")
    with pytest.raises(ValueError, match=r"has not finished.*no adapter/ or checkpoint/.*rerun its training command"):
        export([f"run_dir={run_dir}", "to=local", f"local_dir={tmp_path / 'out'}"])
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_an_adapter_for_another_base_is_refused_and_says_what_peft_would_do(
    evaluated: tuple[Path, Path, Path], tiny_env: TinyEnv, hub: type[FakeHub], tmp_path: Path
) -> None:
    run_dir, _, _ = evaluated
    adapter = str(run_dir / "adapter")
    tokenizer = load_processor(tiny_env.model_dir).tokenizer
    sibling = tmp_path / "sibling"  # the same architecture and shapes, other weights
    tiny_qwen2_5_vl(tokenizer, seed=1).save_pretrained(sibling)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # peft takes it without even a warning
        PeftModel.from_pretrained(AutoModelForImageTextToText.from_pretrained(str(sibling)), adapter)
    wider = tmp_path / "wider"  # another width: peft's load_state_dict refuses it
    config = tiny_qwen2_5_vl(tokenizer, seed=2).config
    config.text_config.hidden_size = 96
    Qwen2_5_VLForConditionalGeneration(config).save_pretrained(wider)
    with pytest.raises(RuntimeError, match="size mismatch"):
        PeftModel.from_pretrained(AutoModelForImageTextToText.from_pretrained(str(wider)), adapter)

    local = ["to=local", f"local_dir={tmp_path / 'out'}"]
    with pytest.raises(ValueError, match=r"trained on .*tiny-model.*base_model=.*sibling.*peft would load it silently"):
        export([f"run_dir={run_dir}", f"base_model={sibling}", *local])
    with pytest.raises(ValueError, match=r"trained on .*base_model=.*wider.*peft refuses it too.*size mismatch"):
        export([f"run_dir={run_dir}", f"base_model={wider}", *local])
    with pytest.raises(ValueError, match=r"base_model=org/absent is not in the local Hugging Face cache.*hf download"):
        export([f"run_dir={run_dir}", "base_model=org/absent", *local])
    with pytest.raises(ValueError, match=r"local folder.*the Hub.*base_model=<org/name>"):
        export([f"run_dir={run_dir}", "repo_id=user/tiny-scopd"])  # the run's base is a local folder
    assert hub.calls == [] and not (tmp_path / "out").exists()


@pytest.mark.slow
@pytest.mark.parametrize(
    ("layers", "peft_warns", "verdict"),
    [
        (1, False, r"peft would load it silently, dropping .* modules the base lacks: .*layers\.1\."),
        (3, True, r"only a warning \('Found missing adapter keys'\) and an untrained LoRA .*layers\.2\."),
    ],
    ids=["shallower", "deeper"],
)
def test_peft_verdict_on_a_base_of_another_depth_is_what_peft_does(
    layers: int, peft_warns: bool, verdict: str, evaluated: tuple[Path, Path, Path], tiny_env: TinyEnv, tmp_path: Path
) -> None:
    from sparsectx.export.base import peft_verdict

    adapter = evaluated[0] / "adapter"
    other = tmp_path / "other"
    tiny_qwen2_5_vl(load_processor(tiny_env.model_dir).tokenizer, seed=1, layers=layers).save_pretrained(other)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        PeftModel.from_pretrained(AutoModelForImageTextToText.from_pretrained(str(other)), str(adapter))
    assert any("Found missing adapter keys" in str(w.message) for w in caught) == peft_warns
    assert re.search(verdict, peft_verdict(adapter, other))

"""A trained run read back by the Hugging Face tools its users already have: peft, transformers, model cards.

A LoRA run saves its PEFT adapter (``<run>/adapter/``, ``PeftModel.save_pretrained``'s layout) beside the merged
model (``<run>/checkpoint/``); ``save_merged=false`` skips the merged copy (refused where the pipeline evaluates
``checkpoint/``). Both folders carry a model card (``README.md``, YAML front matter then Markdown) and
``sparsectx_training.json``. The tiny model is the real Qwen2.5-VL class with random weights
(``tests/training/test_loop_support.py``), trained 2 steps on the CPU at lr 0.01 so the adapter is far from zero.
"""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
import yaml
from huggingface_hub import ModelCard
from peft import PeftModel
from safetensors.torch import load_file
from tiny_models import char_processor, noise_image, tiny_qwen2_5_vl
from transformers import AutoModelForImageTextToText

from sparsectx.checkpoints import DamagedFileError, verify_checkpoint
from sparsectx.models.processor import load_processor
from sparsectx.paths import CHECKPOINT_INFO
from sparsectx.training import loop
from sparsectx.training.config import load_train_config
from sparsectx.training.model_card import MERGED, BaseModel, render_card, training_facts
from tests.eval.vlmeval_cases import require_vlmeval_env

from .test_loop_support import TinyEnv, compose_train, shared_env, train_overrides

ADAPTER_DIR = "adapter"
"""Where a LoRA run's PEFT adapter is saved in its run directory (beside ``checkpoint/``)."""

LORA_RUN = ["method=scopd", "method.optim.lr=0.01"]
"""SCOPD (LoRA r=16, alpha=32 on 7 projections of both decoder layers), a large lr so B moves off zero."""

LOGIT_ATOL = 1e-5
"""fp32 on the CPU: the merged weight W + (alpha/r) B A is rounded to fp32 once, where peft adds (alpha/r) B (A x)
to W x; over the tiny model's 2 layers of width 64 the two orders differ by ~1e-6 of logits of size ~1, and the
trained adapter moves the logits by more than 1e-2 (asserted), so 1e-5 tells a right adapter from a wrong one."""


@dataclass(frozen=True)
class TrainedRun:
    """A finished LoRA run of the tiny model: its base model directory and run directory."""

    base: Path
    run_dir: Path

    @property
    def checkpoint(self) -> Path:
        """Returns the merged model directory."""
        return self.run_dir / "checkpoint"

    @property
    def adapter(self) -> Path:
        """Returns the PEFT adapter directory."""
        return self.run_dir / ADAPTER_DIR


@pytest.fixture(scope="module")
def tiny_env(tmp_path_factory: pytest.TempPathFactory) -> TinyEnv:
    """Returns the session's tiny model directory and training TSV."""
    return shared_env(tmp_path_factory)


@pytest.fixture(scope="module")
def trained(tiny_env: TinyEnv, tmp_path_factory: pytest.TempPathFactory) -> TrainedRun:
    """Returns a 2-step SCOPD run of the tiny model with the default ``save_merged=true``."""
    result = loop.run(compose_train([*train_overrides(tiny_env, tmp_path_factory.mktemp("runs")), *LORA_RUN]))
    return TrainedRun(tiny_env.model_dir, result.run_dir)


def model_inputs(processor_dir: Path) -> dict[str, torch.Tensor]:
    """Returns one image-and-question prompt as the project's processor builds it from ``processor_dir``."""
    processor = load_processor(processor_dir)
    messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "What is shown?"}]}]
    prompt = processor.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    return dict(processor([prompt], [noise_image(112, 112, seed=3)]))


def logits(model: torch.nn.Module, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
    """Returns the model's fp32 logits for ``inputs``."""
    with torch.no_grad():
        return model.eval()(**inputs).logits.float()


def front_matter(card: Path) -> dict:
    """Returns the YAML front matter of a model card (between the first two ``---`` lines)."""
    text = card.read_text(encoding="utf-8")
    assert text.startswith("---\n"), f"{card} does not open with YAML front matter"
    return yaml.safe_load(text.split("---\n", 2)[1])


@pytest.mark.slow
def test_lora_run_saves_a_peft_adapter_beside_the_merged_model(trained: TrainedRun) -> None:
    assert (trained.checkpoint / "config.json").is_file()  # the Snakemake train rule's output, unchanged
    config = json.loads((trained.adapter / "adapter_config.json").read_text())
    assert config["peft_type"] == "LORA"
    assert (config["r"], config["lora_alpha"]) == (16, 32)
    assert config["base_model_name_or_path"] == str(trained.base)  # the folder the run trained from
    weights = load_file(str(trained.adapter / "adapter_model.safetensors"))
    assert len(weights) == 2 * 7 * 2  # A and B of 7 projections in each of the 2 decoder layers
    assert all(".lora_A." in key or ".lora_B." in key for key in weights)
    assert not (trained.adapter / "config.json").exists()  # transformers would take it for a full model
    assert verify_checkpoint(trained.adapter)  # every file, the card included, under a recorded sha256


@pytest.mark.slow
def test_peft_adapter_on_its_base_gives_the_merged_checkpoints_logits(trained: TrainedRun) -> None:
    inputs = model_inputs(trained.checkpoint)
    merged = logits(AutoModelForImageTextToText.from_pretrained(str(trained.checkpoint)), inputs)
    base = AutoModelForImageTextToText.from_pretrained(str(trained.base))
    plain = logits(base, inputs)
    adapted = logits(PeftModel.from_pretrained(base, str(trained.adapter)), inputs)
    assert (merged - plain).abs().max() > 1e-2  # the adapter changes the model: the comparison can fail
    torch.testing.assert_close(adapted, merged, atol=LOGIT_ATOL, rtol=0)
    # transformers' own PEFT integration: an adapter folder loads its base from adapter_config.json
    integrated = logits(AutoModelForImageTextToText.from_pretrained(str(trained.adapter)), inputs)
    torch.testing.assert_close(integrated, merged, atol=LOGIT_ATOL, rtol=0)


@pytest.mark.slow
def test_model_cards_name_base_method_pruner_budget(trained: TrainedRun) -> None:
    for folder, library, relation in (
        (trained.checkpoint, "transformers", "finetune"),
        (trained.adapter, "peft", "adapter"),
    ):
        meta = front_matter(folder / "README.md")
        assert meta["base_model"] == str(trained.base)
        assert (meta["library_name"], meta["base_model_relation"]) == (library, relation)
        assert meta["pipeline_tag"] == "image-text-to-text"
        assert {"sparsectx", "scopd", "visionzip"} <= set(meta["tags"])
        run = meta["sparsectx"]
        assert (run["method"], run["pruner"], run["budget"], run["steps"], run["seed"]) == (
            "scopd",
            "visionzip",
            0.1,
            2,
            0,
        )
        assert run["lr"] == 0.01 and run["divergence"] == "forward_kl" and run["teacher"] == "ema"
        card = ModelCard.load(folder / "README.md")  # huggingface_hub's own reader
        assert card.data.base_model == str(trained.base)
        assert CHECKPOINT_INFO in card.text  # the card points at the training record
        record = json.loads((folder / CHECKPOINT_INFO).read_text())
        assert record["training"] == run  # the same facts, as JSON
        assert record["base_model"]["name_or_path"] == str(trained.base)


@pytest.mark.slow
def test_transformers_auto_processor_loads_the_checkpoint(trained: TrainedRun, tmp_path: Path) -> None:
    """``AutoProcessor`` for Qwen-VL needs torchvision (transformers' video processor), which does not import beside
    this project's CPU torch (docs/architecture.md); VLMEvalKit's environment has it, as a GPU install does."""
    env = require_vlmeval_env()
    image = tmp_path / "image.png"
    noise_image(112, 112, seed=3).save(image)
    script = f"""
import json, torch
from PIL import Image
from transformers import AutoModelForImageTextToText, AutoProcessor
processor = AutoProcessor.from_pretrained({str(trained.checkpoint)!r})
messages = [{{"role": "user", "content": [{{"type": "image"}}, {{"type": "text", "text": "What is shown?"}}]}}]
prompt = processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
inputs = processor(text=[prompt], images=[Image.open({str(image)!r})], return_tensors="pt")
model = AutoModelForImageTextToText.from_pretrained({str(trained.checkpoint)!r})
with torch.no_grad():
    out = model(**inputs).logits
print(json.dumps({{"processor": type(processor).__name__, "input_ids": inputs["input_ids"][0].tolist(),
                  "finite": bool(torch.isfinite(out).all())}}))
"""
    done = subprocess.run([str(env / "bin" / "python"), "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found["processor"] == "Qwen2_5_VLProcessor" and found["finite"]
    # the export's processor files tokenize the prompt exactly as training's processor did
    assert found["input_ids"] == model_inputs(trained.checkpoint)["input_ids"][0].tolist()


@pytest.mark.slow
def test_lora_loader_checks_the_base_and_refuses_another(trained: TrainedRun, tmp_path: Path) -> None:
    from sparsectx.training.lora_export import load_lora_adapter

    inputs = model_inputs(trained.checkpoint)
    merged = logits(AutoModelForImageTextToText.from_pretrained(str(trained.checkpoint)), inputs)
    torch.testing.assert_close(logits(load_lora_adapter(trained.adapter), inputs), merged, atol=LOGIT_ATOL, rtol=0)
    other = tmp_path / "other-base"  # the same architecture and shapes, other weights: peft alone would accept it
    tokenizer = load_processor(trained.checkpoint).tokenizer
    tiny_qwen2_5_vl(tokenizer, seed=1).save_pretrained(other)
    with pytest.raises(ValueError, match=r"trained on .*base=.*other-base.*base="):
        load_lora_adapter(trained.adapter, base=other)


@pytest.mark.slow
def test_lora_loader_loads_the_base_in_the_dtype_the_run_trained_in(tiny_env: TinyEnv, tmp_path: Path) -> None:
    """A base stored in bf16 and trained in fp32, as the shipped tiny model is: transformers' default
    ``dtype="auto"`` loads it in bf16, which moves the logits far more than the adapter's rounding."""
    from sparsectx.training.lora_export import load_lora_adapter

    base = tmp_path / "bf16-base"
    tiny_qwen2_5_vl(char_processor(14, base).tokenizer, seed=0).to(torch.bfloat16).save_pretrained(base)
    shrunk = [f"model.path={base}" if o.startswith("model.path=") else o for o in train_overrides(tiny_env, tmp_path)]
    run_dir = loop.run(compose_train([*shrunk, *LORA_RUN, "model.dtype=float32"])).run_dir
    inputs = model_inputs(run_dir / "checkpoint")
    merged = logits(AutoModelForImageTextToText.from_pretrained(str(run_dir / "checkpoint")), inputs)
    stored = PeftModel.from_pretrained(
        AutoModelForImageTextToText.from_pretrained(str(base)), str(run_dir / ADAPTER_DIR)
    )
    assert (logits(stored, inputs) - merged).abs().max() > 100 * LOGIT_ATOL  # what the loader's dtype avoids
    loaded = load_lora_adapter(run_dir / ADAPTER_DIR)
    torch.testing.assert_close(logits(loaded, inputs), merged, atol=LOGIT_ATOL, rtol=0)


@pytest.mark.slow
def test_a_damaged_adapter_file_is_refused_by_the_loader(trained: TrainedRun, tmp_path: Path) -> None:
    from sparsectx.training.lora_export import load_lora_adapter

    copy = tmp_path / "adapter"
    copy.mkdir()
    for path in trained.adapter.iterdir():
        (copy / path.name).write_bytes(path.read_bytes())
    config = json.loads((copy / "adapter_config.json").read_text())
    (copy / "adapter_config.json").write_text(json.dumps({**config, "lora_alpha": 64}))
    with pytest.raises(DamagedFileError, match="adapter_config.json"):
        load_lora_adapter(copy)


@pytest.mark.slow
def test_save_merged_false_keeps_the_adapter_and_a_rerun_writes_the_merged_copy(
    tiny_env: TinyEnv, tmp_path: Path
) -> None:
    overrides = [*train_overrides(tiny_env, tmp_path), *LORA_RUN]
    result = loop.run(compose_train([*overrides, "save_merged=false"]))
    assert result.checkpoint == result.run_dir / ADAPTER_DIR  # the run's model, as train.py's last line says
    assert not (result.run_dir / "checkpoint").exists()
    assert (result.run_dir / ADAPTER_DIR / "adapter_model.safetensors").is_file()
    assert front_matter(result.run_dir / ADAPTER_DIR / "README.md")["library_name"] == "peft"
    again = loop.run(compose_train(overrides))  # the final state/ is merged without training a step more
    assert again.steps == 2 and (again.checkpoint / "config.json").is_file()
    merged = load_file(str(again.checkpoint / "model.safetensors"))
    adapter = load_file(str(result.run_dir / ADAPTER_DIR / "adapter_model.safetensors"))
    base = load_file(str(tiny_env.model_dir / "model.safetensors"))
    prefix = "base_model.model.model.language_model.layers.0.self_attn.q_proj"
    key = "model.layers.0.self_attn.q_proj.weight"  # the layout transformers writes for Qwen2.5-VL
    want = base[key] + (32 / 16) * adapter[f"{prefix}.lora_B.weight"] @ adapter[f"{prefix}.lora_A.weight"]
    torch.testing.assert_close(merged[key], want, atol=1e-6, rtol=1e-6)


@pytest.mark.slow
def test_fsdp_run_saves_the_replicated_runs_adapter(trained: TrainedRun, tiny_env: TinyEnv, tmp_path: Path) -> None:
    """Under ``distributed.strategy=fsdp`` the adapters are sharded ``DTensor``s, gathered for the save (one rank
    here: the same code path as N); the weights are the replicated run's to fsdp's own tolerance
    (``tests/training/test_fsdp_one_process.py``)."""
    overrides = [*train_overrides(tiny_env, tmp_path), *LORA_RUN, "distributed.strategy=fsdp"]
    sharded = loop.run(compose_train(overrides)).run_dir / ADAPTER_DIR
    want = load_file(str(trained.adapter / "adapter_model.safetensors"))
    got = load_file(str(sharded / "adapter_model.safetensors"))
    assert got.keys() == want.keys()
    for name, weight in want.items():
        torch.testing.assert_close(got[name], weight, atol=1e-6, rtol=1e-5, msg=name)
    config = json.loads((sharded / "adapter_config.json").read_text())
    assert config["base_model_name_or_path"] == str(trained.base)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["method=lt_opd"], r"save_merged=false .*method\.lora\.enabled=false.*set save_merged=true"),
        (["experiment=tiny"], r"save_merged=false with experiment=tiny.*checkpoint/config\.json.*save_merged=true"),
    ],
    ids=["full_parameters", "study_preset"],
)
def test_save_merged_false_is_refused_before_any_work(
    overrides: list[str], message: str, tiny_env: TinyEnv, tmp_path: Path
) -> None:
    cfg = compose_train([*train_overrides(tiny_env, tmp_path / "runs"), *overrides, "save_merged=false"])
    with pytest.raises(ValueError, match=message):
        loop.run(cfg)
    assert not (tmp_path / "runs").exists()  # nothing written


@pytest.mark.parametrize(
    ("method", "lora", "rl"),
    [("lt_opd", False, None), ("grpo", True, "correct_format")],
    ids=["full_parameters", "rl"],
)
def test_card_of_a_full_parameter_and_an_rl_run(
    method: str, lora: bool, rl: str | None, tiny_env: TinyEnv, tmp_path: Path
) -> None:
    tc = load_train_config(compose_train([*train_overrides(tiny_env, tmp_path), f"method={method}"]))
    facts = training_facts(tc, steps=2, samples_seen=4)
    base = BaseModel("Org/Base-VL", "0" * 40, "Org/Base-VL@" + "0" * 40)
    card = render_card(MERGED, base, facts)
    meta = yaml.safe_load(card.split("---\n", 2)[1])
    assert (meta["base_model"], meta["library_name"], meta["sparsectx"]["method"]) == (
        "Org/Base-VL",
        "transformers",
        method,
    )
    assert ("lora" in meta["tags"]) == lora and (meta["sparsectx"]["lora"] is not None) == lora
    assert (meta["sparsectx"]["rl"] or {}).get("reward") == rl
    assert "params" not in json.dumps(meta["sparsectx"]["rl"])  # a judge's settings may name credentials
    assert ("trained in full" in card) != lora

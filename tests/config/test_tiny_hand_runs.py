"""A hand run of any method preset on the tiny model trains as the tiny studies train it (issue 41, item 1).

``python src/train.py method=<preset>`` composes ``conf/model/scale/train/tiny.yaml`` (and ``method/<preset>.yaml``
beside it). The expected values are the studies' own: every method entry of the demo and of the study presets
passes ``grid.overrides.train`` and then its own ``overrides`` (the order of ``sparsectx.workflow.train_args``);
a hand run of that preset must compose the same values, so `make demo`'s learning rate and EMA decay reach
``python src/train.py method=scopd_plus budget=0.1`` without being typed. A preset no study trains is expected to
train as the preset it starts from (its ``defaults`` list's first entry).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from hydra import compose, initialize_config_dir
from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import OmegaConf

from sparsectx.training.config import load_train_config

CONF = Path(__file__).resolve().parents[2] / "conf"
STUDIES = ("tiny_demo", "tiny_scopd", "tiny_ltopd", "tiny_video")
"""`make demo` (tiny_demo) and `make study` (tiny_scopd, tiny_ltopd, tiny_video): the studies that show the effect."""
NOT_SCALE = {
    "save_every": "the resume-state cadence",
    "token_trace": "the report's per-token trace",
    "deterministic": "the CUDA kernels' choice",
    # the studies end EPIC's window at the training budget: method=epic_rescaled's rule, a preset of its own
    "method.schedule.params.epic_progressive.final_budget": "the EPIC schedule",
}
"""Keys a study passes that do not make the tiny model move (bookkeeping, or a method's definition)."""
PRESETS = sorted(path.stem for path in (CONF / "method").glob("*.yaml"))


def _grid(study: str) -> dict[str, Any]:
    return yaml.safe_load((CONF / "experiment" / f"{study}.yaml").read_text())["grid"]


def _values(overrides: list[str]) -> dict[str, Any]:
    """Returns {key: value} of Hydra override strings as Hydra types them (a later one wins), via Hydra's own
    parser (hydra.core.override_parser.overrides_parser.OverridesParser.parse_overrides)."""
    parsed = OverridesParser.create().parse_overrides(overrides)
    return {o.key_or_group: o.value() for o in parsed if o.key_or_group not in NOT_SCALE}


def _trained_in_studies() -> list[tuple[str, str, str, float, dict[str, Any]]]:
    """Returns (study, preset, model, budget, expected values) for every study entry that is a preset itself."""
    cases = []
    for study in STUDIES:
        grid = _grid(study)
        (model,) = grid["models"]
        for name, entry in grid["methods"].items():
            if "preset" in entry:  # a variant: a preset with one key changed, not a preset of its own
                continue
            passed = [*grid["overrides"]["train"], *entry.get("overrides", []), *entry.get("train_overrides", [])]
            cases.append((study, name, model, entry["budgets"][0], _values(passed)))
    return cases


TRAINED = _trained_in_studies()


def _parent(preset: str) -> str:
    """Returns the preset ``conf/method/<preset>.yaml`` starts from (its defaults list's first plain entry)."""
    defaults = yaml.safe_load((CONF / "method" / f"{preset}.yaml").read_text()).get("defaults", [])
    parents = [d for d in defaults if isinstance(d, str) and d != "_self_"]
    if not parents:
        raise AssertionError(f"method={preset}: no study trains it or a preset it starts from; add it to one")
    return parents[0]


def _expected(preset: str) -> dict[str, Any]:
    """Returns the studies' values for ``preset``, or for the nearest preset it starts from that a study trains."""
    for _, name, _, _, values in TRAINED:
        if name == preset:
            return values
    return _expected(_parent(preset))


def _hand_run(overrides: list[str]) -> Any:
    with initialize_config_dir(version_base=None, config_dir=str(CONF)):
        cfg = compose("train", overrides=overrides)
    load_train_config(cfg)  # the hand run's config passes the training schema
    return cfg


@pytest.mark.parametrize(
    ("study", "preset", "model", "budget", "expected"), TRAINED, ids=[f"{c[0]}-{c[1]}" for c in TRAINED]
)
def test_a_hand_run_composes_the_studys_values(
    study: str, preset: str, model: str, budget: float, expected: dict[str, Any]
) -> None:
    cfg = _hand_run([f"model={model}", f"method={preset}", f"budget={budget}"])
    assert expected, f"{study} passes no training values for {preset}"
    for key, value in expected.items():
        assert OmegaConf.select(cfg, key) == value, f"{key}: {study} trains {preset} at {value}"


@pytest.mark.parametrize("preset", [p for p in PRESETS if p not in {c[1] for c in TRAINED}])
def test_a_preset_no_study_trains_composes_the_values_of_the_preset_it_starts_from(preset: str) -> None:
    cfg = _hand_run([f"method={preset}"])
    for key, value in _expected(preset).items():
        assert OmegaConf.select(cfg, key) == value, f"{key}: method={preset} starts from {_parent(preset)}"


def test_the_demo_moves_the_rates_off_the_papers() -> None:
    """The demo's rates are not the papers' (else the tests above would hold with no scale file at all)."""
    demo = {name: values for study, name, _, _, values in TRAINED if study == "tiny_demo"}
    scopd, lt_opd = (yaml.safe_load((CONF / "method" / f"{p}.yaml").read_text())["method"] for p in ("scopd", "lt_opd"))
    assert demo["scopd_plus"]["method.optim.lr"] != scopd["optim"]["lr"]
    assert demo["scopd_plus"]["method.teacher.ema_decay"] != scopd["teacher"]["ema_decay"]
    assert demo["lt_opd"]["method.optim.lr"] != lt_opd["optim"]["lr"]


@pytest.mark.parametrize("model", ["qwen2_5_vl_7b", "qwen3_vl_4b"])
def test_the_real_models_keep_the_papers_rates(model: str) -> None:
    cfg = _hand_run([f"model={model}", "method=scopd_plus", "train_data.path=data/llava_cot_10k.tsv"])
    scopd = yaml.safe_load((CONF / "method" / "scopd.yaml").read_text())["method"]
    assert (cfg.method.optim.lr, cfg.method.teacher.ema_decay) == (scopd["optim"]["lr"], scopd["teacher"]["ema_decay"])

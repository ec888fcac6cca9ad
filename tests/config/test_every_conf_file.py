"""Every file under conf/ composes into a checked config (convention 24: all of conf/, recursively)."""

from __future__ import annotations

from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import DictConfig, OmegaConf

from sparsectx.eval.config import load_eval_config
from sparsectx.eval.judge import JudgeAnswersConfig
from sparsectx.export.config import load_export_config
from sparsectx.preflight import load_preflight_config
from sparsectx.pretrain.train import load_config as load_pretrain_config
from sparsectx.report.study import load_tables_config
from sparsectx.training.config import load_train_config

CONF = Path(__file__).resolve().parents[2] / "conf"


def load_judge_answers_config(cfg: DictConfig) -> JudgeAnswersConfig:
    """Returns the checked judge config as ``src/judge_answers.py`` builds it."""
    return OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(JudgeAnswersConfig), cfg))


ROOTS = {
    "train": load_train_config,
    "evaluate": load_eval_config,
    "make_tables": load_tables_config,
    "pretrain_tiny": load_pretrain_config,
    "judge_answers": load_judge_answers_config,
    "preflight": load_preflight_config,
    "export": load_export_config,
}
# group -> the root config that selects it (and a fixed option for roots whose default would not compose)
GROUP_ROOTS = {
    "model": ["train", "evaluate", "preflight"],
    "pruner": ["train", "evaluate"],
    "logger": ["train", "evaluate", "make_tables"],
    "bench": ["evaluate", "preflight"],
    "method": ["train", "evaluate"],
    "experiment": ["train", "evaluate", "make_tables", "preflight"],
    "data": ["train", "pretrain_tiny"],
    "engine": ["train", "evaluate"],
    "judge": ["judge_answers"],
}
# judge_answers has no default judge (one must be chosen) and no default result file; a group override
# given after these replaces the judge chosen here.
REQUIRED = {
    "make_tables": ["experiment=tiny"],
    "export": ["run_dir=runs/x", "repo_id=user/model"],
    "judge_answers": [
        "result=x.json",
        "judge=hf_local",
        "judge.model=m",
        "judge.base_url=http://127.0.0.1:1/v1",
    ],
}


def _compose(root: str, overrides: list[str]):
    with initialize_config_dir(version_base=None, config_dir=str(CONF)):
        return compose(root, overrides=[*REQUIRED.get(root, []), *overrides])


def test_every_group_is_covered() -> None:
    # conf/hydra/ holds Hydra's own groups (the --help texts), checked by test_front_door_help.py;
    # conf/bench_prompt/ is read only through the bench files' defaults (test_every_bench_prompt_is_used);
    # conf/protocol/ holds the papers' records, plain YAML read by sparsectx.protocol (test_protocol_cards)
    groups = {path.name for path in CONF.iterdir() if path.is_dir()} - {"hydra", "bench_prompt", "protocol"}
    assert groups == set(GROUP_ROOTS)


def test_every_bench_prompt_is_used() -> None:
    """Each conf/bench_prompt file is a benchmark's prompt parts: unused it would never compose or be checked."""
    used = {
        line.split(":")[-1].strip()
        for path in (CONF / "bench").glob("*.yaml")
        for line in path.read_text().splitlines()
        if line.strip().startswith("- /bench_prompt@layout.prompt:")
    }
    assert {path.stem for path in (CONF / "bench_prompt").glob("*.yaml")} == used


@pytest.mark.parametrize("root", sorted(ROOTS))
def test_root_config_composes_and_checks(root: str) -> None:
    ROOTS[root](_compose(root, []))


@pytest.mark.parametrize(
    ("group", "option", "root"),
    [
        (group, path.stem, root)
        for group, roots in sorted(GROUP_ROOTS.items())
        for path in sorted((CONF / group).glob("*.yaml"))
        for root in roots
    ],
)
def test_every_option_composes_and_checks(group: str, option: str, root: str) -> None:
    # a real model trains on a real file: the tiny synthetic set is refused (sparsectx.train_data_check)
    real_data = ["train_data.path=data/llava_cot_10k.tsv"] if (group, root) == ("model", "train") else []
    cfg = ROOTS[root](_compose(root, [f"{group}={option}", *real_data]))
    assert cfg is not None

"""``python -m sparsectx.plan experiment=<e>`` on both real presets."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from sparsectx.plan.__main__ import main
from sparsectx.workflow.config import CONF_DIR, load_yaml


def test_scopd_plans_clean_at_80_gb(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["experiment=scopd_qwen2_5_vl_7b", "gpu_mem_gb=80"]) == 0
    out = capsys.readouterr().out
    assert "## Refused: 0" in out and "| **study** | 105 |" in out


def test_ltopd_plans_clean_at_80_gb(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["experiment=ltopd_qwen3_5_4b", "gpu_mem_gb=80", "jobs=false"]) == 0
    assert "## Refused: 0" in capsys.readouterr().out


def test_ltopd_without_its_memory_settings_is_refused_naming_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The preset as it stood before the plan existed: its full-parameter 4B trainings (replicated, no
    # checkpointing) with 8 rollouts a prompt do not fit 80 GB (docs/plan.md); every refusal names the setting.
    grid = load_yaml(CONF_DIR / "experiment" / "ltopd_qwen3_5_4b.yaml")["grid"]
    train = [o for o in grid["overrides"]["train"] if not o.startswith(("distributed.", "memory."))]
    replaced = tmp_path / "grid.yaml"
    replaced.write_text(yaml.safe_dump({"grid": {"overrides": {**grid["overrides"], "train": train}}}))
    assert main(["experiment=ltopd_qwen3_5_4b", "gpu_mem_gb=80", "jobs=false", f"grid_file={replaced}"]) == 1
    refused = [line for line in capsys.readouterr().out.splitlines() if line.startswith("- train runs/")]
    assert refused and all("set memory.activation_checkpointing=true" in line for line in refused)

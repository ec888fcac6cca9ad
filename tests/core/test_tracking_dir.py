"""The README's ``wandb sync`` glob matches where an offline run really lands (issue 14, item 5)."""

from __future__ import annotations

import re
from pathlib import Path

from omegaconf import OmegaConf

from sparsectx.tracking import LoggerConfig, start_run

ROOT = Path(__file__).resolve().parents[2]


def test_the_readme_sync_glob_matches_an_offline_run(tmp_path: Path, monkeypatch) -> None:  # noqa: ANN001
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("SPARSECTX_WANDB_DIR", raising=False)
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.delenv("WANDB_MODE", raising=False)
    conf = OmegaConf.load(ROOT / "conf/logger/wandb.yaml")
    cfg = LoggerConfig(**OmegaConf.to_container(conf, resolve=True))
    tracker = start_run(cfg, name="t", group="g", job_type="train", tags=[], config={"a": 1})
    tracker.log({"x": 1.0}, step=1)
    tracker.finish()
    glob = re.search(r"`wandb sync ([^`]+)`", (ROOT / "README.md").read_text()).group(1)
    assert list(tmp_path.glob(glob)), (
        f"README's `wandb sync {glob}` matches nothing in {sorted(tmp_path.rglob('*'))[:5]}"
    )

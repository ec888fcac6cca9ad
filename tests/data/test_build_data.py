"""The build_data entry point, run as a user runs it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from sparsectx.data.build import run
from sparsectx.data.tsv import read_tsv

from .conftest import BENCHES, compose_build, small_overrides

REPO = Path(__file__).resolve().parents[2]


def test_run_writes_the_suite_without_the_processor(tmp_path: Path) -> None:
    report = run(compose_build(small_overrides(tmp_path / "suite", 3)))
    assert report is not None and set(report.files) == {*BENCHES, "train"}
    assert sorted(p.name for p in (tmp_path / "suite").glob("*.tsv")) == sorted(f"{b}.tsv" for b in [*BENCHES, "train"])


def test_cli_writes_suite_processor_and_resolved_config(tmp_path: Path) -> None:
    out, proc = tmp_path / "tiny", tmp_path / "proc"
    sizes = [f"data.benches.{bench}.size=2" for bench in BENCHES]
    args = [
        f"data.out_dir={out}",
        "data.train.size=4",
        f"processor.out_dir={proc}",
        "processor.write=true",
        "processor.corpus_per_family=10",
    ]
    env = {**os.environ, "PYTHONPATH": str(REPO / "src"), "HF_HUB_OFFLINE": "1"}
    done = subprocess.run(
        [sys.executable, str(REPO / "src" / "build_data.py"), *args, *sizes],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    items, skips = read_tsv(out / "syn_pope.tsv")
    assert len(items) == 2 and skips == []
    assert (out / ".hydra" / "config.yaml").is_file()  # the run folder is the output folder, no timestamp
    assert {p.name for p in proc.iterdir()} == {
        "tokenizer.json",
        "tokenizer_config.json",
        "chat_template.jinja",
        "processor_config.json",
    }

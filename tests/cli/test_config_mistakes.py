"""Config mistakes get one-line answers (issue 41, item 5): an unknown key or group option names what was typed,
the closest valid names and the right syntax; a value the typed config refuses is its message alone, exit 2, no
traceback, and the cheap checks (budget range, names) answer before torch is imported. A real bug keeps its
traceback. Every entry script goes through ``sparsectx.cli``."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# Runs a script as ``python src/<script>.py <args>`` in this interpreter and reports, at exit (a refusal is
# SystemExit), whether torch had been imported by then.
PROBE = """
import atexit, runpy, sys
atexit.register(lambda: print("torch imported:", "torch" in sys.modules))
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def run_script(script: str | Path, *args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    """Returns the finished ``python <script> <args>`` (``src/<script>.py`` for a bare name), run through PROBE."""
    path = script if isinstance(script, Path) else ROOT / "src" / f"{script}.py"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT / "src")}
    env.pop("HYDRA_FULL_ERROR", None)
    command = [sys.executable, "-c", PROBE, str(path), *args]
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def assert_one_line_refusal(done: subprocess.CompletedProcess[str], *expected: str) -> str:
    """Returns the refusal line after checking exit code 2, no traceback, one stderr line holding ``expected``."""
    output = done.stdout + done.stderr
    assert done.returncode == 2, output[-3000:]
    assert "Traceback" not in output and "HYDRA_FULL_ERROR" not in output, output[-3000:]
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    for text in expected:
        assert text in lines[0], lines[0]
    return lines[0]


UNKNOWN_KEYS = [  # script, overrides, the key typed, the right syntax
    ("train", ["budgte=0.1"], "budgte", "budget=0.1"),
    ("train", ["ema_decay=0.9"], "ema_decay", "method.teacher.ema_decay=0.9"),  # the prefix left out
    ("evaluate", ["budgte=0.1"], "budgte", "budget=0.1"),
    ("evaluate", ["mode=passk", "passk.nn=4"], "passk.nn", "passk.n=4"),
    ("evaluate", ["mode=efficiency", "efficiency.budget=[0.1]"], "efficiency.budget", "efficiency.budgets=[0.1]"),
    ("make_tables", ["experiment=tiny", "decimal=3"], "decimal", "decimals=3"),
    ("build_data", ["write_suit=false"], "write_suit", "write_suite=false"),
    ("preflight", ["max_line=3"], "max_line", "max_lines=3"),
    ("judge_answers", ["reslt=x.json"], "reslt", "result=x.json"),
    ("make_report", ["experiment=tiny", "titel=x"], "titel", "title=x"),
    ("vlmeval_score", ["reslt=x.json"], "reslt", "result=x.json"),
    ("pretrain_tiny", ["sed=1"], "sed", "seed=1"),
]


@pytest.mark.parametrize(("script", "overrides", "typed", "fix"), UNKNOWN_KEYS)
def test_unknown_key_names_the_closest_key_in_one_line(script: str, overrides: list[str], typed: str, fix: str) -> None:
    done = run_script(script, *overrides)
    line = assert_one_line_refusal(done, f"'{typed}'", f"did you mean {fix}?")
    assert f"+{typed}" not in line  # Hydra's advice to add the key is the wrong fix
    assert done.stdout.rstrip().endswith("torch imported: False")


GROUP_OPTIONS = [  # script, override, the option typed, the right syntax
    ("train", "pruner=visionzipp", "visionzipp", "pruner=visionzip"),
    ("evaluate", "method=scopd_pluss", "scopd_pluss", "method=scopd_plus"),
    ("train", "model=qwen2_5_vl7b", "qwen2_5_vl7b", "model=qwen2_5_vl_7b"),
    ("preflight", "experiment=scopd_qwen2_5_vl7b", "scopd_qwen2_5_vl7b", "experiment=scopd_qwen2_5_vl_7b"),
    ("build_data", "data/sources=lt14k", "lt14k", "data/sources=lt_14k"),
]


@pytest.mark.parametrize(("script", "override", "typed", "fix"), GROUP_OPTIONS)
def test_unknown_group_option_names_the_closest_options(script: str, override: str, typed: str, fix: str) -> None:
    group = override.partition("=")[0]
    assert_one_line_refusal(run_script(script, override), f"'{typed}'", f"conf/{group}/", f"did you mean {fix}?")


def test_a_short_option_list_is_given_in_full() -> None:
    line = assert_one_line_refusal(run_script("train", "pruner=visionzipp"), "did you mean pruner=visionzip?")
    for option in sorted(path.stem for path in (ROOT / "conf" / "pruner").glob("*.yaml")):
        assert option in line


@pytest.mark.parametrize(
    ("script", "override", "message"),
    [
        ("train", "budget=2", "budget=2 is outside (0, 1]"),
        ("evaluate", "budget=2", "budget=2 is outside (0, 1]"),
        ("evaluate", "budget=abc", "budget='abc' is not a number"),
        ("evaluate", "efficiency.budgets=[0.1,1.5]", "efficiency.budgets=1.5 is outside (0, 1]"),
        ("train", "method.name=../x", "method.name='../x'"),
        ("make_tables", "results_root=x", "experiment has no value"),
    ],
)
def test_cheap_config_errors_answer_before_torch_is_imported(script: str, override: str, message: str) -> None:
    done = run_script(script, override)
    assert_one_line_refusal(done, message)
    assert done.stdout.rstrip().endswith("torch imported: False")


@pytest.mark.parametrize(
    ("script", "overrides", "message"),
    [("train", ["steps=0"], "steps=0 must be >= 1"), ("evaluate", ["mode=foo"], "mode='foo' is not one of")],
)
def test_typed_config_errors_are_their_message_alone(
    script: str, overrides: list[str], message: str, tmp_path: Path
) -> None:
    root = f"runs_root={tmp_path / 'runs'}" if script == "train" else f"results_root={tmp_path / 'results'}"
    assert_one_line_refusal(run_script(script, *overrides, root, "logger=none", cwd=tmp_path), message)
    assert not any((tmp_path / "runs").rglob("*"))  # train: the refused run leaves no run directory


APP = '''
from sparsectx.cli import config_check, entry


@entry("app")
def main(cfg) -> None:
    """Fails as cfg.fail says."""
    if cfg.fail == "config":
        with config_check():
            raise ValueError("size=0 must be >= 1")
    if cfg.fail == "bug":
        raise ValueError("an internal invariant broke")
    print("ran", cfg.size)


if __name__ == "__main__":
    main()
'''


@pytest.fixture
def app(tmp_path: Path) -> Path:
    """Returns a minimal entry script (``app/app.py``) over ``conf/app.yaml``, built on ``sparsectx.cli``."""
    (tmp_path / "app").mkdir()
    (tmp_path / "conf").mkdir()
    (tmp_path / "app" / "app.py").write_text(APP)
    (tmp_path / "conf" / "app.yaml").write_text("size: 1\nfail: none\nhydra:\n  output_subdir: null\n")
    return tmp_path / "app" / "app.py"


def test_a_real_bug_keeps_its_traceback(app: Path, tmp_path: Path) -> None:
    done = run_script(app, "fail=bug", f"hydra.run.dir={tmp_path / 'out'}", cwd=tmp_path)
    assert done.returncode == 1 and "Traceback" in done.stderr and "an internal invariant broke" in done.stderr
    refused = run_script(app, "fail=config", f"hydra.run.dir={tmp_path / 'out'}", cwd=tmp_path)
    assert_one_line_refusal(refused, "size=0 must be >= 1")


def test_help_cfg_multirun_and_hydra_overrides_still_work(app: Path, tmp_path: Path) -> None:
    runs = run_script(app, "-m", "size=2,3", f"hydra.sweep.dir={tmp_path / 'sweep'}", cwd=tmp_path)
    assert runs.returncode == 0 and "ran 2" in runs.stdout and "ran 3" in runs.stdout, runs.stderr
    shown = run_script(app, "size=4", "--cfg", "job", cwd=tmp_path)
    assert shown.returncode == 0 and "size: 4" in shown.stdout
    helped = run_script(app, "--help", cwd=tmp_path)
    assert helped.returncode == 0 and "size: 1" in helped.stdout
    swept_typo = run_script(app, "-m", "sise=2,3", f"hydra.sweep.dir={tmp_path / 'sweep'}", cwd=tmp_path)
    assert_one_line_refusal(swept_typo, "'sise'", "did you mean size=2,3?")

"""``experiment=<name>`` names a study without a preset file (issue 41, item 2): train, evaluate (every mode) and
make_tables take any plain name, their outputs land under it, a preset file of that name is still selected, and
a name that is not one plain path component is refused naming the key."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.cli.test_config_mistakes import ROOT, assert_one_line_refusal, run_script


def shown(script: str, *args: str) -> dict:
    """Returns the YAML that ``python src/<script>.py <args>`` prints (``--cfg ...`` among ``args``)."""
    done = run_script(script, *args)
    assert done.returncode == 0, done.stderr[-3000:]
    return yaml.safe_load(done.stdout.rpartition("torch imported:")[0])


def test_train_runs_under_a_study_name_with_no_preset() -> None:
    assert not (ROOT / "conf" / "experiment" / "my_study.yaml").exists()
    job = shown("train", "experiment=my_study", "--cfg", "job")
    assert job["experiment"] == "my_study" and job["grid"] is None
    hydra = shown("train", "experiment=my_study", "method=scopd_plus", "budget=0.1", "--cfg", "all", "--resolve")
    assert hydra["hydra"]["run"]["dir"] == "runs/my_study/tiny/scopd_plus/visionzip/0.1"


@pytest.mark.parametrize("mode", ["greedy", "passk", "efficiency"])
def test_evaluate_writes_under_a_study_name_in_every_mode(mode: str) -> None:
    job = shown("evaluate", "experiment=my_study", f"mode={mode}", "--cfg", "job")
    assert job["experiment"] == "my_study" and job["mode"] == mode
    hydra = shown("evaluate", "experiment=my_study", f"mode={mode}", "budget=0.1", "--cfg", "all", "--resolve")
    assert hydra["hydra"]["run"]["dir"] == "results/my_study/tiny/base/visionzip/0.1"


def test_make_tables_gets_the_study_name_and_no_grid() -> None:
    job = shown("make_tables", "experiment=my_study", "--cfg", "job")
    assert job["experiment"] == "my_study" and job["grid"] is None


def test_a_preset_file_is_still_selected() -> None:
    job = shown("make_tables", "experiment=tiny", "--cfg", "job")
    assert job["experiment"] == "tiny" and job["grid"]["name"] == "tiny"


@pytest.mark.parametrize("script", ["train", "evaluate", "make_tables"])
@pytest.mark.parametrize("name", ["../x", "a/b"])
def test_a_name_that_is_no_plain_folder_is_refused_naming_the_key(script: str, name: str) -> None:
    done = run_script(script, f"experiment={name}")
    assert_one_line_refusal(done, f"experiment={name!r}", "cannot name an output folder")
    assert done.stdout.rstrip().endswith("torch imported: False")


APP = '''
from sparsectx.cli import entry


@entry("app", study_names=True)
def main(cfg) -> None:
    """Prints the study name and whether a preset's grid came with it."""
    print("study", cfg.experiment, "grid", cfg.grid)


if __name__ == "__main__":
    main()
'''


def test_a_sweep_over_study_names_mixes_presets_and_plain_names(tmp_path: Path) -> None:
    (tmp_path / "app").mkdir()
    (tmp_path / "conf" / "experiment").mkdir(parents=True)
    (tmp_path / "app" / "app.py").write_text(APP)
    (tmp_path / "conf" / "app.yaml").write_text(
        "defaults:\n  - _self_\n  - experiment: null\nexperiment: dev\ngrid: null\n"
    )
    (tmp_path / "conf" / "experiment" / "preset.yaml").write_text("# @package _global_\nexperiment: preset\ngrid: 7\n")
    sweep = f"hydra.sweep.dir={tmp_path / 'sweep'}"
    done = run_script(tmp_path / "app" / "app.py", "-m", "experiment=preset,mine", sweep, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "study preset grid 7" in done.stdout and "study mine grid None" in done.stdout


def test_a_name_close_to_a_preset_names_its_own_study_and_says_so() -> None:
    done = run_script("train", "experiment=tiny_dem", "--cfg", "job")
    assert done.returncode == 0, done.stderr
    assert "experiment=tiny_dem names a study of your own" in done.stderr and "tiny_demo" in done.stderr
    assert yaml.safe_load(done.stdout.rpartition("torch imported:")[0])["experiment"] == "tiny_dem"

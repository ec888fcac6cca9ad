"""Publishes a finished run's model: compose ``conf/export.yaml``, check everything, then push or write it.

    python src/export.py run_dir=runs/my_lora/tiny/scopd+steps4/visionzip/0.1 to=local local_dir=exports/my_lora
    python src/export.py run_dir=runs/<experiment>/<model>/<method>/<pruner>/<budget> repo_id=<user>/<name>
    python src/export.py run_dir=<...> folder=checkpoint repo_id=<user>/<name>-merged base_model=<org/name>

Pushes ``adapter/`` (or ``checkpoint/``) to the Hugging Face Hub, or copies it into ``local_dir``, with its model
card refreshed (``sparsectx.export``). Credentials, offline mode, an unfinished run, a base model the run did not
train on and damaged files are refused in one line (exit status 2) before anything is sent or written. Tests call
``sparsectx.export.publish.run(cfg)`` with a config from Hydra's compose API.
"""

from __future__ import annotations

from omegaconf import DictConfig

from sparsectx.cli import config_check, entry


@entry("export")
def main(cfg: DictConfig) -> None:
    """Returns None after checking the export, then publishing the folder and printing where it went."""
    from sparsectx.export.config import check_destination, load_export_config  # no torch: --help, --cfg skip it

    with config_check():  # every refusal is one line (exit 2) before anything is sent or written
        config = load_export_config(cfg)
        check_destination(config)  # credentials, offline mode, local_dir: answered before torch is imported
    from sparsectx.export.publish import export, plan_export

    with config_check():  # the run, its files' sha256, the base model, its results: still nothing written
        plan = plan_export(config)
    print(export(plan))


if __name__ == "__main__":
    main()

"""Pretrain the shipped tiny VLM (the real Qwen2.5-VL class, tiny dimensions) on the synthetic suite.

    python src/build_data.py processor.out_dir=src/sparsectx/assets/tiny-vlm   # tokenizer + processor first
    python src/pretrain_tiny.py                                              # resumes until train.steps
    python src/pretrain_tiny.py --config-name pretrain_tiny_video            # second stage: images + video

Each call stops after train.time_limit_s and saves its state; run it again to continue.
"""

from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from sparsectx.cli import config_check, entry


@entry("pretrain_tiny", version_base="1.3")
def main(cfg: DictConfig) -> None:
    """Runs (or resumes) pretraining and prints where it stopped."""
    from sparsectx.pretrain.train import load_config, run  # imported here: --help and --cfg skip torch

    with config_check():  # a bad config is answered in one line (exit 2) before anything is built
        load_config(cfg)
    job = HydraConfig.get()
    command = " ".join(["python src/pretrain_tiny.py", f"--config-name {job.job.config_name}", *job.overrides.task])
    result = run(cfg, command)
    print(f"pretrain: step {result['step']} done={result['done']}")


if __name__ == "__main__":
    main()

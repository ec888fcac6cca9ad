"""Scores an evaluated benchmark with VLMEvalKit's own ``evaluate``, in VLMEvalKit's environment.

    make vlmeval-env                       # once: builds .vlmeval-env/ (nvidia-vlmeval, a CUDA torch)
    python src/vlmeval_score.py result=results/dev/tiny/base/visionzip/1/pope.json
    python src/vlmeval_score.py result=<leaf>/mme.json env=/opt/vlmeval-env prediction=output
    python src/vlmeval_score.py result=<leaf>/mathvista.json judge_model=<served id> judge_base_url=http://127.0.0.1:8000/v1

Adds ``vlmeval`` (VLMEvalKit's figures, its headline and whether it equals the project's) to the result
JSON and prints one summary line (``sparsectx.eval.vlmeval_bridge``). Tests call ``score_with_vlmeval``.
"""

from __future__ import annotations

from omegaconf import DictConfig, OmegaConf

from sparsectx.cli import config_check, entry


@entry("vlmeval_score")
def main(cfg: DictConfig) -> None:
    """Returns None after scoring ``cfg.result`` through VLMEvalKit and printing the comparison line."""
    from sparsectx.eval.vlmeval_bridge import BridgeConfig, judge_environment, score_with_vlmeval, summary_line

    with config_check():  # a bad config or an unset judge key is answered in one line (exit 2) before VLMEvalKit starts
        config = BridgeConfig(**OmegaConf.to_container(cfg, resolve=True))
        judge_environment(config)
    print(summary_line(config.result, score_with_vlmeval(config)))


if __name__ == "__main__":
    main()

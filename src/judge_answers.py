"""Judges the answers of an evaluated benchmark that the exact-matching rules leave undecided (optional).

    python src/judge_answers.py result=<leaf>/<bench>.json judge=hf_local judge.model=<chat model dir>
    python src/judge_answers.py result=<leaf>/<bench>.json judge=openai judge.model=<id> judge.base_url=<url>
    KEY=... python src/judge_answers.py ... judge=openai judge.base_url=https://<host>/v1 judge.api_key_env=KEY

A served judge gets a key only from the variable ``judge.api_key_env`` names, only over https or to a loopback
host; the result JSON records its config with credentials redacted (``sparsectx.eval.judge``).

Writes ``<leaf>/<bench>.judge.jsonl`` and ``judged`` in the result JSON (``sparsectx.eval.judge``); the
exact-matching ``score`` stays the headline. Tests call ``judge_result``.
"""

from __future__ import annotations

from omegaconf import DictConfig

from sparsectx.cli import ConfigError, config_check, entry
from sparsectx.config_schema import load_config


@entry("judge_answers")
def main(cfg: DictConfig) -> None:
    """Returns None after judging ``cfg.result`` and printing how many items the judge decided."""
    from sparsectx.eval.judge import JudgeAnswersConfig, judge_result

    if cfg.get("judge") is None:
        raise ConfigError("choose a judge: judge=hf_local judge.model=<dir> or judge=openai (conf/judge/)")
    with config_check():  # a bad config is answered in one line (exit 2) before the judge is loaded
        config = load_config(JudgeAnswersConfig, cfg, "the judge config (conf/judge_answers.yaml)")
    block = judge_result(config)
    print(
        f"{cfg.result}: {block['n_decided_by_judge']} of {block['n_undecided']} undecided answers decided by the "
        f"judge; judged score {block['score']:.4f} (records: {block['records']})"
    )


if __name__ == "__main__":
    main()

"""Every throughput figure conf/plan.yaml records is quoted verbatim from docs/performance.md."""

from __future__ import annotations

from pathlib import Path

from omegaconf import OmegaConf

from sparsectx.plan.settings import PLAN_CONFIG

PERFORMANCE = (Path(__file__).resolve().parents[2] / "docs" / "performance.md").read_text()


def quoted(node: object) -> list[dict]:
    """Returns every mapping under ``node`` that carries a ``quote``."""
    if isinstance(node, dict):
        own = [node] if "quote" in node else []
        return own + [q for value in node.values() for q in quoted(value)]
    if isinstance(node, list):
        return [q for value in node for q in quoted(value)]
    return []


def test_every_figure_is_quoted_from_the_performance_page() -> None:
    figures = quoted(OmegaConf.to_container(OmegaConf.load(PLAN_CONFIG)))
    assert len(figures) >= 12
    missing = [f["quote"] for f in figures if f["quote"] not in PERFORMANCE]
    assert not missing, f"figures no longer in docs/performance.md: {missing}"
    for figure in figures:
        number = next(
            v for k, v in figure.items() if k in ("s_per_sample", "tokens_per_s", "value", "total_ms", "factor")
        )
        shown = f"{number:,}" if isinstance(number, int) else str(number)
        assert (
            shown in figure["quote"]
            or str(number) in figure["quote"]
            or f"+{(number - 1) * 100:.1f}%" in figure["quote"]
        )
        assert figure["section"] and figure["commit"]

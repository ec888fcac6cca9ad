"""The rehearsal subsets the suite runs: at least one job of each rule and each block shape of both real presets.

Each is a ``grid:`` replacement (what ``--configfile`` gives Snakemake) of the preset's own entries, settings and
overrides: SCOPD's table rows, a sweep of two points, a Pass@K cell and the report entries (training cost, GRPO
dynamics, token sensitivity, examples) on Qwen2.5-VL, with an in-LLM pruner; LT-OPD's sharded full-parameter
training with recomputation on Qwen3.5 (thinking off, the open answer tag), its efficiency block, a footnoted
unsupported pruner (FastV on Qwen3.5) and an unsupported model.
"""

from __future__ import annotations

SCOPD = {
    "models": {"qwen2_5_vl_7b": {}},
    "pruners": {"visionzip": {}, "fastv": {}},
    "benchmarks": {"mmstar": {}, "mme": {}},
    "methods": {
        "scopd_plus": {"pruner": "visionzip", "budgets": [0.1]},
        "grpo": {"pruner": "visionzip", "budgets": [0.1], "overrides": ["steps=2500"]},
        "scopd_plus_rho_0_5": {
            "preset": "scopd_plus",
            "pruner": "visionzip",
            "budgets": [0.1],
            "overrides": ["method.positions.fraction=0.5"],
        },
    },
    "tables": {
        "main": {
            "models": ["qwen2_5_vl_7b"],
            "benchmarks": ["mmstar", "mme"],
            "rows": [
                {"methods": ["base", "grpo", "scopd_plus"], "pruners": ["visionzip"], "budgets": [1.0, 0.1]},
                {"methods": ["base"], "pruners": ["fastv"], "budgets": [0.1]},
            ],
        },
        "rho_sensitivity": {
            "kind": "sweep",
            "models": ["qwen2_5_vl_7b"],
            "benchmarks": ["mmstar"],
            "pruner": "visionzip",
            "budget": 0.1,
            "reference": "base",
            "parameter": {"key": "method.positions.fraction", "label": "rho", "percent": True},
            "points": [{"value": 0.1, "method": "scopd_plus"}, {"value": 0.5, "method": "scopd_plus_rho_0_5"}],
        },
    },
    "passk": {
        "models": ["qwen2_5_vl_7b"],
        "benchmarks": ["mmstar"],
        "rows": [{"methods": ["base"], "pruners": ["visionzip"], "budgets": [0.1]}],
    },
    "report": {
        "training_cost": {"kind": "training_cost", "methods": ["grpo", "scopd_plus"], "blocks": ["main"]},
        "grpo_dynamics": {"kind": "training_dynamics", "methods": ["grpo"], "window": 1},
        "examples": {"kind": "examples", "blocks": ["main"], "items": 1},
        "token_sensitivity": {"kind": "token_sensitivity", "methods": ["scopd_plus"], "items": 1},
    },
}

LTOPD = {
    "models": {
        "qwen3_5_4b": {
            "overrides": ["model.thinking=false", "model.answer_prefix='<answer>'"],
            "unsupported_pruners": {"fastv": "in-LLM pruning is refused on Qwen3.5 (linear attention layers)"},
        },
        "llava_onevision_1_5_4b": {"unsupported": "no class in transformers 5.17"},
    },
    "pruners": {"cdpruner": {}, "fastv": {}},
    "benchmarks": {"textvqa": {}},
    "methods": {"lt_opd": {"pruner": "cdpruner", "budgets": [0.05]}},
    "tables": {
        "main": {
            "models": ["qwen3_5_4b", "llava_onevision_1_5_4b"],
            "benchmarks": ["textvqa"],
            "rows": [
                {"methods": ["base"], "pruners": ["fastv", "cdpruner"], "budgets": [0.05]},
                {"methods": ["lt_opd"], "pruners": ["cdpruner"], "budgets": [0.05]},
            ],
        },
    },
    "efficiency": {
        "models": ["qwen3_5_4b"],
        "benchmarks": ["textvqa"],
        "rows": [{"methods": ["base", "lt_opd"], "pruners": ["cdpruner"], "budgets": [0.05]}],
    },
    "report": {"deviation": {"kind": "deviation", "methods": ["lt_opd"], "window": 1}},
}

SUBSETS = {"scopd_qwen2_5_vl_7b": SCOPD, "ltopd_qwen3_5_4b": LTOPD}

"""Which leaves an experiment has: the grid behind the Snakefile, and the cells it cannot run yet.

An experiment preset (``conf/experiment/<name>.yaml``) carries a ``grid:`` block. It declares the models,
pruners, benchmarks and training methods the study names, each supported or marked ``unsupported: <reason>``,
and blocks of cells: ``tables`` (one per paper table), ``passk`` and ``efficiency``. A block is a union of
products ``models x methods x pruners x budgets x benchmarks``; table and Pass@K blocks also get the
full-context reference cells (method ``base`` with ``reference_pruner`` at budget 1.0). A cell whose model,
pruner, method, training pruner or benchmark is unsupported is reported by ``missing_cells`` with every
reason; each other cell is a leaf the Snakefile schedules. Nothing is dropped silently: every declared entry
must appear in some block, so every unsupported one shows up as missing cells in the tables.

The package, in the order a config travels through it:

- ``config``: the Snakemake config, the preset's grid merged with the user's keys, the JSON-schema check;
- ``parse``: the grid mapping read into typed entries, and the checks that need several keys at once;
- ``cells``: the vocabulary (cells, runs, blocks) and the Snakefile's output patterns;
- ``grid``: ``Grid``, the expansion (cells, runs, wildcard values) and every output's path;
- ``eval_jobs``: the greedy evaluation rules, one job per (leaf, benchmark) or one per leaf;
- ``commands``: each job's command line (entry point and Hydra overrides);
- ``rehearsal``: the same jobs scaled to a laptop CPU (``rehearsal: true``, ``conf/rehearsal.yaml``);
- ``sweeps``: the check that each sweep point's composed training config sets the value it shows.

Everything a rule file or a caller needs is importable from ``sparsectx.workflow`` itself.
"""

from sparsectx.paths import BASE  # the untrained model's method; re-exported for the rule files
from sparsectx.workflow.cells import (
    CHECKPOINT_MARKER,
    CHECKPOINT_PATTERN,
    EFFICIENCY_PATTERN,
    EVAL_METHOD_KEY,
    PASSK_PATTERN,
    PLAN_PATTERN,
    PREFLIGHT_PATTERN,
    RESULT_PATTERN,
    SEED_CHECKPOINT_PATTERN,
    SEED_FOLDER,
    SEED_RESULT_PATTERN,
    STAGES,
    TABLES_PATTERN,
    TARGET_STAGES,
    Block,
    Cell,
    EfficiencyRun,
    Method,
    MissingCell,
    Row,
    Sweep,
    SweepPoint,
    TrainRun,
    cell_of,
    mirror,
    run_of,
    seed_of,
)
from sparsectx.workflow.commands import (
    data_args,
    efficiency_args,
    entry_point,
    evaluate_args,
    evaluate_command,
    preflight_args,
    tables_args,
    train_args,
    train_command,
)
from sparsectx.workflow.config import (
    CONF_DIR,
    REPO_DIR,
    SCHEMA_PATH,
    load_yaml,
    resolve_config,
    validate_config,
)
from sparsectx.workflow.eval_jobs import EvalRule, eval_rule_name, eval_rules, leaf_name
from sparsectx.workflow.grid import (
    Grid,
    check_tables_seeds,
    flat_resources,
    load_grid,
    missing_cells,
    on_one_node,
    stop_signal_option,
)
from sparsectx.workflow.rehearsal import Rehearsal, load_rehearsal, rehearsal_of
from sparsectx.workflow.sweeps import check_sweep_values

__all__ = [
    "BASE",
    "CHECKPOINT_MARKER",
    "CHECKPOINT_PATTERN",
    "CONF_DIR",
    "EFFICIENCY_PATTERN",
    "EVAL_METHOD_KEY",
    "PASSK_PATTERN",
    "PLAN_PATTERN",
    "PREFLIGHT_PATTERN",
    "REPO_DIR",
    "RESULT_PATTERN",
    "SCHEMA_PATH",
    "SEED_CHECKPOINT_PATTERN",
    "SEED_FOLDER",
    "SEED_RESULT_PATTERN",
    "STAGES",
    "TABLES_PATTERN",
    "TARGET_STAGES",
    "Block",
    "Cell",
    "EfficiencyRun",
    "EvalRule",
    "Grid",
    "Method",
    "MissingCell",
    "Rehearsal",
    "Row",
    "Sweep",
    "SweepPoint",
    "TrainRun",
    "cell_of",
    "check_sweep_values",
    "check_tables_seeds",
    "data_args",
    "efficiency_args",
    "entry_point",
    "evaluate_args",
    "eval_rule_name",
    "eval_rules",
    "leaf_name",
    "flat_resources",
    "on_one_node",
    "stop_signal_option",
    "load_grid",
    "load_rehearsal",
    "load_yaml",
    "mirror",
    "preflight_args",
    "missing_cells",
    "rehearsal_of",
    "resolve_config",
    "run_of",
    "seed_of",
    "tables_args",
    "train_args",
    "evaluate_command",
    "train_command",
    "validate_config",
]

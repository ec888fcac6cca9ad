"""Parse-time setup for every rule file: the config checked against the schema, the grid, wildcard constraints.

Nothing here schedules work; the helpers live in the tested module sparsectx.workflow.
"""

import os
import re

from sparsectx import workflow as wf
from sparsectx.workflow.slurm import check_job_shapes, node_limits, partition_name

if Path(workflow.basedir).resolve() != wf.REPO_DIR:
    raise ValueError(
        f"sparsectx is imported from {wf.REPO_DIR}, not from this checkout {workflow.basedir}; "
        "run `pip install -e .` here (the Makefile's venv does)"
    )
CONFIG = wf.resolve_config(config)
wf.validate_config(CONFIG)  # workflow/schemas/config.schema.yaml; each error names its dotted key
REHEARSAL = wf.rehearsal_of(CONFIG)  # rehearsal: true (conf/rehearsal.yaml); None for the real study
GRID_ARGS = (CONFIG["experiment"], CONFIG["grid"], CONFIG["hydra_overrides"], CONFIG.get("model_paths"))
GRID = wf.Grid(*GRID_ARGS, REHEARSAL)
wf.check_tables_seeds(GRID)
_unknown = GRID.unknown_conf_names()
if _unknown:
    raise ValueError(f"experiment {GRID.experiment}: scheduled cells name configs that do not exist: {_unknown}")
wf.check_sweep_values(GRID)  # each sweep point's composed training config sets its parameter to the point's value
DATA = GRID.data_files()
RES = GRID.resources
# Under the SLURM profile its default-resources hold the partition's largest node (sparsectx.workflow.slurm
# node_resources; none elsewhere): a job no node can hold is refused here, before anything is queued.
_node = node_limits(workflow.resource_settings.default_resources)
check_job_shapes(RES, _node, GRID.experiment, partition_name(os.environ))
PREFLIGHT = GRID.preflight_inputs()  # every train and evaluation job's first input ([] on built data)
# A study on the user's inputs starts with its plan (workflow/rules/plan.smk) and asks SLURM for the plan's time
# limit of each job (sparsectx.plan.dag); a rehearsal plans the real grid it stands in for.
PLAN_GRID = GRID if REHEARSAL is None else wf.Grid(*GRID_ARGS)
if GRID.preflight:
    from sparsectx.plan.dag import planned_resources as rule_resources
else:  # the tiny studies: the grid's flat runtime (their plan has no figures; importing it costs seconds)
    from sparsectx.workflow import flat_resources as rule_resources

wildcard_constraints:
    experiment=re.escape(GRID.experiment),
    model=GRID.constraint("model"),
    method=GRID.constraint("method"),
    pruner=GRID.constraint("pruner"),
    budget=GRID.constraint("budget"),
    bench=GRID.constraint("bench"),
    seed=GRID.constraint("seed"),

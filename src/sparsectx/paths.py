"""Output paths as pure functions of the config: one results leaf per (experiment, model, method, pruner,
budget, benchmark), one training directory per (experiment, model, method, pruner, budget); and where the
package's own files are (``PACKAGE_DIR``, ``CONF_DIR``), in a checkout and in an installed wheel alike.

Every name that becomes a path component is checked where it becomes one (``path_name``): a name from the
config or from a file (a trained checkpoint's ``config.yaml``) cannot lead a write outside ``results_root``
or ``runs_root``.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent
"""The installed package's folder: ``src/sparsectx`` in a checkout, ``site-packages/sparsectx`` from a wheel."""
CONF_DIR = (PACKAGE_DIR / "conf").resolve()
"""Hydra's config folder, the one source of defaults. The package ships it as ``sparsectx/conf``: in a checkout
that is a link to the repository's ``conf/`` (so this resolves to it, as every ``conf/...`` path in messages and
docs says), in a wheel a copy of it (``[tool.setuptools.package-data]``). The entry scripts' ``config_path="../conf"``
names the same folder from ``src/`` and from the package's ``sparsectx/scripts/``."""

PATH_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]*")
"""What a name that becomes one folder or file name may spell: ASCII letters, digits and ``. _ + -``, starting
with a letter or digit, so never a separator, ``.``, ``..``, a hidden or an absolute name."""
PATH_NAME_MAX = 128
"""The longest such name (a file system allows 255 bytes per component; the suffixes added need room)."""
BASE = "base"
"""The method component of the untrained model's results (``conf/evaluate.yaml``'s ``method.name``): never a
trained checkpoint's, and never declared in a grid's ``methods``."""
CHECKPOINT_INFO = "sparsectx_training.json"
"""The training record in every trained model directory (``checkpoint/``, ``adapter/``): provenance and the
sha256 of each other file (``sparsectx.checkpoints``); a model directory without it is not a trained one."""


def path_name(value: object, key: str, source: str = "the config", fix: str | None = None) -> str:
    """Returns ``value`` when it is safe as one component of an output path; raises ValueError otherwise.

    Names (experiment, model, method, pruner, benchmark) become folders and files under ``results_root`` and
    ``runs_root``: a separator, ``..`` or an absolute name would write outside them, so each is checked here.

    Args:
        value: the name.
        key: the config key it is read as (``method.name``), named in the error.
        source: where the value came from (the config, or a file such as a checkpoint's ``config.yaml``).
        fix: what to do instead; by default, to set ``key`` to a plain name.

    Raises:
        ValueError: naming the key, the value, its source and the fix.
    """
    if isinstance(value, str) and len(value) <= PATH_NAME_MAX and PATH_NAME.fullmatch(value):
        return value
    plain = re.sub(r"[^A-Za-z0-9._+-]+", "_", str(value)).strip("._+-")[:PATH_NAME_MAX] or "name"
    raise ValueError(
        f"{key}={value!r} (from {source}) cannot name an output folder or file: names there are 1 to "
        f"{PATH_NAME_MAX} ASCII letters, digits, '.', '_', '+' or '-', starting with a letter or digit (no '/', "
        "'\\', '..' or leading dot, which could write outside results_root or runs_root); "
        f"{fix or f'set {key} to such a name, e.g. {key}={plain}'}"
    )


def budget_tag(budget: float | str) -> str:
    """Returns the path spelling of a budget fraction: 0.1 -> "0.1", 1.0 -> "1" (also from "0.1", "1").

    It is also the ``budget_tag`` resolver of every ``hydra.run.dir``, which Hydra resolves before any
    config check: a bad ``budget=`` override fails here, so the error names the key, the value and the fix.

    Raises:
        ValueError: ``budget`` is not a finite number.
    """
    try:
        value = float(budget)
    except (TypeError, ValueError):
        value = math.nan
    if isinstance(budget, bool) or not math.isfinite(value):
        raise ValueError(
            f"budget={budget!r} is not a number: set budget to the kept fraction of visual tokens in (0, 1], "
            "e.g. budget=0.1 (1 = full context)"
        )
    return f"{value:g}"


def _cell_path(root: str | Path, experiment: str, model: str, method: str, pruner: str, budget: float) -> Path:
    """Returns ``root/experiment/model/method/pruner/budget`` after checking each name (``path_name``)."""
    names = {"experiment": experiment, "model.name": model, "method.name": method, "pruner.name": pruner}
    return Path(root).joinpath(*(path_name(value, key) for key, value in names.items()), budget_tag(budget))


def leaf_dir(root: str | Path, experiment: str, model: str, method: str, pruner: str, budget: float) -> Path:
    """Returns ``root/experiment/model/method/pruner/budget`` (the directory of one evaluation leaf).

    Raises:
        ValueError: a name is not a plain path component (``path_name``).
    """
    return _cell_path(root, experiment, model, method, pruner, budget)


def result_path(leaf: Path, bench: str) -> Path:
    """Returns the results JSON of one benchmark in a leaf directory; a benchmark name that is not a plain path
    component raises ValueError (``path_name``)."""
    return leaf / f"{path_name(bench, 'benchmark name')}.json"


def predictions_path(leaf: Path, bench: str) -> Path:
    """Returns the predictions JSONL of one benchmark in a leaf directory; a benchmark name that is not a plain
    path component raises ValueError (``path_name``)."""
    return leaf / f"{path_name(bench, 'benchmark name')}.predictions.jsonl"


def run_dir(root: str | Path, experiment: str, model: str, method: str, pruner: str, budget: float) -> Path:
    """Returns the training directory: ``checkpoint/`` (final, loadable) and ``state/`` (resume) live in it.

    Raises:
        ValueError: a name is not a plain path component (``path_name``).
    """
    return _cell_path(root, experiment, model, method, pruner, budget)


def step_log_path(run: str | Path) -> Path:
    """Returns the per-step log of a training directory (``run_dir``): one JSON line per optimizer step, the
    step's metrics as logged to the tracker (``training.loop``)."""
    return Path(run) / "steps.jsonl"


def token_trace_path(run: str | Path) -> Path:
    """Returns the per-token traces of a training directory (``run_dir``): one JSON line per traced rollout of
    the first and the last optimizer step (``training.token_trace``, written when ``token_trace`` > 0)."""
    return Path(run) / "token_traces.jsonl"

"""lmms-eval's entry point for sparsectx (group ``lmms_eval.models`` in ``pyproject.toml``): model ``sparsectx``.

lmms-eval loads this while it builds its model registry; the adapter module itself
(``sparsectx.integrations.lmms_eval_model``) is imported only when ``--model sparsectx`` is asked for.
"""

from __future__ import annotations

from typing import Any


def manifest() -> Any:
    """Returns lmms-eval's ``ModelManifest`` naming ``SparsectxLMM`` as model ``sparsectx``."""
    from lmms_eval.models.registry_v2 import ModelManifest

    return ModelManifest(model_id="sparsectx", simple_class_path="sparsectx.integrations.lmms_eval_model.SparsectxLMM")

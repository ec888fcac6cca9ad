"""The registry of model families: each family module's ``SPEC``, found and registered once
(``sparsectx.models.family``).

A family module is any module of ``sparsectx.models`` but the shared machinery (``INFRASTRUCTURE_MODULES``),
named after its family and ending with ``SPEC = FamilySpec(...)``. ``register_families`` lists the package's
folders (``sparsectx.registry.package_modules``) instead of an import line per family, so adding a family is
one module (docs/families.md) and a module cannot be left out of the registry.
"""

from __future__ import annotations

import importlib

from sparsectx.models.family import FAMILIES, FamilySpec
from sparsectx.registry import module_specs

INFRASTRUCTURE_MODULES = (
    "adapter",
    "compiled_blocks",
    "families",
    "family",
    "in_llm",
    "loading",
    "llava_onevision_processor",
    "positions",
    "processor",
    "published",
    "qwen_common",
    "templates",
    "tiny_processor",
    "video_input",
    "vision_attention",
    "vision_costs",
    "vision_mlp",
    "vision_signals",
)
"""The modules of ``sparsectx.models`` that are no family: what the families share. Every other module of the
package is a family module and must define ``SPEC``."""


def register_families() -> None:
    """Imports every family module of ``sparsectx.models`` and registers its ``SPEC`` in ``FAMILIES``.

    A module already registered is skipped, so a second call registers only modules added since (a test's own
    folder on the package's ``__path__``).

    Raises:
        TypeError: a family module defines no ``SPEC``, or one that is not a ``FamilySpec``.
        ValueError: a module's ``SPEC.name`` differs from the module's name, or a name or model_type is taken.
    """
    package = importlib.import_module(__package__)  # sparsectx.models, whose __init__ may still be running
    recipe = 'docs/families.md, "Add a family"'
    shared = "module and family share one name: adapter.family, result records"
    specs = module_specs(
        package.__name__, package.__path__, INFRASTRUCTURE_MODULES, FamilySpec, "family", recipe, shared
    )
    for spec in specs:
        if spec.name in FAMILIES.names() and FAMILIES.by_name(spec.name) is spec:
            continue  # registered by an earlier call
        FAMILIES.register(spec)


register_families()


def family_for(model_type: str) -> FamilySpec:
    """Returns the family record accepting ``model_type``; raises KeyError naming the supported model_types."""
    return FAMILIES.for_model_type(model_type)

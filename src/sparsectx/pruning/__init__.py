"""Visual-token pruning operators and the entry point that runs the pre-LLM ones (in-LLM: ``pruning.layer``).

Each operator lives in its own module, named after its registry key, which is also the stem of its config
file ``conf/pruner/<name>.yaml``; the YAML's ``params`` are the operator's keyword-only arguments and the
only place their defaults live. The module ends with ``SPEC = PrunerSpec(...)`` (``pruning.base``): its
stage, operator, whether it merges or draws from the generator, its parameter check and the extra vision
signals it reads. ``register_operators`` finds the modules and registers each ``SPEC`` in ``PRUNERS``; every
consumer reads the spec from there. Callers go through ``select_tokens``, which turns the budget into the
exact per-image count k (spec 1.2) and checks what the operator returned against its contract and its spec:
ports that silently never pruned have been seen in the field (spec 3, item 12).
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from dataclasses import replace

import torch

from sparsectx.budget import tokens_to_keep
from sparsectx.pruning.base import IN_LLM, PrunerSpec
from sparsectx.registry import Registry, module_specs
from sparsectx.visual import ImageTokens, Selection, VisionSignals

PRUNERS = Registry[PrunerSpec]("pruner")
INFRASTRUCTURE_MODULES = ("base", "config", "layer")
"""The package's modules that are not operators: the interface, the config group and the in-LLM entry point.
Every other module of the package is an operator module and must define ``SPEC``."""


def register_operators() -> None:
    """Imports every operator module of this package and registers its ``SPEC`` in ``PRUNERS``.

    Modules are found by listing the package's folders (``sparsectx.registry.package_modules``)
    rather than by an import line per operator, so adding a pruner is one module and one YAML, and a module
    cannot be left out of the registry. A module already registered is skipped, so a second call registers
    only modules added since (a test's own folder on ``__path__``).

    Raises:
        TypeError: an operator module defines no ``SPEC``, or one that is not a ``PrunerSpec``.
        ValueError: a module's ``SPEC.name`` differs from the module's name.
    """
    recipe = 'docs/extending.md, "Add a pruner"'
    shared = "module, registry key and conf/pruner/<name>.yaml share one name"
    for spec in module_specs(__name__, __path__, INFRASTRUCTURE_MODULES, PrunerSpec, "operator", recipe, shared):
        if spec.name in PRUNERS and PRUNERS.get(spec.name) is spec:
            continue  # registered by an earlier call
        PRUNERS.register(spec.name)(spec)


register_operators()


def pruners_at(stage: str) -> list[str]:
    """Returns the sorted names of the registered pruners whose spec has ``stage`` (``PRE_LLM`` or ``IN_LLM``),
    for messages that list the choices and for tests that cover every pruner of a stage."""
    return [name for name in PRUNERS.names() if PRUNERS.get(name).stage == stage]


def select_tokens(
    name: str,
    image: ImageTokens,
    question_embeds: torch.Tensor,
    budget: float,
    generator: torch.Generator,
    params: Mapping[str, object],
) -> Selection:
    """Returns the k = clamp(round(budget * N), 1, N) tokens that pruner ``name`` keeps of one image.

    Args:
        name: registry key, equal to a ``conf/pruner/*.yaml`` stem.
        image: the image's N post-merger tokens and signals.
        question_embeds: (T_q, D) LLM input embeddings of the user question's tokens only.
        budget: kept fraction of the image's tokens, in (0, 1].
        generator: the only source of randomness the operator may use.
        params: the operator's keyword arguments (the YAML's ``params``), exactly its keyword-only names.

    Raises:
        ValueError: the budget lies outside (0, 1].
        KeyError: unknown pruner, or ``params`` keys differ from the operator's keyword-only arguments.
        RuntimeError: the operator did not return exactly k strictly ascending in-range indices with
            matching (k, D) vectors for ``embeds`` and every DeepStack level; or it did what its spec says it
            does not: merged vectors without ``merges``, drew from the generator without ``seeded``.
    """
    k = tokens_to_keep(budget, image.num_tokens)
    spec = PRUNERS.get(name)
    if spec.stage == IN_LLM:
        raise ValueError(f"pruner {name!r} prunes inside the LLM; select with sparsectx.pruning.layer.select_in_llm")
    check_params(spec, params)
    untouched = None if spec.seeded else generator.get_state()
    selection = spec.select(image, question_embeds, k, generator, **dict(params))
    _check_selection(spec, selection, image, k)
    if untouched is not None and not torch.equal(untouched, generator.get_state()):
        raise RuntimeError(
            f"pruner {name!r} drew from the generator, but its spec says it does not; declare seeded=True in "
            "its PrunerSpec (its choice then changes with the run's seed)"
        )
    return selection


def replay_selection(
    name: str,
    image: ImageTokens,
    question_embeds: torch.Tensor,
    selection: Selection,
    params: Mapping[str, object],
) -> Selection:
    """Returns ``selection`` (its kept tokens, and an in-LLM one's layer) rebuilt from ``image``'s vectors.

    A trained vision tower (``method.train_vision``) recomputes an image's vectors with gradients after the
    selection was made without them; the training forward must keep the same tokens (invariant 5). A gather
    takes the new vectors at the kept indices. A merging operator (``PrunerSpec.merges``) is re-run at the same
    k on ``image``, whose signals are the recorded ones: VisionZip's choice of dominant tokens, targets and
    members reads only the attention and keys, so it chooses the same tokens, and its merged vectors carry
    the new vectors' gradients.

    Raises:
        RuntimeError: the re-run kept other tokens than ``selection`` (its choice read the vectors).
    """
    keep = selection.indices
    spec = PRUNERS.get(name)
    if not spec.merges:
        embeds = image.embeds[keep]
        deepstack = tuple(level[keep] for level in image.deepstack)
        return replace(selection, embeds=embeds, deepstack=deepstack)
    rerun = spec.select(image, question_embeds, keep.numel(), torch.Generator(), **dict(params))
    if not torch.equal(rerun.indices, keep):
        raise RuntimeError(
            f"pruner {name!r} re-run on the recomputed vision vectors kept other tokens than its selection: "
            "its choice reads the vectors, not only the recorded signals"
        )
    return replace(selection, embeds=rerun.embeds, deepstack=rerun.deepstack)


def check_params(spec: PrunerSpec, params: Mapping[str, object]) -> None:
    """Raises KeyError naming ``pruner.params.<key>`` when ``params`` differs from the keyword-only args, or the
    spec's ``param_check`` error (a ValueError naming the key) when a value is out of range."""
    name, expected = spec.name, spec.param_names
    problems = [f"missing pruner.params.{key}" for key in expected if key not in params]
    for key in params:
        if key not in expected:
            close = difflib.get_close_matches(key, expected, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            problems.append(f"unknown pruner.params.{key}{hint}")
    if problems:
        raise KeyError(
            f"pruner {name!r}: {'; '.join(problems)}. Its params are exactly {expected}; "
            f"set them in conf/pruner/{name}.yaml"
        )
    if spec.param_check is not None:
        spec.param_check(params)


def declared_signals(name: str, params: Mapping[str, object], seed: int) -> VisionSignals:
    """Returns the extra vision signals pruner ``name`` reads (none unless its spec declares ``signals``).

    A job assigns this to its adapter's ``vision_signals`` once, before encoding, so the one tower pass
    records what the operator needs and nothing more.
    """
    spec = PRUNERS.get(name)
    return spec.signals(params, seed) if spec.signals is not None else VisionSignals()


def _check_selection(spec: PrunerSpec, selection: Selection, image: ImageTokens, k: int) -> None:
    """Raises RuntimeError unless ``selection`` holds exactly k strictly ascending in-range tokens, whose vectors
    are the image's own at those indices unless the spec ``merges``."""
    name, n, idx = spec.name, image.num_tokens, selection.indices
    problems = []
    if idx.dtype != torch.int64 or idx.ndim != 1:
        problems.append(f"indices must be a 1-D int64 tensor, got {idx.dtype} of shape {tuple(idx.shape)}")
    elif idx.numel() != k:
        problems.append(f"returned {idx.numel()} indices instead of k={k}")
    elif int(idx.min()) < 0 or int(idx.max()) >= n:
        problems.append(f"indices outside [0, {n}): min {int(idx.min())}, max {int(idx.max())}")
    elif k > 1 and not bool((idx[1:] > idx[:-1]).all()):
        problems.append("indices are not strictly ascending (unsorted or repeated)")
    levels = len(image.deepstack)
    if len(selection.deepstack) != levels:
        problems.append(f"returned {len(selection.deepstack)} DeepStack levels, the image has {levels}")
    pairs = [("embeds", selection.embeds, image.embeds)]
    pairs += [
        (f"deepstack[{i}]", got, src)
        for i, (got, src) in enumerate(zip(selection.deepstack, image.deepstack, strict=False))
    ]
    for field, got, src in pairs:
        if tuple(got.shape) != (k, src.shape[1]):
            problems.append(f"{field} has shape {tuple(got.shape)}, expected {(k, src.shape[1])}")
    if not problems and not spec.merges and not _is_gather(selection, image):
        problems.append(
            "its kept vectors are not its image's at the kept indices, but its spec says it does not merge; "
            "declare merges=True in its PrunerSpec (replay_selection then re-runs it)"
        )
    if problems:
        raise RuntimeError(
            f"pruner {name!r} broke its contract on an image of N={n} tokens, k={k}: " + "; ".join(problems)
        )


def _is_gather(selection: Selection, image: ImageTokens) -> bool:
    """Returns whether ``selection``'s vectors (``embeds``, every DeepStack level) are ``image``'s at its indices."""
    pairs = zip((selection.embeds, *selection.deepstack), (image.embeds, *image.deepstack), strict=True)
    return all(torch.equal(got, source[selection.indices]) for got, source in pairs)

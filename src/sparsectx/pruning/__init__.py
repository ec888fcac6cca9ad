"""Visual-token pruning operators and the entry point that runs the pre-LLM ones (in-LLM: ``pruning.layer``).

Each operator lives in its own module and registers itself in ``PRUNERS`` under the stem of its config
file ``conf/pruner/<name>.yaml``; the YAML's ``params`` are the operator's keyword-only arguments and the
only place their defaults live. Callers go through ``select_tokens``, which turns the budget into the exact
per-image count k (spec 1.2) and checks what the operator returned: ports that silently never pruned have
been seen in the field (spec 3, item 12). An operator may also register a range check of its params in
``PARAM_CHECKS`` (run by ``check_params``, so by the config) and the extra vision signals it reads in
``SIGNALS`` (``declared_signals``; a job sets them on its adapter before encoding).
"""

from __future__ import annotations

import difflib
import inspect
from collections.abc import Mapping
from dataclasses import replace

import torch

from sparsectx.budget import tokens_to_keep
from sparsectx.pruning.base import CheckParams, DeclareSignals, SelectTokens
from sparsectx.registry import Registry
from sparsectx.visual import ImageTokens, Selection, VisionSignals

PRUNERS = Registry[SelectTokens]("pruner")
IN_LLM_PRUNERS = ("dart", "fastv")
"""Keys of the operators that prune before a decoder layer K (``stage: llm``): they register with the in-LLM
signature of ``sparsectx.pruning.layer`` and select through its ``select_in_llm``, never ``select_tokens``."""
MERGING_PRUNERS = ("visionzip",)
"""Keys of the operators whose kept vectors are not a plain gather of the image's tokens (VisionZip adds each
contextual target's members' mean): ``replay_selection`` re-runs them on new vectors."""
PARAM_CHECKS = Registry[CheckParams]("pruner parameter check")
SIGNALS = Registry[DeclareSignals]("pruner signal declaration")

# Explicit imports (convention 11): importing a module registers its operator in PRUNERS.
from sparsectx.pruning import cdpruner, dart, divprune, fastv, random, visionzip  # noqa: E402, F401, I001
from sparsectx.pruning import hiprune, zoo_prune  # noqa: E402, F401, I001


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
            matching (k, D) vectors for ``embeds`` and every DeepStack level.
    """
    k = tokens_to_keep(budget, image.num_tokens)
    operator = PRUNERS.get(name)
    if name in IN_LLM_PRUNERS:
        raise ValueError(f"pruner {name!r} prunes inside the LLM; select with sparsectx.pruning.layer.select_in_llm")
    check_params(name, operator, params)
    selection = operator(image, question_embeds, k, generator, **dict(params))
    _check_selection(name, selection, image, k)
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
    takes the new vectors at the kept indices. A merging operator (``MERGING_PRUNERS``) is re-run at the same
    k on ``image``, whose signals are the recorded ones: VisionZip's choice of dominant tokens, targets and
    members reads only the attention and keys, so it chooses the same tokens, and its merged vectors carry
    the new vectors' gradients.

    Raises:
        RuntimeError: the re-run kept other tokens than ``selection`` (its choice read the vectors).
    """
    keep = selection.indices
    if name not in MERGING_PRUNERS:
        embeds = image.embeds[keep]
        deepstack = tuple(level[keep] for level in image.deepstack)
        return replace(selection, embeds=embeds, deepstack=deepstack)
    operator = PRUNERS.get(name)
    rerun = operator(image, question_embeds, keep.numel(), torch.Generator(), **dict(params))
    if not torch.equal(rerun.indices, keep):
        raise RuntimeError(
            f"pruner {name!r} re-run on the recomputed vision vectors kept other tokens than its selection: "
            "its choice reads the vectors, not only the recorded signals"
        )
    return replace(selection, embeds=rerun.embeds, deepstack=rerun.deepstack)


def check_params(name: str, operator: SelectTokens, params: Mapping[str, object]) -> None:
    """Raises KeyError naming ``pruner.params.<key>`` when ``params`` differs from the keyword-only args."""
    signature = inspect.signature(operator).parameters.values()
    expected = [p.name for p in signature if p.kind is inspect.Parameter.KEYWORD_ONLY]
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
    if name in PARAM_CHECKS:
        PARAM_CHECKS.get(name)(params)


def declared_signals(name: str, params: Mapping[str, object], seed: int) -> VisionSignals:
    """Returns the extra vision signals pruner ``name`` reads (none unless it registered in ``SIGNALS``).

    A job assigns this to its adapter's ``vision_signals`` once, before encoding, so the one tower pass
    records what the operator needs and nothing more.
    """
    PRUNERS.get(name)
    return SIGNALS.get(name)(params, seed) if name in SIGNALS else VisionSignals()


def _check_selection(name: str, selection: Selection, image: ImageTokens, k: int) -> None:
    """Raises RuntimeError unless ``selection`` holds exactly k strictly ascending in-range tokens."""
    n, idx = image.num_tokens, selection.indices
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
    if problems:
        raise RuntimeError(
            f"pruner {name!r} broke its contract on an image of N={n} tokens, k={k}: " + "; ".join(problems)
        )

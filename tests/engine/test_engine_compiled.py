"""The compiled decode step (``engine.compile=on``) gives the reference loop's greedy tokens.

Runs on the CPU through inductor's C++ backend (the CUDA-graph variant is in ``test_engine_gpu.py``):
prompts of different pruned lengths, four slots refilled as generations finish, for both families.
"""

from __future__ import annotations

import shutil

import pytest
import torch
from engine_setup import default_engine

from sparsectx.engine import DecodeEngine, pruned_prompts

from .test_engine_oracle import _contexts, _oracle, _sampling

pytestmark = pytest.mark.skipif(shutil.which("cc") is None, reason="inductor's CPU backend needs a C compiler")


@torch.no_grad()
def test_compiled_step_equals_the_reference_loop(tiny_vlm):
    adapter, samples, selections = _contexts(tiny_vlm, seed=3)
    tok = tiny_vlm.processor.tokenizer
    sampling = _sampling(24, [])
    engine = DecodeEngine(adapter, tok, default_engine(cuda_graphs="off", compile="on"))
    assert engine.compiled and not engine.graphs
    outs = engine.generate(pruned_prompts(adapter, samples, selections), sampling, slots=4)
    expected = _oracle(adapter, tok, samples, selections, sampling)
    assert [g.token_ids.tolist() for g in outs] == [g.token_ids.tolist() for g in expected]


def test_compile_auto_follows_the_graphs_and_bad_values_name_the_key():
    assert not default_engine(compile="auto").compile_on(torch.device("cpu"))
    assert default_engine(compile="on").compile_on(torch.device("cpu"))
    with pytest.raises(ValueError, match="engine.compile"):
        default_engine(compile="yes")

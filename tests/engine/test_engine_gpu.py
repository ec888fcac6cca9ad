"""On CUDA the captured decode step gives the eager step's tokens, across refills and repeated calls.

Skipped without CUDA (run on the device). The tiny random-weight models run in fp32 so greedy ties cannot
flip between the two paths.
"""

from __future__ import annotations

import pytest
import torch
from engine_setup import default_engine
from generation_oracle import reference_generate

from sparsectx.context import build_context
from sparsectx.engine import DecodeEngine, pruned_prompts
from sparsectx.generation import SamplingConfig

from .test_engine_oracle import _contexts

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]


@pytest.fixture
def cuda_vlm(tiny_vlm):
    """Moves the session's tiny model to CUDA for one test and back to the CPU afterwards."""
    tiny_vlm.adapter.model.to("cuda")
    yield tiny_vlm
    tiny_vlm.adapter.model.to("cpu")


@torch.no_grad()
def test_cuda_graph_step_equals_eager_and_the_reference(cuda_vlm):
    adapter, samples, selections = _contexts(cuda_vlm)
    tok = cuda_vlm.processor.tokenizer
    sampling = SamplingConfig(24, False, 1.0, 1.0, 0, [])
    prompts = pruned_prompts(adapter, samples, selections)
    eager = DecodeEngine(adapter, tok, default_engine(cuda_graphs="off")).generate(prompts, sampling, slots=4)
    graphs = DecodeEngine(adapter, tok, default_engine(cuda_graphs="on"))
    assert graphs.graphs
    first = graphs.generate(prompts, sampling, slots=4)
    again = graphs.generate(prompts, sampling, slots=4)  # the kept graph, replayed with other slot contents
    assert len(graphs._steps) == 1
    reference = [
        reference_generate(adapter, tok, build_context(adapter, [s], [sel]), sampling, None)[0]
        for s, sel in zip(samples, selections, strict=True)
    ]
    expected = [g.token_ids.tolist() for g in reference]
    assert [g.token_ids.tolist() for g in eager] == expected
    assert [g.token_ids.tolist() for g in first] == expected
    assert [g.token_ids.tolist() for g in again] == expected


@torch.no_grad()
def test_graphs_are_recaptured_when_weights_move(cuda_vlm):
    adapter, samples, selections = _contexts(cuda_vlm, seed=5)
    tok = cuda_vlm.processor.tokenizer
    sampling = SamplingConfig(8, False, 1.0, 1.0, 0, [])
    engine = DecodeEngine(adapter, tok, default_engine(cuda_graphs="on"))
    prompts = pruned_prompts(adapter, samples, selections)
    before = [g.token_ids.tolist() for g in engine.generate(prompts, sampling)]
    adapter.model.to("cpu").to("cuda")  # new parameter storage: the old graph's pointers are stale
    after = [g.token_ids.tolist() for g in engine.generate(prompts, sampling)]
    assert after == before
    assert len(engine._steps) == 2


@torch.no_grad()
def test_compiled_captured_step_equals_the_reference(cuda_vlm):
    adapter, samples, selections = _contexts(cuda_vlm, seed=3)
    tok = cuda_vlm.processor.tokenizer
    sampling = SamplingConfig(24, False, 1.0, 1.0, 0, [])
    prompts = pruned_prompts(adapter, samples, selections)
    engine = DecodeEngine(adapter, tok, default_engine(cuda_graphs="on", compile="on"))
    assert engine.compiled
    outs = [g.token_ids.tolist() for g in engine.generate(prompts, sampling, slots=4)]
    reference = [
        reference_generate(adapter, tok, build_context(adapter, [s], [sel]), sampling, None)[0]
        for s, sel in zip(samples, selections, strict=True)
    ]
    assert outs == [g.token_ids.tolist() for g in reference]

"""``algorithm.activation_offload``: saved activations in host memory on CUDA, refused on a CPU."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from agilerl.arena.models.errors import ConfigError
from agilerl.builders.llm import LLMBuilder
from agilerl.builders.runtime import AlgorithmBuildRuntime
from agilerl.llm.model import offloaded_activations

pytestmark = pytest.mark.llm


def _agent(make_spec: Any, tokenizer: Any, device: str, **fields: Any) -> Any:
    runtime = AlgorithmBuildRuntime(device=device)
    return LLMBuilder.build(make_spec("DPO", **fields), tokenizer=tokenizer, runtime=runtime)


def test_a_cpu_run_refuses_it_naming_the_field_before_loading_the_model(
    make_spec, tokenizer
) -> None:
    with pytest.raises(ConfigError, match=r"algorithm\.activation_offload: needs a CUDA device"):
        _agent(make_spec, tokenizer, "cpu", activation_offload=True)


def test_the_context_moves_what_a_forward_saves_to_the_host() -> None:
    devices: list[str] = []

    def probe(x: torch.Tensor) -> torch.Tensor:
        return torch.exp(x)  # exp saves its result for backward

    x = torch.ones(3, requires_grad=True)
    with torch.autograd.graph.saved_tensors_hooks(
        lambda t: devices.append(t.device.type) or t, lambda t: t
    ):
        with offloaded_activations(True):
            inner = probe(x)  # the innermost hooks (save_on_cpu's) pack it: not seen here
        outer = probe(x)
    inner.sum().backward()
    outer.sum().backward()
    assert devices == ["cpu"]  # only the forward outside offloaded_activations
    assert torch.allclose(x.grad, 2 * torch.exp(x.detach()))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_on_cuda_it_lowers_peak_memory_with_the_same_update(make_spec, make_env, tokenizer) -> None:
    env = make_env("preference")
    rows = env.train.rows[:8]
    results = {}
    for offload in (False, True):
        agent = _agent(make_spec, tokenizer, "cuda", activation_offload=offload)
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        metrics = agent.learn(rows, env)
        torch.cuda.synchronize()
        results[offload] = (metrics["loss"], torch.cuda.max_memory_allocated() - base)
        del agent
        torch.cuda.empty_cache()
    assert results[True][0] == pytest.approx(results[False][0], abs=1e-5)
    assert results[True][1] < results[False][1]

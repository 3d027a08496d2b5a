"""A saved generator state restores on the same kind of device and reseeds on another."""

from __future__ import annotations

import torch

from agilerl.algorithms.core.rng import restore_generator


def test_same_device_state_continues_the_stream() -> None:
    saved = torch.Generator().manual_seed(3)
    torch.rand(5, generator=saved)
    state = saved.get_state()
    expected = torch.rand(4, generator=saved)
    restored = torch.Generator().manual_seed(99)
    restore_generator(restored, state)
    torch.testing.assert_close(torch.rand(4, generator=restored), expected)


def test_a_cuda_sized_state_reseeds_a_cpu_generator_deterministically() -> None:
    # a CUDA generator's state: 8 bytes of seed, 8 of offset (what test_gpu.py resumes from)
    cuda_state = torch.tensor([200, 218, 193, 41, 0, 0, 0, 0, 40, 176, 0, 0, 0, 0, 0, 0])
    draws = []
    for _ in range(2):
        g = torch.Generator().manual_seed(0)
        restore_generator(g, cuda_state)
        draws.append(torch.rand(4, generator=g))
    torch.testing.assert_close(draws[0], draws[1])
    assert not torch.equal(draws[0], torch.rand(4, generator=torch.Generator().manual_seed(0)))
    other = cuda_state.clone()
    other[8] += 1
    g = torch.Generator()
    restore_generator(g, other)
    assert not torch.equal(torch.rand(4, generator=g), draws[0])

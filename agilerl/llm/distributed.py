"""Data-parallel LLM rollout training across processes (``torchrun``), gloo on CPU, NCCL on CUDA.

Each process generates and scores its share of the batch's prompt groups
and computes its loss normalised by the *global* token count; gradients of
the trainable tensors (the LoRA adapter and any ``modules_to_save``) are
summed across processes before clipping and the optimizer step. The update
is therefore the one a single process would take on the whole batch.

By default the adapters are replicated (the frozen base model too, as in
DDP); with ``algorithm.fsdp`` the model is sharded with FSDP2
(:func:`fully_shard_model`), and checkpoints gather the whole state on rank 0
(:func:`full_optimizer_state`).
"""

from __future__ import annotations

import atexit
import os
from typing import Any

import torch
import torch.distributed as dist

from agilerl.training.distributed_run import leave


def init_from_env(backend: str | None = None) -> bool:
    """Join the process group ``torchrun`` describes (``WORLD_SIZE`` > 1); returns whether joined.

    Args:
        backend: ``"gloo"`` or ``"nccl"``; default NCCL when CUDA is available, else gloo.
    """
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1:
        return False
    if not dist.is_initialized():
        if backend is None:
            backend = "nccl" if torch.cuda.is_available() else "gloo"
        dist.init_process_group(backend=backend)
        atexit.register(leave)
    return True


def active() -> bool:
    """Whether more than one process trains."""
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def rank() -> int:
    """This process's rank (0 without a process group)."""
    return dist.get_rank() if active() else 0


def world_size() -> int:
    """Processes training (1 without a process group)."""
    return dist.get_world_size() if active() else 1


def global_sum(value: float) -> float:
    """``value`` summed over processes."""
    if not active():
        return value
    tensor = torch.tensor([float(value)], dtype=torch.float64)
    dist.all_reduce(tensor)
    return float(tensor.item())


def sum_gradients(params: list[torch.nn.Parameter]) -> None:
    """Sum the gradients of ``params`` over processes in one flat all-reduce."""
    if not active():
        return
    grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
    flat = torch.cat([g.reshape(-1) for g in grads])
    dist.all_reduce(flat)
    offset = 0
    for param, grad in zip(params, grads, strict=True):
        n = grad.numel()
        param.grad = flat[offset : offset + n].view_as(grad).to(param.dtype)
        offset += n


def reduce_metrics(metrics: dict[str, float], summed: tuple[str, ...]) -> dict[str, float]:
    """Metrics of the whole batch: ``summed`` keys added up, the rest averaged over processes."""
    if not active():
        return metrics
    keys = sorted(metrics)
    tensor = torch.tensor([float(metrics[k]) for k in keys], dtype=torch.float64)
    dist.all_reduce(tensor)
    n = world_size()
    return {k: float(v) if k in summed else float(v) / n for k, v in zip(keys, tensor, strict=True)}


def shard(items: list[Any]) -> list[Any]:
    """This process's contiguous share of ``items`` (its length must divide evenly)."""
    n, r = world_size(), rank()
    if len(items) % n:
        raise ValueError(f"{len(items)} items do not split evenly over {n} processes")
    size = len(items) // n
    return items[r * size : (r + 1) * size]


def fully_shard_model(model: Any, *, reshard_after_forward: bool = True) -> Any:
    """Shard ``model`` with FSDP2 (``fully_shard``): every decoder layer, then the root.

    Frozen base weights and the trainable adapter tensors are sharded alike;
    gradients are reduce-scattered by FSDP (averaged over processes).

    Args:
        model: A transformers causal LM or a ``PeftModel`` around one.
        reshard_after_forward: Free gathered parameters after each layer's forward.
    """
    from torch.distributed.fsdp import fully_shard

    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    layers = getattr(getattr(base, "model", base), "layers", None)
    if layers is None:
        raise ValueError(f"{type(base).__name__} has no decoder layers at .model.layers")
    for layer in layers:
        fully_shard(layer, reshard_after_forward=reshard_after_forward)
    # The causal LM, not a PeftModel around it, is the root: ``generate`` calls its
    # forward directly, and FSDP gathers the embeddings and head in that forward's hook.
    fully_shard(base, reshard_after_forward=reshard_after_forward)
    return model


def is_sharded(model: Any) -> bool:
    """Whether ``model`` was sharded by :func:`fully_shard_model`."""
    from torch.distributed.fsdp import FSDPModule

    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    return isinstance(base, FSDPModule)


def full(tensor: torch.Tensor) -> torch.Tensor:
    """The whole tensor of a (possibly sharded) parameter or gradient."""
    return tensor.full_tensor() if hasattr(tensor, "full_tensor") else tensor


def _index_to_fqn(model: Any, optimizer: torch.optim.Optimizer) -> list[str]:
    """The parameter name of each optimizer slot, in ``optimizer.state_dict()``'s index order."""
    names = {id(p): n for n, p in model.named_parameters()}
    slots = [names.get(id(p)) for group in optimizer.param_groups for p in group["params"]]
    if None in slots:
        raise ValueError("the optimizer updates tensors outside the sharded model")
    return slots  # type: ignore[return-value]


def full_optimizer_state(model: Any, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    """A sharded model's optimizer state, gathered whole on rank 0 in the unsharded format.

    Uses ``get_optimizer_state_dict(full_state_dict=True, cpu_offload=True)``
    and renames its parameter names to the integer slots of
    ``optimizer.state_dict()``, so the checkpoint loads into one process.
    Ranks other than 0 get an empty dict.
    """
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_optimizer_state_dict

    options = StateDictOptions(full_state_dict=True, cpu_offload=True)
    gathered = get_optimizer_state_dict(model, optimizer, options=options)
    if not gathered:
        return {}
    slots = {name: i for i, name in enumerate(_index_to_fqn(model, optimizer))}
    groups = [
        {**group, "params": [slots[name] for name in group["params"]]}
        for group in gathered["param_groups"]
    ]
    return {
        "state": {slots[name]: value for name, value in gathered["state"].items()},
        "param_groups": groups,
    }


def load_full_optimizer_state(
    model: Any, optimizer: torch.optim.Optimizer, state: dict[str, Any]
) -> None:
    """Load an unsharded ``optimizer.state_dict()`` into a sharded model's optimizer."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_optimizer_state_dict

    names = _index_to_fqn(model, optimizer)
    by_name = {
        "state": {names[int(i)]: value for i, value in state["state"].items()},
        "param_groups": [
            {**group, "params": [names[int(i)] for i in group["params"]]}
            for group in state["param_groups"]
        ],
    }
    set_optimizer_state_dict(
        model, optimizer, by_name, options=StateDictOptions(full_state_dict=True)
    )


def shard_like(params: dict[str, torch.Tensor], tensors: dict[str, torch.Tensor]) -> dict:
    """Whole ``tensors`` split the way the same-named sharded ``params`` are."""
    from torch.distributed.tensor import distribute_tensor

    out = {}
    for name, tensor in tensors.items():
        param = params[name]
        if hasattr(param, "device_mesh"):
            tensor = distribute_tensor(tensor.to(param.device), param.device_mesh, param.placements)
        out[name] = tensor
    return out

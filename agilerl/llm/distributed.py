"""Data-parallel LLM rollout training across processes (``torchrun``), gloo on CPU, NCCL on CUDA.

Each process generates and scores its share of the batch's prompt groups
and computes its loss normalised by the *global* token count; gradients of
the trainable tensors (the LoRA adapter and any ``modules_to_save``) are
summed across processes before clipping and the optimizer step. The update
is therefore the one a single process would take on the whole batch.

By default the adapters are replicated (the frozen base model too, as in
DDP); with ``algorithm.fsdp`` the model is sharded with FSDP2
(:func:`fully_shard_model`, which applies every ``algorithm.fsdp`` setting that acts
and refuses, naming it, any this run cannot honour), and checkpoints gather the whole
state on rank 0 (:func:`full_optimizer_state`).
"""

from __future__ import annotations

import atexit
import os
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as dist

from agilerl.networks import torch_internals
from agilerl.training.distributed_run import leave

if TYPE_CHECKING:
    from agilerl.arena.models.fsdp import FSDPConfig


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


def decoder_layers(model: Any) -> list[Any]:
    """The decoder blocks of a transformers causal LM (or a ``PeftModel`` around one)."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    layers = getattr(getattr(base, "model", base), "layers", None)
    if layers is None:
        raise ValueError(f"{type(base).__name__} has no decoder layers at .model.layers")
    return list(layers)


def check_fsdp_config(config: FSDPConfig, *, world: int, cuda: bool) -> None:
    """Refuse the FSDP settings this machine and process group cannot honour.

    Args:
        config: The manifest's ``algorithm.fsdp``.
        world: Trainer processes.
        cuda: Whether the model trains on CUDA.

    Raises:
        ConfigError: Naming ``algorithm.fsdp.<field>`` and what to do instead.
    """
    from agilerl.arena.models.errors import ConfigError, Problem

    problems = []
    if config.cpu_offload and not cuda:
        problems.append(
            Problem(
                "algorithm.fsdp.cpu_offload",
                "needs CUDA: on a CPU run the sharded parameters, gradients and optimizer "
                "state already live in host memory; remove fsdp.cpu_offload",
            )
        )
    size = config.shard_group_size
    if size is not None and world % size:
        problems.append(
            Problem(
                "algorithm.fsdp.shard_group_size",
                f"{size} does not divide the {world} trainer processes into whole "
                f"replica groups; use a divisor of {world}",
            )
        )
    if problems:
        raise ConfigError(problems)


def _mesh(config: FSDPConfig, world: int, device_type: str) -> Any:
    """The device mesh: ``None`` (all ranks shard), or 2-D ``(replicate, shard)`` for HSDP."""
    from torch.distributed.device_mesh import init_device_mesh

    size = config.shard_group_size
    if size is None or size == world:
        return None  # fully_shard's default: every rank in one shard group
    return init_device_mesh(
        device_type, (world // size, size), mesh_dim_names=("replicate", "shard")
    )


def fully_shard_model(model: Any, config: FSDPConfig | None = None) -> list[Any]:
    """Shard ``model`` with FSDP2 (``fully_shard``) as ``config`` (``algorithm.fsdp``) says.

    Every ``wrap_every_n_blocks`` consecutive decoder blocks form one FSDP unit, the causal
    LM (embeddings, final norm, head) the root unit. Frozen parameters with fewer than
    ``param_persistence_threshold`` elements are left out (replicated, cast to
    ``param_dtype``); trainable ones are always sharded. Gathered parameters are in
    ``param_dtype`` and gradients are reduced in ``reduce_dtype``
    (``MixedPrecisionPolicy``); each unit all-gathers the next ``prefetch_units`` units in
    forward and the previous ``backward_prefetch_units`` in backward.
    ``shard_group_size`` shards within groups of that many ranks and replicates across
    the groups (HSDP); ``cpu_offload`` keeps shards on the CPU (``CPUOffloadPolicy``);
    ``checkpoint_skip_layer_types`` / ``checkpoint_every_n_blocks`` pick the blocks
    activation checkpointing recomputes.

    Args:
        model: A transformers causal LM or a ``PeftModel`` around one.
        config: The FSDP settings (defaults when ``None``).

    Returns:
        The FSDP units, decoder-block units first, the root last.

    Raises:
        ConfigError: For settings this run cannot honour (:func:`check_fsdp_config`).
    """
    from torch.distributed.fsdp import (
        CPUOffloadPolicy,
        MixedPrecisionPolicy,
        OffloadPolicy,
        fully_shard,
    )

    from agilerl.arena.models.fsdp import FSDPConfig
    from agilerl.llm.model import select_checkpointed_blocks

    config = config if config is not None else FSDPConfig()
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    layers = decoder_layers(model)
    device = next(base.parameters()).device
    world = world_size()
    check_fsdp_config(config, world=world, cuda=device.type == "cuda")
    if config.checkpoint_skip_layer_types or config.checkpoint_every_n_blocks != 1:
        select_checkpointed_blocks(
            layers,
            getattr(base.config, "layer_types", None),
            skip_types=config.checkpoint_skip_layer_types,
            every_n=config.checkpoint_every_n_blocks,
        )
    param_dtype = getattr(torch, config.param_dtype)
    ignored = {
        p
        for p in base.parameters()
        if not p.requires_grad and p.numel() < config.param_persistence_threshold
    }
    for param in ignored:  # FSDP casts only what it gathers; these meet gathered inputs
        param.data = param.data.to(param_dtype)
    kwargs = {
        "mesh": _mesh(config, world, device.type),
        "reshard_after_forward": config.reshard_after_forward,
        "mp_policy": MixedPrecisionPolicy(
            param_dtype=param_dtype, reduce_dtype=getattr(torch, config.reduce_dtype)
        ),
        "offload_policy": CPUOffloadPolicy() if config.cpu_offload else OffloadPolicy(),
        "ignored_params": ignored,
    }
    n = config.wrap_every_n_blocks
    units = [
        fully_shard(layers[i] if n == 1 else layers[i : i + n], **kwargs)
        for i in range(0, len(layers), n)
    ]
    units = [unit[0] if isinstance(unit, list) else unit for unit in units]
    for i, unit in enumerate(units):
        unit.set_modules_to_forward_prefetch(units[i + 1 : i + 1 + config.prefetch_units])
        unit.set_modules_to_backward_prefetch(
            units[max(0, i - config.backward_prefetch_units) : i][::-1]
        )
    # The causal LM, not a PeftModel around it, is the root: ``generate`` calls its
    # forward directly, and FSDP gathers the embeddings and head in that forward's hook.
    fully_shard(base, **kwargs)
    # FSDP fixes each unit's gradient dtypes from the parameters trainable at its first
    # forward; initialise now, before a reference forward (another adapter active) could.
    torch_internals.fsdp_lazy_init(base)
    return [*units, base]


def set_gradient_sync(model: Any, enabled: bool) -> None:
    """Whether the next backward of a sharded ``model`` reduce-scatters its gradients.

    Off, FSDP2 accumulates the unsharded gradients locally (``set_requires_gradient_sync``);
    the next backward with sync on reduces the accumulated sum.
    """
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    base.set_requires_gradient_sync(enabled)


def offload_optimizer_state(optimizer: torch.optim.Optimizer) -> list[Any]:
    """Keep ``optimizer``'s state tensors in host memory between steps.

    A step pre-hook moves each parameter's state to that parameter's device, a post-hook
    back to the CPU (on a CPU run both moves are no-ops: the state already lives there).

    Returns:
        The two hook handles.
    """

    def move(state: dict[str, Any], device: torch.device) -> None:
        for key, value in state.items():
            if torch.is_tensor(value) and key != "step" and value.device != device:
                # Host-to-device may overlap; device-to-host must land before it is read.
                state[key] = value.to(device, non_blocking=device.type != "cpu")

    def to_params(opt: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        for param, state in opt.state.items():
            move(state, param.device)

    def to_host(opt: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        for state in opt.state.values():
            move(state, torch.device("cpu"))

    return [optimizer.register_step_pre_hook(to_params), optimizer.register_step_post_hook(to_host)]


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

"""Load a causal LM and its tokenizer, wrap it with LoRA, and give access to the reference policy.

The reference policy is either the base model with the adapter disabled, or
a second, frozen LoRA adapter (``"reference"``) holding a copy of the
trainable adapter's initial weights (``use_separate_reference_adapter``).
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import gc
import inspect
import random
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch

from agilerl.llm.fused_logps import head_logps
from agilerl.llm.row_chunks import row_slices

ACTOR_ADAPTER = "default"
REFERENCE_ADAPTER = "reference"


def seed_everything(seed: int) -> None:
    """Seed Python, NumPy and torch."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


@contextlib.contextmanager
def unreadable_model_files(name_or_path: str | Path, what: str) -> Iterator[None]:
    """Turn any error transformers raises while reading a model folder into a
    :class:`ConfigError` naming the folder (malformed config or tokenizer files, truncated
    weights: transformers raises a dozen exception types for them)."""
    from agilerl.arena.models.errors import input_errors

    with input_errors(
        f"network.pretrained_model_name_or_path: the {what} in {name_or_path} cannot be loaded",
        "save it again with save_pretrained, or point at another model folder",
    ):
        yield


def load_tokenizer(name_or_path: str | Path, *, padding_side: str = "right", **kwargs: Any) -> Any:
    """A tokenizer with ``padding_side`` set at load time and a pad token.

    Args:
        name_or_path: Hub id or local folder.
        padding_side: ``"right"`` for teacher-forced training, ``"left"`` for generation.
        **kwargs: Passed to ``AutoTokenizer.from_pretrained``.
    """
    from transformers import AutoTokenizer

    with unreadable_model_files(name_or_path, "tokenizer"):
        tokenizer = AutoTokenizer.from_pretrained(
            str(name_or_path), padding_side=padding_side, **kwargs
        )
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def bnb_config(quantization: str | dict[str, Any]) -> Any:
    """The ``transformers.BitsAndBytesConfig`` of a validated ``quantization`` value.

    The 4-bit compute dtype defaults to float32, which every CPU runs.
    """
    import logging

    from transformers import BitsAndBytesConfig

    from agilerl.arena.models.algorithms.base import QUANTIZATION_PRESETS

    # On CPUs with AVX512-BF16, importing bitsandbytes tries a Hub kernel (remote code,
    # which the kernels package refuses unless trusted) and warns when it falls back to
    # its own CPU kernel: the fallback is the intended path here, so the line is noise.
    logging.getLogger("bitsandbytes.backends.cpu.ops").setLevel(logging.ERROR)

    settings = dict(
        QUANTIZATION_PRESETS[quantization] if isinstance(quantization, str) else quantization
    )
    settings["bnb_4bit_compute_dtype"] = getattr(
        torch, settings.get("bnb_4bit_compute_dtype", "float32")
    )
    return BitsAndBytesConfig(**settings)


def load_causal_lm(
    name_or_path: str | Path,
    *,
    dtype: torch.dtype | str = torch.float32,
    attn_implementation: str | None = None,
    device: str | torch.device = "cpu",
    quantization: str | dict[str, Any] | None = None,
) -> Any:
    """``AutoModelForCausalLM.from_pretrained`` with transformers 5 argument names.

    ``quantization`` loads the linear layers' weights 4- or 8-bit with bitsandbytes
    (frozen; train a LoRA adapter on them) and places the model on ``device`` as it loads.
    """
    from transformers import AutoModelForCausalLM

    kwargs: dict[str, Any] = {"dtype": dtype}
    if attn_implementation is not None:
        kwargs["attn_implementation"] = attn_implementation
    if quantization is not None:
        kwargs.update(quantization_config=bnb_config(quantization), device_map=str(device))
    from transformers.utils import logging as hf_logging

    quiet = not hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()  # a per-tensor bar on every load: not run progress
    try:
        with unreadable_model_files(name_or_path, "model"):
            model = AutoModelForCausalLM.from_pretrained(str(name_or_path), **kwargs)
    finally:
        if not quiet:
            hf_logging.enable_progress_bar()
    if quantization is not None:
        from peft import prepare_model_for_kbit_training

        for module in model.modules():
            # bitsandbytes repacks 4-bit weights for its AVX512-BF16 inference kernel at
            # the first no-grad eval forward and never unpacks them for training, whose
            # backward then runs through that kernel without autograd (wrong gradients for
            # every earlier adapter); evaluation and training take the autograd path.
            if hasattr(module, "support_avx512bf16_for_cpu"):
                module.support_avx512bf16_for_cpu = False
        release_checkpoint_map(model)
        # freezes the quantized base and keeps the other weights in float32; gradient
        # checkpointing stays the algorithm's own choice
        return prepare_model_for_kbit_training(model, use_gradient_checkpointing=False)
    return model.to(device)


def release_checkpoint_map(model: Any) -> None:
    """Give a quantized model's full-precision tensors their own memory.

    Quantizing reads every weight of the checkpoint through its memory map, and
    the tensors left unquantized (embeddings, norms) still point into that map,
    which keeps the whole file resident: on SmolLM2-135M, 520 MiB of page cache
    counted in the process's memory for 113 MiB of tensors. Copying them lets
    the map go, and the heap the load freed is handed back to the system.
    """
    with torch.no_grad():
        for module in model.modules():
            for _, param in module.named_parameters(recurse=False):
                if not type(param).__module__.startswith("bitsandbytes"):
                    param.data = param.data.clone()
            for name, buffer in module.named_buffers(recurse=False):
                if buffer is not None:
                    module._buffers[name] = buffer.clone()
    gc.collect()
    trim_heap()


def trim_heap() -> None:
    """Return the heap's free pages to the system (glibc ``malloc_trim``; elsewhere nothing)."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.malloc_trim(0)
    except (OSError, AttributeError):
        pass


def add_lora(
    model: Any, lora_config: Any, *, separate_reference: bool, adapter_name: str = ACTOR_ADAPTER
) -> Any:
    """Wrap ``model`` in a ``peft.PeftModel`` with a trainable adapter.

    Args:
        model: A transformers causal LM (its weights are frozen by peft).
        lora_config: A ``peft.LoraConfig``.
        separate_reference: Also add a frozen ``"reference"`` adapter equal to
            the trainable one's initial weights.
        adapter_name: Name of the trainable adapter.

    Returns:
        The ``PeftModel`` with the trainable adapter active.
    """
    from peft import get_peft_model

    with warnings.catch_warnings():
        # peft reads transformers' deprecated alias; the user can do nothing about it
        warnings.filterwarnings(
            "ignore", message="`is_gradient_checkpointing` is deprecated", category=FutureWarning
        )
        peft_model = get_peft_model(model, lora_config, adapter_name=adapter_name)
    if separate_reference:
        peft_model.add_adapter(REFERENCE_ADAPTER, lora_config)
        copy_adapter(peft_model, adapter_name, REFERENCE_ADAPTER)
        peft_model.set_adapter(adapter_name)
        for name, param in peft_model.named_parameters():
            if f".{REFERENCE_ADAPTER}." in name:
                param.requires_grad_(False)
    return peft_model


def copy_adapter(peft_model: Any, source: str, target: str) -> None:
    """Copy the LoRA weights of adapter ``source`` into adapter ``target``."""
    params = dict(peft_model.named_parameters())
    with torch.no_grad():
        for name, param in params.items():
            if f".{source}." in name:
                params[name.replace(f".{source}.", f".{target}.")].copy_(param)


def adapter_state(peft_model: Any, adapter: str = ACTOR_ADAPTER) -> dict[str, torch.Tensor]:
    """The named LoRA tensors of ``adapter`` (clones)."""
    return {
        name: param.detach().clone()
        for name, param in peft_model.named_parameters()
        if f".{adapter}." in name
    }


def load_adapter_state(
    peft_model: Any, state: dict[str, torch.Tensor], adapter: str = ACTOR_ADAPTER
) -> None:
    """Load tensors from :func:`adapter_state` back into ``adapter``."""
    params = dict(peft_model.named_parameters())
    missing = [name for name in params if f".{adapter}." in name and name not in state]
    if missing:
        raise ValueError(f"adapter state lacks {len(missing)} tensors, e.g. {missing[0]}")
    with torch.no_grad():
        for name, tensor in state.items():
            params[name].copy_(tensor)


@contextlib.contextmanager
def reference_policy(model: Any) -> Iterator[Any]:
    """Context in which ``model`` computes the reference policy's outputs.

    With a ``"reference"`` adapter, that adapter is active; otherwise (a
    ``PeftModel``) the adapters are disabled, which is the base model. A model
    without adapters is its own reference only if nothing trains it, so that
    case raises.
    """
    from peft import PeftModel

    if not isinstance(model, PeftModel):
        raise ValueError("a reference policy needs a LoRA adapter (set network.lora_config)")
    if REFERENCE_ADAPTER in model.peft_config:
        active = model.active_adapter
        model.set_adapter(REFERENCE_ADAPTER)
        try:
            yield model
        finally:
            model.set_adapter(active)
            # set_adapter marks the active adapter trainable; keep the reference frozen.
            for name, param in model.named_parameters():
                if f".{REFERENCE_ADAPTER}." in name:
                    param.requires_grad_(False)
    else:
        with model.disable_adapter():
            yield model


def offloaded_activations(enabled: bool) -> contextlib.AbstractContextManager:
    """A context in which autograd keeps saved activations in pinned host memory.

    ``algorithm.activation_offload``: the tensors a forward saves for backward
    move to the CPU as they are saved and return to their device in backward
    (``torch.autograd.graph.save_on_cpu``). Off, or for CPU tensors, nothing moves.
    """
    if not enabled:
        return contextlib.nullcontext()
    return torch.autograd.graph.save_on_cpu(pin_memory=torch.cuda.is_available())


def enable_gradient_checkpointing(model: Any) -> None:
    """Recompute activations in backward (inputs need grads when the embeddings are frozen)."""
    kwargs = {"use_reentrant": False}
    if hasattr(model, "activation_checkpointing_enable"):  # transformers >= 5 spelling
        model.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs)
    else:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)
    if hasattr(model, "enable_input_require_grads"):
        model.enable_input_require_grads()
    model.config.use_cache = False


def select_checkpointed_blocks(
    layers: list[Any],
    layer_types: list[str] | None,
    *,
    skip_types: list[str],
    every_n: int,
    field: str = "algorithm.fsdp",
) -> list[int]:
    """Keep activation checkpointing on only some decoder blocks; returns their indices.

    A block's kinds are its class name (e.g. ``LlamaDecoderLayer``) and, where the model
    config lists ``layer_types``, its entry there (e.g. ``sliding_attention``). Blocks of a
    kind in ``skip_types`` run without checkpointing; of the rest, the first and then one in
    every ``every_n`` keep it (blocks 0, n, 2n, ... of the rest). Needs checkpointing already
    on (:func:`enable_gradient_checkpointing`).

    Args:
        layers: The decoder blocks (transformers ``GradientCheckpointingLayer``s).
        layer_types: ``config.layer_types`` (one kind per block) or ``None``.
        skip_types: Kinds left out of checkpointing.
        every_n: Checkpoint one in every ``every_n`` blocks not skipped.
        field: Manifest section named in errors.

    Raises:
        ConfigError: When checkpointing is off, or a kind in ``skip_types`` matches no block.
    """
    from agilerl.arena.models.errors import ConfigError, Problem

    if not any(getattr(layer, "gradient_checkpointing", False) for layer in layers):
        raise ConfigError(
            [
                Problem(
                    f"{field}.checkpoint_skip_layer_types"
                    if skip_types
                    else f"{field}.checkpoint_every_n_blocks",
                    "selects which blocks activation checkpointing recomputes, and "
                    "algorithm.gradient_checkpointing is false: set it to true, or remove "
                    "the setting",
                )
            ]
        )
    kinds = [
        {type(layer).__name__} | ({layer_types[i]} if layer_types else set())
        for i, layer in enumerate(layers)
    ]
    known = set().union(*kinds)
    unknown = [kind for kind in skip_types if kind not in known]
    if unknown:
        raise ConfigError(
            [
                Problem(
                    f"{field}.checkpoint_skip_layer_types",
                    f"{unknown} match no block of this model; its block kinds are {sorted(known)}",
                )
            ]
        )
    kept = [i for i, kind in enumerate(kinds) if not kind & set(skip_types)]
    chosen = kept[::every_n]
    for i, layer in enumerate(layers):
        layer.gradient_checkpointing = i in chosen
    return chosen


def left_pad(sequences: list[list[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(input_ids, attention_mask)`` of ``sequences`` padded on the left."""
    width = max(map(len, sequences))
    ids = torch.full((len(sequences), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(sequences), width), dtype=torch.long)
    for i, seq in enumerate(sequences):
        if seq:
            ids[i, width - len(seq) :] = torch.tensor(seq, dtype=torch.long)
            mask[i, width - len(seq) :] = 1
    return ids, mask


def position_ids_from_mask(attention_mask: torch.Tensor) -> torch.Tensor:
    """Position ids that start at 0 on the first real token (correct under left padding)."""
    positions = attention_mask.long().cumsum(-1) - 1
    return positions.clamp(min=0)


def sequence_logprobs(
    model: Any,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    loss_mask: torch.Tensor,
    *,
    position_ids: bool = True,
    fp32: bool = True,
    fused: bool = False,
    chunk_rows: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token log-probabilities of ``input_ids[:, 1:]`` under ``model``.

    Args:
        model: Causal LM.
        input_ids: ``(B, T)`` token ids.
        attention_mask: ``(B, T)`` 1 for real tokens.
        loss_mask: ``(B, T)`` 1 for tokens whose log-prob is wanted (the response).
        position_ids: Pass positions computed from the mask.
        fp32: Compute the log-softmax in float32.
        fused: Compute them from the hidden states a chunk at a time
            (:func:`~agilerl.llm.fused_logps.head_logps`) instead of from full logits.
        chunk_rows: Run the model on this many rows at a time
            (:mod:`~agilerl.llm.row_chunks`); ``None`` runs them all at once.

    Returns:
        ``(token_logps, mask)``, both ``(B, K)``: the last ``K <= T-1`` target
        positions, from the first one any row's ``loss_mask`` selects (the
        language-model head runs only there); ``token_logps`` is 0 where
        ``mask`` is 0.
    """
    targets_mask = loss_mask[:, 1:]
    first = first_target(targets_mask)
    positions = position_ids_from_mask(attention_mask) if position_ids else None
    logps = target_logps_by_rows(
        model, input_ids, attention_mask, positions, first, fp32=fp32, fused=fused,
        chunk_rows=chunk_rows,
    )  # fmt: skip
    mask = targets_mask[:, first:].to(logps.dtype)
    return logps * mask, mask


def first_target(targets_mask: torch.Tensor) -> int:
    """The first target column any row's loss mask selects (0 when none does)."""
    wanted = targets_mask.any(0).nonzero()
    return int(wanted[0]) if len(wanted) else 0


def target_logps_by_rows(
    model: Any,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor | None,
    position_ids: torch.Tensor | None,
    first: int,
    *,
    fp32: bool,
    fused: bool,
    chunk_rows: int | None,
) -> torch.Tensor:
    """``(B, T - 1 - first)`` log-probs of ``input_ids[:, 1 + first:]``, the model run on
    ``chunk_rows`` rows at a time (all at once when ``None``)."""

    def rows_of(tensor: torch.Tensor | None, rows: slice) -> torch.Tensor | None:
        return None if tensor is None else tensor[rows]

    pieces = []
    for rows in row_slices(input_ids.shape[0], chunk_rows):
        mask, positions = rows_of(attention_mask, rows), rows_of(position_ids, rows)
        pieces.append(
            _target_logps(model, input_ids[rows], mask, positions, first, fp32=fp32, fused=fused)
        )
    return torch.cat(pieces)


def _target_logps(
    model: Any,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor | None,
    position_ids: torch.Tensor | None,
    first: int,
    *,
    fp32: bool,
    fused: bool,
) -> torch.Tensor:
    """``(B, T - 1 - first)`` log-probs of ``input_ids[:, 1 + first:]`` from one forward pass."""
    kwargs: dict[str, Any] = {"input_ids": input_ids, "attention_mask": attention_mask}
    if position_ids is not None:
        kwargs["position_ids"] = position_ids
    targets = input_ids[:, 1 + first :]
    if fused:
        if _takes_logits_to_keep(model):
            kwargs["logits_to_keep"] = 1  # the log-probs come from the hidden states
        out = model(**kwargs, use_cache=False, output_hidden_states=True)
        return head_logps(model, out.hidden_states[-1][:, first:-1], targets, fp32=fp32)
    if _takes_logits_to_keep(model):
        # Logits of the kept positions plus the last one (which predicts nothing).
        logits = model(**kwargs, use_cache=False, logits_to_keep=targets.shape[1] + 1).logits
        logits = logits[:, :-1]
    else:
        logits = model(**kwargs, use_cache=False).logits[:, first:-1]
    if fp32:
        logits = logits.float()
    # cross_entropy avoids materialising a second (B, T, V) log-softmax tensor.
    return -torch.nn.functional.cross_entropy(
        logits.reshape(-1, logits.shape[-1]), targets.reshape(-1), reduction="none"
    ).view(targets.shape)


def _takes_logits_to_keep(model: Any) -> bool:
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    return "logits_to_keep" in inspect.signature(base.forward).parameters

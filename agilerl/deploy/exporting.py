"""Write a trained agent's deterministic policy as ONNX or TorchScript (``agilerl export RUN``).

    agilerl export runs/2026-11-29/12-00-00_ppo_cartpole --format onnx

The module written is :mod:`agilerl.deploy.policy_graph`'s: observations in
(batch first, any batch size), env actions out, with the networks'
preprocessing and the mapping onto the action space inside. Next to it goes
``<file>.json``: the inputs' names, dtypes and shapes, the output's, the
spaces and the checkpoint it came from.

Every export is checked before it is reported: the written file is loaded
back (onnxruntime for ONNX, when installed) and run on observations sampled
from the observation space; its actions must equal the torch module's.

ONNX goes through torch's ``torch.export``-based exporter, which needs the
``export`` extra (``onnx``, ``onnxscript``; ``onnxruntime`` for the check).
TorchScript needs nothing beyond torch.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from agilerl.arena.models.errors import ConfigError, RunFailure
from agilerl.deploy.policy_graph import PolicyGraph, input_names, policy_graph
from agilerl.deploy.trained_agent import TrainedAgent, load
from agilerl.extras import installed, require
from agilerl.networks.spaces import space_to_dict

__all__ = ["FORMATS", "ExportResult", "default_out", "export_policy"]

FORMATS = {"onnx": ".onnx", "torchscript": ".pt"}
"""Export format -> file suffix."""
CHECK_SIZE = 64
"""Observations the written file is checked on."""
_TOLERANCE = 1e-4
"""Largest difference allowed between a Box action of the file and of torch."""


@dataclass
class ExportResult:
    """What :func:`export_policy` wrote and how it was checked."""

    path: Path
    format: str
    checkpoint: Path
    algorithm: str
    inputs: list[dict[str, Any]]
    output: dict[str, Any]
    checked: int = 0
    """Observations the file was run on (0: not checked, see ``note``)."""
    max_difference: float = 0.0
    """Largest difference from the torch module's actions on those observations."""
    note: str | None = None
    metadata: Path | None = field(default=None)
    """The ``<file>.json`` description."""


def default_out(agent: TrainedAgent, format: str) -> Path:
    """``<run dir>/export/policy<suffix>`` (next to the agent file when it has no run)."""
    base = agent.run_dir or agent.checkpoint.parent
    return base / "export" / f"policy{FORMATS[format]}"


def export_policy(
    path: str | Path,
    format: str = "onnx",
    out: str | Path | None = None,
    *,
    agent: int | None = None,
) -> ExportResult:
    """Export the deterministic policy of a run's best agent.

    Args:
        path: A run directory, checkpoint directory or ``agent_<i>.pt`` file.
        format: ``onnx`` or ``torchscript``.
        out: The file to write (default: :func:`default_out`).
        agent: The population slot (default: the best last fitness).

    Returns:
        The file written, its inputs and output, and the check's result.

    Raises:
        ConfigError: For a bad path or checkpoint, an unknown format, a policy
            that cannot be exported, a missing ``export`` extra (ONNX) or an
            output path that is a directory.
        RunFailure: If the written file's actions differ from the torch policy's.
    """
    if format not in FORMATS:
        raise ConfigError(f"--format {format!r}: choose one of {', '.join(FORMATS)}")
    if format == "onnx":
        require("onnx", "agilerl export --format onnx", "--format")
        require("onnxscript", "agilerl export --format onnx", "--format")
    loaded = load(path, agent=agent)
    if not isinstance(loaded, TrainedAgent):
        raise ConfigError(
            f"{loaded.checkpoint}: a multi-agent {loaded.name} policy; export writes "
            "single-agent policies (load it with agilerl.load(RUN) to act from Python)"
        )
    graph = policy_graph(loaded.algorithm)
    target = Path(out) if out is not None else default_out(loaded, format)
    if target.is_dir():
        raise ConfigError(f"--out {target}: a directory; name the file to write")
    target.parent.mkdir(parents=True, exist_ok=True)
    example = graph.example_inputs(batch=3)
    with torch.no_grad():
        action = graph(*example)
    names = input_names(graph.observation_space)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    try:
        with _quiet():
            if format == "onnx":
                _write_onnx(graph, example, names, tmp)
            else:
                _write_torchscript(graph, example, tmp)
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)
    result = ExportResult(
        path=target,
        format=format,
        checkpoint=loaded.checkpoint,
        algorithm=loaded.name,
        inputs=[_describe(name, x) for name, x in zip(names, example, strict=True)],
        output=_describe("action", action),
    )
    _check(graph, result)
    result.metadata = _write_metadata(result, graph)
    return result


def _write_onnx(
    graph: PolicyGraph, example: tuple[torch.Tensor, ...], names: list[str], path: Path
) -> None:
    batch = torch.export.Dim("batch")
    torch.onnx.export(
        graph,
        example,
        str(path),
        dynamo=True,
        input_names=names,
        output_names=["action"],
        dynamic_shapes={"obs": tuple({0: batch} for _ in example)},
        external_data=False,
        verbose=False,
    )


def _write_torchscript(graph: PolicyGraph, example: tuple[torch.Tensor, ...], path: Path) -> None:
    traced = torch.jit.trace(graph, example, check_trace=False)
    torch.jit.save(traced, str(path))


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """Silence the exporters' progress lines and deprecation notes (torch's, not ours)."""
    logger = logging.getLogger("torch.onnx")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings(), torch.no_grad():
            warnings.simplefilter("ignore", DeprecationWarning)
            warnings.simplefilter("ignore", FutureWarning)
            warnings.simplefilter("ignore", torch.jit.TracerWarning)
            warnings.filterwarnings("ignore", ".*The axis name: batch will not be used")
            yield
    finally:
        logger.setLevel(level)


def _describe(name: str, tensor: torch.Tensor) -> dict[str, Any]:
    return {
        "name": name,
        "dtype": str(tensor.dtype).removeprefix("torch."),
        "shape": ["batch", *tensor.shape[1:]],
    }


def _run_file(result: ExportResult, inputs: tuple[torch.Tensor, ...]) -> np.ndarray | None:
    """The written file's actions for ``inputs`` (``None`` when it cannot be run here)."""
    if result.format == "torchscript":
        with _quiet():
            module = torch.jit.load(str(result.path))
            return module(*inputs).numpy()
    if not installed("onnxruntime"):
        result.note = "not checked: onnxruntime is not installed (the export extra)"
        return None
    import onnxruntime

    session = onnxruntime.InferenceSession(str(result.path), providers=["CPUExecutionProvider"])
    feed = {spec["name"]: x.numpy() for spec, x in zip(result.inputs, inputs, strict=True)}
    return session.run(None, feed)[0]


def _check(graph: PolicyGraph, result: ExportResult) -> None:
    """Run the written file on sampled observations; its actions must equal torch's.

    Raises:
        RunFailure: Naming how many actions differ.
    """
    inputs = graph.example_inputs(batch=CHECK_SIZE, seed=1)
    theirs = _run_file(result, inputs)
    if theirs is None:
        return
    with torch.no_grad():
        ours = graph(*inputs).numpy()
    if theirs.shape != ours.shape or theirs.dtype != ours.dtype:
        raise RunFailure(
            f"{result.path}: the exported policy returns {theirs.dtype}{list(theirs.shape)}, "
            f"torch {ours.dtype}{list(ours.shape)}; this is a bug of agilerl export"
        )
    difference = np.abs(theirs.astype(np.float64) - ours.astype(np.float64))
    wrong = int(np.count_nonzero(difference.reshape(len(ours), -1).max(1) > _TOLERANCE))
    result.checked = len(ours)
    result.max_difference = float(difference.max(initial=0.0))
    if wrong:
        raise RunFailure(
            f"{result.path}: the exported policy's actions differ from torch's on {wrong} of "
            f"{len(ours)} observations (largest difference {result.max_difference:.3g}); "
            "this is a bug of agilerl export"
        )


def _write_metadata(result: ExportResult, graph: PolicyGraph) -> Path:
    """``<file>.json``: how to feed the file and what it returns."""
    from agilerl import __version__

    data = {
        "format": result.format,
        "algorithm": result.algorithm,
        "checkpoint": str(result.checkpoint),
        "inputs": result.inputs,
        "output": result.output,
        "observation_space": space_to_dict(graph.observation_space),
        "action_space": space_to_dict(graph.action_space),
        "agilerl_version": __version__,
    }
    path = result.path.with_name(result.path.name + ".json")
    path.write_text(json.dumps(data, indent=2) + "\n")
    return path

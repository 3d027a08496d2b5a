"""Run an SFT or DPO manifest end to end: tokenizer, dataset env, population, loop.

This is the direct entry point for ``experiment=sft_chat`` / ``dpo_preference``
manifests; the trainer can call the same pieces.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from agilerl.arena.models.errors import ConfigError, Problem


def build_llm_dataset_run(
    manifest: Any, *, base_dir: str | Path | None = None, device: str = "cpu"
) -> tuple[list[Any], Any]:
    """The population and dataset env a validated LLM dataset manifest describes.

    Args:
        manifest: A validated ``TrainingManifest`` with an SFT or DPO algorithm.
        base_dir: Folder relative dataset paths are resolved against.
        device: Torch device.

    Raises:
        ConfigError: If the manifest is not a dataset LLM run or its model path is missing.
    """
    from agilerl.builders.llm import LLMBuilder
    from agilerl.llm.datasets import load_dataset_env
    from agilerl.llm.evolution import population_on_one_base
    from agilerl.llm.model import load_tokenizer

    spec = manifest.algorithm
    if getattr(type(spec), "env_type", None) != "dataset":
        raise ConfigError([Problem("algorithm.name", f"{spec.name} is not an SFT/DPO algorithm")])
    path = Path(spec.pretrained_model_name_or_path or "")
    if not path.is_absolute() and base_dir is not None and (Path(base_dir) / path).exists():
        path = Path(base_dir) / path
        spec = spec.model_copy(update={"pretrained_model_name_or_path": str(path)})
    if not path.exists() and (path.is_absolute() or str(path).startswith(".")):
        raise ConfigError(
            [
                Problem(
                    "network.pretrained_model_name_or_path",
                    f"{path} does not exist; build the tiny model with "
                    "python scripts/make_tiny_llm.py or point at a local model folder",
                )
            ]
        )
    tokenizer = load_tokenizer(path, padding_side="right")
    env = load_dataset_env(
        manifest.environment,
        tokenizer,
        max_model_len=spec.max_model_len,
        seed=spec.seed,
        base_dir=base_dir,
    )
    population = population_on_one_base(
        spec, tokenizer, manifest.training.pop_size, device=device, builder=LLMBuilder
    )
    return population, env


def run_llm_dataset(
    manifest: Any,
    run_dir: str | Path,
    *,
    resume: bool = False,
    base_dir: str | Path | None = None,
    device: str = "cpu",
) -> tuple[list[Any], list[float]]:
    """Train an SFT/DPO manifest; metrics and checkpoints go to ``run_dir``.

    ``training.max_steps`` counts batches; ``training.num_epochs`` passes over
    the training split (whichever ends first).
    """
    from agilerl.training.llm.train_llm_dataset import train_llm_dataset

    population, env = build_llm_dataset_run(manifest, base_dir=base_dir, device=device)
    training = manifest.training
    return train_llm_dataset(
        population,
        env,
        max_steps=training.max_steps,
        num_epochs=training.num_epochs,
        evaluation_interval=training.evaluation_interval or 10,
        checkpoint_steps=training.checkpoint_steps,
        checkpoint_export=training.effective_checkpoint_export(),
        hpo=training.hpo,
        run_dir=run_dir,
        resume=resume,
    )

"""Shared fixtures: the repository's conf/ directory and a Hydra composer over it."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
CONF_DIR = REPO / "conf"


@pytest.fixture(scope="session")
def conf_dir() -> Path:
    return CONF_DIR


@pytest.fixture(scope="session")
def compose() -> Iterator[Callable[..., object]]:
    """Compose conf/ with overrides, as train.py would (after override normalisation)."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    from agilerl.launch.overrides import normalise_overrides

    with initialize_config_dir(config_dir=str(CONF_DIR), version_base=None):

        def _compose(*overrides: str) -> object:
            args = normalise_overrides(list(overrides), CONF_DIR)
            return hydra_compose(config_name="config", overrides=args)

        yield _compose

"""The session's tiny trained runs (see :mod:`tests.deploy.deploy_helpers`)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tests.deploy.deploy_helpers import train_tiny


@pytest.fixture(scope="session")
def trained_run(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Path]:
    """``trained_run(name)``: the run directory of ``RUNS[name]``, trained once per session."""
    import torch

    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("deploy_runs")
    runs: dict[str, Path] = {}

    def get(name: str) -> Path:
        if name not in runs:
            runs[name] = train_tiny(root / name.replace(" ", "_"), name)
        return runs[name]

    return get

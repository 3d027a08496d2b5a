"""Shared fixtures: the repository's conf/ directory and a Hydra composer over it."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

if os.environ.get("PYTEST_XDIST_WORKER"):
    # one torch thread per worker: the workers already use every core
    os.environ.setdefault("OMP_NUM_THREADS", "1")

REPO = Path(__file__).resolve().parents[1]
CONF_DIR = REPO / "conf"

from tests.optional_extras import ignored_modules, missing_extras, needed_extra  # noqa: E402

MISSING_EXTRAS = missing_extras()
collect_ignore_glob = ignored_modules(MISSING_EXTRAS)


def pytest_report_header(config: pytest.Config) -> str | None:
    if not MISSING_EXTRAS:
        return None
    extras = ", ".join(sorted(MISSING_EXTRAS))
    return f"extras not installed: {extras}; their tests are skipped (pip install -e '.[{extras}]')"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Skip parametrized cases of a paradigm whose extra is not installed."""
    for item in items:
        case = item.nodeid.partition("[")[2]
        extra = needed_extra(case, MISSING_EXTRAS) if case else None
        if extra is not None:
            item.add_marker(
                pytest.mark.skip(reason=f"needs the {extra} extra: pip install -e '.[{extra}]'")
            )


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


@pytest.fixture(scope="session")
def train_composed(compose: Callable[..., object]) -> Callable[..., object]:
    """Train a manifest composed from conf/ overrides, as train.py would: ``(run, *overrides,
    **LocalTrainer options)`` -> ``(population, fitnesses)`` (quiet, no TensorBoard)."""
    from agilerl.launch.compose import build_manifest
    from agilerl.trainer import LocalTrainer

    def _train(run: Path, *overrides: str, **options: object) -> object:
        manifest, _ = build_manifest(compose(*overrides))
        return LocalTrainer.from_manifest(
            manifest, run_dir=run, verbose=False, logger={"tensorboard": False}, **options
        ).train()

    return _train


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int | None:
    """No worker processes for a run that selects the SLURM tests.

    They share one single-node cluster, and their jobs' wall-clock limits assume
    they are submitted one test at a time.
    """
    markexpr = config.getoption("markexpr") or ""
    if "slurm" in markexpr.replace("not slurm", ""):
        return 0
    return None

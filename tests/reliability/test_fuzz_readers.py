"""Fuzzing every reader of user files: a malformed input is refused cleanly or read right.

For each reader (manifest YAML and JSON, JSONL, CSV tables, Parquet, ``.npz`` and HDF5
MDP files, checkpoint files and their ``latest`` pointer, model folders) hypothesis
generates broken inputs from a valid one (truncation, flipped and inserted bytes, control
characters, binary noise, empty files, huge or deeply nested values, NaN, wrong types and
shapes). Every example must either be read, or raise :class:`ConfigError` (what the CLI
turns into exit 2) whose message names the file; any other exception fails the test.
Each example has a time bound (hypothesis ``deadline``) and each test a memory bound
(the growth of the process's peak resident set).

The default suite draws :data:`QUICK` examples per reader; the slow suite runs the same
tests again with :data:`THOROUGH`. Both draw the same examples every run; set
``AGILERL_FUZZ_EXPLORE=1`` to explore new ones.
"""

from __future__ import annotations

import io
import json
import os
import resource
import shutil
import string
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agilerl.arena.models.errors import ConfigError
from tests.reliability.helpers import TINY_PPO, TINY_TRAINING

QUICK = 12
THOROUGH = 150
DEADLINE = timedelta(seconds=10)
MEMORY_GROWTH_MB = 1024
"""Most the peak resident set may grow during one reader's fuzzing."""


@pytest.fixture(
    params=[QUICK, pytest.param(THOROUGH, marks=pytest.mark.slow)], ids=["quick", "thorough"]
)
def examples(request: pytest.FixtureRequest) -> Iterator[int]:
    """How many examples each reader gets, with the test's memory bound checked after."""
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    yield request.param
    grown_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    assert grown_mb < MEMORY_GROWTH_MB, f"peak memory grew by {grown_mb:.0f} MB"


EXPLORE = os.environ.get("AGILERL_FUZZ_EXPLORE") == "1"
"""``AGILERL_FUZZ_EXPLORE=1`` draws new examples every run (finding new defects); CI draws
the same ones every time (``derandomize``), so a run's result does not depend on chance."""


def fuzz(strategy: st.SearchStrategy, check: Callable[[Any], None], examples: int) -> None:
    """Run ``check`` on ``examples`` draws of ``strategy`` (no example database: CI is fresh)."""

    @settings(
        max_examples=examples,
        deadline=DEADLINE,
        database=None,
        derandomize=not EXPLORE,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(strategy)
    def run(data: Any) -> None:
        check(data)

    run()


def read_or_refuse(read: Callable[[], Any], path: Path) -> Any:
    """``read()``'s result, or ``None`` when it raised a :class:`ConfigError` naming ``path``."""
    try:
        return read()
    except ConfigError as error:
        message = str(error)
        assert path.name in message or str(path) in message, message
        assert "Traceback" not in message
        return None


# --- generic byte-level damage -----------------------------------------------------------
CONTROL = "".join(chr(c) for c in range(32) if chr(c) not in "\n\t") + "\x7f"


@st.composite
def damaged(draw: st.DrawFn, valid: bytes) -> bytes:
    """``valid`` truncated, with bytes flipped, inserted or repeated, or replaced outright."""
    kind = draw(st.sampled_from(["truncate", "flip", "insert", "repeat", "noise", "empty"]))
    if kind == "empty":
        return b""
    if kind == "noise":
        return draw(st.binary(min_size=1, max_size=4096))
    at = draw(st.integers(0, max(len(valid) - 1, 0)))
    if kind == "truncate":
        return valid[:at]
    if kind == "flip":
        data = bytearray(valid)
        for _ in range(draw(st.integers(1, 8))):
            i = draw(st.integers(0, len(data) - 1))
            data[i] = draw(st.integers(0, 255))
        return bytes(data)
    if kind == "insert":
        extra = draw(
            st.one_of(
                st.binary(min_size=1, max_size=64),
                st.text(CONTROL, min_size=1, max_size=8).map(str.encode),
            )
        )
        return valid[:at] + extra + valid[at:]
    return valid[:at] + valid[at : at + 64] * draw(st.integers(2, 2000)) + valid[at:]


def _write(path: Path, data: bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


# --- manifests -----------------------------------------------------------------------------
VALID_MANIFEST = {
    "algorithm": dict(TINY_PPO),
    "environment": {"name": "CartPole-v1", "num_envs": 2},
    "training": dict(TINY_TRAINING),
}

json_values = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(-(2**70), 2**70),
        st.floats(allow_nan=True, allow_infinity=True),
        st.text(max_size=40),
    ),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=12), children, max_size=4)
    ),
    max_leaves=20,
)


@st.composite
def manifest_texts(draw: st.DrawFn) -> tuple[str, bytes]:
    """(suffix, bytes) of a manifest file: damaged, structurally wrong, deep or huge."""
    suffix = draw(st.sampled_from([".yaml", ".json"]))
    valid = (
        json.dumps(VALID_MANIFEST) if suffix == ".json" else yaml.safe_dump(VALID_MANIFEST)
    ).encode()
    kind = draw(st.sampled_from(["damaged", "value", "deep", "aliases", "huge"]))
    if kind == "damaged":
        return suffix, draw(damaged(valid))
    if kind == "value":  # any JSON value in any section or field
        data = json.loads(json.dumps(VALID_MANIFEST))
        section = draw(
            st.sampled_from(["algorithm", "environment", "training", "network", "extra"])
        )
        if draw(st.booleans()):
            data[section] = draw(json_values)
        else:
            data.setdefault(section, {}) if isinstance(data.get(section), dict) else None
            if isinstance(data.get(section), dict):
                data[section][
                    draw(st.sampled_from(["lr", "num_envs", "max_steps", "name", "x"]))
                ] = draw(json_values)
        return suffix, json.dumps(data, allow_nan=True).encode()
    if kind == "deep":
        depth = draw(st.integers(10, 5000))
        return suffix, (b'{"a": ' * depth + b"1" + b"}" * depth)
    if kind == "aliases":  # billion laughs
        lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x]"]
        lines += [
            f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]"
            for i in range(1, draw(st.integers(2, 9)))
        ]
        return ".yaml", "\n".join(lines).encode()
    return suffix, b"algorithm: {name: PPO, lr: " + b"9" * draw(st.integers(1000, 3_000_000)) + b"}"


def test_manifest_files(tmp_path: Path, examples: int) -> None:
    from agilerl.arena.models import TrainingManifest

    def check(case: tuple[str, bytes]) -> None:
        suffix, data = case
        path = _write(tmp_path / f"manifest{suffix}", data)
        read_or_refuse(lambda: TrainingManifest.from_file(path), path)

    fuzz(manifest_texts(), check, examples)


# --- JSONL (and JSON) prompt datasets --------------------------------------------------------
VALID_ROW = {"question": "What is 2 + 3?", "answer": "5"}


@st.composite
def jsonl_files(draw: st.DrawFn) -> bytes:
    """Lines of valid rows, broken JSON, non-objects, binary, blanks and over-long lines."""
    valid = (json.dumps(VALID_ROW) + "\n").encode()
    kind = draw(st.sampled_from(["damaged", "lines", "long"]))
    if kind == "damaged":
        return draw(damaged(valid * 4))
    if kind == "long":
        return valid + b'{"question": "' + b"x" * draw(st.integers(900_000, 1_300_000)) + b'"}\n'
    line = st.one_of(
        st.just(json.dumps(VALID_ROW)),
        json_values.map(lambda v: json.dumps(v, allow_nan=True)),
        st.text(max_size=60),
        st.text(CONTROL, max_size=5),
    )
    return "\n".join(draw(st.lists(line, max_size=12))).encode("utf-8", "surrogatepass")


def test_jsonl_datasets(tmp_path: Path, examples: int) -> None:
    from agilerl.llm.datasets import read_rows

    def check(data: bytes) -> None:
        path = _write(tmp_path / "rows.jsonl", data)
        rows = read_or_refuse(lambda: read_rows(path), path)
        if rows is not None:
            assert all(isinstance(row, dict) for row in rows)

    fuzz(jsonl_files(), check, examples)


# --- Parquet -----------------------------------------------------------------------------------
def test_parquet_datasets(tmp_path: Path, examples: int) -> None:
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    from agilerl.llm.datasets import read_rows

    buffer = io.BytesIO()
    pq.write_table(pa.table({"question": ["1+1", "2+2"], "answer": ["2", "4"]}), buffer)

    def check(data: bytes) -> None:
        path = _write(tmp_path / "rows.parquet", data)
        read_or_refuse(lambda: read_rows(path), path)

    fuzz(damaged(buffer.getvalue()), check, examples)


# --- CSV tables (bandits) -------------------------------------------------------------------
cells = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.integers(-5, 5).map(str),
    st.sampled_from(["", "nan", "inf", "-inf", "setosa", "1e999", '"', "a,b", "NULL"]),
    st.text(string.printable, max_size=6),
)


@st.composite
def csv_tables(draw: st.DrawFn) -> tuple[bytes, bytes]:
    """(features, targets) CSV files: ragged, missing headers, strings, NaN, empty."""
    rows = draw(st.integers(0, 12))
    width = draw(st.integers(1, 4))
    features = ["f0,f1,f2,f3"[: 3 * width - 1]] if draw(st.booleans()) else []
    for _ in range(rows):
        n = width if draw(st.integers(0, 5)) else draw(st.integers(0, 6))
        features.append(",".join(draw(cells) for _ in range(n)))
    targets = ["target"] if draw(st.booleans()) else []
    targets += [draw(cells) for _ in range(draw(st.integers(0, rows + 2)))]
    f, t = "\n".join(features).encode(), "\n".join(targets).encode()
    if draw(st.integers(0, 4)) == 0:
        f = draw(damaged(f or b"f0\n1\n"))
    return f, t


def test_csv_tables(tmp_path: Path, examples: int) -> None:
    pytest.importorskip("pandas")
    from agilerl.envs.bandits import load_table

    def check(case: tuple[bytes, bytes]) -> None:
        f = _write(tmp_path / "features.csv", case[0])
        t = _write(tmp_path / "targets.csv", case[1])
        try:
            table = load_table(features=f, targets=t)
        except ConfigError as error:
            assert f.name in str(error) or t.name in str(error), str(error)
            return
        features, targets = table
        assert len(features) == len(targets) > 0
        assert np.isfinite(np.asarray(features, dtype=np.float64)).all()

    fuzz(csv_tables(), check, examples)


# --- offline MDP files (.npz and HDF5) ----------------------------------------------------------
MDP = {
    "observations": np.zeros((6, 4), np.float32),
    "actions": np.array([0, 1, 0, 1, 0, 1]),
    "rewards": np.ones(6, np.float32),
    "terminals": np.array([0, 0, 1, 0, 0, 1], bool),
    "episode_terminals": np.array([0, 0, 1, 0, 0, 1], bool),
}

arrays = st.one_of(
    st.sampled_from(list(MDP.values())),
    st.builds(lambda n: np.full(n, np.nan, np.float32), st.integers(0, 8)),
    st.builds(lambda n: np.full((n, 4), np.inf, np.float32), st.integers(0, 8)),
    st.builds(lambda n: np.arange(n).astype(str), st.integers(0, 8)),
    st.builds(lambda n, d: np.zeros((n,) * d), st.integers(0, 3), st.integers(0, 4)),
    st.just(np.array(3.0)),
)


@st.composite
def mdp_contents(draw: st.DrawFn) -> dict[str, np.ndarray]:
    """The MDP keys, some dropped, replaced by arrays of other shapes/dtypes, NaN or inf."""
    data = dict(MDP)
    for key in draw(st.lists(st.sampled_from(list(MDP)), max_size=3, unique=True)):
        if draw(st.booleans()):
            data.pop(key)
        else:
            data[key] = draw(arrays)
    return data


def test_npz_files(tmp_path: Path, examples: int) -> None:
    from agilerl.envs.offline import load_offline_dataset

    valid = io.BytesIO()
    np.savez(valid, **MDP)

    def check(case: dict[str, np.ndarray] | bytes) -> None:
        path = tmp_path / "replay.npz"
        if isinstance(case, bytes):
            _write(path, case)
        else:
            with path.open("wb") as handle:
                np.savez(handle, **case)
        read_or_refuse(lambda: load_offline_dataset(dataset_path=str(path)), path)

    fuzz(st.one_of(damaged(valid.getvalue()), mdp_contents()), check, examples)


def test_hdf5_files(tmp_path: Path, examples: int) -> None:
    h5py = pytest.importorskip("h5py")
    from agilerl.envs.offline import load_offline_dataset

    def write(path: Path, content: dict[str, np.ndarray]) -> None:
        with h5py.File(path, "w") as handle:
            for key, value in content.items():
                handle.create_dataset(
                    key, data=value.astype("S") if value.dtype.kind == "U" else value
                )

    write(tmp_path / "valid.h5", MDP)
    valid = (tmp_path / "valid.h5").read_bytes()

    def check(case: dict[str, np.ndarray] | bytes) -> None:
        path = tmp_path / "replay.h5"
        path.unlink(missing_ok=True)
        if isinstance(case, bytes):
            _write(path, case)
        else:
            write(path, case)
        read_or_refuse(lambda: load_offline_dataset(dataset_path=str(path)), path)

    fuzz(st.one_of(damaged(valid), mdp_contents()), check, examples)


# --- checkpoints ---------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def checkpoint_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real two-checkpoint PPO run's checkpoint folder."""
    from agilerl.trainer import LocalTrainer

    run_dir = tmp_path_factory.mktemp("checkpointed") / "run"
    LocalTrainer(
        TINY_PPO, VALID_MANIFEST["environment"], TINY_TRAINING, run_dir=run_dir, verbose=False
    ).train()
    return run_dir / "checkpoints"


@st.composite
def checkpoint_damage(draw: st.DrawFn, folder: Path) -> tuple[str, bytes]:
    """(file to damage, its new bytes): an agent file, the loop state or ``latest``."""
    latest = (folder / "latest").read_text().strip()
    name = draw(st.sampled_from([f"{latest}/agent_0.pt", f"{latest}/state.pt", "latest"]))
    if name == "latest":
        pointer = st.one_of(
            st.sampled_from(["../../etc", "/etc/passwd", "step_x", "", ".", latest + "/.."]),
            st.text(max_size=40),
        )
        return name, draw(pointer).encode("utf-8", "surrogatepass")
    return name, draw(damaged((folder / name).read_bytes()))


def test_checkpoint_files(checkpoint_dir: Path, tmp_path: Path, examples: int) -> None:
    from agilerl.training.checkpointing import CheckpointManager

    def check(case: tuple[str, bytes]) -> None:
        folder = tmp_path / "checkpoints"
        shutil.rmtree(folder, ignore_errors=True)
        shutil.copytree(checkpoint_dir, folder)
        name, data = case
        _write(folder / name, data)
        try:
            CheckpointManager(folder).load_latest()
        except ConfigError as error:
            assert "checkpoint" in str(error) or str(folder) in str(error), str(error)

    fuzz(checkpoint_damage(checkpoint_dir), check, examples)


# --- model folders -------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("transformers")
    from agilerl.llm.tiny import build_tiny_llm

    return build_tiny_llm(tmp_path_factory.mktemp("fuzz-llm") / "model")


@st.composite
def model_damage(draw: st.DrawFn, folder: Path) -> tuple[str, bytes]:
    """(file, new bytes): the config (damaged, or any JSON), the weights or the tokenizer."""
    name = draw(st.sampled_from(["config.json", "model.safetensors", "tokenizer.json"]))
    valid = (folder / name).read_bytes()
    if name == "config.json" and draw(st.booleans()):
        config = json.loads(valid)
        key = draw(
            st.sampled_from(
                ["hidden_size", "num_hidden_layers", "vocab_size", "model_type", "torch_dtype"]
            )
        )
        config[key] = draw(json_values)
        return name, json.dumps(config, allow_nan=True).encode()
    return name, draw(damaged(valid))


def test_model_folders(model_dir: Path, tmp_path: Path, examples: int) -> None:
    from agilerl.llm.model import load_causal_lm, load_tokenizer
    from agilerl.strategies.llm import check_model_folder

    os.environ.setdefault("HF_HUB_OFFLINE", "1")

    def check(case: tuple[str, bytes]) -> None:
        folder = tmp_path / "model"
        shutil.rmtree(folder, ignore_errors=True)
        shutil.copytree(model_dir, folder)
        name, data = case
        _write(folder / name, data)

        def load() -> None:
            check_model_folder(folder, "network.pretrained_model_name_or_path")
            load_tokenizer(folder)
            load_causal_lm(folder)

        read_or_refuse(load, folder)

    fuzz(model_damage(model_dir), check, examples)


# --- Minari datasets -----------------------------------------------------------------------------
MINARI_ID = "cartpole/fuzz-v0"


@pytest.fixture(scope="module")
def minari_root(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A real Minari dataset recorded by our script, in a root of its own."""
    import sys

    pytest.importorskip("minari")
    root = tmp_path_factory.mktemp("minari")
    previous = os.environ.get("MINARI_DATASETS_PATH")
    os.environ["MINARI_DATASETS_PATH"] = str(root / "valid")
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
    from make_offline_dataset import make_dataset

    make_dataset(steps=300, epsilon=0.5, seed=1, minari_id=MINARI_ID)
    yield root
    if previous is None:
        os.environ.pop("MINARI_DATASETS_PATH", None)
    else:
        os.environ["MINARI_DATASETS_PATH"] = previous


def test_minari_datasets(minari_root: Path, examples: int, monkeypatch: pytest.MonkeyPatch) -> None:
    from agilerl.envs.offline import load_offline_dataset

    files = sorted(
        p.relative_to(minari_root / "valid")
        for p in (minari_root / "valid").rglob("*")
        if p.is_file()
    )

    @st.composite
    def damage(draw: st.DrawFn) -> tuple[Path, bytes]:
        name = draw(st.sampled_from(files))
        return name, draw(damaged((minari_root / "valid" / name).read_bytes()))

    def check(case: tuple[Path, bytes]) -> None:
        root = minari_root / "damaged"
        shutil.rmtree(root, ignore_errors=True)
        shutil.copytree(minari_root / "valid", root)
        monkeypatch.setenv("MINARI_DATASETS_PATH", str(root))
        _write(root / case[0], case[1])
        try:
            load_offline_dataset(minari_dataset_id=MINARI_ID)
        except ConfigError as error:
            assert MINARI_ID in str(error), str(error)

    fuzz(damage(), check, examples)

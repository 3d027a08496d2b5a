"""Property: any edit of a valid manifest validates or raises ConfigError, nothing else."""

from __future__ import annotations

import copy
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agilerl.arena.models import ConfigError, TrainingManifest
from agilerl.arena.models.loading import read_manifest_file

BASES = [read_manifest_file(p) for p in sorted((Path(__file__).parents[1] / "manifests").glob("*"))]

values = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(10**9), 10**9),
    st.floats(allow_nan=True),
    st.text(max_size=12),
    st.lists(st.integers(-5, 5), max_size=3),
    st.dictionaries(st.text(max_size=6), st.integers(), max_size=2),
)


def _paths(node: object, prefix: tuple = ()) -> list[tuple]:
    out = [prefix] if prefix else []
    if isinstance(node, dict):
        for key, value in node.items():
            out += _paths(value, (*prefix, key))
    return out


@st.composite
def edited(draw: st.DrawFn) -> dict:
    data = copy.deepcopy(draw(st.sampled_from(BASES)))
    for _ in range(draw(st.integers(1, 3))):
        paths = _paths(data)
        if not paths:  # every section was deleted: the empty manifest is the edit
            break
        path = draw(st.sampled_from(paths))
        parent = data
        for key in path[:-1]:
            parent = parent[key]
        action = draw(st.sampled_from(["set", "delete", "add"]))
        if not isinstance(parent, dict):
            continue
        if action == "set":
            parent[path[-1]] = draw(values)
        elif action == "delete":
            parent.pop(path[-1], None)
        else:
            parent[draw(st.text(min_size=1, max_size=10))] = draw(values)
    return data


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(edited())
def test_random_edits_validate_or_raise_config_error(data: dict) -> None:
    try:
        manifest = TrainingManifest.from_dict(data)
    except ConfigError as error:
        assert error.problems
        for problem in error.problems:
            assert problem.message
        return
    assert TrainingManifest.from_dict(manifest.to_dict()).to_dict() == manifest.to_dict()

"""Segment trees: node invariants, prefix-sum search and batched updates (property-based)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agilerl.components.segment_tree import (
    MinSegmentTree,
    SegmentTree,
    SumSegmentTree,
    next_power_of_two,
)

SETTINGS = settings(max_examples=60, deadline=None)

# integer-valued priorities keep every float sum exact, so the checks can be exact too
updates = st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 50)), min_size=1, max_size=60)


def _assert_invariants(tree: SegmentTree, op) -> None:
    cap = tree.capacity
    nodes = np.arange(1, cap)
    np.testing.assert_array_equal(
        tree.tree[nodes], op(tree.tree[2 * nodes], tree.tree[2 * nodes + 1])
    )
    assert np.all(tree.tree[cap + tree.size : 2 * cap] == tree.neutral)


def _apply(size: int, pairs: list[tuple[int, int]]) -> tuple[np.ndarray, np.ndarray]:
    idxs = np.array([i % size for i, _ in pairs], dtype=np.int64)
    values = np.array([v for _, v in pairs], dtype=np.float64)
    return idxs, values


def test_next_power_of_two() -> None:
    assert [next_power_of_two(n) for n in (1, 2, 3, 4, 5, 1000, 1024, 1025)] == [
        1, 2, 4, 4, 8, 1024, 1024, 2048
    ]  # fmt: skip
    with pytest.raises(ValueError):
        next_power_of_two(0)


@SETTINGS
@given(size=st.integers(1, 70), pairs=updates, batched=st.booleans())
def test_internal_nodes_reduce_children(size: int, pairs, batched: bool) -> None:
    idxs, values = _apply(size, pairs)
    for tree, op in ((SumSegmentTree(size), np.add), (MinSegmentTree(size), np.minimum)):
        assert tree.capacity == next_power_of_two(size) and tree.capacity >= size
        if batched:
            tree.update(idxs, values)
        else:
            for i, v in zip(idxs, values, strict=True):
                tree.update(int(i), float(v))
        _assert_invariants(tree, op)
        expected = np.full(size, tree.neutral)
        for i, v in zip(idxs, values, strict=True):
            expected[i] = v
        np.testing.assert_array_equal(tree.leaves, expected)
        assert tree.reduce_all() == (expected.sum() if op is np.add else expected.min())


@SETTINGS
@given(size=st.integers(1, 70), pairs=updates, more=updates)
def test_batched_update_equals_sequential(size: int, pairs, more) -> None:
    """Duplicated indices included: the last value wins in both."""
    for cls in (SumSegmentTree, MinSegmentTree):
        batched, sequential = cls(size), cls(size)
        for chunk in (pairs, more):
            idxs, values = _apply(size, chunk)
            batched.update(idxs, values)
            for i, v in zip(idxs, values, strict=True):
                sequential.update(i, v)
        np.testing.assert_array_equal(batched.tree, sequential.tree)


@SETTINGS
@given(
    size=st.integers(1, 70),
    pairs=updates,
    fractions=st.lists(st.floats(0.0, 1.0, exclude_max=True), min_size=1, max_size=40),
)
def test_prefix_sum_search_finds_containing_range(size: int, pairs, fractions) -> None:
    tree = SumSegmentTree(size)
    idxs, values = _apply(size, pairs)
    tree.update(idxs, values + 1.0)  # every touched leaf positive; untouched leaves are 0
    leaves = np.asarray(tree.leaves)
    cumsum = np.cumsum(leaves)
    total = tree.total()
    assert total == cumsum[-1]
    queries = np.array(fractions) * total
    found = tree.find_prefixsum_idx(queries)
    assert found.dtype == np.int64 and found.shape == queries.shape
    lower = np.concatenate([[0.0], cumsum])[found]
    upper = cumsum[found]
    assert np.all(lower <= queries) and np.all(queries < upper)
    assert np.all(leaves[found] > 0)  # zero-priority leaves are never found
    # scalar queries agree with the batch
    assert [tree.find_prefixsum_idx(float(q)) for q in queries] == found.tolist()
    # integer queries on boundaries: u == cumsum[i] belongs to the next non-empty leaf
    boundary = cumsum[:-1][leaves[1:] > 0]
    if boundary.size:
        got = tree.find_prefixsum_idx(boundary)
        assert np.all(np.concatenate([[0.0], cumsum])[got] <= boundary)
        assert np.all(boundary < cumsum[got])


@SETTINGS
@given(size=st.integers(1, 70), values=st.lists(st.floats(0.0, 1e3), min_size=0, max_size=70))
def test_build_matches_updates(size: int, values) -> None:
    values = np.array(values[:size], dtype=np.float64)
    for cls, op in ((SumSegmentTree, np.add), (MinSegmentTree, np.minimum)):
        built, updated = cls(size), cls(size)
        built.update(0, 5.0)  # build must overwrite old content
        built.build(values)
        updated.update(np.arange(values.size), values)
        np.testing.assert_array_equal(built.leaves, updated.leaves)
        _assert_invariants(built, op)
        np.testing.assert_allclose(built.reduce_all(), updated.reduce_all())


def test_prefix_search_clips_queries_at_or_above_total_and_rejects_negative() -> None:
    tree = SumSegmentTree(5)
    tree.update([0, 1, 2], [1.0, 2.0, 3.0])
    assert tree.find_prefixsum_idx(6.0) == 4  # last addressable leaf, never beyond size
    assert tree.find_prefixsum_idx([0.0, 0.999, 1.0, 2.999, 3.0, 5.999]).tolist() == [
        0, 0, 1, 1, 2, 2
    ]  # fmt: skip
    with pytest.raises(ValueError):
        tree.find_prefixsum_idx(-0.5)


def test_index_bounds_and_reset() -> None:
    tree = MinSegmentTree(3)
    with pytest.raises(IndexError):
        tree.update(3, 1.0)
    with pytest.raises(IndexError):
        tree.update(-1, 1.0)
    tree.update([0, 2], [4.0, 2.0])
    assert tree.min() == 2.0 and tree[2] == 2.0
    np.testing.assert_array_equal(tree[[0, 1]], [4.0, np.inf])
    tree.reset()
    assert tree.min() == np.inf


@pytest.mark.parametrize("cls", [SumSegmentTree, MinSegmentTree])
def test_few_leaf_path_walk_equals_the_vectorised_update(
    cls: type, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Small updates walk their paths with Python floats: bit for bit the array update's tree."""
    import agilerl.components.segment_tree as segment_tree

    rng = np.random.default_rng(0)
    batches = [(rng.integers(0, 1000, k), rng.random(k)) for k in rng.integers(1, 9, 300)]
    walked = cls(1000)
    for idxs, values in batches:
        walked.update(idxs, values)
    monkeypatch.setattr(segment_tree, "_FEW", 0)
    vectorised = cls(1000)
    for idxs, values in batches:
        vectorised.update(idxs, values)
    np.testing.assert_array_equal(walked.tree, vectorised.tree)
    assert walked.reduce_all() == vectorised.reduce_all() != walked.neutral

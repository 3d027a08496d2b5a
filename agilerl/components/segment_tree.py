"""Array-backed sum and min segment trees with vectorised batch operations.

The tree lives in one ``float64`` array of length ``2 * capacity`` where
``capacity`` is the next power of two of the requested size. Node ``1`` is the
root, node ``i`` has children ``2 * i`` and ``2 * i + 1`` and leaf ``j`` sits at
``capacity + j``; node ``0`` is unused. Leaves beyond ``size`` hold the
operation's neutral element (``0`` for sums, ``+inf`` for minima) so they never
change a reduction.

Batch operations (:meth:`SegmentTree.update`,
:meth:`SumSegmentTree.find_prefixsum_idx`) touch all items of the batch at
once and loop only over the ``log2(capacity)`` levels of the tree; an update
of a few leaves (one env step's transitions) walks each leaf's path with
Python floats instead, which costs a tenth of the array operations' dispatch.
"""

from __future__ import annotations

from typing import Any

import numpy as np


def next_power_of_two(n: int) -> int:
    """Smallest power of two ``>= n`` (``n >= 1``)."""
    if n < 1:
        raise ValueError(f"size must be >= 1 (got {n})")
    return 1 << (int(n) - 1).bit_length()


_FEW = 8
"""Updates of at most this many leaves walk their paths one by one (same floats)."""


def _minimum(a: float, b: float) -> float:
    """``np.minimum`` on two floats (a NaN wins)."""
    return a if a <= b or a != a else b


_SCALAR_OPS = {np.add: float.__add__, np.minimum: _minimum}


def _last_occurrences(idxs: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sorted unique ``idxs`` with the value of each index's last occurrence."""
    order = np.argsort(idxs, kind="stable")  # equal indices keep their original order
    ordered = idxs[order]
    last = np.empty(ordered.size, dtype=bool)
    last[-1] = True
    np.not_equal(ordered[1:], ordered[:-1], out=last[:-1])
    keep = order[last]
    return idxs[keep], values[keep]


class SegmentTree:
    """Binary tree over ``size`` leaves that keeps a reduction per node.

    Args:
        size: Number of leaves that may be addressed (``0 <= idx < size``).
        operation: Binary numpy ufunc (``np.add``, ``np.minimum``) that reduces
            two children into their parent.
        neutral: Neutral element of ``operation``; the initial value of every
            leaf.
    """

    def __init__(self, size: int, operation: np.ufunc, neutral: float) -> None:
        self.size = int(size)
        self.capacity = next_power_of_two(self.size)
        self.depth = self.capacity.bit_length() - 1
        self.operation = operation
        self.neutral = float(neutral)
        self.tree = np.full(2 * self.capacity, self.neutral, dtype=np.float64)
        self._pairs = self.tree.reshape(-1, 2)  # row i = children of node i
        self._scalar_op = _SCALAR_OPS.get(operation)

    @property
    def nbytes(self) -> int:
        """Bytes held by the tree array."""
        return int(self.tree.nbytes)

    @property
    def leaves(self) -> np.ndarray:
        """Read-only view of the ``size`` addressable leaf values."""
        view = self.tree[self.capacity : self.capacity + self.size]
        view.flags.writeable = False
        return view

    def reset(self) -> None:
        """Set every node back to the neutral element."""
        self.tree.fill(self.neutral)

    def _check_idxs(self, idxs: Any) -> np.ndarray:
        idxs = np.asarray(idxs, dtype=np.int64).reshape(-1)
        if idxs.size and (idxs.min() < 0 or idxs.max() >= self.size):
            raise IndexError(
                f"segment tree index out of range [0, {self.size}): "
                f"min {idxs.min()}, max {idxs.max()}"
            )
        return idxs

    def __getitem__(self, idxs: Any) -> np.ndarray | float:
        """Leaf values at ``idxs`` (a float for a scalar index)."""
        if np.ndim(idxs) == 0:
            return float(self.tree[self.capacity + self._check_idxs(idxs)[0]])
        return self.tree[self.capacity + self._check_idxs(idxs)]

    def update(self, idxs: Any, values: Any) -> None:
        """Set leaves ``idxs`` to ``values`` and refresh their ancestors.

        Equivalent to assigning the pairs one after the other: when an index
        repeats, its last value wins.

        Args:
            idxs: Leaf indices (scalar or 1-D).
            values: One value per index, or a scalar broadcast to all of them.
        """
        idxs = self._check_idxs(idxs)
        values = np.broadcast_to(np.asarray(values, dtype=np.float64).reshape(-1), idxs.shape)
        if idxs.size == 0:
            return
        if idxs.size <= _FEW and self._scalar_op is not None:
            self._update_paths(idxs.tolist(), values.tolist())
            return
        if idxs.size > 1:
            idxs, values = _last_occurrences(idxs, values)
        nodes = idxs + self.capacity
        tree, pairs, operation = self.tree, self._pairs, self.operation
        tree[nodes] = values
        for _ in range(self.depth):
            nodes >>= 1
            # repeated parents are recomputed from the same children: harmless
            children = pairs.take(nodes, axis=0)  # take: faster than fancy indexing
            tree[nodes] = operation(children[:, 0], children[:, 1])

    def _update_paths(self, idxs: list[int], values: list[float]) -> None:
        """:meth:`update` leaf by leaf (in order, so a repeated index's last value wins)."""
        tree, operation, item = self.tree, self._scalar_op, self.tree.item
        for idx, value in zip(idxs, values, strict=True):
            node = idx + self.capacity
            tree[node] = value
            while node > 1:
                node >>= 1
                tree[node] = operation(item(2 * node), item(2 * node + 1))

    def build(self, values: Any) -> None:
        """Replace all leaves: the first ``len(values)`` get ``values``, the rest neutral.

        Rebuilds the tree level by level (vectorised), ``O(capacity)``.
        """
        values = np.asarray(values, dtype=np.float64).reshape(-1)
        if values.size > self.size:
            raise ValueError(f"{values.size} values for a tree of size {self.size}")
        tree = self.tree
        cap = self.capacity
        tree[cap : 2 * cap] = self.neutral
        tree[cap : cap + values.size] = values
        lo = cap // 2
        while lo >= 1:
            tree[lo : 2 * lo] = self.operation(
                tree[2 * lo : 4 * lo : 2], tree[2 * lo + 1 : 4 * lo : 2]
            )
            lo //= 2

    def reduce_all(self) -> float:
        """Reduction over all leaves (the root)."""
        return float(self.tree[1])


class SumSegmentTree(SegmentTree):
    """Segment tree of sums, with batched prefix-sum search (proportional sampling).

    Args:
        size: Number of leaves.
    """

    def __init__(self, size: int) -> None:
        super().__init__(size, np.add, 0.0)

    def total(self) -> float:
        """Sum of all leaves."""
        return self.reduce_all()

    def find_prefixsum_idx(self, prefixsum: Any) -> np.ndarray | int:
        """Leaf whose cumulative range contains each query.

        For a query ``u`` in ``[0, total())`` returns the ``i`` with
        ``sum(leaves[:i]) <= u < sum(leaves[:i + 1])`` (so zero leaves are never
        returned). Queries at or above ``total()`` are clipped to the last
        addressable leaf.

        Args:
            prefixsum: Scalar or 1-D array of queries.

        Returns:
            An int for a scalar query, else an ``int64`` array of the same length.

        Raises:
            ValueError: If a query is negative.
        """
        scalar = np.ndim(prefixsum) == 0
        query = np.array(prefixsum, dtype=np.float64).reshape(-1)
        if query.size and query.min() < 0:
            raise ValueError(f"prefix sums must be >= 0 (got {query.min()})")
        nodes = np.ones(query.shape, dtype=np.int64)
        tree = self.tree
        for _ in range(self.depth):
            nodes <<= 1  # left child
            left_sum = tree.take(nodes)
            go_right = query >= left_sum
            query -= left_sum * go_right
            nodes |= go_right
        idxs = np.minimum(nodes - self.capacity, self.size - 1)
        return int(idxs[0]) if scalar else idxs


class MinSegmentTree(SegmentTree):
    """Segment tree of minima (unused leaves are ``+inf``).

    Args:
        size: Number of leaves.
    """

    def __init__(self, size: int) -> None:
        super().__init__(size, np.minimum, float("inf"))

    def min(self) -> float:
        """Minimum over all leaves."""
        return self.reduce_all()

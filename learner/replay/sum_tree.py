"""SumTree: a flat-array sum tree over a fixed number of leaves, every operation vectorized.

Leaf i lives at ``tree[L + i]`` (L a power of two), node k holds ``tree[2k] + tree[2k + 1]``, ``tree[1]`` the total;
parents are recomputed from their children, never adjusted by deltas, so rounding errors do not accumulate.
"""

from __future__ import annotations

import numpy as np


class SumTree:
    def __init__(self, size: int):
        if size < 1:
            raise ValueError(f"size={size!r} must be >= 1")
        self.leaves = 1 << (int(size) - 1).bit_length()
        self.depth = self.leaves.bit_length() - 1
        self.tree = np.zeros(2 * self.leaves, dtype=np.float64)

    @property
    def total(self) -> float:
        return float(self.tree[1])

    def get(self, index: np.ndarray) -> np.ndarray:
        return self.tree[self.leaves + index]

    def update(self, index: np.ndarray, value: np.ndarray | float) -> None:
        """Set leaves ``index`` to ``value`` (>= 0; with repeated indices the last one wins) and fix their ancestors."""
        node = np.asarray(index, dtype=np.int64).reshape(-1) + self.leaves
        if node.size == 0:
            return
        self.tree[node] = value
        node = np.unique(node >> 1)  # sorted from here on: shifting keeps it sorted
        while True:
            self.tree[node] = self.tree[2 * node] + self.tree[2 * node + 1]
            if node[0] == 1:
                return
            node >>= 1
            node = node[np.concatenate(([True], node[1:] != node[:-1]))]

    def find(self, prefix: np.ndarray) -> np.ndarray:
        """For each prefix sum u in [0, total): the leaf i with sum(leaves[:i]) <= u < sum(leaves[:i+1]); never a leaf of
        value 0 while the total is positive (rounding at a boundary goes to the side that holds mass)."""
        u = np.array(prefix, dtype=np.float64, copy=True).reshape(-1)
        node = np.ones(u.shape, dtype=np.int64)
        for _ in range(self.depth):
            left = node << 1
            left_sum = self.tree[left]
            right = ((u >= left_sum) & (self.tree[left + 1] > 0)) | (left_sum <= 0)
            u -= np.where(right, left_sum, 0.0)
            node = left + right
        return node - self.leaves

"""Radix tree over token ids for prefix caching and prefix-sharing accounting."""

from radix.tree import (
    MatchResult,
    RadixTree,
    SharingStats,
    TreeFullError,
    TreeNode,
    prefix_sharing,
)

__all__ = [
    "MatchResult",
    "RadixTree",
    "SharingStats",
    "TreeFullError",
    "TreeNode",
    "prefix_sharing",
]

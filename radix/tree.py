"""Radix tree over token ids, in the spirit of SGLang's ``RadixCache``.

Each edge carries a segment of tokens (``TreeNode.key``) and an optional payload
(``TreeNode.value``) aligned token-for-token with that segment, e.g. a KV slice.
Payloads must support ``len`` and slicing (``value[:n]``/``value[n:]``) because
segments are split when a match or insert diverges inside them.

Recency is a logical clock owned by the tree: every ``match_prefix``/``insert``
call advances it by one and stamps the nodes on its path, so LRU eviction order
is deterministic.
"""

from __future__ import annotations

import heapq
import itertools
import operator
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

Tokens = tuple[int, ...]


class TreeFullError(RuntimeError):
    """Raised when an insert cannot fit in ``max_tokens`` because too much is locked."""


@dataclass(eq=False, kw_only=True)
class TreeNode:
    """One edge segment of the tree; the root has an empty key and no parent."""

    key: Tokens = ()
    value: Any = field(default=None, repr=False)
    parent: TreeNode | None = field(default=None, repr=False)
    children: dict[int, TreeNode] = field(default_factory=dict, repr=False)
    lock_ref: int = 0
    last_access: int = 0


@dataclass(frozen=True)
class MatchResult:
    """Longest cached prefix of a query.

    ``node`` ends exactly at ``length`` (the root when ``length == 0``);
    ``values`` holds one payload per matched segment, root side first (``None``
    entries included).
    """

    length: int
    node: TreeNode
    values: tuple[Any, ...]


@dataclass(frozen=True)
class SharingStats:
    """Prefix-sharing accounting for a batch of requests; see ``prefix_sharing``."""

    total_prefix_tokens: int
    unique_prefix_tokens: int
    cached_tokens: int
    segments: int

    @property
    def hit_rate(self) -> float:
        """``cached_tokens / total_prefix_tokens``, 0.0 for an empty batch."""
        if self.total_prefix_tokens == 0:
            return 0.0
        return self.cached_tokens / self.total_prefix_tokens


def _as_tokens(tokens: Sequence[int], name: str) -> Tokens:
    """Validate token ids (non-negative ints, bools rejected) and return them as a tuple."""
    out = []
    for i, tok in enumerate(tokens):
        try:
            idx = operator.index(tok)
        except TypeError:
            idx = -1
        if isinstance(tok, bool) or idx < 0:
            raise ValueError(
                f"{name}[{i}] must be a non-negative int token id, got {tok!r}; pass token ids as ints >= 0"
            )
        out.append(idx)
    return tuple(out)


def _common_len(key: Tokens, tokens: Tokens, start: int) -> int:
    """Length of the common prefix of ``key`` and ``tokens[start:]``."""
    n = 0
    limit = min(len(key), len(tokens) - start)
    while n < limit and key[n] == tokens[start + n]:
        n += 1
    return n


class RadixTree:
    """Token radix tree with lock-protected LRU eviction and an optional token budget."""

    def __init__(self, max_tokens: int | None = None) -> None:
        if max_tokens is not None and (
            isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens <= 0
        ):
            raise ValueError(
                f"max_tokens must be a positive int or None, got {max_tokens!r}; "
                "pass e.g. max_tokens=4096, or None for no budget"
            )
        self._max_tokens = max_tokens
        self._root = TreeNode()
        self._clock = 0
        self._evictable = 0
        self._protected = 0

    @property
    def max_tokens(self) -> int | None:
        """Token budget enforced by ``insert`` (None: unbounded)."""
        return self._max_tokens

    @property
    def root(self) -> TreeNode:
        """The root node (empty key, never evicted)."""
        return self._root

    @property
    def total_tokens(self) -> int:
        """Tokens stored in the tree."""
        return self._evictable + self._protected

    @property
    def evictable_tokens(self) -> int:
        """Tokens in unlocked nodes."""
        return self._evictable

    @property
    def protected_tokens(self) -> int:
        """Tokens in locked nodes (``lock_ref > 0``)."""
        return self._protected

    @property
    def segments(self) -> int:
        """Number of edge segments (non-root nodes)."""
        return sum(1 for _ in self._nodes())

    def match_prefix(self, tokens: Sequence[int]) -> MatchResult:
        """Return the longest stored prefix of ``tokens``, splitting a segment it ends inside."""
        key = _as_tokens(tokens, "tokens")
        end, length = self._walk(key, self._tick())
        path: list[Any] = []
        node = end
        while node is not self._root:
            path.append(node.value)
            assert node.parent is not None  # only the root has no parent
            node = node.parent
        return MatchResult(length=length, node=end, values=tuple(reversed(path)))

    def insert(self, tokens: Sequence[int], value: Any = None) -> int:
        """Insert ``tokens`` and return how many leading tokens were already stored.

        ``value``, if given, is aligned with ``tokens`` (``len(value) == len(tokens)``);
        the new leaf segment receives ``value[hit:]`` and payloads of already stored
        segments are kept. With ``max_tokens`` set, LRU unlocked leaves off the insert
        path are evicted first; ``TreeFullError`` is raised if that cannot make room.
        """
        key = _as_tokens(tokens, "tokens")
        if value is not None and len(value) != len(key):
            raise ValueError(
                f"value must have one entry per token (len {len(key)}), got len {len(value)}; "
                "pass a payload aligned with tokens, or None"
            )
        now = self._tick()
        node, hit = self._walk(key, now)
        rest = key[hit:]
        if not rest:
            return hit
        if self.max_tokens is not None:
            self._make_room(len(rest), node)
        leaf = TreeNode(
            key=rest,
            value=None if value is None else value[hit:],
            parent=node,
            last_access=now,
        )
        node.children[rest[0]] = leaf
        self._evictable += len(rest)
        return hit

    def inc_lock_ref(self, node: TreeNode) -> None:
        """Pin ``node`` and its ancestors against eviction."""
        while node is not self._root:
            if node.lock_ref == 0:
                self._evictable -= len(node.key)
                self._protected += len(node.key)
            node.lock_ref += 1
            assert node.parent is not None  # only the root has no parent
            node = node.parent

    def dec_lock_ref(self, node: TreeNode) -> None:
        """Undo one ``inc_lock_ref(node)``."""
        if node is not self._root and node.lock_ref <= 0:
            raise ValueError(
                f"node must be locked to dec_lock_ref, got lock_ref={node.lock_ref} for key "
                f"{node.key}; call dec_lock_ref only once per inc_lock_ref"
            )
        while node is not self._root:
            node.lock_ref -= 1
            if node.lock_ref == 0:
                self._protected -= len(node.key)
                self._evictable += len(node.key)
            assert node.parent is not None  # only the root has no parent
            node = node.parent

    def evict(self, num_tokens: int) -> int:
        """Evict LRU unlocked leaves until ``num_tokens`` are freed or none remain; return freed."""
        if isinstance(num_tokens, bool) or not isinstance(num_tokens, int) or num_tokens < 0:
            raise ValueError(f"num_tokens must be a non-negative int, got {num_tokens!r}; pass how many tokens to free")
        order = itertools.count()
        heap = [(n.last_access, next(order), n) for n in self._nodes() if not n.children and n.lock_ref == 0]
        heapq.heapify(heap)
        freed = 0
        while freed < num_tokens and heap:
            _, _, leaf = heapq.heappop(heap)
            parent = leaf.parent
            assert parent is not None  # heap holds attached non-root nodes only
            del parent.children[leaf.key[0]]
            leaf.parent = None
            freed += len(leaf.key)
            self._evictable -= len(leaf.key)
            if parent is not self._root and not parent.children and parent.lock_ref == 0:
                heapq.heappush(heap, (parent.last_access, next(order), parent))
        return freed

    def sequences(self) -> list[Tokens]:
        """Sorted root-to-leaf token sequences (for tests and debugging)."""
        out = []
        stack: list[tuple[TreeNode, Tokens]] = [(self._root, ())]
        while stack:
            node, prefix = stack.pop()
            seq = prefix + node.key
            if not node.children and node is not self._root:
                out.append(seq)
            stack.extend((child, seq) for child in node.children.values())
        return sorted(out)

    def _tick(self) -> int:
        self._clock += 1
        return self._clock

    def _nodes(self) -> Iterator[TreeNode]:
        """All non-root nodes, depth first."""
        stack = list(self._root.children.values())
        while stack:
            node = stack.pop()
            yield node
            stack.extend(node.children.values())

    def _walk(self, key: Tokens, now: int) -> tuple[TreeNode, int]:
        """Follow ``key`` from the root, stamping and splitting; return (end node, matched length)."""
        node, i = self._root, 0
        while i < len(key) and (child := node.children.get(key[i])) is not None:
            n = _common_len(child.key, key, i)
            if n < len(child.key):
                child = self._split(child, n)
            child.last_access = now
            node, i = child, i + n
        return node, i

    def _split(self, child: TreeNode, n: int) -> TreeNode:
        """Cut ``child``'s segment after ``n`` tokens; return the new upper node."""
        upper = TreeNode(
            key=child.key[:n],
            value=None if child.value is None else child.value[:n],
            parent=child.parent,
            children={child.key[n]: child},
            lock_ref=child.lock_ref,
            last_access=child.last_access,
        )
        assert child.parent is not None  # the root is never split
        child.parent.children[upper.key[0]] = upper
        child.key = child.key[n:]
        child.value = None if child.value is None else child.value[n:]
        child.parent = upper
        return upper

    def _make_room(self, need: int, keep: TreeNode) -> None:
        """Evict so ``need`` more tokens fit in ``max_tokens``, never evicting ``keep``'s path."""
        assert self._max_tokens is not None  # insert calls this only with a budget set
        overflow = self.total_tokens + need - self._max_tokens
        if overflow <= 0:
            return
        self.inc_lock_ref(keep)
        try:
            if overflow > self._evictable:
                raise TreeFullError(
                    f"insert needs {need} new tokens but max_tokens={self._max_tokens} with "
                    f"{self.total_tokens} stored leaves only {self._evictable} evictable off the "
                    "insert path; dec_lock_ref finished requests or raise max_tokens"
                )
            self.evict(overflow)
        finally:
            self.dec_lock_ref(keep)


def prefix_sharing(root: Sequence[int] | None, prefixes: Sequence[Sequence[int]]) -> SharingStats:
    """Account prefix sharing for a batch of requests forking one sequence.

    ``unique_prefix_tokens`` and ``segments`` describe the radix tree built from
    ``prefixes`` alone. ``cached_tokens`` sums, per request, the tokens matched in a
    tree holding only ``root`` when ``root`` is given; otherwise the tokens shared
    with earlier requests of the batch (their insert hits, in order).
    """
    batch = [_as_tokens(p, f"prefixes[{j}]") for j, p in enumerate(prefixes)]
    tree = RadixTree()
    hits = [tree.insert(p) for p in batch]
    if root is None:
        cached = sum(hits)
    else:
        seeded = RadixTree()
        seeded.insert(_as_tokens(root, "root"))
        cached = sum(seeded.match_prefix(p).length for p in batch)
    return SharingStats(
        total_prefix_tokens=sum(len(p) for p in batch),
        unique_prefix_tokens=tree.total_tokens,
        cached_tokens=cached,
        segments=tree.segments,
    )

"""Tests for the token radix tree and prefix-sharing accounting."""

import pytest

from radix import RadixTree, SharingStats, TreeFullError, prefix_sharing


def child_keys(node):
    return sorted(c.key for c in node.children.values())


def test_insert_splits_on_divergence():
    tree = RadixTree()
    assert tree.insert([1, 2, 3, 4]) == 0
    assert tree.insert([1, 2, 5]) == 2
    assert child_keys(tree.root) == [(1, 2)]
    mid = tree.root.children[1]
    assert child_keys(mid) == [(3, 4), (5,)]
    assert mid.children[3].parent is mid and mid.parent is tree.root
    assert tree.total_tokens == 5
    assert tree.segments == 3
    assert tree.sequences() == [(1, 2, 3, 4), (1, 2, 5)]


def test_insert_return_values_and_prefix_insert_splits():
    tree = RadixTree()
    assert tree.insert([1, 2, 3, 4]) == 0
    assert tree.insert([1, 2, 3, 4]) == 4
    assert tree.insert([1, 2]) == 2
    assert child_keys(tree.root) == [(1, 2)]
    assert child_keys(tree.root.children[1]) == [(3, 4)]
    assert tree.total_tokens == 4
    assert tree.insert([7]) == 0
    assert tree.insert([]) == 0
    assert tree.total_tokens == 5


def test_match_prefix_lengths_and_partial_split():
    tree = RadixTree()
    tree.insert([1, 2, 3, 4])
    tree.insert([1, 2, 5])
    full = tree.match_prefix([1, 2, 3, 4, 9])
    assert full.length == 4 and full.node.key == (3, 4)
    assert tree.match_prefix([8, 1]).length == 0
    assert tree.match_prefix([8, 1]).node is tree.root
    assert tree.match_prefix([]).node is tree.root

    part = tree.match_prefix([1, 2, 3, 7])
    assert part.length == 3
    assert part.node.key == (3,)
    assert child_keys(part.node) == [(4,)]
    assert tree.sequences() == [(1, 2, 3, 4), (1, 2, 5)]
    assert tree.total_tokens == 5
    assert tree.segments == 4


def test_values_are_aligned_and_sliced_on_split():
    tree = RadixTree()
    tree.insert([1, 2, 3, 4], value="abcd")
    tree.insert([1, 2, 5], value="ABX")
    mid = tree.root.children[1]
    assert mid.value == "ab"
    assert mid.children[3].value == "cd"
    assert mid.children[5].value == "X"

    res = tree.match_prefix([1, 2, 3])
    assert res.values == ("ab", "c")
    assert res.node.children[4].value == "d"
    assert tree.match_prefix([1, 2, 5]).values == ("ab", "X")


def test_none_values_reported_per_segment():
    tree = RadixTree()
    tree.insert([1, 2])
    tree.insert([1, 2, 3], value=[10, 20, 30])
    assert tree.match_prefix([1, 2, 3]).values == (None, [30])


def test_value_length_mismatch_raises():
    with pytest.raises(ValueError, match="value"):
        RadixTree().insert([1, 2, 3], value="ab")


def test_last_access_is_logical_clock_on_path_only():
    tree = RadixTree()
    tree.insert([1, 2, 3])
    tree.insert([1, 2, 4])
    mid = tree.root.children[1]
    left, right = mid.children[3], mid.children[4]
    assert (left.last_access, right.last_access, mid.last_access) == (1, 2, 2)
    tree.match_prefix([1, 2, 3])
    assert (left.last_access, right.last_access, mid.last_access) == (3, 2, 3)


def test_lock_accounting():
    tree = RadixTree()
    tree.insert([1, 2, 3, 4])
    tree.insert([1, 2, 5])
    leaf = tree.match_prefix([1, 2, 3, 4]).node
    assert (tree.protected_tokens, tree.evictable_tokens) == (0, 5)

    tree.inc_lock_ref(leaf)
    tree.inc_lock_ref(leaf)
    assert (tree.protected_tokens, tree.evictable_tokens) == (4, 1)
    assert leaf.lock_ref == 2 and leaf.parent.lock_ref == 2

    tree.dec_lock_ref(leaf)
    assert (tree.protected_tokens, tree.evictable_tokens) == (4, 1)
    tree.dec_lock_ref(leaf)
    assert (tree.protected_tokens, tree.evictable_tokens) == (0, 5)
    with pytest.raises(ValueError, match="lock_ref"):
        tree.dec_lock_ref(leaf)
    assert (tree.protected_tokens, tree.evictable_tokens) == (0, 5)


def test_split_of_locked_segment_keeps_lock_counts():
    tree = RadixTree()
    tree.insert([1, 2, 3, 4])
    leaf = tree.match_prefix([1, 2, 3, 4]).node
    tree.inc_lock_ref(leaf)
    upper = tree.match_prefix([1, 2]).node
    assert upper.lock_ref == 1 and leaf.key == (3, 4)
    assert tree.protected_tokens == 4
    tree.dec_lock_ref(leaf)
    assert upper.lock_ref == 0 and tree.evictable_tokens == 4


def test_evict_lru_order_exact():
    tree = RadixTree()
    tree.insert([1, 2, 3])
    tree.insert([4, 5])
    tree.insert([6])
    tree.match_prefix([1, 2, 3])
    assert tree.evict(2) == 2
    assert tree.sequences() == [(1, 2, 3), (6,)]
    assert tree.evict(1) == 1
    assert tree.sequences() == [(1, 2, 3)]
    assert tree.evict(1) == 3
    assert tree.sequences() == [] and tree.total_tokens == 0
    assert tree.evict(5) == 0


def test_parent_becomes_evictable_after_children():
    tree = RadixTree()
    tree.insert([1, 2, 3])
    tree.insert([1, 2, 4])
    tree.insert([9])
    assert tree.evict(4) == 4
    assert tree.sequences() == [(9,)]
    assert tree.total_tokens == 1


def test_locked_leaves_never_evicted():
    tree = RadixTree()
    tree.insert([1, 2])
    tree.insert([3, 4])
    tree.inc_lock_ref(tree.match_prefix([1, 2]).node)
    tree.match_prefix([3, 4])
    assert tree.evict(100) == 2
    assert tree.sequences() == [(1, 2)]
    assert (tree.protected_tokens, tree.evictable_tokens) == (2, 0)


def test_locked_descendant_pins_parent():
    tree = RadixTree()
    tree.insert([1, 2, 3])
    tree.insert([1, 2, 4])
    tree.inc_lock_ref(tree.match_prefix([1, 2, 4]).node)
    assert tree.evict(10) == 1
    assert tree.sequences() == [(1, 2, 4)]


def test_evict_zero_and_negative():
    tree = RadixTree()
    tree.insert([1])
    assert tree.evict(0) == 0
    assert tree.total_tokens == 1
    with pytest.raises(ValueError, match="num_tokens"):
        tree.evict(-1)


def test_max_tokens_evicts_lru():
    tree = RadixTree(max_tokens=5)
    tree.insert([1, 2, 3])
    tree.insert([4, 5])
    assert tree.insert([6, 7]) == 0
    assert tree.sequences() == [(4, 5), (6, 7)]
    assert tree.total_tokens == 4


def test_max_tokens_never_evicts_insert_path():
    tree = RadixTree(max_tokens=5)
    tree.insert([1, 2, 3])
    tree.insert([9])
    assert tree.insert([1, 2, 3, 4, 5]) == 3
    assert tree.sequences() == [(1, 2, 3, 4, 5)]
    assert tree.protected_tokens == 0


def test_max_tokens_full_when_locked():
    tree = RadixTree(max_tokens=3)
    tree.insert([1, 2, 3])
    node = tree.match_prefix([1, 2, 3]).node
    tree.inc_lock_ref(node)
    with pytest.raises(TreeFullError, match="max_tokens=3"):
        tree.insert([4])
    assert tree.sequences() == [(1, 2, 3)]
    assert (tree.protected_tokens, tree.evictable_tokens) == (3, 0)
    with pytest.raises(TreeFullError):
        RadixTree(max_tokens=3).insert([1, 2, 3, 4])
    tree.dec_lock_ref(node)
    assert tree.insert([4]) == 0
    assert tree.sequences() == [(4,)]


@pytest.mark.parametrize("bad", [0, -1, 2.5, True, "8"])
def test_bad_max_tokens(bad):
    with pytest.raises(ValueError, match="max_tokens"):
        RadixTree(max_tokens=bad)


@pytest.mark.parametrize("bad", [[1, -1], [1, 2.0], [1, "a"], [1, True], [1, None]])
def test_bad_tokens(bad):
    tree = RadixTree()
    with pytest.raises(ValueError, match=r"tokens\[1\]"):
        tree.insert(bad)
    with pytest.raises(ValueError, match=r"tokens\[1\]"):
        tree.match_prefix(bad)
    assert tree.total_tokens == 0


def test_prefix_sharing_without_root():
    prefixes = [[1, 2, 3, 4], [1, 2, 5], [1, 2, 3, 4, 6], []]
    stats = prefix_sharing(None, prefixes)
    assert stats == SharingStats(total_prefix_tokens=12, unique_prefix_tokens=6, cached_tokens=6, segments=4)
    assert stats.hit_rate == 0.5


def test_prefix_sharing_with_root():
    stats = prefix_sharing([1, 2, 3], [[1, 2, 3, 4], [1, 2, 5], [1, 2, 3, 4, 6], [7]])
    assert stats.total_prefix_tokens == 13
    assert stats.unique_prefix_tokens == 7
    assert stats.segments == 5
    assert stats.cached_tokens == 3 + 2 + 3 + 0
    assert stats.hit_rate == pytest.approx(8 / 13)


def test_prefix_sharing_empty_and_bad_input():
    assert prefix_sharing(None, []).hit_rate == 0.0
    assert prefix_sharing([1, 2], []) == SharingStats(0, 0, 0, 0)
    with pytest.raises(ValueError, match=r"prefixes\[1\]\[0\]"):
        prefix_sharing(None, [[1], [-3]])
    with pytest.raises(ValueError, match=r"root\[0\]"):
        prefix_sharing([1.5], [[1]])

"""All-pairs covering designs for the exactness grids.

A full product of test factors grows multiplicatively (kernel x rule x target x scheduler x
budget x schedule x setting x engine is thousands of chains), but the bugs the grids have
caught so far each needed at most two factors at once (a rule with a budget, a kernel with a
target, a schedule with the scheduler). :func:`all_pairs` picks a small set of valid cases in
which every pair of factor values that any valid case has occurs at least once (a strength-2
covering array), after the ``required`` cases (the combinations a past bug needed), greedily
and deterministically: the same factors give the same cases on every machine and worker.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np

Case = dict[str, Any]


def all_pairs(
    factors: Mapping[str, Sequence[Any]],
    valid: Callable[[Case], bool] = lambda case: True,
    required: Iterable[Case] = (),
) -> list[Case]:
    """``required``, then greedily the valid case of the product (first in product order among
    the best) that covers the most pairs of factor values not yet covered, until every pair that
    some valid case has is covered. Each case maps every factor name to one of its values."""
    names = list(factors)
    levels = [list(factors[name]) for name in names]
    cases = [case for values in itertools.product(*levels) if valid(case := dict(zip(names, values)))]
    index = np.array(
        [[levels[f].index(case[name]) for f, name in enumerate(names)] for case in cases], dtype=np.int64
    ).reshape(-1, len(names))
    # pair id of factors (f, g), f < g, with values (i, j): one column per factor pair
    columns = []
    offset = 0
    for f, g in itertools.combinations(range(len(names)), 2):
        columns.append(offset + index[:, f] * len(levels[g]) + index[:, g])
        offset += len(levels[f]) * len(levels[g])
    pair_ids = np.stack(columns, axis=1) if columns else np.zeros((len(cases), 0), dtype=np.int64)
    uncovered = np.zeros(offset, dtype=bool)
    uncovered[pair_ids.ravel()] = True

    chosen: list[Case] = []
    for case in required:
        if not valid(case):
            raise ValueError(f"required case {case} is not valid")
        row = cases.index(case)
        chosen.append(cases[row])
        uncovered[pair_ids[row]] = False
    while uncovered.any():
        row = int(np.argmax(uncovered[pair_ids].sum(axis=1)))
        chosen.append(cases[row])
        uncovered[pair_ids[row]] = False
    return chosen


def uncovered_pairs(
    factors: Mapping[str, Sequence[Any]], valid: Callable[[Case], bool], cases: Sequence[Case]
) -> set[tuple[str, Any, str, Any]]:
    """The pairs of factor values some valid case has and none of ``cases`` does (a check on
    :func:`all_pairs`, written without its indexing)."""
    names = list(factors)

    def pairs(case: Case) -> set[tuple[str, Any, str, Any]]:
        return {(a, case[a], b, case[b]) for a, b in itertools.combinations(names, 2)}

    wanted: set[tuple[str, Any, str, Any]] = set()
    for values in itertools.product(*(factors[n] for n in names)):
        case = dict(zip(names, values))
        if valid(case):
            wanted |= pairs(case)
    for case in cases:
        wanted -= pairs(case)
    return wanted

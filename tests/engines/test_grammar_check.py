"""The server engines' check of a constrained response (``Grammars.violation``,
``ServerEngine._check_masked``): the first token the request's grammar (resumed at its prefix)
forbids, on a literal vocabulary. A response that starts with the stop token under a grammar
that cannot be empty -- the empty answer of issue 56 -- is one."""

from __future__ import annotations

import pytest

from presto_sgl.constraints import Constraint
from presto_sgl.engines.base import Request
from presto_sgl.engines.grammar import Grammars

ALPHABET = "0123456789x"
STOP = len(ALPHABET)  # the vocabulary's stop token
GRAMMARS = Grammars.for_strings([*ALPHABET, "<s>"], [STOP])


def ids(text: str) -> tuple[int, ...]:
    return tuple(ALPHABET.index(ch) for ch in text)


def violation(tokens, *, regex="[0-9]{2}", prefix="", min_tokens=0):
    c = Constraint(regex=regex, min_tokens=min_tokens)
    req = Request((STOP, *ids(prefix)), 8, 1.0, stop=(STOP,), constraint=c, resume=len(prefix))
    return GRAMMARS.violation(req, tokens)


@pytest.mark.parametrize(
    "tokens,where",
    [
        ((*ids("12"), STOP), None),  # a whole answer, ended
        (ids("12"), None),  # cut at the cap before its stop
        (ids("1"), None),  # a prefix of the language
        ((STOP,), 0),  # the empty answer: the grammar cannot end before a digit
        (ids("1x"), 1),
        (ids("123"), 2),  # past the grammar's end
        ((*ids("1"), STOP), 1),  # ended too early
        ((*ids("12"), STOP, *ids("3")), 2),  # a stop token that is not the last
    ],
)
def test_the_first_forbidden_token(tokens, where):
    assert violation(tokens) == where


def test_a_resumed_request_is_checked_from_its_prefix_and_min_tokens_count_it():
    assert violation((*ids("2"), STOP), prefix="1") is None
    assert violation((STOP,), prefix="1") == 0
    assert violation(ids("x"), prefix="1") == 0
    assert violation((*ids("12"), STOP), regex="[0-9]+", min_tokens=3) == 2
    assert violation((*ids("3"), STOP), regex="[0-9]+", min_tokens=3, prefix="12") is None

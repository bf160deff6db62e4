"""The mask of a constraint C (:mod:`presto_sgl.constraints`) over an engine's vocabulary.

Per request, a matcher (xgrammar's ``GrammarMatcher``, the grammar library SGLang uses) is
resumed over the response tokens the request's prefix already holds (``Request.resume``:
its last tokens), so the first new token is masked by the grammar state after the kept
prefix, never by the grammar's start. Each step's allowed set is

* without a stop token: the tokens that keep the response a prefix of C's language;
* a request's stop token: allowed iff the response so far is a complete string of the
  language (the grammar may end here) and has at least ``min_tokens`` tokens;
* any other stop token of the tokenizer: never (it would end the grammar, not the response).

The engine masks q_tau by it and renormalizes; log p0 stays unmasked (docs/design.md §2.2).
A step with no allowed token (a grammar the vocabulary cannot complete) is an EngineError.
xgrammar is imported when the first grammar is compiled.
"""

from __future__ import annotations

import functools
import json
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import CapabilityError, ConfigError, EngineError

if TYPE_CHECKING:
    from ..constraints import Constraint
    from .base import Request


def xgrammar() -> Any:
    """The xgrammar module, or CapabilityError naming the package to install."""
    try:
        import xgrammar
    except ImportError:  # pragma: no cover - installed with the embedded extra
        raise CapabilityError(
            "regex / json_schema / dtype constraints need the grammar library xgrammar: "
            "pip install 'presto-sgl[embedded]' (or pip install xgrammar)"
        ) from None
    return xgrammar


CACHE_BYTES = 256 << 20
"""The compiled grammars kept per vocabulary (xgrammar's cache; a server runs for months)."""


def check(constraint: Constraint) -> None:
    """ConfigError naming ``regex`` / ``json_schema`` / ``ebnf`` when xgrammar cannot compile the
    constraint's grammar (checked over a printable-ASCII vocabulary: what a grammar means does
    not depend on the vocabulary). Without xgrammar installed (a client of an SGLang server)
    nothing is checked here: the server compiles it."""
    if constraint.grammar is None:
        return
    try:
        _ascii().compiled(constraint.grammar)
    except CapabilityError:
        return
    except EngineError as e:
        kind, source = constraint.grammar
        raise ConfigError(kind, source, f"{{{kind}}} cannot be compiled into a grammar: {e}") from None


@functools.cache
def _ascii() -> Grammars:
    return Grammars.for_strings([chr(i) for i in range(32, 127)], ())


class Grammars:
    """Compiled grammars for one vocabulary (``info``: a function that builds xgrammar's
    ``TokenizerInfo``, called once, when the first grammar is compiled)."""

    def __init__(self, info: Callable[[Any], Any], vocab_size: int, stop_ids: Sequence[int]) -> None:
        self._info = info
        self.vocab_size = vocab_size
        self.stop_ids = frozenset(stop_ids)
        self._compiler: Any = None
        self._lock = threading.Lock()

    @classmethod
    def for_tokenizer(cls, tokenizer: Any, vocab_size: int, stop_ids: Sequence[int]) -> Grammars:
        """A Hugging Face tokenizer's vocabulary (padded to the model's ``vocab_size``)."""
        ids = sorted(set(stop_ids))
        return cls(
            lambda xgr: xgr.TokenizerInfo.from_huggingface(
                tokenizer, vocab_size=vocab_size, stop_token_ids=ids or None
            ),
            vocab_size,
            ids,
        )

    @classmethod
    def for_strings(cls, vocabulary: Sequence[str], stop_ids: Sequence[int]) -> Grammars:
        """A vocabulary of literal strings (token id = index; the reference engine's)."""
        ids = sorted(set(stop_ids))
        vocab = list(vocabulary)
        return cls(
            lambda xgr: xgr.TokenizerInfo(
                vocab, vocab_type=xgr.VocabType.RAW, vocab_size=len(vocab), stop_token_ids=ids or None
            ),
            len(vocab),
            ids,
        )

    def compiled(self, grammar: tuple[str, str]) -> Any:
        """xgrammar's compiled grammar of ("regex" | "json_schema" | "ebnf", source), from the
        compiler's own cache (bounded: :data:`CACHE_BYTES`); an EngineError when xgrammar refuses it."""
        xgr = xgrammar()
        with self._lock:
            if self._compiler is None:
                self._compiler = xgr.GrammarCompiler(self._info(xgr), cache_limit_bytes=CACHE_BYTES)
        kind, source = grammar
        compiler = self._compiler
        compile_ = {
            "regex": compiler.compile_regex,
            "json_schema": lambda text: compiler.compile_json_schema(text, any_whitespace=True),
            "ebnf": compiler.compile_grammar,
            "structural_tag": lambda text: compiler.compile_structural_tag(_structural_tag(xgr, text)),
        }.get(kind)  # the kinds of presto_sgl.constraints.GRAMMARS xgrammar compiles
        if compile_ is None:
            raise EngineError(f"the grammar library here has no compiler for {kind} constraints")
        try:
            return compile_(source)
        except Exception as e:  # RuntimeError for a bad grammar; UnicodeError, ValueError for bad text
            raise EngineError(f"the grammar library cannot compile the {kind} {source!r}: {e}") from None

    def start(self, request: Request) -> RowMask | None:
        """The mask of ``request``'s constraint, resumed over its response prefix (None: none)."""
        c = request.constraint
        if c is None:
            return None
        matcher = None
        if c.grammar is not None:
            matcher = xgrammar().GrammarMatcher(self.compiled(c.grammar))
        response = request.prefix[len(request.prefix) - request.resume :] if request.resume else ()
        return RowMask(self, c, matcher, frozenset(request.stop), response=response)

    def violation(self, request: Request, tokens: Sequence[int]) -> int | None:
        """The index of the first of ``tokens`` (a response continuing ``request``'s prefix) that its
        constraint forbids, or None: a server engine's check that the server masked its draws
        (about 1 µs per token)."""
        mask = self.start(request)
        return None if mask is None else mask.violation(tokens)


class RowMask:
    """One request's constraint state: the tokens allowed next, and advancing by one token."""

    def __init__(
        self, grammars: Grammars, constraint: Constraint, matcher: Any, stop: frozenset[int], *, response: Sequence[int]
    ) -> None:
        self.constraint = constraint
        self.vocab_size = grammars.vocab_size
        self.stop = stop
        self.grammar_stops = grammars.stop_ids
        self.matcher = matcher
        self.length = 0
        self._bitmask: Any = None
        if matcher is not None:
            self._bitmask = xgrammar().allocate_token_bitmask(1, grammars.vocab_size)
        for i, t in enumerate(response):
            if t in stop or not self._advance(t):
                raise EngineError(
                    f"response token {i} (id {t}) of the request's prefix is not allowed by the constraint "
                    f"{constraint.describe()}: the kept prefix must lie in the constraint's language"
                )

    def allowed(self) -> np.ndarray:
        """Boolean mask over the vocabulary of the tokens allowed next."""
        if self.matcher is None:
            mask = np.ones(self.vocab_size, dtype=bool)
            can_end = True
        else:
            self.matcher.fill_next_token_bitmask(self._bitmask)
            bits = np.unpackbits(self._bitmask.numpy().view(np.uint8), bitorder="little")
            mask = bits[: self.vocab_size].astype(bool)
            can_end = any(mask[s] for s in self.grammar_stops if s < self.vocab_size)
            for s in self.grammar_stops:
                if s < self.vocab_size:
                    mask[s] = False
        end = can_end and self.length >= self.constraint.min_tokens
        for s in self.stop:
            if s < self.vocab_size:
                mask[s] = end
        if not mask.any():
            raise EngineError(
                f"the constraint {self.constraint.describe()} allows no next token after {self.length} response "
                "tokens: the grammar cannot be completed with this vocabulary within the request"
            )
        return mask

    def accept(self, token: int) -> None:
        """Advance past the drawn ``token`` (one the last :meth:`allowed` allowed)."""
        if token not in self.stop and not self._advance(token):
            raise EngineError(f"the grammar refused token {token}, which its own mask allowed")

    def violation(self, tokens: Sequence[int]) -> int | None:
        """The index of the first of ``tokens`` that :meth:`allowed` would not have allowed in turn
        (a stop token: only last, where the grammar may end, after ``min_tokens``), or None."""
        for i, t in enumerate(tokens):
            if t in self.stop:
                ends = self.matcher is None or (t in self.grammar_stops and bool(self.matcher.accept_token(t)))
                return None if ends and self.length >= self.constraint.min_tokens and i == len(tokens) - 1 else i
            if t in self.grammar_stops or not self._advance(t):
                return i
        return None

    def _advance(self, token: int) -> bool:
        self.length += 1
        return self.matcher is None or bool(self.matcher.accept_token(token))


def _structural_tag(xgr: Any, text: str) -> Any:
    """A structural tag as SGLang's xgrammar backend compiles it (``dispatch_structural_tag``):
    the form with ``structures`` and ``triggers`` through xgrammar's legacy constructor, the one
    with ``format`` as its JSON text; a missing schema is any JSON."""
    tag = json.loads(text)
    if "structures" not in tag:
        _any_schema(tag["format"])
        return json.dumps(tag)
    items = [
        xgr.StructuralTagItem(begin=s["begin"], schema=json.dumps(s.get("schema") or {}), end=s["end"])
        for s in tag["structures"]
    ]
    new = xgr.StructuralTag.from_legacy_structural_tag(items, tag["triggers"])
    new.format.at_least_one = tag.get("at_least_one", False)
    return new


def _any_schema(fmt: Any) -> None:
    """A ``format``'s JSON parts with no schema take any JSON (as SGLang fills them in)."""
    if not isinstance(fmt, dict):
        return
    if fmt.get("type") in ("json_schema", "qwen_xml_parameter") and fmt.get("json_schema") is None:
        fmt["json_schema"] = {}
    for child in (fmt.get("content"), *fmt.get("elements", ()), *fmt.get("tags", ())):
        _any_schema(child)

"""Structured power sampling written from its definition (docs/design.md §2.2), for the
enumerated tests (tests/exactness/test_structured_target.py).

A language over a small alphabet is given by an independent validator (Python ``re`` or
``json`` + ``jsonschema``, never xgrammar). After response text s (the prompt excluded):

* a non-stop token t is allowed iff s + t is *viable*: some string of at most ``DEPTH``
  more characters completes it into the language (each language here completes any
  viable prefix within 2 characters, so DEPTH = 3 decides viability exactly);
* the stop token is allowed iff s is complete (in the language) and has ``min_tokens``.

:class:`MaskedLM` is the reference LM seen through that mask: ``distribution`` returns the raw
log p0, and log q_tau restricted to the allowed tokens and renormalized (-inf elsewhere), so
``tests/support/exact.py``'s matrices, written over it, are the constrained kernels'.
"""

from __future__ import annotations

import functools
import itertools
import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import jsonschema
import numpy as np

from presto_sgl.engines.reference import ReferenceEngine, ReferenceLM

DEPTH = 3


@dataclass(frozen=True)
class Language:
    """A language over ``alphabet`` (token id = index; ``stop`` the stop token's id)."""

    name: str
    alphabet: str
    stop: int
    complete: Callable[[str], bool]
    min_tokens: int = 0

    @functools.cached_property
    def letters(self) -> str:
        return "".join(ch for i, ch in enumerate(self.alphabet) if i != self.stop)

    @functools.cache  # noqa: B019  # a handful of frozen languages, kept for the session
    def viable(self, text: str) -> bool:
        """Some extension of at most DEPTH characters lies in the language."""
        return any(
            self.complete(text + "".join(w))
            for n in range(DEPTH + 1)
            for w in itertools.product(self.letters, repeat=n)
        )

    def allowed(self, response: Sequence[int]) -> np.ndarray:
        """The tokens allowed after ``response`` (token ids, no stop token among them)."""
        text = self.decode(response)
        mask = np.array([i != self.stop and self.viable(text + ch) for i, ch in enumerate(self.alphabet)])
        mask[self.stop] = self.complete(text) and len(response) >= self.min_tokens
        return mask

    def decode(self, tokens: Sequence[int]) -> str:
        return "".join(self.alphabet[t] for t in tokens)

    def accepts(self, tokens: Sequence[int], horizon: int) -> bool:
        """A returned response is in the constrained space: it ends at the stop token after a
        complete string with ``min_tokens``, or is a viable prefix cut at ``horizon``."""
        if tokens and tokens[-1] == self.stop:
            body = tokens[:-1]
            return self.stop not in body and self.complete(self.decode(body)) and len(body) >= self.min_tokens
        return len(tokens) == horizon and self.stop not in tokens and self.viable(self.decode(tokens))


def regex_language(pattern: str, alphabet: str, stop: int, min_tokens: int = 0) -> Language:
    return Language(f"regex {pattern}", alphabet, stop, lambda s: re.fullmatch(pattern, s) is not None, min_tokens)


def json_language(schema: dict, alphabet: str, stop: int) -> Language:
    def complete(s: str) -> bool:
        try:
            jsonschema.validate(json.loads(s), schema)
        except (json.JSONDecodeError, jsonschema.ValidationError):
            return False
        return True

    return Language(f"json {json.dumps(schema)}", alphabet, stop, complete)


class MaskedLM:
    """``lm`` with q_tau masked by ``language`` after ``prompt_length`` prompt tokens (log p0 raw)."""

    def __init__(self, lm: ReferenceLM, prompt_length: int, language: Language) -> None:
        self.lm, self.prompt_length, self.language = lm, prompt_length, language
        self.vocab_size = lm.vocab_size

    def distribution(self, context: Sequence[int], temperature: float = 1.0):
        logp, logq, _ = self.lm.distribution(context, temperature)
        allowed = self.language.allowed(tuple(context[self.prompt_length :]))
        if not allowed.any():  # a state outside the language: nothing can follow
            return logp, np.full_like(logq, -np.inf), np.zeros_like(logq)
        lq = np.where(allowed, logq, -np.inf)
        lq = lq - np.logaddexp.reduce(lq[allowed])
        return logp, lq, np.cumsum(np.exp(lq))

    score = ReferenceLM.score  # summed over positions of this class's (masked) distribution


def reference_engine(lm: ReferenceLM, language: Language, seeded: bool = True, rng_seed: int | None = None):
    """The library's reference engine over the language's alphabet (its stop token the model's)."""
    return ReferenceEngine(
        lm, seeded=seeded, rng_seed=None if seeded else rng_seed, stop_ids=(language.stop,), alphabet=language.alphabet
    )


# -- real models: the masked float32 forward a constrained draw is checked against ----------------


def masked_forward(model, tokenizer, constraint, prefix, resume, tokens, tau, stop, temps=()):
    """Per-token (log q_tau masked by ``constraint``, log p0 unmasked, the masked log q_t at each of
    ``temps``) of ``tokens`` after ``prefix`` from one full float32 forward of ``model``; the mask
    is xgrammar's own matcher (SGLang's grammar library, used directly), resumed over the last
    ``resume`` prefix tokens, with ``stop`` as its stop tokens (allowed where the grammar may end)."""
    import torch
    import xgrammar as xgr

    vocab = model.config.vocab_size
    info = xgr.TokenizerInfo.from_huggingface(tokenizer, vocab_size=vocab, stop_token_ids=sorted(stop))
    compiler = xgr.GrammarCompiler(info)
    kind, source = constraint.grammar
    compile_ = {
        "regex": compiler.compile_regex,
        "ebnf": compiler.compile_grammar,
        "structural_tag": lambda text: compiler.compile_structural_tag(_structural_tag(xgr, text)),
    }.get(kind, compiler.compile_json_schema)
    grammar = compile_(source)
    matcher = xgr.GrammarMatcher(grammar)
    for t in prefix[len(prefix) - resume :]:
        assert matcher.accept_token(t)
    with torch.no_grad():
        logits = model(torch.tensor([list(prefix) + list(tokens)])).logits[0].float()
    rows = logits[len(prefix) - 1 : len(prefix) - 1 + len(tokens)]
    bitmask = xgr.allocate_token_bitmask(1, vocab)
    lq, lp, at = [], [], []
    for row, t in zip(rows, tokens):
        matcher.fill_next_token_bitmask(bitmask)
        logq = []
        for temp in (tau, *temps):
            masked = (row / temp).clone()[None, :]
            xgr.apply_token_bitmask_inplace(masked, bitmask)
            logq.append(float(torch.log_softmax(masked[0], -1)[t]))
        lq.append(logq[0])
        at.append(tuple(logq[1:]))
        lp.append(float(torch.log_softmax(row, -1)[t]))
        assert matcher.accept_token(t), f"token {t} outside the grammar"
    return lq, lp, at


def assert_resumed_masked(engine, model, tokenizer, constraint, prompt, pattern: str, lengths=(12, 10)) -> None:
    """An answer under ``constraint`` drawn (``lengths[0]`` tokens at most), then resumed 2 tokens in
    (``lengths[1]`` more at tau 0.5): masked log q and raw log p0 as :func:`masked_forward` gives
    them; an answer that ended is a full match of ``pattern`` (Python ``re``)."""
    from presto_sgl.engines.base import Request
    from tests.support.forward import TOL

    stop = engine.text.stop_ids
    (first,) = engine.generate([Request(prompt, lengths[0], 1.0, None, stop=stop, constraint=constraint)])
    k = 2
    resumed = Request(prompt + first.tokens[:k], lengths[1], 0.5, None, stop=stop, constraint=constraint, resume=k)
    (comp,) = engine.generate([resumed])
    lq, lp, _ = masked_forward(model, tokenizer, constraint, resumed.prefix, k, comp.tokens, 0.5, stop)
    assert max(abs(a - b) for a, b in zip(lq, comp.logq)) < TOL / 0.5
    assert max(abs(a - b) for a, b in zip(lp, comp.logp)) < TOL
    text = engine.text.decode([t for t in first.tokens[:k] + comp.tokens if t not in stop])
    assert comp.tokens[-1] not in stop or re.fullmatch(pattern, text), text


def _structural_tag(xgr, text: str):
    """A structural tag as xgrammar takes it: the ``format`` form as its JSON text, the form
    with ``structures`` and ``triggers`` through xgrammar's own legacy constructor."""
    tag = json.loads(text)
    if "structures" not in tag:
        return text
    items = [
        xgr.StructuralTagItem(begin=s["begin"], schema=json.dumps(s["schema"]), end=s["end"]) for s in tag["structures"]
    ]
    return xgr.StructuralTag.from_legacy_structural_tag(items, tag["triggers"])

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
    is xgrammar's own matcher (SGLang's and vLLM's grammar library, used directly), resumed over
    the last ``resume`` prefix tokens (the response's first), with ``stop`` as its stop tokens
    (allowed where the grammar may end, and not before the response has ``min_tokens``)."""
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
    for i, (row, t) in enumerate(zip(rows, tokens)):
        matcher.fill_next_token_bitmask(bitmask)
        masked = row.clone()[None, :]
        xgr.apply_token_bitmask_inplace(masked, bitmask)
        if resume + i < constraint.min_tokens:  # no stop token before the response has min_tokens
            masked[0, sorted(stop)] = float("-inf")
        logq = [float(torch.log_softmax(masked[0] / temp, -1)[t]) for temp in (tau, *temps)]
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


# -- the JSON-schema checks both servers' structured suites run -------------------------------------

PERSON = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
    "required": ["name", "age"],
}
QUESTION = "Give a JSON object with a person's name and age."


def person_config(rule: str, kernel: str = "powermh"):
    """(PowerConfig, PrestoConfig) of ``rule`` under the PERSON schema: K = 12 over 48 tokens in
    blocks of 16, alpha 4, the EOS-terminated target."""
    from presto_sgl import PowerConfig, sampling_configs
    from presto_sgl.config import Target
    from presto_sgl.constraints import Constraint

    cfg, presto = sampling_configs(
        rule, method=kernel, ending="eos", alpha=4.0, max_new_tokens=48, block_size=16, steps=4
    )
    t = cfg.target
    target = Target(t.alpha, t.max_new_tokens, t.block_size, "eos", constraint=Constraint(json_schema=PERSON))
    return PowerConfig(target, cfg.kernel), presto


def person_valid(engine, tokens) -> bool:
    """The response (stop tokens dropped) is a JSON object of the PERSON schema (``jsonschema``)."""
    stop = engine.text.stop_ids
    text = engine.text.decode([t for t in tokens if t not in stop])
    try:
        jsonschema.validate(json.loads(text), PERSON)
    except (json.JSONDecodeError, jsonschema.ValidationError):
        return False
    return True


def assert_logq_at(temps, want, got) -> None:
    """Per-token log q at each of ``temps`` (rows of one value per temperature) within TOL / t."""
    from tests.support.forward import TOL

    for t, w, g in zip(temps, zip(*want), zip(*got)):
        assert max(abs(a - b) for a, b in zip(w, g)) < TOL / t


RESUMED_TEMPS = (0.25, 0.5, 1.0)  # MultiTryMH's default try temperatures, asked per request


def resumed_json_requests(engine):
    """An answer under the PERSON schema, then two draws resumed 5 tokens into it (inside the object:
    a restarted grammar would allow only "{" there) at tau 1 and 0.5, each asking for the masked log
    q at :data:`RESUMED_TEMPS`: the requests (run them, alone or beside other traffic, and check them
    with :func:`assert_resumed_json_masked`)."""
    from presto_sgl.constraints import Constraint
    from presto_sgl.engines.base import Request

    prompt = tuple(engine.chat_prompt(QUESTION))
    c, stop = Constraint(json_schema=PERSON), engine.text.stop_ids
    (first,) = engine.generate([Request(prompt, 48, 1.0, None, stop=stop, constraint=c)])
    assert person_valid(engine, first.tokens) or len(first.tokens) == 48
    k = 5
    return [
        Request(
            prompt + first.tokens[:k], 40, tau, 7, stop=stop, constraint=c, resume=k, score_temperatures=RESUMED_TEMPS
        )
        for tau in (1.0, 0.5)
    ]


def assert_resumed_json_masked(engine, model, reqs, comps) -> None:
    """Each resumed draw's masked log q, raw log p0 and masked log q at each score temperature are
    :func:`masked_forward`'s; an answer that ended validates."""
    from transformers import AutoTokenizer

    from tests.support.forward import TOL

    tok = AutoTokenizer.from_pretrained(engine.model_path)
    for req, comp in zip(reqs, comps, strict=True):
        c, k, stop, temps = req.constraint, req.resume, req.stop, req.score_temperatures
        lq, lp, at = masked_forward(model, tok, c, req.prefix, k, comp.tokens, req.temperature, stop, temps)
        assert max(abs(a - b) for a, b in zip(lq, comp.logq)) < TOL / req.temperature
        assert max(abs(a - b) for a, b in zip(lp, comp.logp)) < TOL
        assert_logq_at(temps, at, comp.logq_at)
        assert comp.tokens[-1] not in stop or person_valid(engine, req.prefix[-k:] + comp.tokens)


def assert_chain_masked(engine, model, result, temps=()) -> None:
    """A chain's state under the PERSON schema, as :func:`masked_forward` scores its whole response:
    raw log p0 and, at ``temps`` (MultiTryMH's), the masked log q; the response validates (or is
    a prefix cut at the cap)."""
    from transformers import AutoTokenizer

    from presto_sgl.constraints import Constraint
    from tests.support.forward import TOL

    tok, st, c = AutoTokenizer.from_pretrained(engine.model_path), result.state, Constraint(json_schema=PERSON)
    assert person_valid(engine, st.tokens) or len(st.tokens) == 48, engine.text.decode(st.tokens)
    _, lp, at = masked_forward(model, tok, c, st.prompt, 0, st.tokens, 1.0, engine.text.stop_ids, temps)
    assert max(abs(a - b) for a, b in zip(lp, st.logp)) < TOL
    assert_logq_at(temps, at, st.logq_at or ())


def resumed_cases():
    """Grammar kinds beyond a regex and a schema, each (constraint, question, full-match pattern):
    an EBNF grammar, and a structural tag (its ``format`` form: a tool call, a tagged JSON object)."""
    from presto_sgl.constraints import Constraint

    call = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
    tag = {"type": "tag", "begin": "<tool>", "content": {"type": "json_schema", "json_schema": call}, "end": "</tool>"}
    return {
        "ebnf": (
            Constraint(ebnf='root ::= ("Yes" | "No") ", because " [a-z ]+ "."'),
            "Is the sky blue? Answer Yes or No and say why.",
            r"(Yes|No), because [a-z ]+\.",
        ),
        "structural_tag": (
            Constraint(structural_tag={"format": tag}),
            "Call the weather tool for Paris.",
            r"<tool>\s*\{[\s\S]*\}\s*</tool>",
        ),
    }

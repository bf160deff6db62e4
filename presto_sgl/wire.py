"""The wire format between presto-sgl's server plugins and its client engines (standard library only).

The one leaf module both sides import: the server-side plugins
(:mod:`presto_sgl.server_side`) write these names and layouts, the client engines
(:mod:`presto_sgl.engines`) read them; neither imports the other.

Both plugins
    ``SGLANG_PLUGIN`` / ``VLLM_PLUGIN``: the entry point names (``pyproject.toml``) that
    ``SGLANG_PLUGINS`` / ``VLLM_PLUGINS`` select.

    Opt-in per request: a plugin computes nothing for a request that does not carry
    ``FIELDS_KEY`` (SGLang: in ``sampling_params.custom_params``; vLLM: in ``vllm_xargs``),
    and that request gets exactly what the server gives without the plugin. The value,
    :func:`ask` / :func:`parse_ask`, names what the request needs beside log p0 (always):
    the p0 entropy (EntropyCut) and the score temperatures of the log-normalizers
    (MultiTryMH's own), e.g. ``"entropy|0.25,0.5,1.0"``, ``"|"`` (log p0 only).

SGLang (``meta_info`` of each ``/generate`` answer of a request that asked, one value per
output token)
    ``RAW_LOGPROB_KEY``: log p0 of the sampled token (before temperature);
    ``RAW_ENTROPY_KEY`` (asked): the p0 entropy; ``LOGNORM_KEY`` followed by the asked score
    temperatures (``masked_lognorm@0.25,0.5,1.0``): per token, the log-normalizers
    Z_t = log sum_u p0(u)^(1/t) at each of them, u over the tokens the row's mask allows
    (every token without a constraint).

SGLang grammar resume (a ``/generate`` request)
    ``sampling_params.custom_params[GRAMMAR_RESUME_KEY] = k`` (k >= 0) beside SGLang's own
    ``regex`` / ``json_schema`` / ``ebnf``: the last k of ``input_ids`` are a response prefix,
    and the grammar resumes after them (:mod:`presto_sgl.server_side.sglang.grammar`); a
    prefix the grammar rejects aborts the request.

vLLM (the logprobs of each output token, sampled id s in a vocabulary of V)
    A request that asks (``FIELDS_KEY``) with m score temperatures and ``logprobs = width(m)``
    gets the sampled entry as log p0(s), raw, and top entry i (i = 0, 1, ...) under the token
    id (s + 1 + i) mod V (``field_ids``), never s itself:
    0: SIGNATURE + m (a stock server's logprobs are <= 0, so a positive value proves the plugin);
    1: log q_T(s) at the request's own temperature T, from the same logits row;
    2: the p0 entropy at this position (asked), else ``NOT_ASKED``;
    3 .. 3+m-1: the score temperatures t_1..t_m;
    3+m .. 3+2m-1: the log-normalizers Z_t.

Either way log q_t(s) = log p0(s) / t - Z_t (MultiTryMH's temperature mixture).
"""

from __future__ import annotations

from collections.abc import Sequence

SGLANG_PLUGIN = "presto_raw_logprob"
VLLM_PLUGIN = "presto_onepass"

FIELDS_KEY = "presto_fields"
"""Per-request key (SGLang ``custom_params``, vLLM ``vllm_xargs``): the request asks for presto's fields."""
NOT_ASKED = -1.0
"""The vLLM entropy field of a request that did not ask for it (an entropy is >= 0)."""

RAW_LOGPROB_KEY = "raw_logprob"
RAW_ENTROPY_KEY = "raw_entropy"
LOGNORM_KEY = "masked_lognorm@"
"""Prefix of the per-token log-normalizer key; the score temperatures follow it (named apart from
the unmasked ``raw_lognorm@`` of plugins before MultiTryMH under a constraint, which clients refuse)."""
PRESTO_KEYS = (RAW_LOGPROB_KEY, RAW_ENTROPY_KEY, LOGNORM_KEY)
"""The prefixes of every ``meta_info`` key the SGLang plugin writes (only into answers that asked)."""
GRAMMAR_RESUME_KEY = "presto_resume"
"""``custom_params`` key: how many trailing input ids the request's grammar consumes first."""

SIGNATURE = 10000.0
FIXED = 3  # signature, log q at the request's temperature, entropy


def ask(entropy: bool, temperatures: Sequence[float] = ()) -> str:
    """The ``FIELDS_KEY`` value of a request that needs log p0, and the entropy and the
    log-normalizers at ``temperatures`` when asked (:func:`parse_ask` reads it back)."""
    return ("entropy" if entropy else "") + "|" + ",".join(repr(float(t)) for t in temperatures)


def parse_ask(value: object) -> tuple[bool, tuple[float, ...]]:
    """(entropy asked, score temperatures) of a ``FIELDS_KEY`` value; ValueError when malformed
    (a temperature must be finite and > 0)."""
    if not isinstance(value, str) or value.count("|") != 1:
        raise ValueError(f"{FIELDS_KEY} must be 'entropy|t1,t2,...' or '|' (see presto_sgl.wire), got {value!r}")
    flag, temps = value.split("|")
    if flag not in ("", "entropy"):
        raise ValueError(f"{FIELDS_KEY}: the part before '|' must be 'entropy' or empty, got {flag!r}")
    out = tuple(float(t) for t in temps.split(",")) if temps else ()
    if not all(0 < t < float("inf") for t in out):
        raise ValueError(f"{FIELDS_KEY}: score temperatures must be finite and > 0, got {temps!r}")
    return flag == "entropy", out


def lognorm_key(temperatures: Sequence[float]) -> str:
    """The SGLang ``meta_info`` key of the log-normalizers at ``temperatures`` (``masked_lognorm@0.25,0.5``)."""
    return LOGNORM_KEY + ",".join(repr(float(t)) for t in temperatures)


def width(m: int) -> int:
    """The ``logprobs`` count that carries every field for m score temperatures."""
    return FIXED + 2 * m


def field_ids(sampled: int, n: int, vocab_size: int) -> list[int]:
    """Token ids under which the first n fields travel."""
    return [(sampled + 1 + i) % vocab_size for i in range(n)]

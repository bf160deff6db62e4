"""presto-sgl's SGLang plugin as a guest in a shared server (a real fp32 SGLang server,
PRESTO_SGL_SGLANG_URL): presto rows and other users' rows in one batch.

Other users' rows (tests/support/guest.py: top-p / top-k / min-p, penalties, a logit bias, a
grammar, and an ``n`` = 2 request beside the batch) get no presto field and the same tokens and
log-probabilities as when they run without presto rows; the presto rows, resumed mid-response,
two under a JSON schema (at tau 1 and 0.5), are the fp32 model's: log p0, SGLang's log q_tau (masked under the
schema), the entropy and the masked log-normalizers, each only where asked.
"""

from __future__ import annotations

import threading

import pytest

from tests.support.forward import TOL, assert_extras_match, assert_scores_match, reference
from tests.support.guest import (
    LOGIT_BIAS_TEXT,
    ORDINARY_PROMPTS,
    assert_same_answers,
    ordinary_params,
    presto_keys,
)

pytestmark = pytest.mark.sglang
TEMPS = (0.25, 0.5, 1.0)
N = 12


def _ordinary(engine):
    tok = engine.text
    bias_id = tok.encode(LOGIT_BIAS_TEXT)[-1]
    ids = [list(engine.chat_prompt(q)) for q in ORDINARY_PROMPTS]
    params = [{"temperature": 0.0, "max_new_tokens": N, **extra} for extra in ordinary_params(bias_id)]
    return ids, params


def _post(engine, ids, params):
    from presto_sgl.engines.server import http_json

    body = {"input_ids": ids, "sampling_params": params, "return_logprob": True}
    return http_json("POST", engine.url + "/generate", body, 600)


def _answers(results):
    return [(r["output_ids"], [e[0] for e in r["meta_info"]["output_token_logprobs"]]) for r in results]


def test_presto_rows_and_ordinary_rows_in_one_batch(engine, hf_model):
    from presto_sgl.engines.base import Request
    from tests.support.structured import assert_resumed_json_masked, resumed_json_requests

    ids, params = _ordinary(engine)
    alone = _post(engine, ids, params)
    for r in alone:
        assert presto_keys(r["meta_info"]) == []

    prompt = tuple(engine.chat_prompt("Name a prime number."))
    (first,) = engine.generate([Request(prompt, 4, 1.0)])
    resumed = prompt + first.tokens  # presto rows resume mid-response
    presto = [
        Request(resumed, N, 0.7),  # PowerMH: log p0 only
        Request(resumed, N, 1.0, return_entropy=True, score_temperatures=TEMPS),  # EntropyCut + MultiTryMH
        *resumed_json_requests(engine),  # MultiTryMH under a JSON schema, resumed inside the object, tau 1 and 0.5
    ]
    n2: dict = {}
    beside = threading.Thread(target=lambda: n2.update(answers=_n2(engine, ids[0])))  # another user's n = 2
    beside.start()
    mixed = _post(engine, [list(r.prefix) for r in presto] + ids, [engine.params(r) for r in presto] + params)
    beside.join(600)
    got, others = mixed[: len(presto)], mixed[len(presto) :]

    for r in others:  # other users: nothing of presto's, the same answers as without presto rows
        assert presto_keys(r["meta_info"]) == []
    assert_same_answers(_answers(alone), _answers(others))
    assert n2["answers"] and all(presto_keys(a["meta_info"]) == [] for a in n2["answers"])

    pm, mt, *structured = got
    assert presto_keys(pm["meta_info"]) == ["raw_logprob"]  # PowerMH asked for log p0 only
    toks = pm["output_ids"]
    assert_scores_match(hf_model, resumed, toks, pm["meta_info"]["raw_logprob"])
    lq, _ = reference(hf_model, resumed, toks, 0.7)
    assert max(abs(a - e[0]) for a, e in zip(lq, pm["meta_info"]["output_token_logprobs"])) < TOL / 0.7

    assert presto_keys(mt["meta_info"]) == ["masked_lognorm@0.25,0.5,1.0", "raw_entropy", "raw_logprob"]
    comp = _completion(mt, TEMPS)
    assert_scores_match(hf_model, resumed, comp.tokens, comp.logp)
    assert_extras_match(hf_model, resumed, comp.tokens, comp.logq_at, TEMPS, mt["meta_info"]["raw_entropy"])

    assert all(presto_keys(r["meta_info"]) == ["masked_lognorm@0.25,0.5,1.0", "raw_logprob"] for r in structured)
    assert_resumed_json_masked(engine, hf_model, presto[2:], [_completion(r, TEMPS) for r in structured])


def _completion(answer, temps):
    """A presto row's raw answer as the client reads it: tokens, log q_tau, log p0, log q_t."""
    from presto_sgl.engines.base import Completion

    meta = answer["meta_info"]
    logp = meta["raw_logprob"]
    at = [tuple(lp / t - z for t, z in zip(temps, zs)) for lp, zs in zip(logp, meta["masked_lognorm@0.25,0.5,1.0"])]
    logq = [e[0] for e in meta["output_token_logprobs"]]
    return Completion(tuple(answer["output_ids"]), tuple(logq), tuple(logp), logq_at=tuple(at))


def _n2(engine, ids):
    from presto_sgl.engines.server import http_json

    res = http_json(
        "POST",
        engine.url + "/generate",
        {"input_ids": ids, "sampling_params": {"temperature": 0.0, "max_new_tokens": N, "n": 2}},
        600,
    )
    return res if isinstance(res, list) else [res]

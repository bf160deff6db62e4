"""presto-sgl's SGLang plugin as a guest in a shared server (a real fp32 SGLang server,
PRESTO_SGL_SGLANG_URL): presto rows and other users' rows in one batch.

Other users' rows (tests/support/guest.py: top-p / top-k / min-p, penalties, a logit bias, a
grammar, and an ``n`` = 2 request beside the batch) get no presto field and the same tokens and
log-probabilities as when they run without presto rows; the presto rows, resumed mid-response,
one under a JSON schema, are the fp32 model's: log p0, SGLang's log q_tau (masked under the
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


@pytest.fixture(scope="module")
def eng(server_url):
    from presto_sgl.engines.sglang.http import SGLangEngine

    e = SGLangEngine(server_url)
    if e.mode != "one-pass":
        pytest.fail("the shared SGLang server does not load presto-sgl's plugin")
    return e


def _ordinary(eng):
    tok = eng.text
    bias_id = tok.encode(LOGIT_BIAS_TEXT)[-1]
    ids = [list(eng.chat_prompt(q)) for q in ORDINARY_PROMPTS]
    params = [{"temperature": 0.0, "max_new_tokens": N, **extra} for extra in ordinary_params(bias_id)]
    return ids, params


def _post(eng, ids, params):
    from presto_sgl.engines.server import http_json

    body = {"input_ids": ids, "sampling_params": params, "return_logprob": True}
    return http_json("POST", eng.url + "/generate", body, 600)


def _answers(results):
    return [(r["output_ids"], [e[0] for e in r["meta_info"]["output_token_logprobs"]]) for r in results]


def test_presto_rows_and_ordinary_rows_in_one_batch(eng, hf_model):
    from presto_sgl.constraints import Constraint
    from presto_sgl.engines.base import Request
    from tests.support.structured import PERSON, QUESTION, assert_logq_at, masked_forward

    ids, params = _ordinary(eng)
    alone = _post(eng, ids, params)
    for r in alone:
        assert presto_keys(r["meta_info"]) == []

    prompt = tuple(eng.chat_prompt("Name a prime number."))
    (first,) = eng.generate([Request(prompt, 4, 1.0)])
    resumed = prompt + first.tokens  # presto rows resume mid-response
    schema_prompt = tuple(eng.chat_prompt(QUESTION))
    c, stop = Constraint(json_schema=PERSON), eng.text.stop_ids
    (start,) = eng.generate([Request(schema_prompt, 6, 1.0, stop=stop, constraint=c)])
    k = min(5, len(start.tokens) - 1)
    presto = [
        Request(resumed, N, 0.7),  # PowerMH: log p0 only
        Request(resumed, N, 1.0, return_entropy=True, score_temperatures=TEMPS),  # EntropyCut + MultiTryMH
        Request(schema_prompt + start.tokens[:k], N, 1.0, stop=stop, constraint=c, resume=k, score_temperatures=TEMPS),
    ]
    n2: dict = {}
    beside = threading.Thread(target=lambda: n2.update(answers=_n2(eng, ids[0])))  # another user's n = 2
    beside.start()
    mixed = _post(eng, [list(r.prefix) for r in presto] + ids, [eng.params(r) for r in presto] + params)
    beside.join(600)
    got, others = mixed[: len(presto)], mixed[len(presto) :]

    for r in others:  # other users: nothing of presto's, the same answers as without presto rows
        assert presto_keys(r["meta_info"]) == []
    assert_same_answers(_answers(alone), _answers(others))
    assert n2["answers"] and all(presto_keys(a["meta_info"]) == [] for a in n2["answers"])

    (pm, mt, st) = got
    assert presto_keys(pm["meta_info"]) == ["raw_logprob"]  # PowerMH asked for log p0 only
    toks = pm["output_ids"]
    assert_scores_match(hf_model, resumed, toks, pm["meta_info"]["raw_logprob"])
    lq, _ = reference(hf_model, resumed, toks, 0.7)
    assert max(abs(a - e[0]) for a, e in zip(lq, pm["meta_info"]["output_token_logprobs"])) < TOL / 0.7

    assert presto_keys(mt["meta_info"]) == ["masked_lognorm@0.25,0.5,1.0", "raw_entropy", "raw_logprob"]
    meta, toks = mt["meta_info"], mt["output_ids"]
    logp = meta["raw_logprob"]
    at = [[lp / t - z for t, z in zip(TEMPS, zs)] for lp, zs in zip(logp, meta["masked_lognorm@0.25,0.5,1.0"])]
    assert_scores_match(hf_model, resumed, toks, logp)
    assert_extras_match(hf_model, resumed, toks, at, TEMPS, meta["raw_entropy"])

    meta, toks = st["meta_info"], st["output_ids"]
    assert presto_keys(meta) == ["masked_lognorm@0.25,0.5,1.0", "raw_logprob"]
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(eng.model_path)
    req = presto[2]
    lq, lp, at_ref = masked_forward(hf_model, tok, c, req.prefix, k, toks, 1.0, stop, TEMPS)
    assert max(abs(a - e[0]) for a, e in zip(lq, meta["output_token_logprobs"])) < TOL
    assert max(abs(a - b) for a, b in zip(lp, meta["raw_logprob"])) < TOL
    at = [
        [lp_ / t - z for t, z in zip(TEMPS, zs)]
        for lp_, zs in zip(meta["raw_logprob"], meta["masked_lognorm@0.25,0.5,1.0"])
    ]
    assert_logq_at(TEMPS, at_ref, at)


def _n2(eng, ids):
    from presto_sgl.engines.server import http_json

    res = http_json(
        "POST",
        eng.url + "/generate",
        {"input_ids": ids, "sampling_params": {"temperature": 0.0, "max_new_tokens": N, "n": 2}},
        600,
    )
    return res if isinstance(res, list) else [res]

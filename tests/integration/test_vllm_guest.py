"""presto-sgl's vLLM plugin as a guest in a shared server (a real fp32 vLLM server,
PRESTO_SGL_VLLM_URL): presto requests and other users' requests in the same batches.

Other users' requests (tests/support/guest.py: top-p / top-k / min-p, penalties, a logit bias, a
grammar, ``n`` = 2; seeded, with ``logprobs: 5``) get vLLM's own top log-probabilities (the fp32
model's, raw) and the same tokens and values as when they run without presto requests; the presto
requests, resumed mid-response, two under a JSON schema (at tau 1 and 0.5), are the fp32 model's.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.support.forward import TOL, assert_extras_match, assert_scores_match, reference
from tests.support.guest import LOGIT_BIAS_TEXT, ORDINARY_PROMPTS, REGEX, assert_same_answers, ordinary_params

pytestmark = pytest.mark.vllm
TEMPS = (0.25, 0.5, 1.0)
N = 12


def _bodies(engine):
    bias_id = engine.text.encode(LOGIT_BIAS_TEXT)[-1]
    out = []
    for i, (q, extra) in enumerate(zip(ORDINARY_PROMPTS, ordinary_params(bias_id), strict=True)):
        if "regex" in extra:
            extra = {"structured_outputs": {"regex": REGEX}}
        body = {"prompt": list(engine.chat_prompt(q)), "max_tokens": N, "temperature": 0.8, "seed": 100 + i}
        out.append({"model": engine.model, "logprobs": 5, "return_tokens_as_token_ids": True, **body, **extra})
    out.append({**out[0], "n": 2, "seed": 99})  # n > 1
    return out


def _run(engine, bodies):
    from presto_sgl.engines.server import http_json

    def post(body):
        return http_json("POST", engine.url + "/v1/completions", body, 600)["choices"]

    with ThreadPoolExecutor(len(bodies)) as pool:
        return list(pool.map(post, bodies))


def _answers(results):
    out = []
    for choices in results:
        for ch in choices:
            lp = ch["logprobs"]
            # every finite top entry by token id (a grammar row's top 5 can hold tokens its mask leaves at
            # -inf, which vLLM reports as -9999 and ties among them break either way)
            tops = [
                sorted((int(t.split(":")[1]), v) for t, v in top.items() if v > -9999) for top in lp["top_logprobs"]
            ]
            ids = [int(t.split(":")[1]) for t in lp["tokens"]]
            out.append((ids + [i for top in tops for i, _ in top], [v for top in tops for _, v in top]))
    return out


def test_presto_and_ordinary_requests_in_the_same_batches(engine, hf_model):
    import torch

    from presto_sgl.engines.base import Request
    from tests.support.structured import assert_resumed_json_masked, resumed_json_requests

    bodies = _bodies(engine)
    alone = _run(engine, bodies)
    prompt = tuple(engine.chat_prompt("Name a prime number."))
    (first,) = engine.generate([Request(prompt, 4, 1.0, 1)])
    resumed = prompt + first.tokens
    presto = [
        Request(resumed, N, 0.7, 3),
        Request(resumed, N, 1.0, 4, return_entropy=True, score_temperatures=TEMPS),
        *resumed_json_requests(engine),  # under a JSON schema, resumed inside the object, tau 1 and 0.5
    ]
    with ThreadPoolExecutor(2) as pool:  # presto's requests and the others', at once
        got = pool.submit(engine.generate, presto)
        mixed = _run(engine, bodies)
        comps = got.result(600)

    assert_same_answers(_answers(alone), _answers(mixed))
    for body, choices in zip(bodies, mixed, strict=True):  # vLLM's own top-5 log p0 (raw), not presto's fields
        if "structured_outputs" in body or "logit_bias" in body:
            continue  # the top entries are raw log p0 of the unbiased model either way; checked on the others
        for ch in choices:
            toks = [int(t.split(":")[1]) for t in ch["logprobs"]["tokens"]]
            with torch.no_grad():
                logits = hf_model(torch.tensor([body["prompt"] + toks])).logits[0].float()
            rows = torch.log_softmax(logits[len(body["prompt"]) - 1 : -1], -1)
            for row, top in zip(rows, ch["logprobs"]["top_logprobs"], strict=True):
                for t, v in top.items():
                    assert abs(float(row[int(t.split(":")[1])]) - v) < TOL

    pm, mt, *structured = comps
    assert pm.entropy is None and pm.logq_at is None
    assert_scores_match(hf_model, resumed, pm.tokens, pm.logp)
    lq, _ = reference(hf_model, resumed, pm.tokens, 0.7)
    assert max(abs(a - b) for a, b in zip(lq, pm.logq)) < TOL / 0.7
    assert_scores_match(hf_model, resumed, mt.tokens, mt.logp)
    assert_extras_match(hf_model, resumed, mt.tokens, mt.logq_at, TEMPS, mt.entropy)
    assert_resumed_json_masked(engine, hf_model, presto[2:], structured)

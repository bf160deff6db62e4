"""A chain's requests retracted mid-decode by a server under KV pressure stay exact (a real fp32
SGLang server, PRESTO_SGL_SGLANG_URL).

SGLang retracts running requests when its KV pool runs out (``num_retractions`` in the answer) and
re-prefills them later with the tokens they already have; the plugin's per-token values and a
grammar resumed at the response prefix must survive that. The test fills the pool with one call of
many long requests, some under a JSON schema, and checks that the server did retract some and
that every request's log p0 (and masked log q) is the fp32 model's. On a server whose pool is too
large to run out it is skipped: the session's spare server (``spare_sglang_url``) runs with a small
pool, small prefill chunks and mixed chunks, the options a shared server's operator sets.
"""

from __future__ import annotations

import pytest

from tests.support.forward import assert_scores_match

pytestmark = pytest.mark.sglang


def test_retracted_requests_keep_exact_values(spare_sglang_url, hf_model):
    from presto_sgl.engines.base import Request
    from presto_sgl.engines.sglang.http import SGLangEngine
    from tests.support.structured import assert_resumed_json_masked, resumed_json_requests

    eng = SGLangEngine(spare_sglang_url)
    pool = int(eng.server_info().get("max_total_num_tokens") or 0)
    prompt = tuple(eng.chat_prompt("Tell me a long story about a lighthouse keeper."))
    n = 64
    count = pool // (len(prompt) + n) + 8  # more than the pool holds at full length
    if count > 64:
        pytest.skip(f"the server's KV pool ({pool} tokens) is too large to run out in one call")
    structured = resumed_json_requests(eng)
    reqs = [Request(prompt, n, 1.0) for _ in range(count)] + structured
    seen = []
    original = eng._generate

    def spy(items):
        answers = original(items)
        seen.extend(int(a.get("meta_info", {}).get("num_retractions", 0)) for a in answers if isinstance(a, dict))
        return answers

    eng._generate = spy  # type: ignore[method-assign]  # count the server's retractions per answer
    comps = eng.generate(reqs)
    assert sum(seen) > 0, f"no request was retracted ({count} requests of {len(prompt) + n} tokens, pool {pool})"
    for r, c in list(zip(reqs, comps))[: count : max(1, count // 6)]:
        assert_scores_match(hf_model, r.prefix, c.tokens, c.logp)
    assert_resumed_json_masked(eng, hf_model, structured, comps[count:])

"""Many chains through one sampler against a real SGLang server that is killed mid-run
(benchmarks/load.py is the full-size run: 32 prompts, 8 in flight, two kills, the router).

A counting proxy (tests/support/wiretap.py) stands between the engine and the server: per
chain, what the server answered must equal what the chain's trace says it asked -- no
request lost, none duplicated -- across a SIGKILL of the server's process group and its
restart; every chain completes, and every state each chain was in (its trace's ``state``
records) is what a float32 forward of the model scores: no chain advanced on partial data.
The server killed and restarted (``sglang_server.sh restart``: the options of its start) is the
session's spare one (``spare_sglang_url``: fp32, batched attention); skipped without
PRESTO_SGL_SGLANG_URL like the other server tests.
"""

from __future__ import annotations

import threading
import time

import pytest

from tests.support.forward import assert_scores_match
from tests.support.servers import kill_server, server_script
from tests.support.wiretap import Wiretap, asked

pytestmark = pytest.mark.sglang

QUESTIONS = [
    "What is 2 + 3?",
    "Name a prime number.",
    "Say hi.",
    "What is 6 times 7?",
    "Name a color.",
    "What is 9 - 4?",
    "Spell cat.",
    "Count to three.",
]


def test_chains_in_flight_survive_a_killed_server(server_url, spare_sglang_url, hf_model, tmp_path):
    from presto_sgl import sampling_configs
    from presto_sgl.chain.trace import StateReplay, read_trace
    from presto_sgl.engines.sglang.http import SGLangEngine
    from presto_sgl.samplers import Sampler
    from presto_sgl.scheduling.runner import run_prompts

    prompts = [SGLangEngine(server_url).chat_prompt(q) for q in QUESTIONS]
    assert len({tuple(p) for p in prompts}) == len(prompts)
    port = spare_sglang_url.rsplit(":", 1)[1]
    with Wiretap(spare_sglang_url, prompts) as tap:
        engine = SGLangEngine(tap.url, restart_timeout_s=600, max_retries=4)
        cfg, presto = sampling_configs(rule="step", budget=6, alpha=4.0, max_new_tokens=16, block_size=8, steps=3)
        sampler = Sampler(engine, cfg, presto)
        killed = threading.Event()

        def killer() -> None:  # once a third of the chains' first items are answered
            while sum(tap.answered.values()) < 12:
                time.sleep(0.05)
            kill_server("sglang_server.sh", port)
            killed.set()
            server_script("sglang_server.sh", "restart", "--port", port)

        side = threading.Thread(target=killer, daemon=True)
        side.start()
        results = run_prompts(sampler.run, prompts, seed=5, workers=4, trace_dir=tmp_path)
        side.join(900)
        assert killed.is_set() and not side.is_alive()
        lost = tap.lost
        wire = tap.per_chain()
    assert engine.stats.reconnects >= 1 and lost >= 1  # the kill cut calls in flight
    assert [(r.metrics.transitions, r.state.length) for r in results] == [(6, 16)] * len(prompts)
    states = 0
    for i, prompt in enumerate(prompts):
        with open(tmp_path / f"prompt-{i}.jsonl", encoding="utf-8") as f:
            records = read_trace(f)
        assert wire[i] == asked(records), f"chain {i}: the server answered other requests than its trace records"
        replay = StateReplay(tuple(prompt))
        for rec in records:
            if rec["type"] == "state":
                state = replay.apply(rec)
                assert_scores_match(hf_model, state.prompt, state.tokens, state.logp)
                states += 1
    assert states == sum(2 + r.metrics.model_calls for r in results)  # after each extension and each round

"""The vLLM engine's protocol handling against a scripted stand-in server.

The stand-in speaks vLLM's ``/v1/completions`` shapes over the seeded reference engine:
token-id prompts, ``return_tokens_as_token_ids``, per-request seeds, and either the
``presto_onepass`` plugin's logprobs layout (:mod:`presto_sgl.wire`) or a
stock server's (raw logprobs, or temperature-scaled with ``--logprobs-mode
processed_logprobs``; raw ``prompt_logprobs`` for scoring). It checks parsing in both
modes, that a stock raw server is refused, retries decided by the finish reason (abort:
redrawn; stop or a short answer: an error), HTTP errors, a restart mid-call, the metrics
monitor, and bit-exact coupling of sequential and PreSTO through it. The real server is
tested in tests/integration/test_vllm_server.py (``vllm``).
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from presto_sgl import EngineError, Sampler, sampling_configs, wire
from presto_sgl.engines.base import Request
from presto_sgl.engines.reference import ReferenceEngine, ReferenceLM
from presto_sgl.engines.server import EngineHTTPError, EngineUnreachable
from presto_sgl.engines.vllm import layout
from presto_sgl.engines.vllm.http import VLLMEngine

V = 16
TEMPS = (0.25, 0.5, 1.0)


class StandIn:
    """``kind``: "plugin" (presto_onepass: fields for the requests that ask), "stale" (an older
    presto_onepass: every request's logprobs rewritten, at the server's TEMPS), "processed" (stock,
    --logprobs-mode processed_logprobs) or "raw" (stock, vLLM's default)."""

    def __init__(self, tmp_path, kind="plugin"):
        self.lm = ReferenceLM(V, seed=5)
        self.ref = ReferenceEngine(self.lm)
        self.kind = kind
        self.finish: list[str] = []  # finish reasons to answer next (then "length")
        self.short_next = 0
        self.nan_next = 0  # answers whose first log-prob is null
        self.fail_status: int | None = None
        self.fail_message = "no"
        self.revive_s: float | None = None  # after a failure answered: fail_status cleared this much later
        self.drop_next = False
        self.bodies: list[dict] = []
        self.lock = threading.Lock()
        (tmp_path / "config.json").write_text(
            json.dumps({"model_type": "llama", "vocab_size": V, "max_position_embeddings": 64})
        )
        self.model_path = str(tmp_path)
        stand_in = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def _send(self, code, payload, text=False):
                data = (payload if text else json.dumps(payload)).encode()
                self.send_response(code)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                if self.path == "/health":  # vLLM's /health fails while its engine process is gone
                    dead = stand_in.fail_status == 500 and "EngineCore" in stand_in.fail_message
                    self._send(503 if dead else 200, "", text=True)
                elif self.path == "/v1/models":
                    self._send(200, {"data": [{"id": "m", "root": stand_in.model_path, "max_model_len": 48}]})
                elif self.path == "/metrics":
                    self._send(200, METRICS, text=True)
                else:
                    self._send(404, {"error": "not found"})

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with stand_in.lock:
                    stand_in.bodies.append(body)
                    drop, stand_in.drop_next = stand_in.drop_next, False
                if drop:  # a restart: no answer, the connection closes
                    self.close_connection = True
                    return
                if stand_in.fail_status:
                    self._send(stand_in.fail_status, {"error": {"message": stand_in.fail_message}})
                    with stand_in.lock:
                        revive, stand_in.revive_s = stand_in.revive_s, None
                    if revive is not None:
                        threading.Timer(revive, lambda: setattr(stand_in, "fail_status", None)).start()
                    return
                self._send(200, stand_in.answer(body))

        self.server = _Server(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_port}"

    def answer(self, body):
        prompt, n, temp = body["prompt"], body["max_tokens"], body["temperature"]
        with self.lock:
            reason = self.finish.pop(0) if self.finish else "length"
            short, self.short_next = self.short_next > 0, max(0, self.short_next - 1)
            nan, self.nan_next = self.nan_next > 0, max(0, self.nan_next - 1)
        choice: dict = {"finish_reason": reason}
        if body.get("prompt_logprobs") is not None:
            choice["prompt_logprobs"] = [None] + [
                {str(prompt[t]): {"logprob": float(self.lm.distribution(prompt[:t])[0][prompt[t]])}}
                for t in range(1, len(prompt))
            ]
        asked = (body.get("vllm_xargs") or {}).get(wire.FIELDS_KEY)
        entropy, temps = wire.parse_ask(asked) if asked is not None else (True, TEMPS)
        fields_on = self.kind == "stale" or (self.kind == "plugin" and asked is not None)
        if self.kind == "stale":
            entropy, temps = True, TEMPS
        (c,) = self.ref.generate(
            [Request(tuple(prompt), n, temp, body.get("seed"), return_entropy=True, score_temperatures=temps)]
        )
        k = body.get("logprobs")
        tokens, logq, logp = list(c.tokens), list(c.logq), list(c.logp)
        if short:
            tokens, logq, logp = tokens[:-1], logq[:-1], logp[:-1]
        tops = []
        for i, s in enumerate(tokens):
            own = logq[i] if self.kind == "processed" else logp[i]
            top = {f"token_id:{s}": own}
            if fields_on and k:
                fields = [
                    wire.SIGNATURE + len(temps),
                    logq[i],
                    c.entropy[i] if entropy else wire.NOT_ASKED,
                    *temps,
                    *(logp[i] / t - q for t, q in zip(temps, c.logq_at[i] if temps else ())),
                ]
                top.update({f"token_id:{j}": v for j, v in zip(wire.field_ids(s, k, V), fields[:k])})
            elif k:
                dist = self.lm.distribution(prompt + tokens[:i], temp if self.kind == "processed" else 1.0)[
                    1 if self.kind == "processed" else 0
                ]
                best = int(dist.argmax())
                top[f"token_id:{best}"] = float(dist[best])
            tops.append(top)
        values = logq if self.kind == "processed" else logp
        if nan:
            values = [None, *values[1:]]
        choice["logprobs"] = {
            "tokens": [f"token_id:{t}" for t in tokens],
            "token_logprobs": values,
            "top_logprobs": tops,
        }
        return {
            "choices": [choice],
            "usage": {"prompt_tokens": len(prompt), "prompt_tokens_details": {"cached_tokens": 2}},
        }


class _Server(ThreadingHTTPServer):
    request_queue_size = 256  # one connection per request: a PreSTO call opens dozens at once


METRICS = """# HELP vllm:kv_cache_usage_perc KV-cache usage.
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.25
vllm:num_requests_running{engine="0",model_name="m"} 3.0
vllm:num_requests_waiting{engine="0",model_name="m"} 1.0
vllm:prefix_cache_queries_total{engine="0",model_name="m"} 200.0
vllm:prefix_cache_hits_total{engine="0",model_name="m"} 50.0
vllm:cache_config_info{block_size="128",kv_cache_size_tokens="4096",num_gpu_blocks="32"} 1.0
"""


@pytest.fixture
def stand_in(tmp_path):
    servers = []

    def make(**kw):
        s = StandIn(tmp_path, **kw)
        servers.append(s)
        return s

    yield make
    for s in servers:
        s.server.shutdown()


def test_layout_round_trip():
    ids = wire.field_ids(15, wire.width(2), V)
    assert ids == [0, 1, 2, 3, 4, 5, 6] and 15 not in ids
    vals = [wire.SIGNATURE + 2, -0.5, 1.25, 0.5, 1.0, -0.75, 0.0]
    f = layout.parse_fields(15, -0.4, dict(zip(ids, vals)), V)
    assert f == layout.Fields(15, -0.4, -0.5, 1.25, temperatures=(0.5, 1.0), lognorm=(-0.75, 0.0))
    assert f.logq_at((1.0, 0.5)) == (-0.4, -0.8 + 0.75) and f.logq_at((0.25,)) is None
    assert layout.parse_fields(15, -0.4, {0: -3.0, 1: -4.0}, V) is None  # a stock server's top entries
    assert layout.parse_fields(15, -0.4, dict(zip(ids[:3], vals[:3])), V) is None  # fields missing


@pytest.mark.parametrize("kind", ["plugin", "processed"])
def test_both_modes_give_exact_scores(stand_in, kind):
    srv = stand_in(kind=kind)
    eng = VLLMEngine(srv.url)
    assert eng.mode == ("one-pass" if kind == "plugin" else "two-pass")
    caps = eng.capabilities
    assert caps.seeded and caps.vocab_size == V and caps.context_length == 48 and caps.entropy == (kind == "plugin")
    assert caps.score_temperatures == (None if kind == "plugin" else ())  # one pass: each request asks its own
    extras = {"return_entropy": True, "score_temperatures": TEMPS} if kind == "plugin" else {}
    reqs = [Request((1, 2, 3), 5, 0.25, 7, **extras), Request((1, 2, 3, 4, 5, 6), 2, 0.5, 8, **extras)]
    comps = eng.generate(reqs)
    truth = srv.ref.generate(
        [
            Request(r.prefix, r.max_new_tokens, r.temperature, r.seed, return_entropy=True, score_temperatures=TEMPS)
            for r in reqs
        ]
    )
    for c, t in zip(comps, truth):
        assert c.tokens == t.tokens
        assert c.logq == pytest.approx(t.logq, abs=1e-12) and c.logp == pytest.approx(t.logp, abs=1e-12)
        if kind == "plugin":
            assert c.entropy == pytest.approx(t.entropy)
            assert [v for row in c.logq_at for v in row] == pytest.approx(
                [v for row in t.logq_at for v in row], abs=1e-12
            )
    decode = next(b for b in srv.bodies if b.get("seed") == 7)
    assert decode["prompt"] == [1, 2, 3] and decode["ignore_eos"] and decode["return_tokens_as_token_ids"]
    assert (decode["top_k"], decode["top_p"], decode["min_p"], decode["repetition_penalty"]) == (-1, 1.0, 0.0, 1.0)
    assert decode["logprobs"] == (wire.width(3) if kind == "plugin" else 0)
    assert decode.get("vllm_xargs") == ({wire.FIELDS_KEY: wire.ask(True, TEMPS)} if kind == "plugin" else None)
    if kind == "processed":
        scores = [b["prompt"] for b in srv.bodies if b.get("prompt_logprobs") == 0]
        assert [1, 2, 3, *comps[0].tokens] in scores and [1, 2, 3, 4, 5, 6, *comps[1].tokens] in scores
    assert eng.stats.cached_tokens > 0
    assert [c.cached_tokens for c in comps] == [2, 2]  # each completion carries its own prefix-cache hits


def test_a_stock_raw_server_is_refused_and_one_pass_needs_the_plugin(stand_in):
    srv = stand_in(kind="raw")
    with pytest.raises(EngineError, match="processed_logprobs"):
        VLLMEngine(srv.url)
    with pytest.raises(EngineError, match="presto_onepass"):
        VLLMEngine(stand_in(kind="processed").url, mode="one-pass")
    with pytest.raises(EngineError, match="older presto-sgl plugin"):  # it rewrites every request's logprobs
        VLLMEngine(stand_in(kind="stale").url)
    with pytest.raises(ValueError, match="`mode`"):
        VLLMEngine(srv.url, mode="fast")


def test_retries_follow_the_finish_reason(stand_in):
    srv = stand_in()
    eng = VLLMEngine(srv.url, max_retries=2)
    reqs = [Request((1, 2), 4, 1.0, 1), Request((1, 3), 4, 1.0, 2)]
    want = eng.generate(reqs)
    srv.finish = ["abort", "abort"]  # aborted: drawn again (same seeds: the same tokens)
    assert eng.generate(reqs) == want and eng.stats.retries >= 1
    srv.finish = ["abort"] * 9
    with pytest.raises(EngineError, match="incomplete results"):
        eng.generate(reqs[:1])
    srv.finish = ["stop"]
    with pytest.raises(EngineError, match="finish_reason='stop'"):
        eng.generate(reqs[:1])
    retries = eng.stats.retries
    srv.finish, srv.short_next = [], 1  # "length" but short: an error, never a silent redraw
    with pytest.raises(EngineError, match="wrong lengths"):
        eng.generate(reqs[:1])
    srv.nan_next = 1  # a null log-prob: an error too
    with pytest.raises(EngineError, match="not NaN"):
        eng.generate(reqs[:1])
    assert eng.stats.retries == retries


def test_http_errors_and_an_unreachable_server(stand_in):
    srv = stand_in()
    eng = VLLMEngine(srv.url)
    srv.fail_status = 400
    with pytest.raises(EngineHTTPError, match=r"vLLM server .* HTTP 400") as info:
        eng.generate([Request((1, 2), 4, 1.0, 1)])
    assert info.value.status == 400
    with pytest.raises(EngineUnreachable, match=r"vllm_server\.sh start"):
        VLLMEngine("http://127.0.0.1:9")


def test_a_lost_connection_is_redrawn_once_the_server_answers(stand_in):
    srv = stand_in()
    eng = VLLMEngine(srv.url, restart_timeout_s=60)
    reqs = [Request((1, 2), 4, 1.0, 1)]
    want = eng.generate(reqs)
    srv.drop_next = True
    assert eng.generate(reqs) == want
    assert eng.stats.reconnects == 1


def test_only_the_lost_requests_of_a_call_are_drawn_again(stand_in):
    """vLLM gets one POST per request, concurrently: when one's connection is lost, only it is
    sent again once the server answers; the others' answers are kept (nothing drawn twice)."""
    srv = stand_in()
    eng = VLLMEngine(srv.url, restart_timeout_s=60)
    reqs = [Request((1, 2), n, 1.0, 1) for n in (2, 3, 4)]
    want = eng.generate(reqs)
    n = len(srv.bodies)
    srv.drop_next = True  # the first POST to arrive
    assert eng.generate(reqs) == want and eng.stats.reconnects == 1
    sent = sorted(b["max_tokens"] for b in srv.bodies[n:])
    assert len(sent) == 4 and sorted(set(sent)) == [2, 3, 4]  # one of them twice, the others once


def test_metrics_monitor(stand_in):
    eng = VLLMEngine(stand_in().url)
    (load,) = eng.server_loads()
    assert load == {
        "num_used_tokens": 1024,
        "max_total_num_tokens": 4096,
        "num_running_reqs": 3,
        "num_waiting_reqs": 1,
        "cache_hit_rate": 0.25,
    }
    with eng.monitor(interval_s=0.01) as mon:
        eng.generate([Request((1, 2), 4, 1.0, 1)])
    s = mon.summary()
    assert s.kv_tokens_peak == 1024 and s.kv_capacity == 4096 and s.prefix_hit_rate == pytest.approx(2 / 2)


@pytest.mark.parametrize("sampler", ["powermh", "multitry", "entropycut"])
@pytest.mark.parametrize("rule,keying", [("step", "step"), ("bfs", "path")])
def test_presto_equals_sequential_through_the_stand_in(stand_in, sampler, rule, keying):
    """Seeded requests make the chain a function of its keys: bit-identical states."""
    eng = VLLMEngine(stand_in().url)
    runs = {}
    for r in ("sequential", rule):
        cfg, presto = sampling_configs(
            r, keying=keying, budget=5, alpha=4.0, max_new_tokens=8, block_size=4, steps=3, method=sampler
        )
        runs[r] = Sampler(eng, cfg, presto).run([1, 2, 3], seed=4)
    assert runs[rule].state == runs["sequential"].state
    assert runs[rule].metrics.model_calls < runs["sequential"].metrics.model_calls == 6


def test_cli_samples_on_vllm_with_a_server_record(stand_in, tmp_path, monkeypatch):
    from presto_sgl import cli
    from presto_sgl.chain.trace import read_trace

    monkeypatch.setattr(VLLMEngine, "tokenizer", None)  # the stand-in has no tokenizer files
    srv = stand_in()
    trace = tmp_path / "t.jsonl"
    argv = [
        "sample",
        "--engine",
        "vllm",
        "--url",
        srv.url,
        "--prompt-ids",
        "1,2,3",
        "--max-new-tokens",
        "8",
        "--block-size",
        "8",
        "--steps",
        "3",
        "--method",
        "multitry",
        "--trace",
        str(trace),
    ]
    assert cli.main(argv) == 0
    records = read_trace(trace.read_text().splitlines())
    (server,) = [r for r in records if r["type"] == "server"]
    assert server["url"] == srv.url and server["kv_capacity"] == 4096 and server["prefix_hit_rate"] > 0
    assert any(b.get("seed") is not None and b["prompt"][:3] == [1, 2, 3] for b in srv.bodies)


def test_prompts_that_do_not_fit_the_served_model_are_refused_before_any_call(stand_in):
    srv = stand_in()
    eng = VLLMEngine(srv.url)
    cfg, presto = sampling_configs("step", budget=4, max_new_tokens=16, block_size=8, steps=2)
    sampler = Sampler(eng, cfg, presto)
    sent = len(srv.bodies)
    with pytest.raises(ValueError, match="vocabulary"):
        sampler.run([1, 2, V], seed=0)
    with pytest.raises(ValueError, match="context"):
        sampler.run([1] * 40, seed=0)  # 40 + 16 > max_model_len 48
    assert len(srv.bodies) == sent


def test_a_dead_engine_core_counts_as_a_lost_server(stand_in):
    """vLLM's API process answers HTTP 500 "EngineCore encountered an issue" while its engine
    process is gone: the engine waits for /health and redraws, as for a lost connection."""
    srv = stand_in()
    eng = VLLMEngine(srv.url, restart_timeout_s=60)
    reqs = [Request((1, 2), 4, 1.0, 1)]
    want = eng.generate(reqs)
    srv.fail_status, srv.fail_message = 500, "EngineCore encountered an issue. See stack trace (above)"
    srv.revive_s = 0.3  # back 0.3 s after its first failed answer: the call sees it dead first
    assert eng.generate(reqs) == want and eng.stats.reconnects >= 1
    srv.fail_status, srv.fail_message = 500, "something else"
    with pytest.raises(EngineHTTPError, match="HTTP 500"):
        eng.generate(reqs)

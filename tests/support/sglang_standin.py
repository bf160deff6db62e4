"""A scripted stand-in SGLang server: SGLang's native /generate shapes over a reference LM.

Decode answers carry output_token_logprobs = log q_tau; scoring (max_new_tokens 0) carries
input_token_logprobs whose first entry is null; optional one-pass fields
(raw_logprob, and raw_entropy and masked_lognorm@... when a request asks for them); /v1/loads.
It can abort, fail, go away mid-call and come back, and act as sglang-router. Used by the
SGLang client tests (tests/engines/test_sglang_client.py) and the serve tests.
"""

from __future__ import annotations

import json
import math
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np

from presto_sgl import wire
from presto_sgl.engines.reference import ReferenceLM

HOLD_S = 60.0
"""The longest a scripted wait (for a monitor's polls, for the port) lasts: a failing test still ends."""


class StandIn:
    """``router``: behave like sglang-router in front of ``worker`` (another StandIn): one shared
    sampling_params per body (a list is HTTP 422), no /model_info or /v1/loads, /workers."""

    def __init__(self, tmp_path, *, one_pass=False, fail_status=None, delay_s=0.0, worker=None, polls_per_post=0):
        self.lm = ReferenceLM(16, seed=5)
        self.rng = np.random.default_rng(0)
        self.one_pass, self.fail_status, self.delay_s = one_pass, fail_status, delay_s
        # each POST /generate is answered only once /v1/loads has been read this many times while
        # it was in flight (samples of a monitor that saw it, however slow the machine; HOLD_S at most)
        self.polls_per_post = polls_per_post
        self.polls = 0  # /v1/loads reads so far
        self.polled = threading.Condition()
        self.finish: list[str] = []  # scripted outcomes of the next decodes (see answer), then 'length'
        self.score_finish: list[str] = []  # of the next scoring answers: 'abort' or 'length'

        self.worker = worker
        self.drop_next: float | None = None  # go away on the next POST, back after this many s (inf: never)
        self.drop_body = None  # a predicate: the first POST body it holds for gets no answer (the server stays up)
        self.in_flight = 0
        self.down = False
        self.bodies: list[dict] = []
        self.routes: list[str | None] = []  # each POST's X-SMG-Routing-Key
        (tmp_path / "config.json").write_text(
            json.dumps({"model_type": "llama", "vocab_size": 16, "max_position_embeddings": 64})
        )
        self.model_path = str(tmp_path)
        stand_in = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def _send(self, code, payload):
                data = json.dumps(payload).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                router = stand_in.worker is not None
                if self.path == "/health":
                    self.send_response(200)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                elif self.path == "/v1/loads" and not router:
                    with stand_in.polled:  # a poll that counts for a POST saw it in flight
                        n = stand_in.in_flight
                        stand_in.polls += 1
                        stand_in.polled.notify_all()
                    load = {
                        "num_used_tokens": 10 * n,
                        "max_total_num_tokens": 1000,
                        "num_running_reqs": n,
                        "num_waiting_reqs": 0,
                        "token_usage": n / 100,
                        "cache_hit_rate": 0.5,
                    }
                    self._send(200, {"loads": [load]})
                elif self.path == "/workers" and router:
                    self._send(200, {"workers": [{"url": stand_in.worker.url}]})
                elif self.path == "/get_model_info" or (self.path == "/model_info" and not router):
                    self._send(200, {"model_path": stand_in.model_path})
                else:
                    self._send(404, {"detail": "Not Found"})

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                stand_in.bodies.append(body)
                stand_in.routes.append(self.headers.get("X-SMG-Routing-Key"))
                if stand_in.drop_next is not None:  # a restart: no answer, the connection closes
                    stand_in.go_away(stand_in.drop_next)
                    stand_in.drop_next = None
                    self.close_connection = True
                    return
                if stand_in.drop_body is not None and stand_in.drop_body(body):
                    stand_in.drop_body = None
                    self.close_connection = True
                    return
                if stand_in.fail_status:
                    self._send(stand_in.fail_status, {"error": {"message": "KV pool exhausted"}})
                    return
                if stand_in.worker is not None and stand_in.worker.down:  # what sglang-router 0.3.2 answers
                    self._send(500, {"error": {"code": "call_upstream_request_error", "message": "worker down"}})
                    return
                if stand_in.worker is not None and isinstance(body["sampling_params"], list):
                    self._send(422, "sampling_params: invalid type: sequence, expected a map")
                    return
                with stand_in.polled:
                    stand_in.in_flight += 1
                    polls = stand_in.polls + stand_in.polls_per_post
                    stand_in.polled.wait_for(lambda: stand_in.polls >= polls, HOLD_S)
                time.sleep(stand_in.delay_s)
                try:
                    self._send(200, stand_in.answer(body))
                finally:
                    with stand_in.polled:
                        stand_in.in_flight -= 1

        self.handler = Handler
        self._serve(0)
        self.url = f"http://127.0.0.1:{self.server.server_port}"

    def _serve(self, port):
        self.server = ThreadingHTTPServer(("127.0.0.1", port), self.handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def go_away(self, down_s):
        """Stop listening (before this returns: nothing sent after it is answered); serve again on
        the same port ``down_s`` seconds later (inf: never)."""
        port = self.server.server_port
        self.down = True
        self.server.shutdown()  # from a handler's thread too: each request has its own
        self.server.server_close()

        def restart():
            time.sleep(down_s)
            self.down = False  # a router answers again once its worker's /health does
            deadline = time.monotonic() + HOLD_S
            while True:
                try:
                    self._serve(port)
                    return
                except OSError:  # the port still held by a closing connection: try again
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.1)

        if math.isfinite(down_s):
            threading.Thread(target=restart, daemon=True).start()

    def answer(self, body):
        ids = body["input_ids"]
        single = isinstance(ids[0], int)
        batch = [ids] if single else ids
        params = body["sampling_params"]
        params = [params] * len(batch) if isinstance(params, dict) else params
        starts = body.get("logprob_start_len")
        out = []
        for j, (prefix, p) in enumerate(zip(batch, params)):
            if p["max_new_tokens"] == 0:  # scoring: raw log p0 of every input token from `start`
                s = starts if isinstance(starts, int) else starts[j]
                entries = [[None, prefix[s], None]]
                for t in range(s + 1, len(prefix)):
                    entries.append([float(self.lm.distribution(prefix[:t])[0][prefix[t]]), prefix[t], None])
                kind = self.score_finish.pop(0) if self.score_finish else "length"
                meta = {
                    "input_token_logprobs": entries if kind == "length" else [],
                    "cached_tokens": s,
                    "finish_reason": {"type": kind, **({"length": 0} if kind == "length" else {"message": "x"})},
                }
                out.append({"output_ids": [], "meta_info": meta})
                continue
            ctx, toks, lq, lp, ent = list(prefix), [], [], [], []
            for _ in range(p["max_new_tokens"]):
                logp, logq, cdf = self.lm.distribution(ctx, p["temperature"])
                t = int(min(np.searchsorted(cdf, self.rng.random() * cdf[-1]), 15))
                toks.append(t), lq.append(float(logq[t])), lp.append(float(logp[t]))
                ent.append(float(-(np.exp(logp) * logp).sum()))
                ctx.append(t)
            # 'abort' / 'stop': cut short with that reason; 'short': 'length' but a token short;
            # 'nan': a null log-prob; 'noraw': no one-pass fields (a restart without the plugin)
            kind = self.finish.pop(0) if self.finish else "length"
            if kind in ("abort", "stop", "short"):
                toks, lq, lp, ent = toks[:-1], lq[:-1], lp[:-1], ent[:-1]
            if kind == "nan":
                lq[0] = None
            reason = {"type": kind if kind in ("abort", "stop") else "length"}
            reason.update(
                {"abort": {"message": "aborted"}, "stop": {"matched": toks[-1]}}.get(kind, {"length": len(toks)})
            )
            meta = {
                "output_token_logprobs": [[q, t, None] for q, t in zip(lq, toks)],
                "cached_tokens": len(prefix) - 1,
                "finish_reason": reason,
            }
            asked = (p.get("custom_params") or {}).get(wire.FIELDS_KEY)
            if self.one_pass == "stale":  # a plugin before issue 56: every request, the server's temperatures
                asked = "entropy|0.25,0.5,1.0"
            if self.one_pass and kind != "noraw" and asked is not None:  # the plugin answers only who asks
                entropy, temps = wire.parse_ask(asked)
                # "speculative": a server whose decode steps bypass the sampler (the first token's values only)
                meta.update(raw_logprob=lp[:1] if self.one_pass == "speculative" else lp)
                if entropy:
                    meta.update(raw_entropy=ent)
                if temps:
                    ctx = list(prefix)
                    rows = []
                    for t_ in toks:
                        logp = self.lm.distribution(ctx)[0]
                        rows.append([float(np.logaddexp.reduce(logp / t)) for t in temps])
                        ctx.append(t_)
                    meta[wire.lognorm_key(temps)] = rows
            out.append({"output_ids": toks, "meta_info": meta})
        return out[0] if single else out

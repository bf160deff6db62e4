"""What presto-sgl's server plugins cost the server they are guests in (issue 56).

Two measurements, each side by side in one run:

1. ``hooks``: the per-step cost of the SGLang plugin's hooks (the real hook functions, SGLang's own
   sampler replaced by an argmax) on a batch of R rows of float32 logits, at SmolLM2's (49,152) and
   Gemma 3's (262,144) vocabularies, beside the same step without a plugin (the logits copied and
   drawn): the plugin before this change (every row: log-softmax, entropy,
   three log-normalizers, a host copy; its hook body is copied here as :func:`before`), and after
   it for a batch with no asking row, one PowerMH row among ordinary ones, and R rows of each of
   PowerMH (log p0), EntropyCut (+ entropy) and MultiTryMH (+ normalizers at 0.25, 0.5, 1.0).
2. ``traffic``: ordinary clients (no presto field, no logprobs; ``--clients`` concurrent, 64 new
   tokens, temperature 0.7, each a different prompt of ``--prompts``) against a server with the
   plugin and the same server without it (``--plugin-url`` / ``--stock-url``, SGLang or vLLM),
   rounds alternating between the two; tokens/s per round, the ratio of medians and the per-round
   ratios' range.

    python -m benchmarks.guest_cost hooks [--rows 20] [--repeat 7]
    python -m benchmarks.guest_cost traffic --engine sglang --plugin-url URL --stock-url URL [--rounds 8]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from benchmarks.compare import machine
from presto_sgl import wire

VOCABS = {"smollm2": 49152, "gemma3": 262144}
KINDS = {
    "powermh": "|",
    "entropycut": "entropy|",
    "multitry": "|0.25,0.5,1.0",
}
PROMPTS = [
    "Explain how a refrigerator keeps food cold.",
    "Write a short poem about the sea at night.",
    "What are three uses of copper?",
    "Describe the water cycle in simple words.",
    "Give advice to someone learning to cook.",
    "Why do leaves change colour in autumn?",
    "Summarize the plot of a detective story you invent.",
    "List some ways to save energy at home.",
    "How does a bicycle stay upright?",
    "Tell me about the history of the printing press.",
    "What makes a good team leader?",
    "Describe a busy market in the morning.",
]


def bare(logits: Any) -> Any:
    """The step without any plugin: the draw (an argmax)."""
    return logits.argmax(-1)


def before(logits: Any) -> dict[str, list[Any]]:
    """The SGLang plugin's per-step work before issue 56 (every row of every batch; its
    ``around_preprocess_logits`` + ``around_sampler_forward`` at 9807efa, the sampler an argmax)."""
    import torch

    raw = torch.log_softmax(logits.float(), dim=-1)
    entropy = -(raw.exp() * raw).sum(-1)
    masked = torch.isneginf(logits)
    allowed = raw.masked_fill(masked, float("-inf")) if bool(masked.any()) else raw
    lognorm = torch.stack([torch.logsumexp(allowed / t, dim=-1) for t in (0.25, 0.5, 1.0)], dim=-1)
    ids = logits.argmax(-1)
    chosen = raw.gather(1, ids.view(-1, 1)).view(-1)
    return {"raw": chosen.tolist(), "entropy": entropy.tolist(), "lognorm": lognorm.tolist()}


def after(logits: Any, asks: list[str | None]) -> None:
    """One step through the plugin's four hooks for a batch whose row i asked ``asks[i]``
    (None: an ordinary request)."""
    from presto_sgl import wire
    from presto_sgl.server_side.sglang import plugin

    reqs = [
        SimpleNamespace(
            sampling_params=SimpleNamespace(custom_params=None if a is None else {wire.FIELDS_KEY: a}),
            customized_info=None,
        )
        for a in asks
    ]
    forward_batch = SimpleNamespace()
    plugin.after_init_new(forward_batch, None, SimpleNamespace(reqs=reqs))
    out = SimpleNamespace(next_token_logits=logits, customized_info=None)
    plugin.around_sample(
        lambda runner, lo, fb: plugin.around_sampler_forward(
            lambda sampler, lo2: lo2.next_token_logits.argmax(-1), None, lo
        ),
        None,
        out,
        forward_batch,
    )
    for i, req in enumerate(reqs):
        plugin.around_collect(lambda *a: None, None, i, req, out)


def step(logits: Any, asks: Any) -> Any:
    return bare(logits) if asks == "bare" else before(logits) if asks is None else after(logits, asks)


def vllm_plan_us(rows: int, asking: int, repeat: int = 20000) -> float:
    """Microseconds per step of the vLLM plugin's row planning (``plan_of``, what its wrappers add to
    a step) for a batch of ``rows`` requests of which ``asking`` asked."""
    from presto_sgl.server_side.rowstats import Ask
    from presto_sgl.server_side.vllm.plugin import plan_of

    batch = SimpleNamespace(req_id_to_index={f"r{i}": i for i in range(rows)})
    batch.presto_asks = {f"r{i}": Ask() for i in range(asking)}
    t = time.perf_counter()
    for _ in range(repeat):
        plan_of(batch, rows)
    return (time.perf_counter() - t) / repeat * 1e6


def hooks(args: argparse.Namespace) -> dict[str, Any]:
    import torch

    rows = args.rows
    results: dict[str, Any] = {"rows": rows, "machine": machine(), "ms": {}}
    results["vllm_plan_us"] = {n: vllm_plan_us(rows, n) for n in (0, 1, rows)}
    print(f"vLLM row planning per step, {rows} rows, 0 / 1 / {rows} asking: {results['vllm_plan_us']} us", flush=True)
    for name, vocab in VOCABS.items():
        logits = torch.randn(rows, vocab, generator=torch.Generator().manual_seed(0)) * 3
        cases: dict[str, Any] = {
            "no plugin (the draw alone)": "bare",
            "before (every row)": None,
            "after: no asking row": [None] * rows,
            "after: 1 PowerMH row": ["|"] + [None] * (rows - 1),
            **{f"after: {rows} {k} rows": [a] * rows for k, a in KINDS.items()},
        }
        times: dict[str, list[float]] = {case: [] for case in cases}
        for asks in cases.values():  # warm-up
            step(logits, asks)
        for _ in range(args.repeat):  # the cases interleaved: drift reaches each alike
            for case, asks in cases.items():
                fresh = logits.clone()  # the step's own logits (SGLang's hooks edit them in place), not timed
                t = time.perf_counter()
                step(fresh, asks)
                times[case].append((time.perf_counter() - t) * 1e3)
        results["ms"][name] = {}
        for case, ms in times.items():
            results["ms"][name][case] = {"median": statistics.median(ms), "min": min(ms), "max": max(ms)}
            print(
                f"{name} vocab={vocab} rows={rows} {case}: median {statistics.median(ms):.2f} ms "
                f"(range {min(ms):.2f}-{max(ms):.2f})",
                flush=True,
            )
    return results


def _post(url: str, body: dict[str, Any], timeout: float = 600.0) -> dict[str, Any]:
    import urllib.request

    req = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.loads(r.read())


def ordinary(engine: str, url: str, prompt: str, tokens: int) -> tuple[int, dict[str, Any]]:
    """One ordinary client's request (no presto field, no logprobs): (new tokens, its answer)."""
    if engine == "sglang":
        params = {"temperature": 0.7, "max_new_tokens": tokens, "ignore_eos": True}
        res = _post(url + "/generate", {"text": prompt, "sampling_params": params})
        return int(res["meta_info"]["completion_tokens"]), res
    model = _post_get(url + "/v1/models")["data"][0]["id"]
    res = _post(
        url + "/v1/completions",
        {"model": model, "prompt": prompt, "max_tokens": tokens, "temperature": 0.7, "ignore_eos": True},
    )
    return int(res["usage"]["completion_tokens"]), res


def greedy(engine: str, url: str, prompt: str) -> tuple[list[Any], list[float]]:
    """An ordinary greedy request with log-probabilities and a repetition penalty (tokens, their
    log-probs): the same on a server with the plugin as on one without it."""
    if engine == "sglang":
        params = {"temperature": 0.0, "max_new_tokens": 24, "repetition_penalty": 1.2}
        res = _post(url + "/generate", {"text": prompt, "sampling_params": params, "return_logprob": True})
        entries = res["meta_info"]["output_token_logprobs"]
        return [e[1] for e in entries], [e[0] for e in entries]
    model = _post_get(url + "/v1/models")["data"][0]["id"]
    body = {"model": model, "prompt": prompt, "max_tokens": 24, "temperature": 0.0, "logprobs": 5}
    lp = _post(url + "/v1/completions", body | {"repetition_penalty": 1.2})["choices"][0]["logprobs"]
    return lp["tokens"], lp["token_logprobs"]


def _post_get(url: str) -> dict[str, Any]:
    import urllib.request

    with urllib.request.urlopen(url, timeout=60) as r:
        return json.loads(r.read())


def one_round(engine: str, url: str, clients: int, prompts: list[str], tokens: int) -> float:
    """Tokens per second of ``clients`` concurrent ordinary clients working through ``prompts``."""
    t = time.perf_counter()
    with ThreadPoolExecutor(clients) as pool:
        done = list(pool.map(lambda p: ordinary(engine, url, p, tokens), prompts))
    return sum(n for n, _ in done) / (time.perf_counter() - t)


def traffic(args: argparse.Namespace) -> dict[str, Any]:
    prompts = PROMPTS[: args.prompts]
    urls = {"plugin": args.plugin_url.rstrip("/"), "stock": args.stock_url.rstrip("/")}
    leaks = {
        side: sorted(
            k
            for k in ordinary(args.engine, url, prompts[0], 4)[1].get("meta_info", {})
            if k.startswith(wire.PRESTO_KEYS)
        )
        for side, url in urls.items()
    }
    same = {side: [greedy(args.engine, url, p) for p in prompts[:4]] for side, url in urls.items()}
    for url in urls.values():  # warm-up
        one_round(args.engine, url, args.clients, prompts[: args.clients], args.tokens)
    rates: dict[str, list[float]] = {"plugin": [], "stock": []}
    for r in range(args.rounds):
        order = ("plugin", "stock") if r % 2 == 0 else ("stock", "plugin")
        for side in order:
            rates[side].append(one_round(args.engine, urls[side], args.clients, prompts, args.tokens))
        print(f"round {r}: plugin {rates['plugin'][-1]:.1f} tok/s, stock {rates['stock'][-1]:.1f} tok/s", flush=True)
    ratios = [p / s for p, s in zip(rates["plugin"], rates["stock"], strict=True)]
    out = {
        "engine": args.engine,
        "machine": machine(),
        "clients": args.clients,
        "prompts": len(prompts),
        "tokens": args.tokens,
        "rounds": args.rounds,
        "tok_s": rates,
        "ratio_of_medians": statistics.median(rates["plugin"]) / statistics.median(rates["stock"]),
        "round_ratios": {"median": statistics.median(ratios), "min": min(ratios), "max": max(ratios)},
        "presto_keys_in_an_ordinary_answer": leaks,
        "greedy_answers_equal": [a[0] == b[0] for a, b in zip(same["plugin"], same["stock"], strict=True)],
        "greedy_logprob_max_diff": max(
            max((abs(x - y) for x, y in zip(a[1], b[1], strict=True)), default=0.0)
            for a, b in zip(same["plugin"], same["stock"], strict=True)
        ),
    }
    keys = ("ratio_of_medians", "round_ratios", "presto_keys_in_an_ordinary_answer", "greedy_answers_equal")
    print(json.dumps({k: out[k] for k in (*keys, "greedy_logprob_max_diff")}))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="what", required=True)
    h = sub.add_parser("hooks")
    h.add_argument("--rows", type=int, default=20)
    h.add_argument("--repeat", type=int, default=25)
    t = sub.add_parser("traffic")
    t.add_argument("--engine", choices=("sglang", "vllm"), required=True)
    t.add_argument("--plugin-url", required=True)
    t.add_argument("--stock-url", required=True)
    t.add_argument("--clients", type=int, default=8)
    t.add_argument("--prompts", type=int, default=12)
    t.add_argument("--tokens", type=int, default=64)
    t.add_argument("--rounds", type=int, default=8)
    for p in (h, t):
        p.add_argument("--json", type=Path)
    args = parser.parse_args()
    result = hooks(args) if args.what == "hooks" else traffic(args)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()

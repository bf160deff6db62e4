"""What a 262k vocabulary costs: Gemma 3 270M (262,144 tokens) beside SmolLM2-135M (49,152).

Three measurements, each side by side for both models in one run:

1. **The plugin's per-row work** (``presto_sgl/server_side/sglang/plugin.py``, the real hook
   functions, SGLang's own sampler replaced by an argmax): log p0, the p0 entropy and the
   log-normalizers at the three MultiTryMH temperatures, for R rows of float32 logits that ask
   for all of them.
2. **The grammar mask** (``presto_sgl/engines/grammar.py``, xgrammar's matcher over the model's
   own tokenizer): one ``allowed()`` (fill the token bitmask, unpack it to a boolean row) and
   one ``accept`` per token, under a JSON schema, over a response of valid JSON.
3. **A call of N forks against its longest request alone**, on the embedded engine (float32)
   and, with ``--sglang-url`` / ``--smollm2-url``, on those SGLang servers: forks of one root at
   evenly spaced cuts, every fork decoding to the same end; the longest fork alone as baseline.

    python -m benchmarks.vocab_cost [--forks 8,20] [--sglang-url URL] [--smollm2-url URL] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

from benchmarks.compare import machine

PERSON = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
    "required": ["name", "age"],
}
ANSWER = '{"name": "Ada Lovelace", "age": 36}'
ROOT = "The river runs past the old mill, under the stone bridge and into the town, where the market opens"


def timed(fn, repeat: int) -> float:
    """Median seconds of ``fn()`` over ``repeat`` runs (after one warm-up)."""
    fn()
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def plugin_row_work(vocab: int, rows: int, repeat: int) -> float:
    """Seconds of the plugin's hooks on ``rows`` rows of ``vocab`` float32 logits, every row asking
    for everything (log p0, the entropy, the log-normalizers at 0.25, 0.5, 1.0: EntropyCut's and
    MultiTryMH's fields; ``benchmarks/guest_cost.py`` splits the cost by what a row asks)."""
    import torch

    from benchmarks.guest_cost import after

    logits = torch.randn(rows, vocab, generator=torch.Generator().manual_seed(0)) * 3
    return timed(lambda: after(logits.clone(), ["entropy|0.25,0.5,1.0"] * rows), repeat)


def grammar_per_token(tokenizer, vocab: int, stop: list[int]) -> tuple[float, int]:
    """(seconds per token of allowed() + accept() under the JSON schema, tokens timed)."""
    from presto_sgl.constraints import Constraint
    from presto_sgl.engines.base import Request
    from presto_sgl.engines.grammar import Grammars

    grammars = Grammars.for_tokenizer(tokenizer, vocab, stop)
    ids = tokenizer.encode(ANSWER, add_special_tokens=False)
    req = Request((1,), len(ids) + 1, 1.0, stop=tuple(stop), constraint=Constraint(json_schema=PERSON))
    grammars.start(req)  # compiles (not timed)
    best = float("inf")
    for _ in range(3):
        mask = grammars.start(req)
        assert mask is not None
        t = time.perf_counter()
        for token in ids:
            assert mask.allowed()[token]
            mask.accept(token)
        best = min(best, time.perf_counter() - t)
    return best / len(ids), len(ids)


def fork_requests(engine, n: int, new_tokens: int):
    """N forks of one root at evenly spaced cuts of its last 2 x new_tokens tokens, all ending at the
    same position, and the longest fork (the shortest prefix)."""
    from presto_sgl.engines.base import Request

    root = tuple(engine.text.encode(ROOT * 3, special=True))
    end = len(root)
    cuts = [end - new_tokens - (new_tokens * i) // max(1, n - 1) for i in range(n)]
    forks = [Request(root[:c], end + new_tokens - c, 1.0) for c in cuts]
    return forks, max(forks, key=lambda r: r.max_new_tokens)


def fork_ratio(engine, n: int, new_tokens: int, repeat: int) -> dict:
    forks, longest = fork_requests(engine, n, new_tokens)
    alone = timed(lambda: engine.generate([longest]), repeat)
    together = timed(lambda: engine.generate(forks), repeat)
    return {"forks": n, "longest_new_tokens": longest.max_new_tokens, "alone_s": alone, "call_s": together}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--forks", type=lambda t: [int(x) for x in t.split(",")], default=[8, 20])
    ap.add_argument("--new-tokens", type=int, default=16, help="tokens the shortest fork decodes")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--sglang-url", help="an SGLang server of Gemma 3 (plugin loaded)")
    ap.add_argument("--smollm2-url", help="an SGLang server of SmolLM2, the same way")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    from presto_sgl.models import embedded_engine

    print(machine(), flush=True)
    out: dict = {"machine": machine(), "models": {}}
    for name in ("smollm2", "gemma3"):
        engine = embedded_engine(name, device="cpu")
        vocab = engine.capabilities.vocab_size
        stop = list(engine.text.stop_ids)
        row = {"vocab": vocab, "plugin_s": {}, "forks": {}}
        for rows in (1, 8, 20):
            row["plugin_s"][rows] = plugin_row_work(vocab, rows, args.repeat)
            print(
                f"{name} vocab={vocab} plugin hooks, {rows:2d} rows: {row['plugin_s'][rows] * 1e3:.2f} ms", flush=True
            )
        per_token, n = grammar_per_token(engine.text.tokenizer, vocab, stop)
        row["grammar_per_token_s"] = per_token
        print(f"{name} grammar mask: {per_token * 1e3:.3f} ms per token ({n} tokens of JSON)", flush=True)
        url = args.sglang_url if name == "gemma3" else args.smollm2_url
        engines = [("embedded", engine)]
        if url:
            from presto_sgl.engines.sglang.http import SGLangEngine

            engines.append(("sglang", SGLangEngine(url)))
        for label, eng in engines:
            for n_forks in args.forks:
                r = fork_ratio(eng, n_forks, args.new_tokens, args.repeat)
                row["forks"][f"{label}/{n_forks}"] = r
                print(
                    f"{name} {label}: {n_forks} forks {r['call_s']:.2f} s, longest ({r['longest_new_tokens']} new) "
                    f"alone {r['alone_s']:.2f} s: {r['call_s'] / r['alone_s']:.2f}x",
                    flush=True,
                )
        out["models"][name] = row
        del engine
    if args.json:
        args.json.write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()

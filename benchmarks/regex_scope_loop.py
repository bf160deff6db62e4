"""Loop SGLang's own ``test_regex`` program (sglang/test/test_programs.py, its program body) inside
``power_sampling(block_size=8, steps=2)`` against a server, with other programs in the same batches,
and print every answer and whether Python's ``re`` (the test's check) accepts it (issue 56, item 6:
an empty constrained answer was seen once in five runs on a server with --batched-attention
--cdf-sampling that had served other programs).

    .venv-sglang/bin/python -m benchmarks.regex_scope_loop http://127.0.0.1:30300 --runs 24 [--programs-first]

``--programs-first`` first runs SGLang's own test_programs.py programs under the same switch (few-shot QA,
select, int, JSON by regex and by schema, expert answer, tool use), each one's outcome printed, so the loop
runs on a server that has served other programs.
"""

from __future__ import annotations

import argparse
import re
import threading
import time

REGEX = r"((25[0-5]|2[0-4]\d|[01]?\d\d?).){3}(25[0-5]|2[0-4]\d|[01]?\d\d?)"


def main() -> None:
    import sglang as sgl

    from presto_sgl.program import power_sampling

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("url")
    ap.add_argument("--runs", type=int, default=24)
    ap.add_argument("--programs-first", action="store_true")
    args = ap.parse_args()

    @sgl.function
    def regex_gen(s):
        s += "Q: What is the IP address of the Google DNS servers?\n"
        s += "A: " + sgl.gen("answer", temperature=0, regex=REGEX)

    @sgl.function
    def other(s, q):
        s += "Q: " + q + "\nA: " + sgl.gen("a", max_tokens=24, temperature=0.7)

    sgl.set_default_backend(sgl.RuntimeEndpoint(args.url))
    if args.programs_first:
        served_other_programs()
    bad = empty = 0
    for i in range(args.runs):
        beside = threading.Thread(target=lambda i=i: other.run_batch([{"q": f"Tell me about number {i}"}] * 6))
        beside.start()
        t = time.time()
        with power_sampling(block_size=8, steps=2):
            state = regex_gen.run()
        beside.join()
        answer = state["answer"]
        ok = bool(re.match(REGEX, answer))
        bad += not ok
        empty += answer == ""
        meta = state.get_meta_info("answer") or {}
        print(
            i,
            repr(answer),
            "ok" if ok else "REJECTED",
            f"{time.time() - t:.1f}s",
            meta.get("finish_reason"),
            flush=True,
        )
    print(f"{bad} of {args.runs} answers rejected by Python's re, {empty} empty")


def served_other_programs() -> None:
    """SGLang's own test programs under the switch (their asserts expect greedy answers; a failed one is printed)."""
    import sglang.test.test_programs as tp

    from presto_sgl.program import power_sampling

    programs = {
        "few_shot_qa": tp.test_few_shot_qa,
        "select": lambda: tp.test_select(False),
        "decode_int": tp.test_decode_int,
        "decode_json_regex": tp.test_decode_json_regex,
        "decode_json": tp.test_decode_json,
        "expert_answer": lambda: tp.test_expert_answer(False),
        "tool_use": tp.test_tool_use,
    }
    for name, program in programs.items():
        t = time.time()
        try:
            with power_sampling(block_size=8, steps=2):
                program()
            outcome = "ok"
        except Exception as exc:  # a sampled answer the greedy test did not expect
            outcome = f"{type(exc).__name__}: {str(exc)[:80]}"
        print(f"  {name}: {outcome} ({time.time() - t:.0f} s)", flush=True)


if __name__ == "__main__":
    main()

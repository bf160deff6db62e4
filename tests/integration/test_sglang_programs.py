"""Real SGLang programs with ``power_gen`` in place of ``sgl.gen``, on the CPU server.

Three programs in the style of SGLang's own benchmark programs, each run through
``run_batch(num_threads=8)``: a few-shot arithmetic program (``benchmark/gsm8k/bench_sglang.py``:
few-shot prompt, a generation with ``stop``), graded; a multi-turn chat (``sgl.assistant(...)``
around the expression, two turns); and a tree-of-thought-style program (``s.fork``, a thought per
branch, then an answer on each branch). Every chain's response scores as a float32 forward of
the model says, after exactly its prompt ids. Needs sglang importable (``scripts/test.sh`` runs
this file with ``.venv-sglang``) and PRESTO_SGL_SGLANG_URL (fp32, with the plugin).
"""

from __future__ import annotations

import importlib.util

import pytest

from presto_sgl.tasks.extract import last_number, same_number
from tests.support.forward import assert_scores_match

pytestmark = pytest.mark.sglang

CHAIN = dict(block_size=4, steps=2, budget=4, alpha=4.0)
PAIRS = [(2, 3), (4, 1), (3, 3), (5, 2), (1, 6), (2, 2), (7, 1), (4, 4)]
FEW_SHOT = "".join(f"Question: What is {a} + {b}?\nAnswer: {a + b}\n\n" for a, b in ((1, 2), (3, 4), (2, 5)))


@pytest.fixture(scope="module")
def backend(server_url):
    if importlib.util.find_spec("sglang") is None:
        pytest.skip("sglang is not importable here; scripts/test.sh runs this file with .venv-sglang")
    import sglang as sgl

    return sgl.RuntimeEndpoint(server_url)


def scored(hf_model, meta) -> None:
    assert_scores_match(hf_model, meta["prompt_ids"], meta["output_ids"], meta["output_token_logp"])


def test_few_shot_arithmetic_graded(backend, hf_model):
    import sglang as sgl

    from presto_sgl.program import power_gen

    @sgl.function
    def few_shot(s, question):
        s += FEW_SHOT + "Question: " + question + "\nAnswer:"
        s += power_gen("answer", max_tokens=4, stop=["Question", "\n"], **CHAIN)

    states = few_shot.run_batch(
        [{"question": f"What is {a} + {b}?"} for a, b in PAIRS], backend=backend, num_threads=8, progress_bar=True
    )
    correct = 0
    for (a, b), st in zip(PAIRS, states, strict=True):
        meta = st.get_meta_info("answer")
        assert "\n" not in st["answer"] and "Question" not in st["answer"] and len(meta["answer_ids"]) <= 4
        scored(hf_model, meta)
        got = last_number(st["answer"])
        correct += got is not None and same_number(got, str(a + b))
    print(f"few-shot arithmetic: {correct}/{len(PAIRS)} correct")  # 4/8 in the run that wrote this (unseeded)
    assert correct >= 1, f"no single-digit sum right in {len(PAIRS)}: the answers are not what the grader reads"


def test_multi_turn_chat(backend, hf_model):
    import sglang as sgl

    from presto_sgl.program import power_gen

    @sgl.function
    def chat(s, first, second):
        s += sgl.user(first)
        s += sgl.assistant(power_gen("a1", max_tokens=8, **CHAIN))
        s += sgl.user(second)
        s += sgl.assistant(power_gen("a2", max_tokens=8, **CHAIN))

    turns = [
        {"first": "Name a fruit.", "second": "What color is it?"},
        {"first": "Name a planet.", "second": "Is it large?"},
    ] * 2
    for st in chat.run_batch(turns, backend=backend, num_threads=8):
        a1, a2 = st.get_meta_info("a1"), st.get_meta_info("a2")
        assert [m["role"] for m in st.messages()][-4:] == ["user", "assistant", "user", "assistant"]
        assert st.messages()[-1]["content"] == st["a2"].lstrip() and st.messages()[-3]["content"] == st["a1"].lstrip()
        assert a2["prompt_source"] == "ids+text"  # the first answer's exact ids, then the text after it
        assert a2["prompt_ids"][: len(a1["prompt_ids"]) + len(a1["answer_ids"])] == a1["prompt_ids"] + a1["answer_ids"]
        scored(hf_model, a1)
        scored(hf_model, a2)


def test_tree_of_thought_with_forks(backend, hf_model):
    import sglang as sgl

    from presto_sgl.program import power_gen

    @sgl.function
    def tree(s, question):
        s += sgl.user(question)
        s += sgl.assistant_begin()
        s += "Let me think."
        branches = s.fork(2)
        branches += power_gen("thought", max_tokens=8, **CHAIN)
        for branch in branches:
            branch += " So the answer is"
            branch += power_gen("answer", max_tokens=4, **CHAIN)
        return [(b.get_meta_info("thought"), b.get_meta_info("answer")) for b in branches]

    states = tree.run_batch(
        [{"question": q} for q in ("What is 2 + 2?", "Name a color.")], backend=backend, num_threads=8
    )
    ids = set()
    for st in states:
        branches = st.ret_value
        assert len(branches) == 2 and branches[0][0]["prompt_ids"] == branches[1][0]["prompt_ids"]
        for thought, answer in branches:
            ids |= {(thought["seed"], thought["chain_id"]), (answer["seed"], answer["chain_id"])}
            assert answer["prompt_source"] == "ids+text"
            scored(hf_model, thought)
            scored(hf_model, answer)
    assert len(ids) == 2 * 2 * 2  # every chain of every program and branch its own


def test_the_readme_program_runs_as_written(backend, server_url, hf_model):
    """The README's program, as written but for the server URL and a shorter chain (T 8, 2
    steps, so that it takes seconds here): it runs, prints the answer and the recorded seed, and
    the chains score as a float32 forward says."""
    import contextlib
    import io
    import re
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    section = readme[readme.index("**In an SGLang program**") :]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    assert 'rule="step")' in code and "max_tokens=64" in code
    code = code.replace("http://127.0.0.1:30000", server_url).replace("max_tokens=64", "max_tokens=8")
    code = code.replace('rule="step")', 'rule="step", block_size=4, steps=2)')
    out, scope = io.StringIO(), {}
    with contextlib.redirect_stdout(out):
        exec(code, scope)
    states = scope["states"]
    assert out.getvalue() == f"{states[0]['answer']} {states[0].get_meta_info('answer')['seed']}\n"
    for st in states:
        scored(hf_model, st.get_meta_info("answer"))

"""Ordinary SGLang programs, unchanged, power-sampled by a scope (``power_sampling`` /
``power_sampled``) on the CPU SGLang server.

The programs use only SGLang's own calls (``sgl.gen``, ``sgl.select``, ``sgl.gen_int``,
``sgl.gen_string``): few-shot QA under ``run_batch`` threads, a select, a regex, JSON by regex
and by schema, dtype gens, forks (parallel decoding, and encoding of different branch texts),
streaming with log-probs, ``min_tokens``, a multi-turn chat and a tool call. Each runs as written
under the scope; every answer is checked against its call's constraint by an independent
validator (``re``, ``json``, ``jsonschema``), and every call is power-sampled (its meta info
has the chain's config). On the seeded embedded engine every chain is the one ``power_gen``
draws for the same call and keys. Outside the scope the program is SGLang's, untouched; a call
power sampling cannot honour is refused by name, or with ``fallback=True`` runs as SGLang's
own and says so. Needs sglang importable (``scripts/test.sh`` runs this file with
``.venv-sglang``) and PRESTO_SGL_SGLANG_URL.
"""

from __future__ import annotations

import importlib.util
import json
import re

import pytest

pytestmark = pytest.mark.sglang

CHAIN = dict(block_size=8, steps=2, budget=4)
SCHEMA = {
    "type": "object",
    "properties": {"color": {"enum": ["red", "green", "blue"]}, "size": {"type": "integer"}},
    "required": ["color", "size"],
    "additionalProperties": False,
}
JSON_REGEX = r'\{"name": "[a-z]{1,8}", "age": [0-9]{1,2}\}'
REGEX_INT = r"[-+]?[0-9]+[ \n]*"  # SGLang's regex for dtype=int (sglang.lang.ir), restated
REGEX_STR = r"\"[\w\d\s]*\""  # ... and for dtype=str


@pytest.fixture(scope="module")
def backend(server_url):
    if importlib.util.find_spec("sglang") is None:
        pytest.skip("sglang is not importable here; scripts/test.sh runs this file with .venv-sglang")
    import sglang as sgl

    return sgl.RuntimeEndpoint(server_url)


def powered(meta) -> None:
    """The call was power-sampled: its meta info carries the chain's config and MH transitions."""
    assert meta is not None and "config" in meta and meta["transitions"] >= 1, meta
    assert meta.get("presto", {}).get("power_sampled", True)


def programs():
    """The test's programs, as an SGLang user writes them (SGLang's calls only)."""
    import sglang as sgl

    @sgl.function
    def few_shot(s, question):
        s += "Question: What is 2 + 3?\nAnswer: 5\n\nQuestion: What is 4 + 1?\nAnswer: 5\n\n"
        s += "Question: " + question + "\nAnswer:"
        s += sgl.gen("answer", max_tokens=6, stop=["\n", "Question"])

    @sgl.function
    def structured(s):
        s += sgl.user("Is the sky blue? Then give a code, a person as JSON, a shirt as JSON, a number and a word.")
        s += sgl.assistant_begin()
        s += "Answer: " + sgl.select("yes_no", choices=["yes", "no"]) + "\nCode: "
        s += sgl.gen("code", max_tokens=12, regex=r"[A-Z]{3}-[0-9]{2}")
        s += "\nPerson: " + sgl.gen("person", max_tokens=32, regex=JSON_REGEX)
        s += "\nShirt: " + sgl.gen("shirt", max_tokens=40, json_schema=json.dumps(SCHEMA))
        s += "\nNumber: " + sgl.gen_int("number", max_tokens=8)
        s += "\nWord: " + sgl.gen_string("word", max_tokens=12)
        s += sgl.assistant_end()

    @sgl.function
    def branches(s, topic):
        s += "Two ideas about " + topic + ".\n"
        forks = s.fork(2)
        for i, f in enumerate(forks):  # parallel encoding: each branch its own text, then parallel decoding
            f += f"Idea {i + 1}:"
            f += sgl.gen("idea", max_tokens=8, stop="\n")
        s += "Best: " + forks[0]["idea"] + "\nVerdict: " + sgl.gen("verdict", max_tokens=8, min_tokens=3)

    @sgl.function
    def chat(s):
        s += sgl.system("You are terse.")
        s += sgl.user("Name a fruit.")
        s += sgl.assistant(sgl.gen("fruit", max_tokens=8))
        s += sgl.user("Its color?")
        s += sgl.assistant(sgl.gen("color", max_tokens=8))

    @sgl.function
    def tool_use(s, question):
        s += sgl.user(question + " Tools: calculator, search.")
        s += sgl.assistant_begin()
        s += "Tool: " + sgl.gen("tool", choices=["calculator", "search"])
        s += "\nInput: " + sgl.gen("input", max_tokens=12, regex=r"[0-9]+ [+*-] [0-9]+")
        s += sgl.assistant_end()
        s += sgl.user("Result: 42. Now answer.")
        s += sgl.assistant(sgl.gen("final", max_tokens=8))

    @sgl.function
    def streamed(s):
        s += "Count: one, two,"
        s += sgl.gen("more", max_tokens=8, return_logprob=True)

    return few_shot, structured, branches, chat, tool_use, streamed


def test_ordinary_programs_run_unchanged_under_the_switch(backend):
    import jsonschema

    from presto_sgl.program import power_sampled, power_sampling

    few_shot, structured, branches, chat, tool_use, streamed = programs()
    with power_sampling(alpha=4.0, **CHAIN):
        batch = few_shot.run_batch(
            [{"question": f"What is {a} + {b}?"} for a, b in ((1, 1), (2, 2), (3, 1), (2, 5))],
            backend=backend,
            num_threads=4,
        )
        st = structured.run(backend=backend)
        br = branches.run(topic="tea", backend=backend)
        ch = chat.run(backend=backend)
        streamed_state = streamed.run(backend=backend, stream=True)
        pieces = list(streamed_state.text_iter())
    tool = power_sampled(tool_use, alpha=4.0, **CHAIN).run(question="What is 6 times 7?", backend=backend)

    for state in batch:  # run_batch's threads kept the scope
        assert state.error() is None
        powered(state.get_meta_info("answer"))
        assert "\n" not in state["answer"] and "Question" not in state["answer"]
    assert st.error() is None, st.error()
    assert st["yes_no"] in ("yes", "no") and st.get_meta_info("yes_no")["choices"] == ["yes", "no"]
    for name in ("code", "person", "shirt", "number", "word"):
        powered(st.get_meta_info(name))
    ended = lambda name: st.get_meta_info(name)["finish_reason"]["type"] == "stop"  # noqa: E731  (else a prefix cut at the cap)
    assert re.fullmatch(r"[A-Z]{3}-[0-9]{2}", st["code"]) or not ended("code")
    if ended("person"):
        assert re.fullmatch(JSON_REGEX, st["person"])
        assert set(json.loads(st["person"])) == {"name", "age"}
    if ended("shirt"):
        jsonschema.validate(json.loads(st["shirt"]), SCHEMA)
    if ended("number"):
        assert re.fullmatch(REGEX_INT, st["number"]) and int(st["number"].strip()) == int(st["number"])
    if ended("word"):
        assert re.fullmatch(REGEX_STR, st["word"])
    assert sum(map(ended, ("code", "person", "shirt", "number", "word"))) >= 3  # most answers are whole
    assert br.error() is None
    for name in ("verdict",):
        meta = br.get_meta_info(name)
        powered(meta)
        assert len(meta["answer_ids"]) >= 3 or meta["finish_reason"]["type"] == "length"  # min_tokens: no EOS before 3
    assert br.text().startswith("Two ideas about tea.\nBest: ")
    for name in ("fruit", "color"):
        powered(ch.get_meta_info(name))
    assert ch.messages()[-1]["role"] == "assistant" and ch.messages()[-1]["content"] == ch["color"]
    meta = streamed_state.get_meta_info("more")
    powered(meta)
    assert "".join(pieces).endswith(streamed_state["more"])
    assert len(meta["output_token_logprobs"]) == len(meta["answer_ids"])
    assert tool["tool"] in ("calculator", "search") and tool.error() is None
    powered(tool.get_meta_info("final"))
    assert (
        re.fullmatch(r"[0-9]+ [+*-] [0-9]+", tool["input"])
        or tool.get_meta_info("input")["finish_reason"]["type"] == "length"
    )


def test_forks_each_get_their_own_chain(backend):
    """The forks' chains are distinct (their keys come from their place), each power-sampled."""
    import sglang as sgl

    from presto_sgl.program import power_sampling

    @sgl.function
    def fan(s):
        s += "List a color:"
        forks = s.fork(3)
        for f in forks:
            f += sgl.gen("c", max_tokens=8)
        s["ids"] = [f.get_meta_info("c")["chain_id"] for f in forks]

    with power_sampling(seed=3, **CHAIN):
        state = fan.run(backend=backend)
    assert state.error() is None and len(set(state["ids"])) == 3


def test_outside_the_scope_the_program_is_sglangs(backend):
    import sglang as sgl

    from presto_sgl.program import power_sampling

    @sgl.function
    def plain(s):
        s += "Say hi:" + sgl.gen("hi", max_tokens=4, temperature=0)

    with power_sampling(**CHAIN):
        inside = plain.run(backend=backend)
    outside = plain.run(backend=backend)
    powered(inside.get_meta_info("hi"))
    assert "config" not in outside.get_meta_info("hi")  # SGLang's own generation, untouched


def test_what_cannot_be_honoured_is_refused_by_name_or_run_as_sglangs_when_asked(backend):
    import sglang as sgl

    from presto_sgl import ConfigError
    from presto_sgl.program import power_sampling

    @sgl.function
    def nucleus(s):
        s += "Say hi:" + sgl.gen("hi", max_tokens=4, top_p=0.9)
        s += " and" + sgl.gen("then", max_tokens=4, top_p=1.0)  # top_p 1: asks for nothing

    with power_sampling(**CHAIN):
        refused = nucleus.run(backend=backend)
    assert isinstance(refused.error(), ConfigError) and refused.error().param == "top_p"
    with power_sampling(fallback=True, **CHAIN):
        mixed = nucleus.run(backend=backend)
    assert mixed.error() is None
    meta = mixed.get_meta_info("hi")
    assert meta["presto"]["power_sampled"] is False and "top_p" in meta["presto"]["reason"] and "config" not in meta
    powered(mixed.get_meta_info("then"))
    with pytest.raises(ConfigError, match="`max_tokens` is not a power-sampling scope option"):
        power_sampling(max_tokens=8).__enter__()
    with pytest.raises(ConfigError, match="`steps`"):
        power_sampling(steps=-1).__enter__()


def test_every_chain_is_power_gens_for_the_same_call_and_keys(backend):
    """On the seeded embedded engine: the scoped program and the same program written with
    power_gen (same arguments, the scope's seed) draw the same chains, call by call."""
    import sglang as sgl

    from presto_sgl.models import embedded_engine
    from presto_sgl.program import power_gen, power_gen_int, power_sampling

    smol = embedded_engine("smollm2")
    opts = dict(seed=11, engine=smol, **CHAIN)

    @sgl.function
    def written(s):
        s += "Pick and explain:" + sgl.select("pick", ["tea", "coffee"])
        s += "\nWhy:" + sgl.gen("why", max_tokens=8, stop="\n")
        s += "\nCups:" + sgl.gen_int("cups", max_tokens=4)
        forks = s.fork(2)
        for f in forks:
            f += sgl.gen("more", max_tokens=8)
        s["more"] = [(f.get_meta_info("more")["chain_id"], f.get_meta_info("more")["output_ids"]) for f in forks]

    @sgl.function
    def edited(s):
        s += "Pick and explain:" + power_gen("pick", choices=["tea", "coffee"], seed=11, engine=smol)
        s += "\nWhy:" + power_gen("why", max_tokens=8, stop="\n", **opts)
        s += "\nCups:" + power_gen_int("cups", max_tokens=4, **opts)
        forks = s.fork(2)
        for f in forks:
            f += power_gen("more", max_tokens=8, **opts)
        s["more"] = [(f.get_meta_info("more")["chain_id"], f.get_meta_info("more")["output_ids"]) for f in forks]

    with power_sampling(**opts):
        a = written.run(backend=backend)
    b = edited.run(backend=backend)
    assert a.error() is None and b.error() is None
    assert a["pick"] == b["pick"] and a.get_meta_info("pick")["choice_probs"] == b.get_meta_info("pick")["choice_probs"]
    for name in ("why", "cups"):
        ma, mb = a.get_meta_info(name), b.get_meta_info(name)
        assert (ma["output_ids"], ma["chain_id"], ma["config"]) == (mb["output_ids"], mb["chain_id"], mb["config"])
    assert a.text() == b.text() and a["more"] == b["more"] and a["more"][0][0] != a["more"][1][0]  # two forks' chains

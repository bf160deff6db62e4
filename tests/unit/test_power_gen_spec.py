"""``power_gen``'s arguments as ``sgl.gen``'s (without sglang: the validated spec of a call), and
the exact draw of a choice (pi(c) ∝ p0(c | x)^alpha) on the reference engine."""

from __future__ import annotations

import dataclasses
import math
from collections import Counter

import numpy as np
import pytest

from presto_sgl import ConfigError, PowerConfig
from presto_sgl.engines.reference import ReferenceEngine, ReferenceLM
from presto_sgl.execution.choices import draw_choice, power_probs
from presto_sgl.program.execution import on_engine
from presto_sgl.program.spec import REFUSED, ChoiceSpec, GenSpec, choice_spec, gen_spec, spec_of, with_run_defaults
from tests.support.enumerated import chi_square_pvalue

CHAIN = dict(max_tokens=8, block_size=4, steps=2)


def test_an_anonymous_call_is_a_call_without_a_variable():
    spec = gen_spec(**CHAIN)
    assert isinstance(spec, GenSpec) and spec.name is None
    assert choice_spec(choices=["a", "b"]).name is None
    with pytest.raises(ConfigError, match=r"`name`.*or None"):
        gen_spec("", **CHAIN)


@pytest.mark.parametrize("temperature, alpha", [(0.25, 4.0), (0.5, 2.0), (1.0, 1.0), (0, 4.0), (None, 4.0)])
def test_temperature_sets_alpha_as_serve_reads_it(temperature, alpha):
    """t > 0: alpha = 1/t (p0^alpha is p0 at sequence-level temperature 1/alpha); 0 (greedy) or
    unset keeps the default alpha."""
    config = gen_spec("x", temperature=temperature, **CHAIN).method.config
    assert isinstance(config, PowerConfig) and config.target.alpha == alpha
    assert choice_spec("x", choices=["a", "b"], temperature=temperature).alpha == alpha


class RunDefaults:
    """``program.run(...)``'s ``default_sampling_para`` (its fields that power_gen takes)."""

    def __init__(self, **fields):
        self.max_new_tokens = self.stop = self.stop_token_ids = self.return_logprob = None
        self.__dict__.update(fields)


def merged_call(call: dict, defaults: RunDefaults) -> dict:
    """The reference: the call's arguments with the run's where unset, parsed again (what
    power_gen did before it kept its spec)."""
    out = dict(call)
    for field, arg in (("max_new_tokens", "max_tokens"), ("stop", "stop"), ("stop_token_ids", "stop_token_ids")):
        value = getattr(defaults, field)
        if out.get(arg) is None and not (arg == "max_tokens" and "max_new_tokens" in out) and value not in (None, []):
            out[arg] = value
    if out.get("return_logprob") is None and defaults.return_logprob is not None:
        out["return_logprob"] = defaults.return_logprob
    return out


RUN = RunDefaults(max_new_tokens=20, stop=["\n"], stop_token_ids=[5], return_logprob=True)


@pytest.mark.parametrize(
    "call, defaults",
    [
        ({"name": "a"}, RUN),
        ({"name": "a", "block_size": 8, "ending": "fixed"}, RUN),
        ({"name": "a", "block_size": None}, RUN),
        ({"name": "a", "max_new_tokens": 32, "block_size": 8}, RUN),
        ({"name": "a", "max_tokens": 10, "stop": "Q:", "return_logprob": False}, RUN),
        ({"name": "a", "method": "bestofn", "best_of": 2}, RUN),
        ({"name": "a", "method": "powersmc", "block_size": 4}, RUN),
        ({"name": "a", "regex": "[ab]+", "method": "entropycut"}, RunDefaults(max_new_tokens=30)),
        ({"name": "a", "rule": "sequential", "steps": 3}, RunDefaults(stop="x")),
        ({"name": "a", "max_tokens": 12}, RunDefaults()),
    ],
)
def test_run_level_defaults_are_typed_replaces_of_the_kept_spec(call, defaults):
    """A call is validated once, when the expression is made; the program's run-level values fill
    what it left unset as typed replaces, giving the spec that parsing the merged call gives."""
    kept = with_run_defaults(gen_spec(**call), defaults)
    reparsed = gen_spec(**merged_call(call, defaults))
    assert dataclasses.replace(kept, given=frozenset()) == dataclasses.replace(reparsed, given=frozenset())


def test_a_bad_run_level_value_is_refused_by_name():
    spec = gen_spec("a")
    for defaults, arg in (
        (RunDefaults(stop=[""]), "stop"),
        (RunDefaults(stop_token_ids=[-1]), "stop_token_ids"),
        (RunDefaults(max_new_tokens=0), "max_tokens"),
    ):
        with pytest.raises(ConfigError) as err:
            with_run_defaults(spec, defaults)
        assert err.value.param == arg
    assert with_run_defaults(spec, RunDefaults()) is spec


def test_temperature_and_a_different_alpha_are_refused_by_name():
    assert gen_spec("x", temperature=0.5, alpha=2.0, **CHAIN).method.config.target.alpha == 2.0
    for bad in ({"temperature": 0.5, "alpha": 3.0}, {"temperature": -1.0}, {"temperature": 1e9}):
        with pytest.raises(ConfigError, match="`temperature`"):
            gen_spec("x", **bad, **CHAIN)


@pytest.mark.parametrize("arg", sorted(REFUSED))
def test_what_power_gen_cannot_honour_is_refused_by_name_with_the_reason(arg):
    with pytest.raises(ConfigError, match=f"`{arg}` is an sgl.gen argument that power_gen cannot honour \\("):
        gen_spec("x", **{arg: 1}, **CHAIN)


def test_steps_zero_is_refused_rather_than_a_plain_draw():
    with pytest.raises(ConfigError, match=r"`steps` \(=0\) runs no MH transition.*lowtemp"):
        gen_spec("x", max_tokens=8, steps=0)


def test_choices_make_a_choice_spec_and_refuse_the_chains_parameters():
    spec = spec_of("pick", choices=["yes", "no"], alpha=2.0, max_tokens=16, stop="\n")  # sgl.gen ignores these too
    assert spec == ChoiceSpec("pick", ("yes", "no"), 2.0, None, chain_id=None, engine=None)
    for bad, match in (
        ({"choices": []}, "`choices`"),
        ({"choices": ["a", "a"]}, "distinct"),
        ({"choices": "ab"}, "`choices`"),
        ({"choices": ["a"], "rule": "bfs"}, "`rule` does not apply to choices"),
        ({"choices": ["a"], "steps": 3}, "`steps` does not apply to choices"),
        ({"choices": ["a"], "choices_method": "greedy"}, "`choices_method`"),
        ({"choices": ["a"], "alpha": 0.0}, "`alpha`"),
    ):
        with pytest.raises(ConfigError, match=match):
            spec_of("pick", **bad)


def test_a_capped_answer_targets_the_responses_that_end():
    """max_tokens caps an answer that ends at EOS: the default target is eos (a short answer stops
    paying for the cap); an exact max_new_tokens, an explicit target and the baselines keep theirs;
    an engine whose model has no stop token falls back to fixed."""
    capped = gen_spec("x", **CHAIN)
    assert capped.default_eos and capped.method.config.target.ending == "eos"
    exact = gen_spec("x", max_new_tokens=8, block_size=4, steps=2)
    assert not exact.default_eos and exact.method.config.target.ending == "fixed"
    chosen = gen_spec("x", ending="fixed", **CHAIN)
    assert not chosen.default_eos and chosen.method.config.target.ending == "fixed"
    assert not gen_spec("x", method="bestofn", max_tokens=8).default_eos
    no_stop = on_engine(capped, ReferenceEngine(_lm()))
    assert isinstance(no_stop.config, PowerConfig) and no_stop.config.target.ending == "fixed"
    stops = on_engine(capped, ReferenceEngine(_lm(), stop_ids=(0,)))
    assert stops is capped.method


def _lm() -> ReferenceLM:
    return ReferenceLM(6, sharpness=1.5, seed=2)


CHOICES = [(1,), (2, 3), (4, 0, 5), (3,)]
PROMPT = (1, 2)


def test_the_choice_law_is_p0_to_the_alpha_of_each_choice():
    """log p0(c | x) summed from the exact reference LM; pi ∝ p0^alpha; keyed: the same seed and
    id draw the same choice."""
    lm, alpha = _lm(), 3.0
    drawn = draw_choice(ReferenceEngine(lm), PROMPT, CHOICES, alpha, seed=1, prompt_id=0)
    want = [lm.score(PROMPT, c)[0] for c in CHOICES]
    assert np.allclose(drawn.logp, want, atol=1e-6)
    weights = np.exp(alpha * np.array(want))
    assert np.allclose(drawn.probs, weights / weights.sum(), atol=1e-9) and math.isclose(sum(drawn.probs), 1.0)
    again = draw_choice(ReferenceEngine(lm), PROMPT, CHOICES, alpha, seed=1, prompt_id=0)
    assert again == drawn


def test_draws_follow_the_choice_law():
    eng, alpha = ReferenceEngine(_lm()), 2.0
    law = np.array(draw_choice(eng, PROMPT, CHOICES, alpha, seed=0).probs)
    counts = Counter(draw_choice(eng, PROMPT, CHOICES, alpha, seed=s).index for s in range(4000))
    p, tv = chi_square_pvalue(counts, law, list(range(len(CHOICES))), 4000)
    assert p > 1e-3 and tv < 0.03, (p, tv, counts)
    sabotaged = np.array(power_probs([math.log(x) for x in law], 0.5))  # a wrong exponent: rejected
    p_bad, _ = chi_square_pvalue(counts, sabotaged, list(range(len(CHOICES))), 4000)
    assert p_bad < 1e-6


def test_a_choice_needs_a_prompt_and_non_empty_choices():
    eng = ReferenceEngine(_lm())
    with pytest.raises(ValueError, match="prompt is empty"):
        draw_choice(eng, (), CHOICES, 2.0, seed=0)
    with pytest.raises(ValueError, match="non-empty"):
        draw_choice(eng, PROMPT, [(1,), ()], 2.0, seed=0)


def test_structured_arguments_constrain_the_chains_target():
    from presto_sgl.constraints import REGEX_INT, Constraint

    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    for kwargs, want in (
        ({"regex": "(yes|no)"}, Constraint(regex="(yes|no)")),
        ({"json_schema": schema}, Constraint(json_schema=schema)),
        ({"json_schema": '{"type": "object"}'}, Constraint(json_schema={"type": "object"})),
        ({"dtype": int}, Constraint(regex=REGEX_INT)),
        ({"dtype": "int"}, Constraint(regex=REGEX_INT)),
        ({"min_tokens": 3}, Constraint(min_tokens=3)),
        ({"min_new_tokens": 3, "regex": "a+"}, Constraint(regex="a+", min_tokens=3)),
    ):
        for cap in ({"max_tokens": 16}, {"max_new_tokens": 16}):  # a constraint defaults to eos either way
            target = gen_spec("x", **kwargs, **cap, block_size=4, steps=2).method.config.target
            assert target.constraint == want and target.ending == "eos"
    assert gen_spec("x", min_tokens=0, **CHAIN).method.config.target.constraint is None
    assert gen_spec("x", stop_regex=r"\d", **CHAIN).stop_regex == (r"\d",)
    for bad, match in (
        ({"regex": "a+", "ending": "fixed"}, "needs ending='eos'"),
        ({"regex": "a+", "dtype": int}, "`regex` or `dtype`"),
        ({"regex": "a+", "json_schema": schema}, "`regex` or `json_schema`"),
        ({"dtype": list}, "`dtype`"),
        ({"json_schema": "{nope"}, "`json_schema` is not valid JSON"),
        ({"json_schema": [1]}, "`json_schema` must be a JSON object"),
        ({"min_tokens": 2, "min_new_tokens": 3}, "not both"),
        ({"min_tokens": -1}, "`min_tokens`"),
        ({"stop_regex": "("}, "`stop_regex`"),
        ({"regex": "(a"}, "`regex` cannot be compiled into a grammar"),
        ({"json_schema": {"type": 5}}, "`json_schema` cannot be compiled into a grammar"),
        ({"ebnf": 'root ::= "\udb69"'}, "`ebnf` cannot be compiled into a grammar"),  # a lone surrogate
        ({"regex": "a+", "method": "bestofn"}, "baseline 'bestofn' does not sample under a constraint"),
    ):
        with pytest.raises(ConfigError, match=match):
            gen_spec("x", **bad, **CHAIN)


def test_each_declared_grammar_kind_reaches_every_front_end(monkeypatch):
    """A grammar kind is declared once (:data:`~presto_sgl.constraints.GRAMMARS`): from that
    declaration alone a toy kind is a ``power_gen`` argument, a request field of both endpoints
    and a constraint, which an engine that cannot compile it refuses by name. A kind that is not
    declared is refused, and so are two grammars at once."""
    import inspect

    from presto_sgl import constraints
    from presto_sgl.constraints import GRAMMARS, Constraint, Grammar
    from presto_sgl.program.frontend import power_gen
    from presto_sgl.serve.fieldtable import request_fields

    toy = Grammar(
        "toy_regex",
        str,
        schema={"type": "string", "minLength": 1},
        doc="a regex by another name",
        source=str,
        accepts=lambda source, answer: None,
    )
    monkeypatch.setitem(constraints.GRAMMARS, "toy_regex", toy)
    for kind in GRAMMARS:
        assert kind in inspect.signature(power_gen).parameters
        for endpoint in ("completions", "chat"):
            assert kind in {f.name for f in request_fields(endpoint)}
    assert Constraint(toy_regex="[0-9]+").grammar == ("toy_regex", "[0-9]+")
    with pytest.raises(ConfigError, match=r"`toy_regex` cannot be compiled.*no compiler for toy_regex"):
        gen_spec("x", toy_regex="[0-9]+", **CHAIN)
    with pytest.raises(TypeError, match="the grammar kinds are"):
        Constraint(lark="start: 'a'")
    with pytest.raises(ConfigError, match="`regex` or `toy_regex`"):
        Constraint(regex="a", toy_regex="b")

"""lm-evaluation-harness against ``presto-sgl serve --engine sglang``: its scores are ours.

``.venv-lmeval/bin/lm_eval`` (lm-eval[api], pinned; ``bash scripts/install_lmeval.sh``) runs,
fully offline, custom tasks over a JSONL file written here (small sums, "What is 3 + 4?")
against one ``presto-sgl serve`` on the real SGLang server (PRESTO_SGL_SGLANG_URL), with
short chains (``--block-size 4 --steps 2 --rule step``):

- ``generate_until`` through ``--model local-completions`` (the prompt sent as token ids from
  the server's own ``/tokenize``: ``tokenizer_backend=remote``) and through
  ``--model local-chat-completions --apply_chat_template``: lm-eval's ``exact_match`` of each
  logged response equals the grade of presto-sgl's own grader
  (:class:`presto_sgl.tasks.files.JsonlTask` over the same JSONL file), doc by doc and in the
  mean of its results file;
- ``multiple_choice`` (``loglikelihood`` requests: ``/v1/completions`` with ``echo``,
  ``logprobs=1``, ``max_tokens=1``): ``acc`` recomputed from the logged per-choice
  loglikelihoods, and every choice's loglikelihood equal to a float32 transformers forward of
  the model within 1e-3 (its is_greedy flag too, where the top two logits are apart).

Skipped without the server (PRESTO_SGL_SGLANG_URL) or without ``.venv-lmeval``; a failure
when PRESTO_SGL_REQUIRE_LMEVAL=1 (CI) and ``.venv-lmeval`` is missing.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from presto_sgl.tasks.files import JsonlTask
from tests.support.serving import client, health, serve_cli

pytestmark = pytest.mark.sglang

REPO = Path(__file__).resolve().parents[2]
LM_EVAL = REPO / ".venv-lmeval" / "bin" / "lm_eval"
SERVE = ("--engine", "sglang", "--max-new-tokens", "8", "--block-size", "4", "--steps", "2", "--rule", "step")
LL_TOL = 1e-3  # a choice's loglikelihood (1-2 tokens): served fp32 SGLang vs fp32 transformers

SUMS = [(3, 4), (2, 5), (6, 1), (4, 4), (1, 8), (5, 3), (9, 0), (2, 6)]
FEWSHOT = "Q: What is 1 + 1?\nA: 2\n\nQ: What is 2 + 3?\nA: 5\n\nQ: What is 4 + 2?\nA: 6\n\n"
# The last number of a response, as presto_sgl.tasks.extract.last_number finds it (its _NUMBER).
NUMBER = r"-?\d[\d,]*(?:\.\d+)?(?:/\d+)?"


def _docs() -> list[dict]:
    docs = []
    for i, (a, b) in enumerate(SUMS):
        s = a + b
        choices = [str(s - 1), str(s), str(s + 2)]
        choices = choices[i % 3 :] + choices[: i % 3]  # the right one at every position
        q = f"What is {a} + {b}?"
        docs.append(
            {
                "id": f"sum{i}",
                "question": q,
                "prompt": q,
                "answer": s,
                "chat": False,
                "choices": choices,
                "label": choices.index(str(s)),
            }
        )
    return docs


def _generate_task(name: str, data: Path, text: str, max_gen_toks: int, description: str = "") -> dict:
    # JSON is YAML: no escaping questions. exact_match ignores commas and a trailing ".0", as
    # same_number does for the answers here (small integers).
    return {
        "task": name,
        "dataset_path": "json",
        "dataset_kwargs": {"data_files": {"test": str(data)}},
        "test_split": "test",
        "output_type": "generate_until",
        "description": description,
        "doc_to_text": text,
        "doc_to_target": "{{answer}}",
        "generation_kwargs": {"until": ["\n"], "max_gen_toks": max_gen_toks, "do_sample": False},
        "filter_list": [
            {
                "name": "number",
                "filter": [
                    {"function": "regex", "regex_pattern": NUMBER, "group_select": -1},
                    {"function": "take_first"},
                ],
            }
        ],
        "metric_list": [
            {
                "metric": "exact_match",
                "aggregation": "mean",
                "higher_is_better": True,
                "regexes_to_ignore": [",", r"\.0+$"],
            }
        ],
        "metadata": {"version": 1.0},
    }


@pytest.fixture(scope="module")
def lm_eval_bin() -> Path:
    if not os.access(LM_EVAL, os.X_OK):
        if os.environ.get("PRESTO_SGL_REQUIRE_LMEVAL") == "1":
            pytest.fail(f"PRESTO_SGL_REQUIRE_LMEVAL=1 but {LM_EVAL} is missing; run bash scripts/install_lmeval.sh")
        pytest.skip("no .venv-lmeval (bash scripts/install_lmeval.sh creates it)")
    return LM_EVAL


@pytest.fixture(scope="module")
def tasks(tmp_path_factory) -> Path:
    """A folder with the JSONL file (docs.jsonl) and the three task YAMLs (lm-eval's --include_path)."""
    root = tmp_path_factory.mktemp("lm_eval_tasks")
    data = root / "docs.jsonl"
    data.write_text("".join(json.dumps(d) + "\n" for d in _docs()))
    configs = [
        _generate_task("presto_sgl_sum_gen", data, "Q: {{question}}\nA:", 8, FEWSHOT),
        _generate_task("presto_sgl_sum_chat", data, "{{question}} Answer with the number only.", 12),
        {
            "task": "presto_sgl_sum_mc",
            "dataset_path": "json",
            "dataset_kwargs": {"data_files": {"test": str(data)}},
            "test_split": "test",
            "output_type": "multiple_choice",
            "description": FEWSHOT,
            "doc_to_text": "Q: {{question}}\nA:",
            "doc_to_choice": "{{choices}}",
            "doc_to_target": "{{label}}",
            "metric_list": [{"metric": "acc", "aggregation": "mean", "higher_is_better": True}],
            "metadata": {"version": 1.0},
        },
    ]
    for config in configs:
        (root / f"{config['task']}.yaml").write_text(json.dumps(config, indent=1) + "\n")
    return root


@pytest.fixture(scope="module")
def served(lm_eval_bin, server_url):
    """(URL, model name) of one ``presto-sgl serve`` on the SGLang server for the module."""
    with serve_cli(*SERVE, "--url", server_url) as (url, _):
        yield url, client(url).models.list().data[0].id


def _lm_eval(
    lm_eval_bin: Path, tmp: Path, tasks: Path, model: str, model_args: str, names: list[str], *extra: str
) -> tuple[dict, dict[str, list[dict]]]:
    """``lm_eval run`` offline in a subprocess: (its results JSON, {task: its logged samples})."""
    out = tmp / "out"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env |= {
        "HF_HOME": str(tmp / "hf"),
        "HF_DATASETS_CACHE": str(tmp / "hf" / "datasets"),
        "HF_HUB_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "HF_HUB_DISABLE_TELEMETRY": "1",
        "TQDM_DISABLE": "1",
        "TOKENIZERS_PARALLELISM": "false",
    }
    cmd = [
        str(lm_eval_bin),
        "run",
        "--model",
        model,
        "--model_args",
        model_args,
        "--tasks",
        ",".join(names),
        "--include_path",
        str(tasks),
        "--output_path",
        str(out),
        "--log_samples",
        *extra,
    ]
    start = time.monotonic()
    proc = subprocess.run(
        cmd, env=env, cwd=tmp, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=600
    )
    assert proc.returncode == 0, f"lm_eval exited {proc.returncode}:\n{proc.stdout[-6000:]}"
    results = sorted(out.rglob("results_*.json"))
    assert len(results) == 1, f"lm_eval wrote {results}:\n{proc.stdout[-3000:]}"
    samples = {}
    for name in names:
        files = sorted(out.rglob(f"samples_{name}_*.jsonl"))
        assert len(files) == 1, f"no logged samples of {name}: {files}"
        samples[name] = [json.loads(line) for line in files[0].read_text().splitlines() if line.strip()]
    print(f"lm_eval {model} {names}: {time.monotonic() - start:.1f} s")
    return json.loads(results[0].read_text()), samples


@pytest.fixture(scope="module")
def runs(lm_eval_bin, served, tasks, tmp_path_factory) -> dict[str, tuple[dict, dict[str, list[dict]], int]]:
    """The two lm_eval runs, one after the other (at once they only contend for this machine's
    cores): local-completions on the generate_until and the multiple_choice task,
    local-chat-completions (--apply_chat_template) on the chat one. Each with the chains the
    server completed during it."""
    url, model = served
    configs: dict[str, tuple[str, str, list[str], *tuple[str, ...]]] = {  # (lm, model args, tasks, *flags)
        "completions": (
            "local-completions",
            f"base_url={url}/v1/completions,model={model},tokenizer_backend=remote,"
            "num_concurrent=4,max_retries=1,tokenized_requests=True",
            ["presto_sgl_sum_gen", "presto_sgl_sum_mc"],
        ),
        "chat": (
            "local-chat-completions",
            f"base_url={url}/v1/chat/completions,model={model},num_concurrent=4,max_retries=1",
            ["presto_sgl_sum_chat"],
            "--apply_chat_template",
        ),
    }
    out = {}
    for key, (lm, args, names, *extra) in configs.items():
        before = health(url)["chains"]["completed"]
        results, samples = _lm_eval(
            lm_eval_bin, tmp_path_factory.mktemp(f"lm_eval_{key}"), tasks, lm, args, names, *extra
        )
        out[key] = results, samples, health(url)["chains"]["completed"] - before
    return out


def _assert_graded_as_ours(results: dict, samples: list[dict], task: str, tasks: Path) -> float:
    """lm-eval's exact_match, doc by doc and its mean, is presto-sgl's JsonlTask grade of the
    same logged response; returns the mean."""
    grader = JsonlTask(tasks / "docs.jsonl")
    ours = {p.id: p for p in grader.problems()}
    assert sorted(s["doc"]["id"] for s in samples) == sorted(ours), "one logged sample per doc"
    grades, disagree = [], []
    for s in samples:
        assert s["filter"] == "number"
        response = s["resps"][0][0]
        assert isinstance(response, str)
        grade = grader.grade(ours[s["doc"]["id"]], response)
        assert grade.correct is not None, "every doc has a reference answer"
        score = float(grade.correct)
        grades.append(score)
        if score != s["exact_match"]:
            disagree.append((s["doc"]["id"], response, s["filtered_resps"], s["exact_match"], grade))
    assert not disagree, f"lm-eval and presto-sgl grade these responses apart: {disagree}"
    mean = results["results"][task]["exact_match,number"]
    assert mean == pytest.approx(sum(grades) / len(grades), abs=1e-12)
    print(
        f"{task}: lm-eval exact_match {mean:.3f} = presto-sgl's {sum(grades) / len(grades):.3f}; "
        f"responses {[s['resps'][0][0] for s in samples]}"
    )
    return mean


def test_generate_until_through_local_completions_scores_as_our_grader(runs, tasks):
    results, samples, chains = runs["completions"]
    _assert_graded_as_ours(results, samples["presto_sgl_sum_gen"], "presto_sgl_sum_gen", tasks)
    assert chains >= len(SUMS), "every generate_until request is a power-sampling chain on the server"


def test_generate_until_through_local_chat_completions_scores_as_our_grader(runs, tasks):
    results, samples, chains = runs["chat"]
    _assert_graded_as_ours(results, samples["presto_sgl_sum_chat"], "presto_sgl_sum_chat", tasks)
    assert chains >= len(SUMS), "every generate_until request is a power-sampling chain on the server"


def _encode_pair(tok, context: str, continuation: str) -> tuple[list[int], list[int]]:
    """lm-eval's TemplateLM._encode_pair (causal), with the server's tokenizer: trailing spaces of
    the context move to the continuation; the continuation is the whole's ids past the context's."""
    n = len(context) - len(context.rstrip())
    if n:
        context, continuation = context[:-n], context[-n:] + continuation
    whole = tok.encode(context + continuation, add_special_tokens=False)
    ctx = tok.encode(context, add_special_tokens=False)
    return ctx, whole[len(ctx) :]


def _forward(hf_model, pairs: list[tuple[list[int], list[int]]]) -> list[tuple[float, bool | None]]:
    """For each (ctx, cont): the float32 forward's log p0 of ``cont`` after ``ctx``, and whether
    ``cont`` is its greedy continuation (None where the top two logits of a position are within
    1e-2: undecided). One batch, right-padded: causal attention keeps the padding out of every
    real position."""
    import torch

    seqs = [ctx + cont for ctx, cont in pairs]
    width = max(map(len, seqs))
    with torch.no_grad():
        logits = hf_model(torch.tensor([q + [0] * (width - len(q)) for q in seqs])).logits.float()
    out = []
    for row, (ctx, cont) in zip(logits, pairs):
        rows = torch.log_softmax(row[len(ctx) - 1 : len(ctx) - 1 + len(cont)], -1)
        logp = rows.gather(1, torch.tensor(cont)[:, None])[:, 0].sum().item()
        top2 = rows.topk(2, -1).values
        decided = bool(((top2[:, 0] - top2[:, 1]) > 1e-2).all())
        out.append((logp, bool((rows.argmax(-1) == torch.tensor(cont)).all()) if decided else None))
    return out


def test_loglikelihood_multiple_choice_acc_and_scores_match_a_float32_forward(runs, hf_model):
    import torch
    from transformers import AutoTokenizer

    results, samples, _ = runs["completions"]
    logged = samples["presto_sgl_sum_mc"]
    assert len(logged) == len(SUMS)
    tok = AutoTokenizer.from_pretrained(hf_model.name_or_path)
    accs, checked, worst = [], 0, 0.0
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a small model on a shared 2-core machine: intra-op threads only contend
    try:
        for s in logged:
            doc = s["doc"]
            lls = [float(r[0]) for r in s["filtered_resps"]]  # logged as strings: repr of the float, exact
            greedy = [r[1] == "True" for r in s["filtered_resps"]]
            assert len(lls) == len(doc["choices"])
            acc = float(lls.index(max(lls)) == doc["label"])
            assert acc == s["acc"], (doc, lls)
            accs.append(acc)
            args = [s["arguments"][f"gen_args_{i}"] for i in range(len(doc["choices"]))]
            assert [a["arg_1"] for a in args] == [" " + c for c in doc["choices"]]
            forward = _forward(hf_model, [_encode_pair(tok, a["arg_0"], a["arg_1"]) for a in args])
            for i, (choice, (want, want_greedy)) in enumerate(zip(doc["choices"], forward)):
                assert abs(lls[i] - want) < LL_TOL, (doc["id"], choice, lls[i], want)
                worst = max(worst, abs(lls[i] - want))
                assert want_greedy is None or greedy[i] == want_greedy, (doc["id"], choice, greedy[i])
                checked += 1
    finally:
        torch.set_num_threads(threads)
    assert checked == sum(len(d["choices"]) for d in _docs())
    mean = results["results"]["presto_sgl_sum_mc"]["acc,none"]
    assert mean == pytest.approx(sum(accs) / len(accs), abs=1e-12)
    print(
        f"presto_sgl_sum_mc: lm-eval acc {mean:.3f} = recomputed {sum(accs) / len(accs):.3f}; "
        f"{checked} choice loglikelihoods within {worst:.2e} (< {LL_TOL}) of the fp32 forward"
    )

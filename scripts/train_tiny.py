#!/usr/bin/env python
"""Train the tiny addition model shipped in ``presto_sgl/assets/tiny-adder/``.

A small ``LlamaForCausalLM`` (character-level tokenizer) learns the worked-step addition
task of :mod:`presto_sgl.tasks.addition` from problems generated on the fly, within a
wall-time budget on CPU. After training it is evaluated on held-out problems with greedy
decoding and with temperature-0.5 sampling, and the model, tokenizer and a README with
the numbers are written to ``--out``.

    .venv/bin/python scripts/train_tiny.py                 # time-budgeted (--minutes 6)
    .venv/bin/python scripts/train_tiny.py --steps 1500    # a fixed number of steps

All randomness comes from ``--seed`` through local ``random.Random`` / ``torch.Generator``
instances (and ``torch.manual_seed`` for the weight initialisation). With ``--minutes`` the
learning-rate schedule (linear warmup, cosine decay) follows the elapsed training time and
training stops when the budget is spent, so the number of steps depends on the machine's
speed (it is printed and written to the README); with ``--steps`` the schedule follows the
step count and the run is reproducible (same torch build and thread count).

On a shared 2-core machine ``--threads 1`` can be much faster than the default 2: with
another process busy on one core, two threads wait on each other at every op.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import torch  # noqa: E402
from tokenizers import Tokenizer, decoders, models  # noqa: E402
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast  # noqa: E402

from presto_sgl.tasks.addition import ALPHABET, EOS, Problem, is_correct, make_problem, make_problems  # noqa: E402

DEFAULT_OUT = REPO / "presto_sgl" / "assets" / "tiny-adder"
SPECIAL_TOKENS = ["<pad>", "<s>", "<unk>"]  # ids 0, 1, 2; then one id per ALPHABET character
EVAL_SEED = 1000  # the script's 200 held-out problems
TEST_SEED = 2024  # tests/engines/test_tiny_model.py's held-out problems
HELDOUT_SEEDS = (EVAL_SEED, TEST_SEED)


# ----------------------------------------------------------------------------- tokenizer


def build_tokenizer() -> PreTrainedTokenizerFast:
    """Character-level tokenizer: one id per character, decoding concatenates characters.

    A BPE model without merges and without normalizer or pre-tokenizer splits any text
    into single characters; characters outside ``ALPHABET`` map to ``<unk>``. No BOS is
    added automatically (the model is trained on prompts without one). ``"\\n"`` is the
    EOS token.
    """
    vocab = {tok: i for i, tok in enumerate(SPECIAL_TOKENS + list(ALPHABET))}
    assert len(vocab) == len(SPECIAL_TOKENS) + len(ALPHABET), "duplicate characters in ALPHABET"
    backend = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token="<unk>"))
    backend.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(
        tokenizer_object=backend,
        bos_token="<s>",
        eos_token=EOS,
        pad_token="<pad>",
        unk_token="<unk>",
        clean_up_tokenization_spaces=False,
        model_max_length=128,
    )


def check_tokenizer(tok, rng: random.Random) -> None:
    for _ in range(200):
        p = make_problem(rng, (1, 4))
        s = p.prompt + p.target
        ids = tok.encode(s, add_special_tokens=False)
        assert len(ids) == len(s), (s, ids)
        assert tok.decode(ids) == s, (s, tok.decode(ids))
        assert tok.encode(s) == ids  # nothing added by default either


def save_tokenizer(tok, out: Path) -> None:
    tok.save_pretrained(out)
    # Name the generic fast tokenizer class, which transformers 4.x also knows (5.x maps
    # it to its tokenizers backend); the default name in 5.x is "TokenizersBackend".
    cfg_path = out / "tokenizer_config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg["tokenizer_class"] = "PreTrainedTokenizerFast"
    cfg_path.write_text(json.dumps(cfg, indent=2) + "\n")


# ----------------------------------------------------------------------------- model


def build_model(args, tok) -> LlamaForCausalLM:
    config = LlamaConfig(
        vocab_size=len(tok),
        hidden_size=args.hidden,
        intermediate_size=args.intermediate,
        num_hidden_layers=args.layers,
        num_attention_heads=args.heads,
        num_key_value_heads=args.kv_heads,
        max_position_embeddings=128,
        rms_norm_eps=1e-5,
        tie_word_embeddings=True,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
        attention_dropout=0.0,
        initializer_range=0.02,
    )
    torch.manual_seed(args.seed)
    return LlamaForCausalLM(config)


def n_params(model) -> int:
    return sum(p.numel() for p in model.parameters())  # tied weights counted once


# ----------------------------------------------------------------------------- data


class Batches:
    """Random training batches, held-out problems excluded; labels only on the target."""

    def __init__(self, tok, seed: int, digits: tuple[int, int], exclude: set[tuple[int, int]]) -> None:
        self.rng = random.Random(seed)
        self.digits = digits
        self.exclude = exclude
        self.ids = {ch: tok.convert_tokens_to_ids(ch) for ch in ALPHABET}
        self.pad = tok.pad_token_id

    def problem(self) -> Problem:
        while True:
            p = make_problem(self.rng, self.digits)
            if (p.a, p.b) not in self.exclude:
                return p

    def __call__(self, batch_size: int) -> tuple[torch.Tensor, torch.Tensor]:
        rows = []
        for _ in range(batch_size):
            p = self.problem()
            prompt = [self.ids[c] for c in p.prompt]
            target = [self.ids[c] for c in p.target]
            rows.append((prompt + target, [-100] * len(prompt) + target))
        width = max(len(x) for x, _ in rows)
        # Right padding: under causal attention, pads after a row's end cannot affect it.
        input_ids = torch.tensor([x + [self.pad] * (width - len(x)) for x, _ in rows])
        labels = torch.tensor([y + [-100] * (width - len(y)) for _, y in rows])
        return input_ids, labels


# ----------------------------------------------------------------------------- decoding


@torch.no_grad()
def complete(
    model,
    tok,
    prompts: list[str],
    *,
    temperature: float = 0.0,
    max_new_tokens: int = 64,
    generator: torch.Generator | None = None,
    batch_size: int = 256,
) -> list[str]:
    """Completions of ``prompts`` (greedy when temperature == 0), cut after the first EOS.

    Prompts are batched by length so no padding is needed; a KV cache is used.
    """
    model.eval()
    eos = tok.eos_token_id
    out: list[str | None] = [None] * len(prompts)
    by_len: dict[int, list[int]] = {}
    for i, p in enumerate(prompts):
        by_len.setdefault(len(p), []).append(i)
    for idx_all in by_len.values():
        for start in range(0, len(idx_all), batch_size):
            idx = idx_all[start : start + batch_size]
            ids = torch.tensor([tok.encode(prompts[i], add_special_tokens=False) for i in idx])
            past = None
            new = []
            done = torch.zeros(len(idx), dtype=torch.bool)
            step_input = ids
            for _ in range(max_new_tokens):
                res = model(input_ids=step_input, past_key_values=past, use_cache=True)
                past = res.past_key_values
                logits = res.logits[:, -1, :].float()
                if temperature == 0:
                    nxt = logits.argmax(-1)
                else:
                    probs = torch.softmax(logits / temperature, dim=-1)
                    nxt = torch.multinomial(probs, 1, generator=generator).squeeze(-1)
                new.append(nxt)
                done |= nxt == eos
                if bool(done.all()):
                    break
                step_input = nxt[:, None]
            gen = torch.stack(new, dim=1).tolist()
            for row, i in zip(gen, idx):
                if eos in row:
                    row = row[: row.index(eos) + 1]
                out[i] = tok.decode(row)
    model.train()
    return out  # type: ignore[return-value]  # the loop above fills every slot


def accuracy(model, tok, problems: list[Problem], **kw) -> float:
    texts = complete(model, tok, [p.prompt for p in problems], **kw)
    return sum(is_correct(p, t) for p, t in zip(problems, texts)) / len(problems)


# ----------------------------------------------------------------------------- main


def parse_digits(s: str) -> tuple[int, int]:
    lo, hi = (int(x) for x in s.split(","))
    return lo, hi


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    ap.add_argument("--minutes", type=float, default=6.0, help="training wall-time budget (default 6)")
    ap.add_argument("--steps", type=int, default=None, help="fixed number of steps (overrides --minutes)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--weight-decay", type=float, default=0.01)
    ap.add_argument("--warmup", type=int, default=50)
    ap.add_argument("--train-digits", type=parse_digits, default=(1, 3), help="operand digit range for training")
    ap.add_argument("--eval-digits", type=parse_digits, default=(2, 3), help="operand digit range for evaluation")
    ap.add_argument("--eval-n", type=int, default=200)
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--kv-heads", type=int, default=4)
    ap.add_argument("--intermediate", type=int, default=384)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--log-every", type=int, default=50)
    ap.add_argument("--no-readme", action="store_true")
    args = ap.parse_args(argv)

    torch.set_num_threads(args.threads)
    t_start = time.time()
    tok = build_tokenizer()
    check_tokenizer(tok, random.Random(args.seed + 1))
    model = build_model(args, tok)
    model.train()
    print(
        f"model: {n_params(model):,} parameters; vocab {len(tok)}; config "
        f"hidden={args.hidden} layers={args.layers} heads={args.heads}/{args.kv_heads} "
        f"intermediate={args.intermediate}",
        flush=True,
    )

    exclude: set[tuple[int, int]] = set()
    for seed in HELDOUT_SEEDS:
        for d in {args.eval_digits, (2, 3)}:
            exclude.update((p.a, p.b) for p in make_problems(1000, seed, d))
    batches = Batches(tok, args.seed, args.train_digits, exclude)

    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": args.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
        lr=args.lr,
        betas=(0.9, 0.98),
        eps=1e-8,
    )

    budget_s = args.minutes * 60.0
    step = 0
    t_train = time.time()
    loss_ema = None
    quick_eval = make_problems(64, EVAL_SEED + 1, args.eval_digits)  # progress only
    eval_s = 0.0  # time spent in progress evaluations, not counted against the budget

    def progress() -> float:
        """Fraction of training done: by steps with --steps, else by training wall time."""
        if args.steps is not None:
            return step / args.steps
        return (time.time() - t_train - eval_s) / budget_s

    while progress() < 1.0:
        frac = progress()
        if step < args.warmup:
            lr = args.lr * (step + 1) / args.warmup
        else:
            lr = args.lr * (0.05 + 0.95 * 0.5 * (1 + math.cos(math.pi * min(1.0, frac))))
        for g in opt.param_groups:
            g["lr"] = lr
        input_ids, labels = batches(args.batch_size)
        loss = model(input_ids=input_ids, labels=labels).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        step += 1
        loss_ema = loss.item() if loss_ema is None else 0.95 * loss_ema + 0.05 * loss.item()
        if step % args.log_every == 0:
            el = time.time() - t_train - eval_s
            msg = f"step {step:5d}  {min(1.0, progress()):4.0%}  loss {loss_ema:.4f}  lr {lr:.2e}  {el:6.1f}s"
            if step % (args.log_every * 5) == 0:
                t0 = time.time()
                msg += f"  quick greedy acc {accuracy(model, tok, quick_eval, max_new_tokens=48):.2f}"
                eval_s += time.time() - t0
            print(msg, flush=True)
    train_s = time.time() - t_train - eval_s
    print(f"trained {step} steps in {train_s:.1f}s ({train_s / 60:.2f} min)", flush=True)

    model.eval()
    held_out = make_problems(args.eval_n, EVAL_SEED, args.eval_digits)
    t_eval = time.time()
    accs = {"greedy": accuracy(model, tok, held_out, max_new_tokens=64)}
    for temp in (0.5, 1.0):
        accs[f"sampling, T = {temp:g}"] = accuracy(
            model,
            tok,
            held_out,
            temperature=temp,
            max_new_tokens=64,
            generator=torch.Generator().manual_seed(args.seed + 7),
        )
    final_eval_s = time.time() - t_eval
    print(
        f"held-out ({args.eval_n} problems, digits {args.eval_digits}, seed {EVAL_SEED}), {final_eval_s:.1f}s:",
        flush=True,
    )
    for name, acc in accs.items():
        print(f"  {name:18s} accuracy {acc:.3f}", flush=True)

    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    model.generation_config.eos_token_id = tok.eos_token_id
    model.generation_config.pad_token_id = tok.pad_token_id
    model.generation_config.bos_token_id = tok.bos_token_id
    model.save_pretrained(out, safe_serialization=True)
    save_tokenizer(tok, out)
    weights = out / "model.safetensors"
    size_mb = weights.stat().st_size / 1e6
    print(f"saved to {out} (model.safetensors {size_mb:.2f} MB); total wall {time.time() - t_start:.1f}s", flush=True)

    if not args.no_readme:
        write_readme(out, args, model, tok, step, train_s, accs, size_mb)
    return 0


def write_readme(
    out: Path, args, model, tok, steps: int, train_s: float, accs: dict[str, float], size_mb: float
) -> None:
    c = model.config
    cmd = " ".join([".venv/bin/python", "scripts/train_tiny.py", *sys.argv[1:]])
    if args.steps is None:
        note = (
            f"The schedule followed the {args.minutes:g}-minute budget; `--steps {steps}` (with the same other\n"
            f"arguments) runs the same number of steps on a step-based schedule."
        )
    else:
        note = "With `--steps` the run is reproducible on the same torch build and thread count."
    text = f"""# tiny-adder

A tiny character-level `LlamaForCausalLM` trained by `scripts/train_tiny.py` on the
worked-step addition task of `presto_sgl.tasks.addition`, for fast tests and quick demos
of power sampling. Load it with

```python
from transformers import AutoModelForCausalLM, AutoTokenizer
tok = AutoTokenizer.from_pretrained(folder)
model = AutoModelForCausalLM.from_pretrained(folder)
```

## Format

One token per character; the vocabulary is `<pad>` (0), `<s>` (1), `<unk>` (2) and the
characters `{ALPHABET!r}`. No BOS is added by the tokenizer and the model was trained without
one. `"\\n"` is the EOS token (note that `decode(..., skip_special_tokens=True)` drops it;
`extract_answer` accepts an answer at the end of the text too).

```
prompt: Q:47+385=
target: 7+5+0=12;4+8+1=13;0+3+1=04;A:432\\n
```

One fixed-width step `x+y+c=ks;` per column, least significant first: the column digits
(`0` where an operand ran out), the carry in, and the two-digit column sum (carry out `k`,
answer digit `s`); then `A:` and the sum, then `"\\n"`. Score with
`presto_sgl.tasks.addition.is_correct(problem, completion)`.

## Model

- `LlamaConfig`: hidden {c.hidden_size}, {c.num_hidden_layers} layers, {c.num_attention_heads} heads
  ({c.num_key_value_heads} KV heads), intermediate {c.intermediate_size}, vocab {c.vocab_size},
  tied embeddings, max positions {c.max_position_embeddings}, default RoPE, RMSNorm eps {c.rms_norm_eps}
- {n_params(model):,} parameters; `model.safetensors` is {size_mb:.2f} MB (float32)

## Training

{steps} AdamW steps (batch {args.batch_size}, peak lr {args.lr:g}, {args.warmup} warmup steps, cosine to 5%,
weight decay {args.weight_decay:g}, grad clip 1.0), loss on the target tokens only, problems with
{args.train_digits[0]}-{args.train_digits[1]}-digit operands generated on the fly (held-out problems
excluded), seed {args.seed}, torch threads {args.threads}: {train_s:.0f} s ({train_s / 60:.1f} min) of training.

```
{cmd}
```

{note}

## Accuracy

{args.eval_n} held-out problems with {args.eval_digits[0]}-{args.eval_digits[1]}-digit operands
(`make_problems({args.eval_n}, seed={EVAL_SEED})`), at most 64 new tokens:

| decoding | accuracy |
|---|---|
""" + "".join(f"| {name} | {acc:.1%} |\n" for name, acc in accs.items())
    (out / "README.md").write_text(text)


if __name__ == "__main__":
    raise SystemExit(main())

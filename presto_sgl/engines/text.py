"""The text view of engines backed by a transformers tokenizer (CLI and demos only).

Samplers never round-trip text: they work on token ids end to end. Chains run with no
EOS stop (exactly ``max_new_tokens`` tokens); the *answer* ends at the first of the
model's stop tokens, which :func:`cut_at_stop` finds: every EOS id of the tokenizer and
of the model's generation config (an int or a list there), as ``stop_token_ids``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any


def eos_ids(value: Any) -> tuple[int, ...]:
    """The ids of an ``eos_token_id`` setting: None, one int or a list of ints (sorted, distinct)."""
    if value is None:
        return ()
    items = value if isinstance(value, (list, tuple, set, frozenset)) else [value]
    return tuple(sorted({int(v) for v in items if isinstance(v, int) and not isinstance(v, bool)}))


def cut_at_stop(tokens: Sequence[int], stop_ids: Iterable[int] | None) -> tuple[tuple[int, ...], int | None]:
    """``(tokens before the first stop token, its index)``, or ``(all tokens, None)`` without one.

    The one place a response is cut at the model's stop tokens (the CLI and ``power_gen``)."""
    stops = set(stop_ids or ())
    for i, t in enumerate(tokens):
        if t in stops:
            return tuple(tokens[:i]), i
    return tuple(tokens), None


class TokenizerText:
    """``encode`` / ``decode`` / ``chat_prompt`` / ``eos_token_id`` / ``stop_token_ids`` over ``self.tokenizer``."""

    tokenizer: Any
    _generation_stop_ids: tuple[int, ...] = ()

    @property
    def eos_token_id(self) -> int | None:
        return getattr(self.tokenizer, "eos_token_id", None)

    @property
    def stop_token_ids(self) -> tuple[int, ...]:
        """Every id that ends a response: the tokenizer's EOS and the generation config's EOS ids.

        Engines set the generation-config part (``engine.stop_token_ids = eos_token_id``, an
        int, a list or None); the tokenizer's EOS is always included."""
        return tuple(sorted({*self._generation_stop_ids, *eos_ids(self.eos_token_id)}))

    @stop_token_ids.setter
    def stop_token_ids(self, value: Any) -> None:
        self._generation_stop_ids = eos_ids(value)

    def encode(self, text: str) -> list[int]:
        if self.tokenizer is None:
            raise ValueError("this engine has no tokenizer; pass token ids")
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def decode(self, ids: Sequence[int]) -> str:
        if self.tokenizer is None:
            return " ".join(map(str, ids))
        return self.tokenizer.decode(list(ids), skip_special_tokens=False)

    def chat_prompt(self, text: str) -> list[int]:
        """Prompt ids with the tokenizer's chat template when it has one, else plain text."""
        tok = self.tokenizer
        if tok is not None and getattr(tok, "chat_template", None):
            ids = tok.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True, tokenize=True)
            return list(ids["input_ids"] if hasattr(ids, "keys") else ids)
        return self.encode(text)


class ModelFolder(TokenizerText):
    """A server engine's view of its model folder (``model_path``, as the server names it):
    its JSON configs and its tokenizer, both read lazily on this machine."""

    model_path: str | None = None
    _tokenizer: Any = None

    def _local_config(self, name: str = "config.json") -> dict[str, Any]:
        """``name`` in the model folder, or {} when unreadable (a server on another machine)."""
        try:
            return json.loads((Path(self.model_path or "") / name).read_text())
        except (OSError, ValueError):
            return {}

    @property
    def tokenizer(self) -> Any:
        if self._tokenizer is None:
            from transformers import AutoTokenizer

            self._tokenizer = AutoTokenizer.from_pretrained(self.model_path)
        return self._tokenizer

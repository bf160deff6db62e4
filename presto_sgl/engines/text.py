"""The text view of engines backed by a transformers tokenizer (CLI and demos only).

Samplers never round-trip text: they work on token ids end to end.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


class TokenizerText:
    """``encode`` / ``decode`` / ``chat_prompt`` / ``eos_token_id`` over ``self.tokenizer``."""

    tokenizer: Any

    @property
    def eos_token_id(self) -> int | None:
        return getattr(self.tokenizer, "eos_token_id", None)

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

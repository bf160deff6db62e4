"""Models by Hugging Face hub id or folder, resolved as transformers resolves them.

A *source* is what a user or a server names a model by: a hub id (``Qwen/Qwen2.5-1.5B-Instruct``)
or a folder. transformers' ``Auto*`` classes resolve it: a folder directly, an id through the
Hugging Face cache (``$HF_HOME/hub``, ``models--ORG--NAME/snapshots/...``), downloading it
when the network allows and ``HF_HUB_OFFLINE`` is unset. Every failure is a
:class:`~presto_sgl.errors.ConfigError` naming the argument to change, raised before any
model call.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from .errors import ConfigError


def offline() -> bool:
    """Whether the hub is off (``HF_HUB_OFFLINE`` or ``TRANSFORMERS_OFFLINE`` set true)."""
    return any(
        os.environ.get(k, "").strip().lower() in ("1", "true", "yes", "on")
        for k in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")
    )


def is_folder(source: str) -> bool:
    return Path(source).expanduser().is_dir()


def _why(source: str, exc: Exception, what: str) -> str:
    """Why ``source`` did not resolve, in a user's words."""
    first = str(exc).strip().splitlines()[0][:300] if str(exc).strip() else type(exc).__name__
    if is_folder(source):
        return f"the folder {source!r} has no readable {what} ({first})"
    if source.startswith(("/", ".", "~")) or os.sep in source.strip("/").replace("/", "", 1):
        return f"{source!r} is not a folder here"
    where = (
        "HF_HUB_OFFLINE is set and it is not in the Hugging Face cache"
        if offline()
        else "it is neither in the Hugging Face cache nor downloadable from here"
    )
    return f"the hub id {source!r} has no {what} here: {where} ({first})"


def auto_config(source: str, *, param: str, fix: str) -> Any:
    """``AutoConfig.from_pretrained(source)``, or a ConfigError naming ``param`` and ``fix``."""
    from transformers import AutoConfig

    try:
        return AutoConfig.from_pretrained(source)
    except (OSError, ValueError, KeyError) as exc:
        raise ConfigError(param, source, f"{{{param}}}: {_why(source, exc, 'config.json')}; {fix}") from None


def auto_tokenizer(source: str, *, param: str, fix: str) -> Any:
    """``AutoTokenizer.from_pretrained(source)``, or a ConfigError naming ``param`` and ``fix``."""
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(source)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ConfigError(param, source, f"{{{param}}}: {_why(source, exc, 'tokenizer')}; {fix}") from None


def generation_eos(source: str, config: Any) -> Any:
    """The EOS ids of ``source``'s generation config (an int, a list or None), else its config's."""
    from transformers import GenerationConfig

    try:
        eos = GenerationConfig.from_pretrained(source).eos_token_id
    except (OSError, ValueError, KeyError):
        eos = None
    return eos if eos is not None else getattr(config, "eos_token_id", None)


def text_config(config: Any) -> Any:
    """The language model's part of a config (a multimodal config nests it)."""
    get = getattr(config, "get_text_config", None)
    return get() if callable(get) else config


def vocab_size(config: Any) -> int | None:
    v = getattr(text_config(config), "vocab_size", None) or getattr(config, "vocab_size", None)
    return int(v) if v else None


def context_length(config: Any) -> int | None:
    v = getattr(text_config(config), "max_position_embeddings", None)
    return int(v) if v else None

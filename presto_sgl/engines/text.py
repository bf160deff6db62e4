"""The text view of an engine (``engine.text``): what every front end uses to go between text
and token ids, and where an answer ends.

Samplers never round-trip text: they work on token ids end to end. Chains run with no
EOS stop (exactly ``max_new_tokens`` tokens); the *answer* ends at the first of the
model's stop tokens (:meth:`TextView.answer`): every EOS id of the tokenizer and of the
model's generation config (an int or a list there), as ``stop_ids``.

* :class:`TokenizerView` -- a transformers tokenizer (embedded and server engines);
* :class:`IdsView` -- no tokenizer on this machine (a server's model folder elsewhere, a
  test double): prompts must be ids, answers are their ids as text.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import ConfigError

log = logging.getLogger("presto_sgl.engines")


def eos_ids(value: Any) -> tuple[int, ...]:
    """The ids of an ``eos_token_id`` setting: None, one int or a list of ints (sorted, distinct)."""
    if value is None:
        return ()
    items = value if isinstance(value, (list, tuple, set, frozenset)) else [value]
    return tuple(sorted({int(v) for v in items if isinstance(v, int) and not isinstance(v, bool)}))


def cut_at_stop(tokens: Sequence[int], stop_ids: Iterable[int] | None) -> tuple[tuple[int, ...], int | None]:
    """``(tokens before the first stop token, its index)``, or ``(all tokens, None)`` without one."""
    stops = set(stop_ids or ())
    for i, t in enumerate(tokens):
        if t in stops:
            return tuple(tokens[:i]), i
    return tuple(tokens), None


def special_framing(
    server_ids: Sequence[int], plain: Sequence[int], specials: Iterable[int]
) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
    """``(before, after)`` when ``server_ids`` is ``before + plain + after`` with only special ids
    around ``plain`` (how a server frames a text: a ``<bos>`` it adds, say); None otherwise."""
    special, n = set(specials), len(plain)
    for i in range(len(server_ids) - n + 1):
        before, body, after = server_ids[:i], server_ids[i : i + n], server_ids[i + n :]
        if list(body) == list(plain) and all(t in special for t in (*before, *after)):
            return tuple(before), tuple(after)
    return None


def first_difference(view: Any, theirs: Sequence[int], ours: Sequence[int], specials: Iterable[int] = ()) -> str:
    """Where two tokenizations of one text part ways, in words: the position, the ids (and the text
    of ours: the server's ids may be another vocabulary's), and a special token only one side adds."""
    i = next((j for j, (a, b) in enumerate(zip(theirs, ours)) if a != b), min(len(theirs), len(ours)))
    special = set(specials)
    theirs_part, ours_part = list(theirs[i : i + 4]), list(ours[i : i + 4])
    said = f"from position {i} the server has {theirs_part or 'nothing'}, this tokenizer {ours_part or 'nothing'}"
    if ours_part:
        said += f" ({view.decode(ours_part)!r})"
    if theirs_part and theirs_part[0] in special and list(theirs[i + 1 : i + 4]) == ours_part[:3]:
        added = f"{theirs_part[0]} ({view.decode(theirs_part[:1])!r})"
        said += f"; the server adds special token {added}, this tokenizer does not"
    return said


def ids_of_prefix(view: Any, ids: Sequence[int], text: str) -> tuple[tuple[int, ...], str]:
    """The longest prefix of ``ids`` whose decoded text (``view.decode``) is a prefix of ``text``, and
    that text: the ids of an answer cut inside a token (e.g. at a stop string)."""
    for j in range(len(ids), 0, -1):
        decoded = view.decode(ids[:j])
        if text.startswith(decoded):
            return tuple(ids[:j]), decoded
    return (), ""


@dataclass(frozen=True)
class Answer:
    """A response as the user reads it: its ids before the first stop token, that token's index
    (None: the response has none; it ran to its length) and the decoded text."""

    ids: tuple[int, ...]
    eos_index: int | None
    text: str


class TextView:
    """Text <-> ids for one model; subclasses say how. ``stop_ids`` end an answer."""

    stop_ids: tuple[int, ...] = ()
    has_tokenizer = False
    has_chat_template = False

    def encode(self, text: str, *, special: bool = False) -> list[int]:
        """``text`` as ids (a ConfigError naming `prompt` when it cannot be); ``special`` adds the
        model's special tokens (its ``<bos>``), as a server tokenizes a text request."""
        raise ConfigError("prompt", text, "this engine has no tokenizer here; send {prompt} as token ids")

    def decode(self, ids: Sequence[int]) -> str:
        return " ".join(map(str, ids))

    def chat_ids(self, messages: Sequence[Mapping[str, str]]) -> list[int]:
        """The chat template applied straight to ids, with the generation prompt (no text round trip)."""
        raise ConfigError("messages", messages, "this engine's model has no chat template; send a plain prompt")

    def prompt_ids(self, text: str, *, chat: bool) -> list[int]:
        """A user prompt as ids: in a user turn of the chat template when ``chat`` and the model
        has one, else the plain text with the model's special tokens (a base model's ``<bos>``),
        as a server tokenizes a text prompt; empty text is no ids (not a template around nothing)."""
        if not text:
            return []
        if chat and self.has_chat_template:
            return self.chat_ids([{"role": "user", "content": text}])
        return self.encode(text, special=True)

    def answer(self, tokens: Sequence[int]) -> Answer:
        """The response up to its first stop token, decoded."""
        kept, eos_index = cut_at_stop(tokens, self.stop_ids)
        return Answer(kept, eos_index, self.decode(kept))


class IdsView(TextView):
    """No tokenizer: prompts are ids, answers their ids as text; ``stop_ids`` from a generation config."""

    def __init__(self, stop_ids: Iterable[int] = ()) -> None:
        self.stop_ids = tuple(sorted(set(stop_ids)))


class TokenizerView(TextView):
    """A transformers tokenizer; ``stop_ids`` are its EOS and ``generation_eos`` (an int, a list or None)."""

    has_tokenizer = True

    def __init__(self, tokenizer: Any, generation_eos: Any = None) -> None:
        self.tokenizer = tokenizer
        self.stop_ids = tuple(sorted({*eos_ids(generation_eos), *eos_ids(getattr(tokenizer, "eos_token_id", None))}))
        self.has_chat_template = bool(getattr(tokenizer, "chat_template", None))
        self.framing: tuple[tuple[int, ...], tuple[int, ...]] | None = None  # a server's, once adopted

    @property
    def special_ids(self) -> frozenset[int]:
        return frozenset(int(t) for t in getattr(self.tokenizer, "all_special_ids", ()) or ())

    def encode(self, text: str, *, special: bool = False) -> list[int]:
        if not special:
            return list(self.tokenizer.encode(text, add_special_tokens=False))
        if self.framing is not None:
            before, after = self.framing
            return [*before, *self.tokenizer.encode(text, add_special_tokens=False), *after]
        return list(self.tokenizer(text)["input_ids"])

    def decode(self, ids: Sequence[int]) -> str:
        return self.tokenizer.decode(list(ids), skip_special_tokens=False)

    def chat_ids(self, messages: Sequence[Mapping[str, str]]) -> list[int]:
        if not self.has_chat_template:
            return super().chat_ids(messages)
        try:
            ids = self.tokenizer.apply_chat_template(list(messages), add_generation_prompt=True, tokenize=True)
        except Exception as exc:  # the template's own checks (jinja2 raises e.g. on roles out of order)
            raise ConfigError("messages", messages, f"the model's chat template refused {{messages}}: {exc}") from None
        return list(ids["input_ids"] if hasattr(ids, "keys") else ids)


class TokenizerText:
    """Mixin of engines with a transformers tokenizer (``self.tokenizer``): ``text`` is their
    :class:`TokenizerView`; ``stop_token_ids`` set the generation config's EOS ids. ``encode``,
    ``decode`` and ``chat_prompt`` are the view's, for library users."""

    tokenizer: Any
    _generation_eos: Any = None
    _view: TextView | None = None

    @property
    def text(self) -> TextView:
        if self._view is None:
            self._view = (
                TokenizerView(self.tokenizer, self._generation_eos) if self.tokenizer is not None else IdsView()
            )
        return self._view

    @property
    def stop_token_ids(self) -> tuple[int, ...]:
        return self.text.stop_ids

    @stop_token_ids.setter
    def stop_token_ids(self, value: Any) -> None:
        self._generation_eos, self._view = value, None

    def encode(self, text: str) -> list[int]:
        return self.text.encode(text)

    def decode(self, ids: Sequence[int]) -> str:
        return self.text.decode(ids)

    def chat_prompt(self, text: str) -> list[int]:
        """Prompt ids with the tokenizer's chat template when it has one, else plain text."""
        return self.text.prompt_ids(text, chat=True)


class ModelFolder(TokenizerText):
    """A server engine's view of the model it serves, resolved on this machine through
    transformers' ``Auto*`` classes (:mod:`presto_sgl.hub`): from ``tokenizer`` when given
    (a hub id or a folder: ``--tokenizer``), else from what the server reports (SGLang's
    ``tokenizer_path`` and ``model_path``, vLLM's ``root``), a hub id or a folder alike.

    The config gives the vocabulary size, context length and EOS ids; the tokenizer gives
    ``text``. A server whose model does not resolve here (another machine, no cache) needs
    ``tokenizer``; without a tokenizer but with its config (a test double), ``text`` is an
    :class:`IdsView`: prompts must be ids.
    """

    model_path: str | None = None  # the model as the server names it
    model_source: str | None = None  # what resolved here: the tokenizer override or one the server reported
    _tokenizer: Any = None

    def _open_model(
        self,
        reported: Sequence[str | None],
        *,
        tokenizer: str | None,
        vocab_size: int | None,
        context_length: int | None,
    ) -> tuple[int, int | None]:
        """Resolve the served model's config and tokenizer here; ``(vocab size, context length)``.

        ConfigError naming `tokenizer` when neither ``tokenizer`` nor any reported source
        resolves (and ``vocab_size`` is not given), or when the explicit ``tokenizer`` fails."""
        from .. import hub

        fix = "pass {tokenizer} as a hub id or a folder holding the served model's config.json and tokenizer"
        sources = [str(tokenizer)] if tokenizer is not None else list(dict.fromkeys(str(s) for s in reported if s))
        config, failure = None, None
        for source in sources:
            try:
                config = hub.auto_config(source, param="tokenizer", fix=fix)
            except ConfigError as exc:
                failure = failure or exc
                continue
            self.model_source = source
            break
        if config is None:
            if tokenizer is not None or vocab_size is None:
                if failure is None:
                    raise ConfigError("tokenizer", None, f"the server reports no model path; {fix}")
                raise ConfigError(
                    "tokenizer",
                    tokenizer or self.model_path,
                    f"the server's model {self.model_path!r} does not resolve here: {failure.template}",
                )
            self._view = IdsView()
            return int(vocab_size), context_length
        assert self.model_source is not None  # set in the loop with config
        self._generation_eos = hub.generation_eos(self.model_source, config)
        try:
            self._tokenizer = hub.auto_tokenizer(self.model_source, param="tokenizer", fix=fix)
        except ConfigError as exc:
            if tokenizer is not None:
                raise
            log.warning("no tokenizer for %s here (%s): prompts must be token ids", self.model_source, exc)
            self._view = IdsView(eos_ids(self._generation_eos))
        vocab = vocab_size or hub.vocab_size(config)
        if not vocab:
            raise ConfigError("tokenizer", self.model_source, f"{{tokenizer}}'s config.json has no vocab_size; {fix}")
        return int(vocab), context_length or hub.context_length(config)

    def check_tokenizer(self, server_ids: Sequence[int] | None, probe: str) -> None:
        """Tokenize as the server does, or refuse: the server tokenized ``probe`` to ``server_ids``
        (None: it cannot say; no check).

        Where the server only frames the text with other special tokens than the tokenizer here
        (a ``<bos>`` it adds that a GGUF's tokenizer does not, say), the client adopts the
        server's framing for every text it encodes as the server would, and logs it. Any other
        difference (another model, another vocabulary) is a ConfigError naming `tokenizer`
        with the first ids that differ."""
        view = self.text
        if server_ids is None or not isinstance(view, TokenizerView):
            return
        server_ids = [int(t) for t in server_ids]
        here = view.encode(probe, special=True)
        if server_ids == here:
            return
        framing = special_framing(server_ids, view.encode(probe), view.special_ids)
        if framing is not None:
            view.framing = framing
            log.info(
                "the server frames a text with special tokens %s ... %s (%s ... %s), this tokenizer with %s: "
                "presto-sgl tokenizes as the server does",
                list(framing[0]),
                list(framing[1]),
                view.decode(framing[0]),
                view.decode(framing[1]),
                here[:3],
            )
            return
        raise ConfigError(
            "tokenizer",
            self.model_source,
            f"the tokenizer here ({{tokenizer}}) is not the served model's ({self.model_path!r}): for {probe!r}, "
            f"{first_difference(view, server_ids, here, view.special_ids)} (server: {len(server_ids)} ids, here: "
            f"{len(here)}); "
            "pass {tokenizer} as the served model's hub id or folder",
        )

    def probe_text(self) -> str:
        """A text whose tokenization tells tokenizers apart: words, digits, unicode and the special tokens."""
        tok = self.tokenizer
        specials = [getattr(tok, n, None) for n in ("bos_token", "eos_token", "pad_token", "unk_token")]
        return " ".join(
            ["presto-sgl checks: 1234567 + 89 = ?", "héllo wörld ∑", *dict.fromkeys(s for s in specials if s)]
        )

    @property
    def tokenizer(self) -> Any:
        return self._tokenizer

    @property
    def text(self) -> TextView:
        if self._view is None:
            self._view = (
                TokenizerView(self._tokenizer, self._generation_eos)
                if self._tokenizer is not None
                else IdsView(eos_ids(self._generation_eos))
            )
        return self._view

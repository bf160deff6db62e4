"""Declared parameters: dataclass fields that carry their help and their check.

Every configuration class (:class:`~presto_sgl.config.Target`, ``KernelConfig``,
``PrestoConfig``, each kernel's and each baseline's parameters) declares its fields with
:func:`option`. The front ends (CLI flags, ``serve`` request fields, ``power_gen`` keyword
arguments) are generated from these declarations by :mod:`presto_sgl.registry`, and the
checks run at construction (:class:`Validated`), raising a :class:`ConfigError` that names
the parameter, its value and the fix.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import KW_ONLY, MISSING, Field, dataclass, field, fields
from typing import Any

from .errors import ConfigError

Check = Callable[[str, Any], Any]
"""``check(name, value)`` -> the value to store (normalized), or a :class:`ConfigError`."""


def option(
    default: Any,
    doc: str,
    check: Check | None = None,
    *,
    flag: str | None = None,
    metavar: str | None = None,
    choices: Callable[[], Sequence[str]] | Sequence[str] | None = None,
) -> Any:
    """A declared parameter: its ``default``, one-line ``doc`` (the CLI help and the docs),
    its ``check``, and for the CLI an optional ``flag`` (default ``--name-with-dashes``), the
    old flags it still answers to (``aliases``), ``metavar`` and ``choices`` (a sequence, or a
    callable read when the parser is built)."""
    meta = {"doc": doc, "check": check, "flag": flag, "metavar": metavar, "choices": choices}
    return field(default=default, metadata=meta)


@dataclass(frozen=True)
class Param:
    """One declared parameter of a configuration class, as front ends see it."""

    name: str
    default: Any
    doc: str
    owner: str  # the class that declares it, e.g. "Target", "EntropyCutParams"
    _: KW_ONLY
    check: Check | None = None
    kind: str = "str"  # "bool", "tuple" (of floats), "float", "int" or "str": from the annotation
    flag: str | None = None
    metavar: str | None = None
    choices: Callable[[], Sequence[str]] | Sequence[str] | None = None

    @property
    def cli_flag(self) -> str:
        return self.flag or "--" + self.name.replace("_", "-")

    def choice_list(self) -> tuple[str, ...] | None:
        if self.choices is None:
            return None
        return tuple(self.choices() if callable(self.choices) else self.choices)

    def bounds(self) -> dict[str, Any]:
        """The JSON Schema keywords of the parameter's check (a :class:`Rule`'s), or {}."""
        return dict(self.check.schema) if isinstance(self.check, Rule) else {}


def params_of(cls: type) -> tuple[Param, ...]:
    """The declared parameters (fields made with :func:`option`) of a dataclass ``cls``."""
    out = []
    for f in fields(cls):
        if "doc" not in f.metadata:
            continue
        m = f.metadata
        out.append(
            Param(
                f.name,
                _default(f),
                m["doc"],
                cls.__name__,
                check=m["check"],
                kind=_kind(f.type),
                flag=m["flag"],
                metavar=m["metavar"],
                choices=m["choices"],
            )
        )
    return tuple(out)


def _kind(annotation: Any) -> str:
    text = annotation if isinstance(annotation, str) else getattr(annotation, "__name__", str(annotation))
    return next((k for k in ("bool", "tuple", "float", "int") if k in text), "str")


def _default(f: Field) -> Any:
    if f.default is not MISSING:
        return f.default
    return f.default_factory() if f.default_factory is not MISSING else None


class Validated:
    """Mixin for frozen dataclasses: each declared field's check runs at construction and
    its normalized value is stored; then :meth:`_check` runs for checks across fields."""

    def __post_init__(self) -> None:
        for p in params_of(type(self)):
            if p.check is not None:
                object.__setattr__(self, p.name, p.check(p.name, getattr(self, p.name)))
        self._check()

    def _check(self) -> None:
        """Checks across fields (none by default)."""

    def describe(self) -> dict[str, object]:
        """The declared fields and their values, as a run's description reports them (tuples as
        lists, as JSON keeps them)."""
        return {p.name: _plain(getattr(self, p.name)) for p in params_of(type(self))}


def _plain(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value


# -- checks -------------------------------------------------------------------------------
@dataclass(frozen=True)
class Rule:
    """A check that says what it accepts as JSON Schema keywords (a request field's bounds)."""

    check: Check
    schema: dict[str, Any]

    def __call__(self, name: str, value: Any) -> Any:
        return self.check(name, value)


def is_int(value: object) -> bool:
    """An int that is not a bool."""
    return isinstance(value, int) and not isinstance(value, bool)


def is_finite_number(value: object) -> bool:
    """An int or float (not a bool) that is finite."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def integer(
    low: int | None, what: str = "", example: int | None = None, optional: str = "", *, high: int | None = None
) -> Check:
    """An integer >= ``low`` (None: any), and <= ``high`` when given (``what`` says what it counts;
    ``example`` a good value); None allowed when ``optional`` says what None means."""

    def check(name: str, value: Any) -> int | None:
        if value is None and optional:
            return None
        if not is_int(value) or (low is not None and value < low) or (high is not None and value > high):
            hint = (f" ({what})" if what else "") + (f", e.g. {{{name}={example}}}" if example is not None else "")
            hint += f", or None for {optional}" if optional else ""
            if high is not None:
                kind = f"an integer in [{low}, {high}]"
            elif low is None:
                kind = "an integer"
            else:
                kind = "a positive integer" if low == 1 and not what else f"an integer >= {low}"
            raise ConfigError(name, value, f"{{{name}}} (={value!r}) must be {kind}{hint}")
        return int(value)

    bounds = {"minimum": low, "maximum": high}
    return Rule(check, {k: v for k, v in bounds.items() if v is not None})


def number(
    low: float,
    *,
    strict: bool,
    high: float | None = None,
    what: str = "",
    example: float | None = None,
    optional: str = "",
) -> Check:
    """A finite number > ``low`` (``strict``) or >= ``low``, and <= ``high`` when given, stored as a
    float; None allowed when ``optional`` says what None means."""

    def check(name: str, value: Any) -> float | None:
        if value is None and optional:
            return None
        if (
            not is_finite_number(value)
            or (value <= low if strict else value < low)
            or (high is not None and value > high)
        ):
            bound = f"{'>' if strict else '>='} {low:g}" + (f" and <= {high:g}" if high is not None else "")
            tail = f"{' (' + what + ')' if what else ''}" + (f", or None for {optional}" if optional else "")
            tail += f", e.g. {{{name}={example}}}" if example is not None else ""
            raise ConfigError(name, value, f"{{{name}}} (={value!r}) must be a finite number {bound}{tail}")
        return float(value)

    bounds: dict[str, Any] = {"exclusiveMinimum" if strict else "minimum": low}
    return Rule(check, bounds | ({"maximum": high} if high is not None else {}))


def one_of(choices: Callable[[], Sequence[str]] | Sequence[str], optional: bool = False) -> Check:
    """One of ``choices`` (a sequence, or a callable read at check time: a registry); None
    too when ``optional``."""

    def check(name: str, value: Any) -> str | None:
        if value is None and optional:
            return None
        allowed = list(choices() if callable(choices) else choices)
        if value not in allowed:
            raise ConfigError(name, value, f"{{{name}}} (={value!r}) must be one of {allowed}")
        return value

    return check


def boolean(name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise ConfigError(name, value, f"{{{name}}} (={value!r}) must be True or False")
    return value


TEMPERATURE_RANGE = (1e-3, 1e3)
"""Proposal temperatures (tau, 1/alpha, MultiTry's set) outside it are refused: logits / tau
would overflow or every draw would be the argmax, and the chain's log q would not be finite."""


def temperatures(example: str) -> Check:
    """A non-empty set of distinct temperatures in :data:`TEMPERATURE_RANGE`, stored as a tuple of floats."""
    low, high = TEMPERATURE_RANGE

    def check(name: str, value: Any) -> tuple[float, ...]:
        hint = f"e.g. {{{name}={example}}}"
        if isinstance(value, (str, bytes)) or not isinstance(value, Sequence) or not value:
            raise ConfigError(
                name, value, f"{{{name}}} (={value!r}) must be a non-empty sequence of temperatures > 0, {hint}"
            )
        bad = [t for t in value if not is_finite_number(t) or not low <= t <= high]
        if bad:
            raise ConfigError(
                name,
                value,
                f"{{{name}}} (={tuple(value)!r}) has {bad}: each must be a number in [{low:g}, {high:g}], {hint}",
            )
        if len(set(value)) != len(value):
            raise ConfigError(
                name, value, f"{{{name}}} (={tuple(value)!r}) repeats a value; list each temperature once"
            )
        return tuple(float(t) for t in value)

    return Rule(
        check, {"minItems": 1, "uniqueItems": True, "items": {"type": "number", "minimum": low, "maximum": high}}
    )


def nonempty_text(what: str) -> Check:
    def check(name: str, value: Any) -> str:
        if not isinstance(value, str) or not value:
            raise ConfigError(name, value, f"{{{name}}} (={value!r}) must be {what}")
        return value

    return Rule(check, {"minLength": 1})

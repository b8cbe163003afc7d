"""The tensor-intrinsic registry's fast import: CPU targets leave the CUDA intrinsics out until
something asks for them. Each case runs in a fresh interpreter (the registry loads once)."""

from __future__ import annotations

import subprocess
import sys

import pytest

CPU_THEN_CUDA = """
import sys, tvm
from tuner.fastimport import preload_tensor_intrin
preload_tensor_intrin(tvm.target.Target({"kind": "llvm", "num-cores": 2}))
assert "tvm.s_tir.tensor_intrin.cuda" not in sys.modules
import tvm.s_tir.tensor_intrin as ti
assert not hasattr(ti, "cuda")  # no placeholder left behind
assert tvm.s_tir.TensorIntrin.get("dot_16x4_vnni") is not None  # x86 registered
missing = tvm.s_tir.TensorIntrin.get("wmma_sync_16x16x16_f16f16f32", allow_missing=True)
assert missing is None, "CUDA intrinsics registered for a CPU target"
from tvm.s_tir.tensor_intrin.cuda import WMMA_SYNC_16x16x16_f16f16f32_INTRIN as name
assert tvm.s_tir.TensorIntrin.get(name) is not None  # a later CUDA import gets the real one
print("ok")
"""

CUDA = """
import sys, tvm
from tuner.fastimport import preload_tensor_intrin
preload_tensor_intrin(tvm.target.Target({"kind": "llvm"}))
preload_tensor_intrin(tvm.target.Target({"kind": "cuda", "arch": "sm_90"}))
assert "tvm.s_tir.tensor_intrin.cuda" in sys.modules
from tvm.s_tir.tensor_intrin.cuda import WMMA_SYNC_16x16x16_f16f16f32_INTRIN as name
assert tvm.s_tir.TensorIntrin.get(name) is not None
print("ok")
"""


@pytest.mark.slow
@pytest.mark.parametrize("script", [CPU_THEN_CUDA, CUDA], ids=["cpu-then-cuda", "cuda"])
def test_cuda_intrinsics_load_only_when_asked_for(script: str) -> None:
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().endswith("ok")


def _erf_module() -> object:
    import tvm
    from tvm import te

    x = te.placeholder((256,), name="x", dtype="float32")
    y = te.compute((256,), lambda i: te.erf(x[i]), name="y")
    return tvm.IRModule({"main": te.create_prim_func([x, y])})


@pytest.mark.slow
@pytest.mark.parametrize("prepared", [True, False], ids=["prepared", "bare"])
def test_stock_builder_compiles_the_erf_tunefarm_ships(llvm_target, prepared: bool) -> None:
    """A stock LocalBuilder given ``prepare_stock_builder`` lowers float32 erf as TuneFarm's
    builders do (no libm ``erff`` call); a bare one keeps libm's (what the benchmarks' stock
    baseline measured before)."""
    from tvm.s_tir import meta_schedule as ms

    from tuner.fastimport import prepare_stock_builder

    def f_build(mod: object, target: object, _params: object) -> object:
        import tvm

        lib = tvm.driver.build(mod, target=target)
        if "@erff" in lib.inspect_source("ll"):
            raise RuntimeError("libm erff")
        return lib

    builder = ms.builder.LocalBuilder(
        f_build=f_build, initializer=prepare_stock_builder if prepared else None, max_workers=1
    )
    (result,) = builder.build([ms.builder.BuilderInput(_erf_module(), llvm_target)])
    if prepared:
        assert result.error_msg is None, result.error_msg
    else:
        assert result.error_msg is not None and "libm erff" in result.error_msg

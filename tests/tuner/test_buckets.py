"""Shape buckets: option parsing, precedence, and per-bucket static tasks with dedup."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import DATA
from tuner.errors import TuneFarmError
from tuner.model import load_model
from tuner.symbolic.buckets import bucket_tasks, choose_buckets, parse_shape_options, symbolic_vars

ROOT = Path(__file__).resolve().parents[2]


def test_parse_shape_options() -> None:
    assert parse_shape_options(["b=8,1,8", "s=16"]) == {"b": [1, 8], "s": [16]}
    for bad in ("b", "b=", "b=x", "b=0", "=3"):
        with pytest.raises(TuneFarmError, match="--shape"):
            parse_shape_options([bad])


def test_bucket_precedence() -> None:
    mod = load_model(DATA / "two_vars.py").mod
    assert symbolic_vars(mod) == ["b", "s"]
    # upper bounds give powers of two up to the bound
    assert choose_buckets(mod) == {"b": [1, 2, 4, 8], "s": [1, 2, 4, 8, 16, 32, 64]}
    # the model file's defaults beat the bounds; the CLI beats both
    got = choose_buckets(mod, {"s": [16]}, {"b": [2, 4], "s": [1]})
    assert got == {"b": [2, 4], "s": [16]}
    with pytest.raises(TuneFarmError, match="unknown variable"):
        choose_buckets(mod, {"n": [1]})
    with pytest.raises(TuneFarmError, match="exceeds the model's tir_var_upper_bound 8"):
        choose_buckets(mod, {"b": [4, 16]})


def test_tasks_are_tuned_per_bucket_they_depend_on(llvm_target) -> None:
    mod = load_model(DATA / "two_vars.py").mod
    tasks = bucket_tasks(mod, llvm_target, {"b": [1, 8], "s": [16, 32]})
    names = sorted(bt.task.name for bt in tasks)
    # 2 matmuls (per b) + 2 softmaxes (per s), not 2 x 2 of each
    assert names == ["matmul[b=1]", "matmul[b=8]", "softmax[s=16]", "softmax[s=32]"]
    assert all(not bt.task.is_symbolic for bt in tasks)
    by_name = {bt.task.name: bt for bt in tasks}
    assert by_name["matmul[b=8]"].bucket == {"b": 8}
    assert by_name["matmul[b=8]"].task.flops == 2 * 8 * 32 * 16


def test_dynamic_example_buckets(llvm_target) -> None:
    model = load_model(ROOT / "examples" / "mlp_dynamic.py")
    buckets = choose_buckets(model.mod, {}, model.shape_vars)
    assert buckets == {"b": [1, 8, 32, 128]}
    tasks = bucket_tasks(model.mod, llvm_target, {"b": [1, 32]})
    assert len(tasks) == 4 and {bt.bucket["b"] for bt in tasks} == {1, 32}


def test_every_symbolic_kernel_has_its_bucket_tasks(llvm_target) -> None:
    """The transformer block's kernels at s=16 are the symbolic module's kernels at s=16:
    reshapes stay views in both (a symbolic reshape would be a kernel of its own, while at a
    constant s it fuses into the transpose, and the two would never share records)."""
    from tuner.pipeline import extract_tasks, prepare

    mod = load_model(ROOT / "examples" / "transformer_block_dynamic.py").mod
    symbolic = {t.name for t in extract_tasks(prepare(mod, llvm_target), llvm_target)}
    buckets = {bt.task.name.split("[")[0] for bt in bucket_tasks(mod, llvm_target, {"s": [16]})}
    assert symbolic == buckets
    assert not any("reshape" in name for name in symbolic)


def _kernels(mod, target) -> dict:
    """The symbolic module's kernels by name."""
    from tuner.pipeline import extract_tasks, prepare

    return {t.name: t.mod["main"] for t in extract_tasks(prepare(mod, target), target)}


def test_bucket_tasks_find_their_kernels_by_structure(llvm_target) -> None:
    """At s=64 the three symbolic matmuls are one static kernel, named ``matmul`` there: the
    task names which symbolic kernels it is by binding each to the bucket, not by name."""
    from tuner.symbolic.buckets import bind_kernel

    mod = load_model(DATA / "shared_matmuls.py").mod
    symbolic = _kernels(mod, llvm_target)
    assert {n for n in symbolic if n.startswith("matmul")} == {"matmul", "matmul1", "matmul2"}
    tasks = {bt.task.name: bt for bt in bucket_tasks(mod, llvm_target, {"s": [64]}, symbolic)}
    assert set(tasks) == {"transpose[s=64]", "matmul[s=64]"}
    assert sorted(tasks["matmul[s=64]"].kernels) == ["matmul", "matmul1", "matmul2"]
    assert tasks["transpose[s=64]"].kernels == ("transpose",)
    assert bind_kernel(symbolic["matmul"], {"n": 3}) is None  # s left unbound


@pytest.mark.parametrize(
    ("model_file", "var", "value"),
    [("dyn_kernels.py", "n", 16), ("flat_tokens_b.py", "b", 4)],
)
def test_every_kernel_binds_to_its_bucket_task(llvm_target, model_file, var, value) -> None:
    """Every static task of a bucket is a symbolic kernel bound there: the mean's divisor is
    ``T.Cast("float32", 16)`` bound and ``16.0`` extracted (equal after simplification), and
    ``65 * b`` rows bind through ``b`` as a scalar."""

    mod = load_model(DATA / model_file).mod
    symbolic = _kernels(mod, llvm_target)
    tasks = bucket_tasks(mod, llvm_target, {var: [value]}, symbolic)
    assert tasks and all(bt.kernels for bt in tasks), [(bt.task.name, bt.kernels) for bt in tasks]

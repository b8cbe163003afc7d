"""Per-kernel evidence in ``build --json`` and ``bench --kernels``: the same fields as ``db
best --json`` (``runs``, ``median``, ``spread``, ``confirmed``), from the same pooled records
of a real SQLite database."""

from __future__ import annotations

import json
import statistics

import pytest
import tvm
from typer.testing import CliRunner

from database import Storage, TuneFarmDatabase
from tests.conftest import DATA, TINY
from tests.records import commit as _commit
from tests.tuner.test_dispatch import _softmax_db
from tuner.cli import app
from tuner.model import load_model
from tuner.pipeline import extract_tasks, prepare
from tuner.symbolic.buckets import bucket_tasks

FIELDS = ("runs", "median", "spread", "confirmed")


def _db_best(url: str) -> list[dict]:
    result = CliRunner().invoke(app, ["db", "best", "--db", url, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def test_build_json_shows_each_kernels_pooled_evidence(tmp_path, llvm_target) -> None:
    """Two records of one schedule (a timed run and its confirmation) and a slower schedule:
    ``build --json`` shows the pooled evidence of the first, as ``db best --json`` does."""
    url = f"sqlite:///{tmp_path / 'tiny.db'}"
    db = TuneFarmDatabase(Storage(url), llvm_target)
    (task,) = extract_tasks(prepare(load_model(TINY).mod, llvm_target), llvm_target)
    db.workload_id(task.mod, create=True, task_name=task.name)
    default = tvm.s_tir.Schedule(task.mod).trace
    _commit(db, task.mod, default, [3e-5, 2e-5])
    _commit(db, task.mod, default, [2.5e-5, 4e-5])
    sch = tvm.s_tir.Schedule(task.mod)
    block = sch.get_child_blocks(sch.get_sblock("root"))[0]
    loop = sch.get_loops(block)[0]
    sch.split(loop, sch.sample_perfect_tile(loop, n=2, decision=[4, 8]))
    _commit(db, task.mod, sch.trace, [9e-5])  # slower: not the best
    out = tmp_path / "tiny.so"
    result = CliRunner().invoke(app, ["build", str(TINY), "--db", url, "-o", str(out), "--json"])
    assert result.exit_code == 0, result.output
    tuned = [k for k in json.loads(result.output)["kernels"] if k["source"] == "tuned"]
    (kernel,) = tuned
    assert kernel["runs"] == 2 and kernel["confirmed"] is True
    assert kernel["median"] == pytest.approx(statistics.median([3e-5, 2e-5, 2.5e-5, 4e-5]))
    q1, _, q3 = statistics.quantiles([2e-5, 2.5e-5, 3e-5, 4e-5], n=4, method="inclusive")
    assert kernel["spread"] == pytest.approx((q3 - q1) / kernel["median"])
    (row,) = _db_best(url)
    assert {f: kernel[f] for f in FIELDS} == {f: row[f] for f in FIELDS}


@pytest.mark.slow
def test_bench_kernels_and_build_show_each_bucket_kernels_evidence(tmp_path, llvm_target) -> None:
    """A symbolic model whose three matmuls run the kernel tuned at s=64: ``bench --kernels
    --json`` gives each bucket kernel it ran the evidence of that bucket's record (confirmed
    by a second run), and ``build --json`` the symbolic kernels' per-bucket evidence, both
    equal to ``db best --json``'s."""
    path = tmp_path / "mm.db"
    url = f"sqlite:///{path}"
    db = _softmax_db(path, llvm_target, {64: (16, 1e-6)}, "shared_matmuls.py", "s")
    model = load_model(DATA / "shared_matmuls.py")
    for bt in bucket_tasks(model.mod, llvm_target, {"s": [64]}):
        found = db.best(bt.task.mod, llvm_target)
        if found is not None:  # the second timed run of the bucket's schedule
            _commit(db, bt.task.mod, found[0].trace, [3e-6])
    rows = {r["task"]: r for r in _db_best(url)}
    matmul = rows["matmul"]
    assert matmul["runs"] == 2 and matmul["confirmed"] is True
    args = ["bench", str(DATA / "shared_matmuls.py"), "--db", url, "--shape", "s=5"]
    result = CliRunner().invoke(app, [*args, "--kernels", "--runtimes", "none", "--json"])
    assert result.exit_code == 0, result.output
    (res,) = json.loads(result.output)["results"]
    profiled = {k["name"]: k for k in res["profile"]["kernels"]}
    ran = [n for n in profiled if n.startswith(("matmul_s64", "matmul1_s64", "matmul2_s64"))]
    assert len(ran) == 3, profiled
    for name in ran:
        assert {f: profiled[name][f] for f in FIELDS} == {f: matmul[f] for f in FIELDS}
    untuned = [k for n, k in profiled.items() if n not in rows and "_s64" not in n]
    assert all(k["runs"] == 0 and k["median"] is None for k in untuned)
    out = tmp_path / "mm.so"
    result = CliRunner().invoke(app, ["build", str(DATA / "shared_matmuls.py"), "--db", url,
                                      "-o", str(out), "--json"])  # fmt: skip
    assert result.exit_code == 0, result.output
    kernels = {k["name"]: k for k in json.loads(result.output)["kernels"]}
    for name in ("matmul", "matmul1", "matmul2"):
        (bucket,) = kernels[name]["buckets"]
        assert bucket["bucket"] == 64
        assert {f: bucket[f] for f in FIELDS} == {f: matmul[f] for f in FIELDS}

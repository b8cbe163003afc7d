"""Candidates linked with ``ld`` directly, as ``g++ -shared -fPIC`` would (``workers/link.py``)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
import tvm
from tvm import te
from tvm.support import cc

from database.targets import TargetKey
from workers.build import build_artifact, export_options
from workers.link import host_linker, link_command, link_shared

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")


def _libm_kernel(n: int = 256) -> tvm.IRModule:
    """A kernel that calls libm (``expf``, ``powf``): the link must keep libm a dependency."""
    x = te.placeholder((n,), name="x", dtype="float32")
    y = te.compute((n,), lambda i: te.exp(x[i]) + te.power(x[i], 1.5), name="y")
    return tvm.IRModule({"main": te.create_prim_func([x, y])})


def _needed(path: Path) -> list[str]:
    out = subprocess.run(["readelf", "-d", str(path)], capture_output=True, text=True).stdout
    return sorted(line.split("[")[1].rstrip("]") for line in out.splitlines() if "NEEDED" in line)


def test_the_command_is_the_drivers_ld_without_its_plugin_or_cxx_library() -> None:
    command = link_command()
    assert command is not None
    assert "-shared" in command
    assert not any(w.startswith("-plugin") for w in command)
    assert "-lstdc++" not in command
    assert link_command("no-such-compiler-tunefarm") is None


def test_ld_links_what_gxx_links(tmp_path: Path, llvm_target: tvm.target.Target) -> None:
    lib = tvm.driver.build(_libm_kernel(), target=llvm_target)
    fast, slow = tmp_path / "fast.so", tmp_path / "slow.so"
    lib.export_library(str(fast), **export_options(llvm_target))
    lib.export_library(str(slow))  # TVM's own: g++ -shared -fPIC
    if shutil.which("readelf"):
        assert _needed(fast) == _needed(slow)
        assert "libm.so.6" in _needed(fast)
    xs = np.linspace(0.1, 4, 256).astype("float32")
    want = np.exp(xs) + xs**1.5
    for path in (fast, slow):
        out = tvm.runtime.tensor(np.zeros(256, "float32"))
        tvm.runtime.load_module(str(path))["main"](tvm.runtime.tensor(xs), out)
        np.testing.assert_allclose(out.numpy(), want, rtol=1e-5)


def test_a_candidate_build_links_with_ld(llvm_target: tvm.target.Target) -> None:
    assert export_options(llvm_target)["fcompile"].__qualname__.startswith("host_linker")
    result, data = build_artifact(tvm.ir.save_json(_libm_kernel()), TargetKey.of(llvm_target).json)
    assert result.ok, result.error_msg
    assert data and data[:4] == b"\x7fELF"


def test_compiler_options_fall_back_to_tvms_link(tmp_path: Path) -> None:
    fcompile = host_linker()
    assert fcompile is not None
    src = tmp_path / "f.c"
    src.write_text("int tunefarm_seven(void) { return 7; }\n")
    obj = tmp_path / "f.o"
    subprocess.run(["gcc", "-c", "-fPIC", "-o", str(obj), str(src)], check=True)
    out = tmp_path / "opts.so"
    fcompile(str(out), [str(obj)], options=["-O0"])  # options: TVM's g++ link
    plain = tmp_path / "plain.so"
    fcompile(str(plain), [str(obj)])
    for path in (out, plain):
        nm = subprocess.run(["nm", "-D", str(path)], capture_output=True, text=True).stdout
        assert "tunefarm_seven" in nm
    assert fcompile.get_target_triple is cc.create_shared.get_target_triple


def test_a_failed_link_is_an_error_with_the_linkers_message(tmp_path: Path) -> None:
    bad = tmp_path / "bad.o"
    bad.write_bytes(b"not an object file")
    command = link_command()
    assert command is not None
    with pytest.raises(RuntimeError, match=r"linking .*bad\.so failed: .+"):
        link_shared(str(tmp_path / "bad.so"), [str(bad)], command)


def test_an_object_ld_cannot_link_gets_tvms_link_and_its_error(tmp_path: Path) -> None:
    fcompile = host_linker()
    assert fcompile is not None
    bad = tmp_path / "bad.o"
    bad.write_bytes(b"not an object file")
    with pytest.raises(RuntimeError, match="Compilation error"):
        fcompile(str(tmp_path / "bad.so"), [str(bad)])

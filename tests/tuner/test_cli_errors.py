"""Issue 14, "errors that hide their cause": each is one ``error:`` line naming the cause and
the fix, exit code 1 (2 for usage errors), checked before any work. No Ray, no tuning."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from tests.cli_assert import one_line_error
from tests.conftest import TINY
from tests.ray_processes import free_port
from tuner.cli import app

runner = CliRunner()


@pytest.fixture
def notes(tmp_path: Path) -> Path:
    path = tmp_path / "notes.txt"
    path.write_text("not a database\n")
    return path


@pytest.fixture
def broken_model(tmp_path: Path) -> Path:
    """A model that fails to load: an error naming it shows the model was loaded."""
    path = tmp_path / "broken.py"
    path.write_text("def oops(:\n")
    return path


@pytest.fixture
def empty_db(sqlite_url: str) -> str:
    from database import Storage

    Storage(sqlite_url).dispose()
    return sqlite_url


def _jobs(url: str) -> int:
    from database import Storage
    from database.queries import stats

    return stats(Storage(url, create=False))["jobs"]


# ----------------------------------------------------------------- databases
@pytest.mark.parametrize(
    "command",
    [["db", "stats"], ["db", "upgrade"], ["build", str(TINY), "-o", "{out}"], ["db", "merge"]],
    ids=["stats", "upgrade", "build", "merge"],
)
def test_sqlite_url_of_a_text_file(
    command: list[str], notes: Path, empty_db: str, tmp_path: Path
) -> None:
    url = f"sqlite:///{notes}"
    args = [a.replace("{out}", str(tmp_path / "o.so")) for a in command]
    args += [url, "--db", empty_db] if command == ["db", "merge"] else ["--db", url]
    one_line_error(runner.invoke(app, args), f"{notes} is not an SQLite database")
    assert notes.read_text() == "not a database\n"


def test_prune_ranges(empty_db: str) -> None:
    for value in ("nan", "inf", "-1"):
        result = runner.invoke(app, ["db", "prune", "--older-than", value, "--db", empty_db])
        one_line_error(result, "--older-than must be between 0 and 36500")
    result = runner.invoke(
        app, ["db", "prune", "--keep-top", "99999999999999999999", "--db", empty_db]
    )
    one_line_error(result, "--keep-top must be between 1 and")


def test_prune_failed_names_only_what_was_asked(empty_db: str) -> None:
    result = runner.invoke(app, ["db", "prune", "--failed", "--db", empty_db])
    assert result.exit_code == 0, result.output
    assert "None" not in result.output and "deleted 0 records (0 failed)" in result.output
    result = runner.invoke(
        app, ["db", "prune", "--failed", "--dry-run", "--json", "--db", empty_db]
    )
    assert json.loads(result.stdout) == {
        "failed": 0,
        "beyond_top": 0,
        "older": 0,
        "total": 0,
        "dry_run": True,
    }


# ----------------------------------------------------------------- export
def test_export_to_a_file_needs_a_folder(notes: Path, empty_db: str) -> None:
    result = runner.invoke(app, ["db", "export", str(notes), "--db", empty_db])
    one_line_error(result, "needs a folder")
    assert notes.read_text() == "not a database\n"


def test_export_force_replaces_a_folders_export(tmp_path: Path, empty_db: str) -> None:
    out = tmp_path / "ms"
    out.mkdir()
    (out / "database_workload.json").write_text("old\n")
    (out / "keep.txt").write_text("mine\n")
    result = runner.invoke(app, ["db", "export", str(out), "--db", empty_db])
    one_line_error(result, "use --force")
    result = runner.invoke(app, ["db", "export", str(out), "--force", "--json", "--db", empty_db])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["records"] == 0
    assert (out / "database_workload.json").read_text() == ""
    assert (out / "database_tuning_record.json").exists()
    assert (out / "keep.txt").read_text() == "mine\n"


def test_export_best_only_is_refused_for_a_pack(tmp_path: Path, empty_db: str) -> None:
    pack = tmp_path / "team.pack.db"
    args = ["db", "export", str(pack), "--format", "sqlite", "--best-only", "--db", empty_db]
    one_line_error(runner.invoke(app, args), "--best-only applies to --format metaschedule")
    assert not pack.exists()


# ----------------------------------------------------------------- models and outputs
def test_model_that_is_a_directory(tmp_path: Path, sqlite_url: str) -> None:
    adir = tmp_path / "adir"
    adir.mkdir()
    one_line_error(runner.invoke(app, ["tune", str(adir), "--db", sqlite_url]), "is a directory")
    result = runner.invoke(app, ["build", str(adir), "-o", str(tmp_path / "x.so")])
    one_line_error(result, "is a directory")


def test_outputs_are_checked_before_any_work(broken_model: Path, tmp_path: Path) -> None:
    result = runner.invoke(app, ["bench", str(broken_model), "-o", "/nonexistent/x.json"])
    one_line_error(result, "--output /nonexistent/x.json: folder does not exist")
    result = runner.invoke(app, ["build", str(broken_model), "-o", str(tmp_path)])
    one_line_error(result, "--output")
    assert "is a directory" in result.output
    result = runner.invoke(app, ["build", str(broken_model), "-o", "/nonexistent/x.so"])
    one_line_error(result, "folder does not exist")


def test_bench_json_is_stdout(empty_db: str, tmp_path: Path, monkeypatch: Any) -> None:
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(app, ["bench", str(TINY), "--db", empty_db, "--json"])
    assert result.exit_code == 0, result.output
    (row,) = json.loads(result.stdout)["results"]
    assert row["agree"] and row["reference"] == "numpy"
    assert not (tmp_path / "-").exists()


def test_min_repeat_ms_siblings_and_screen_are_named(sqlite_url: str) -> None:
    for command in ("tune", "submit"):
        result = runner.invoke(
            app, [command, str(TINY), "--min-repeat-ms", "-1", "--db", sqlite_url]
        )
        one_line_error(result, "--min-repeat-ms must be 0 or more")
        result = runner.invoke(app, [command, str(TINY), "--siblings", "-1", "--db", sqlite_url])
        one_line_error(result, "--siblings must be 0 or more (got -1)")
        result = runner.invoke(app, [command, str(TINY), "--screen", "0.5", "--db", sqlite_url])
        one_line_error(result, "--screen must be 0 (off) or at least 1 (got 0.5)")


def test_the_siblings_exchange_and_screen_defaults_are_the_jobs() -> None:
    import inspect

    from tuner.cli.cluster import submit
    from tuner.cli.common import with_tune_options
    from tuner.cli.run import tune
    from tuner.job import TuneConfig
    from tuner.search.task import SIBLINGS
    from workers.config import MeasureConfig

    for command in (tune, submit):  # the options as typer reads them
        params = inspect.signature(with_tune_options(command)).parameters
        assert params["siblings"].default == SIBLINGS
        assert params["exchange"].default is TuneConfig(trials=1).exchange
        assert params["screen"].default == MeasureConfig().screen


def test_time_budget_is_a_duration(empty_db: str) -> None:
    from tuner.cli.common import parse_duration

    for command in ("tune", "submit"):
        for bad in ("0", "soon", "1h30", "-5m"):
            result = runner.invoke(
                app, [command, str(TINY), "--time-budget", bad, "--db", empty_db]
            )
            one_line_error(result, "--time-budget must be a positive duration like 90s")
    assert _jobs(empty_db) == 0  # refused before any job was recorded
    given = ["90", "90s", "2.5m", "1h30m", " 1h 30m ", "0.5S"]
    assert [parse_duration("--t", t) for t in given] == [90, 90, 150, 5400, 5400, 0.5]
    assert parse_duration("--t", None) is None


def test_repeated_shape_values_are_merged() -> None:
    from tuner.symbolic.buckets import parse_shape_options

    assert parse_shape_options(["b=1", "b=8", "s=4"]) == {"b": [1, 8], "s": [4]}
    assert parse_shape_options(["b=8,1", "b=1,64"]) == {"b": [1, 8, 64]}
    assert "merged" in runner.invoke(app, ["tune", "--help"]).output


# ----------------------------------------------------------------- targets
def test_unknown_cpu_is_refused_with_llvms_list() -> None:
    result = runner.invoke(app, ["tune", str(TINY), "--arch", "notacpu"])
    one_line_error(result, "unknown CPU 'notacpu'")
    assert "skylake" in result.output and "znver3" in result.output
    result = runner.invoke(app, ["tune", str(TINY), "-t", "arm64", "--arch", "znver3"])
    one_line_error(result, "unknown CPU 'znver3' for aarch64")
    assert "cortex-a72" in result.output
    result = runner.invoke(app, ["tune", str(TINY), "-t", "cuda", "--arch", "sm90"])
    one_line_error(result, "expected sm_XY")
    result = runner.invoke(app, ["tune", str(TINY), "-t", '{"kind": "llvm", "mcpu": "zen9"}'])
    one_line_error(result, "unknown CPU 'zen9'")


def test_valid_archs_are_accepted() -> None:
    from tuner.targets import resolve_target

    assert str(resolve_target("arm64", "cortex-a72").attrs["mcpu"]) == "cortex-a72"
    assert str(resolve_target("llvm", "skylake").attrs["mcpu"]) == "skylake"
    assert str(resolve_target("cuda", "sm_90a").attrs["arch"]) == "sm_90a"


def test_arm64_and_x86_generic_have_distinct_arch_keys(sqlite_url: str) -> None:
    import tvm
    from tvm.s_tir import meta_schedule as ms

    from database import Storage, TargetKey, TuneFarmDatabase
    from tests.conftest import matmul_mod
    from tuner.targets import resolve_target

    x86, arm = resolve_target("llvm", "generic"), resolve_target("arm64")
    assert TargetKey.of(arm).arch == "aarch64:generic" != TargetKey.of(x86).arch
    mod = matmul_mod()
    db = TuneFarmDatabase(Storage(sqlite_url))
    record = ms.database.TuningRecord(
        tvm.s_tir.Schedule(mod).trace,
        db.commit_workload(mod),
        run_secs=[1e-3],
        target=x86,
        args_info=ms.arg_info.ArgInfo.from_prim_func(mod["main"]),
    )
    db.commit_tuning_record(record)
    result = runner.invoke(app, ["cost-model", "train", "-t", "arm64", "--db", sqlite_url])
    one_line_error(result, "no valid tuning records for target llvm/aarch64:generic")


# ----------------------------------------------------------------- cluster addresses
def test_address_is_the_head_on_every_command() -> None:
    from tuner.cluster.address import parse_address, ray_address

    assert ray_address(None) is None and ray_address("local") is None
    cases = {
        "head": ("head:6379", "http://head:8265"),
        "head:6379": ("head:6379", "http://head:8265"),
        "head:7000": ("head:7000", "http://head:8265"),
        "head:8265": ("head:6379", "http://head:8265"),
        "http://head:8265": ("head:6379", "http://head:8265"),
        "https://head:9000/": ("head:6379", "https://head:9000"),
        "ray://head:10001": ("ray://head:10001", "http://head:8265"),
        "ray://head": ("ray://head:10001", "http://head:8265"),
    }
    for text, (gcs, dashboard) in cases.items():
        addr = parse_address(text)
        assert (addr.gcs, addr.dashboard) == (gcs, dashboard), text


def test_tune_checks_the_address_before_loading_or_recording(
    broken_model: Path, sqlite_url: str
) -> None:
    result = runner.invoke(app, ["tune", str(broken_model), "--address", "bogus://x"])
    one_line_error(result, "unsupported address 'bogus://x'")
    result = runner.invoke(app, ["tune", str(TINY), "--address", "bogus://x", "--db", sqlite_url])
    one_line_error(result, "ray://HOST:10001")
    port = free_port()
    args = ["tune", str(TINY), "--address", f"127.0.0.1:{port}", "--db", sqlite_url]
    one_line_error(
        runner.invoke(app, args), f"cannot reach the Ray cluster's GCS at 127.0.0.1:{port}"
    )
    from database import Storage

    Storage(sqlite_url).dispose()
    one_line_error(runner.invoke(app, args), "cannot reach")
    assert _jobs(sqlite_url) == 0


def test_bench_checks_the_address_before_loading(broken_model: Path) -> None:
    result = runner.invoke(app, ["bench", str(broken_model), "--address", "bogus://x"])
    one_line_error(result, "unsupported address 'bogus://x'")
    port = free_port()
    result = runner.invoke(app, ["bench", str(broken_model), "--address", f"127.0.0.1:{port}"])
    one_line_error(result, "cannot reach the Ray cluster's GCS")


def test_submit_refuses_the_file_type_before_the_cluster(notes: Path, monkeypatch: Any) -> None:
    import tuner.cli.cluster as cc

    def contacted(*_a: Any, **_k: Any) -> None:
        raise AssertionError("contacted the cluster")

    monkeypatch.setattr(cc, "job_client", contacted)
    one_line_error(runner.invoke(app, ["submit", str(notes)]), "unsupported model file")


def test_jobs_on_a_bare_host_use_the_dashboard_port(monkeypatch: Any) -> None:
    import ray.job_submission

    seen: list[str] = []

    def refuse(url: str, **_k: Any) -> None:
        seen.append(url)
        raise ConnectionError(f"Failed to connect to Ray at address: {url}.")

    monkeypatch.setattr(ray.job_submission, "JobSubmissionClient", refuse)
    result = runner.invoke(app, ["jobs", "--address", "localhost"])
    assert seen == ["http://localhost:8265"]
    one_line_error(result, "at http://localhost:8265")
    assert "--address http://HOST:8265" in result.output


def test_workers_accept_a_gcs_address(monkeypatch: Any) -> None:
    import requests

    seen: list[str] = []

    def refuse(url: str, **_k: Any) -> None:
        seen.append(url)
        raise requests.ConnectionError("Connection refused")

    monkeypatch.setattr(requests, "get", refuse)
    result = runner.invoke(app, ["workers", "--address", "127.0.0.1:6379"])
    assert seen and seen[0].startswith("http://127.0.0.1:8265/api/v0/")
    one_line_error(result, "dashboard at http://127.0.0.1:8265")


# ----------------------------------------------------------------- the CLI itself
def _help_text(command: list[str]) -> str:
    """A command's help as plain words (rich's boxes and line breaks taken out)."""
    words = runner.invoke(app, [*command, "--help"]).output.replace("│", " ").split()
    return " ".join(words)


def test_usage_errors_are_one_compact_line() -> None:
    result = runner.invoke(app, ["tune", str(TINY), "--trials", "abc"])
    assert result.exit_code == 2, result.output
    (line,) = [ln for ln in result.output.splitlines() if ln.strip()]
    assert line.startswith("error: Invalid value for '--trials'")
    assert line.endswith("(try 'tunefarm tune -h')")
    result = runner.invoke(app, ["db", "stats", "--bogus"])
    assert result.exit_code == 2 and result.output.count("\n") == 1
    assert result.output.startswith("error: No such option: --bogus")


def test_version_completion_and_defaults_in_help() -> None:
    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0 and result.output.startswith("tunefarm ")
    top = runner.invoke(app, ["--help"]).output
    assert "--install-completion" in top and "Exit codes" in top
    assert "$TUNEFARM_DB or sqlite:///tunefarm.db" in _help_text(["db", "stats"])
    assert "start a local Ray instance" in _help_text(["tune"])
    assert "$TUNEFARM_RAY_DASHBOARD" in _help_text(["jobs"])


def test_json_everywhere_and_one_meaning_per_short_flag(empty_db: str, tmp_path: Path) -> None:
    from database import Storage

    for command in (
        ["build"],
        ["cost-model", "list"],
        ["db", "import"],
        ["db", "merge"],
        ["db", "prune"],
        ["db", "export"],
    ):
        assert "--json" in runner.invoke(app, [*command, "--help"]).output, command
    assert " -f " not in runner.invoke(app, ["db", "export", "--help"]).output
    for command in ("logs", "submit"):
        help_text = runner.invoke(app, [command, "--help"]).output
        assert "--follow" in help_text and "-f" in help_text
    result = runner.invoke(app, ["cost-model", "list", "--json", "--db", empty_db])
    assert result.exit_code == 0 and json.loads(result.stdout) == []
    other = empty_db.replace("tf.db", "other.db")
    Storage(other).dispose()
    result = runner.invoke(app, ["db", "merge", other, "--json", "--db", empty_db])
    assert json.loads(result.stdout) == {"workloads": 0, "records": 0, "added": 0}
    out = tmp_path / "tiny.so"
    result = runner.invoke(app, ["build", str(TINY), "-o", str(out), "--json", "--db", empty_db])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["tuned_calls"] == 0 and data["total_calls"] >= 1 and out.stat().st_size > 0
    assert {k["source"] for k in data["kernels"]} == {"untuned"}


@pytest.mark.slow
@pytest.mark.ray
def test_a_torch_model_loads_while_ray_starts_and_a_bad_one_stops_ray(
    sqlite_url: str, tmp_path: Path
) -> None:
    """``tune`` of a .pt2/.onnx file loads it in a thread while Ray starts; a file that does
    not load is one line, with Ray shut down behind it. Other files load first, as before."""
    import threading

    import ray

    from tuner.services import ray_while_loading

    def load() -> tuple[str, bool]:
        return threading.current_thread().name, ray.is_initialized()

    with ray_while_loading(Path("m.py"), None, load) as loading:
        assert loading() == (threading.current_thread().name, False)
    assert not ray.is_initialized()
    with ray_while_loading(Path("m.pt2"), None, load) as loading:
        name, _ = loading()
        assert name.startswith("tunefarm-load") and ray.is_initialized()
    assert not ray.is_initialized()
    bad = tmp_path / "garbage.pt2"
    bad.write_bytes(b"not a torch.export archive")
    result = runner.invoke(app, ["tune", str(bad), "--db", sqlite_url])
    assert result.exit_code == 1
    assert not ray.is_initialized()
    one_line_error(result, "garbage.pt2")

"""Issue 19: shape profiles (files, validation, one-line errors) and `tunefarm profile record`.
Real models from tests/data and examples; no tuning."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.cli_assert import one_line_error
from tests.conftest import DATA
from tuner.cli import app
from tuner.errors import TuneFarmError
from tuner.model import load_model
from tuner.symbolic.profile import ShapeProfile, load_profile, record_log, record_shapes

runner = CliRunner()
TWO_VARS = DATA / "two_vars.py"  # b <= 8, s <= 64
MLP = Path(__file__).parents[2] / "examples" / "mlp_dynamic.py"  # b <= 512


def _write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_the_three_file_forms(tmp_path: Path) -> None:
    long = load_profile(_write(tmp_path, "a.csv", "var,value,count\ns,17,1200\ns,40,300\ns,17,5\n"))
    assert long.variables == ("s",) and long.counts == (((17,), 1205), ((40,), 300))
    wide = load_profile(_write(tmp_path, "b.csv", "# joint\nb,s,count\n1,17,10\n\n4,40,0\n2,3,5\n"))
    assert wide.variables == ("b", "s") and wide.counts == (((1, 17), 10), ((2, 3), 5))
    one = load_profile(_write(tmp_path, "c.json", json.dumps({"s": {"17": 1200, "40": 300}})))
    assert one.marginal("s") == {17: 1200, 40: 300} and one.total == 1500
    joint = load_profile(
        _write(tmp_path, "d.json", json.dumps({"vars": ["b", "s"], "counts": [[1, 17, 3]]}))
    )
    assert joint.shapes() == [({"b": 1, "s": 17}, 1.0)]
    # round trip through both writers
    for suffix in (".csv", ".json"):
        out = tmp_path / f"rt{suffix}"
        wide.write(out)
        assert load_profile(out).counts == wide.counts


def test_representatives_keep_the_weights_and_the_tail() -> None:
    prof = ShapeProfile(("s",), tuple(((v,), 1000 if v < 40 else 1) for v in range(1, 401)))
    reps = prof.representatives(12)
    assert len(reps) <= 12
    assert abs(sum(w for _, w in reps) - 1.0) < 1e-9
    assert max(s["s"] for s, _ in reps) > 40  # the long tail has a stratum of its own
    few = ShapeProfile(("s",), (((3,), 1), ((5,), 3)))
    assert few.representatives() == [({"s": 3}, 0.25), ({"s": 5}, 0.75)]
    assert prof.quantile("s", 0.5) < 40 and prof.quantile("s", 1.0) == 400


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("var,value,count\nb,2,-3\n", "negative count -3"),
        ("var,value,count\nb,2,1.5\n", "a count must be an integer (got '1.5')"),
        ("var,value,count\nb,x,1\n", "a value must be an integer"),
        ("var,value,count\nb,9,1\n", "b=9 exceeds the model's tir_var_upper_bound 8"),
        ("var,value,count\nb,0,1\n", "values must be 1 or more"),
        ("var,value,count\nq,2,1\n", "unknown variable q; the model has b"),
        ("var,value,count\nb,2,0\n", "the profile is empty"),
        ("", "the file is empty"),
        ("var,value,count\nb,2,1\ns,3,1\n", "several variables must be joint tuples"),
        ('{"b": {"2": 1}, "s": {"3": 1}}', "marginals, not joint tuples"),
        ("{not json", "not valid JSON"),
        ("b,s\n1,2\n", "the header must be var,value,count"),
        ("b,s,count\n1,2\n", "line 2 has 2 fields, the header 3"),
    ],
)
def test_bad_profiles_are_one_line_errors(tmp_path: Path, text: str, needle: str) -> None:
    path = _write(tmp_path, "p.csv", text)
    result = runner.invoke(app, ["plan", str(TWO_VARS), "--shape-profile", str(path)])
    one_line_error(result, needle)


def test_unreadable_profiles(tmp_path: Path) -> None:
    missing = tmp_path / "none.csv"
    one_line_error(
        runner.invoke(app, ["plan", str(MLP), "--shape-profile", str(missing)]), "no such file"
    )
    binary = tmp_path / "bin.csv"
    binary.write_bytes(b"\xff\xfe\x00\x81")
    one_line_error(
        runner.invoke(app, ["plan", str(MLP), "--shape-profile", str(binary)]), "not a text file"
    )
    one_line_error(
        runner.invoke(app, ["plan", str(MLP), "--shape-profile", str(tmp_path)]), "is a directory"
    )


def test_the_planner_refuses_two_variables_in_one_line(tmp_path: Path) -> None:
    path = _write(tmp_path, "p.csv", "b,s,count\n2,16,5\n")
    result = runner.invoke(app, ["plan", str(TWO_VARS), "--shape-profile", str(path)])
    one_line_error(result, "the planner handles one")


def test_profile_names_an_input_axis() -> None:
    mod = load_model(TWO_VARS).mod
    prof = ShapeProfile(("x.0", "y.0"), (((2, 16), 5),)).for_model(mod)
    assert prof.variables == ("b", "s")
    with pytest.raises(TuneFarmError, match="no values for s"):
        ShapeProfile(("b",), (((2,), 5),)).for_model(mod).require(["b", "s"])


def test_record_from_shapes_and_from_a_log(tmp_path: Path) -> None:
    mod = load_model(TWO_VARS).mod
    lines = ["3x32; 32x16; 40x16", "x:3x32;w:32x16;y:40x16", "# a comment", "5,32; 32,16; [7, 16]"]
    prof = record_shapes(lines, mod)
    assert prof.counts == (((3, 40), 2), ((5, 7), 1))
    with pytest.raises(TuneFarmError, match="axis 1 is 31, the model fixes it at 32"):
        record_shapes(["3x31; 32x16; 4x16"], mod)
    log = ["12:00 GET /infer b=2 s=17 took 3ms", "12:01 health ok", "b: 2, s: 17", "s=40 b=1"]
    assert record_log(log, ["b", "s"]).counts == (((1, 40), 1), ((2, 17), 2))
    # the CLI: shapes need the model; the log takes the model's variables
    src = _write(tmp_path, "calls.txt", "\n".join(lines))
    out = tmp_path / "p.json"
    result = runner.invoke(
        app, ["profile", "record", str(src), "--model", str(TWO_VARS), "-o", str(out)]
    )
    assert result.exit_code == 0, result.output
    assert load_profile(out).counts == prof.counts
    logf = _write(tmp_path, "app.log", "\n".join(log))
    out2 = tmp_path / "p.csv"
    result = runner.invoke(
        app,
        [
            "profile",
            "record",
            str(logf),
            "--format",
            "log",
            "--model",
            str(TWO_VARS),
            "-o",
            str(out2),
        ],
    )
    assert result.exit_code == 0, result.output
    assert out2.read_text().splitlines()[0] == "b,s,count"
    one_line_error(
        runner.invoke(app, ["profile", "record", str(src), "-o", str(out)]),
        "--format shapes needs --model",
    )
    bad = _write(tmp_path, "big.log", "b=9 s=3\n")
    one_line_error(
        runner.invoke(
            app,
            [
                "profile",
                "record",
                str(bad),
                "--format",
                "log",
                "--model",
                str(TWO_VARS),
                "-o",
                str(out2),
            ],
        ),
        "b=9 exceeds the model's tir_var_upper_bound 8",
    )

"""``make docs-output``'s pure parts: ANSI stripping, marker replacement, the demo's commands
read from the Makefile, and the README sentence read from a run's tables (no tuning)."""

from __future__ import annotations

import pytest

from benchmarks.docs_output import (
    BEGIN,
    END,
    Ran,
    demo_commands,
    demo_output_md,
    first_model,
    make_commands,
    readme_block,
    replace_block,
    shared_databases,
    strip_ansi,
    summary_sentence,
    table_row,
    with_trials,
)

TUNE = ".venv/bin/tunefarm tune examples/mlp.py --trials 32 --db sqlite:///demo.db --seed 0"
BUILD = ".venv/bin/tunefarm build examples/mlp.py --db sqlite:///demo.db -o out/mlp.so"
BENCH = ".venv/bin/tunefarm bench examples/mlp.py --db sqlite:///demo.db"
BENCH_OUT = """\
                   mlp.py on llvm: tuned vs untuned default vs numpy
┏━━━━━━━━┳━━━━━━━━━━━┳━━━━━━━━━━┳━━━━━━━━━┳━━━━━━━━━━┳━━━━━━━━━━━━━┳━━━━━━━━━┓
┃ shape  ┃   untuned ┃    tuned ┃ speedup ┃    numpy ┃ tuned/numpy ┃ max err ┃
┡━━━━━━━━╇━━━━━━━━━━━╇━━━━━━━━━━╇━━━━━━━━━╇━━━━━━━━━━╇━━━━━━━━━━━━━╇━━━━━━━━━┩
│ static │ 15.812 ms │ 902.0 µs │  17.53x │ 748.7 µs │       0.83x │ 1.1e-04 │
└────────┴───────────┴──────────┴─────────┴──────────┴─────────────┴─────────┘
"""


def test_strip_ansi_leaves_what_a_terminal_shows() -> None:
    raw = (
        "\x1b[1;32mtuned\x1b[0m ok\r\n\x1b]8;;http://x\x1b\\link\x1b]8;;\x1b\\\nbar 1/8\rbar 8/8\n"
    )
    assert strip_ansi(raw) == "tuned ok\nlink\nbar 8/8\n"
    assert strip_ansi("plain │ table ┃") == "plain │ table ┃"


def test_replace_block_keeps_markers_and_the_rest() -> None:
    text = f"intro\n{BEGIN}\nold sample\n{END}\nrest\n"
    out = replace_block(text, "new sample\n")
    assert out == f"intro\n{BEGIN}\nnew sample\n{END}\nrest\n"
    assert replace_block(out, "again") == f"intro\n{BEGIN}\nagain\n{END}\nrest\n"
    with pytest.raises(ValueError, match="demo:output"):
        replace_block("no markers here", "x")


def test_commands_from_make_dry_run() -> None:
    dry = (
        f"{TUNE}\nmkdir -p out\nmake[1]: Entering directory '/x'\n{BUILD} \\\n  --strict\n{BENCH}\n"
    )
    dry += ".venv/bin/tunefarm tune examples/mlp_dynamic.py --trials=48\n"
    commands = make_commands(dry)
    assert commands[2] == f"{BUILD} --strict" and len(commands) == 5
    assert first_model(commands) == commands[:4]
    quick = with_trials(commands, 8)
    assert "--trials 8 " in quick[0] and quick[-1].endswith("--trials=8")
    assert shared_databases(commands) == []
    assert shared_databases([f"{BENCH} --db sqlite:////abs/x.db", f"{TUNE} --db=postgresql://h/d"])


def test_the_makefile_demo_parses() -> None:
    """The real Makefile's demo target: its first model tunes, builds and benches."""
    commands = demo_commands()
    kinds = [c.split()[1] if "tunefarm" in c.split()[0] else None for c in first_model(commands)]
    assert kinds[0] == "tune" and kinds[-1] == "bench" and "build" in kinds
    assert shared_databases(commands) == []


def test_sentence_and_block_name_the_run_figures() -> None:
    assert table_row(BENCH_OUT, "speedup")["tuned/numpy"] == "0.83x"
    assert table_row("no table", "speedup") == {}
    runs = [
        Ran(TUNE, "tuning ...\nwall time 73.3 s (database 0.1 s, 0.2%)\n", 75.0, 0),
        Ran("mkdir -p out", "", 0.0, 0),
        Ran(BUILD, "kernels of mlp.py\n", 9.0, 0),
        Ran(BENCH, BENCH_OUT, 10.0, 0),
        Ran(TUNE.replace("mlp.py", "mlp_dynamic.py"), "second model\n", 30.0, 0),
    ]
    sentence = summary_sentence(runs, "2026-11-23", "AMD EPYC")
    assert "`examples/mlp.py`" in sentence and "32 trials" in sentence and "73.3 s" in sentence
    assert "**17.53x** as fast as TVM's untuned default" in sentence
    assert "numpy was faster: the tuned build ran at **0.83x** its speed" in sentence
    block = readme_block(runs, "2026-11-23", "AMD EPYC")
    assert f"$ {BENCH}\n" in block and "mkdir" not in block and "second model" not in block
    md = demo_output_md(runs, {"date": "2026-11-23", "machine": "AMD EPYC"}, quick=False)
    assert "- machine: AMD EPYC" in md and "second model" in md and "Quick run" not in md
    assert f"| `{TUNE}` | 75.0 |" in md


def test_sentence_reads_the_current_bench_table() -> None:
    """bench names the reference's column ``vs numpy`` (numpy's time / tuned's): the sentence
    still gives the figure."""
    current = BENCH_OUT.replace("┃ tuned/numpy ┃", "┃    vs numpy ┃").replace("0.83x", "3.53x")
    assert table_row(current, "speedup")["vs numpy"] == "3.53x"
    runs = [Ran(TUNE, "wall time 15.5 s\n", 16.0, 0), Ran(BENCH, current, 10.0, 0)]
    sentence = summary_sentence(runs, "2026-12-05", "Intel Xeon")
    assert "**3.53x** as fast as numpy on the same inputs" in sentence


def test_for_docs_draws_tables_in_ascii_and_keeps_the_last_progress_line() -> None:
    from benchmarks.docs_output import for_docs

    out = "tuning: 1/8 trials, 0 s\ntuning: 8/8 trials, 5 s\n" + BENCH_OUT
    shown = for_docs(out)
    assert "tuning: 1/8" not in shown and "tuning: 8/8 trials, 5 s" in shown
    assert shown.isascii() is False  # µs stays; the box drawing goes
    assert not set("┏┃━│└┡") & set(shown)
    assert "| static | 15.812 ms | 902.0 µs |  17.53x |" in shown
    assert "+--------+-----------+" in shown

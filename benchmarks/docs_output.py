"""Regenerate the documented ``make demo`` output from a real run (``make docs-output``).

The commands are the Makefile's ``demo`` target as ``make -n demo`` prints them today, so the
docs cannot show commands the demo no longer runs. They run, unedited, in a scratch directory
that links to this checkout's top-level files: the demo's relative database
(``sqlite:///tunefarm-demo.db``) is a fresh SQLite file there and ``out/`` is scratch too.
Writes ``docs/demo-output.md`` (every command echoed with its output, ANSI escapes stripped;
date, machine, commit and wall times at the top) and replaces README's block between
``<!-- demo:output -->`` and ``<!-- /demo:output -->`` with the first model's tune, build and
bench output plus a sentence naming that run's figures. Usage::

    python -m benchmarks.docs_output                     # the whole demo (minutes)
    python -m benchmarks.docs_output --quick --output /tmp/d.md --readme /tmp/README.md
                                                         # first model only, --trials 8
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import re
import shlex
import subprocess
import sys
import tempfile
import textwrap
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
STAMP = ".venv/.installed"
BEGIN, END = "<!-- demo:output -->", "<!-- /demo:output -->"
# CSI sequences (colours, cursor moves), OSC sequences (titles, links), then 2-byte escapes
_ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[@-Z\\-_]")
# what a scratch run must not link: the checkout's own outputs and databases
_NOT_LINKED = {".git", "out", "tunefarm-work"}


@dataclass
class Ran:
    """One command and what it printed."""

    command: str
    output: str
    wall_sec: float
    returncode: int


# --------------------------------------------------------------------------- pure parts
def strip_ansi(text: str) -> str:
    """Text as a terminal would leave it: escapes removed, each line's last ``\\r`` rewrite."""
    text = _ANSI.sub("", text).replace("\r\n", "\n")
    return "\n".join(line.rsplit("\r", 1)[-1] for line in text.split("\n"))


# rich's box drawing as ASCII (one byte a character instead of three; the same table)
_BOX = str.maketrans(
    {**dict.fromkeys("┏┳┓┡╇┩┗┻┛┣╋┫└┴┘┌┬┐├┼┤", "+"), **dict.fromkeys("━─", "-")}
    | dict.fromkeys("┃│", "|")
)
# a job's progress line when stdout is not a terminal (one every few seconds)
_PROGRESS = re.compile(r"^tuning: \d+/\d+ trials, ")


def for_docs(output: str) -> str:
    """A command's output as the docs show it: tables in ASCII, and of the progress lines a
    job prints every few seconds only the last."""
    lines = output.translate(_BOX).split("\n")
    progress = [i for i, line in enumerate(lines) if _PROGRESS.match(line)]
    drop = set(progress[:-1])
    return "\n".join(line for i, line in enumerate(lines) if i not in drop)


def replace_block(text: str, body: str, begin: str = BEGIN, end: str = END) -> str:
    """``text`` with the part between the markers (kept) replaced by ``body``."""
    i, j = text.find(begin), text.find(end)
    if i < 0 or j < i:
        raise ValueError(f"no {begin} ... {end} block")
    return f"{text[: i + len(begin)]}\n{body.strip()}\n{text[j:]}"


def make_commands(dry_run: str) -> list[str]:
    """The shell commands in ``make -n`` output (backslash continuations joined)."""
    out: list[str] = []
    pending = ""
    for line in dry_run.splitlines():
        if line.startswith("make") and ("Entering" in line or "Leaving" in line):
            continue
        if line.endswith("\\"):
            pending += line[:-1].strip() + " "
            continue
        command = (pending + line.strip()).strip()
        pending = ""
        if command:
            out.append(command)
    return out


def first_model(commands: list[str]) -> list[str]:
    """The commands up to and including the first ``bench`` (the first model's tune,
    build, bench and whatever sits between them)."""
    for i, command in enumerate(commands):
        if _subcommand(command) == "bench":
            return commands[: i + 1]
    return commands


def with_trials(commands: list[str], trials: int) -> list[str]:
    """The commands with every ``--trials N`` set to ``trials``."""
    return [re.sub(r"--trials(\s+|=)\d+", f"--trials\\g<1>{trials}", c) for c in commands]


def table_row(output: str, column_hint: str) -> dict[str, str]:
    """The first data row of the first rich table whose header names ``column_hint``, as
    ``{column: cell}`` (empty when there is none)."""
    lines = output.splitlines()
    for i, line in enumerate(lines):
        cells = [c.strip() for c in line.strip().strip("┃").split("┃")]
        if "┃" not in line or column_hint not in cells:
            continue
        for row in lines[i + 1 :]:
            if "│" in row:
                values = [c.strip() for c in row.strip().strip("│").split("│")]
                return dict(zip(cells, values, strict=False))
        return {}
    return {}


def _args(command: str) -> list[str]:
    """The words after the ``tunefarm`` program (empty for other commands)."""
    try:
        words = shlex.split(command)
    except ValueError:
        return []
    for k, word in enumerate(words):
        if Path(word).name == "tunefarm":
            return words[k + 1 :]
    return []


def _subcommand(command: str) -> str | None:
    words = _args(command)
    return words[0] if words else None


def _x(cell: str | None) -> float | None:
    m = re.fullmatch(r"([0-9.]+)x", (cell or "").strip())
    return float(m.group(1)) if m else None


def summary_sentence(runs: list[Ran], when: str, machine: str) -> str:
    """One sentence naming the first model's figures, read from its tune and bench output."""
    tune = next((r for r in runs if _subcommand(r.command) == "tune"), None)
    bench = next((r for r in runs if _subcommand(r.command) == "bench"), None)
    words = _args(tune.command if tune is not None else runs[0].command)
    model = words[1] if len(words) > 1 else "the model"
    facts = [when, machine]
    if tune is not None:
        trials = re.search(r"--trials[\s=](\d+)", tune.command)
        wall = re.search(r"wall time ([0-9.]+) s", tune.output)
        if trials:
            facts.append(f"{trials.group(1)} trials")
        if wall:
            facts.append(f"{wall.group(1)} s of tuning")
    text = f"What `make demo` printed for `{model}` ({'; '.join(facts)})"
    row = table_row(bench.output, "speedup") if bench is not None else {}
    speedup = _x(row.get("speedup"))
    # the reference's column: "vs numpy" (numpy's time / tuned's), "tuned/numpy" in older output
    ref = next((k for k in row if k.startswith(("vs ", "tuned/"))), None)
    vs_ref = _x(row.get(ref)) if ref else None
    claims = []
    if speedup is not None:
        claims.append(f"the tuned build ran **{speedup:.2f}x** as fast as TVM's untuned default")
    if vs_ref is not None:
        name = ref.removeprefix("vs ").removeprefix("tuned/") if ref else "the reference"
        if vs_ref >= 1:
            claims.append(f"**{vs_ref:.2f}x** as fast as {name} on the same inputs")
        else:
            claims.append(
                f"{name} was faster: the tuned build ran at **{vs_ref:.2f}x** its speed "
                "on the same inputs"
            )
    if claims:
        text += ": " + ", and ".join(claims)
    return text + ". Figures vary from run to run."


def readme_block(runs: list[Ran], when: str, machine: str) -> str:
    """README's sample: the sentence (read from the first model's tune and bench), then its
    ``bench`` command and output; the tune and build output is in docs/demo-output.md."""
    shown = [r for r in first_model_runs(runs) if _subcommand(r.command)]
    benches = [r for r in shown if _subcommand(r.command) == "bench"] or shown
    listing = "\n".join(f"$ {r.command}\n{for_docs(r.output).rstrip()}" for r in benches)
    intro = (
        f"{summary_sentence(shown or runs, when, machine)} Generated by `make docs-output` "
        "from a real run; the whole run: [docs/demo-output.md](docs/demo-output.md)."
    )
    return f"{_wrap(intro)}\n\n```\n{listing}\n```"


def _wrap(text: str) -> str:
    return textwrap.fill(text, width=96, break_long_words=False, break_on_hyphens=False)


def first_model_runs(runs: list[Ran]) -> list[Ran]:
    return runs[: len(first_model([r.command for r in runs]))]


def shared_databases(commands: list[str]) -> list[str]:
    """The ``--db`` URLs that a scratch directory would not make fresh: anything but a
    relative SQLite path (an absolute path, PostgreSQL)."""
    urls = []
    for command in commands:
        words = _args(command)
        for k, word in enumerate(words):
            url = words[k + 1] if word == "--db" and k + 1 < len(words) else None
            if word.startswith("--db="):
                url = word.split("=", 1)[1]
            if url and not re.fullmatch(r"sqlite:///[^/].*", url):
                urls.append(url)
    return urls


def demo_output_md(runs: list[Ran], header: dict[str, str], quick: bool) -> str:
    """The whole of docs/demo-output.md."""
    total = sum(r.wall_sec for r in runs)
    lines = [
        "# What `make demo` prints",
        "",
        _wrap(
            "Generated by `make docs-output` (`benchmarks/docs_output.py`); do not edit by hand. "
            "It ran the commands of the Makefile's `demo` target, read with `make -n demo`, "
            "in a scratch directory linked to this checkout, so its SQLite database "
            "started empty. The output is unedited except that ANSI escapes are stripped, "
            "tables are drawn in ASCII and of a job's progress lines only the last is kept "
            "(first-time `.venv` set-up omitted). Figures vary from run to run."
            + (
                " **Quick run** (first model only, `--trials` lowered): not the demo's budgets."
                if quick
                else ""
            )
        ),
        "",
        *(f"- {k}: {v}" for k, v in header.items()),
        f"- wall time: {total:.0f} s in all",
        "",
        "| command | wall s |",
        "|---|---:|",
        *(f"| `{r.command}` | {r.wall_sec:.1f} |" for r in runs),
        "",
        "```",
    ]
    for r in runs:
        shown = for_docs(r.output).rstrip()
        lines += [f"$ {r.command}", shown] if shown.strip() else [f"$ {r.command}"]
    lines += ["```", ""]
    return "\n".join(lines)


# --------------------------------------------------------------------------- running
def demo_commands(root: Path = ROOT) -> list[str]:
    """The ``demo`` target's commands as make would run them (the venv stamp not remade)."""
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}
    done = subprocess.run(
        ["make", "-n", "--no-print-directory", "-C", str(root), "-o", STAMP, "demo"],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    return make_commands(done.stdout)


def scratch_dir(root: Path = ROOT) -> tempfile.TemporaryDirectory[str]:
    """A temporary directory linking to the checkout's top-level entries (not its outputs
    and databases), where the demo's relative paths resolve to fresh files."""
    tmp = tempfile.TemporaryDirectory(prefix="tunefarm-docs-")
    for entry in root.iterdir():
        if entry.name in _NOT_LINKED or ".db" in entry.name:
            continue
        (Path(tmp.name) / entry.name).symlink_to(entry)
    return tmp


def run(command: str, cwd: Path, columns: int) -> Ran:
    """Run one command in a shell, echoing its output live, and keep the output."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("TUNEFARM_DB", "MAKEFLAGS", "MFLAGS", "MAKELEVEL")
    }
    env["COLUMNS"] = str(columns)
    print(f"$ {command}", flush=True)
    start = time.perf_counter()
    with subprocess.Popen(
        command,
        shell=True,
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        errors="replace",
    ) as proc:
        assert proc.stdout is not None
        chunks = []
        for line in proc.stdout:
            sys.stdout.write(line)
            chunks.append(line)
        code = proc.wait()
    return Ran(command, strip_ansi("".join(chunks)), time.perf_counter() - start, code)


def _header() -> dict[str, str]:
    from workers.fingerprint import cpu_fingerprint

    def git(*args: str) -> str:
        done = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True)
        return done.stdout.strip()

    commit = git("rev-parse", "--short", "HEAD") or "?"
    if git("status", "--porcelain", "--untracked-files=no"):
        commit += " (with uncommitted changes)"
    import tvm

    return {
        "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": cpu_fingerprint(),
        "system": platform.platform(),
        "commit": commit,
        "versions": f"python {platform.python_version()}, tvm {tvm.__version__}",
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.docs_output", description=__doc__)
    parser.add_argument("--output", type=Path, default=ROOT / "docs" / "demo-output.md")
    parser.add_argument("--readme", type=Path, default=ROOT / "README.md")
    parser.add_argument(
        "--quick", action="store_true", help="first model only, with --trials lowered"
    )
    parser.add_argument("--quick-trials", type=int, default=8)
    parser.add_argument("--columns", type=int, default=120, help="terminal width for tables")
    args = parser.parse_args(argv)
    commands = demo_commands()
    if args.quick:
        commands = with_trials(first_model(commands), args.quick_trials)
    shared = shared_databases(commands)
    if shared:
        print(f"error: the demo uses a database outside the scratch directory: {shared[0]}")
        return 1
    header = _header()
    load_start = os.getloadavg()[0]
    runs: list[Ran] = []
    with scratch_dir() as tmp:
        for command in commands:
            ran = run(command, Path(tmp), args.columns)
            runs.append(ran)
            if ran.returncode != 0:
                print(
                    f"error: `{command}` exited {ran.returncode}; nothing written", file=sys.stderr
                )
                return 1
    load = f"{load_start:.1f} at the start, {os.getloadavg()[0]:.1f} at the end"
    header["load average"] = f"{load} ({os.cpu_count()} cores)"
    args.output.write_text(demo_output_md(runs, header, args.quick))
    print(f"wrote {args.output}")
    if args.readme.is_file():
        machine = header["machine"].split(" | ")[0]
        if max(load_start, os.getloadavg()[0]) > (os.cpu_count() or 1):
            machine += f", shared: load average {load}"
        when = header["date"][:10] + (", quick run" if args.quick else "")
        try:
            text = replace_block(args.readme.read_text(), readme_block(runs, when, machine))
        except ValueError as err:
            print(f"error: {args.readme}: {err}", file=sys.stderr)
            return 1
        args.readme.write_text(text)
        print(f"updated {args.readme}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

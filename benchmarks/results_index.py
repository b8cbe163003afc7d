"""``benchmarks/results/INDEX.md``: one row per results file, and the doc lines that cite it.

Each row gives the benchmark, the command that reproduces the file, its date, the host's CPU
(the JSON's machine fingerprint), the commit (the JSON's own ``commit`` if it records one, else
the commit that added the file) and every README/docs line that links it. A PNG shares its
JSON's row data. Usage::

    python -m benchmarks.results_index            # rewrite benchmarks/results/INDEX.md
    python -m benchmarks.results_index --check    # exit 1 when a file lacks a row or a cited
                                                  # file is missing (what the test checks)
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.common import cpu_of

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
INDEX = RESULTS / "INDEX.md"
# a link or path to a results file, however relative: results/<name>.json|png
LINK = re.compile(r"benchmarks/results/([A-Za-z0-9][A-Za-z0-9._-]*\.(?:jsonl|json|png))")
ROW = re.compile(r"^\| `([^`]+)` \|")
DATE = re.compile(r"^(\d{4}-\d{2}-\d{2})")
# the Hugging Face models of examples/export_hf_models.py and the axis their --shape names
HF_AXES = {"bert": "input_ids.1", "gpt2": "input_ids.1", "vit": "pixel_values.0"}
HF_EXPORT = "python examples/export_hf_models.py /tmp/hf"


@dataclass(frozen=True)
class Row:
    """One results file's row of the index."""

    name: str
    benchmark: str
    command: str
    date: str
    cpu: str
    commit: str
    cited_by: tuple[str, ...]

    def markdown(self) -> str:
        cited = "<br>".join(self.cited_by) or "**not cited**"
        cells = (f"`{self.name}`", self.benchmark, f"`{self.command}`", self.date, self.cpu)
        return "| " + " | ".join((*cells, self.commit, cited)) + " |"


def doc_files(root: Path = ROOT) -> list[Path]:
    """The README and every Markdown page under docs/ (what users read)."""
    return [root / "README.md", *sorted((root / "docs").rglob("*.md"))]


def citations(root: Path = ROOT) -> dict[str, list[str]]:
    """Results file name -> ``path:line`` of every doc line that links it."""
    cited: dict[str, list[str]] = {}
    for doc in doc_files(root):
        if not doc.exists():
            continue
        for number, line in enumerate(doc.read_text().splitlines(), 1):
            for name in LINK.findall(line):
                where = f"{doc.relative_to(root)}:{number}"
                if where not in cited.setdefault(name, []):
                    cited[name].append(where)
    return cited


def results_files(results: Path = RESULTS) -> list[str]:
    """Every results file (JSON, PNG, ...) but the index itself."""
    return sorted(p.name for p in results.iterdir() if p.is_file() and p.name != INDEX.name)


def indexed_names(index: Path = INDEX) -> list[str]:
    """The file names the index's rows name."""
    if not index.exists():
        return []
    return [m.group(1) for line in index.read_text().splitlines() if (m := ROW.match(line))]


def _json_for(name: str, results: Path) -> dict[str, Any]:
    """The file's JSON, or for a PNG the JSON whose name its own starts with."""
    path = results / name
    if path.suffix == ".jsonl":  # a pairs file: its first pair says where it ran
        try:
            first = json.loads(path.read_text().splitlines()[0])
        except (OSError, ValueError, IndexError):
            return {}
        return first if isinstance(first, dict) else {}
    if path.suffix != ".json":
        stems = [p for p in results.glob("*.json") if name.startswith(p.stem + "-")]
        if not stems:
            return {}
        path = max(stems, key=lambda p: len(p.stem))
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def host_cpu(data: dict[str, Any], name: str = "") -> str:
    """The CPU the machine fingerprint names (or the GPU device), else ``not recorded`` with
    the host the file's name gives (``<date>-<host>-...``)."""
    host = data.get("host")
    for value in (
        cpu_of(data.get("machine")),
        data.get("cpu"),
        data.get("device"),
        host if isinstance(host, str) and "|" in host else None,
    ):
        if isinstance(value, str) and value:
            return value.replace("|", "/")
        if isinstance(value, dict) and value.get("name"):
            return str(value["name"]).replace("|", "/")
    parts = DATE.sub("", name).lstrip("-").split("-")
    return f"not recorded (host `{parts[0]}`)" if name and parts[0] else "not recorded"


def _git(*args: str, root: Path = ROOT) -> str:
    done = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, check=False)
    return done.stdout.strip()


def commit_of(name: str, data: dict[str, Any], root: Path = ROOT) -> str:
    """The JSON's recorded commit, else the commit that added the file (``(added)``)."""
    recorded = data.get("commit")
    if isinstance(recorded, str) and recorded:
        return recorded[:7]
    path = Path("benchmarks") / "results" / name
    added = _git("log", "--diff-filter=A", "--format=%h", "--", str(path), root=root)
    return f"{added.splitlines()[-1]} (added)" if added else "not committed yet"


def benchmark_and_command(name: str, data: dict[str, Any]) -> tuple[str, str]:
    """Which benchmark wrote the file, and the command that runs it again."""
    if "time-to-quality" in name:
        workloads = data.get("workloads")
        cmd = "python -m benchmarks time-to-quality"
        if workloads:
            cmd += " --workloads " + " ".join(workloads)
        for key, flag in (("seeds", "--seeds"), ("trials_per_task", "--trials-per-task")):
            if key in data:
                cmd += f" {flag} {data[key]}"
        if data.get("budget"):
            cmd += f" --budget {data['budget']}"
        return "time to quality", cmd
    if "planner" in name:
        cmd = "python -m benchmarks planner"
        models = sorted({c.get("model", "") for c in data.get("cases", []) if c.get("model")})
        if models:
            cmd += " --models " + " ".join(Path(m).stem.split("_")[0] for m in models)
        if "trials" in data:
            cmd += f" --trials {data['trials']}"
        if isinstance(data.get("seeds"), list):
            cmd += " --seeds " + " ".join(str(s) for s in data["seeds"])
        return "bucket planner", cmd
    if "retiming" in name:
        cmd = "python -m benchmarks retiming"
        if "trials" in data:
            cmd += f" --trials {data['trials']} --seeds {len(data.get('pairs', []))}"
        return "recorded vs fresh-process re-timing", cmd
    if "gpu-prebuilt" in name:
        return "GPU, untuned vs cuBLAS", "python -m benchmarks.gpu_prebuilt"
    if "gpu" in name or "h100" in name or "h200" in name:
        model = data.get("model", "MODEL")
        return (
            "GPU tuning",
            f"python -m benchmarks.gpu_tune {model} --trials {data.get('trials', 64)}",
        )
    hf = next((m for m in HF_AXES if f"-{m}-" in name), None)
    if "-bench-" in name and hf:
        results = data.get("results") if isinstance(data.get("results"), list) else []
        values = [v for r in results for v in (r.get("shape") or {}).values()]
        shape = f" --shape {HF_AXES[hf]}={','.join(str(v) for v in values)}" if values else ""
        kernels = " --kernels" if "kernels" in name else ""
        cmd = f"{HF_EXPORT} && tunefarm bench /tmp/hf/{hf}.pt2{shape}{kernels} --json OUT.json"
        return "tunefarm bench (Hugging Face)", cmd
    if "-tune-" in name and hf:
        buckets = "1,8,16" if hf == "vit" else "16,64,128"
        trials = data.get("trials_budget")
        cmd = f"{HF_EXPORT} && tunefarm tune /tmp/hf/{hf}.pt2 --shape {HF_AXES[hf]}={buckets}"
        return "tunefarm tune (Hugging Face)", f"{cmd} --trials {trials} --json"
    if "-decoder" in name:
        cmd = "python -m benchmarks decoder"
        if data.get("trials", 256) != 256:  # the benchmark's default
            cmd += f" --trials {data['trials']}"
        if data.get("threads") not in (None, [1, 2]):
            cmd += " --threads " + " ".join(str(t) for t in data["threads"])
        preset = str(data.get("model", "")).partition("--preset ")[2].split(" ")[0]
        if preset:
            budget = str(data.get("tune", "")).partition("--time-budget ")[2].split(" ")[0]
            cmd += f" --preset {preset}" + (f" --time-budget {budget}" if budget else "")
        suffix = name.split("-decoder", 1)[1].removesuffix(".json")
        return "decoder bench", cmd + (f" --name decoder{suffix}" if suffix else "")
    if "-ab-" in name:
        return "build A/B", "two builds timed interleaved (their libraries and rounds in the file)"
    simple = {
        "symbolic": ("symbolic shapes", "python -m benchmarks symbolic"),
        "ranker-study": ("cost model study", "python -m benchmarks cost-model-study DB"),
        "ceiling": ("ceiling", "python -m benchmarks ceiling --report docs/scaling.md"),
        "models-hf": ("models", "python -m benchmarks models --hf"),
        "warm-start": ("warm start", "python -m benchmarks warm-start"),
        "cost-model": ("cost model", "python -m benchmarks cost-model"),
        "database": ("database", "python -m benchmarks database"),
        "throughput": ("throughput", "python -m benchmarks throughput"),
        "dashboard": ("dashboard page times", "see docs/dashboard.md"),
        "convergence": (
            "until-converged vs 4x trials (pairs)",
            f"python -m benchmarks convergence --resume benchmarks/results/{name}",
        ),
        "matvec": (
            "matrix-vector tilings first vs not (pairs)",
            f"python -m benchmarks matvec --resume benchmarks/results/{name}",
        ),
        "gemm": (
            "matrix-product tilings first vs not (pairs)",
            f"python -m benchmarks gemm --resume benchmarks/results/{name}",
        ),
    }
    for key, pair in simple.items():
        if key in name:
            return pair
    if "suite" in data:
        return "suite (make bench)", "python -m benchmarks suite"
    return "other", "see the citing doc"


def row_for(name: str, cited: dict[str, list[str]], root: Path = ROOT) -> Row:
    """The index row of one results file."""
    results = root / "benchmarks" / "results"
    data = _json_for(name, results)
    benchmark, command = benchmark_and_command(name, data)
    if not name.endswith((".json", ".jsonl")):
        benchmark += " (plot)"
    date = str(data.get("date") or "")[:10] or (m.group(1) if (m := DATE.match(name)) else "")
    return Row(
        name,
        benchmark,
        command,
        date,
        host_cpu(data, name),
        commit_of(name, data, root),
        tuple(cited.get(name, ())),
    )


HEADER = """\
# Results index

One row per file in `benchmarks/results/`: which benchmark wrote it, the command that runs it
again, its date, the host's CPU (the file's machine fingerprint), the commit (the file's own
`commit` when it records one, else the commit that added it) and the README or docs lines
that cite it. Every file here backs a current claim in the README or `docs/`; a figure that no
longer describes the product goes, with its file (git keeps both).

**Adding a result**: write the file here as `<date>-<host>-<benchmark>[-<what>].json` (and
its plot as `<json name>-<workload>.png`), cite it from the doc that states its figure with a
link (`../benchmarks/results/<name>`), then run `python -m benchmarks.results_index`, which
rewrites this table (a new row per new file). `tests/benchmarks/test_results_index.py` fails
when a file has no row, a row names a missing file, a doc links a file that does not exist,
or a file is cited by no doc.

| file | benchmark | command | date | host CPU | commit | cited by |
|---|---|---|---|---|---|---|
"""


def render(root: Path = ROOT) -> str:
    """The whole INDEX.md."""
    cited = citations(root)
    rows = [
        row_for(n, cited, root).markdown() for n in results_files(root / "benchmarks" / "results")
    ]
    return HEADER + "\n".join(rows) + "\n"


def problems(root: Path = ROOT) -> list[str]:
    """What the index and the docs get wrong about the results folder, one line each."""
    results = root / "benchmarks" / "results"
    files = set(results_files(results))
    rows = indexed_names(results / INDEX.name)
    cited = citations(root)
    out = [f"{n}: no row in INDEX.md" for n in sorted(files - set(rows))]
    out += [f"{n}: INDEX.md row names a missing file" for n in rows if n not in files]
    out += [
        f"{w}: links {n}, which does not exist"
        for n, ws in cited.items()
        if n not in files
        for w in ws
    ]
    out += [f"{n}: cited by no doc" for n in sorted(files) if n not in cited]
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="report problems, write nothing")
    args = parser.parse_args(argv)
    if args.check:
        found = problems()
        for line in found:
            print(line)
        return 1 if found else 0
    INDEX.write_text(render())
    print(f"wrote {INDEX.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

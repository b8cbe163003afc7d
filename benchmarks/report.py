"""The suite's Markdown report (``docs/performance.md``) and PNG plots, from a results dict.

Also refreshes the headline block of README.md between ``<!-- bench:headline -->`` and
``<!-- /bench:headline -->`` when the README has one.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from benchmarks.baseline import (
    INVALID_SPREAD,
    invalid_cell,
    invalid_figures,
    invalid_reason,
    measured_peak,
)
from benchmarks.common import cpu_of, geomean, hostname_of

ROOT = Path(__file__).resolve().parent.parent
BEGIN, END = "<!-- bench:headline -->", "<!-- /bench:headline -->"
PHASES = ("startup", "build_wait", "run_wait", "database", "probes", "search")


# --------------------------------------------------------------------------- helpers
def ms_cell(t: dict[str, Any] | None, res: dict[str, Any] | None = None) -> str:
    """A time in ms ± spread, or ``invalid (...)`` (judged against ``res``'s peak)."""
    if not isinstance(t, dict):
        return "-"
    why = _why(res or {}, t)
    if why:
        return invalid_cell(why)
    return f"{t['median'] * 1e3:.3f} ± {t['spread']:.0%}"


def _why(res: dict[str, Any], t: Any) -> str | None:
    """Why figure ``t`` is invalid in this run (spread, above the measured peak), or None."""
    return invalid_reason(t, ref_peak(res))


def ratio_cell(res: dict[str, Any], a: dict | None, b: dict | None) -> str:
    """``a``'s time / ``b``'s as ``1.23x``, or ``invalid (...)`` when either figure is."""
    for t in (b, a):
        why = _why(res, t)
        if why:
            return invalid_cell(why)
    return _x(_ratio(a, b))


def _valid_ratios(
    res: dict[str, Any], rows: list[dict[str, Any]], a: str, b: str
) -> tuple[list[float], list[str]]:
    """The ratios ``a``/``b`` over ``rows`` where both figures are valid, and the reasons of
    the rows left out."""
    ratios, reasons = [], []
    for r in rows:
        if not (isinstance(r.get(a), dict) and isinstance(r.get(b), dict)):
            continue
        why = _why(res, r[b]) or _why(res, r[a])
        if why:
            reasons.append(why)
        else:
            ratios.append(_ratio(r[a], r[b]) or 0.0)
    return [x for x in ratios if x], reasons


def summarize_reasons(reasons: list[str]) -> str:
    """Several invalid-figure reasons in a few words: ``spread up to 31%, above measured peak``."""
    spreads = [float(r.split()[-1].rstrip("%")) for r in reasons if r.startswith("spread ")]
    out = []
    if spreads:
        many = len(set(spreads)) > 1
        out.append(f"spread {'up to ' if many else ''}{max(spreads):.0f}%")
    out += [r for r in dict.fromkeys(reasons) if not r.startswith("spread ")]
    return ", ".join(out)


def _left_out(reasons: list[str], total: int, before: str = " (", after: str = ")") -> str:
    """`` (3 of 5 values; 2 invalid: spread up to 31%)``, or empty when none or all are."""
    if not reasons or len(reasons) >= total:
        return ""
    return (
        f"{before}{total - len(reasons)} of {total} values; {len(reasons)} invalid: "
        f"{summarize_reasons(reasons)}{after}"
    )


def _x(v: float | None, digits: int = 2) -> str:
    return "-" if v is None else f"{v:.{digits}f}x"


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{v:.0%}"


def _ratio(a: dict | None, b: dict | None) -> float | None:
    """How many times faster ``b`` is than ``a`` (a's time / b's time)."""
    if isinstance(a, dict) and isinstance(b, dict) and a["median"] and b["median"]:
        return a["median"] / b["median"]
    return None


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return [*out, ""]


def ref_peak(res: dict[str, Any]) -> float | None:
    """The better of the run's two SGEMM calibrations (start, end) whose spread is valid: load
    only lowers it (both when neither is valid; :func:`peak_invalid` says so)."""
    return measured_peak([res.get("peak"), res.get("peak_after")])[0]


def invalid_list(res: dict[str, Any]) -> list[str]:
    """The run's invalid figures: the suite's list, or judged here for older results files."""
    if "invalid" in res:
        return list(res["invalid"])
    parts = ("peak", "peak_after", "kernels", "examples")
    return invalid_figures({k: res.get(k) for k in parts}, ref_peak(res), stamp=False)


def peak_invalid(res: dict[str, Any]) -> str | None:
    """Why the run's measured peak is invalid (every calibration spread too much), or None."""
    return measured_peak([res.get("peak"), res.get("peak_after")])[1]


def _peak_frac(res: dict[str, Any], t: Any) -> float | None:
    peak = ref_peak(res)
    return t["gflops"] / peak if isinstance(t, dict) and peak and "gflops" in t else None


def peak_cell(res: dict[str, Any], t: Any) -> str:
    """The fraction of the measured peak, or ``invalid (...)``."""
    why = _why(res, t) or (peak_invalid(res) if isinstance(t, dict) else None)
    return invalid_cell(why) if why else _pct(_peak_frac(res, t))


def _skipped(part: dict[str, Any] | None) -> str | None:
    if part is None:
        return "not run in this suite"
    if "skipped" in part:
        return str(part["skipped"])
    if "error" in part:
        return f"failed: `{part['error'][:300]}`"
    return None


# --------------------------------------------------------------------------- headline
def headline(res: dict[str, Any]) -> list[str]:
    """The report's key figures, one bullet each (also quoted in the README)."""
    out = []
    rows = (res.get("kernels") or {}).get("rows") or []
    if rows:
        on = [r for r in rows if r.get("on_bucket")]
        stock, stock_bad = _valid_ratios(res, on, "stock", "tuned")
        untuned, untuned_bad = _valid_ratios(res, rows, "untuned", "tuned")
        numpy, numpy_bad = _valid_ratios(res, rows, "numpy", "tuned")
        vs_stock, vs_untuned, vs_numpy = geomean(stock), geomean(untuned), geomean(numpy)
        if vs_untuned or untuned_bad:
            out.append(
                f"QKV matmul X[M,768]·W[768,2304], M swept over {[r['M'] for r in rows]}: "
                f"TuneFarm's one symbolic build is "
                f"{_geo_phrase(vs_untuned, untuned_bad, 1)} faster than the untuned default "
                f"(geomean{_left_out(untuned_bad, len(rows), ' over ', '')}) and runs at "
                f"{_geo_phrase(vs_numpy, numpy_bad)} numpy/OpenBLAS's speed"
                f"{_left_out(numpy_bad, len(rows))}; {_best_peak_phrase(res, rows)}."
            )
        weak = [
            f"{r['M']} ({_x(_ratio(r.get('untuned'), r.get('tuned')))})"
            for r in rows
            if (_ratio(r.get("untuned"), r.get("tuned")) or 2.0) < 1.5
        ]
        if weak:
            top = max(res["kernels"].get("buckets") or [0])
            above = any(r["M"] > top for r in rows)
            out.append(
                f"Weak spots: M = {', '.join(weak)} against the untuned default"
                + (
                    f"; above the largest tuned bucket ({top}) the dispatch runs the bucket "
                    "kernel of least time per unit of work, or the generic (untuned) kernel "
                    "where that is cheaper."
                    if above
                    else "."
                )
            )
        if vs_stock or stock_bad:
            n_stock = sum(isinstance(r.get("stock"), dict) for r in on)
            out.append(
                f"At the tuned buckets, TuneFarm's kernels run at "
                f"{_geo_phrase(vs_stock, stock_bad)} the speed of stock MetaSchedule's "
                f"`tune_tir` kernels at the same budget "
                f"({res['settings']['trials_per_bucket']} trials per bucket)"
                f"{_left_out(stock_bad, n_stock)}; stock MetaSchedule has no kernel for the "
                "other M values."
            )
    eff = res.get("efficiency") or {}
    if "TuneFarm" in eff:
        tf, st = eff["TuneFarm"], eff["MetaSchedule"]
        out.append(
            f"Tuning efficiency ({eff['task']}), trials to reach 90% of the better final: "
            f"TuneFarm {reach_phrase(tf)}, MetaSchedule {reach_phrase(st)}; "
            f"{tf['wall_per_trial']:.2f} vs {st['wall_per_trial']:.2f} wall s per trial."
        )
    ov = res.get("overhead") or {}
    if ov.get("tunefarm_jobs"):
        rates = [j["candidates_per_sec"] for j in ov["tunefarm_jobs"] if j["candidates_per_sec"]]
        db = max(j["db_share"] for j in ov["tunefarm_jobs"])
        disp = [d["overhead"] for d in ov.get("dispatch", [])]
        line = (
            f"Overhead: {span(rates, '{:.2f}')} candidates/s on this machine; the "
            f"database takes at most {db:.1%} of a job's wall time"
        )
        if disp:
            line += f"; {dispatch_phrase(disp)}"
        out.append(line + ".")
    invalid = invalid_list(res)
    if invalid:
        out.append(
            f"**Invalid figures**: {len(invalid)} figure(s) spread by more than "
            f"{INVALID_SPREAD:.0%} over repeats or ran above the measured peak; they are "
            "reported as invalid, not as ratios."
        )
    if res.get("noisy_run"):
        out.append(
            f"**Noisy run**: {len(res.get('noisy', []))} figure(s) vary by more than 10% over "
            f"repeats (load average {_load(res)}); re-run `make bench` on a quiet machine."
        )
    return out


def _geo_phrase(value: float | None, reasons: list[str], digits: int = 2) -> str:
    """A bold geomean, or ``invalid (...)`` when every figure behind it was invalid."""
    if value:
        return f"**{_x(value, digits)}**"
    return f"**{invalid_cell(summarize_reasons(reasons) or 'no figures')}**"


def _best_peak_phrase(res: dict[str, Any], rows: list[dict[str, Any]]) -> str:
    """``best 51% of the measured SGEMM peak`` over the valid TuneFarm figures, else why not."""
    why = peak_invalid(res)
    if why:
        return f"fraction of the measured SGEMM peak {invalid_cell(why)}"
    tuned = [r.get("tuned") for r in rows if isinstance(r.get("tuned"), dict)]
    valid = [_peak_frac(res, t) or 0.0 for t in tuned if not _why(res, t)]
    if valid:
        return f"best {max(valid):.0%} of the measured SGEMM peak"
    reasons = summarize_reasons([_why(res, t) or "" for t in tuned])
    return f"fraction of the measured SGEMM peak {invalid_cell(reasons)}"


def span(values: list[float], fmt: str = "{:.2f}") -> str:
    """``lo–hi`` of the values as formatted; one number when both ends print the same."""
    lo, hi = fmt.format(min(values)), fmt.format(max(values))
    return lo if lo == hi else f"{lo}–{hi}"


def dispatch_phrase(overheads: list[float]) -> str:
    """The symbolic module's time against the static kernel's (fractions, negative: faster),
    worded so that a negative figure reads as a gain, never as a negative cost."""
    lo, hi = min(overheads) * 100, max(overheads) * 100
    if lo >= 0:
        return f"symbolic dispatch costs +{span([lo, hi], '{:.1f}')}% against the static kernel"
    if hi <= 0:
        return (
            f"the symbolic module runs {span([-hi, -lo], '{:.1f}')}% faster than the static "
            "kernel alone (no measurable dispatch cost)"
        )
    return (
        f"symbolic dispatch costs at most +{hi:.1f}% against the static kernel (and is up to "
        f"{-lo:.1f}% faster at some values)"
    )


def reach_phrase(part: dict[str, Any]) -> str:
    """How many trials a tuner took to reach 90% of the better final, or that it did not."""
    reach = part.get("to_90pct")
    if reach:
        return f"{reach['trial']} trial{'s' if reach['trial'] != 1 else ''}"
    return f"did not reach 90% within {part.get('trials', '?')} trials"


def _load(res: dict[str, Any]) -> str:
    m = res.get("machine", {})
    a, b = m.get("loadavg_start"), m.get("loadavg_end")
    return f"{a[0]:.1f} → {b[0]:.1f}" if a and b else "?"


# --------------------------------------------------------------------------- plots
def _plt() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_kernels(res: dict[str, Any], path: Path) -> bool:
    rows = (res.get("kernels") or {}).get("rows") or []
    if not rows:
        return False
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7, 4.2))
    styles = {
        "tuned": ("TuneFarm (one symbolic build)", "o-"),
        "untuned": ("untuned default", "s--"),
        "numpy": ("numpy / OpenBLAS", "^-"),
        "stock": ("stock MetaSchedule (static, per bucket)", "D"),
    }
    for key, (label, style) in styles.items():
        pts = [
            (r["M"], r[key]) for r in rows if isinstance(r.get(key), dict) and not _why(res, r[key])
        ]
        if not pts:
            continue
        xs = [p[0] for p in pts]
        ys = [p[1]["gflops"] for p in pts]
        err = [[y * p[1]["spread"] / 2 for y, p in zip(ys, pts, strict=True)]] * 2
        ax.errorbar(xs, ys, yerr=err, fmt=style, label=label, capsize=3, markersize=6)
    peak = ref_peak(res)
    if peak:
        ax.axhline(peak, color="grey", linestyle=":", label=f"SGEMM peak {peak:.0f} GFLOPS")
    for b in (res.get("kernels") or {}).get("buckets", []):
        ax.axvline(b, color="#ddd", zorder=0)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("M (rows of X); grey verticals: tuned buckets")
    ax.set_ylabel("GFLOPS (median; bars: spread; invalid figures left out)")
    ax.set_title("X[M,768]·W[768,2304], float32, CPU")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def plot_efficiency(res: dict[str, Any], path: Path) -> bool:
    eff = res.get("efficiency") or {}
    if "TuneFarm" not in eff:
        return False
    plt = _plt()
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 4), sharey=True)
    for name, style in (("TuneFarm", "o-"), ("MetaSchedule", "s--")):
        pts = [p for p in eff[name]["curve"] if p["best"]]
        if not pts:
            continue
        ys = [p["best"] * 1e3 for p in pts]
        color = "C0" if name == "TuneFarm" else "C3"
        for ax, key in ((a1, "trial"), (a2, "wall")):
            xs = [p[key] for p in pts]
            ax.step(xs, ys, where="post", label=name, color=color)
            ax.plot(xs, ys, style[0], markersize=4, color=color)
    a1.set_xlabel("trials")
    a2.set_xlabel("wall seconds since the tune call")
    a1.set_ylabel("best-so-far latency (ms)")
    a1.set_yscale("log")
    a1.set_title(f"{eff['task']}: vs trials")
    a2.set_title("vs wall time")
    a1.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def plot_overhead(res: dict[str, Any], path: Path) -> bool:
    jobs = (res.get("overhead") or {}).get("tunefarm_jobs") or []
    if not jobs:
        return False
    plt = _plt()
    fig, ax = plt.subplots(figsize=(8.5, 1.2 + 0.6 * len(jobs)))
    left = [0.0] * len(jobs)
    names = [j["job"] for j in jobs]
    for phase in PHASES:
        vals = [j["phases"].get(phase, 0.0) for j in jobs]
        ax.barh(names, vals, left=left, label=phase.replace("_", " "))
        left = [a + b for a, b in zip(left, vals, strict=True)]
    ax.set_xlabel("wall seconds of the job (driver's view)")
    ax.legend(fontsize=8, loc="center left", bbox_to_anchor=(1.01, 0.5))
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


# --------------------------------------------------------------------------- sections
def _kernels(res: dict[str, Any], img: str | None) -> list[str]:
    part = res.get("kernels")
    out = ["## Kernels: dynamic-M QKV matmul", ""]
    why = _skipped(part)
    if why:
        return [*out, f"_{why}_", ""]
    assert part is not None
    out += [
        f"`{part['model']}`: X[M,768]·W[768,2304] float32 with symbolic M, tuned by TuneFarm at "
        f"M ∈ {part['buckets']} ({part['trials_per_bucket']} trials per bucket, one job per "
        "bucket) and built once for every M. Stock MetaSchedule (`ms.tune_tir`, LocalBuilder/"
        "LocalRunner, XGB cost model, same budget, rounds and measurement settings) tunes the "
        "static kernel of each bucket; it has no kernel for M off the buckets. Times are "
        "medians over repeats ± spread ((max−min)/median); `% peak` is against the better of "
        "the two OpenBLAS SGEMM peaks measured in this run (start and end).",
        "",
        _stock_note(res),
        "",
    ]
    header = [
        "M",
        "bucket",
        "untuned ms",
        "TuneFarm ms",
        "numpy ms",
        "stock MS ms",
        "TuneFarm GFLOPS",
        "% peak",
        "vs untuned",
        "vs numpy",
        "vs stock MS",
        "correct",
    ]
    rows = []
    for r in part["rows"]:
        tuned = r.get("tuned")
        rows.append(
            [
                r["M"],
                "on" if r.get("on_bucket") else "off",
                ms_cell(r.get("untuned"), res),
                ms_cell(tuned, res),
                ms_cell(r.get("numpy"), res),
                ms_cell(r.get("stock"), res),
                f"{tuned['gflops']:.1f}" if isinstance(tuned, dict) else "-",
                peak_cell(res, tuned),
                ratio_cell(res, r.get("untuned"), tuned),
                ratio_cell(res, r.get("numpy"), tuned),
                ratio_cell(res, r.get("stock"), tuned),
                "yes" if r.get("tuned_agree", r.get("untuned_agree")) else "NO",
            ]
        )
    out += _table(header, rows)
    out.append(
        "`vs X` = X's time / TuneFarm's time (above 1: TuneFarm is faster). A figure whose "
        f"spread is above {INVALID_SPREAD:.0%} or whose rate is above the measured peak reads "
        "`invalid (...)`, and so does every ratio and peak fraction built on it (see "
        "[Baselines and protocol](#baselines-and-protocol))."
    )
    out.append("")
    if img:
        out += [f"![kernel GFLOPS over M]({img})", ""]
    return out


def _stock_note(res: dict[str, Any]) -> str:
    if res.get("settings", {}).get("stock_fast_import", False):
        return (
            "Stock MetaSchedule's LocalBuilder starts fresh worker processes every round and "
            "each imports TVM's tensor-intrinsic registry (~40 s of a core here, minutes on a "
            "loaded machine, past its 30 s default build timeout); in this run its workers got "
            "TuneFarm's fast import as a LocalBuilder initializer and a 300 s timeout, so the "
            "comparison is of search, build and measurement. `--stock-as-shipped` runs it as "
            "shipped."
        )
    return (
        "Stock MetaSchedule ran as shipped (its builder workers import TVM's tensor-intrinsic "
        "registry every round), with a 300 s build timeout."
    )


def _examples(res: dict[str, Any]) -> list[str]:
    part = res.get("examples")
    out = ["## Examples: dynamic-batch MLP", ""]
    why = _skipped(part)
    if why:
        return [*out, f"_{why}_", ""]
    assert part is not None
    out += [
        f"`{part['model']}` tuned at b ∈ {part['buckets']} ({part['trials']} trials over "
        f"{part['tasks']} bucket tasks, {part['tune_wall_sec'] or 0:.0f} s), swept over b.",
        "",
    ]
    rows = [
        [
            r["b"],
            "on" if r.get("on_bucket") else "off",
            ms_cell(r.get("untuned"), res),
            ms_cell(r.get("tuned"), res),
            ms_cell(r.get("numpy"), res),
            ratio_cell(res, r.get("untuned"), r.get("tuned")),
            ratio_cell(res, r.get("numpy"), r.get("tuned")),
            "yes" if r.get("tuned_agree", r.get("untuned_agree")) else "NO",
        ]
        for r in part["rows"]
    ]
    hdr = ["b", "bucket", "untuned ms", "TuneFarm ms", "numpy ms", "vs untuned", "vs numpy", "ok"]
    return out + _table(hdr, rows)


def _efficiency(res: dict[str, Any], img: str | None) -> list[str]:
    part = res.get("efficiency")
    out = ["## Tuning efficiency", ""]
    why = _skipped(part)
    if why:
        return [*out, f"_{why}_", ""]
    assert part is not None
    out += [
        f"{part['task']}, {part['trials']} trials each. TuneFarm's curve is read from its "
        "database (records in commit order; its first trial is the default schedule); stock "
        "MetaSchedule's from a measure callback. Wall time counts from the tune call (TuneFarm "
        "includes starting Ray; tensor intrinsics are preloaded for both).",
        "",
    ]
    rows = []
    for name in ("TuneFarm", "MetaSchedule"):
        p = part[name]
        reach = p.get("to_90pct")
        rows.append(
            [
                name,
                p["trials"],
                f"{p['final_sec'] * 1e3:.3f}" if p.get("final_sec") else "-",
                f"{p['final_gflops']:.1f}" if p.get("final_gflops") else "-",
                reach["trial"] if reach else f"not within {p['trials']}",
                f"{reach['wall']:.1f}" if reach else "-",
                f"{p['wall_sec']:.1f}",
                f"{p['wall_per_trial']:.2f}" if p.get("wall_per_trial") else "-",
            ]
        )
    hdr = [
        "tuner",
        "trials",
        "final best ms",
        "GFLOPS",
        "trials to 90%",
        "wall s to 90%",
        "wall s",
        "s / trial",
    ]
    out += _table(hdr, rows)
    if img:
        out += [f"![best-so-far vs trials and wall time]({img})", ""]
    return out


def _overhead(res: dict[str, Any], img: str | None) -> list[str]:
    part = res.get("overhead")
    out = ["## Throughput and overhead", ""]
    why = _skipped(part)
    if why:
        return [*out, f"_{why}_", ""]
    assert part is not None
    out += [
        "Candidates per second after startup, and the driver's wall time by phase: startup "
        "(task extraction, Ray), waiting for builds, waiting for measurements, database "
        "transactions, probes (preparing the untuned defaults and the dispatch rule's probes), "
        "and search (evolutionary search, cost model, MetaSchedule bookkeeping, "
        "Ray shutdown).",
        "",
    ]
    rows = []
    for j in part.get("tunefarm_jobs", []):
        ph = j["phases"]
        rows.append(
            [
                j["job"],
                j["trials"],
                f"{j['wall_sec']:.1f}",
                f"{j['candidates_per_sec']:.2f}" if j["candidates_per_sec"] else "-",
                *(f"{ph.get(p, 0):.1f} ({ph.get(p, 0) / j['wall_sec']:.0%})" for p in PHASES),
            ]
        )
    for j in part.get("stock_jobs", []):
        rows.append(
            [
                j["job"],
                j["trials"],
                f"{j['wall_sec']:.1f}",
                f"{j['candidates_per_sec']:.2f}" if j["candidates_per_sec"] else "-",
                *("-" for _ in PHASES),
            ]
        )
    out += _table(["job", "trials", "wall s", "cand/s", *(f"{p} s" for p in PHASES)], rows)
    if img:
        out += [f"![wall time split]({img})", ""]
    if part.get("dispatch"):
        out += [
            "Dispatch overhead of the symbolic build at each bucket: the whole tuned module "
            "(shape dispatch, padding, range kernel, slicing) vs TuneFarm's static kernel of "
            "that bucket timed alone.",
            "",
        ]
        rows = [
            [
                d["M"],
                f"{d['module_sec'] * 1e3:.3f}",
                f"{d['static_sec'] * 1e3:.3f}",
                f"{d['overhead']:+.1%}",
            ]
            for d in part["dispatch"]
        ]
        out += _table(["M", "module ms", "static kernel ms", "overhead"], rows)
    return out


def _db_rows(results: list[dict[str, Any]]) -> list[list[str]]:
    return [
        [
            r["backend"],
            f"{r['records']:,}",
            f"{r['query_median_ms']:.3f}",
            f"{r['query_p90_ms']:.3f}",
            f"{r['best_median_ms']:.3f}",
            f"{r['commits_per_sec']:.0f}",
        ]
        for r in results
    ]


def _database(res: dict[str, Any]) -> list[str]:
    part = res.get("database")
    out = ["## Database", ""]
    why = _skipped(part)
    if why:
        return [*out, f"_{why}_", ""]
    assert part is not None
    hdr = ["backend", "records", "lookup median ms", "lookup p90 ms", "best() ms", "commits/s"]
    out += ["Measured in this run (`benchmarks.database`, small sizes):", ""]
    out += _table(hdr, _db_rows(part["suite"]["results"]))
    full = part.get("latest_full")
    if full:
        out += [f"Latest full run (`{full['file']}`):", ""]
        out += _table(hdr, _db_rows(full["data"].get("results", [])))
        job = full["data"].get("job")
        if job:
            out += [
                f"Database share of a {job['trials']}-trial tune job: {job['db_share']:.2%} "
                f"({job['db_sec']:.2f} s of {job['wall_sec']:.1f} s).",
                "",
            ]
    return out


def _generic(title: str, part: dict[str, Any] | None) -> list[str]:
    """Another module's results, whatever their shape: scalars as a list, lists of records
    and dicts of records as tables."""
    out = [f"## {title}", ""]
    why = _skipped(part)
    if why:
        return [*out, f"_{why}_", ""]
    assert part is not None
    out += [f"Source: `{part.get('source', '?')}`.", ""]
    return out + _render_obj(part.get("data", part), "")


def _flat(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(_flat(v, f"{prefix}{k}."))
        elif not isinstance(v, list):
            out[f"{prefix}{k}"] = v
    return out


def _render_obj(data: Any, name: str) -> list[str]:
    out: list[str] = []
    if isinstance(data, list) and data and all(isinstance(r, dict) for r in data):
        rows = [_flat(r) for r in data]
        cols = list(dict.fromkeys(c for r in rows for c in r))[:16]
        title = [f"**{name}**", ""] if name else []
        return [*title, *_table(cols, [[_cell(r.get(c)) for c in cols] for r in rows])]
    if not isinstance(data, dict):
        return [f"- {name}: {_cell(data)}", ""] if name else []
    scalars = {k: v for k, v in data.items() if not isinstance(v, (dict, list))}
    if scalars:
        out += [f"- {k}: {_cell(v)}" for k, v in scalars.items() if len(_cell(v)) < 300]
        out.append("")
    records = {k: v for k, v in data.items() if isinstance(v, dict)}
    if records and all(all(not isinstance(x, list) for x in v.values()) for v in records.values()):
        flat = {k: _flat(v) for k, v in records.items()}
        if len(flat) > 1 and all(flat.values()):
            cols = list(dict.fromkeys(c for r in flat.values() for c in r))[:16]
            title = [f"**{name}**", ""] if name else []
            rows = [[k, *(_cell(r.get(c)) for c in cols)] for k, r in flat.items()]
            return out + title + _table(["", *cols], rows)
    for k, v in data.items():
        if isinstance(v, (dict, list)):
            out += _render_obj(v, f"{name}.{k}" if name else k)
    return out


def _cell(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    return "-" if v is None else str(v)


def _gpu(res: dict[str, Any]) -> list[str]:
    part = res.get("gpu")
    out = ["## GPU (CUDA)", ""]
    why = _skipped(part)
    if why:
        return [*out, f"_Skipped: {why}. It runs where `tvm.cuda(0)` exists._", ""]
    assert part is not None
    out += [f"Device: {part['device']}; target `{part['target']}`.", ""]
    rows = [
        [
            r["dtype"],
            r["M"],
            f"{r['untuned']['median'] * 1e6:.1f} ± {r['untuned']['spread']:.0%}",
            f"{r['untuned']['tflops']:.2f}",
            f"{r['torch']['median'] * 1e6:.1f}" if r.get("torch") else "-",
            f"{r['torch']['tflops']:.2f}" if r.get("torch") else "-",
            "yes" if r["untuned_agree"] else "NO",
        ]
        for r in part["rows"]
    ]
    hdr = ["dtype", "M", "default µs", "TFLOPS", "torch/cuBLAS µs", "TFLOPS", "ok"]
    return out + _table(hdr, rows)


def _machine(res: dict[str, Any], results_file: str | None) -> list[str]:
    m, peak = res.get("machine", {}), res.get("peak", {})
    vers = ", ".join(f"{k} {v}" for k, v in res.get("versions", {}).items())
    after = res.get("peak_after", {}).get("gflops")
    nominal = peak.get("nominal_gflops")
    bad_peak = peak_invalid(res)
    out = [
        "## Run",
        "",
        f"- date: {res.get('date')}; host `{hostname_of(m)}`; results `{results_file or '-'}`",
        f"- machine: {cpu_of(m)}; {m.get('platform')}",
        f"- threads: {m.get('threads')}; load average {_load(res)}",
        f"- target: `{res.get('target')}`",
        f"- versions: {vers}",
        f"- peak: OpenBLAS SGEMM {peak.get('sgemm_n')}³ at **{peak.get('gflops', 0):.1f} GFLOPS** "
        f"(± {peak.get('sec', {}).get('spread', 0):.0%}) at the start, "
        f"{after or 0:.1f} at the end"
        + (f"; nominal 2-core AVX2 FMA peak {nominal:.0f} GFLOPS" if nominal else "")
        + (f"; **{invalid_cell(bad_peak)}**: no figure is judged against it" if bad_peak else ""),
        f"- settings: `{json.dumps(res.get('settings', {}))}`",
        f"- suite wall time: {res.get('wall_sec', 0):.0f} s; per part: "
        + ", ".join(f"{k} {v:.0f} s" for k, v in res.get("part_sec", {}).items()),
        "",
    ]
    if res.get("noisy_run"):
        noisy = res.get("noisy", [])
        out += [
            f"> **Noisy run.** {len(noisy)} figure(s) vary by more than 10% over repeats, and "
            f"the SGEMM peak drifted {res.get('peak_drift', 0):.0%} between start and end. "
            "The machine was shared while this ran; treat ratios as indicative and re-run "
            "`make bench` on a quiet machine.",
            "",
        ]
        if noisy:
            out += ["<details><summary>noisy figures</summary>", ""]
            out += [f"- `{n}`" for n in noisy[:60]]
            out += ["", "</details>", ""]
    return out


PROTOCOL = (
    "After a kernel call TVM's pool workers spin-wait (`sched_yield` in a loop, "
    "`TVM_THREAD_POOL_SPIN_COUNT` iterations, 300,000 by default: about 0.6 s of two busy "
    "threads on this 2-core machine under load) and fight OpenBLAS's threads for the cores: "
    "numpy timed in the same process right after TVM calls spread by up to 7,100% and the SGEMM "
    "peak came out below what TVM kernels reached. So numpy/OpenBLAS and the SGEMM peak run "
    "in a long-lived child process "
    "(`benchmarks/baseline.py`) that never imports tvm, with as many OpenBLAS threads as "
    "`TVM_NUM_THREADS`. `TVM_THREAD_POOL_SPIN_COUNT=0` stops the spinning, but TVM reads it "
    "once per process (at the pool's first use), so it cannot be switched off for the "
    "baselines' phase alone, and setting it for the whole run would change the TVM figures "
    "(a wake-up per parallel launch); the suite leaves it at TVM's default and waits instead: "
    "before each baseline repeat the suite's process waits until its own threads use under 10% "
    "of a core over 20 ms, and the child does the same for OpenBLAS's threads before handing "
    "the cores back. TVM and baseline repeats alternate (one repeat of each figure per round, "
    "order rotated every round), so a load change hits every figure. A figure whose spread "
    f"over repeats is above {INVALID_SPREAD:.0%}, or whose rate is above the measured SGEMM "
    "peak, reads `invalid (spread 31%)` / `invalid (above measured peak)` in the tables and "
    "the headline instead of a ratio; figures above 10% are listed as noisy. "
    "`python -m benchmarks.baseline_check` shows the effect on one matmul."
)


def _protocol(res: dict[str, Any]) -> list[str]:
    """How the baselines are timed (see :mod:`benchmarks.baseline`), and in this run."""
    out = ["## Baselines and protocol", "", PROTOCOL, ""]
    base = res.get("baseline")
    if not isinstance(base, dict):
        out += [
            "**This run predates the baseline process**: it timed numpy/OpenBLAS and the SGEMM "
            "peak in the same process as TVM, so its numpy figures and peak are not reliable; "
            "this report judges its figures by the rules above.",
            "",
        ]
    else:
        pq, cq = base.get("parent_quiet", {}), base.get("child_quiet", {})

        def waits(q: dict[str, Any]) -> str:
            if not q.get("n"):
                return "none"
            med, top = q.get("median_ms"), q.get("max_ms")
            text = f"median {med:.0f} ms, at most {top:.0f} ms" if med is not None else "-"
            if q.get("timed_out"):
                text += f"; **{q['timed_out']} of {q['n']} timed out** (still busy after 3 s)"
            return text

        spin = base.get("tvm_spin_count")
        out += [
            f"In this run: baseline process pid {base.get('pid')}, tvm imported there: "
            f"{base.get('tvm_imported')}, {base.get('threads')} threads; "
            f"`TVM_THREAD_POOL_SPIN_COUNT` {'unset (300,000)' if spin is None else spin}.",
            "",
            f"- waits for the suite's (TVM's) threads to go idle: {waits(pq)}",
            f"- waits for the child's (OpenBLAS's) threads to go idle: {waits(cq)}",
            "",
        ]
    invalid = invalid_list(res)
    if invalid:
        out += [f"<details><summary>invalid figures ({len(invalid)})</summary>", ""]
        out += [f"- `{n}`" for n in invalid[:60]]
        out += ["", "</details>", ""]
    return out


# --------------------------------------------------------------------------- entry
def render(res: dict[str, Any], imgs: dict[str, str], results_file: str | None = None) -> str:
    lines = [
        "# Performance report",
        "",
        "Generated by `make bench` (`python -m benchmarks suite`) from one run: every ratio "
        "compares figures measured side by side in that run (medians over repeats, ± spread).",
        "",
        "## Headline",
        "",
        *(f"- {h}" for h in headline(res)),
        "",
        *_machine(res, results_file),
        *_protocol(res),
        *_kernels(res, imgs.get("kernels")),
        *_examples(res),
        *_generic(
            "Models: TuneFarm vs PyTorch eager, torch.compile, ONNX Runtime", res.get("models")
        ),
        *_efficiency(res, imgs.get("efficiency")),
        *_overhead(res, imgs.get("overhead")),
        *_database(res),
        *_generic("Cost model", res.get("cost-model")),
        *_generic("Distributed throughput", res.get("throughput")),
        *_gpu(res),
    ]
    return "\n".join(lines).rstrip() + "\n"


def write_report(
    res: dict[str, Any],
    path: Path,
    *,
    results_file: Path | None = None,
    readme: Path | None = ROOT / "README.md",
) -> Path:
    """Write the Markdown report at ``path`` and its plots under ``path.parent / 'img'``."""
    path = Path(path)
    img_dir = path.parent / "img"
    img_dir.mkdir(parents=True, exist_ok=True)
    imgs = {}
    for key, fn in (
        ("kernels", plot_kernels),
        ("efficiency", plot_efficiency),
        ("overhead", plot_overhead),
    ):
        name = f"perf-{key}.png"
        if fn(res, img_dir / name):
            imgs[key] = f"img/{name}"
    rel = None
    if results_file is not None:
        try:
            rel = str(Path(results_file).resolve().relative_to(ROOT))
        except ValueError:
            rel = str(results_file)
    path.write_text(render(res, imgs, rel))
    if readme is not None and readme.is_file():
        update_readme(readme, res)
    return path


def main(argv: list[str] | None = None) -> int:
    """Re-render the report from a results file: ``python -m benchmarks.report RESULTS.json``."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m benchmarks.report", description=main.__doc__)
    parser.add_argument("results", type=Path)
    parser.add_argument("--report", type=Path, default=ROOT / "docs" / "performance.md")
    args = parser.parse_args(argv)
    res = json.loads(args.results.read_text())
    print(f"wrote {write_report(res, args.report, results_file=args.results)}")
    return 0


def update_readme(readme: Path, res: dict[str, Any]) -> bool:
    """Replace the README's headline block (between the markers) with this run's headline."""
    text = readme.read_text()
    if BEGIN not in text or END not in text:
        return False
    body = "\n".join(f"- {h}" for h in headline(res))
    date = str(res.get("date", ""))[:10]
    host = hostname_of(res.get("machine"))
    block = f"{BEGIN}\n_From the run of {date} on `{host}`:_\n\n{body}\n{END}"
    readme.write_text(
        re.sub(re.escape(BEGIN) + ".*?" + re.escape(END), lambda _m: block, text, flags=re.S)
    )
    return True


if __name__ == "__main__":
    raise SystemExit(main())

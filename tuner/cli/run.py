"""``tunefarm tune / build / bench``: the per-model commands. Each checks its arguments before
any heavy import, calls a service (:mod:`tuner.services`) and draws what it returns
(:mod:`tuner.cli.render`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from tuner.cli import render
from tuner.cli.common import (
    ArchOpt,
    DbOpt,
    EntryOpt,
    JsonOpt,
    KeepParamsOpt,
    ModelArg,
    OutputJsonOpt,
    SearchOpt,
    ShapeProfileOpt,
    StagesOpt,
    TargetOpt,
    TuneAddressOpt,
    TuneOptions,
    check_library_output,
    check_model_file,
    check_output_file,
    console,
    print_json,
    tune_and_print,
    user_errors,
    with_tune_options,
)
from tuner.cluster.address import ray_address
from tuner.errors import TuneFarmError


def tune(
    model: ModelArg,
    opts: TuneOptions,
    address: TuneAddressOpt = None,
    as_json: JsonOpt = False,
    shape_profile: ShapeProfileOpt = None,
    search: SearchOpt = "auto",
    stages: StagesOpt = 2,
) -> None:
    """Tune MODEL's kernels on Ray workers and store the best schedules in the database.

    With --shape-profile, the buckets and the trials per task are the plan's (tunefarm plan),
    re-planned between --stages from the measurements."""
    check_model_file(model)
    if shape_profile is not None and opts.shape:
        raise TuneFarmError("give --shape or --shape-profile, not both")
    if stages < 1:
        raise TuneFarmError(f"--stages must be at least 1 (got {stages})")
    from tuner.symbolic.buckets import parse_shape_options

    parse_shape_options(opts.shape or [])
    ray_addr = ray_address(address)  # before loading the model or creating a job
    tune_and_print(model, opts, ray_addr, as_json, shape_profile, stages, search)


def build(
    model: ModelArg,
    output: Annotated[
        Path, typer.Option("--output", "-o", help="Where to write the library (a .so file).")
    ],
    target: TargetOpt = "llvm",
    arch: ArchOpt = None,
    db: DbOpt = None,
    strict: Annotated[bool, typer.Option(help="Fail when a kernel has no tuned record.")] = False,
    entry: EntryOpt = "Module",
    keep_params: KeepParamsOpt = False,
    as_json: JsonOpt = False,
    shape_profile: ShapeProfileOpt = None,
) -> None:
    """Compile MODEL with the database's best schedules into a Relax VM library.

    With --shape-profile, the kernel that serves values above the largest tuned bucket is
    the one of least expected time over the profile's traffic there."""
    from tuner.services import ModelSource, build_library

    check_model_file(model)
    check_library_output(output)
    source = ModelSource(model, target, arch, db, entry, keep_params)
    report = build_library(source, output, strict=strict, shape_profile=shape_profile)
    if as_json:
        print_json(render.build_dict(report, output))
    else:
        render.print_build(console, report, model.name, output)


def bench(
    model: ModelArg,
    target: TargetOpt = "llvm",
    arch: ArchOpt = None,
    db: DbOpt = None,
    shape: Annotated[
        list[str] | None,
        typer.Option(
            "--shape",
            help="Values of a symbolic dim to sweep: VAR=V1,V2,... or INPUT.AXIS=V1,V2,... "
            "(e.g. input_ids.1=16,64; repeatable; the values of a VAR given twice are "
            "merged); default: the buckets plus off-bucket values.",
        ),
    ] = None,
    as_json: JsonOpt = False,
    output: OutputJsonOpt = None,
    entry: EntryOpt = "Module",
    keep_params: KeepParamsOpt = False,
    address: Annotated[
        str | None,
        typer.Option(
            "--address",
            "-a",
            help="The Ray cluster's head (HOST, HOST:6379, ray://HOST:10001, "
            "http://HOST:8265 or auto): measure on the cluster's devices through its runners "
            "instead of this machine's CPU.",
        ),
    ] = None,
    devices: Annotated[
        list[str] | None,
        typer.Option(
            "--devices",
            help="With --address: device kinds to bench, KIND[,KIND] (cpu, cuda, arm64); "
            "default: every kind the cluster has.",
        ),
    ] = None,
    runtimes: Annotated[
        str | None,
        typer.Option(
            "--runtimes",
            help="Other runtimes to time beside TuneFarm, NAME[,NAME] (torch.compile, "
            "onnxruntime) or none; default: those that run the model's format (.pt2: both; "
            ".onnx: onnxruntime), each reported as not run when not installed.",
        ),
    ] = None,
    shape_profile: ShapeProfileOpt = None,
    kernels: Annotated[
        bool,
        typer.Option(
            "--kernels",
            help="Also show where the tuned build's time goes at each shape: its heaviest "
            "kernels, each timed alone, and the VM's own work (the rest).",
        ),
    ] = False,
    lib: Annotated[
        Path | None,
        typer.Option(
            "--lib",
            help="A decoder folder's built library (tunefarm build -o): bench it as the tuned "
            "build; default: built from --db.",
        ),
    ] = None,
) -> None:
    """Run the untuned build, the tuned build and the model's reference (numpy for TVMScript,
    PyTorch for .pt2; the untuned build for ONNX); compare time and output. For .pt2 and .onnx
    models also torch.compile and ONNX Runtime (when installed), side by side on the same
    threads. With --address: tuned vs untuned on each device kind of a Ray cluster. On a
    decoder folder: prefill per prompt length (--shape prompt=...) and decode per context
    length (--shape context=...) against PyTorch eager, torch.compile and the memory-bandwidth
    bound. Exit code 2 when the tuned build's outputs disagree with the reference."""
    from tuner import services
    from tuner.cli import cluster
    from tuner.llm.config import is_decoder_folder

    check_model_file(model)
    if output is not None:
        check_output_file(output, "--output")
    source = services.ModelSource(model, target, arch, db, entry, keep_params)
    if is_decoder_folder(model):
        if address is not None or devices or shape_profile is not None or kernels:
            raise TuneFarmError(
                "on a decoder folder bench runs locally: drop --address, --devices, "
                "--shape-profile and --kernels"
            )
        report = services.bench_decoder_folder(source, lib, shape or [], runtimes)
        if as_json:
            print_json(report.to_dict())
        else:
            render.print_decoder_bench(console, report)
        if output is not None:
            output.write_text(render.json_text(report.to_dict()))
        if not report.agree:
            raise typer.Exit(2)
        return
    if lib is not None:
        raise TuneFarmError("--lib is for a decoder folder (a Hugging Face model folder)")
    if address is not None or devices:
        if target != "llvm" or arch:
            raise TuneFarmError(
                "with --address the targets come from the cluster's devices: "
                "use --devices cpu,cuda,arm64 instead of --target/--arch"
            )
        if shape_profile is not None:
            raise TuneFarmError("--shape-profile benches locally; drop --address/--devices")
        cluster.bench_cluster(source, address, devices, shape, as_json, output)
        return
    report = services.bench_model(
        source,
        shape or [],
        shape_profile=shape_profile,
        runtimes=services.parse_runtimes(runtimes),
        kernels=kernels,
    )
    if as_json:
        print_json(report.to_dict())
    else:
        render.print_bench(console, report)
    if output is not None:
        output.write_text(render.json_text(report.to_dict()))
    if not report.agree:
        raise typer.Exit(2)


def register(app: typer.Typer) -> None:
    """Add tune, build and bench to the ``tunefarm`` app."""
    app.command(name="tune")(user_errors(with_tune_options(tune)))
    for fn in (build, bench):
        app.command(name=fn.__name__)(user_errors(fn))

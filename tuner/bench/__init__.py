"""Benchmark a model: untuned default build vs tuned build vs a reference implementation, and
the runtimes a user would pick instead.

The reference is the model's own (``Model.reference``): numpy for TVMScript files that define
``numpy_reference``, PyTorch for ``.pt2`` exported programs. Without one (ONNX, JSON) the
untuned TVM build is the numerical reference.

Other runtimes (:data:`RUNTIMES`), when installed: ``torch.compile`` (inductor, CPU,
``dynamic=True``) of a ``.pt2`` model's exported program, and ONNX Runtime (CPU execution
provider) on the ``torch.onnx.export`` of that program or on an ``.onnx`` file itself. Each
one's outputs are checked against the reference; one that cannot run (not installed, the export
fails) is reported with a one-line reason instead of figures.

Protocol: every runtime uses the same thread count (:func:`bench_threads`: ``torch`` threads,
ORT's intra-op threads and TVM's pool). The reference and the other runtimes are run and timed
before any TVM kernel in the process (after a call TVM's pool threads spin and take the cores
from the others' threads), their repeats interleaved round-robin; then the untuned and tuned
builds, interleaved the same way. A first call at each shape is excluded from the timings and
reported (``warmup_sec``: ``torch.compile`` compiles, or recompiles, there). Last, the
reference and each other runtime are timed back to back with the tuned build, round after
round (:func:`time_paired`, the process quiet before each sample): the ratios reported
(``vs_runtime``, ``vs_reference``, the table's ``(N.NNx)``) are the medians of those paired
rounds, which a slow phase of a shared VM hits on both sides alike; the phases' medians stay
the reported times.

The package: :mod:`~tuner.bench.run` (``bench``, ``time_build``), :mod:`~tuner.bench.timing`
(the timing harness: the instrumented VM, interleaved and paired rounds, inputs, output
checks), :mod:`~tuner.bench.runtimes` (torch.compile, ONNX Runtime) and
:mod:`~tuner.bench.results` (the result types, their notes, traffic quantiles). The tables
are drawn by :mod:`tuner.cli.render`.
"""

"""Symbolic shapes, pure shape and IR work: ``buckets`` (the values tuned per variable),
``rangekernel`` (a kernel tuned at one bucket made correct for a range of values),
``dispatch`` (which kernel serves each value, at build time), ``padding`` (the padded
branch's copies) and ``profile`` (traffic histograms). The planner of buckets and trials from
traffic is :mod:`tuner.planner`; the timings a tune takes for the dispatch rule are
:mod:`tuner.job.probes`."""

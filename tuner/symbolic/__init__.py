"""Symbolic shapes: ``buckets`` (the values tuned per variable), ``rangekernel`` (a kernel
tuned at one bucket made correct for a range of values), ``dispatch`` (which kernel serves
each value, at build time), ``profile`` (traffic histograms) and ``planner`` (buckets and
trial split from traffic)."""

"""Shape dispatch: route each symbolic kernel call to the range kernel of the right bucket.

Rule (documented in docs/symbolic-shapes.md): for a kernel whose only symbolic variable is
``v``, with tuned buckets ``b1 < b2 < ... < bk``, a call with runtime value ``v <= bk`` runs
the kernel of least estimated time at ``v``:

- the generic kernel (untuned default schedule, symbolic): its time measured at ``v`` where
  ``v`` is a bucket, else the least over buckets ``B >= v`` of ``generic_sec(B) * (v / B) **
  d``, its time there scaled by the work at ``v`` (every tune times each kernel's generic code
  at each bucket's shapes; databases tuned before have the static default schedule's time, a
  lower bound); it pads nothing and copies nothing;
- a bucket's kernel: its measured time at its bucket (a range kernel's own, timed by the tune
  at the bucket, :mod:`tuner.job.probes`; else its static kernel's), scaled by the work
  at ``v`` padded to its tile (a static kernel: always its bucket's time), **plus the cost of
  the padded branch**
  itself (:func:`pad_overhead`: a copy per padded input and a crop of the output, and the
  elements they write), which dominates at small ``v`` (a 64-row pad of ``x[1, 128]`` copies
  64 rows); a static kernel also serves its own bucket value unpadded (*exact*: no branch
  cost).

Above ``bk``, the kernel of least time per unit of work (the padding overhead included); with
a shape profile (``build --shape-profile``), the kernel of least expected time over the
profile's values above ``bk``, weighted by their traffic (padding ``v`` to a tile costs
different kernels differently just above the largest bucket).
Work grows as ``v ** d``, ``d`` the number of loop axes over ``v`` in the kernel's busiest
block (1 for ``x @ W``, 2 for ``q @ k^T`` or softmax over ``s x s`` scores). Kernels that
cannot be padded (a reduction over ``v`` that no pad value leaves unchanged), depend on
several variables or have no record run the generic kernel (default schedule).

The dispatch lives in Relax and branches once per call of the model: the values of each
variable are cut at every interval end of every kernel, and ``main`` calls, per region, a copy
of itself whose kernel calls are that region's picks (a bucket branch pads the inputs along
``v`` to a multiple of the range kernel's tile, with zeros or -inf where a max or softmax
reduces over ``v``, one copy per input, calls the padded kernel, predicate-free, and crops
the result back to ``v`` rows). Where that cannot be done, each call site calls a dispatch
function of its own.

- :mod:`tuner.symbolic.dispatch.rule`: the rule (:class:`KernelDispatch`, its bucket kernels and
  the padded branch's cost).
- :mod:`tuner.symbolic.dispatch.plan`: each kernel's dispatch from the database's records.
- :mod:`tuner.symbolic.dispatch.emit`: the dispatch in Relax (:func:`add_dispatch`).
"""

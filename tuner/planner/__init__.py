"""Buckets from traffic: choose the bucket set and the trial split that minimise the expected
latency of the whole model over a shape profile (``tunefarm plan``).

The model (documented in docs/symbolic-shapes.md, "Buckets from traffic"):

- **Latency at a value** ``v`` is the sum over the model's kernels of ``calls x time``. A
  symbolic kernel's time at ``v`` is what the build's dispatch rule (:mod:`tuner.symbolic.dispatch`)
  would run there: its own cost model (:meth:`BucketKernel.cost` with the padding overhead,
  :data:`GENERIC_MARGIN`, :attr:`KernelDispatch.above`) applied to *predicted* bucket
  kernels, a static, an exact and a range kernel per bucket. The generic kernel's time at
  ``v`` is its generic code's time measured at each bucket (``generic_runs``; else the
  untuned default's there), scaled as the rule scales it (the least over buckets ``B >= v``
  of ``generic(B) * (v / B) ** d``). Kernels the rule never dispatches (several variables,
  no pad value) cost their generic time whatever the buckets.
- **A task's time after t trials** (``t`` counts every record of the task, its default
  schedule included): ``default * rho(t)``, ``rho(0) = 1`` (untuned). A kernel family with
  tuning histories in the database follows its own measured curve (:func:`family_curve`:
  the median over its buckets of best / default after each record, then as below);
  else its kernel class's (:func:`~tuner.symbolic.rangekernel.kernel_class`)
  ``rho(t) = floor + (1 - floor) * exp(-(t - 1) / tau)``, ``tau`` fitted to the class's
  histories (least squares over a grid; at least :data:`PRIOR_TAU`), ``floor`` the task's
  roofline over its default (at least :data:`PRIOR_CLASS_FLOOR` for reductions and
  injective kernels); a contraction at least :data:`JUMP_MIN` x off its roofline jumps:
  ``rho(t) = floor * R(t)`` from its second trial, ``R`` the mean of how far a
  contraction's search of ``t`` records still is from its end (:data:`CONTRACTION_SEARCH`,
  measured: 6.7x after 2 records, 1.8x after 8, 1.1x after 16; :attr:`GainCurve.log`). A
  task with records is anchored to its measured best: ``best * rho(t) / rho(recorded)``,
  or, at or below its curve already (the jump is behind it), ``best`` times what its search
  still expects (:func:`tail_ratio`: a contraction's median ``R(t) / R(recorded)``, the
  others' :data:`TAIL_CURVES`). A default not measured at a bucket is the
  family's nearest measured default scaled by FLOPs (else by ``(B / B') ** d``), else FLOPs
  at :data:`PRIOR_GFLOPS`; generic code likewise from its nearest measured bucket.
- **Several searches**: where the kernels of two or more buckets can serve a value and a
  search among them is still to run, the value costs the expected fastest of them, each
  bucket's outcome a lognormal factor of mean 1 (a contraction's sd by its search's length,
  1.25 after 2 records, 0.33 after 16, :data:`CONTRACTION_SEARCH`; :data:`SEARCH_SPREAD`;
  :meth:`Planner._best_of`): the dispatch runs whichever search came out best.
- **Expected latency** is the traffic-weighted mean over the profile's values (at most
  :data:`MAX_VALUES` representatives, :meth:`ShapeProfile.representatives`).
- **Search.** Candidate buckets: the profile's quantiles rounded up to a tileable value
  (a power of two up to 8, else a multiple of 8), the buckets the database already has, and
  powers of two over the profile's range (at most :data:`MAX_CANDIDATES`). Bucket sets grow
  greedily (the candidate that lowers the expected latency most, up to :data:`MAX_BUCKETS`),
  then single swaps are tried until none helps. For each set the trials are split greedily:
  every task gets its default schedule (one trial) or keeps its records, then each further
  trial goes to the task whose predicted time, weighted by the traffic its kernel serves
  (calls x share x work scale), drops most; twice, the second time with the dispatch
  re-derived from the first split's predicted times.

- **Calibration** (a re-plan between stages, :class:`Calibration`): the database's build timed
  at some of the profile's values, each built kernel alone too; the model's kernels are
  scaled by measured / modelled, kernel by kernel, and the call's time outside its kernels
  is added; the re-plan's search and figures both use it.

Limits: one symbolic variable per model (the dispatch itself serves kernels of one variable);
the curve is per family, not per bucket; without a calibration, VM and dispatch overheads
outside the kernels are not modelled (the plan is kernel time).
"""

from tuner.planner.plan import Calibration, Plan, PlannedTask
from tuner.planner.planner import Planner
from tuner.planner.values import powers_of_two, tileable

__all__ = ["Calibration", "Plan", "PlannedTask", "Planner", "powers_of_two", "tileable"]

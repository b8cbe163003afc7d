"""How the runner pool talks to its device actors: a small interface (:class:`Transport`) over
the calls it makes (start, ping, measure, wait, get, kill), so that the pool's state machine
(:mod:`workers.runner_pool`) does not depend on Ray and has fast tests of its own beside the
real-Ray ones. :class:`RayTransport` is the one the product uses.

A transport reports failures of a call as one of three exceptions, which the pool turns into
error values: :class:`ArtifactLost` (the candidate's input is gone, the runner is fine),
:class:`RunnerDied` (the actor died) and :class:`CallFailed` (anything else).
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Any, Protocol

import ray

from workers.config import MeasureConfig, Screen
from workers.slots import SlotSpec


class CallError(Exception):
    """A call to a device actor failed (see the subclasses)."""


class ArtifactLost(CallError):
    """The call's artifact was lost with its node before the runner got it."""


class RunnerDied(CallError):
    """The actor died while (or before) answering."""


class CallFailed(CallError):
    """Any other failure of the call."""


class Transport(Protocol):
    """The pool's calls to device actors. ``start``/``ping``/``measure`` return a handle of
    a pending answer (a *ref*, hashable, compared by identity); ``wait`` and ``get`` resolve
    refs."""

    def start(self, spec: SlotSpec, config: MeasureConfig) -> Any:
        """Start the actor of ``spec``; returns its handle."""
        ...

    def ping(self, actor: Any) -> Any:
        """A ref answered once the actor is up."""
        ...

    def measure(
        self,
        actor: Any,
        batch: Sequence[tuple[Any, list[Any]]],
        screens: Sequence[Screen | None] | None = None,
    ) -> Any:
        """A ref of the actor's answer for ``(artifact, args_info)`` pairs: one ``RunResult``
        for one pair, a list of them for several (or garbage, if the actor is broken).
        ``screens``: what each candidate is screened by (:class:`Screen`; None: nothing)."""
        ...

    def wait(self, refs: Sequence[Any], timeout: float) -> list[Any]:
        """The refs answered within ``timeout`` seconds (every one answered by then, once
        the first is)."""
        ...

    def get_many(self, refs: Sequence[Any]) -> dict[Any, Any] | None:
        """The answers of answered refs in one round trip; None when any of them failed
        (then :meth:`get` each)."""
        ...

    def get(self, ref: Any) -> Any:
        """The answer of an answered ref, or a :class:`CallError`."""
        ...

    def kill(self, actor: Any) -> None:
        """Stop an actor (or a quarantine marker); no error if it is already gone."""
        ...

    def node_alive(self, node_id: str) -> bool:
        """Whether the node is still in the cluster (True when that cannot be told)."""
        ...

    def mark_quarantined(self, spec: SlotSpec, reason: str) -> Any:
        """A marker that shows the quarantine where operators look; a handle to kill."""
        ...


class RayTransport:
    """:class:`Transport` over Ray: device actors, object refs, ``ray.wait``/``ray.get``."""

    def start(self, spec: SlotSpec, config: MeasureConfig) -> Any:
        return spec.start(config)

    def ping(self, actor: Any) -> Any:
        return actor.ping.remote()

    def measure(
        self,
        actor: Any,
        batch: Sequence[tuple[Any, list[Any]]],
        screens: Sequence[Screen | None] | None = None,
    ) -> Any:
        screens = list(screens) if screens else [None] * len(batch)
        if len(batch) == 1:
            artifact, args_info = batch[0]
            return actor.measure.remote(artifact, args_info, screens[0])
        infos, artifacts = [a for _, a in batch], [art for art, _ in batch]
        return actor.measure_batch.remote(infos, *artifacts, screens=screens)

    def wait(self, refs: Sequence[Any], timeout: float) -> list[Any]:
        ready, _ = ray.wait(list(refs), num_returns=1, timeout=timeout)
        if ready:  # collect everything that is ready now, not just the first
            ready, _ = ray.wait(list(refs), num_returns=len(refs), timeout=0)
        return list(ready)

    def get_many(self, refs: Sequence[Any]) -> dict[Any, Any] | None:
        try:
            return dict(zip(refs, ray.get(list(refs)), strict=True))
        except ray.exceptions.RayError:
            return None

    def get(self, ref: Any) -> Any:
        try:
            return ray.get(ref)
        except ray.exceptions.ObjectLostError as err:
            raise ArtifactLost(str(err)) from err
        except ray.exceptions.RayActorError as err:
            raise RunnerDied(str(err)) from err
        except ray.exceptions.RayError as err:
            raise CallFailed(str(err)) from err

    def kill(self, actor: Any) -> None:
        with contextlib.suppress(Exception):  # already gone
            ray.kill(actor, no_restart=True)

    def node_alive(self, node_id: str) -> bool:
        try:
            return any(n["NodeID"] == node_id and n.get("Alive") for n in ray.nodes())
        except Exception:
            return True

    def mark_quarantined(self, spec: SlotSpec, reason: str) -> Any:
        return spec.mark_quarantined(reason)

"""Siblings on Ray: each a task on a worker holding a copy of the state.

`RayExecutor` ships the driver's trace once per fork node (`Coordinator.ship`: every
object as one git pack, with the refs) into the Ray object store; a sibling's task gets
it by reference, and each worker process fetches and unpacks it once (`receive_state`,
cached by the object's id), then copies that base for each sibling it runs, so a retried
task starts from the same state. On the worker the sibling runs as `LocalExecutor` runs
it (`_grow._run_sibling`: the team forked from the fork node, its members continued, the
leaf graded), under the same policies (the state's settings), with the fork node's
inboxes as the driver has them; the task returns the leaf's record and a pack of every
object the worker added, and the driver adopts the leaf's scopes into its own trace
(`Coordinator.adopt`). A worker that dies mid-sibling loses only that sibling's copy:
Ray runs the task again (`max_retries`), and leaves already back are kept.

The tree's budget is checked before each sibling is sent and again per step on the
worker, against what the leaves back so far spent: siblings running at once do not see
each other's spending (they do under `LocalExecutor`).

Ray is imported here only: `corral rollouts grow --executor ray` needs it, nothing else.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import shutil
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import ray

from coordinator import Coordinator, Message, Shipment, receive_state
from sandboxes import clear_dir

from .._prices import PriceTable
from ..providers import Provider, provider_from_spec
from ._grow import SiblingJob, _Grower, _run_sibling, _Spend, _Template, team_scoped
from ._tree import LeafNode

__all__ = ["Hook", "RayExecutor", "connect"]

Hook = Callable[[SiblingJob, str], None]
"""Called on the worker at "opened" (the sibling's state is open) and "graded" (the
leaf is done, before it is shipped back): for tests that kill a worker mid-sibling."""


def connect(address: str | None = None, num_cpus: int | None = None) -> None:
    """Join the Ray cluster at `address` (None: start a local one), once per process.
    The workers get this process's PYTHONPATH, so they import the same Corral."""
    if ray.is_initialized():
        return
    env = {"PYTHONPATH": os.environ["PYTHONPATH"]} if os.environ.get("PYTHONPATH") else {}
    # "local": a new cluster of our own, never one `ray start` left running on this machine
    ray.init(address=address or "local", num_cpus=num_cpus if address is None else None,
             runtime_env={"env_vars": env} if env else None, include_dashboard=False,
             log_to_driver=False, configure_logging=False)


@dataclass(frozen=True)
class _Spec:
    """What a worker needs besides the job and the state: the grower's settings."""

    templates: Mapping[str, _Template]
    base: tuple[str, str]
    team: tuple[tuple[str, ...], str | None]
    nodes: tuple[tuple[str, ...], ...]
    inboxes: Mapping[str, list[Message]]
    test: str | None
    max_steps: int
    test_timeout: float
    backend: str
    base_url: str | None
    tokens: bool
    prices: PriceTable
    max_tokens: int | None
    max_cost: float | None
    run: str = ""
    """This executor's id: with the job, the name of the sibling's work directory (object
    ids repeat across drivers; this one does not)."""
    provider_for: Callable[[str], Provider] | None = None
    hook: Hook | None = None


@dataclass
class _Base:
    ref: Any
    """The shipment in Ray's object store."""


@dataclass
class RayExecutor:
    """Runs each sibling as a Ray task (see the module); `connect` first."""

    grower: _Grower
    base_url: str | None = None
    tokens: bool = True
    provider_for: Callable[[str], Provider] | None = None
    hook: Hook | None = None
    retries: int = 3
    _bases: dict[str, _Base] = field(default_factory=dict)
    _shipping: asyncio.Lock = field(default_factory=asyncio.Lock)
    _spent: list[LeafNode] = field(default_factory=list)
    _run: str = field(default_factory=lambda: secrets.token_hex(8))

    async def run(self, job: SiblingJob) -> LeafNode | None:
        g = self.grower
        g.spend.settled = (sum(x.tokens for x in self._spent), sum(x.cost for x in self._spent))
        g.stopped = g.stopped or g.spend.reached()
        if g.stopped is not None:
            return None
        base = await self._base(job)
        spec = self._spec(job)
        task = _sibling.options(max_retries=self.retries, retry_exceptions=False)
        text, back = await task.remote(spec, job, [base.ref])
        leaf = LeafNode.model_validate_json(text)
        scopes = [m.scope for m in leaf.members] + ([leaf.grade.scope] if leaf.grade else [])
        await g.coord.adopt(back, scopes)
        self._spent.append(leaf)
        g.spend.settled = (sum(x.tokens for x in self._spent), sum(x.cost for x in self._spent))
        return leaf

    async def _base(self, job: SiblingJob) -> _Base:
        """The state as the fork node left it, shipped once per fork node."""
        async with self._shipping:
            if job.fork.id not in self._bases:
                shipment = await self.grower.coord.ship()
                self._bases[job.fork.id] = _Base(ray.put(shipment))
            return self._bases[job.fork.id]

    def _spec(self, job: SiblingJob) -> _Spec:
        g = self.grower
        settled = g.spend.settled
        left_tokens = None if g.spend.max_tokens is None else g.spend.max_tokens - settled[0]
        left_cost = None if g.spend.max_cost is None else g.spend.max_cost - settled[1]
        nodes = tuple(m.scope for m in job.fork.members)
        return _Spec(
            templates=dict(g.templates), base=(g.base[0].name, g.base[1]), team=g.team,
            nodes=(nodes,), inboxes={n: list(g.coord.scope(n).inbox) for n in nodes},
            test=g.test, max_steps=g.max_steps, test_timeout=g.test_timeout,
            backend=g.coord.backend.name, base_url=self.base_url, tokens=self.tokens,
            prices=g.spend.table, max_tokens=left_tokens, max_cost=left_cost,
            run=self._run, provider_for=self.provider_for, hook=self.hook)


_STATES: dict[str, tuple[Path, frozenset[str]]] = {}
"""This worker process's bases: the unpacked state and its object ids, by object id."""
_KEEP = 2
"""Bases a worker keeps unpacked (Ray kills its workers at shutdown: no exit hook runs)."""


def _local_base(ref: Any) -> tuple[Path, frozenset[str]]:
    key = ref.hex()
    if key not in _STATES:
        if not _STATES:
            _sweep_dead_bases()
        shipment: Shipment = ray.get(ref)
        home = _TOP / f"base-{os.getpid()}-{key}"
        clear_dir(home)
        state = home / "state"
        receive_state(shipment, state)
        while len(_STATES) >= _KEEP:  # fork nodes come one after another: drop the oldest
            old, _ = _STATES.pop(next(iter(_STATES)))
            clear_dir(old.parent)
        _STATES[key] = (state, shipment.objects)
    return _STATES[key]


_TOP = Path(tempfile.gettempdir()) / "corral-ray"
"""Where workers unpack bases (`base-<pid>-<id>`) and run siblings (`sibling-...`)."""


def _sweep_dead_bases() -> None:
    """Remove the bases of worker processes that are gone: Ray kills its workers at
    shutdown, so a worker cannot remove its own; the next worker here does."""
    for home in _TOP.glob("base-*-*"):
        pid = int(home.name.split("-")[1]) if home.name.split("-")[1].isdigit() else 0
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            clear_dir(home)
        except (PermissionError, OverflowError, ValueError):
            continue


@ray.remote(num_cpus=1)
def _sibling(spec: _Spec, job: SiblingJob, base: list[Any]) -> tuple[str, Shipment]:
    """One sibling on this worker: a fresh copy of the base, the sibling run in it."""
    state, objects = _local_base(base[0])
    work = _work_dir(spec.run, job)
    clear_dir(work)  # a retry: what the killed attempt left, its mounts with it
    try:
        shutil.copytree(state / "trace.git", work / "state" / "trace.git")
        return asyncio.run(_run_here(spec, job, work / "state", objects))
    finally:
        clear_dir(work)


def _work_dir(run: str, job: SiblingJob) -> Path:
    """Where the sibling runs: named after the job, not at random, so Ray's retry of a
    sibling whose worker was killed finds and clears the killed attempt's directory."""
    arm = "" if job.variant is None else ("-with" if job.variant.taken else "-without")
    return _TOP / f"sibling-{run}-{job.fork.id}-{job.sibling}{arm}"


async def _run_here(spec: _Spec, job: SiblingJob, state: Path, objects: frozenset[str]
                    ) -> tuple[str, Shipment]:
    providers: dict[str, Provider] = {}
    async with Coordinator.open(state, backend=spec.backend) as coord:
        for name, inbox in spec.inboxes.items():
            coord.scope(name).inbox = list(inbox)
        try:
            for t in spec.templates.values():
                if t.spec not in providers:
                    providers[t.spec] = (spec.provider_for(t.spec) if spec.provider_for
                                         else provider_from_spec(
                                             t.spec, spec.base_url, logprobs=spec.tokens,
                                             token_ids=spec.tokens))
            with team_scoped(coord) as policy:
                policy.register(list(spec.team[0]), base=spec.team[1])
                for names in spec.nodes:
                    policy.register(list(names))
                g = _Grower(coord, policy, spec.templates, providers,
                            (coord.scope(spec.base[0]), spec.base[1]),
                            _Spend(spec.prices, spec.max_tokens, spec.max_cost), spec.test,
                            spec.max_steps, spec.test_timeout)
                if spec.hook is not None:
                    spec.hook(job, "opened")
                leaf = await _run_sibling(g, job)
                if spec.hook is not None:
                    spec.hook(job, "graded")
        finally:
            for p in providers.values():
                await p.aclose()
        back = await coord.ship(without=objects)
    return leaf.model_dump_json(), back

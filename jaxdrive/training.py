"""The training contract shared by every algorithm and by the host loop.

``make_train(config, env, env_params) -> Trainer``: a `Trainer` is callable as the
pure function ``train(key) -> (runner_state, metrics)`` that runs every iteration in
one `lax.scan` (vmappable over keys for many seeds), and exposes the pieces the host
loop needs to run it in compiled chunks:

* ``init(key) -> runner_state``: a pytree (params, optimiser states, env state, last
  timestep, RNG as raw ``uint32[2]`` keys, ``iteration: int32[]``), checkpointable as is.
* ``update(runner_state) -> (runner_state, metrics)``: one whole iteration (rollout
  scan of T steps over N vmapped envs, then learning); ``metrics`` is a flat
  ``dict[str, float32[]]``.
* ``chunk(runner_state, num_iterations)``: ``num_iterations`` updates as one scan;
  metrics stacked ``[K]``.

Metric names are ``/``-separated, e.g. ``"episode_return/tagger"``, ``"loss/runner/value"``;
``"env_steps"`` counts env steps so far (float32 to stay in one dtype).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import jax

__all__ = ["Metrics", "Trainer"]

Metrics = dict[str, jax.Array]


@dataclasses.dataclass(frozen=True, eq=False)
class Trainer:
    """A compiled-friendly training program (see the module docstring)."""

    init: Callable[[jax.Array], Any]
    update: Callable[[Any], tuple[Any, Metrics]]
    num_iterations: int
    env_steps_per_iteration: int
    config: Any = None
    #: ``(runner_state) -> {policy_name: params}``, for evaluation and export.
    get_params: Callable[[Any], dict[str, Any]] | None = None
    #: ``(params_by_policy, key, obs) -> actions``: deterministic-or-sampled acting.
    act: Callable[..., Any] | None = None
    #: Recurrent policies: ``(lead_shape) -> carry`` of zeros; ``act(..., carry=carry)``
    #: then returns ``(actions, carry)``. ``None`` when every policy is feed-forward.
    init_carry: Callable[[tuple[int, ...]], Any] | None = None

    def chunk(self, runner_state: Any, num_iterations: int) -> tuple[Any, Metrics]:
        """``num_iterations`` iterations as one `lax.scan`; metrics ``[K]``. Pure."""

        def body(rs, _):
            return self.update(rs)

        return jax.lax.scan(body, runner_state, None, length=int(num_iterations))

    def __call__(self, key: jax.Array) -> tuple[Any, Metrics]:
        """``train(key)``: init then every iteration; metrics ``[num_iterations]``. Pure."""
        return self.chunk(self.init(key), self.num_iterations)

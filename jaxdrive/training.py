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
* ``run_chunk(runner_state, n, capacity)``: ``n`` updates, ``n`` a traced count: one
  compiled program serves every chunk length up to ``capacity`` (the host loop's first,
  short chunk, full chunks and a remainder); metrics stacked ``[capacity]``.

Metric names are ``/``-separated, e.g. ``"episode_return/tagger"``, ``"loss/runner/value"``;
``"env_steps"`` counts env steps so far (float32 to stay in one dtype).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

__all__ = ["Metrics", "Trainer", "run_iterations"]

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

    def run_chunk(
        self, runner_state: Any, num_iterations: jax.Array | int, capacity: int
    ) -> tuple[Any, Metrics]:
        """`run_iterations` of this trainer's ``update``. Pure."""
        return run_iterations(self.update, runner_state, num_iterations, capacity)

    def __call__(self, key: jax.Array) -> tuple[Any, Metrics]:
        """``train(key)``: init then every iteration; metrics ``[num_iterations]``. Pure."""
        return self.chunk(self.init(key), self.num_iterations)


def run_iterations(
    update: Callable[[Any], tuple[Any, Metrics]],
    runner_state: Any,
    num_iterations: jax.Array | int,
    capacity: int,
) -> tuple[Any, Metrics]:
    """``num_iterations`` calls of ``update`` (an ``int32`` scalar, clipped to
    ``[0, capacity]``; traced, so not part of the compiled program) as one
    `lax.fori_loop`; metrics stacked ``[capacity]``, rows ``n:`` zero. Iteration ``i``
    computes what step ``i`` of `Trainer.chunk`'s scan computes; ``update`` is traced
    once. Pure."""
    step = jax.jit(update)  # one trace, shared by eval_shape and the loop body
    shapes = jax.eval_shape(step, runner_state)[1]
    buf = jax.tree.map(lambda s: jnp.zeros((int(capacity), *s.shape), s.dtype), shapes)

    def body(i, carry):
        rs, buf = carry
        rs, metrics = step(rs)
        put = jax.lax.dynamic_update_index_in_dim
        return rs, jax.tree.map(lambda b, m: put(b, m, i, 0), buf, metrics)

    n = jnp.clip(jnp.asarray(num_iterations, jnp.int32), 0, int(capacity))
    return jax.lax.fori_loop(0, n, body, (runner_state, buf))

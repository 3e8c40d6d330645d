"""`DeviceBatch`: a batch of jaxdrive envs on the device, driven by host-side code.

The outward adapters (`to_pettingzoo`, `to_gymnasium`) keep the env work on the
device: one jitted call resets or steps all ``N`` envs (`jaxdrive.vectorize`, with
auto-reset on the device where asked) and returns only what the host needs, packed
into one ``uint8`` buffer (every output's bytes, 4-byte types first so each view is
aligned) that one `jax.device_get` copies and the host views as the outputs again
(no copy). The PRNG key and the env state stay on the device between calls; actions
go in as one dict of host arrays.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxdrive.env import Env
from jaxdrive.types import TimeStep
from jaxdrive.vector import VecEnv

__all__ = ["DeviceBatch"]


class DeviceBatch:
    """``num_envs`` copies of ``env`` with ``params`` stepped from the host.

    `reset` and `step` return ``{field: {g: [N, A_g, ...]}}`` host arrays for the fields
    ``obs``, ``reward``, ``terminated``, ``truncated``, ``active``, ``action_mask``
    (envs with masks) and ``final_obs`` (with ``auto_reset``: the observation an
    episode ended on, where ``done``), plus ``done`` ``[N]``.
    """

    def __init__(self, env: Env, params: Any, num_envs: int, auto_reset: bool):
        self.env = env
        self.params = env.default_params if params is None else params
        self.num_envs = int(num_envs)
        self.auto_reset = bool(auto_reset)
        self._venv = VecEnv(
            env, self.num_envs, auto_reset=self.auto_reset, keep_final_obs=self.auto_reset
        )
        first = jax.eval_shape(self._venv.reset, jax.random.key(0), self.params)[1]
        self.has_masks = first.action_mask is not None
        shapes = jax.eval_shape(self._outputs, first)
        leaves, self._treedef = jax.tree.flatten(shapes)
        # pack order: larger item sizes first, so every leaf's bytes start aligned
        self._order = sorted(range(len(leaves)), key=lambda i: -leaves[i].dtype.itemsize)
        self._layout = [(leaves[i].shape, np.dtype(leaves[i].dtype)) for i in self._order]
        self._reset = jax.jit(self._reset_impl)
        self._step = jax.jit(self._step_impl)
        self._key: jax.Array | None = None
        self._state: Any = None

    def _pack(self, out: dict[str, Any]) -> jax.Array:
        """``[bytes]`` uint8: the output leaves' bytes in pack order."""
        leaves = jax.tree.leaves(out)
        parts = []
        for i in self._order:
            x = leaves[i]
            x = (
                x.astype(jnp.uint8)
                if x.dtype == jnp.bool_
                else jax.lax.bitcast_convert_type(x, jnp.uint8)
            )
            parts.append(x.reshape(-1))
        return jnp.concatenate(parts)

    def _unpack(self, buf: jax.Array) -> dict[str, Any]:
        """The outputs as host arrays: views into one device-to-host copy of ``buf``."""
        host = np.asarray(jax.device_get(buf))
        leaves, start = [None] * len(self._order), 0
        for i, (shape, dtype) in zip(self._order, self._layout, strict=True):
            size = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
            leaves[i] = host[start : start + size].view(dtype).reshape(shape)
            start += size
        return jax.tree.unflatten(self._treedef, leaves)

    def _outputs(self, ts: TimeStep) -> dict[str, Any]:
        out = {
            "obs": ts.obs,
            "reward": ts.reward,
            "terminated": ts.terminated,
            "truncated": ts.truncated,
            "active": ts.active,
            "done": ts.done,
        }
        if self.has_masks:
            out["action_mask"] = ts.action_mask
        if self.auto_reset:
            out["final_obs"] = ts.extras["final_obs"]
        return out

    def _reset_impl(self, key: jax.Array, params: Any) -> tuple[jax.Array, Any, jax.Array]:
        key, k_reset = jax.random.split(key)
        state, ts = self._venv.reset(k_reset, params)
        return key, state, self._pack(self._outputs(ts))

    def _step_impl(
        self, key: jax.Array, state: Any, actions: dict[str, jax.Array], params: Any
    ) -> tuple[jax.Array, Any, jax.Array]:
        key, k_step = jax.random.split(key)
        state, ts = self._venv.step(k_step, state, actions, params)
        return key, state, self._pack(self._outputs(ts))

    def reset(self, seed: int) -> dict[str, Any]:
        """Resets every env from ``jax.random.key(seed)``; returns the host outputs."""
        self._key, self._state, buf = self._reset(jax.random.key(seed), self.params)
        return self._unpack(buf)

    def step(self, actions: dict[str, np.ndarray]) -> dict[str, Any]:
        """Steps every env with ``actions[g]: [N, A_g, *act_shape_g]`` (cast to each
        action space's dtype); returns the host outputs."""
        if self._state is None:
            raise RuntimeError("call reset() before step()")
        actions = {
            g: np.asarray(actions[g], dtype=self.env.action_space(g).dtype) for g in self.env.groups
        }
        self._key, self._state, buf = self._step(self._key, self._state, actions, self.params)
        return self._unpack(buf)

    def default_actions(self) -> dict[str, np.ndarray]:
        """``{g: [N, A_g, *act_shape_g]}`` host arrays of each space's action nearest 0
        (0 for discrete spaces, 0 clipped into a ``Box``), for agents that give none."""
        out = {}
        for g in self.env.groups:
            space = self.env.action_space(g)
            shape = (self.num_envs, self.env.num_agents(g), *space.shape)
            if space.is_discrete:
                out[g] = np.zeros(shape, np.dtype(space.dtype))
            else:
                out[g] = np.broadcast_to(np.clip(0.0, space.low, space.high), shape).astype(
                    np.float32
                )
        return out

"""Recurrent actor-critics for the on-policy trainers (PPO, A2C, MAPPO).

Dimension letters: ``T`` time steps of a sequence, ``...`` batch axes (envs, agents),
``F`` a core's input features (the torso's last layer size), ``H`` its hidden size
(``core_size``), ``S`` its carry size (``H`` for a GRU, ``2H`` for an LSTM: cell and
hidden state side by side), ``O`` the flat observation size.

The policy config keys (`RECURRENT_POLICY_DEFAULTS`, checked by `RECURRENT_RULES`):

* ``core``: ``"mlp"`` (feed-forward, the default), ``"gru"`` or ``"lstm"``: the actor's
  core, between its torso MLP and its head (the layout of PureJaxRL's and Mava's
  recurrent PPO): ``obs -> MLP -> core -> head``.
* ``critic_core``: the critic's core, ``"same"`` (as ``core``, the default) or one of the
  kinds above; the critic reads ``critic_obs -> MLP -> core -> value``.
* ``core_size``: ``H``.

`RecurrentCore` is one GRU (the gates of ``flax.linen.GRUCell``) or LSTM (those of
``flax.linen.OptimizedLSTMCell``) layer over a whole sequence: the input projection of
every step is one GEMM ``[T·..., F] @ [F, G·H]`` (``G`` = 3 or 4 gates) before a
`lax.scan` over ``T`` that does only the ``[..., H] @ [H, G·H]`` recurrent GEMM and
the gates. **Resets**: a step's output carry is replaced by zeros where ``ends`` is
True (the agent's episode ended at that step), so the next step starts the new episode
from the zero carry; the rollout applies the same rule after each env step, so a
sequence re-run from the carry stored at the rollout's start reproduces the acting
computation step for step (truncated BPTT over the rollout).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from algorithms.common.config_rules import Rule, choice, integer
from algorithms.common.layers import MLP, DenseParams, affine
from algorithms.common.networks import ActionHead, ActionSpec

__all__ = [
    "CORES",
    "RECURRENT_POLICY_DEFAULTS",
    "RECURRENT_RULES",
    "RecurrentActorCritic",
    "RecurrentCore",
    "carry_size",
    "core_kinds",
    "initial_carry",
    "is_recurrent",
    "reset_carry",
]

#: Core kinds: feed-forward (no core), GRU, LSTM.
CORES = ("mlp", "gru", "lstm")
_GATES = {"gru": 3, "lstm": 4}

#: Policy config keys of the recurrent cores and their defaults (see the module docstring).
RECURRENT_POLICY_DEFAULTS: dict[str, Any] = {
    "core": "mlp",  # actor core: "mlp" (feed-forward) | "gru" | "lstm"
    "critic_core": "same",  # critic core: "same" (as core) | "mlp" | "gru" | "lstm"
    "core_size": 128,  # hidden size H of the cores
}

#: Value rules of `RECURRENT_POLICY_DEFAULTS`.
RECURRENT_RULES: dict[str, Rule] = {
    "core": choice(lambda: CORES),
    "critic_core": choice(lambda: ("same", *CORES)),
    "core_size": integer(1),
}


def core_kinds(hp: dict[str, Any]) -> tuple[str, str]:
    """``(actor core, critic core)`` kinds of a policy's checked hyper-parameters."""
    actor = hp.get("core", "mlp")
    critic = hp.get("critic_core", "same")
    return actor, actor if critic == "same" else critic


def is_recurrent(hp: dict[str, Any]) -> bool:
    """Whether the actor or the critic of a policy has a recurrent core."""
    return any(k != "mlp" for k in core_kinds(hp))


def carry_size(kind: str, size: int) -> int:
    """``S``: the carry features of a core of ``kind`` and hidden size ``size``."""
    return 2 * size if kind == "lstm" else size


def initial_carry(hp: dict[str, Any], lead: Sequence[int]) -> dict[str, jax.Array]:
    """The zero carry ``{"actor" | "critic": [*lead, S] float32}`` of a policy's recurrent
    cores (no entry for a feed-forward one)."""
    out = {}
    for name, kind in zip(("actor", "critic"), core_kinds(hp), strict=True):
        if kind != "mlp":
            out[name] = jnp.zeros((*lead, carry_size(kind, hp["core_size"])), jnp.float32)
    return out


def reset_carry(carry: Any, ends: jax.Array) -> Any:
    """``carry`` (leaves ``[*E, S]``) with zeros where ``ends`` (``[*E]`` bool) is True."""
    return jax.tree.map(lambda c: jnp.where(ends[..., None], 0.0, c), carry)


def _stacked_orthogonal(gates: int) -> Any:
    """Init of a ``[H, G·H]`` recurrent kernel: ``G`` independent orthogonal ``[H, H]``
    blocks side by side (flax's cells initialise each gate's kernel orthogonally)."""

    def init(key: jax.Array, shape: tuple[int, ...], dtype: Any = jnp.float32) -> jax.Array:
        h = shape[0]
        keys = jax.random.split(key, gates)
        blocks = [nn.initializers.orthogonal()(k, (h, h), dtype) for k in keys]
        return jnp.concatenate(blocks, axis=1)

    return init


class RecurrentCore(nn.Module):
    """One GRU or LSTM layer over a sequence: ``(carry [..., S], x [T, ..., F],
    ends [T, ...] | None) -> (carry [..., S], y [T, ..., H])``.

    GRU (flax's ``GRUCell``): ``r = σ(W_ir x + b_ir + W_hr h)``, ``z = σ(W_iz x + b_iz +
    W_hz h)``, ``n = tanh(W_in x + b_in + r·(W_hn h + b_hn))``, ``h' = (1 − z)·n + z·h``.
    LSTM (flax's ``OptimizedLSTMCell``): ``i, f, g, o`` from ``W_i x + b + W_h h``,
    ``c' = σ(f)·c + σ(i)·tanh(g)``, ``h' = σ(o)·tanh(c')``; its carry is ``[c, h]``.
    ``y_t`` is the hidden state after step ``t``; the carry after step ``t`` becomes
    zeros where ``ends[t]`` (``None``: never). Input kernels use LeCun-normal init, the
    recurrent ones orthogonal blocks, biases zeros. Computes in float32.
    """

    kind: str = "gru"
    size: int = 128

    @nn.compact
    def __call__(
        self, carry: jax.Array, x: jax.Array, ends: jax.Array | None = None
    ) -> tuple[jax.Array, jax.Array]:
        if self.kind not in _GATES:
            raise ValueError(f"unknown recurrent core {self.kind!r}; known: {list(_GATES)}")
        g, h = _GATES[self.kind], self.size
        # not named "kernel": `cast_kernels` leaves the cores in float32 when acting too
        wi = self.param("input_kernel", nn.initializers.lecun_normal(), (x.shape[-1], g * h))
        bi = self.param("input_bias", nn.initializers.zeros, (g * h,))
        wh = self.param("hidden_kernel", _stacked_orthogonal(g), (h, g * h))
        bh = self.param("hidden_bias", nn.initializers.zeros, (h,)) if g == 3 else None
        xp = affine(x, wi, bi, jnp.float32)  # [T, ..., G·H]: every step's input GEMM at once

        def cell(c: jax.Array, xp_t: jax.Array) -> jax.Array:
            if g == 3:
                hp = c @ wh  # [..., 3H]
                r = jax.nn.sigmoid(xp_t[..., :h] + hp[..., :h])
                z = jax.nn.sigmoid(xp_t[..., h : 2 * h] + hp[..., h : 2 * h])
                n = jnp.tanh(xp_t[..., 2 * h :] + r * (hp[..., 2 * h :] + bh))
                return (1.0 - z) * n + z * c
            cc, hh = c[..., :h], c[..., h:]
            gates = xp_t + hh @ wh  # [..., 4H]
            i, f = jax.nn.sigmoid(gates[..., :h]), jax.nn.sigmoid(gates[..., h : 2 * h])
            gg, o = jnp.tanh(gates[..., 2 * h : 3 * h]), jax.nn.sigmoid(gates[..., 3 * h :])
            cc = f * cc + i * gg
            return jnp.concatenate([cc, o * jnp.tanh(cc)], axis=-1)

        def out(c: jax.Array) -> jax.Array:
            return c if g == 3 else c[..., h:]

        carry = carry.astype(jnp.float32)
        if ends is None and x.shape[0] == 1:  # one step (acting): no loop
            carry = cell(carry, xp[0])
            return carry, out(carry)[None]
        if ends is None:
            ends = jnp.zeros(x.shape[:-1], bool)

        def body(c, inp):
            xp_t, end_t = inp
            c = cell(c, xp_t)
            return jnp.where(end_t[..., None], 0.0, c), out(c)

        return jax.lax.scan(body, carry, (xp, ends))


class RecurrentActorCritic(nn.Module):
    """Actor ``obs -> MLP -> core -> head`` and critic ``critic_obs -> MLP -> core ->
    value``, each core a `RecurrentCore` or none (``"mlp"``: the torso feeds the head).

    ``carry``: ``{"actor": [..., S], "critic": [..., S]}`` (entries only for recurrent
    cores; `initial_carry`). ``__call__(carry, obs [T, ..., O], ends [T, ...],
    critic_obs [T, ..., C] | None) -> (carry, dist [T, ...], value [T, ...])`` runs whole
    sequences with resets (learning); ``step(carry, obs [..., O], critic_obs) -> (carry,
    dist [...], value [...])`` one step without reset (acting); ``value_step`` the value
    of one step (the carry it would give is dropped: bootstraps). ``obs_features``,
    ``critic_features``, ``bias_column`` and ``compute_dtype`` are those of
    `algorithms.common.networks.ActorCritic` (the torsos and heads; the cores compute
    in float32).
    """

    spec: ActionSpec
    hidden_sizes: Sequence[int] = (64, 64)
    activation: str = "tanh"
    actor_kind: str = "gru"
    critic_kind: str = "gru"
    core_size: int = 128
    obs_features: int | None = None
    critic_features: int | None = None
    compute_dtype: Any = jnp.float32
    bias_column: bool = False

    def setup(self) -> None:
        mlp = functools.partial(
            MLP,
            self.hidden_sizes,
            self.activation,
            dtype=self.compute_dtype,
            bias_column=self.bias_column,
        )
        self.actor_torso = mlp(in_features=self.obs_features)
        self.critic_torso = mlp(in_features=self.critic_features)
        if self.actor_kind != "mlp":
            self.actor_rnn = RecurrentCore(self.actor_kind, self.core_size)
        if self.critic_kind != "mlp":
            self.critic_rnn = RecurrentCore(self.critic_kind, self.core_size)
        self.actor_head = ActionHead(self.spec, self.compute_dtype)
        self.value_head = DenseParams(
            1, kernel_init=nn.initializers.orthogonal(1.0), bias_init=nn.initializers.zeros
        )

    @staticmethod
    def _core(rnn: Any, carry: dict, name: str, h: jax.Array, ends: Any) -> tuple[dict, jax.Array]:
        """``rnn`` over ``h [T, ..., F]`` with ``ends``; ``ends=False``: ``h [..., F]`` is one
        step (no reset)."""
        if ends is False:
            c, y = rnn(carry[name], h[None])
            return {**carry, name: c}, y[0]
        c, y = rnn(carry[name], h, ends)
        return {**carry, name: c}, y

    def _actor(self, carry: dict, obs: jax.Array, ends: Any) -> tuple[dict, Any]:
        h = self.actor_torso(obs)
        if self.actor_kind != "mlp":
            carry, h = self._core(self.actor_rnn, carry, "actor", h, ends)
        return carry, self.actor_head(h)

    def _critic(self, carry: dict, x: jax.Array, ends: Any) -> tuple[dict, jax.Array]:
        h = self.critic_torso(x)
        if self.critic_kind != "mlp":
            carry, h = self._core(self.critic_rnn, carry, "critic", h, ends)
        v = affine(h, *self.value_head(h.shape[-1]), self.compute_dtype)[..., 0]
        return carry, v

    def __call__(
        self,
        carry: dict[str, jax.Array],
        obs: jax.Array,
        ends: jax.Array,
        critic_obs: jax.Array | None = None,
    ) -> tuple[dict[str, jax.Array], Any, jax.Array]:
        carry, dist = self._actor(carry, obs, ends)
        carry, value = self._critic(carry, obs if critic_obs is None else critic_obs, ends)
        return carry, dist, value

    def step(
        self, carry: dict[str, jax.Array], obs: jax.Array, critic_obs: jax.Array | None = None
    ) -> tuple[dict[str, jax.Array], Any, jax.Array]:
        """One step of ``obs [..., O]`` (no reset): ``(carry, dist [...], value [...])``."""
        carry, dist = self._actor(carry, obs, False)
        carry, value = self._critic(carry, obs if critic_obs is None else critic_obs, False)
        return carry, dist, value

    def policy_step(
        self, carry: dict[str, jax.Array], obs: jax.Array
    ) -> tuple[dict[str, jax.Array], Any]:
        """The actor alone for one step: ``(carry, dist [...])`` (the critic's carry is
        passed through unchanged)."""
        return self._actor(carry, obs, False)

    def value_step(
        self, carry: dict[str, jax.Array], obs: jax.Array, critic_obs: jax.Array | None = None
    ) -> jax.Array:
        """``[...]`` value of one step from ``carry`` (the new carry is dropped)."""
        x = obs if critic_obs is None else critic_obs
        return self._critic(carry, x, False)[1]

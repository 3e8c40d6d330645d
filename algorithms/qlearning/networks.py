"""Q-networks of the Q-learning family: a (recurrent) agent network and the mixers.

Dimension letters: ``T`` steps, ``B`` a batch (sequences × agents flattened), ``A``
agents mixed together, ``I`` an agent's input features, ``H`` the GRU size (the
embedding size for a feed-forward network), ``n`` actions, ``S`` global-state features,
``E`` the mixer's embedding size.

* `AgentQNetwork`: MLP torso (optional LayerNorm before each activation, as PQN uses),
  an optional GRU (flax ``GRUCell``'s gates, as `algorithms.common.recurrent.RecurrentCore`:
  the input projection of every step one GEMM before the time scan, a custom backward
  pass), then a linear Q head; one set of parameters shared by every agent of a policy.
  `unroll` runs it over a sequence with the hidden state reset where episodes start;
  `next_q` takes one more step from every hidden state.
* `agent_inputs`: observation, then one-hot last action and one-hot agent index.
* `QMixer`: QMIX's monotonic mixing network (Rashid et al. 2018): hypernetworks of the
  global state give the weights of a two-layer mixer; absolute values keep them
  non-negative, so ``∂Q_tot/∂Q_a ≥ 0``. `vdn_mix`: ``Q_tot = Σ_a Q_a`` (Sunehag et al.
  2018).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp

from algorithms.common.init import orthogonal
from algorithms.common.layers import activation_fn
from algorithms.common.recurrent import RecurrentCore

__all__ = ["AgentQNetwork", "QMixer", "agent_inputs", "next_q", "unroll", "vdn_mix"]


class AgentQNetwork(nn.Module):
    """``(carry [..., H], x [..., I]) -> (carry', q [..., n])`` for one step.

    ``gru_size = 0``: feed-forward (the carry, of any size, passes through unchanged).
    Torso layers: orthogonal init (gain √2), optional LayerNorm, then ``activation``; the
    Q head has orthogonal init with gain 1.
    """

    num_actions: int
    hidden_sizes: Sequence[int] = (64,)
    gru_size: int = 64
    activation: str = "relu"
    layer_norm: bool = False

    def setup(self) -> None:
        init = orthogonal(math.sqrt(2.0))
        self.layers = [nn.Dense(int(h), kernel_init=init) for h in self.hidden_sizes]
        self.norms = [nn.LayerNorm() for _ in self.hidden_sizes] if self.layer_norm else []
        self.core = RecurrentCore("gru", int(self.gru_size)) if self.gru_size > 0 else None
        self.head = nn.Dense(int(self.num_actions), kernel_init=orthogonal(1.0))

    def embed(self, x: jax.Array) -> jax.Array:
        """The torso: ``[..., I] -> [..., hidden_sizes[-1]]``."""
        act = activation_fn(self.activation)
        for i, layer in enumerate(self.layers):
            x = layer(x)
            if self.layer_norm:
                x = self.norms[i](x)
            x = act(x)
        return x

    def recur(self, carry: jax.Array, e: jax.Array) -> jax.Array:
        """One GRU step ``(carry [..., H], e) -> carry'`` (``e`` itself when feed-forward)."""
        if self.core is None:
            return e
        return self.core(carry, e[None])[0]

    def sequence(self, carry: jax.Array, e: jax.Array, ends: jax.Array) -> jax.Array:
        """The GRU over embeddings ``e [T, B, F]`` from ``carry [B, H]``: the hidden state
        after every step ``[T, B, H]``, the carry zeroed after the steps where ``ends [T, B]``."""
        return self.core(carry, e, ends)[1]

    def q(self, h: jax.Array) -> jax.Array:
        """The Q head: ``[..., H] -> [..., n]``."""
        return self.head(h)

    def __call__(self, carry: jax.Array, x: jax.Array) -> tuple[jax.Array, jax.Array]:
        h = self.recur(carry, self.embed(x))
        new_carry = h if self.core is not None else carry
        return new_carry, self.q(h)


def unroll(
    net: AgentQNetwork, params, carry0: jax.Array, x: jax.Array, first: jax.Array
) -> tuple[jax.Array, jax.Array]:
    """``net`` over a sequence: ``carry0 [B, H]``, ``x [T, B, I]``, ``first [T, B]`` bool
    (the observation starts an episode: the hidden state is zeroed before it). Returns
    ``(h [T, B, H'], q [T, B, n])``: the state each step's Q-values were read from
    (``H' = H``; the embedding for a feed-forward network) and the Q-values."""
    e = net.apply(params, x, method="embed")
    if net.gru_size <= 0:
        return e, net.apply(params, e, method="q")

    # zeroing the state before step t where first[t] = zeroing it after step t - 1
    c0 = jnp.where(first[0][:, None], 0.0, carry0)
    ends = jnp.concatenate([first[1:], jnp.zeros_like(first[:1])])
    hs = net.apply(params, c0, e, ends, method="sequence")
    return hs, net.apply(params, hs, method="q")


def next_q(net: AgentQNetwork, params, h: jax.Array, x_next: jax.Array) -> jax.Array:
    """Q-values of each step's next observation, one step on from `unroll`'s state:
    ``h [T, B, H']``, ``x_next [T, B, I] -> [T, B, n]`` (all steps at once)."""
    e = net.apply(params, x_next, method="embed")
    return net.apply(params, net.apply(params, h, e, method="recur"), method="q")


def agent_inputs(
    obs: jax.Array,
    prev_action: jax.Array | None,
    num_actions: int,
    agent_id: bool,
) -> jax.Array:
    """An agent's network input ``[..., A, I]``: its flat observation ``obs [..., A, O]``,
    then (``prev_action [..., A]`` int32 given) the one-hot of its last action (zeros
    for ``-1``: none yet), then (``agent_id``) the one-hot of its index ``0..A-1``."""
    parts = [obs.astype(jnp.float32)]
    if prev_action is not None:
        parts.append(jax.nn.one_hot(prev_action, num_actions, dtype=jnp.float32))
    if agent_id:
        a = obs.shape[-2]
        eye = jnp.broadcast_to(jnp.eye(a, dtype=jnp.float32), (*obs.shape[:-2], a, a))
        parts.append(eye)
    return jnp.concatenate(parts, axis=-1) if len(parts) > 1 else parts[0]


def vdn_mix(q: jax.Array) -> jax.Array:
    """VDN: ``Q_tot = Σ_a Q_a``, ``[..., A] -> [...]``."""
    return jnp.sum(q, axis=-1)


class _HyperNet(nn.Module):
    """``[..., S] -> [..., out]``: Dense, relu, Dense (orthogonal init of gain ``scale``)."""

    hidden: int
    out: int
    scale: float

    @nn.compact
    def __call__(self, s: jax.Array) -> jax.Array:
        init = orthogonal(self.scale)
        s = nn.relu(nn.Dense(self.hidden, kernel_init=init)(s))
        return nn.Dense(self.out, kernel_init=init)(s)


class QMixer(nn.Module):
    """QMIX: ``(q [..., A], state [..., S]) -> Q_tot [...]``.

    ``W1 = |hyper_1(s)| [A, E]``, ``b1 = Dense(s) [E]``, ``W2 = |hyper_2(s)| [E]``,
    ``b2 = hyper_b(s) []`` (its hidden size ``E``); ``Q_tot = elu(q W1 + b1) · W2 + b2``.
    Monotone non-decreasing in every ``q_a`` (non-negative weights, monotone elu).
    """

    embed_dim: int = 32
    hypernet_hidden: int = 64
    init_scale: float = 1.0

    @nn.compact
    def __call__(self, q: jax.Array, state: jax.Array) -> jax.Array:
        lead, a, e = q.shape[:-1], q.shape[-1], int(self.embed_dim)
        q = q.reshape(-1, a)  # [M, A]: one GEMM per layer over every leading index
        state = state.astype(jnp.float32).reshape(q.shape[0], -1)  # [M, S]
        w1 = jnp.abs(_HyperNet(self.hypernet_hidden, a * e, self.init_scale)(state))
        b1 = nn.Dense(e, kernel_init=orthogonal(self.init_scale))(state)
        w2 = jnp.abs(_HyperNet(self.hypernet_hidden, e, self.init_scale)(state))
        b2 = _HyperNet(e, 1, self.init_scale)(state)[:, 0]
        hidden = nn.elu(jnp.sum(q[:, :, None] * w1.reshape(-1, a, e), axis=1) + b1)
        return (jnp.sum(hidden * w2, axis=-1) + b2).reshape(lead)

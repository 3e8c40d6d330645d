"""SAC's actor: an MLP to a tanh-squashed Gaussian with a state-dependent σ.

``SquashedGaussianActor(obs [..., O]) -> TanhGaussian`` over ``[-1, 1]^D``: one dense
head of ``2D`` outputs, the mean and the raw σ (``σ = softplus(raw) + MIN_STD``,
`algorithms.common.distributions.state_log_std`). The critics are
`algorithms.common.off_policy.TwinQNetwork`.

Example:
    >>> import jax, jax.numpy as jnp
    >>> actor = SquashedGaussianActor(action_dim=2, hidden_sizes=(8,))
    >>> params = actor.init(jax.random.key(0), jnp.zeros((3, 4)))
    >>> actor.apply(params, jnp.zeros((3, 4))).mean.shape
    (3, 2)
"""

from __future__ import annotations

from collections.abc import Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp

from algorithms.common.distributions import MIN_STD, TanhGaussian, state_log_std
from algorithms.common.init import orthogonal
from algorithms.common.layers import MLP

__all__ = ["SquashedGaussianActor"]


class SquashedGaussianActor(nn.Module):
    """``[..., O] -> TanhGaussian`` with mean and log-std ``[..., D]``, bounds ``±1``."""

    action_dim: int
    hidden_sizes: Sequence[int] = (256, 256)
    activation: str = "relu"
    min_std: float = MIN_STD

    @nn.compact
    def __call__(self, obs: jax.Array) -> TanhGaussian:
        x = MLP(self.hidden_sizes, self.activation, name="torso")(obs)
        out = nn.Dense(
            2 * self.action_dim,
            kernel_init=orthogonal(0.01),
            bias_init=nn.initializers.zeros,
            name="head",
        )(x)
        mean, raw = jnp.split(out, 2, axis=-1)
        ones = jnp.ones((self.action_dim,), jnp.float32)
        return TanhGaussian(mean, state_log_std(raw, self.min_std), -ones, ones)

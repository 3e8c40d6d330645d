"""``simple_crypto``: Alice tells Bob a colour using a shared key; Eve eavesdrops (mpe2's
``simple_crypto_v3``)."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
from flax import struct

from environments.mpe.base import MPEEnv
from environments.mpe.world import MPEParams, MPEState, Role, fold

__all__ = ["SimpleCrypto", "SimpleCryptoParams"]


@struct.dataclass
class SimpleCryptoParams(MPEParams):
    """`MPEParams` plus the agents' size (nothing moves in this scenario)."""

    agent_size: float = 0.05


@dataclasses.dataclass(frozen=True)
class SimpleCrypto(MPEEnv):
    """Three immovable speakers (``C = 4``): Eve (group ``"eve"``, the adversary), Bob
    (``"bob"``) and Alice (``"alice"``), and two landmarks whose colours are the one-hot
    vectors ``e_0, e_1`` of ``R⁴``. ``state.goal = (goal, key)``: the goal landmark and the
    landmark whose colour is the key.

    Observations: Alice ``[8]``, the goal colour and the key; Bob ``[8]``, the key and
    Alice's utterance; Eve ``[4]``, Alice's utterance. With ``e(c) = |c − e_goal|²`` counted
    only for a non-zero utterance ``c``: Eve gets ``−e(c_eve)``, Alice and Bob
    ``e(c_eve) − e(c_bob)``. Actions: ``Discrete(4)`` / ``Box(0, 1, (4,))``, the word.
    """

    dim_c = 4

    @property
    def roles(self) -> tuple[Role, ...]:
        speak = {"movable": False, "silent": False}
        return (Role("eve", 1, **speak), Role("bob", 1, **speak), Role("alice", 1, **speak))

    @property
    def num_landmarks(self) -> int:
        return 2

    @property
    def goal_ranges(self) -> tuple[int, ...]:
        return (2, 2)

    def obs_size(self, group: str) -> int:
        return 4 if self.role(group).name == "eve" else 8

    @property
    def default_params(self) -> SimpleCryptoParams:
        return SimpleCryptoParams()

    def agent_physics(self, params: SimpleCryptoParams):
        return jnp.full((3,), params.agent_size), jnp.zeros((3,)), None

    def _colour(self, index: jax.Array) -> jax.Array:
        return (jnp.arange(self.dim_c) == index).astype(jnp.float32)

    def rewards(self, state: MPEState, params: SimpleCryptoParams) -> jax.Array:
        target = self._colour(state.goal[0])
        c = state.comm[:2]  # eve, bob
        err = jnp.where(fold("any", c != 0, -1), fold("sum", (c - target) ** 2, -1), 0.0)
        good = err[0] - err[1]
        return jnp.stack([-err[0], good, good])

    def observe(self, state: MPEState, params: SimpleCryptoParams) -> dict[str, jax.Array]:
        key = self._colour(state.goal[1])
        said = state.comm[2]
        return {
            "eve": said[None],
            "bob": jnp.concatenate([key, said])[None],
            "alice": jnp.concatenate([self._colour(state.goal[0]), key])[None],
        }

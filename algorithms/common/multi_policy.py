"""Routing per-group arrays to policies and back (parameter sharing within a policy).

A policy serving groups ``g1, g2`` sees the agents of both concatenated along the
agent axis (``A_p = A_g1 + A_g2``, groups in the env's order). `PolicyMap` does the
concatenation for a whole ``{g: array}`` tree and splits policy outputs back.

Example:
    >>> import jax.numpy as jnp
    >>> pm = PolicyMap({"shared": ("a", "b")}, {"a": 2, "b": 3})
    >>> x = pm.to_policy({"a": jnp.zeros((4, 2)), "b": jnp.ones((4, 3))}, axis=1)
    >>> x["shared"].shape
    (4, 5)
    >>> {g: v.shape for g, v in pm.to_groups(x, axis=1).items()}
    {'a': (4, 2), 'b': (4, 3)}
"""

from __future__ import annotations

from collections.abc import Mapping

import jax
import jax.numpy as jnp

__all__ = ["PolicyMap"]


class PolicyMap:
    """Which groups each policy serves, with their agent counts."""

    def __init__(self, policy_groups: Mapping[str, tuple[str, ...]], counts: Mapping[str, int]):
        self.policy_groups = {p: tuple(gs) for p, gs in policy_groups.items()}
        self.counts = dict(counts)
        self.group_policy = {g: p for p, gs in self.policy_groups.items() for g in gs}

    @property
    def policies(self) -> tuple[str, ...]:
        return tuple(self.policy_groups)

    def num_agents(self, policy: str) -> int:
        """``A_p``: agents served by ``policy``."""
        return sum(self.counts[g] for g in self.policy_groups[policy])

    def to_policy(self, tree: Mapping[str, jax.Array], axis: int) -> dict[str, jax.Array]:
        """``{g: [..., A_g, ...]} -> {p: [..., A_p, ...]}`` concatenating on ``axis``."""
        out = {}
        for p, gs in self.policy_groups.items():
            parts = [tree[g] for g in gs]
            out[p] = parts[0] if len(parts) == 1 else jnp.concatenate(parts, axis=axis)
        return out

    def to_groups(self, tree: Mapping[str, jax.Array], axis: int) -> dict[str, jax.Array]:
        """``{p: [..., A_p, ...]} -> {g: [..., A_g, ...]}`` splitting on ``axis``."""
        out = {}
        for p, gs in self.policy_groups.items():
            x = tree[p]
            start = 0
            for g in gs:
                n = self.counts[g]
                out[g] = jax.lax.slice_in_dim(x, start, start + n, axis=axis)
                start += n
        return {g: out[g] for g in self.counts if g in out}

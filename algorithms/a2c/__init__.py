"""Advantage actor-critic (A2C): one policy-gradient step per rollout batch.

``from algorithms.a2c import make_train``; losses in `algorithms.a2c.losses`.
"""

from algorithms.a2c.train import ALGO_DEFAULTS, POLICY_DEFAULTS, make_train

__all__ = ["ALGO_DEFAULTS", "POLICY_DEFAULTS", "make_train"]

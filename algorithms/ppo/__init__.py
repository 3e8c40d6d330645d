"""Proximal Policy Optimisation (clipped), with a MAPPO centralised-critic option.

``from algorithms.ppo import make_train``; losses in `algorithms.ppo.losses`.
"""

from algorithms.ppo.train import ALGO_DEFAULTS, POLICY_DEFAULTS, make_train

__all__ = ["ALGO_DEFAULTS", "POLICY_DEFAULTS", "make_train"]

"""A2C (synchronous advantage actor-critic), as WarpDrive trains its Tag policies.

Same machinery as PPO (`algorithms.common.on_policy`): one rollout of ``T`` steps of
``N`` envs, then **one** gradient step on the whole batch with the vanilla
policy-gradient loss (no ratio clipping). ``gae_lambda=1`` (the default) gives
advantages ``R_t − V(s_t)`` with bootstrapped discounted returns ``R_t``, as WarpDrive.
"""

from __future__ import annotations

from typing import Any

from algorithms.a2c.losses import a2c_loss
from algorithms.common.config import PPO_ONLY_KEYS
from algorithms.common.on_policy import POLICY_DEFAULTS, make_on_policy_trainer
from jaxdrive.training import Trainer

__all__ = ["ALGO_DEFAULTS", "POLICY_DEFAULTS", "PPO_ONLY_KEYS", "make_train"]

#: ``config.algo`` keys of A2C and their defaults (each may be overridden per policy).
ALGO_DEFAULTS: dict[str, Any] = {
    "gamma": 0.99,
    "gae_lambda": 1.0,
    "vf_coef": 0.5,
    "ent_coef": 0.01,
    "ent_schedule": "constant",
    "ent_coef_final": 0.0,
    "lr_schedule": "constant",
    "max_grad_norm": 0.5,  # 0 or None: no clipping
    "adam_eps": 1e-5,
    "normalize_advantages": False,
    "normalize_obs": False,
    "normalize_rewards": False,
    "reward_scale": 1.0,
    "centralized_critic": False,
}


#: Why the PPO-only keys are refused, in the message naming them.
_PPO_ONLY_HINTS = {
    k: (
        "these are PPO-only (A2C takes one unclipped gradient step per batch); remove "
        "them, e.g. with the ':a2c' preset of the experiment configs"
    )
    for k in PPO_ONLY_KEYS
}


def make_train(config: Any, env: Any = None, env_params: Any = None) -> Trainer:
    """The A2C `Trainer` for ``config`` (``env`` built from ``config`` when ``None``)."""
    return make_on_policy_trainer(
        config,
        env,
        env_params,
        algo_name="a2c",
        algo_defaults=ALGO_DEFAULTS,
        loss_fn=a2c_loss,
        single_step=True,
        hints=_PPO_ONLY_HINTS,
    )

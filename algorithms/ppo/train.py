"""PPO (and MAPPO with ``centralized_critic=True``) as one jitted program.

``make_train(config, env, env_params) -> jaxdrive.training.Trainer``; see
`algorithms.common.on_policy` for the iteration and `ALGO_DEFAULTS` for ``config.algo``.
"""

from __future__ import annotations

from typing import Any

from algorithms.common.on_policy import POLICY_DEFAULTS, make_on_policy_trainer
from algorithms.ppo.losses import ppo_loss
from jaxdrive.training import Trainer

__all__ = ["ALGO_DEFAULTS", "POLICY_DEFAULTS", "make_train"]

#: ``config.algo`` keys of PPO and their defaults (each may be overridden per policy).
ALGO_DEFAULTS: dict[str, Any] = {
    "gamma": 0.99,  # discount
    "gae_lambda": 0.95,  # GAE λ
    "num_epochs": 4,  # passes over the batch per iteration
    "num_minibatches": 4,  # minibatches per pass (must divide T·N·A_p)
    "clip_eps": 0.2,  # ratio clip ε
    "clip_value": True,  # clip the value update around the old values
    "value_clip_eps": 0.2,  # its ε
    "vf_coef": 0.5,  # value-loss coefficient
    "ent_coef": 0.01,  # entropy coefficient (start value with a schedule)
    "ent_schedule": "constant",  # "constant" | "linear" (to ent_coef_final)
    "ent_coef_final": 0.0,
    "lr_schedule": "constant",  # "constant" | "linear" (to 0 over the run)
    "max_grad_norm": 0.5,  # optax.clip_by_global_norm; 0 or None: no clipping
    "adam_eps": 1e-5,
    "normalize_advantages": True,  # per minibatch, over active agents
    "normalize_obs": False,  # running mean/std per policy
    "normalize_rewards": False,  # scale rewards by a running std of discounted returns
    "reward_scale": 1.0,  # rewards multiplied by this in learning (Brax's reward_scaling)
    "centralized_critic": False,  # MAPPO: critic on concat(global_state, own obs)
}


def make_train(config: Any, env: Any = None, env_params: Any = None) -> Trainer:
    """The PPO `Trainer` for ``config`` (``env`` built from ``config`` when ``None``)."""
    return make_on_policy_trainer(
        config,
        env,
        env_params,
        algo_name="ppo",
        algo_defaults=ALGO_DEFAULTS,
        loss_fn=ppo_loss,
    )

"""Pieces shared by the algorithms.

* `algorithms.common.config`: run configs in one place: defaults (`base_config`),
  validation (`resolve_run`, `resolve_policies`, value rules) and conversion
  (`config_to_dict`).
* `algorithms.common.layers`: `MLP`, `PaddedInputDense`, `FusedDense`, `dense_relu`.
* `algorithms.common.distributions`: `Categorical`, `MultiCategorical`, `DiagGaussian`,
  `TanhGaussian`, `log_prob_and_entropy`, `state_log_std`.
* `algorithms.common.networks`: `ActionSpec`, `ActorCritic`, `ValueNetwork`, `QNetwork`,
  `DeterministicActor` (re-exporting the layers and distributions).
* `algorithms.common.gae`: `gae_advantages`, `bootstrap_values`, `discounted_returns`.
* `algorithms.common.normalization`: `RunningMeanStd`.
* `algorithms.common.schedules`: `make_schedule` (``"constant"`` | ``"linear"``).
* `algorithms.common.multi_policy`: `PolicyMap` (groups <-> policies).
* `algorithms.common.on_policy`: the PPO/A2C trainer builder, with its setup
  (`on_policy_setup`), rollout (`on_policy_rollout`) and learning step
  (`on_policy_learn`).
* `algorithms.common.off_policy`: the DDPG/TD3/SAC trainer skeleton (device replay
  buffer, gradient-step scan), `TwinQNetwork`.

Submodules are imported on use (no work at import time).
"""

__all__ = [
    "config",
    "distributions",
    "gae",
    "layers",
    "multi_policy",
    "networks",
    "normalization",
    "off_policy",
    "on_policy",
    "on_policy_learn",
    "on_policy_rollout",
    "on_policy_setup",
    "schedules",
]

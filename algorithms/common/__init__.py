"""Pieces shared by the algorithms.

* `algorithms.common.networks`: `MLP`, `ActorCritic`, `ValueNetwork`, `QNetwork`,
  `DeterministicActor`, `ActionSpec` and the distributions (`Categorical`,
  `MultiCategorical`, `DiagGaussian`, `TanhGaussian`).
* `algorithms.common.gae`: `gae_advantages`, `bootstrap_values`, `discounted_returns`.
* `algorithms.common.normalization`: `RunningMeanStd`.
* `algorithms.common.schedules`: `make_schedule` (``"constant"`` | ``"linear"``).
* `algorithms.common.config`: config checks (`check_top_level`, `resolve_policies`,
  `num_iterations`, `make_env`, `merge_defaults`, `default_run_config`).
* `algorithms.common.multi_policy`: `PolicyMap` (groups <-> policies).
* `algorithms.common.on_policy`: the PPO/A2C trainer builder.

Submodules are imported on use (no work at import time).
"""

__all__ = ["config", "gae", "multi_policy", "networks", "normalization", "on_policy", "schedules"]

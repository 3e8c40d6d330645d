"""Config checking shared by every algorithm: keys, sizes, policies and groups.

A run config (an ``ml_collections.ConfigDict`` or a plain dict) has the top-level keys
`TOP_LEVEL_KEYS`:

``env_name`` (registry name), ``env_kwargs`` (``jaxdrive.make`` overrides),
``algorithm`` (``"ppo" | "a2c" | "ddpg"``), ``seed``, ``num_envs``, ``num_steps``
(rollout length ``T`` per iteration), ``total_env_steps`` (``num_iterations =
total_env_steps // (num_envs·num_steps)``), ``algo`` (the algorithm's hyper-parameters;
each algorithm lists its keys and defaults), ``policies`` (name -> policy config) and
``run`` (the host loop's options; read by ``jaxdrive.loop``, not checked here) and
``num_devices`` (optional, default 1: devices the env batch is sharded over; ``0`` or
``"all"`` for every device; see `jaxdrive.distributed`).

A policy config has the keys `POLICY_DEFAULTS` (``groups`` is required) plus any key of
the algorithm's ``algo`` section, which overrides it for that policy only, e.g.
``policies.runner.ent_coef = 0.1``.

Every function raises ``ValueError`` naming the offending keys/values. Algorithms use
them as::

    check_top_level(config)
    env, env_params = make_env(config)              # when not given one
    n_iter = num_iterations(config)
    algo = merge_defaults(config["algo"], ALGO_DEFAULTS, "config.algo")
    specs = resolve_policies(config, env, ALGO_DEFAULTS)   # {name: PolicySpec}
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from jaxdrive.env import Env
from jaxdrive.spaces import Space
from jaxdrive.training import check_config_keys

__all__ = [
    "COMPUTE_DTYPES",
    "POLICY_DEFAULTS",
    "TOP_LEVEL_KEYS",
    "PolicySpec",
    "as_dict",
    "check_top_level",
    "default_run_config",
    "drop_ppo_only_keys",
    "make_env",
    "merge_defaults",
    "num_iterations",
    "parse_presets",
    "resolve_policies",
]

TOP_LEVEL_KEYS = (
    "env_name",
    "env_kwargs",
    "algorithm",
    "seed",
    "num_envs",
    "num_steps",
    "total_env_steps",
    "algo",
    "policies",
    "run",
    "num_devices",
)

#: Keys of one policy's config and their defaults (``groups`` has none: required).
POLICY_DEFAULTS: dict[str, Any] = {
    "groups": None,  # list of env groups this policy acts for (parameter sharing)
    "lr": 3e-4,  # learning rate (Adam)
    "hidden_sizes": (64, 64),  # MLP layer sizes (actor and critic alike)
    "activation": "tanh",  # one of networks.ACTIVATIONS
    "frozen": False,  # act with this policy but never update it
    "shared_torso": False,  # one MLP for actor and critic (WarpDrive's layout)
    "action_head": "gaussian",  # Box actions: "gaussian" (clipped) or "tanh_gaussian"
    "log_std_init": 0.0,  # initial log-std of the Gaussian heads
    # on-policy trainers: zero-pad flat observations to a multiple of this many features
    # (4 float32 = 16 bytes: aligned GEMMs; parameters and results unchanged, see
    # algorithms.common.on_policy; 1 turns it off)
    "input_pad_multiple": 4,
    # on-policy trainers: dtype of the torsos' activations and hidden GEMMs, "float32" or
    # "bfloat16" (mixed precision: parameters, observations, heads and losses stay float32)
    "compute_dtype": "float32",
    # on-policy trainers: hidden layers after the first. "xla": GEMM, then bias and
    # activation; bfloat16 relu policies only: GEMM + float32 bias + relu before one
    # rounding, in XLA ("fused_xla") or as one Pallas kernel ("pallas", experimental:
    # algorithms.common.pallas_dense); "auto": "fused_xla" where it applies, else "xla"
    # (H200: Tag A2C bfloat16 +7.7%, see experiments/benchmarks/NOTES.md)
    "dense_impl": "auto",
    # on-policy trainers, categorical heads: the learning step's log-prob and entropy
    # (forward and VJP) in XLA or as Pallas kernels ("pallas", experimental:
    # algorithms.common.pallas_categorical)
    "head_impl": "xla",
}

#: Values of a policy's ``compute_dtype``.
COMPUTE_DTYPES = ("float32", "bfloat16")


def as_dict(cfg: Any, where: str = "config") -> dict[str, Any]:
    """A shallow ``dict`` of a ConfigDict/mapping; ``ValueError`` for anything else."""
    if cfg is None:
        return {}
    if hasattr(cfg, "keys") and hasattr(cfg, "__getitem__"):
        return {k: cfg[k] for k in cfg.keys()}
    raise ValueError(f"{where} must be a ConfigDict or a dict, got {type(cfg).__name__}")


def check_top_level(config: Any, allowed: tuple[str, ...] = TOP_LEVEL_KEYS) -> None:
    """Unknown top-level keys and missing required ones raise ``ValueError``."""
    check_config_keys(config, set(allowed), "config")
    required = ("env_name", "algorithm", "num_envs", "num_steps", "total_env_steps", "policies")
    missing = [k for k in required if k not in as_dict(config)]
    if missing:
        raise ValueError(f"config is missing required key(s) {missing}")
    for k in ("num_envs", "num_steps", "total_env_steps"):
        v = config[k]
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"config.{k} must be a positive integer, got {v!r}")


def make_env(config: Any) -> tuple[Env, Any]:
    """``jaxdrive.make(config.env_name, **config.env_kwargs)``."""
    import jaxdrive

    kwargs = as_dict(config["env_kwargs"] if "env_kwargs" in as_dict(config) else None)
    return jaxdrive.make(config["env_name"], **kwargs)


def num_iterations(config: Any) -> int:
    """``total_env_steps // (num_envs·num_steps)``; ``ValueError`` when that is < 1."""
    per_iter = int(config["num_envs"]) * int(config["num_steps"])
    n = int(config["total_env_steps"]) // per_iter
    if n < 1:
        raise ValueError(
            f"total_env_steps={config['total_env_steps']} is less than one iteration of "
            f"num_envs*num_steps={per_iter} env steps"
        )
    return n


def merge_defaults(section: Any, defaults: Mapping[str, Any], where: str) -> dict[str, Any]:
    """``defaults`` updated by ``section``; keys not in ``defaults`` raise ``ValueError``."""
    d = as_dict(section, where)
    check_config_keys(d, set(defaults), where)
    out = dict(defaults)
    out.update(d)
    return out


@dataclasses.dataclass(frozen=True, eq=False)
class PolicySpec:
    """One policy, resolved against the env.

    name: the policy's name; groups: the env groups it serves, in env order;
    num_agents: ``A_p = sum of A_g`` over its groups; obs_space/action_space: those of
    its groups (all equal); hp: the merged hyper-parameters (`POLICY_DEFAULTS`, then the
    algorithm's defaults, then ``config.algo``, then the policy's own overrides).
    """

    name: str
    groups: tuple[str, ...]
    num_agents: int
    obs_space: Space
    action_space: Space
    hp: dict[str, Any]

    @property
    def frozen(self) -> bool:
        return bool(self.hp["frozen"])


def resolve_policies(
    config: Any,
    env: Env,
    algo_defaults: Mapping[str, Any],
    policy_defaults: Mapping[str, Any] = POLICY_DEFAULTS,
) -> dict[str, PolicySpec]:
    """Checks ``config.policies`` against ``env`` and merges hyper-parameters.

    Errors (``ValueError``): no policies; unknown keys in a policy; a missing or empty
    ``groups``; a group the env does not have; a group served by two policies; a group
    served by none; groups of one policy with different observation or action spaces.
    """
    algo = merge_defaults(
        config["algo"] if "algo" in as_dict(config) else None, algo_defaults, "config.algo"
    )
    policies = as_dict(config["policies"], "config.policies")
    if not policies:
        raise ValueError("config.policies is empty: at least one policy is needed")
    allowed = set(policy_defaults) | set(algo_defaults)
    owner: dict[str, str] = {}
    specs: dict[str, PolicySpec] = {}
    for name, pcfg in policies.items():
        where = f"config.policies.{name}"
        p = as_dict(pcfg, where)
        check_config_keys(p, allowed, where)
        groups = p.get("groups")
        if isinstance(groups, str):
            groups = [groups]
        if not groups:
            raise ValueError(
                f"{where}.groups must list at least one of the env groups {list(env.groups)}"
            )
        for g in groups:
            if g not in env.groups:
                raise ValueError(
                    f"{where}.groups names {g!r}, not a group of {env.name} {list(env.groups)}"
                )
            if g in owner:
                raise ValueError(
                    f"group {g!r} is served by two policies: {owner[g]!r} and {name!r}"
                )
            owner[g] = name
        groups = tuple(g for g in env.groups if g in groups)
        obs_space = env.observation_space(groups[0])
        act_space = env.action_space(groups[0])
        for g in groups[1:]:
            if env.observation_space(g) != obs_space or env.action_space(g) != act_space:
                raise ValueError(
                    f"policy {name!r} serves groups {list(groups)} whose spaces differ "
                    f"({g}: obs {env.observation_space(g)}, actions {env.action_space(g)}; "
                    f"{groups[0]}: obs {obs_space}, actions {act_space})"
                )
        hp = dict(policy_defaults)
        hp.update(algo)
        hp.update(p)
        hp["groups"] = groups
        hp["hidden_sizes"] = tuple(int(h) for h in hp["hidden_sizes"])
        specs[name] = PolicySpec(
            name=name,
            groups=groups,
            num_agents=sum(env.num_agents(g) for g in groups),
            obs_space=obs_space,
            action_space=act_space,
            hp=hp,
        )
    uncovered = [g for g in env.groups if g not in owner]
    if uncovered:
        raise ValueError(
            f"group(s) {uncovered} of {env.name} are not served by any policy; "
            "add them to some policy's groups"
        )
    return specs


def default_run_config() -> Any:
    """Host-loop defaults for ``config.run`` (read by ``jaxdrive.loop``)."""
    import ml_collections

    return ml_collections.ConfigDict(
        {
            "iterations_per_chunk": 10,  # iterations compiled into one scan per host call
            "checkpoint_every_chunks": 10,
            "keep_checkpoints": 3,
            "eval_every_chunks": 0,  # 0: no separate evaluation episodes
            "eval_num_envs": 16,
            "eval_deterministic": True,
            "animate": None,  # write animation.gif of the final policy (None: if renderable)
            "animation_steps": 200,
        }
    )


#: PPO ``algo`` keys that A2C has no use for (it takes one unclipped step per batch).
PPO_ONLY_KEYS = ("num_epochs", "num_minibatches", "clip_eps", "clip_value", "value_clip_eps")


def parse_presets(preset: str | None, known: tuple[str, ...]) -> list[str]:
    """Splits an experiment config's preset string ``"tiny,a2c"`` into names.

    ``None``/``""`` give ``[]``; a name not in ``known`` raises ``ValueError``.
    """
    names = [p.strip() for p in (preset or "").split(",") if p.strip()]
    unknown = [p for p in names if p not in known]
    if unknown:
        raise ValueError(f"unknown config preset(s) {unknown}; known: {list(known)}")
    return names


def drop_ppo_only_keys(config: Any) -> Any:
    """Turns a PPO config into an A2C one in place: ``algorithm="a2c"`` and the
    `PPO_ONLY_KEYS` removed from ``algo`` and from every policy. Returns ``config``."""
    config.algorithm = "a2c"
    sections = [config.algo, *[config.policies[n] for n in config.policies.keys()]]
    for sec in sections:
        for k in PPO_ONLY_KEYS:
            if k in sec:
                del sec[k]
    return config

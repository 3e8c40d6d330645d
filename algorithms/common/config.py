"""Run configs: their defaults, validation and conversion, in one place.

A run config (an ``ml_collections.ConfigDict`` or a plain dict) has the top-level keys
`TOP_LEVEL_KEYS`:

``env_name`` (registry name), ``env_kwargs`` (``jaxdrive.make`` overrides),
``algorithm`` (``"ppo" | "a2c" | "ddpg"``), ``seed``, ``num_envs``, ``num_steps``
(rollout length ``T`` per iteration), ``total_env_steps`` (``num_iterations =
total_env_steps // (num_envs·num_steps)``), ``algo`` (the algorithm's hyper-parameters:
its package's ``ALGO_DEFAULTS``), ``policies`` (name -> policy config), ``run`` (the host
loop's options, `RUN_DEFAULTS`; read by the run scripts, not checked here) and
``num_devices`` (devices the env batch is sharded over; ``0`` or ``"all"`` for every
device; see `jaxdrive.distributed`) and ``partitioner`` (how a sharded trainer is split
over them: ``"shard_map"``, per-device code with explicit collectives, or ``"auto"``,
the one-device program partitioned by XLA; see `algorithms.common.on_policy`).

A policy config has the keys of its algorithm's policy defaults (`POLICY_DEFAULTS` for
PPO and A2C; ``groups`` is required) plus any key of the ``algo`` section, which
overrides it for that policy only, e.g. ``policies.runner.ent_coef = 0.1``.

**Defaults.** `base_config` builds the complete config of an algorithm from the defaults
(`TOP_LEVEL_DEFAULTS`, the algorithm's ``ALGO_DEFAULTS`` and policy defaults,
`RUN_DEFAULTS`); an experiment config starts from it and sets only what differs, so a
changed default reaches every experiment that does not override it.

**Validation.** `resolve_run` is what a trainer calls with the ``config`` it is given: it
checks the keys (`check_top_level`, unknown keys anywhere), builds the env when none is
given, and checks every policy's merged hyper-parameters against the algorithm's value
rules (`ON_POLICY_RULES`, `DDPG_RULES`). It returns a `RunSpec`; the trainer reads that,
not the config. Every check raises ``ValueError`` naming the offending key.

**Conversion.** `config_to_dict` gives the JSON-compatible plain copy written to run
folders and hashed by `jaxdrive.checkpoint.config_hash`.
"""

from __future__ import annotations

import copy
import dataclasses
import importlib
import json
from collections.abc import Mapping, Sequence
from typing import Any

import ml_collections

from algorithms import ALGORITHMS
from algorithms.common.config_rules import (
    COMPUTE_DTYPES,
    DDPG_RULES,
    ON_POLICY_RULES,
    Rule,
    check_values,
    integer,
)
from jaxdrive.env import Env
from jaxdrive.spaces import Space

__all__ = [
    "COMPUTE_DTYPES",
    "DDPG_RULES",
    "ON_POLICY_RULES",
    "PARTITIONERS",
    "POLICY_DEFAULTS",
    "PPO_ONLY_KEYS",
    "RUN_DEFAULTS",
    "TOP_LEVEL_DEFAULTS",
    "TOP_LEVEL_KEYS",
    "PolicySpec",
    "Rule",
    "RunSpec",
    "as_dict",
    "base_config",
    "check_config_keys",
    "check_top_level",
    "check_values",
    "config_to_dict",
    "drop_ppo_only_keys",
    "make_env",
    "merge_defaults",
    "num_iterations",
    "parse_presets",
    "resolve_policies",
    "resolve_run",
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
    "partitioner",
)

#: Defaults of the top-level keys (``env_name`` and ``algorithm`` have none).
TOP_LEVEL_DEFAULTS: dict[str, Any] = {
    "env_kwargs": {},
    "seed": 0,
    "num_envs": 4,
    "num_steps": 128,
    "total_env_steps": 100_000,
    "num_devices": 1,
    "partitioner": "shard_map",
}

#: How a trainer sharded over several devices is partitioned (`RunSpec.partitioner`).
PARTITIONERS = ("shard_map", "auto")

#: Keys of one PPO/A2C policy's config and their defaults (``groups`` has none: required).
POLICY_DEFAULTS: dict[str, Any] = {
    "groups": None,  # list of env groups this policy acts for (parameter sharing)
    "lr": 3e-4,  # learning rate (Adam)
    "hidden_sizes": (64, 64),  # MLP layer sizes (actor and critic alike)
    "activation": "tanh",  # one of algorithms.common.layers.ACTIVATIONS
    "frozen": False,  # act with this policy but never update it
    "shared_torso": False,  # one MLP for actor and critic (WarpDrive's layout)
    "action_head": "gaussian",  # Box actions: "gaussian" (clipped) or "tanh_gaussian"
    "log_std_init": 0.0,  # initial log-std of the Gaussian heads
    # zero-pad flat observations to a multiple of this many features (4 float32 = 16
    # bytes: aligned GEMMs; parameters and results unchanged, see
    # algorithms.common.on_policy; 1 turns it off)
    "input_pad_multiple": 4,
    # dtype of the torsos' activations and hidden GEMMs, "float32" or "bfloat16" (mixed
    # precision: parameters, observations, heads and losses stay float32)
    "compute_dtype": "float32",
}

#: Host-loop defaults of ``config.run`` (an algorithm may change some: its RUN_DEFAULTS).
RUN_DEFAULTS: dict[str, Any] = {
    "iterations_per_chunk": 10,  # iterations compiled into one scan per host call
    "checkpoint_every_chunks": 10,
    "keep_checkpoints": 3,
    "eval_every_chunks": 0,  # 0: no separate evaluation episodes
    "eval_num_envs": 16,
    "eval_deterministic": True,
    "animate": None,  # write animation.gif of the final policy (None: if renderable)
    "animation_steps": 200,
}

#: PPO ``algo`` keys that A2C has no use for (it takes one unclipped step per batch).
PPO_ONLY_KEYS = ("num_epochs", "num_minibatches", "clip_eps", "clip_value", "value_clip_eps")


# ----------------------------------------------------------------------------------------
# Conversion and keys
# ----------------------------------------------------------------------------------------
def config_to_dict(config: Any) -> Any:
    """A JSON-compatible plain copy of ``config`` (ConfigDict, dict, dataclass or scalar).

    Tuples become lists and non-JSON leaves their ``str``, as ``json.dumps`` would need.
    """
    if config is None:
        return None
    if hasattr(config, "to_dict"):
        config = config.to_dict()
    return json.loads(json.dumps(config, sort_keys=True, default=str))


def as_dict(cfg: Any, where: str = "config") -> dict[str, Any]:
    """A shallow ``dict`` of a ConfigDict/mapping; ``ValueError`` for anything else."""
    if cfg is None:
        return {}
    if hasattr(cfg, "keys") and hasattr(cfg, "__getitem__"):
        return {k: cfg[k] for k in cfg.keys()}
    raise ValueError(f"{where} must be a ConfigDict or a dict, got {type(cfg).__name__}")


def check_config_keys(
    config: Any,
    allowed: set[str] | Sequence[str],
    where: str,
    hints: Mapping[str, str] | None = None,
) -> None:
    """Raises ``ValueError`` naming the keys of ``config`` not in ``allowed``; ``hints``
    maps known-foreign keys to an explanation added to the message."""
    keys = set(config.keys()) if hasattr(config, "keys") else set()
    unknown = sorted(keys - set(allowed))
    if not unknown:
        return
    hinted = sorted({hints[k] for k in unknown if hints and k in hints})
    if hinted:
        raise ValueError(f"unknown config key(s) {unknown} in {where}: {' '.join(hinted)}")
    raise ValueError(f"unknown config key(s) {unknown} in {where}; allowed: {sorted(allowed)}")


def check_top_level(config: Any, allowed: tuple[str, ...] = TOP_LEVEL_KEYS) -> None:
    """Unknown top-level keys and missing required ones raise ``ValueError``."""
    check_config_keys(config, set(allowed), "config")
    required = ("env_name", "algorithm", "num_envs", "num_steps", "total_env_steps", "policies")
    missing = [k for k in required if k not in as_dict(config)]
    if missing:
        raise ValueError(f"config is missing required key(s) {missing}")
    for k in ("num_envs", "num_steps", "total_env_steps"):
        integer(1)(config[k], f"config.{k}")
    partitioner = as_dict(config).get("partitioner", TOP_LEVEL_DEFAULTS["partitioner"])
    if partitioner not in PARTITIONERS:
        raise ValueError(f"config.partitioner must be one of {PARTITIONERS}, got {partitioner!r}")
    if "seed" in as_dict(config):
        seed = integer(None)(config["seed"], "config.seed")
        if not -(2**63) <= seed < 2**63:  # what a PRNG key is made from
            raise ValueError(f"config.seed must fit in 64 bits, got {seed}")


def merge_defaults(
    section: Any,
    defaults: Mapping[str, Any],
    where: str,
    hints: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """``defaults`` updated by ``section``; keys not in ``defaults`` raise ``ValueError``."""
    d = as_dict(section, where)
    check_config_keys(d, set(defaults), where, hints)
    out = dict(defaults)
    out.update(d)
    return out


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


def make_env(config: Any) -> tuple[Env, Any]:
    """``jaxdrive.make(config.env_name, **config.env_kwargs)``."""
    import jaxdrive

    kwargs = as_dict(config["env_kwargs"] if "env_kwargs" in as_dict(config) else None)
    return jaxdrive.make(config["env_name"], **kwargs)


# ----------------------------------------------------------------------------------------
# Policies and runs
# ----------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True, eq=False)
class PolicySpec:
    """One policy, resolved against the env.

    name: the policy's name; groups: the env groups it serves, in env order;
    num_agents: ``A_p = sum of A_g`` over its groups; obs_space/action_space: those of
    its groups (all equal); hp: the merged and checked hyper-parameters (the policy
    defaults, then the algorithm's defaults, then ``config.algo``, then the policy's own
    overrides).
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


def _policy_groups(env: Env, name: str, groups: Any, owner: dict[str, str]) -> tuple[str, ...]:
    """The groups of policy ``name`` in env order; records them in ``owner``."""
    where = f"config.policies.{name}"
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
            raise ValueError(f"group {g!r} is served by two policies: {owner[g]!r} and {name!r}")
        owner[g] = name
    groups = tuple(g for g in env.groups if g in groups)
    obs_space, act_space = env.observation_space(groups[0]), env.action_space(groups[0])
    for g in groups[1:]:
        if env.observation_space(g) != obs_space or env.action_space(g) != act_space:
            raise ValueError(
                f"policy {name!r} serves groups {list(groups)} whose spaces differ "
                f"({g}: obs {env.observation_space(g)}, actions {env.action_space(g)}; "
                f"{groups[0]}: obs {obs_space}, actions {act_space})"
            )
    return groups


def resolve_policies(
    config: Any,
    env: Env,
    algo_defaults: Mapping[str, Any],
    policy_defaults: Mapping[str, Any] = POLICY_DEFAULTS,
    rules: Mapping[str, Rule] | None = None,
    hints: Mapping[str, str] | None = None,
) -> dict[str, PolicySpec]:
    """Checks ``config.policies`` against ``env`` and merges hyper-parameters.

    Errors (``ValueError``): no policies; unknown keys in a policy; a missing or empty
    ``groups``; a group the env does not have; a group served by two policies; a group
    served by none; groups of one policy with different observation or action spaces; a
    value breaking its rule in ``rules``.
    """
    algo_section = config["algo"] if "algo" in as_dict(config) else None
    algo = merge_defaults(algo_section, algo_defaults, "config.algo", hints)
    policies = as_dict(config["policies"], "config.policies")
    if not policies:
        raise ValueError("config.policies is empty: at least one policy is needed")
    allowed = set(policy_defaults) | set(algo_defaults)
    owner: dict[str, str] = {}
    specs: dict[str, PolicySpec] = {}
    for name, pcfg in policies.items():
        where = f"config.policies.{name}"
        p = as_dict(pcfg, where)
        check_config_keys(p, allowed, where, hints)
        groups = _policy_groups(env, name, p.get("groups"), owner)
        hp = {**policy_defaults, **algo, **p, "groups": groups}
        names = {k: f"{where}.{k}" if k in p or k not in algo else f"config.algo.{k}" for k in hp}
        hp = check_values(hp, rules or {}, names)
        specs[name] = PolicySpec(
            name=name,
            groups=groups,
            num_agents=sum(env.num_agents(g) for g in groups),
            obs_space=env.observation_space(groups[0]),
            action_space=env.action_space(groups[0]),
            hp=hp,
        )
    uncovered = [g for g in env.groups if g not in owner]
    if uncovered:
        raise ValueError(
            f"group(s) {uncovered} of {env.name} are not served by any policy; "
            "add them to some policy's groups"
        )
    return specs


@dataclasses.dataclass(frozen=True, eq=False)
class RunSpec:
    """A checked run config, resolved against its env: what a trainer builds from.

    num_envs ``N``, num_steps ``T``, num_iterations ``total_env_steps // (N·T)``,
    num_devices the resolved device count ``D`` (``N`` divisible by it), policies the
    `PolicySpec` of every policy by name, in config order, partitioner how ``D > 1``
    devices split the trainer (`PARTITIONERS`).
    """

    env: Env
    env_params: Any
    num_envs: int
    num_steps: int
    num_iterations: int
    num_devices: int
    policies: dict[str, PolicySpec]
    partitioner: str = TOP_LEVEL_DEFAULTS["partitioner"]


def resolve_run(
    config: Any,
    env: Env | None,
    env_params: Any,
    *,
    algorithm: str,
    algo_defaults: Mapping[str, Any],
    policy_defaults: Mapping[str, Any] = POLICY_DEFAULTS,
    rules: Mapping[str, Rule] = ON_POLICY_RULES,
    hints: Mapping[str, str] | None = None,
) -> RunSpec:
    """Checks ``config`` for the trainer of ``algorithm`` and resolves it against ``env``
    (``jaxdrive.make(config.env_name, **config.env_kwargs)`` when ``None``; its default
    params when ``env_params`` is ``None``). ``hints``: explanations for keys that belong
    to another algorithm. Raises ``ValueError`` naming the offending key."""
    from jaxdrive.distributed import resolve_num_devices

    check_top_level(config)
    if config["algorithm"] != algorithm:
        raise ValueError(
            f"config.algorithm is {config['algorithm']!r} but this is the {algorithm!r} "
            "trainer; use algorithms.make_train to dispatch"
        )
    n_iter = num_iterations(config)
    num_envs, num_steps = int(config["num_envs"]), int(config["num_steps"])
    if env is None:
        env, made_params = make_env(config)
        env_params = made_params if env_params is None else env_params
    if env_params is None:
        env_params = env.default_params
    n_dev = resolve_num_devices(as_dict(config).get("num_devices", 1), num_envs)
    specs = resolve_policies(config, env, algo_defaults, policy_defaults, rules, hints)
    if "run" in as_dict(config) and config["run"] is not None:
        as_dict(config["run"], "config.run")
    partitioner = str(as_dict(config).get("partitioner", TOP_LEVEL_DEFAULTS["partitioner"]))
    return RunSpec(env, env_params, num_envs, num_steps, n_iter, n_dev, specs, partitioner)


# ----------------------------------------------------------------------------------------
# Building configs
# ----------------------------------------------------------------------------------------
def base_config(
    algorithm: str, env_name: str, policies: Mapping[str, Sequence[str]] | None = None
) -> ml_collections.ConfigDict:
    """The complete default config of ``algorithm`` on ``env_name``.

    ``policies``: policy name -> the env groups it serves (default ``{"agent":
    ["agent"]}``, the group of single-agent envs); each policy gets the algorithm's
    policy defaults. Every value comes from the defaults (`TOP_LEVEL_DEFAULTS`, the
    algorithm's ``ALGO_DEFAULTS``, its ``POLICY_DEFAULTS`` or `POLICY_DEFAULTS`,
    `RUN_DEFAULTS` updated by its ``RUN_DEFAULTS``), read when called.

    Example:
        >>> c = base_config("ppo", "CartPole-v1")
        >>> c.algo.clip_eps, c.policies.agent.hidden_sizes, c.run.iterations_per_chunk
        (0.2, (64, 64), 10)
    """
    if algorithm not in ALGORITHMS:
        raise ValueError(f"unknown algorithm {algorithm!r}; known: {sorted(ALGORITHMS)}")
    module = importlib.import_module(ALGORITHMS[algorithm])
    policy_defaults = getattr(module, "POLICY_DEFAULTS", POLICY_DEFAULTS)
    c = ml_collections.ConfigDict()
    c.env_name = env_name
    c.algorithm = algorithm
    for k, v in TOP_LEVEL_DEFAULTS.items():
        c[k] = ml_collections.ConfigDict(v) if isinstance(v, dict) else copy.deepcopy(v)
    c.algo = ml_collections.ConfigDict(dict(module.ALGO_DEFAULTS))
    groups_of = {"agent": ["agent"]} if policies is None else policies
    c.policies = ml_collections.ConfigDict(
        {name: {**policy_defaults, "groups": list(gs)} for name, gs in groups_of.items()}
    )
    c.run = ml_collections.ConfigDict({**RUN_DEFAULTS, **getattr(module, "RUN_DEFAULTS", {})})
    return c


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
    `PPO_ONLY_KEYS` removed from ``algo`` and from every policy; the other values (the
    experiment's hyper-parameters) stay. Returns ``config``."""
    config.algorithm = "a2c"
    sections = [config.algo, *[config.policies[n] for n in config.policies.keys()]]
    for sec in sections:
        for k in PPO_ONLY_KEYS:
            if k in sec:
                del sec[k]
    return config

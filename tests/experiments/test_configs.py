"""Experiment configs are the algorithm's base config plus their differences.

* Every config × preset gives exactly the effective values it gave before configs were
  rewritten as base + difference (fingerprints of the values recorded then).
* A default changed in the base reaches every config that does not set that key, and
  each config (default preset) sets exactly the keys listed in `SET_KEYS`.
"""

from __future__ import annotations

import hashlib
import importlib
import json
from typing import Any

import pytest

import algorithms.ddpg.train as ddpg_train
import algorithms.ppo.train as ppo_train
from algorithms.a2c import train as a2c_train
from algorithms.common import config as cfg
from algorithms.common.on_policy import AGENT_ID_DEFAULTS
from algorithms.common.recurrent import RECURRENT_POLICY_DEFAULTS

#: ``(config module, preset)``s checked, every preset alone and common combinations.
COMBOS = {
    "acrobot": ("", "tiny", "a2c", "tiny,a2c"),
    "cartpole": ("", "tiny", "a2c", "tiny,a2c", "gru", "tiny,gru"),
    "mountain_car": ("", "tiny", "a2c", "tiny,a2c"),
    "mountain_car_continuous": ("", "tiny"),
    "pendulum": ("", "tiny"),
    "tag_continuous": (
        *("", "tiny", "cpu", "a2c", "mappo", "full_obs", "advnorm"),
        *("tiny,a2c", "cpu,a2c", "a2c,mappo", "tiny,advnorm", "cpu,full_obs"),
        *("gru", "tiny,gru", "a2c,gru"),
    ),
    "tag_gridworld": (
        *("", "tiny", "a2c", "mappo", "two_policies"),
        *("tiny,a2c", "tiny,two_policies", "a2c,mappo", "two_policies,a2c"),
    ),
}

#: sha256 (first 16 hex digits) of `effective` of each combination, recorded from the
#: configs as they were before the base + difference rewrite, each of which restated
#: every key. (Tag's env_kwargs then also named the implementation choices ``impl``,
#: ``full_obs_impl``, ``knn_obs_impl`` and ``step_impl``, all ``"auto"``, which the env's
#: ``backend="auto"`` default replaces: left out of the record.)
FINGERPRINTS = {
    "acrobot:": "ac6b2683fb8071c5",
    "acrobot:a2c": "081a0f736a663fad",
    "acrobot:tiny": "088f725726d081a6",
    "acrobot:tiny,a2c": "fd9c25a9ff9c9c88",
    "cartpole:": "951eb75ff9110460",
    "cartpole:a2c": "a14fde6c70d753e8",
    "cartpole:tiny": "df6e0edced628292",
    "cartpole:tiny,a2c": "a890bca8dbd128a3",
    "cartpole:gru": "69fb328ae156c29e",
    "cartpole:tiny,gru": "3552e8c1048cc14d",
    "mountain_car:": "f531d50f2d46e175",
    "mountain_car:a2c": "86a384500dd1895b",
    "mountain_car:tiny": "74bbcf482158befd",
    "mountain_car:tiny,a2c": "33cf0fefc849ff58",
    "mountain_car_continuous:": "45db34adecd3bbd1",
    "mountain_car_continuous:tiny": "9a6fa7d5ff507ddd",
    "pendulum:": "9c2aa076a99ac417",
    "pendulum:tiny": "0fd6d7c73712e4b1",
    "tag_continuous:": "8c1e8231591bab5c",
    "tag_continuous:a2c": "5f933d390d3a5054",
    "tag_continuous:a2c,mappo": "f602e647954a41a4",
    "tag_continuous:advnorm": "30dd3c08733d8b10",
    "tag_continuous:cpu": "e588aa077e826756",
    "tag_continuous:cpu,a2c": "811e7a9e48c5daec",
    "tag_continuous:cpu,full_obs": "b0304bf8e1bbe56d",
    "tag_continuous:full_obs": "898d2eaff8218492",
    "tag_continuous:mappo": "1b0e6416d98fee02",
    "tag_continuous:tiny": "9153bb89e483a44d",
    "tag_continuous:tiny,a2c": "e0318f7938c03713",
    "tag_continuous:tiny,advnorm": "21a457eda7af0401",
    "tag_continuous:gru": "065fda075cc84e43",
    "tag_continuous:tiny,gru": "a1da9c0c9a379ddf",
    "tag_continuous:a2c,gru": "b5280325d2d24dc0",
    "tag_gridworld:": "85e9bf334ea78d66",
    "tag_gridworld:a2c": "82959b0734e1e0de",
    "tag_gridworld:a2c,mappo": "3f07e27df5af6efd",
    "tag_gridworld:mappo": "db03298302396d2d",
    "tag_gridworld:tiny": "f77acf184b690fd8",
    "tag_gridworld:tiny,a2c": "8f4b99876acd2d4c",
    "tag_gridworld:tiny,two_policies": "5d55b0db48999b34",
    "tag_gridworld:two_policies": "f17453906e5ad133",
    "tag_gridworld:two_policies,a2c": "75971ce41e75efba",
}

#: The keys each config's default preset sets itself (besides ``env_name``,
#: ``algorithm``, ``env_kwargs``, the policies' ``groups`` and ``run.animate``, whose
#: default ``None`` the test leaves alone); every other key follows the defaults.
SET_KEYS = {
    "acrobot": {
        *("num_envs", "num_steps", "total_env_steps", "algo.gae_lambda", "algo.num_minibatches"),
        *("algo.clip_value", "algo.ent_coef", "algo.lr_schedule", "algo.normalize_obs"),
        "policies.agent.lr",
    },
    "cartpole": {
        "num_envs",
        "num_steps",
        "total_env_steps",
        "algo.lr_schedule",
        "policies.agent.lr",
    },
    "mountain_car": {
        *("num_envs", "num_steps", "total_env_steps", "algo.gae_lambda", "algo.clip_value"),
        *("algo.ent_coef", "algo.normalize_obs", "algo.normalize_rewards"),
    },
    "mountain_car_continuous": {
        *("num_envs", "num_steps", "total_env_steps", "algo.buffer_size", "algo.noise"),
        *("algo.updates_per_iteration", "algo.noise_scale", "algo.ou_sigma"),
        "policies.agent.actor_lr",
    },
    "pendulum": {
        *("num_envs", "num_steps", "algo.learning_starts", "algo.updates_per_iteration"),
    },
    "tag_continuous": {
        *("seed", "num_envs", "num_steps", "total_env_steps", "algo.gamma", "algo.vf_coef"),
        *("algo.ent_coef", "algo.normalize_advantages"),
        *(f"policies.{p}.{k}" for p in ("tagger", "runner") for k in ("lr", "activation")),
        *("policies.tagger.hidden_sizes", "policies.runner.hidden_sizes"),
    },
    "tag_gridworld": {
        *("seed", "num_envs", "num_steps", "total_env_steps", "algo.gamma", "algo.vf_coef"),
        *("algo.ent_coef", "algo.max_grad_norm", "algo.normalize_advantages"),
        *(f"policies.shared.{k}" for k in ("lr", "activation", "hidden_sizes")),
    },
}

_TOP = ("env_name", "algorithm", "seed", "num_envs", "num_steps", "total_env_steps")


def get_config(name: str, preset: str) -> Any:
    return importlib.import_module(f"experiments.configs.{name}").get_config(preset)


def effective(c: Any) -> dict[str, Any]:
    """Every value a run of ``c`` uses, flat (``"policies.tagger.lr"``): the config over
    the algorithm's defaults, each policy's over ``algo`` over the policy defaults."""
    d = cfg.config_to_dict(c)
    groups = {n: p["groups"] for n, p in d["policies"].items()}
    base = cfg.config_to_dict(cfg.base_config(d["algorithm"], d["env_name"], groups))
    out = {k: d.get(k, base.get(k)) for k in (*_TOP, "num_devices")}
    out.update({f"env_kwargs.{k}": v for k, v in (d.get("env_kwargs") or {}).items()})
    algo = {**base["algo"], **d["algo"]}
    out.update({f"algo.{k}": v for k, v in algo.items()})
    for n, p in d["policies"].items():
        hp = {**base["policies"][n], **algo, **p}
        out.update({f"policies.{n}.{k}": v for k, v in hp.items()})
    out.update({f"run.{k}": v for k, v in {**base["run"], **d["run"]}.items()})
    # policy keys added after the record, at their defaults, change no run: left out
    later = {**RECURRENT_POLICY_DEFAULTS, **AGENT_ID_DEFAULTS, "reward_scale": 1.0}
    name = {k: k.rsplit(".", 1)[-1] for k in out}
    same = lambda a, b: json.dumps(a) == json.dumps(b)  # a tuple default, a list value
    return {k: v for k, v in out.items() if name[k] not in later or not same(later[name[k]], v)}


def _fingerprint(values: dict[str, Any]) -> str:
    text = json.dumps(values, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


ALL = [(n, p) for n, presets in COMBOS.items() for p in presets]


def test_combos_cover_every_preset():
    for name, presets in COMBOS.items():
        mod = importlib.import_module(f"experiments.configs.{name}")
        assert set(mod.PRESETS) <= {q for p in presets for q in p.split(",") if q}, name


@pytest.mark.parametrize(("name", "preset"), ALL)
def test_effective_values_unchanged(name, preset):
    values = effective(get_config(name, preset))
    assert _fingerprint(values) == FINGERPRINTS[f"{name}:{preset}"], values


# ----------------------------------------------------------------------------------------
# defaults reach the experiments
def _sentinel(key: str, value: Any, which: int) -> Any:
    """A value of ``value``'s type that no experiment uses, one per ``which`` (0 or 1)."""
    if isinstance(value, bool):
        return bool(which)
    if isinstance(value, int):
        return 1000 + which
    if isinstance(value, float):
        return 0.123 + which
    if isinstance(value, str):
        return f"{key}-{which}"
    if isinstance(value, tuple):
        return (7 + which,)
    return None  # not patched (None, dicts)


_DEFAULT_DICTS = (
    cfg.TOP_LEVEL_DEFAULTS,
    cfg.POLICY_DEFAULTS,
    cfg.RUN_DEFAULTS,
    ppo_train.ALGO_DEFAULTS,
    a2c_train.ALGO_DEFAULTS,
    ddpg_train.ALGO_DEFAULTS,
    ddpg_train.POLICY_DEFAULTS,
    ddpg_train.RUN_DEFAULTS,
    RECURRENT_POLICY_DEFAULTS,
    AGENT_ID_DEFAULTS,
)


def _flat_with_defaults(monkeypatch, name: str, preset: str, which: int):
    """``(flat config, {flat key: the sentinel its default was set to})`` with every
    default replaced by its sentinel ``which``."""
    sentinels: dict[str, Any] = {}
    with monkeypatch.context() as m:
        for defaults in _DEFAULT_DICTS:
            for k, v in list(defaults.items()):
                s = _sentinel(k, v, which)
                if s is not None:
                    m.setitem(defaults, k, s)
                    sentinels[k] = s
        d = cfg.config_to_dict(get_config(name, preset))
    flat = {k: d[k] for k in (*_TOP, "num_devices")}
    for section in ("algo", "run"):
        flat.update({f"{section}.{k}": v for k, v in d[section].items()})
    for n, p in d["policies"].items():
        flat.update({f"policies.{n}.{k}": v for k, v in p.items() if k != "groups"})
    expect = {k: sentinels.get(k.rsplit(".", 1)[-1]) for k in flat}
    flat = {k: v for k, v in flat.items() if expect[k] is not None}  # e.g. run.animate
    return flat, cfg.config_to_dict({k: v for k, v in expect.items() if v is not None})


@pytest.mark.parametrize(("name", "preset"), ALL)
def test_a_changed_default_reaches_the_experiment(monkeypatch, name, preset):
    """With the defaults set to sentinels A, then B, every key either carries A then B
    (it follows the defaults) or the same value both times (the experiment sets it);
    for the default preset the set keys are exactly `SET_KEYS`."""
    flat_a, sent_a = _flat_with_defaults(monkeypatch, name, preset, 0)
    flat_b, sent_b = _flat_with_defaults(monkeypatch, name, preset, 1)
    assert flat_a.keys() == flat_b.keys()
    follows = {k for k in flat_a if flat_a[k] == sent_a[k] and flat_b[k] == sent_b[k]}
    set_keys = {k for k in flat_a if flat_a[k] == flat_b[k]}
    mixed = set(flat_a) - follows - set_keys
    assert not mixed, {k: (flat_a[k], flat_b[k]) for k in mixed}
    if preset == "":
        assert set_keys == SET_KEYS[name]


def test_base_config_is_complete_and_checked():
    """`base_config` holds every default key and builds a trainer as it is; an unknown
    algorithm is refused by name."""
    c = cfg.base_config("ppo", "CartPole-v1")
    assert set(c.keys()) == set(cfg.TOP_LEVEL_KEYS)
    assert dict(c.algo) == ppo_train.ALGO_DEFAULTS
    assert {k: v for k, v in c.policies.agent.items() if k != "groups"} == {
        k: v for k, v in ppo_train.POLICY_DEFAULTS.items() if k != "groups"
    }
    assert c.run.to_dict() == cfg.RUN_DEFAULTS
    assert cfg.base_config("ddpg", "Pendulum-v1").run.iterations_per_chunk == 100
    with pytest.raises(ValueError, match="unknown algorithm 'sarsa'"):
        cfg.base_config("sarsa", "CartPole-v1")


def test_config_to_dict_is_plain_json():
    c = cfg.base_config("ppo", "CartPole-v1")
    d = cfg.config_to_dict(c)
    assert d["policies"]["agent"]["hidden_sizes"] == [64, 64]
    assert json.loads(json.dumps(d)) == d
    assert cfg.config_to_dict(None) is None
    assert cfg.config_to_dict({"a": (1, 2), "b": object}) == {"a": [1, 2], "b": str(object)}


def test_smax_population_is_three_independent_seeds():
    """``population.py:smax,…``: the SMAX config's settings as three members with no
    selection and no varied hyper-parameters (seeds in one program, with a run folder);
    the map and ``mava`` presets pass through, and only to the smax task."""
    from experiments.configs import population, smax

    c = population.get_config("smax,27m_vs_30m,mava")
    want = smax.get_config("27m_vs_30m,mava")
    assert c.env_name == want.env_name == "jaxmarl:smax:27m_vs_30m"
    assert c.policies.to_dict() == want.policies.to_dict()
    assert (c.population.size, c.population.mode, dict(c.population.hparams)) == (3, "none", {})
    assert c.population.score == "win_rate"
    with pytest.raises(ValueError, match="apply to the smax task only"):
        population.get_config("cartpole,mava")

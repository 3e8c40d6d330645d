"""SMAX learning measurements: the JaxMARL adapter's ``extras["won"]`` equals JaxMARL's
own won-episode flag (``SMAXLogWrapper``'s ``returned_won_episode``) from the same
injected states, actions and keys; the trainers turn it into ``win_rate``; the SMAX rows
of ``--suite=marl_learning`` give finite records at tiny sizes."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxdrive
from jaxdrive.adapters.jaxmarl_env import JaxMARLState

_B = 256  # injected states
FAST = {"xla_backend_optimization_level": 0}


def _injected_states(env, key):
    """``_B`` reset states of ``env`` (a ``HeuristicEnemySMAX``) with random units killed
    or left at a sliver of health, and clocks near the time limit: battles end in every
    way (won, lost, drawn, timed out) within one step."""
    k_reset, k_dead, k_low, k_step = jax.random.split(key, 4)
    _, inner = jax.vmap(env.reset)(jax.random.split(k_reset, _B))
    s = inner.state
    n_units = s.unit_alive.shape[1]
    # per state, a kill probability from {0, 0.5, 1} for each team, so whole teams die
    p_team = jax.random.choice(k_dead, jnp.array([0.0, 0.5, 1.0]), (_B, 2))
    team = (jnp.arange(n_units) >= env.num_allies).astype(jnp.int32)
    p = p_team[:, team]  # [B, U]
    dead = jax.random.uniform(jax.random.fold_in(k_dead, 1), (_B, n_units)) < p
    low = jax.random.uniform(k_low, (_B, n_units)) < 0.5
    health = jnp.where(low, 1e-3, s.unit_health)
    health = jnp.where(dead, 0.0, health)
    step = jax.random.randint(k_step, (_B,), env.max_steps - 3, env.max_steps + 1)
    s = s.replace(unit_alive=~dead, unit_health=health, step=step)
    return inner.replace(state=s)


def test_won_flag_equals_jaxmarl_smax_log_wrapper():
    from jaxmarl.wrappers.baselines import SMAXLogEnvState, SMAXLogWrapper

    adapted, _ = jaxdrive.make("jaxmarl:smax:3m")
    env = adapted.env
    log_env = SMAXLogWrapper(env)
    A = len(env.agents)
    key = jax.random.PRNGKey(3)
    inner = jax.jit(_injected_states, static_argnums=0, compiler_options=FAST)(env, key)
    k_act, k_step = jax.random.split(jax.random.fold_in(key, 7))
    n_actions = env.action_space(env.agents[0]).n
    acts = jax.random.randint(k_act, (_B, A), 0, n_actions)
    keys = jax.random.split(k_step, _B)

    def theirs(k, inner, a):
        z = jnp.zeros((A,))
        log_state = SMAXLogEnvState(inner, z, z, z, z, z, z)
        actions = {ag: a[i] for i, ag in enumerate(env.agents)}
        _, _, _, dones, info = log_env.step(k, log_state, actions)
        return dones["__all__"], info["returned_won_episode"][0] > 0

    def ours(k, inner, a):
        state = JaxMARLState(inner=inner, ended=jnp.zeros((A,), bool), t=inner.state.step)
        _, ts = adapted.step(k, state, {"ally": a}, adapted.default_params)
        return ts.done, ts.extras["won"]

    @functools.partial(jax.jit, compiler_options=FAST)
    def both(keys, inner, acts):
        return jax.vmap(theirs)(keys, inner, acts), jax.vmap(ours)(keys, inner, acts)

    (done_t, won_t), (done_o, won_o) = jax.device_get(both(keys, inner, acts))
    np.testing.assert_array_equal(done_o, done_t)
    np.testing.assert_array_equal(won_o, won_t & done_t)
    # every outcome occurs: won, ended without a win, still running
    assert won_o.sum() >= 10 and (done_o & ~won_o).sum() >= 10 and (~done_o).sum() >= 10


def test_won_flag_after_reset_is_false():
    env, params = jaxdrive.make("jaxmarl:smax:3m")
    _, ts = env.reset(jax.random.PRNGKey(0), params)
    assert ts.extras["won"].dtype == jnp.bool_ and not bool(ts.extras["won"])


def test_windowed_rate_weights_episodes():
    from experiments.benchmarks.smax_learning import windowed_rate

    value = np.array([[1.0, 0.0, 0.5, 0.0]])  # per-iteration rates
    done = np.array([[2.0, 0.0, 2.0, 4.0]])  # episodes ended per iteration
    w = windowed_rate(value, done, 2)
    np.testing.assert_allclose(w, [[1.0, 1.0, 0.5, 1.0 / 6.0]])
    assert np.isnan(windowed_rate(value, np.zeros_like(done), 3)).all()


def test_qlearning_episode_metrics_win_rate():
    from algorithms.qlearning.agents import episode_metrics

    done = jnp.array([[True, False], [True, True]])  # [T, N]
    won = jnp.array([[True, True], [False, True]])  # only ended episodes count
    ret = {"ally": jnp.ones((2, 2, 3))}
    no = jnp.zeros((), bool)
    m, last, seen = episode_metrics(("ally",), done, ret, {"ally": jnp.zeros(())}, no, won)
    np.testing.assert_allclose(m["win_rate"], 2.0 / 3.0)
    assert bool(seen) and float(m["episode_return/ally"]) == 1.0 == float(last["ally"])
    m, last, seen = episode_metrics(("ally",), done & False, ret, {"ally": jnp.zeros(())}, no, won)
    assert float(m["win_rate"]) == 0.0  # no episode ended
    # no episode yet: NaN in the metrics, the state stays finite (the loop checks it)
    assert np.isnan(m["episode_return/ally"]) and float(last["ally"]) == 0.0 and not bool(seen)
    assert "win_rate" not in episode_metrics(("ally",), done, ret, {"ally": 0.0}, no)[0]


def test_smax_suite_row_is_finite_at_tiny_size(tmp_path):
    """A feed-forward MAPPO row of ``--suite=marl_learning`` at the config's ``tiny``
    size (12-step battles), 2 vmapped seeds: the trainer's ``win_rate`` becomes finite
    win rates in [0, 1], a curve and times; the record names the device and is on disk
    (the run's `RecordSink`) as soon as the run ends."""
    from experiments.benchmarks.run import RecordSink
    from experiments.benchmarks.smax_learning import marl_learning_records

    sink = RecordSink(str(tmp_path / "out.jsonl"))
    (r,) = marl_learning_records(("mappo_ff_2s3z",), 1, 0, smax_seeds=2, tiny=True, sink=sink)
    assert sink.unwritten([r]) == [] and (tmp_path / "out.jsonl").read_text().count("\n") == 1
    assert r["device"] and r["jax"] and r["date"]
    assert r["name"] == "mappo_ff_2s3z" and r["core"] == "mlp" and r["completed"]
    assert r["num_seeds"] == 2 and r["episodes"] > 0 and r["wall_s_incl_compile"] > 0
    rates = r["final_win_rates"]
    assert len(rates) == 2 and all(x is not None and 0.0 <= x <= 1.0 for x in rates)
    greedy = r["greedy_win_rates"]  # each seed's final policy, deterministic episodes
    assert r["eval_episodes"] == 8 and len(greedy) == 2
    assert all(x is not None and x in {k / 8 for k in range(9)} for x in greedy)
    assert r["curve"] and r["curve"][-1]["env_steps"] == r["total_env_steps"]
    assert r["target_win_rate"] == 0.9 and r["reached"] in (True, False)
    with pytest.raises(ValueError, match="unknown run"):
        marl_learning_records(("mappo_nope",), 1, 0, smax_seeds=1)


def test_smax_map_and_feed_forward_presets():
    from experiments.configs import smax

    c = smax.get_config("2s3z,ff")
    assert c.env_name == "jaxmarl:smax:2s3z" and c.total_env_steps == 10_000_000
    assert c.policies.ally.core == "mlp" and tuple(c.policies.ally.hidden_sizes) == (128, 128)
    assert tuple(smax.get_config("ff,tiny").policies.ally.hidden_sizes) == (16, 16)
    with pytest.raises(ValueError, match="pick different maps"):
        smax.get_config("2s3z,3s5z")

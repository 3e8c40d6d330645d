"""Bad input to the core is refused with a message naming the field or group:
`jaxdrive.make` validates params as `Env.make_params` does, an integer action outside
the space's dtype is refused before the cast (not wrapped), and `check_env` failures
name the check and the group/field."""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxdrive
from jaxdrive import MultiDiscrete
from jaxdrive.env import check_actions
from jaxdrive.testing import EnvCheckError, assert_trees_equal, check_env
from tests.toy_envs import Counter


# ------------------------------------------------------------------------ make's params
@pytest.mark.parametrize("name", jaxdrive.registered_envs())
def test_make_defaults_pass_validation(name):
    """Every registered env's defaults pass its own `make_params` (as `make` builds them)."""
    env, params = jaxdrive.make(name)
    assert params == env.make_params()


@pytest.mark.parametrize(
    "name, override, match",
    [
        ("Pendulum-v1", {"g": math.nan}, r"PendulumParams\.g must be finite, got nan"),
        ("CartPole-v1", {"gravity": math.inf}, r"CartPoleParams\.gravity must be finite"),
        ("Pendulum-v1", {"g": "abc"}, r"PendulumParams\.g must be a real number, got 'abc'"),
        ("tag_gridworld", {"wall_hit_penalty": math.nan}, r"wall_hit_penalty must be finite"),
        ("tag_gridworld", {"grid_length": math.nan}, r"grid_length must be an integer"),
        ("tag_continuous", {"grid_length": math.nan}, r"grid_length must be finite"),
        ("tag_continuous", {"tagging_distance": 5.0}, r"tagging_distance"),
    ],
)
def test_make_refuses_invalid_params(name, override, match):
    """`make` applies the validation `env.make_params` does; before, ``params.replace``
    took a NaN gravity and the jitted env returned NaN observations silently."""
    with pytest.raises(ValueError, match=match):
        jaxdrive.make(name, **override)


def test_make_params_of_a_registered_toy_env():
    jaxdrive.register("toy-counter-params", Counter, overwrite=True)
    _, params = jaxdrive.make("toy-counter-params", step_reward=np.float32(2.5))
    assert params.step_reward == 2.5
    with pytest.raises(ValueError, match=r"Counter: CounterParams\.step_reward must be finite"):
        jaxdrive.make("toy-counter-params", step_reward=math.nan)
    with pytest.raises(ValueError, match=r"unknown CounterParams field\(s\) \['nope'\]"):
        Counter().make_params(nope=1.0)
    traced = jax.jit(lambda r: Counter().check_params(Counter().default_params.replace(
        step_reward=r)).step_reward)(jnp.float32(math.nan))  # fmt: skip
    assert math.isnan(float(traced))  # traced values pass as is (no host sync)


# ------------------------------------------------------------------------------ actions
@dataclasses.dataclass(frozen=True)
class _MultiCounter(Counter):
    def action_space(self, group):
        return MultiDiscrete([2, 3])


@pytest.mark.parametrize("dtype", [np.int64, np.uint64])
def test_integer_actions_outside_the_dtype_are_refused(dtype):
    """2**32 + 1 as int64 wrapped to 1 when cast to int32 and was accepted; it is refused
    in an eager call, naming the group (both for a Discrete and a MultiDiscrete space)."""
    env = Counter()
    state, _ = env.reset(jax.random.key(0))
    good = env.sample_actions(jax.random.key(1))
    huge = np.asarray([2**32 + 1, 0], dtype)
    with pytest.raises(ValueError, match=r"actions\['red'\] has values outside Discrete\(3\)"):
        env.step(jax.random.key(2), state, {**good, "red": huge})
    ok = check_actions(env, {**good, "red": np.asarray([2, 0], dtype)})  # in range: cast
    assert ok["red"].dtype == jnp.int32 and ok["red"].tolist() == [2, 0]

    multi = _MultiCounter()
    acts = {g: np.zeros((multi.num_agents(g), 2), dtype) for g in multi.groups}
    acts["blue"][1, 1] = 2**32 + 2  # wraps to 2, a valid value of the second component
    with pytest.raises(ValueError, match=r"actions\['blue'\] has values outside MultiDiscrete"):
        check_actions(multi, acts)
    with pytest.raises(ValueError, match=r"actions\['red'\] has values outside"):
        check_actions(env, {**good, "red": np.asarray([-(2**40), 0])})


def test_float_actions_outside_float32_are_refused():
    env, params = jaxdrive.make("Pendulum-v1")
    state, _ = env.reset(jax.random.key(0), params)
    with pytest.raises(ValueError, match=r"actions\['agent'\] has values outside Box"):
        env.step(jax.random.key(1), state, np.asarray([[1e300]]), params)


def test_traced_actions_are_not_value_checked():
    """Under jit the values are unknown: only structure, shape and dtype are checked."""
    env = Counter()
    state, _ = env.reset(jax.random.key(0))
    acts = {"red": jnp.asarray([7, 0]), "blue": jnp.zeros((3,), jnp.int32)}
    with pytest.raises(ValueError, match="outside"):
        env.step(jax.random.key(1), state, acts)
    state2, _ = jax.jit(env.step)(jax.random.key(1), state, acts)
    assert state2.pos.shape == state.pos.shape


# ----------------------------------------------------------------------------- check_env
@dataclasses.dataclass(frozen=True)
class _WrongStepObs(Counter):
    """Step returns one observation column too many for the "blue" group."""

    def step_env(self, key, state, actions, params):
        state, ts = super().step_env(key, state, actions, params)
        obs = dict(ts.obs, blue=jnp.pad(ts.obs["blue"], ((0, 0), (0, 1))))
        return state, ts.replace(obs=obs)


@dataclasses.dataclass(frozen=True)
class _OffByOneObservations(Counter):
    """`observations(state)` disagrees with the ``ts.obs`` of reset and step."""

    def observations(self, state, params):
        return {g: o + 1.0 for g, o in self._obs(state).items()}


def test_check_env_failures_name_the_check_and_the_group():
    want = (
        r"^check_env\(_WrongStepObs\): step: obs\['blue'\] has shape \(3, 3\), "
        r"expected \(3, 2\) from observation_space\('blue'\)$"
    )
    with pytest.raises(EnvCheckError, match=want):
        check_env(_WrongStepObs(), num_steps=4, num_envs=2)
    want = (
        r"^check_env\(_OffByOneObservations\): observations\(state\) after reset: "
        r"leaf \['blue'\]: 6 of 6 values differ, first at index \(0, 0\)"
    )
    with pytest.raises(AssertionError, match=want):  # EnvCheckError is an AssertionError
        check_env(_OffByOneObservations(), num_steps=4, num_envs=2)


def test_assert_trees_equal_names_the_leaf():
    a = {"x": np.zeros(3), "y": np.asarray([1.0, np.nan])}
    assert_trees_equal(a, {"x": np.zeros(3), "y": np.asarray([1.0, np.nan])})  # NaN == NaN
    with pytest.raises(EnvCheckError, match=r"^t: leaf \['x'\]: 1 of 3 values differ, first "
                       r"at index \(2,\): 0\.0 vs 5\.0$"):  # fmt: skip
        assert_trees_equal(a, {"x": np.asarray([0.0, 0.0, 5.0]), "y": a["y"]}, "t")
    with pytest.raises(EnvCheckError, match=r"leaf \['x'\]: float64\[3\] vs float32\[3\]"):
        assert_trees_equal(a, {"x": np.zeros(3, np.float32), "y": a["y"]}, "t")

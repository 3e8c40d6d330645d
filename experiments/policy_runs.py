"""Running trained policies outside training: evaluation episodes and animations.

`evaluate_policy` plays episodes of a trainer's policies in parallel on the device (one
jitted scan, compiled once per trainer and setting) and, with ``animation``, animates the
first of them from the same rollout with the env package's renderer (`find_renderer`,
`animate_states`); `render_rollout` is that for one episode. `compile_evaluation`
compiles such a program ahead of time, in a worker thread (the run scripts start it
with training). Recurrent policies carry their state (``trainer.init_carry``). The run
scripts use these through `experiments.common`.
"""

from __future__ import annotations

import importlib
import inspect
import os
import time
from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from absl import logging

__all__ = [
    "animate_states",
    "compile_evaluation",
    "evaluate_policy",
    "find_renderer",
    "has_renderer",
    "render_rollout",
]


def _policy(trainer: Any, deterministic: bool):
    """``(params_by_policy, key, obs, action_mask=None) -> actions`` from ``trainer.act``,
    deterministic and masked (`jaxdrive.TimeStep.action_mask`) where it supports them."""
    if trainer.act is None:
        raise ValueError("this trainer has no `act`: it cannot be evaluated or animated")
    try:
        params = inspect.signature(trainer.act).parameters
    except (TypeError, ValueError):
        params = {}

    def policy(params_by_policy, key, obs, action_mask=None, carry=None):
        kw = {"deterministic": deterministic} if "deterministic" in params else {}
        if carry is not None:  # recurrent policies: returns (actions, carry)
            kw["carry"] = carry
        if action_mask is not None:
            if "action_mask" not in params:
                raise ValueError("this env gives action masks, which this trainer's act ignores")
            kw["action_mask"] = action_mask
        return trainer.act(params_by_policy, key, obs, **kw)

    return policy


#: The evaluation programs of the last few (trainer, env, episodes, deterministic,
#: max_steps, recorded steps): repeated evaluations reuse one compiled program
#: (parameters are arguments).
_EVAL_PROGRAMS: dict[tuple, tuple[Any, Any, _Program]] = {}
_EVAL_PROGRAMS_KEPT = 4


def _one_device(tree: Any) -> Any:
    """``tree`` with its leaves on one device: arrays split or replicated over several
    (a multi-device trainer's parameters) moved to the first local device, shardings dropped
    from `jax.ShapeDtypeStruct`s, so that evaluations compile and run one program."""

    def one(x: Any) -> Any:
        if isinstance(x, jax.ShapeDtypeStruct):
            return jax.ShapeDtypeStruct(x.shape, x.dtype)
        if isinstance(x, jax.Array) and len(x.sharding.device_set) > 1 and x.is_fully_addressable:
            return jax.device_put(x, jax.local_devices()[0])
        return x

    return jax.tree.map(one, tree)


class _Program:
    """A jitted program that may be compiled ahead of time (`start`): calls use that
    executable when the arguments fit it, else the jitted function."""

    def __init__(self, jitted: Any):
        self.jitted = jitted
        self._job: Any = None
        self._exe: Any = None
        self._keep: tuple | None = None  # (store, key, args, outputs) to store once built

    def start(self, *args: Any, store: Any = None, key: str = "", outputs: Any = None) -> None:
        """Lowers for ``args`` (arrays or `jax.ShapeDtypeStruct`s) and starts compiling;
        with a `jaxdrive.program_store.ProgramStore` ``store``, loads the executable kept
        under ``key`` instead (results structured as ``outputs``), or keeps the one built."""
        from jaxdrive.aot import compile_async

        if self._job is not None or self._exe is not None:
            return
        args = _one_device(args)
        if store is not None:
            t0 = time.perf_counter()
            self._exe = store.load_executable(key, args, lambda meta: outputs)
            if self._exe is not None:
                logging.info(
                    "evaluation program loaded from the program store in %.1f s",
                    time.perf_counter() - t0,
                )
                return
        self._job = compile_async(self.jitted, *args)
        if store is not None:
            self._keep = (store, key, args, outputs)

    def __call__(self, *args: Any) -> Any:
        from jaxdrive.aot import matches

        args = _one_device(args)
        if self._job is not None:
            self._exe, info = self._job.result()
            self._job = None
            logging.info("evaluation program %s", info.text())
            if self._keep is not None:
                store, key, lowered_args, outputs = self._keep
                store.save_executable(
                    key,
                    self._exe,
                    lowered_args,
                    outputs,
                    {},
                    from_jax_cache=info.from_cache == "yes",
                )
        if self._exe is not None and matches(self._exe, args):
            return self._exe(*args)
        return self.jitted(*args)


def _eval_program(
    env: Any, trainer: Any, episodes: int, deterministic: bool, max_steps: int, record: int
) -> _Program:
    """The program ``run(params_by_policy, env_params, key) -> (returns {g: [E]}, length
    [E], alive [E], won [E] | None, states, dones)`` of `evaluate_policy`, built once per
    setting (``won``: whether the episode ended won, for envs whose ``extras`` say so):
    ``states`` are the first episode's states ``[record + 1, ...]`` (reset, then after
    each step) and ``dones`` its ``done`` flags ``[record]`` (``None`` when ``record`` is
    0)."""
    import jaxdrive

    key = (id(trainer), id(env), episodes, bool(deterministic), max_steps, record)
    if key in _EVAL_PROGRAMS:  # the entry holds trainer and env: their ids stay theirs
        return _EVAL_PROGRAMS[key][2]
    policy = _policy(trainer, deterministic)
    # Ended envs reset and play on, their rewards masked: stepping a terminal state
    # instead (a fallen MJX humanoid sinking through a floor that only its feet touch)
    # can diverge, and a non-finite state is not guaranteed to stay in its own env.
    venv = jaxdrive.vectorize(env, episodes)
    groups = env.groups

    def first(tree: Any) -> Any:
        return jax.tree.map(lambda x: x[0], tree)

    @jax.jit
    def run(params_by_policy, env_params, key):
        k_reset, k_loop = jax.random.split(key)
        state, ts = venv.reset(k_reset, env_params)
        ret0 = {g: jnp.zeros((episodes, env.num_agents(g)), jnp.float32) for g in groups}
        alive0 = jnp.ones((episodes,), bool)
        # recurrent policies' carries (no resets: only each env's first episode counts)
        init_carry = getattr(trainer, "init_carry", None)
        hc0 = None if init_carry is None else init_carry((episodes,))

        def body(carry, k):
            state, ts, ret, alive, length, hc, won = carry
            k_act, k_env = jax.random.split(k)
            if hc is None:
                actions = policy(params_by_policy, k_act, ts.obs, ts.action_mask)
            else:
                actions, hc = policy(params_by_policy, k_act, ts.obs, ts.action_mask, hc)
            state, ts = venv.step(k_env, state, actions, env_params)
            ret = {g: ret[g] + jnp.where(alive[:, None], ts.reward[g], 0.0) for g in groups}
            length = length + alive.astype(jnp.int32)
            if won is not None:
                won = won | (alive & ts.done & ts.extras["won"])
            alive = alive & ~ts.done
            shown = (first(state), ts.done[0]) if record else None
            return (state, ts, ret, alive, length, hc, won), shown

        state0 = state
        won0 = jnp.zeros((episodes,), bool) if "won" in ts.extras else None
        carry = (state, ts, ret0, alive0, jnp.zeros((episodes,), jnp.int32), hc0, won0)
        (_, _, ret, alive, length, _, won), shown = jax.lax.scan(
            body, carry, jax.random.split(k_loop, max_steps)
        )
        states = dones = None
        if record:
            steps, dones = jax.tree.map(lambda x: x[:record], shown)
            states = jax.tree.map(lambda a, b: jnp.concatenate([a[None], b]), first(state0), steps)
        return {g: ret[g].mean(axis=1) for g in groups}, length, alive, won, states, dones

    program = _Program(run)
    while len(_EVAL_PROGRAMS) >= _EVAL_PROGRAMS_KEPT:
        _EVAL_PROGRAMS.pop(next(iter(_EVAL_PROGRAMS)))
    _EVAL_PROGRAMS[key] = (trainer, env, program)
    return program


#: Fixed: steps animated by default.
_ANIMATION_STEPS = 200


def _settings(
    env: Any, episodes: Any, max_steps: int | None, animation_steps: int | None, animate: bool
) -> tuple[int, int]:
    """``(max_steps, recorded steps)`` of an evaluation, checked."""
    if isinstance(episodes, bool) or not isinstance(episodes, int) or episodes < 1:
        raise ValueError(f"episodes must be an integer >= 1, got {episodes!r}")
    max_steps = int(max_steps if max_steps is not None else env.episode_length or 1000)
    if animation_steps is None:
        animation_steps = _ANIMATION_STEPS if animate else 0
    if isinstance(animation_steps, bool) or int(animation_steps) < 0:
        raise ValueError(f"animation_steps must be an integer >= 0, got {animation_steps!r}")
    return max_steps, min(int(animation_steps), max_steps)


def _raw_key(key: jax.Array) -> jax.Array:
    """``uint32[2]`` key data of a PRNG key (raw or typed)."""
    key = jnp.asarray(key)
    return (
        jax.random.key_data(key) if jax.dtypes.issubdtype(key.dtype, jax.dtypes.prng_key) else key
    )


def compile_evaluation(
    env: Any,
    env_params: Any,
    trainer: Any,
    params_by_policy: Any,
    *,
    episodes: int = 16,
    deterministic: bool = True,
    max_steps: int | None = None,
    animation_steps: int | None = None,
    program_store: Any = None,
    material: Mapping[str, Any] | None = None,
) -> None:
    """Starts compiling, in a worker thread (`jaxdrive.aot`), the program that
    `evaluate_policy` with these settings runs; ``params_by_policy`` may be abstract
    (`jax.ShapeDtypeStruct` leaves, e.g. `jax.eval_shape` of ``trainer.get_params``).
    The run scripts call it as training starts, so that evaluations and the animation
    at the end find their program compiled. With a `jaxdrive.program_store.ProgramStore`
    ``program_store``, the program is loaded from it where the same ``material`` (what
    identifies the env and trainer, e.g. the config's hash) and settings stored it, and
    stored there once built."""
    max_steps, record = _settings(env, episodes, max_steps, animation_steps, False)
    program = _eval_program(env, trainer, episodes, deterministic, max_steps, record)
    key = jax.ShapeDtypeStruct((2,), jnp.uint32)
    if program_store is None:
        program.start(params_by_policy, env_params, key)
        return
    states = dones = None
    state, ts = jax.eval_shape(lambda k: env.reset(k, env_params), key)
    if record:  # the first episode's states: the env state's structure
        states, dones = state, 0
    won = 0 if "won" in ts.extras else None
    outputs = ({g: 0 for g in env.groups}, 0, 0, won, states, dones)
    settings = {"episodes": episodes, "deterministic": bool(deterministic)}
    name = program_store.key(
        {**material, "program": "evaluation", **settings, "max_steps": max_steps, "record": record}
    )
    program.start(params_by_policy, env_params, key, store=program_store, key=name, outputs=outputs)


def evaluate_policy(
    env: Any,
    env_params: Any,
    trainer: Any,
    params_by_policy: Any,
    key: jax.Array,
    *,
    episodes: int = 16,
    deterministic: bool = True,
    max_steps: int | None = None,
    animation: str | os.PathLike | None = None,
    animation_steps: int | None = None,
    fps: float = 10,
) -> dict[str, Any]:
    """Plays ``episodes`` episodes in parallel on the device (one jitted scan, compiled
    once per trainer, env and setting: the parameters are arguments).

    Each of the ``episodes`` envs runs from reset until its first ``done`` (or
    ``max_steps``, default the env's episode length or 1000); rewards after that are
    masked out. The same program records the first episode's states for
    ``animation_steps`` steps (default 200 when ``animation`` is given, else none);
    ``animation`` (a ``.gif`` path) animates them up to that episode's end
    (`animate_states`): one rollout gives the evaluation and the animation. Returns
    ``{"episodes", "deterministic", "max_steps", "unfinished", "nonfinite",
    "episode_length": mean, "returns": {g: {"mean", "std", "min", "max"}}}`` (and
    ``"animation"``, the written path or ``None``, when ``animation`` is given) where an
    episode's return of group ``g`` is the mean over its agents of each agent's summed
    reward; ``unfinished`` counts episodes still running at ``max_steps`` and
    ``nonfinite`` the non-finite returns (over groups). Envs whose time steps' ``extras``
    hold ``"won"`` (SMAX) add ``"win_rate"``: the fraction of episodes that ended won.
    """
    max_steps, record = _settings(env, episodes, max_steps, animation_steps, bool(animation))
    run = _eval_program(env, trainer, episodes, deterministic, max_steps, record)
    rets, length, alive, won, states, dones = jax.device_get(
        run(params_by_policy, env_params, _raw_key(key))
    )
    result = {
        "episodes": episodes,
        "deterministic": bool(deterministic),
        "max_steps": max_steps,
        "unfinished": int(np.sum(alive)),
        "nonfinite": int(sum(np.sum(~np.isfinite(r)) for r in rets.values())),
        "episode_length": float(np.mean(length)),
        "returns": {
            g: {
                "mean": float(np.mean(r)),
                "std": float(np.std(r)),
                "min": float(np.min(r)),
                "max": float(np.max(r)),
            }
            for g, r in rets.items()
        },
    }
    if won is not None:
        result["win_rate"] = float(np.mean(won))
    if animation:
        result["animation"] = animate_states(env, env_params, states, dones, animation, fps=fps)
    return result


# ----- animation --------------------------------------------------------------------------
def _render_module(env: Any) -> str:
    base = getattr(env, "unwrapped", env)
    return type(base).__module__.rsplit(".", 1)[0] + ".render"


def has_renderer(env: Any) -> bool:
    """Whether the env's package has a ``render`` module (nothing is built or drawn)."""
    import importlib.util

    try:
        return importlib.util.find_spec(_render_module(env)) is not None
    except ImportError:
        return False


def find_renderer(env: Any, params: Any = None) -> Any | None:
    """``draw(state) -> uint8 [H, W, 3]`` for one env's states, from the ``render`` module
    of the env's package (``environments/<env>/render.py``): its ``make_renderer(env,
    params)`` (a figure built once for many frames) or else its ``render(env, state,
    params)``; ``None`` when the package has no renderer."""
    try:
        module = importlib.import_module(_render_module(env))
    except ImportError:
        return None
    if hasattr(module, "make_renderer"):
        return module.make_renderer(env, params)
    render = getattr(module, "render", None)
    return None if render is None else (lambda state: render(env, state, params))


def animate_states(
    env: Any,
    env_params: Any,
    states: Any,
    dones: Any,
    path: str | os.PathLike,
    *,
    fps: float = 10,
) -> str | None:
    """Writes the GIF ``path`` of one env's stacked ``states [S + 1, ...]`` (``states[i +
    1]`` after step ``i``) up to the state from which the first step with ``dones [S]``
    set started (host arrays; an auto-resetting batch replaces the terminal state by the
    next episode's start); returns the written path, or ``None`` (with a log line) when
    the env has no renderer or the rendering helpers are missing."""
    draw = find_renderer(env, env_params)
    if draw is None:
        logging.info("no renderer for %s: skipping the animation", type(env).__name__)
        return None
    try:
        from jaxdrive.render import animate
    except ImportError as e:
        logging.info("jaxdrive.render is unavailable (%s): skipping the animation", e)
        return None
    dones = np.asarray(dones)
    # s_0 .. the state the first done step started from (the batch auto-resets: the
    # state after that step is the next episode's start)
    n = int(np.argmax(dones)) + 1 if dones.any() else len(dones) + 1
    frames = [jax.tree.map(lambda x, i=i: x[i], states) for i in range(n)]
    return os.fspath(animate(frames, draw, path, fps=fps))


def render_rollout(
    env: Any,
    env_params: Any,
    trainer: Any,
    params_by_policy: Any,
    key: jax.Array,
    path: str | os.PathLike,
    *,
    num_steps: int = _ANIMATION_STEPS,
    deterministic: bool = True,
    fps: float = 10,
) -> str | None:
    """Animates one episode of the trained policies (at most ``num_steps`` steps) into
    ``path`` (GIF): `evaluate_policy` of one episode with ``animation=path``. Returns
    the written path, or ``None`` (with a log line) when the env has no renderer."""
    if find_renderer(env, env_params) is None:
        logging.info("no renderer for %s: skipping the animation", type(env).__name__)
        return None
    res = evaluate_policy(
        env, env_params, trainer, params_by_policy, key, episodes=1,
        deterministic=deterministic, max_steps=int(num_steps), animation=path,
        animation_steps=int(num_steps), fps=fps,
    )  # fmt: skip
    return res["animation"]

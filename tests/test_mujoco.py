"""MJX locomotion envs against Gymnasium's v5 envs (CPU MuJoCo, float64), on the same
model file (the edited model written to XML for Gymnasium's ``xml_file``).

MJX compiles slowly on a CPU, so only Hopper's full MJX step is compiled here (one
program, vmapped over a few states, shared by the parity, determinism and no-retrace
checks, and by `check_env`). The other envs' v5 semantics (observation layout, reward
terms, health test) are checked without compiling their physics: Gymnasium steps, its
MuJoCo data is put on the device (`mjx.put_data`) and our observation and reward
functions read it. Their full MJX step over 10^4 random transitions is the
``--suite=mujoco_parity`` benchmark.

Tolerances: float32 rounding of float64 values (relative 1e-5) for everything read
from the same data; Hopper's full step agrees to 1e-4 (float32 physics, no contact
chaos in one step from these states).
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
import pytest
from mujoco import mjx

import jaxdrive
from environments.mujoco import locomotion
from environments.mujoco.base import PhysicsData
from environments.mujoco.fusion import fuse_static
from environments.mujoco.model import MJX_PRESETS, MjxModelConfig
from environments.mujoco.reference import compare, gymnasium_env, one_step, random_states
from jaxdrive import testing

NAMES = ["Hopper", "HalfCheetah", "Walker2d", "Ant", "Humanoid"]
OBS_SIZES = {"Hopper": 11, "HalfCheetah": 17, "Walker2d": 17, "Ant": 105, "Humanoid": 348}
NO_CFRC = {"include_contact_cost": False, "include_cfrc_ext_in_observation": False}


@pytest.fixture(scope="module")
def hopper():
    env = locomotion.Hopper(max_episode_steps=3)
    return env, gymnasium_env(env)


def _host_step(env, ref, qpos, qvel, action):
    """Gymnasium's step from ``(qpos, qvel)``; returns its outputs and the MJX data of
    the states before and after (float32 on the device), and its ``cfrc_ext``."""
    mujoco.mj_resetData(ref.model, ref.data)
    ref.set_state(qpos, qvel)
    before = PhysicsData.of(mjx.put_data(ref.model, ref.data))
    out = ref.step(action)
    after = PhysicsData.of(mjx.put_data(ref.model, ref.data))
    return out, before, after, jnp.asarray(ref.data.cfrc_ext, jnp.float32)


@pytest.mark.parametrize(
    "name, options",
    [(n, {}) for n in NAMES] + [("Ant", NO_CFRC), ("Humanoid", NO_CFRC)],
)
def test_v5_semantics_from_gymnasium_data(name, options):
    """Observation, each reward term, the reward and termination computed from
    Gymnasium's own post-step data equal its values (float32 rounding); without the
    contact cost, as Gymnasium's with a zero ``contact_cost_weight``. Gymnasium's data
    is of the file's bodies, so the model here is not fused (the fused bodies' rows:
    `test_fused_static_bodies_observe_the_files_bodies`)."""
    unfused = dataclasses.replace(MJX_PRESETS[name], fuse_static=False)
    env = getattr(locomotion, name)(model=unfused, **options)
    params = env.default_params
    ref = gymnasium_env(env)
    qpos, qvel = random_states(ref, 6, seed=3)
    rng = np.random.default_rng(0)
    size = OBS_SIZES[name] - (6 * (env.mj_model.nbody - 1) if options else 0)
    assert env.obs_size == size == ref.observation_space.shape[0]
    assert env.uses_cfrc_ext == (name in ("Ant", "Humanoid") and not options)
    for i in range(len(qpos)):
        action = rng.uniform(ref.action_space.low, ref.action_space.high)
        (obs, reward, term, _, info), before, after, cfrc = _host_step(
            env, ref, qpos[i], qvel[i], action
        )
        velocity = (env._forward_position(after) - env._forward_position(before)) / env.dt
        healthy = env._healthy(after, params)
        a = jnp.asarray(action, jnp.float32)
        terms = env._terms(velocity, healthy, after, cfrc, a, params)
        ours = np.asarray(env._obs(after, cfrc, params))
        np.testing.assert_allclose(ours, obs, rtol=1e-5, atol=1e-5)
        keys = [k for k in terms if k.startswith("reward_")]
        assert sorted(keys) == sorted(k for k in info if k.startswith("reward_"))
        for k in keys:
            np.testing.assert_allclose(float(terms[k]), info[k], rtol=1e-5, atol=1e-5, err_msg=k)
        np.testing.assert_allclose(sum(float(terms[k]) for k in keys), reward, atol=1e-4)
        assert bool(env._terminated(healthy, params)) == term


def test_hopper_step_matches_gymnasium(hopper):
    """The full MJX step (4 physics steps) from Gymnasium's states, same actions."""
    env, ref = hopper
    qpos, qvel = random_states(ref, 8, seed=1)
    actions = np.random.default_rng(2).uniform(-1, 1, (8, 3))
    out = compare(env, qpos, qvel, actions, ref=ref)
    for k, v in out.items():
        if isinstance(v, np.ndarray):
            assert v.max() < 1e-4, (k, v)
    assert out["terminated_mismatch"] == []


def test_hopper_deterministic_and_traced_once(hopper):
    """The compiled step of `test_hopper_step_matches_gymnasium` (same shapes): the same
    inputs give bitwise the same outputs; new values and params reuse the program."""
    env, ref = hopper
    step = one_step(env)
    qpos, qvel = random_states(ref, 8, seed=2)
    acts = np.random.default_rng(0).uniform(-1, 1, (8, 3)).astype(np.float32)
    args = (jnp.asarray(qpos, jnp.float32), jnp.asarray(qvel, jnp.float32), jnp.asarray(acts))
    params = env.default_params
    a = step(*args, params)
    testing.assert_trees_equal(a, step(*args, params), "two calls with the same inputs")
    step(args[0] + 1e-3, args[1], -args[2], params.replace(ctrl_cost_weight=0.5))
    assert step._cache_size() == 1


@pytest.mark.slow
def test_hopper_check_env():
    """The conformance kit on a Hopper with a 3-step limit (several MJX compiles, which
    round the observation differently under the tests' unoptimised XLA)."""
    env = locomotion.Hopper(max_episode_steps=3)
    report = testing.check_env(env, num_envs=2, num_steps=4, observations_atol=1e-5)
    assert report["steps"] > 0


def test_make_options_and_params():
    env, params = jaxdrive.make("Hopper-v5", ctrl_cost_weight=0.5, healthy_z_range=(0.5, 2.0))
    assert params.ctrl_cost_weight == 0.5 and params.healthy_z_range == (0.5, 2.0)
    assert env.model_config == MJX_PRESETS["Hopper"]
    assert env.obs_size == 11 and env.episode_length == 1000 and env.frame_skip == 4
    env, _ = jaxdrive.make("Humanoid-v5", include_cfrc_ext_in_observation=False, model="gymnasium")
    assert env.obs_size == 348 - 78 and env.model_config == MjxModelConfig()
    assert env.mj_model.opt.solver == mujoco.mjtSolver.mjSOL_NEWTON  # the XML's PGS
    env, _ = jaxdrive.make("Ant-v5", exclude_current_positions_from_observation=False)
    assert env.obs_size == 107
    with pytest.raises(ValueError, match="healthy_z_range"):
        jaxdrive.make("Hopper-v5", healthy_z_range=(2.0, 1.0))
    with pytest.raises(ValueError, match="ctrl_cost_weight"):
        jaxdrive.make("Hopper-v5", ctrl_cost_weight=float("nan"))
    with pytest.raises(ValueError, match="model must be"):
        locomotion.Hopper(model="fast")
    with pytest.raises(ValueError, match="contact_geoms names geoms the model lacks"):
        locomotion.Hopper(model=MjxModelConfig(contact_geoms=("nose",)))
    with pytest.raises(ValueError, match="frame_skip"):
        locomotion.Hopper(frame_skip=0)


def test_mjx_model_edits():
    """The "mjx" preset: only its geoms collide, each only with the floor; solver,
    iterations and integrator as listed; Gymnasium loads the same edited XML."""
    env = locomotion.Humanoid()
    m = env.mj_model
    cfg = MJX_PRESETS["Humanoid"]
    names = [mujoco.mj_id2name(m, mujoco.mjtObj.mjOBJ_GEOM, i) for i in range(m.ngeom)]
    colliding = {n for n, t in zip(names, m.geom_contype, strict=True) if t}
    assert colliding == {"floor", *cfg.contact_geoms}
    assert m.opt.iterations == 1 and m.opt.ls_iterations == 4
    assert m.opt.integrator == mujoco.mjtIntegrator.mjINT_EULER
    assert m.opt.disableflags & mujoco.mjtDisableBit.mjDSBL_EULERDAMP
    ref = gymnasium_env(env)
    np.testing.assert_array_equal(ref.model.geom_contype, m.geom_contype)
    np.testing.assert_array_equal(ref.model.geom_conaffinity, m.geom_conaffinity)
    assert ref.model.opt.iterations == 1
    shipped = locomotion.Humanoid(model="gymnasium").mj_model
    assert shipped.opt.integrator == mujoco.mjtIntegrator.mjINT_RK4
    assert dataclasses.replace(cfg, iterations=3) != cfg  # hashable, comparable configs


@pytest.mark.parametrize("name", ["Humanoid", "Ant"])
def test_fused_static_bodies_observe_the_files_bodies(name):
    """The "mjx" preset's `MjxModelConfig.fuse_static`: MJX steps a model with the
    jointless bodies merged (Humanoid's feet, Ant's leg roots). From the same states,
    with contacts (CPU MuJoCo ``mj_forward`` and ``mj_rnePostConstraint`` on both
    models), the rows rebuilt for the file's bodies (``cinert``, ``cvel``,
    ``cfrc_ext``, frame origins) equal the unfused model's (float32 rounding; 1e-4 of
    the largest for the contact forces); the merged bodies keep the colliding body's
    contact weights; a reset's state (`state_from`) holds every field the rebuild
    reads."""
    env = getattr(locomotion, name)()
    m = env.mj_model
    fused, body_map = fuse_static(m, env.model_xml())
    assert env.mjx_model.nbody == fused.nbody == m.nbody - {"Humanoid": 2, "Ant": 4}[name]
    ref = gymnasium_env(env)
    qpos, qvel = random_states(ref, 24, seed=5)
    d0, d1 = mujoco.MjData(m), mujoco.MjData(fused)
    contacts = 0

    def close(ours, want, rtol=1e-5):
        assert np.abs(np.asarray(ours) - want).max() <= rtol * max(1.0, np.abs(want).max())

    for q, v in zip(qpos, qvel, strict=True):
        for model, d in ((m, d0), (fused, d1)):
            mujoco.mj_resetData(model, d)
            d.qpos[:], d.qvel[:] = q, v
            mujoco.mj_forward(model, d)
            mujoco.mj_rnePostConstraint(model, d)
        contacts += d0.ncon
        data = PhysicsData.of(mjx.put_data(fused, d1))
        close(body_map.cinert(data), d0.cinert)
        close(body_map.cvel(data), d0.cvel)
        # the contact solve (one Newton iteration) amplifies the merged inertia's rounding
        close(body_map.cfrc_ext(jnp.asarray(d1.cfrc_ext, jnp.float32)), d0.cfrc_ext, 1e-4)
        for b in range(m.nbody):
            close(body_map.xpos(data, b), d0.xpos[b])
    assert contacts > 0
    for b in np.flatnonzero(body_map.wrench):
        carrier = body_map.carrier[b]
        np.testing.assert_array_equal(fused.body_invweight0[carrier], m.body_invweight0[b])
    if name == "Ant":  # a reset's state holds what the rebuild reads (one small compile)

        def rows(q, v):
            data = env.state_from(q, v).data
            return env.body_cinert(data), env.body_cvel(data)

        cinert, cvel = jax.jit(rows)(qpos[-1], qvel[-1])
        close(cinert, d0.cinert)
        close(cvel, d0.cvel)


@pytest.mark.parametrize("name", ["Humanoid", "Ant", "Hopper"])
def test_kept_data_is_all_a_step_reads(name):
    """`PhysicsData` holds every field of `mjx.Data` that one physics step (and the
    ``cfrc_ext`` pass after it) reads to compute the kept fields, except those the envs
    leave at `mjx.make_data`'s values (controls, which a step sets, and the applied
    forces; empty fields, such as a model's tendons where it has none, do not count).
    Found by dead-code elimination of the traced step (no compile)."""
    from jax._src.interpreters import partial_eval as pe

    env = getattr(locomotion, name)()
    m = env.mjx_model
    state = jax.eval_shape(env.state_from, env.mj_model.qpos0, jnp.zeros(env.mj_model.nv))
    full = env.mjx_data(state.data)  # shapes only: nothing runs
    paths, tree = jax.tree_util.tree_flatten_with_path(full)
    names = [jax.tree_util.keystr(p) for p, _ in paths]

    def step(*leaves):
        d = mjx.step(m, jax.tree_util.tree_unflatten(tree, leaves))
        return jax.tree.leaves(PhysicsData.of(d)), mjx.rne_postconstraint(m, d)._impl.cfrc_ext

    jaxpr = jax.make_jaxpr(step)(*[x for _, x in paths]).jaxpr
    _, used = pe.dce_jaxpr(jaxpr, [True] * len(jaxpr.outvars))
    sizes = [x.size for _, x in paths]
    read = {n for n, u, size in zip(names, used, sizes, strict=True) if u and size}
    impl = ("cinert", "ten_velocity")
    kept = {f"._impl.{f.name}" if f.name in impl else f".{f.name}"
            for f in dataclasses.fields(PhysicsData)}  # fmt: skip
    assert read - kept <= {".ctrl", ".qfrc_applied", ".xfrc_applied"}
    assert {".qpos", ".qvel", ".qacc_warmstart"} <= read  # the check sees reads


def test_fuse_static_refuses_what_it_cannot_split():
    """Contacts on two bodies merged into one cannot be told apart: a clear error."""
    both = dataclasses.replace(
        MJX_PRESETS["Humanoid"], contact_geoms=("right_shin1", "right_foot", "left_foot")
    )
    with pytest.raises(ValueError, match="cannot be told apart"):
        locomotion.Humanoid(model=both)
    with pytest.raises(ValueError, match="fuse_static must be a bool"):
        MjxModelConfig(fuse_static=1)
    assert locomotion.Hopper(model=MjxModelConfig(fuse_static=True))._cache["body_map"] is None


def test_ant_foot_spheres():
    """Ant's "mjx" model: Brax's four massless foot spheres on the lower legs' tips are
    its only geoms touching the floor; masses and inertias are the shipped model's;
    Gymnasium loads the same model; a bad ``end_spheres`` is named."""
    env = locomotion.Ant()
    m, shipped = env.mj_model, locomotion.Ant(model="gymnasium").mj_model
    geom = {mujoco.mj_id2name(m, mujoco.mjtObj.mjOBJ_GEOM, i): i for i in range(m.ngeom)}
    feet = MJX_PRESETS["Ant"].contact_geoms
    assert {n for n, i in geom.items() if m.geom_contype[i]} == {"floor", *feet}
    for leg in ("left", "right", "third", "fourth"):
        foot, ankle = geom[f"{leg}_foot_geom"], geom[f"{leg}_ankle_geom"]
        assert m.geom_type[foot] == mujoco.mjtGeom.mjGEOM_SPHERE
        assert m.geom_bodyid[foot] == m.geom_bodyid[ankle]
        assert m.geom_size[foot][0] == m.geom_size[ankle][0] == 0.08
        # on the capsule's end away from the knee (the body's origin): its centre ±
        # half its length along its axis
        rot = np.empty(9)
        mujoco.mju_quat2Mat(rot, m.geom_quat[ankle])
        half = m.geom_size[ankle][1] * rot.reshape(3, 3)[:, 2]
        ends = sorted((m.geom_pos[ankle] + sign * half for sign in (1, -1)), key=np.linalg.norm)
        np.testing.assert_allclose(m.geom_pos[foot], ends[1], atol=1e-9)
    for field in ("body_mass", "body_inertia", "body_ipos", "dof_armature"):
        np.testing.assert_array_equal(getattr(m, field), getattr(shipped, field), field)
    ref = gymnasium_env(env)
    assert ref.model.ngeom == m.ngeom == shipped.ngeom + 4
    np.testing.assert_array_equal(ref.model.geom_contype, m.geom_contype)
    with pytest.raises(ValueError, match="not a capsule geom"):
        locomotion.Ant(model=MjxModelConfig(end_spheres=(("torso_geom", "ball"),)))
    with pytest.raises(ValueError, match="name pairs"):
        MjxModelConfig(end_spheres=("left_ankle_geom",))


def _run_with_egl(code: str) -> subprocess.CompletedProcess:
    """``code`` run by a new Python in the repository with ``MUJOCO_GL=egl`` on the CPU;
    asserts it exits 0."""
    env = dict(os.environ, MUJOCO_GL="egl", JAX_PLATFORMS="cpu")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=root, env=env, capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc


def test_render_in_a_subprocess():
    """One frame of a Hopper state with MuJoCo's renderer (EGL) directly and through the
    run folder's hook (`make_renderer`), or a one-line reason why it cannot draw here."""
    code = (
        "import numpy as np, types\n"
        "from environments.mujoco import locomotion, render\n"
        "why = render.unavailable_reason()\n"
        "if why: print('SKIP', why); raise SystemExit(0)\n"
        "env = locomotion.Hopper()\n"
        "m = env.mj_model\n"
        "data = types.SimpleNamespace(qpos=m.qpos0, qvel=np.zeros(m.nv))\n"
        "state = types.SimpleNamespace(data=data)\n"
        "img = render.render(env, state, height=48, width=64)\n"
        "assert img.shape == (48, 64, 3) and img.dtype == np.uint8 and img.std() > 0\n"
        "assert render.make_renderer(env)(state).shape == (240, 320, 3)\n"
        "print('OK')\n"
    )
    proc = _run_with_egl(code)
    if "SKIP" in proc.stdout:
        pytest.skip(proc.stdout.strip().splitlines()[-1])
    assert "OK" in proc.stdout


def test_missing_gl_library_disables_rendering_not_the_envs():
    """``MUJOCO_GL=egl`` where libEGL is not installed (the benchmarks' GPU machine) makes
    ``import mujoco`` itself fail; the envs import it with rendering disabled instead,
    and the run folder's renderer hook says why in one line."""
    code = (
        "import ctypes, os\n"
        "class CDLL(ctypes.CDLL):  # no libEGL here\n"
        "    def __init__(self, name, *a, **k):\n"
        "        if str(name).startswith('libEGL.'): raise OSError(name)\n"
        "        super().__init__(name, *a, **k)\n"
        "ctypes.CDLL = CDLL\n"
        "from environments.mujoco import locomotion, render\n"
        "env = locomotion.Hopper()\n"
        "assert os.environ['MUJOCO_GL'] == 'disable', os.environ['MUJOCO_GL']\n"
        "why = render.unavailable_reason()\n"
        "assert why.startswith('MUJOCO_GL=egl, but libEGL is not installed'), why\n"
        "assert render.make_renderer(env) is None\n"
        "print('OK')\n"
    )
    proc = _run_with_egl(code)
    assert proc.stdout.splitlines()[-1] == "OK"
    assert proc.stderr.count("libEGL is not installed") == 1  # one line, logged once


def test_locomotion_suite_skips_a_long_compile(capsys):
    """`--suite=locomotion` runs an env's measurements in a worker process; a compile
    that runs past the limit is skipped with a line saying so, and a new worker goes
    on with the next measurement (here every compile is over its 0.01 s limit)."""
    from experiments.benchmarks.locomotion import run_locomotion_suite

    records = run_locomotion_suite(
        (2,), 2, 1, envs=("Ant",), compile_limit_s=0.01, impls=("jaxdrive", "brax")
    )
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("Ant")]
    assert records == []
    assert rows[0] == "Ant            2 envs  jaxdrive      compile ran past 0.01 s: skipped"
    assert len(rows) == 2 and "brax" in rows[1] and "skipped" in rows[1]
    with pytest.raises(ValueError, match="locomotion envs must be among"):
        run_locomotion_suite((2,), 2, 1, envs=("Swimmer",))
    with pytest.raises(ValueError, match="locomotion impls must be among"):
        run_locomotion_suite((2,), 2, 1, impls=("gymnasium",))

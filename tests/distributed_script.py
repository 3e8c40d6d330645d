"""Worker for tests/test_distributed.py, run in a subprocess so that XLA_FLAGS can force
several CPU devices before jax starts.

    python tests/distributed_script.py single OUT.json     # 8 CPU devices, one process
    python tests/distributed_script.py multi OUT.json PORT ID   # one of two processes

Writes a JSON dict of results (max differences, errors raised) to OUT.json.
"""

from __future__ import annotations

import json
import os
import sys

MODE = sys.argv[1]
if MODE == "single":
    flags = os.environ.get("XLA_FLAGS", "")  # the test run's compile flags, if any
    os.environ["XLA_FLAGS"] = f"{flags} --xla_force_host_platform_device_count=8".strip()
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import jax  # noqa: E402
import numpy as np  # noqa: E402

import algorithms  # noqa: E402
import jaxdrive  # noqa: E402
from experiments.benchmarks.training import load_config  # noqa: E402

ITERS = 2


def _config(name: str, preset: str, num_devices: int, **over):
    c = load_config(name, preset, **over)
    c.num_devices = num_devices
    c.total_env_steps = c.num_envs * c.num_steps * 2 * ITERS
    return c


def _trainer(c):
    env, ep = jaxdrive.make(c.env_name, **dict(c.env_kwargs))
    return algorithms.make_train(c, env, ep)


def _train(c, iters: int = ITERS):
    tr = _trainer(c)
    rs = jax.jit(tr.init)(jax.random.PRNGKey(3))
    rs, m = jax.jit(lambda r: tr.chunk(r, iters))(rs)
    return tr, rs, m


def _host(tree):
    return jax.tree.map(lambda x: np.asarray(x, np.float64), jax.device_get(tree))


def _max_rel(a, b) -> float:
    """max |a−b| / (|b| + 1e-3) over every leaf (relative, with a floor for tiny values)."""
    errs = jax.tree.map(lambda x, y: float(np.max(np.abs(x - y) / (np.abs(y) + 1e-3))), a, b)
    return max(jax.tree.leaves(errs))


def _error(fn) -> str:
    try:
        fn()
    except ValueError as e:
        return str(e)
    return ""


def single(out: str) -> None:
    res: dict = {"devices": jax.device_count()}
    from jaxdrive.loop import train_loop

    def loop(tr, workdir=None, stop=None):
        on_chunk = None if stop is None else (lambda info: info.end_iteration >= stop)
        return train_loop(
            tr, 5, workdir, iterations_per_chunk=ITERS, progress=False, on_chunk=on_chunk
        )

    # CartPole PPO (4 minibatches, 2 epochs): 1 and 2 devices over 2 chunks (4 devices
    # run below, resumed from the 2-device checkpoint).
    over = {"algo.num_epochs": 2}
    trainers = {d: _trainer(_config("cartpole", "tiny", d, **over)) for d in (1, 2, 4)}
    ref = None
    for d in (1, 2):
        rs, hist = loop(trainers[d])
        got = _host((trainers[d].get_params(rs), hist.metrics))
        if d == 1:
            ref = got
            res["cartpole_ppo_episodes"] = float(np.sum(got[1]["episodes_done"]))
            res["cartpole_ref_params"] = [x.tolist() for x in jax.tree.leaves(got[0])]
        else:
            res[f"cartpole_ppo_D{d}"] = _max_rel(got, ref)
            res[f"cartpole_ppo_D{d}_shards"] = len(rs.timestep.reward["agent"].sharding.device_set)

    # The same 2-device run partitioned by XLA (config.partitioner="auto").
    auto = _config("cartpole", "tiny", 2, partitioner="auto", **over)
    tr_auto = _trainer(auto)
    for name, tr in (("auto", tr_auto), ("shard_map", trainers[2])):  # a manual region?
        text = jax.jit(tr.update).lower(jax.jit(tr.init)(jax.random.PRNGKey(3))).as_text()
        res[f"cartpole_{name}_D2_manual"] = "manual_computation" in text
    rs, hist = loop(tr_auto)
    res["cartpole_ppo_auto_D2"] = _max_rel(_host((tr_auto.get_params(rs), hist.metrics)), ref)
    res["cartpole_ppo_auto_D2_shards"] = len(rs.timestep.reward["agent"].sharding.device_set)

    # Its evaluation runs the program compiled ahead for the parameters' shapes, on one
    # device (the jitted fallback, a second compile, is never called).
    from experiments.common import compile_evaluation, evaluate_policy
    from experiments.policy_runs import _EVAL_PROGRAMS

    env, ep = jaxdrive.make(auto.env_name)
    params = tr_auto.get_params(rs)
    compile_evaluation(env, ep, tr_auto, jax.eval_shape(lambda p: p, params), episodes=4)
    (program,) = [v[2] for v in _EVAL_PROGRAMS.values() if v[0] is tr_auto]
    fallbacks = []
    jitted = program.jitted
    program.jitted = lambda *a: fallbacks.append(1) or jitted(*a)
    ev = evaluate_policy(env, ep, tr_auto, params, jax.random.PRNGKey(5), episodes=4)
    res["eval_D2_fallbacks"] = len(fallbacks)
    res["eval_D2_return"] = ev["returns"]["agent"]["mean"]

    # A one-device program kept in a program store loads back onto one device in this
    # two-device process (a warm start's evaluation program), and one for both devices
    # onto both.
    import tempfile

    from jaxdrive.program_store import ProgramStore

    store = ProgramStore(tempfile.mkdtemp(prefix="jaxdrive-store-"))
    x1 = jax.numpy.arange(4.0)
    x2 = jax.device_put(jax.numpy.arange(4.0), jax.sharding.NamedSharding(
        jax.sharding.Mesh(np.array(jax.devices()[:2]), ("d",)), jax.sharding.PartitionSpec("d")
    ))  # fmt: skip
    for name, x in (("one", x1), ("two", x2)):
        exe = jax.jit(lambda v: v * 2.0).lower(x).compile()
        store.save_executable(name, exe, (x,), x, {}).join()
        loaded = store.load_executable(name, (x,), lambda meta: x)
        try:
            res[f"store_{name}_device"] = float(loaded(x).sum())
        except Exception as e:  # the failure's text, for the test's message
            res[f"store_{name}_device"] = str(e)

    # A population split over 2 devices: members vmapped under shard_map, and the same
    # partitioned by XLA (the member config's partitioner="auto").
    from experiments.configs import population as population_configs

    pops = {}
    for part in ("shard_map", "auto"):
        pc = population_configs.get_config("cartpole,tiny")
        pc.population.num_devices, pc.partitioner = 2, part
        pop = algorithms.make_population_train(pc)
        ps = jax.jit(pop.init)(jax.random.PRNGKey(2))
        chunk = jax.jit(lambda s, pop=pop: pop.chunk(s, 2))
        res[f"population_{part}_manual"] = "manual_computation" in chunk.lower(ps).as_text()
        ps, pm = chunk(ps)
        pops[part] = _host((ps.members.policies, pm))
        res[f"population_{part}_shards"] = len(
            jax.tree.leaves(ps.members.env_state)[0].sharding.device_set
        )
    res["population_auto_D2"] = _max_rel(pops["auto"], pops["shard_map"])

    # Checkpoints: save with D=2 after one chunk, resume copies of it on 1 and 4 devices.
    import shutil

    saved = tempfile.mkdtemp()
    loop(trainers[2], saved, stop=ITERS)
    for d_new in (1, 4):
        wd = os.path.join(tempfile.mkdtemp(), "run")
        shutil.copytree(saved, wd)
        rs_new, hist = loop(trainers[d_new], wd)
        res[f"resume_D2_to_D{d_new}"] = _max_rel(_host(trainers[d_new].get_params(rs_new)), ref[0])
        res[f"resume_D2_to_D{d_new}_from"] = hist.resumed_from

    # Tag A2C with observation and reward normalisation: 1 and 2 devices.
    over = {"algo.normalize_obs": True, "algo.normalize_rewards": True}
    tag = {}
    for d in (1, 2):
        tr, rs, m = _train(_config("tag_continuous", "tiny,a2c", d, **over))
        tag[d] = _host((tr.get_params(rs), m))
    res["tag_a2c_normalized_D2"] = _max_rel(tag[2], tag[1])
    res["tag_obs_norm_count"] = float(tag[1][0]["tagger"]["obs_norm"].count)

    # Recurrent PPO (GRU actor, LSTM critic; 2 minibatches of whole sequences): 1 and 2
    # devices, the carries sharded with the env batch.
    rec = {}
    for d in (1, 2):
        over = {"algo.num_minibatches": 2, "policies.agent.critic_core": "lstm"}
        tr, rs, m = _train(_config("cartpole", "tiny,gru", d, **over))
        rec[d] = _host((tr.get_params(rs), rs.policies["agent"].carry, m))
        res[f"recurrent_D{d}_shards"] = len(rs.policies["agent"].carry["actor"].sharding.device_set)
    res["recurrent_ppo_D2"] = _max_rel(rec[2][:2], rec[1][:2])  # parameters, carries
    # metrics relative to max(|value|, 1): the policy loss of normalised advantages is ~0
    diff = jax.tree.map(
        lambda a, b: float(np.max(np.abs(a - b) / (np.abs(b) + 1))), rec[2][2], rec[1][2]
    )
    res["recurrent_ppo_D2_metrics"] = max(jax.tree.leaves(diff))

    # Bad input.
    res["err_divisible"] = _error(lambda: _trainer(_config("cartpole", "tiny", 3)))
    res["err_too_many"] = _error(lambda: _trainer(_config("cartpole", "tiny", 16)))
    res["err_ddpg"] = _error(lambda: _trainer(_config("pendulum", "tiny", 2)))
    # tiny Tag, 5 steps: 2 taggers × 5 = 10 samples per env (40 in all) in 4 minibatches
    res["err_minibatches"] = _error(
        lambda: _trainer(
            _config("tag_continuous", "tiny", 2, **{"algo.num_minibatches": 4, "num_steps": 5})
        )
    )
    with open(out, "w") as f:
        json.dump(res, f)


def multi(out: str, port: str, pid: str) -> None:
    from jaxdrive import distributed

    distributed.initialize(f"127.0.0.1:{port}", 2, int(pid), timeout_s=60)
    c = _config("cartpole", "tiny", 0, **{"algo.num_epochs": 2})  # all devices: 1 per process
    tr = _trainer(c)
    from jaxdrive.loop import train_loop

    rs, hist = train_loop(tr, 5, None, iterations_per_chunk=ITERS, progress=False)
    params = _host(tr.get_params(rs))  # replicated: readable on every process
    res = {
        "process": jax.process_index(),
        "processes": jax.process_count(),
        "devices": jax.device_count(),
        "params": [x.tolist() for x in jax.tree.leaves(params)],
        "returns": hist.metrics["episode_return/agent"].tolist(),
    }
    with open(out, "w") as f:
        json.dump(res, f)
    jax.distributed.shutdown()


if __name__ == "__main__":
    if MODE == "single":
        single(sys.argv[2])
    else:
        multi(sys.argv[2], sys.argv[3], sys.argv[4])

"""The host training loop (jaxdrive.loop) and metrics writers (jaxdrive.logging), on a toy
trainer: a linear regression fitted with Adam whose runner state holds params, an optax
state, a raw ``uint32[2]`` key and an ``int32`` iteration, like a real trainer's."""

from __future__ import annotations

import json
import os
import struct as pystruct
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import struct

from jaxdrive.checkpoint import Checkpointer
from jaxdrive.logging import MetricsLogger, plot_curves, read_metrics
from jaxdrive.loop import TrainingDivergedError, is_checked_metric, train_loop
from jaxdrive.training import Trainer

BATCH, DIM = 8, 3


@struct.dataclass
class ToyState:
    params: dict[str, jax.Array]  # {"w": [D], "b": []}
    opt_state: Any
    key: jax.Array  # uint32[2]
    iteration: jax.Array  # [] int32


def make_toy(
    num_iterations: int = 10,
    *,
    lr: float = 0.05,
    nan_loss_at: int = -1,
    inf_param_at: int = -1,
    traces: list | None = None,
) -> Trainer:
    """A toy `Trainer`; ``nan_loss_at``/``inf_param_at`` (1-based) inject divergence."""
    tx = optax.adam(lr)
    w_true = jnp.arange(1.0, DIM + 1.0)

    def init(key):
        k1, k2 = jax.random.split(key)
        params = {"w": 0.1 * jax.random.normal(k1, (DIM,)), "b": jnp.zeros(())}
        return ToyState(params, tx.init(params), k2, jnp.zeros((), jnp.int32))

    def update(rs):
        if traces is not None:
            traces.append(1)  # runs once per trace
        key, kx, kn = jax.random.split(rs.key, 3)
        x = jax.random.normal(kx, (BATCH, DIM))
        y = x @ w_true + 0.5 + 0.01 * jax.random.normal(kn, (BATCH,))
        it = rs.iteration + 1

        def loss_fn(p):
            loss = jnp.mean((x @ p["w"] + p["b"] - y) ** 2)
            return loss * jnp.where(it == nan_loss_at, jnp.nan, 1.0)

        loss, grads = jax.value_and_grad(loss_fn)(rs.params)
        updates, opt_state = tx.update(grads, rs.opt_state, rs.params)
        params = optax.apply_updates(rs.params, updates)
        params = {**params, "w": jnp.where(it == inf_param_at, jnp.inf, params["w"])}
        metrics = {
            "loss/total": loss,
            "grad_norm": optax.global_norm(grads),
            "episode_return/agent": -loss,
            "episode_return/other": jnp.where(it % 2 == 0, jnp.nan, 2.0 * loss),
            "env_steps": (it * BATCH).astype(jnp.float32),
        }
        return ToyState(params, opt_state, key, it), metrics

    return Trainer(
        init=init,
        update=update,
        num_iterations=num_iterations,
        env_steps_per_iteration=BATCH,
        config={"lr": lr, "nan": nan_loss_at, "inf": inf_param_at, "run": {"x": 1}},
        get_params=lambda rs: {"agent": rs.params},
    )


def leaves_equal(a, b) -> bool:
    la, lb = jax.tree.leaves(a), jax.tree.leaves(b)
    assert jax.tree.structure(a) == jax.tree.structure(b)
    return all(
        np.asarray(x).dtype == np.asarray(y).dtype and np.array_equal(x, y, equal_nan=True)
        for x, y in zip(la, lb, strict=True)
    )


def read_tb_scalars(tb_dir: str) -> dict[str, list[tuple[int, float]]]:
    """Parses TFRecord-framed TensorBoard event files: ``{tag: [(step, value)]}``."""
    from tensorboardX.proto import event_pb2

    out: dict[str, list[tuple[int, float]]] = {}
    files = [f for f in os.listdir(tb_dir) if "tfevents" in f]
    assert files, f"no event file in {tb_dir}"
    for name in files:
        data = open(os.path.join(tb_dir, name), "rb").read()
        pos = 0
        while pos < len(data):
            (length,) = pystruct.unpack("<Q", data[pos : pos + 8])
            event = event_pb2.Event.FromString(data[pos + 12 : pos + 12 + length])
            pos += 12 + length + 4
            for v in event.summary.value:
                out.setdefault(v.tag, []).append((event.step, v.simple_value))
    return out


# ----------------------------------------------------------------------------------------
def test_chunks_logs_and_checkpoints(tmp_path):
    traces: list = []
    trainer = make_toy(7, traces=traces)
    wd = str(tmp_path / "run")
    calls, ahead = [], []
    state, hist = train_loop(
        trainer, 0, wd, iterations_per_chunk=3, keep_checkpoints=2, progress=False,
        on_chunk=lambda i: calls.append((i.start_iteration, i.end_iteration)),
        compile_ahead=ahead.append,
    )  # fmt: skip
    # one iteration first (the first line comes right after compiling), then the rest
    # of that chunk, whole chunks and the remainder: one program, traced and compiled once
    assert calls == [(0, 1), (1, 3), (3, 6), (6, 7)] and len(traces) == 1
    assert len(ahead) == 1 and jax.tree.structure(ahead[0]) == jax.tree.structure(state)
    assert all(
        isinstance(a, jax.ShapeDtypeStruct) and a.shape == x.shape and a.dtype == x.dtype
        for a, x in zip(jax.tree.leaves(ahead[0]), jax.tree.leaves(state), strict=True)
    )
    np.testing.assert_array_equal(hist.iteration, np.arange(1, 8))
    np.testing.assert_array_equal(hist.env_steps, np.arange(1, 8) * BATCH)
    assert int(state.iteration) == 7 and hist.start_iteration == 0 and hist.resumed_from is None
    assert hist.env_steps_done == 7 * BATCH and hist.compile_seconds > 0

    # same numbers as the pure train(key) (one scan of 7), to float tolerance
    ref_state, ref_metrics = jax.jit(trainer)(jax.random.PRNGKey(0))
    np.testing.assert_allclose(state.params["w"], ref_state.params["w"], rtol=1e-5)
    np.testing.assert_allclose(hist.metrics["loss/total"], ref_metrics["loss/total"], rtol=1e-5)
    assert float(hist.metrics["loss/total"][-1]) < float(hist.metrics["loss/total"][0])

    # metrics.jsonl: one record per iteration, exact values, NaN written as null
    recs = read_metrics(wd)
    assert [r["iteration"] for r in recs] == list(range(1, 8))
    assert [r["env_steps"] for r in recs] == [8 * i for i in range(1, 8)]
    for i, r in enumerate(recs):
        assert np.float32(r["metrics"]["loss/total"]) == hist.metrics["loss/total"][i]
        assert (r["metrics"]["episode_return/other"] is None) == ((i + 1) % 2 == 0)
        assert r["elapsed"] > 0 and r["wall_time"] > 1e9

    # TensorBoard: every metric at every iteration, env steps as the step
    tb = read_tb_scalars(os.path.join(wd, "tb"))
    assert [s for s, _ in tb["loss/total"]] == [8 * i for i in range(1, 8)]
    np.testing.assert_allclose([v for _, v in tb["loss/total"]], hist.metrics["loss/total"])

    # keep_checkpoints=2 keeps the newest two; the last one is the final state
    with Checkpointer(os.path.join(wd, "checkpoints")) as ckpt:
        assert ckpt.all_steps() == [6, 7]
        restored, meta = ckpt.restore(trainer.init(jax.random.PRNGKey(1)))
    assert leaves_equal(restored, state)
    assert meta["iteration"] == 7 and meta["env_steps"] == 56 and meta["config_hash"]
    assert not [d for d in os.listdir(os.path.join(wd, "checkpoints")) if "tmp" in d]

    # plots from metrics.jsonl
    paths = plot_curves(wd)
    assert sorted(os.path.basename(p) for p in paths) == ["losses.png", "returns.png"]
    for p in paths:
        assert open(p, "rb").read(8) == b"\x89PNG\r\n\x1a\n"

    # a finished run resumes to a no-op
    state2, hist2 = train_loop(trainer, 0, wd, iterations_per_chunk=3, progress=True)
    assert len(hist2.iteration) == 0 and hist2.resumed_from == 7
    assert leaves_equal(state2, state)


def test_exact_resume_after_crash_and_stop(tmp_path):
    """10 iterations in chunks of 2, checkpoints every 2 chunks: uninterrupted vs.
    crash after iteration 6 (last checkpoint 4) + resume stopped at 8 + resume to 10."""
    trainer = make_toy(10)
    kw = dict(iterations_per_chunk=2, checkpoint_every_chunks=2, progress=False)
    full_state, full = train_loop(trainer, 3, str(tmp_path / "a"), **kw)

    wd = str(tmp_path / "b")

    def crash(info):
        if info.end_iteration == 6:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        train_loop(trainer, 3, wd, on_chunk=crash, **kw)
    assert Checkpointer(os.path.join(wd, "checkpoints")).all_steps() == [4]
    assert [r["iteration"] for r in read_metrics(wd)] == list(range(1, 7))

    _, part = train_loop(trainer, 3, wd, on_chunk=lambda i: i.end_iteration == 8, **kw)
    assert part.resumed_from == 4 and list(part.iteration) == [5, 6, 7, 8]
    assert Checkpointer(os.path.join(wd, "checkpoints")).all_steps() == [4, 8]  # stop saves

    state, rest = train_loop(trainer, 3, wd, **kw)
    assert rest.resumed_from == 8 and list(rest.iteration) == [9, 10]

    assert leaves_equal(state, full_state)  # params, Adam state, key, iteration: bitwise
    for name, values in full.metrics.items():
        np.testing.assert_array_equal(
            np.concatenate([part.metrics[name], rest.metrics[name]]), values[4:]
        )
    # metrics.jsonl: the iterations logged after the crash's checkpoint were replaced
    a, b = read_metrics(tmp_path / "a"), read_metrics(wd)
    assert [r["iteration"] for r in b] == list(range(1, 11))
    assert [r["metrics"] for r in a] == [r["metrics"] for r in b]
    tb = read_tb_scalars(os.path.join(wd, "tb"))
    assert sorted(s for s, _ in tb["loss/total"]) == [8 * i for i in range(1, 11)]  # once each


def test_nan_loss_stops_and_keeps_last_good_checkpoint(tmp_path):
    wd = str(tmp_path / "run")
    trainer = make_toy(10, nan_loss_at=7)
    with pytest.raises(TrainingDivergedError, match=r"NaN in loss/total at iteration 7") as e:
        train_loop(trainer, 0, wd, iterations_per_chunk=2, progress=False)
    assert e.value.iteration == 7 and e.value.quantity == "loss/total"
    assert "grad_norm" in str(e.value)  # also named
    with Checkpointer(os.path.join(wd, "checkpoints")) as ckpt:
        assert ckpt.latest_step() == 6  # the chunk 7-8 was not saved
        good, meta = ckpt.restore(trainer.init(jax.random.PRNGKey(0)))
    assert meta["iteration"] == 6 and int(good.iteration) == 6
    assert all(np.isfinite(x).all() for x in jax.tree.leaves(good.params))
    # the same state as a clean run at iteration 6 (other program: float tolerance)
    clean, _ = train_loop(make_toy(6), 0, None, iterations_per_chunk=2, progress=False)
    np.testing.assert_allclose(good.params["w"], clean.params["w"], rtol=1e-5)
    # metrics up to the bad chunk were logged, for diagnosis
    assert read_metrics(wd)[-1]["metrics"]["loss/total"] is None


def test_nonfinite_params_stop(tmp_path):
    wd = str(tmp_path / "run")
    # w becomes inf at the end of chunk 5-6: no loss sees it, the state check does
    trainer = make_toy(10, inf_param_at=6)
    with pytest.raises(TrainingDivergedError, match=r"runner state at params/w after iter") as e:
        train_loop(trainer, 0, wd, iterations_per_chunk=2, progress=False)
    assert e.value.iteration == 6 and e.value.quantity == "params/w"
    assert Checkpointer(os.path.join(wd, "checkpoints")).latest_step() == 4


def test_checked_metric_names():
    assert is_checked_metric("loss/tagger/value")
    assert is_checked_metric("tagger/loss_actor")
    assert is_checked_metric("grad_norm/runner")
    assert not is_checked_metric("episode_return/tagger")
    assert not is_checked_metric("env_steps")


def test_bad_arguments(tmp_path):
    trainer = make_toy(4)
    with pytest.raises(ValueError, match="iterations_per_chunk must be an integer >= 1"):
        train_loop(trainer, 0, None, iterations_per_chunk=0)
    with pytest.raises(ValueError, match="checkpoint_every_chunks"):
        train_loop(trainer, 0, None, iterations_per_chunk=2, checkpoint_every_chunks=0)
    with pytest.raises(ValueError, match="key_or_seed"):
        train_loop(trainer, "zero", None, iterations_per_chunk=2)
    with pytest.raises(ValueError, match="must be a jaxdrive.training.Trainer"):
        train_loop(lambda k: k, 0, None, iterations_per_chunk=2)

    wd = str(tmp_path / "run")
    train_loop(trainer, 0, wd, iterations_per_chunk=2, progress=False)
    with pytest.raises(ValueError, match="already holds checkpoints"):
        train_loop(trainer, 0, wd, iterations_per_chunk=2, resume=False, progress=False)
    other = make_toy(4, lr=0.01)
    with pytest.raises(ValueError, match="written with another config"):
        train_loop(other, 0, wd, iterations_per_chunk=2, progress=False)
    shorter = make_toy(2)  # same config dict, fewer iterations
    with pytest.raises(ValueError, match="past this trainer's num_iterations=2"):
        train_loop(shorter, 0, wd, iterations_per_chunk=2, progress=False, check_config=False)
    _, h = train_loop(other, 0, wd, iterations_per_chunk=2, progress=False, check_config=False)
    assert h.resumed_from == 4


def _iters(wd) -> list[int]:
    return [r["iteration"] for r in read_metrics(wd)]


def test_metrics_logger_reconcile_and_plots(tmp_path):
    """`reconcile(n)` leaves exactly one record per iteration 1..n: later records,
    repeated copies and torn lines go to ``metrics.jsonl.discarded-<k>``; a gap is
    reported, never silent."""
    wd = str(tmp_path)
    path = os.path.join(wd, "metrics.jsonl")
    with MetricsLogger(wd, tensorboard=False) as lg:
        for i in range(1, 6):
            lg.log(i, 10 * i, {"loss/a": 1.0 / i, "episode_return/g": float("inf")}, elapsed=i)
    with open(path, "a") as f:
        f.write('{"iteration": 6, "env_st')  # a line cut by a crash
    lg = MetricsLogger(wd, tensorboard=False)
    rep = lg.reconcile(3)
    lg.close()
    assert (rep.kept, rep.discarded, rep.torn, rep.missing) == (3, 3, 1, [])
    assert rep.aside == path + ".discarded-1" and "moved 3 record(s) (1 unreadable)" in (
        rep.message(path) or ""
    )
    assert [json.loads(x)["iteration"] for x in open(rep.aside).readlines()[:2]] == [4, 5]
    recs = read_metrics(wd)
    assert [r["iteration"] for r in recs] == [1, 2, 3]
    assert recs[1]["metrics"] == {"loss/a": 0.5, "episode_return/g": None}
    assert json.loads(open(path).readline())["elapsed"] == 1.0
    assert lg.reconcile(3).message(path) is None  # already in agreement: untouched
    assert [os.path.basename(p) for p in plot_curves(wd)] == ["returns.png", "losses.png"]
    assert plot_curves(tmp_path / "empty") == []
    off = MetricsLogger(tmp_path / "off", enabled=False)
    off.log(1, 1, {"x": 1.0})
    assert not os.path.exists(tmp_path / "off")

    # a re-run after a divergence at iteration 1 left [1, 2, 1, 2]; no checkpoint: all go
    lines = open(path).readlines()
    open(path, "w").writelines(lines[:2] + lines[:2])
    rep = MetricsLogger(wd, tensorboard=False).reconcile(0)
    assert (rep.kept, rep.discarded) == (0, 4) and rep.aside.endswith(".discarded-2")
    assert _iters(wd) == []
    # duplicates below the checkpoint keep one copy; a gap is reported
    open(path, "w").writelines(lines[:2] + lines[:3])
    rep = MetricsLogger(wd, tensorboard=False).reconcile(2)
    assert (rep.kept, rep.discarded) == (2, 3) and _iters(wd) == [1, 2]
    open(path, "w").writelines(lines[:1] + lines[2:3])
    rep = MetricsLogger(wd, tensorboard=False).reconcile(5)
    assert rep.missing == [2, 4, 5] and "iterations 2, 4-5 have no record" in rep.message(path)
    # a last record without its newline (cut right before it) gets one
    open(path, "w").write(lines[0].rstrip("\n"))
    assert MetricsLogger(wd, tensorboard=False).reconcile(1).discarded == 0
    assert open(path).read() == lines[0]
    # a damaged line that is not the last one is an error naming the file and line
    open(path, "w").writelines(["{oops\n", *lines[:1]])
    with pytest.raises(ValueError, match=r"metrics.jsonl:1: not a JSON record"):
        read_metrics(wd)


def test_tensorboard_reconcile_drops_steps_past_the_checkpoint(tmp_path):
    wd = str(tmp_path)
    with MetricsLogger(wd) as lg:
        for i in range(1, 5):
            lg.log(i, 8 * i, {"loss/a": float(i)})
    rep = MetricsLogger(wd).reconcile(2, 16)
    assert rep.tb_moved == 1
    assert read_tb_scalars(os.path.join(wd, "tb"))["loss/a"] == [(8, 1.0), (16, 2.0)]
    aside = [d for d in os.listdir(wd) if d.startswith("tb.discarded-")]
    assert aside == ["tb.discarded-1"]
    assert len(read_tb_scalars(os.path.join(wd, aside[0]))["loss/a"]) == 4
    assert MetricsLogger(wd).reconcile(2, 16).tb_moved == 0
    MetricsLogger(wd).reconcile(0, 0)  # no checkpoint: no scalar survives
    assert not [f for f in os.listdir(os.path.join(wd, "tb")) if "tfevents" in f]


def test_tensorboard_writer_does_not_import_pytorch(tmp_path):
    """tensorboardX imports PyTorch where it is installed; the logger hides it (a stand-in
    `torch` that fails when imported), and `import torch` works again afterwards."""
    import subprocess
    import sys

    fake = tmp_path / "site" / "torch"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise RuntimeError('torch was imported')\n")
    code = (
        "import sys\n"
        "from jaxdrive.logging import MetricsLogger\n"
        f"with MetricsLogger({str(tmp_path / 'run')!r}) as lg:\n"
        "    lg.log(1, 8, {'loss/a': 1.0})\n"
        "assert 'torch' not in sys.modules, sys.modules.get('torch')\n"
        "try:\n"
        "    import torch\n"
        "except RuntimeError as e:\n"
        "    print('reachable:', e)\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path / "site"), *sys.path])}
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert "reachable: torch was imported" in out.stdout
    assert [f for f in os.listdir(tmp_path / "run" / "tb") if "tfevents" in f]


def test_episode_metrics_skip_iterations_without_finished_episodes(tmp_path):
    """On-policy trainers report 0 for returns where no episode ended: those iterations
    have no episode metrics in metrics.jsonl and TensorBoard, and the progress text, the
    summary's latest value and the plotted curve skip them (one rule)."""
    from jaxdrive.logging import _series
    from jaxdrive.loop import _latest_values

    metrics = {
        "episodes_done": np.array([2.0, 0.0, 3.0, 0.0]),
        "episode_return/g": np.array([5.0, 0.0, 7.0, 0.0]),
        "episode_length": np.array([9.0, 0.0, 8.0, 0.0]),
        "loss/a": np.array([1.0, 2.0, 3.0, 4.0]),
    }
    assert _latest_values(metrics, "episode_return") == {"episode_return/g": 7.0}
    assert _latest_values(metrics, "loss") == {"loss/a": 4.0}
    wd = str(tmp_path)
    with MetricsLogger(wd) as lg:
        lg.log_chunk(np.arange(1, 5), 10 * np.arange(1, 5), metrics)
    recs = read_metrics(wd)
    assert [sorted(r["metrics"]) for r in recs[:2]] == [
        ["episode_length", "episode_return/g", "episodes_done", "loss/a"],
        ["episodes_done", "loss/a"],
    ]
    tb = read_tb_scalars(os.path.join(wd, "tb"))
    assert tb["episode_return/g"] == [(10, 5.0), (30, 7.0)] and len(tb["loss/a"]) == 4
    x, y = _series(recs, "episode_return/g")
    np.testing.assert_array_equal(x, [10.0, 30.0])
    np.testing.assert_array_equal(y, [5.0, 7.0])
    x, _ = _series(recs, "loss/a")
    assert x.size == 4
    # files written before the rule (0.0 where no episode ended) plot the same curve
    old = [{**r, "metrics": {**r["metrics"], "episode_return/g": 0.0}} for r in recs]
    old[0]["metrics"]["episode_return/g"], old[2]["metrics"]["episode_return/g"] = 5.0, 7.0
    np.testing.assert_array_equal(_series(old, "episode_return/g")[1], [5.0, 7.0])


def test_chunk_size_avoids_a_remainder_program(tmp_path):
    """A chunk size that does not divide the iterations is lowered to a divisor down to
    half of it (one compiled program); with no such divisor the remainder chunk stays."""
    from jaxdrive.loop import chunk_size

    assert [chunk_size(n, 10) for n in (300, 192, 97, 7, 0)] == [10, 8, 10, 7, 1]
    assert chunk_size(10, 4) == 2 and chunk_size(7, 3) == 3 and chunk_size(12, 5) == 4
    traces: list = []
    _, hist = train_loop(make_toy(9, traces=traces), 0, None, iterations_per_chunk=4,
                         progress=False)  # fmt: skip
    assert len(traces) == 1 and list(hist.iteration) == list(range(1, 10))  # chunks of 3


def test_run_lock_is_exclusive_reentrant_and_released(tmp_path):
    """A second open of the lock (as another process would do) is refused, naming the
    holder's pid; this process re-enters it; after release a new holder takes it without
    a take-over message; a record left by a holder that never released is reported."""
    import fcntl
    import socket

    from jaxdrive.runlock import RunLock, RunLockedError, read_holder

    wd = str(tmp_path)
    with RunLock(wd) as lock:
        assert read_holder(wd)["pid"] == os.getpid() and lock.taken_over is None
        with RunLock(wd):  # re-entered by train_loop inside experiments.train
            pass
        fd = os.open(lock.path, os.O_RDWR)
        with pytest.raises(BlockingIOError):
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # still held after the inner exit
        os.close(fd)
    assert read_holder(wd)["released"] is True
    with open(os.path.join(wd, "run.lock"), "w") as f:  # a holder killed with -9
        json.dump({"pid": 999999, "host": socket.gethostname(), "started": 0.0}, f)
    with RunLock(wd) as lock:
        assert lock.taken_over["pid"] == 999999
    # the refusal message (a live holder is simulated by a separate descriptor)
    fd = os.open(os.path.join(wd, "run.lock"), os.O_RDWR)
    fcntl.flock(fd, fcntl.LOCK_EX)
    with open(os.path.join(wd, "run.lock"), "w") as f:
        json.dump({"pid": 4242, "host": "h", "started": 0.0}, f)
    from jaxdrive import runlock

    runlock._HELD.clear()
    with pytest.raises(RunLockedError, match=r"is in use by pid 4242 on host h"):
        RunLock(wd).acquire()
    os.close(fd)


def test_off_policy_and_q_learning_runs_start_before_any_episode_ends():
    """The first call trains one iteration, before any episode has ended: the runner
    state stays finite (the divergence check reads every float leaf) and the return
    metric is NaN until an episode ends."""
    import algorithms
    import jaxdrive
    from experiments.configs import pendulum, qlearning

    for config in (pendulum.get_config("tiny"), qlearning.get_config("vdn_spread,tiny")):
        config.num_envs, config.num_steps = 2, 4  # episodes: 200 and 25 steps
        config.total_env_steps = 3 * 2 * 4
        env, params = jaxdrive.make(config.env_name, **dict(config.get("env_kwargs", {})))
        trainer = algorithms.make_train(config, env, params)
        state, hist = train_loop(trainer, 0, None, iterations_per_chunk=3, progress=False)
        assert int(state.iteration) == 3 and not bool(state.returns_seen)
        assert np.all(np.isnan(hist.metrics["episode_return/agent"]))

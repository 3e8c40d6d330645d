"""``--suite=recurrent``: training throughput of recurrent policies beside feed-forward ones.

Each pair trains the same config (env, batch, PPO settings) once with feed-forward
policies and once with the ``gru`` preset (a GRU after each torso, truncated BPTT over
the rollout), in the same process and on the same device, and reports env steps/s of
both and their ratio (the target: GRU ≥ 0.5× feed-forward on Tag):

* Tag (continuous) 1000 envs × (10 taggers + 100 runners), 25 steps per iteration, PPO
  with WarpDrive's networks (the train suite's ``tag_ppo``), GRU of 128;
* CartPole 10,000 envs × 500 steps, PPO, fc 32×32, GRU of 32.
"""

from __future__ import annotations

from typing import Any

__all__ = ["RECURRENT_PAIRS", "ratio_lines", "run_recurrent_suite"]

# (name, config file, overrides shared by both, overrides of the GRU run)
RECURRENT_PAIRS = [
    ("tag_ppo", "tag_continuous", {"num_envs": 1000, "num_steps": 25}, {}),
    (
        "cartpole_ppo",
        "cartpole",
        {"num_envs": 10_000, "num_steps": 500, "policies.agent.hidden_sizes": (32, 32)},
        {"policies.agent.core_size": 32},
    ),
]


def run_recurrent_suite(
    iterations: int, repeats: int, pairs: list[tuple] | None = None
) -> list[dict[str, Any]]:
    """Throughput records (`experiments.benchmarks.training.time_training`) of each pair of
    `RECURRENT_PAIRS` (or ``pairs``): ``name`` (feed-forward) and ``name + "_gru"``."""
    from experiments.benchmarks.timing import device_info
    from experiments.benchmarks.training import load_config, time_training

    info = device_info()
    records = []
    for name, cfg, over, gru_over in RECURRENT_PAIRS if pairs is None else pairs:
        for preset, suffix, extra in (("", "", {}), ("gru", "_gru", gru_over)):
            config = load_config(cfg, preset, **over, **extra)
            config.total_env_steps = max(
                config.total_env_steps, config.num_envs * config.num_steps * iterations
            )
            rec = time_training(config, iterations=iterations, repeats=repeats)
            rec.update(bench="recurrent", name=name + suffix, core=preset or "mlp", **info)
            records.append(rec)
            print(
                f"recurrent {name + suffix:<18} {rec['num_envs']:>6} envs x "
                f"{rec['num_steps']:>4} steps {rec['env_steps_per_s']:>14,.0f} env steps/s  "
                f"compile {rec['compile_s']:.1f}s",
                flush=True,
            )
    for line in ratio_lines(records):
        print(line, flush=True)
    return records


def ratio_lines(records: list[dict[str, Any]]) -> list[str]:
    """``GRU / feed-forward`` env-steps/s ratio of each pair in ``records``."""
    by_name = {r["name"]: r for r in records}
    lines = []
    for name, rec in by_name.items():
        gru = by_name.get(name + "_gru")
        if gru is not None:
            ratio = gru["env_steps_per_s"] / rec["env_steps_per_s"]
            lines.append(f"recurrent {name}: GRU / feed-forward = {ratio:.2f}x")
    return lines

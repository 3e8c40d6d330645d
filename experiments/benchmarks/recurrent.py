"""``--suite=recurrent``: training throughput of recurrent policies beside feed-forward ones.

Each case trains the same config (env, batch, PPO settings) three times in the same
process and on the same device: with feed-forward policies, with a GRU and with an LSTM
after each torso (actor and critic, truncated BPTT over the rollout), and reports the env
steps/s of each and the ratios to feed-forward (the target: GRU ≥ 0.5× feed-forward on
Tag), and once more with one GRU shared by actor and critic (``shared_torso``,
PureJaxRL's layout):

* Tag (continuous) 1000 envs × (10 taggers + 100 runners), 25 steps per iteration, PPO
  with WarpDrive's networks (the train suite's ``tag_ppo``), cores of 128;
* CartPole 10,000 envs × 500 steps, PPO, fc 32×32, cores of 32.
"""

from __future__ import annotations

from typing import Any

__all__ = ["CORE_KINDS", "RECURRENT_CASES", "ratio_lines", "run_recurrent_suite"]

#: The policies' cores each case is timed with (``"mlp"``: feed-forward, the baseline;
#: ``"gru_shared"``: one torso and one GRU for actor and critic, ``shared_torso``).
CORE_KINDS = ("mlp", "gru", "lstm", "gru_shared")

# (name, config file, overrides of every run, its policies, the cores' size)
RECURRENT_CASES = [
    ("tag_ppo", "tag_continuous", {"num_envs": 1000, "num_steps": 25}, ("tagger", "runner"), 128),
    (
        "cartpole_ppo",
        "cartpole",
        {"num_envs": 10_000, "num_steps": 500, "policies.agent.hidden_sizes": (32, 32)},
        ("agent",),
        32,
    ),
]


def run_recurrent_suite(
    iterations: int, repeats: int, cases: list[tuple] | None = None
) -> list[dict[str, Any]]:
    """Throughput records (`experiments.benchmarks.training.time_training`) of each case of
    `RECURRENT_CASES` (or ``cases``) with each of `CORE_KINDS`: ``name`` (feed-forward),
    ``name + "_gru"`` and ``name + "_lstm"``."""
    from experiments.benchmarks.timing import device_info
    from experiments.benchmarks.training import load_config, time_training

    info = device_info()
    records = []
    for name, cfg, over, policies, size in RECURRENT_CASES if cases is None else cases:
        for kind in CORE_KINDS:
            core = kind.removesuffix("_shared")
            cores = {} if kind == "mlp" else {f"policies.{p}.core": core for p in policies}
            if kind.endswith("_shared"):
                cores.update({f"policies.{p}.shared_torso": True for p in policies})
            sizes = {} if kind == "mlp" else {f"policies.{p}.core_size": size for p in policies}
            config = load_config(cfg, "", **over, **cores, **sizes)
            config.total_env_steps = max(
                config.total_env_steps, config.num_envs * config.num_steps * iterations
            )
            rec = time_training(config, iterations=iterations, repeats=repeats)
            label = name if kind == "mlp" else f"{name}_{kind}"
            rec.update(bench="recurrent", name=label, core=kind, **info)
            records.append(rec)
            print(
                f"recurrent {label:<18} {rec['num_envs']:>6} envs x "
                f"{rec['num_steps']:>4} steps {rec['env_steps_per_s']:>14,.0f} env steps/s  "
                f"compile {rec['compile_s']:.1f}s",
                flush=True,
            )
    for line in ratio_lines(records):
        print(line, flush=True)
    return records


def ratio_lines(records: list[dict[str, Any]]) -> list[str]:
    """``GRU / feed-forward``, ``LSTM / feed-forward`` and ``GRU_SHARED / feed-forward``
    env-steps/s ratios of each case in ``records`` (those measured)."""
    by_name = {r["name"]: r for r in records}
    lines = []
    for rec in records:
        if rec.get("core") != "mlp":
            continue
        for kind in CORE_KINDS[1:]:
            other = by_name.get(f"{rec['name']}_{kind}")
            if other is not None:
                ratio = other["env_steps_per_s"] / rec["env_steps_per_s"]
                lines.append(
                    f"recurrent {rec['name']}: {kind.upper()} / feed-forward = {ratio:.2f}x"
                )
    return lines

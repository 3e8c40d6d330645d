"""Recurrent PPO over several devices: the forced-CPU-devices script of
`tests/test_distributed.py` (its ``single`` fixture, run once per test run) trains
CartPole's ``tiny,gru`` preset (GRU actor, LSTM critic) on 1 and 2 devices."""

from __future__ import annotations

from tests.test_distributed import RTOL, single  # noqa: F401  (the shared fixture)


def test_recurrent_ppo_same_on_2_devices(single):  # noqa: F811
    """Parameters, carries and metrics agree with 1 device (metrics relative to
    ``max(|value|, 1)``: the policy loss of normalised advantages is near 0); the carries
    are split."""
    assert single["recurrent_D1_shards"] == 1 and single["recurrent_D2_shards"] == 2
    assert single["recurrent_ppo_D2"] < RTOL
    assert single["recurrent_ppo_D2_metrics"] < RTOL

"""The on-policy learning step of one policy: advantages, minibatches, gradient steps.

`learn` takes a policy's ``[T, NL, A_p, ...]`` trajectory and returns its new state and
loss metrics: GAE(λ) advantages over ``[T, NL·A_p]`` (optionally on rewards scaled by a
running std of discounted returns), then ``num_epochs`` passes over ``num_minibatches``
minibatches of the ``M = T·NL·A_p`` samples (nested `lax.scan`), the algorithm's loss
masked to active agents, ``clip_by_global_norm`` then Adam. Where the trajectory holds
action masks, log-probs and entropies are those of the masked distribution, as in acting.
Rewards are first multiplied by ``reward_scale`` (Brax's ``reward_scaling``; 1: as is).

Minibatches are *stratified by env*: in each epoch every env permutes its own ``T·A_p``
samples (key ``fold_in(k, global env index)``) and minibatch ``j`` takes the ``j``-th
slice of every env's permutation, so a device holds exactly its envs' share of every
minibatch and the result does not depend on the device count. Across devices, gradients,
loss metrics and advantage statistics are sums of per-device masked sums divided by the
global active count (``psum``).

**Recurrent policies** (truncated BPTT): the minibatches split the ``B = NL·A_p``
sequences of ``T`` steps, never the steps. The sequences are cut into blocks of
``num_minibatches`` neighbours (block ``b`` holds global sequences ``b·n_mb …
(b+1)·n_mb − 1``); in each epoch every block permutes its members (key ``fold_in(k,
global block index)``) and minibatch ``j`` takes the ``j``-th member of every block, so,
as above, a device holds exactly its share of every minibatch. Each minibatch re-runs the
network over its ``[T, B / n_mb]`` sequences from the carries stored at the rollout's
start, resetting them where episodes ended (as acting did), so at the first gradient
step the log-probs and values equal those of acting (ratio 1).

**Row padding**: each minibatch gets masked-out zero rows (recurrent policies: zero
sequences) up to a multiple of `row_multiple` (a power of two, ≤ 1.6% more rows), so
GEMM row counts have a large power-of-two factor and XLA needs no padded copies of the
activations; every loss term is a masked mean, so the update is unchanged.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import optax

from algorithms.common.distributions import log_prob_and_entropy
from algorithms.common.gae import bootstrap_values, gae_advantages
from algorithms.common.networks import mask_actions
from algorithms.common.normalization import RunningMeanStd
from algorithms.common.on_policy_setup import OnPolicySetup, PolicyState
from jaxdrive.distributed import maybe_psum

__all__ = ["learn", "masked_mean", "pad_minibatch_rows", "row_multiple"]


def row_multiple(rows: int) -> int:
    """The row count a learning minibatch of ``rows`` samples is padded to a multiple of:
    the largest power of two ≤ ``rows / 64``, at most 4096 (≤ 1.6% extra rows)."""
    m = 1
    while m * 2 <= min(4096, rows // 64):
        m *= 2
    return m


def pad_minibatch_rows(mbs: dict[str, jax.Array]) -> dict[str, jax.Array]:
    """Pads ``{k: [n_mb, rows, ...]}`` with masked-out zero rows (``mask`` False) up to a
    multiple of `row_multiple` ``(rows)``; every loss term is a masked mean, so the
    update is unchanged."""
    rows = mbs["mask"].shape[1]
    extra = -rows % row_multiple(rows)
    if extra == 0:
        return mbs
    return {k: jnp.pad(x, [(0, 0), (0, extra)] + [(0, 0)] * (x.ndim - 2)) for k, x in mbs.items()}


def masked_mean(x: jax.Array, mask: jax.Array) -> jax.Array:
    """Mean of ``x`` over entries where ``mask`` (same shape) is True; 0 when none."""
    m = mask.astype(jnp.float32)
    return jnp.sum(x * m) / jnp.maximum(jnp.sum(m), 1.0)


def _minibatches(setup: OnPolicySetup, p: str, batch: dict, key: jax.Array) -> dict:
    """``batch`` ``{k: [M, ...]}`` as ``{k: [n_mb, M / n_mb (+ row padding), ...]}``."""
    ps = setup.policies[p]
    n_mb, T, NL = ps.minibatches, setup.run.num_steps, setup.num_local_envs
    A = ps.spec.num_agents
    M, S = T * NL * A, T * A  # samples in all, samples of one env
    if n_mb == 1 and ps.epochs == 1:
        mbs = jax.tree.map(lambda x: x[None], batch)
    elif S % n_mb:  # one device only (checked): shuffle the whole batch
        perm = jax.random.permutation(key, M)
        mbs = jax.tree.map(lambda x: x[perm].reshape(n_mb, M // n_mb, *x.shape[1:]), batch)
    else:
        # Stratified by env: env n's S samples permuted with fold_in(key, n); the j-th
        # minibatch is the j-th slice of every env's permutation.
        keys = setup.env_keys(key, setup.env_ids())
        perm = jax.vmap(lambda kk: jax.random.permutation(kk, S))(keys)

        def split(x):  # [M = T·NL·A, ...] -> [n_mb, NL·S/n_mb, ...]
            x = x.reshape(T, NL, A, *x.shape[1:])
            x = jnp.moveaxis(x, 1, 0).reshape(NL, S, *x.shape[3:])
            x = jnp.take_along_axis(x, perm.reshape(NL, S, *([1] * (x.ndim - 2))), axis=1)
            x = x.reshape(NL, n_mb, S // n_mb, *x.shape[2:])
            return jnp.moveaxis(x, 1, 0).reshape(n_mb, NL * (S // n_mb), *x.shape[3:])

        mbs = jax.tree.map(split, batch)
    return pad_minibatch_rows(mbs)


def _sequence_minibatches(setup: OnPolicySetup, p: str, batch: dict, key: jax.Array) -> dict:
    """A recurrent policy's ``batch`` (``{k: [M = T·B, ...]}`` plus ``carry0`` leaves
    ``[NL, A_p, S]``) as minibatches of whole sequences: ``{k: [n_mb, T, B_mb, ...]}``,
    ``carry0`` leaves ``[n_mb, B_mb, S]`` and ``env`` ``[n_mb, B_mb]`` (local env index of
    each sequence). ``B_mb``: ``B / n_mb`` padded with all-zero sequences (``mask``
    False) to a multiple of `row_multiple` ``(B / n_mb)``, so that the ``T·B_mb`` rows of
    the weight-gradient GEMMs need no padded copies."""
    ps = setup.policies[p]
    n_mb, T, NL, A = ps.minibatches, setup.run.num_steps, setup.num_local_envs, ps.spec.num_agents
    B = NL * A
    if n_mb == 1 and ps.epochs == 1:
        idx = jnp.arange(B, dtype=jnp.int32)[None]
    else:  # blocks of n_mb neighbouring sequences, each permuted by its global index
        nb = B // n_mb
        blocks = jnp.arange(nb, dtype=jnp.int32)
        if setup.axis is not None:
            blocks = blocks + jax.lax.axis_index(setup.axis) * nb
        perm = jax.vmap(lambda k: jax.random.permutation(k, n_mb))(setup.env_keys(key, blocks))
        idx = (jnp.arange(nb, dtype=jnp.int32)[:, None] * n_mb + perm).T  # [n_mb, nb]
    # masked-out padding sequences (index B: gathered as zeros, mask False)
    extra = -idx.shape[1] % row_multiple(idx.shape[1])
    idx = jnp.pad(idx, ((0, 0), (0, extra)), constant_values=B)

    def take(x, axis):  # x's entries idx along axis, zeros for the padding
        return jnp.take(x, idx, axis=axis, mode="fill", fill_value=0)

    seq = {k: x.reshape(T, B, *x.shape[1:]) for k, x in batch.items() if k != "carry0"}
    mbs = {k: jnp.moveaxis(take(x, 1), 1, 0) for k, x in seq.items()}
    mbs["carry0"] = jax.tree.map(lambda c: take(c.reshape(B, *c.shape[2:]), 0), batch["carry0"])
    mbs["env"] = jnp.minimum(idx // A, NL - 1)
    return mbs


def _sequence_eval(setup: OnPolicySetup, p: str, params, obs_norm, gs_all, mb: dict):
    """A recurrent policy's log-probs, entropies and values of a sequence minibatch
    (`_sequence_minibatches`), all ``[T·B_mb]``, and its per-sample entries flattened the
    same way."""
    pol = setup.policies[p]
    T, NL = setup.run.num_steps, setup.num_local_envs
    x = pol.normalize(obs_norm, mb["obs"])  # [T, B_mb, O_pad]
    c = None
    if pol.hp["centralized_critic"]:
        c = pol.critic_input(gs_all.reshape(T, NL, -1)[:, mb["env"]], x)
    _, dist, v = pol.net.apply(params, mb["carry0"], x, mb["ends"], c)
    dist = mask_actions(dist, mb.get("action_mask"), pol.action_spec)
    logp, ent = log_prob_and_entropy(dist, mb["action"])
    flat = {
        k: val.reshape(-1, *val.shape[2:]) for k, val in mb.items() if k not in ("carry0", "env")
    }
    return logp.reshape(-1), ent.reshape(-1), v.reshape(-1), flat


def _returns_scale(gamma: jax.Array, ps: PolicyState, reward, ends, active, axis):
    """Rewards divided by the running std of discounted returns (updated with this
    rollout's returns); returns ``(reward, ret_norm, ret_acc)``."""
    T, B = reward.shape

    def acc_body(acc, x):
        r, end = x
        acc = acc * gamma + r
        return jnp.where(end, 0.0, acc), acc

    ret_acc, rets = jax.lax.scan(acc_body, ps.ret_acc.reshape(B), (reward, ends))
    ret_norm = ps.ret_norm.update(rets.reshape(T * B), active.reshape(T * B), axis)
    return reward / ret_norm.std, ret_norm, ret_acc.reshape(ps.ret_acc.shape)


def learn(
    setup: OnPolicySetup,
    p: str,
    ps: PolicyState,
    tr: dict[str, jax.Array],
    last_value: jax.Array,
    gs_all: jax.Array | None,
    ent_coef: jax.Array,
    key: jax.Array,
) -> tuple[PolicyState, dict[str, jax.Array]]:
    """Advantages and the update epochs of policy ``p``; returns ``(state, metrics)``.

    ``tr``: its ``[T, NL, A_p, ...]`` trajectory; ``last_value`` ``[NL, A_p]``;
    ``gs_all`` ``[T·NL, C]`` global states (centralised critic) or ``None``.
    """
    pol = setup.policies[p]
    axis = setup.axis
    # the static hyper-parameters of the config, then the state's (maybe traced) values
    hp = {**pol.hp, **ps.hparams}
    tx = pol.make_tx(ps.hparams)
    T, A = setup.run.num_steps, pol.spec.num_agents
    B = setup.num_local_envs * A
    M = T * B

    def tb(x):  # [T, NL, A_p, ...] -> [T, B, ...]
        return x.reshape(T, B, *x.shape[3:])

    reward, value, active = tb(tr["reward"]), tb(tr["value"]), tb(tr["active"])
    if hp["reward_scale"] != 1.0:
        reward = reward * hp["reward_scale"]
    ends, term = tb(tr["ends"]), tb(tr["terminated"])
    ret_norm, ret_acc = ps.ret_norm, ps.ret_acc
    if hp["normalize_rewards"]:
        reward, ret_norm, ret_acc = _returns_scale(hp["gamma"], ps, reward, ends, active, axis)
    next_values = bootstrap_values(value, last_value.reshape(B), term, ends, tb(tr["final_value"]))
    adv, targets = gae_advantages(reward, value, next_values, ends, hp["gamma"], hp["gae_lambda"])
    batch = {
        "obs": tr["obs"].reshape(M, pol.in_size),
        "action": tr["action"].reshape(M, *tr["action"].shape[3:]),
        "old_logp": tr["logp"].reshape(M),
        "old_value": value.reshape(M),
        "advantage": adv.reshape(M),
        "target": targets.reshape(M),
        "mask": active.reshape(M),
    }
    if "action_mask" in tr:  # the env's masks: [M, K] bool (row padding: all False)
        batch["action_mask"] = tr["action_mask"].reshape(M, tr["action_mask"].shape[-1])
    if pol.recurrent:  # sequences: resets and the carries at the rollout's start
        batch["ends"] = ends.reshape(M)
        batch["carry0"] = tr["carry0"]
    elif hp["centralized_critic"]:
        batch["row"] = jnp.arange(M, dtype=jnp.int32) // A  # index into gs_all [T*NL, C]
    obs_norm = ps.obs_norm

    def gmean(x, mask):  # masked mean over the whole (all-device) batch
        m = mask.astype(jnp.float32)
        num = maybe_psum(jnp.sum(x * m), axis)
        return num / jnp.maximum(maybe_psum(jnp.sum(m), axis), 1.0)

    def loss(params, mb):
        if pol.recurrent:
            logp, ent, v, mb = _sequence_eval(setup, p, params, obs_norm, gs_all, mb)
        else:
            x = pol.normalize(obs_norm, mb["obs"])
            c = pol.critic_input(gs_all[mb["row"]], x) if hp["centralized_critic"] else None
            dist, v = pol.net.apply(params, x, c)
            dist = mask_actions(dist, mb.get("action_mask"), pol.action_spec)
            logp, ent = log_prob_and_entropy(dist, mb["action"])
        a = mb["advantage"]
        if hp["normalize_advantages"]:
            mu = gmean(a, mb["mask"])
            sd = jnp.sqrt(gmean((a - mu) ** 2, mb["mask"]))
            a = (a - mu) / (sd + 1e-8)
        total, aux = setup.loss_fn(logp, ent, v, {**mb, "advantage": a}, hp, ent_coef)
        log_ratio = logp - mb["old_logp"]
        aux = dict(aux)
        aux["approx_kl"] = masked_mean(jnp.expm1(log_ratio) - log_ratio, mb["mask"])
        if axis is not None:
            # The loss is a masked mean over the minibatch: its all-device value is
            # the per-device values weighted by active counts (psum'd after grad).
            cnt = jnp.sum(mb["mask"].astype(jnp.float32))
            wgt = cnt / jnp.maximum(jax.lax.psum(cnt, axis), 1.0)
            total = total * wgt
            aux = {k: val * wgt for k, val in aux.items()}
        return total, aux

    grad_fn = jax.value_and_grad(loss, has_aux=True)

    def mb_step(carry, mb):
        params, opt_state = carry
        (_, aux), grads = grad_fn(params, mb)
        grads, aux = maybe_psum((grads, aux), axis)
        aux["grad_norm"] = optax.global_norm(grads)
        updates, opt_state = tx.update(grads, opt_state, params)
        params = optax.apply_updates(params, updates)
        return (params, opt_state), aux

    split = _sequence_minibatches if pol.recurrent else _minibatches

    def epoch(carry, k):
        return jax.lax.scan(mb_step, carry, split(setup, p, batch, k))

    (params, opt_state), aux = jax.lax.scan(
        epoch, (ps.params, ps.opt_state), jax.random.split(key, pol.epochs)
    )
    metrics = {f"loss/{p}/{k}": jnp.mean(v).astype(jnp.float32) for k, v in aux.items()}
    mask = batch["mask"]
    resid = batch["target"] - batch["old_value"]
    var_t = gmean((batch["target"] - gmean(batch["target"], mask)) ** 2, mask)
    var_r = gmean((resid - gmean(resid, mask)) ** 2, mask)
    metrics[f"loss/{p}/explained_variance"] = jnp.where(
        var_t > 0, 1.0 - var_r / jnp.maximum(var_t, 1e-12), 0.0
    ).astype(jnp.float32)
    metrics[f"loss/{p}/ent_coef"] = jnp.asarray(ent_coef, jnp.float32)
    if hp["normalize_obs"]:
        upd = pol.padded_norm(obs_norm).update(batch["obs"], mask, axis)
        O = pol.obs_size
        obs_norm = RunningMeanStd(mean=upd.mean[:O], var=upd.var[:O], count=upd.count)
    new_ps = ps.replace(
        params=params, opt_state=opt_state, obs_norm=obs_norm, ret_norm=ret_norm, ret_acc=ret_acc
    )
    return new_ps, metrics

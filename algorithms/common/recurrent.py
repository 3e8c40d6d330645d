"""Recurrent actor-critics for the on-policy trainers (PPO, A2C, MAPPO).

Dimension letters: ``T`` time steps of a sequence, ``...`` batch axes (envs, agents),
``F`` a core's input features (the torso's last layer size), ``H`` its hidden size
(``core_size``), ``S`` its carry size (``H`` for a GRU, ``2H`` for an LSTM: cell and
hidden state side by side), ``O`` the flat observation size.

The policy config keys (`RECURRENT_POLICY_DEFAULTS`, checked by `RECURRENT_RULES`):

* ``core``: ``"mlp"`` (feed-forward, the default), ``"gru"`` or ``"lstm"``: the actor's
  core, between its torso MLP and its head (the layout of PureJaxRL's and Mava's
  recurrent PPO): ``obs -> MLP -> core -> head``.
* ``critic_core``: the critic's core, ``"same"`` (as ``core``, the default) or one of the
  kinds above; the critic reads ``critic_obs -> MLP -> core -> value``.
* ``core_size``: ``H``.
* ``post_core_sizes``: dense layers (with the torso's activation) between a core and its
  head, ``()`` (the default) for none: ``obs -> MLP -> core -> MLP -> head`` (JaxMARL's
  and Mava's recurrent MAPPO put one 128-unit layer there).
* ``shared_torso`` (a policy key of every on-policy algorithm): with a recurrent ``core``,
  one torso and one core serve both heads, ``obs -> MLP -> core -> (head, value)`` (the
  layout of PureJaxRL's recurrent PPO): half the recurrent work of two cores; the critic
  then reads the actor's observation (no ``centralized_critic``) and ``critic_core``
  must stay ``"same"``.

`RecurrentCore` is one GRU (the gates of ``flax.linen.GRUCell``) or LSTM (those of
``flax.linen.OptimizedLSTMCell``) layer over a whole sequence: the input projection of
every step is one GEMM ``[T·..., F] @ [F, G·H]`` (``G`` = 3 or 4 gates) before a
`lax.scan` over ``T`` that does only the ``[..., H] @ [H, G·H]`` recurrent GEMM and
the gates; the actor's and the critic's cores share that scan (`run_cores`), and its
backward pass is a custom VJP whose reverse scan does only each step's elementwise
derivative (from the activations the forward pass saved) and one ``[..., G·H] @
[G·H, H]`` GEMM, the recurrent kernels' gradients being one GEMM over all steps after
it. **Resets**: a step's output carry is replaced by zeros where ``ends`` is
True (the agent's episode ended at that step), so the next step starts the new episode
from the zero carry; the rollout applies the same rule after each env step, so a
sequence re-run from the carry stored at the rollout's start reproduces the acting
computation step for step (truncated BPTT over the rollout).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from algorithms.common.config_rules import Rule, choice, integer, sizes_or_none
from algorithms.common.init import orthogonal
from algorithms.common.layers import MLP, DenseParams, affine
from algorithms.common.networks import ActionHead, ActionSpec

__all__ = [
    "CORES",
    "RECURRENT_POLICY_DEFAULTS",
    "RECURRENT_RULES",
    "RecurrentActorCritic",
    "RecurrentCore",
    "carry_size",
    "cell_step",
    "core_kinds",
    "initial_carry",
    "is_recurrent",
    "reset_carry",
    "run_cores",
]

#: Core kinds: feed-forward (no core), GRU, LSTM.
CORES = ("mlp", "gru", "lstm")
_GATES = {"gru": 3, "lstm": 4}

#: Policy config keys of the recurrent cores and their defaults (see the module docstring).
RECURRENT_POLICY_DEFAULTS: dict[str, Any] = {
    "core": "mlp",  # actor core: "mlp" (feed-forward) | "gru" | "lstm"
    "critic_core": "same",  # critic core: "same" (as core) | "mlp" | "gru" | "lstm"
    "core_size": 128,  # hidden size H of the cores
    "post_core_sizes": (),  # dense layers between a core and its head
}

#: Value rules of `RECURRENT_POLICY_DEFAULTS`.
RECURRENT_RULES: dict[str, Rule] = {
    "core": choice(lambda: CORES),
    "critic_core": choice(lambda: ("same", *CORES)),
    "core_size": integer(1),
    "post_core_sizes": sizes_or_none,
}


def core_kinds(hp: dict[str, Any]) -> tuple[str, str]:
    """``(actor core, critic core)`` kinds of a policy's checked hyper-parameters; with
    ``shared_torso`` the critic has no core of its own (``"mlp"``): its value head reads
    the actor's core."""
    actor = hp.get("core", "mlp")
    critic = hp.get("critic_core", "same")
    if hp.get("shared_torso", False):
        return actor, "mlp"
    return actor, actor if critic == "same" else critic


def is_recurrent(hp: dict[str, Any]) -> bool:
    """Whether the actor or the critic of a policy has a recurrent core."""
    return any(k != "mlp" for k in core_kinds(hp))


def carry_size(kind: str, size: int) -> int:
    """``S``: the carry features of a core of ``kind`` and hidden size ``size``."""
    return 2 * size if kind == "lstm" else size


def initial_carry(hp: dict[str, Any], lead: Sequence[int]) -> dict[str, jax.Array]:
    """The zero carry ``{"actor" | "critic": [*lead, S] float32}`` of a policy's recurrent
    cores (no entry for a feed-forward one)."""
    out = {}
    for name, kind in zip(("actor", "critic"), core_kinds(hp), strict=True):
        if kind != "mlp":
            out[name] = jnp.zeros((*lead, carry_size(kind, hp["core_size"])), jnp.float32)
    return out


def reset_carry(carry: Any, ends: jax.Array) -> Any:
    """``carry`` (leaves ``[*E, S]``) with zeros where ``ends`` (``[*E]`` bool) is True."""
    return jax.tree.map(lambda c: jnp.where(ends[..., None], 0.0, c), carry)


def _stacked_orthogonal(gates: int) -> Any:
    """Init of a ``[H, G·H]`` recurrent kernel: ``G`` independent orthogonal ``[H, H]``
    blocks side by side (flax's cells initialise each gate's kernel orthogonally)."""

    def init(key: jax.Array, shape: tuple[int, ...], dtype: Any = jnp.float32) -> jax.Array:
        h = shape[0]
        keys = jax.random.split(key, gates)
        blocks = [orthogonal()(k, (h, h), dtype) for k in keys]
        return jnp.concatenate(blocks, axis=1)

    return init


def _hidden_gemm(kind: str, h: int, c: jax.Array, wh: jax.Array, bh: jax.Array | None):
    """The recurrent GEMM of carry ``c [..., S]``: ``[..., G·H]`` (GRU: with ``b_hn`` added
    to the ``n`` block, zeros to the others)."""
    if kind == "gru":
        return c @ wh + jnp.concatenate([jnp.zeros((2 * h,), bh.dtype), bh])
    return c[..., h:] @ wh


def _gates(
    kind: str, h: int, xp: jax.Array, hp: jax.Array, c: jax.Array
) -> tuple[jax.Array, jax.Array]:
    """The new carry ``[..., S]`` from the step's input projection ``xp [..., G·H]``, the
    recurrent GEMM ``hp [..., G·H]`` (`_hidden_gemm`) and the carry ``c [..., S]`` (only
    elementwise work), and the activations its VJP needs (`_gates_vjp`): GRU ``[r, z, n,
    W_hn h + b_hn]``, LSTM ``[i, f, g, o, tanh(c')]``."""
    if kind == "gru":
        r = jax.nn.sigmoid(xp[..., :h] + hp[..., :h])
        z = jax.nn.sigmoid(xp[..., h : 2 * h] + hp[..., h : 2 * h])
        hn = hp[..., 2 * h :]
        n = jnp.tanh(xp[..., 2 * h :] + r * hn)
        return (1.0 - z) * n + z * c, jnp.concatenate([r, z, n, hn], axis=-1)
    g = xp + hp
    i, f = jax.nn.sigmoid(g[..., :h]), jax.nn.sigmoid(g[..., h : 2 * h])
    gg, o = jnp.tanh(g[..., 2 * h : 3 * h]), jax.nn.sigmoid(g[..., 3 * h :])
    cc = f * c[..., :h] + i * gg
    tc = jnp.tanh(cc)
    return jnp.concatenate([cc, o * tc], axis=-1), jnp.concatenate([i, f, gg, o, tc], axis=-1)


def _gates_vjp(
    kind: str, h: int, act: jax.Array, c: jax.Array, g: jax.Array
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """The VJP of `_gates` at activations ``act`` and carry ``c`` for the new carry's
    cotangent ``g [..., S]``: ``(dxp [..., G·H], dhp [..., G·H], dc [..., S])`` (``dc``: the
    carry's cotangent other than through ``hp``); no transcendental function."""
    if kind == "gru":
        r, z, n, hn = (act[..., k * h : (k + 1) * h] for k in range(4))
        dan = g * (1.0 - z) * (1.0 - n * n)  # through n = tanh(a_n)
        daz = g * (c - n) * z * (1.0 - z)
        dar = dan * hn * r * (1.0 - r)
        dxp = jnp.concatenate([dar, daz, dan], axis=-1)
        return dxp, jnp.concatenate([dar, daz, dan * r], axis=-1), g * z
    i, f, gg, o, tc = (act[..., k * h : (k + 1) * h] for k in range(5))
    dcc = g[..., :h] + g[..., h:] * o * (1.0 - tc * tc)
    da = jnp.concatenate(
        [
            dcc * gg * i * (1.0 - i),
            dcc * c[..., :h] * f * (1.0 - f),
            dcc * i * (1.0 - gg * gg),
            g[..., h:] * tc * o * (1.0 - o),
        ],
        axis=-1,
    )
    return da, da, jnp.concatenate([dcc * f, jnp.zeros_like(dcc)], axis=-1)


def _output(kind: str, h: int, c: jax.Array) -> jax.Array:
    """The hidden state ``[..., H]`` in a carry ``[..., S]``."""
    return c if kind == "gru" else c[..., h:]


def cell_step(
    kind: str, h: int, weights: tuple[jax.Array, jax.Array | None], xp: jax.Array, c: jax.Array
) -> jax.Array:
    """One step of a core: the carry ``[..., S]`` after input projection ``xp [..., G·H]``
    from carry ``c [..., S]`` (no reset); ``weights = (W_h [H, G·H], b_hn [H] | None)``."""
    return _gates(kind, h, xp, _hidden_gemm(kind, h, c, *weights), c)[0]


def _forward(cores, weights, xps, c0s, ends, residuals):
    """The time scan of every core at once; ``residuals``: each step's pre-reset carry and
    activations (`_gates`) instead of the hidden states."""

    def body(cs, inp):
        xp_t, end_t = inp
        new, out = [], []
        for (kind, h), w, x, c in zip(cores, weights, xp_t, cs, strict=True):
            cn, act = _gates(kind, h, x, _hidden_gemm(kind, h, c, *w), c)
            new.append(jnp.where(end_t[..., None], 0.0, cn))
            out.append((cn, act) if residuals else _output(kind, h, cn))
        return tuple(new), tuple(out)

    return jax.lax.scan(body, tuple(c0s), (tuple(xps), ends))


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def _scan_cores(cores, weights, xps, c0s, ends):
    """Cores ``((kind, H), ...)`` over ``T`` steps in one `lax.scan`: ``weights`` ``((W_h,
    b_hn | None), ...)``, input projections ``xps`` ``([T, ..., G·H], ...)``, carries
    ``c0s`` ``([..., S], ...)``, ``ends [T, ...]``; returns ``(carries, ys ([T, ..., H],
    ...))``. The carry after step ``t`` is zeros where ``ends[t]``."""
    return _forward(cores, weights, xps, c0s, ends, False)


def _scan_cores_fwd(cores, weights, xps, c0s, ends):
    cs, res = _forward(cores, weights, xps, c0s, ends, True)
    ys = tuple(_output(kind, h, cn) for (kind, h), (cn, _) in zip(cores, res, strict=True))
    return (cs, ys), (weights, c0s, ends, res)


def _pad_h(kind: str, h: int, x: jax.Array) -> jax.Array:
    """``[..., H]`` as the hidden-state part of a carry ``[..., S]`` (zeros elsewhere)."""
    return x if kind == "gru" else jnp.pad(x, [(0, 0)] * (x.ndim - 1) + [(h, 0)])


def _scan_cores_bwd(cores, saved, cts):
    """Backward: a reverse scan doing only each step's elementwise VJP (`_gates_vjp`) and
    the ``[..., G·H] @ [G·H, H]`` GEMM of the carry's cotangent; the recurrent weights'
    gradients are one GEMM over all ``T`` steps after it."""
    weights, c0s, ends, res = saved
    dcs, dys = cts
    cprev = tuple(  # the carry each step started from [T, ..., S]
        jnp.concatenate([c0[None], jnp.where(ends[:-1, ..., None], 0.0, cn[:-1])])
        for c0, (cn, _) in zip(c0s, res, strict=True)
    )
    acts = tuple(act for _, act in res)

    def body(dc, inp):
        act_t, cp_t, dy_t, end_t = inp
        new, out = [], []
        for (kind, h), (wh, _), act, cp, dy, d in zip(
            cores, weights, act_t, cp_t, dy_t, dc, strict=True
        ):
            g = jnp.where(end_t[..., None], 0.0, d) + _pad_h(kind, h, dy)
            dxp, dhp, dcp = _gates_vjp(kind, h, act, cp, g)
            new.append(dcp + _pad_h(kind, h, dhp @ wh.T))
            out.append((dxp, dhp) if kind == "gru" else (dxp,))
        return tuple(new), tuple(out)

    dys = tuple(
        jnp.zeros_like(_output(k, h, cn)) if dy is None else dy
        for (k, h), (cn, _), dy in zip(cores, res, dys, strict=True)
    )
    dc0s, douts = jax.lax.scan(body, tuple(dcs), (acts, cprev, dys, ends), reverse=True)
    dweights = []
    for (kind, h), cp, d in zip(cores, cprev, douts, strict=True):
        dhp = d[-1].reshape(-1, d[-1].shape[-1])  # [T·..., G·H]
        dwh = _output(kind, h, cp).reshape(-1, h).T @ dhp
        dweights.append((dwh, jnp.sum(dhp[:, 2 * h :], 0) if kind == "gru" else None))
    return tuple(dweights), tuple(d[0] for d in douts), dc0s, None


_scan_cores.defvjp(_scan_cores_fwd, _scan_cores_bwd)


class RecurrentCore(nn.Module):
    """One GRU or LSTM layer over a sequence: ``(carry [..., S], x [T, ..., F],
    ends [T, ...] | None) -> (carry [..., S], y [T, ..., H])``.

    GRU (flax's ``GRUCell``): ``r = σ(W_ir x + b_ir + W_hr h)``, ``z = σ(W_iz x + b_iz +
    W_hz h)``, ``n = tanh(W_in x + b_in + r·(W_hn h + b_hn))``, ``h' = (1 − z)·n + z·h``.
    LSTM (flax's ``OptimizedLSTMCell``): ``i, f, g, o`` from ``W_i x + b + W_h h``,
    ``c' = σ(f)·c + σ(i)·tanh(g)``, ``h' = σ(o)·tanh(c')``; its carry is ``[c, h]``.
    ``y_t`` is the hidden state after step ``t``; the carry after step ``t`` becomes
    zeros where ``ends[t]`` (``None``: never). Input kernels use LeCun-normal init, the
    recurrent ones orthogonal blocks, biases zeros. Computes in float32.

    ``weights(F)`` gives the parameters ``(W_i [F, G·H], b_i [G·H], W_h [H, G·H], b_hn
    [H] | None)``; `run_cores` runs several cores in one time scan.
    """

    kind: str = "gru"
    size: int = 128

    @nn.compact
    def weights(self, in_features: int) -> tuple[Any, ...]:
        """``(W_i, b_i, W_h, b_hn | None)`` for inputs of ``in_features`` features."""
        if self.kind not in _GATES:
            raise ValueError(f"unknown recurrent core {self.kind!r}; known: {list(_GATES)}")
        g, h = _GATES[self.kind], self.size
        # not named "kernel": `cast_kernels` leaves the cores in float32 when acting too
        wi = self.param("input_kernel", nn.initializers.lecun_normal(), (in_features, g * h))
        bi = self.param("input_bias", nn.initializers.zeros, (g * h,))
        wh = self.param("hidden_kernel", _stacked_orthogonal(g), (h, g * h))
        bh = self.param("hidden_bias", nn.initializers.zeros, (h,)) if g == 3 else None
        return wi, bi, wh, bh

    def __call__(
        self, carry: jax.Array, x: jax.Array, ends: jax.Array | None = None
    ) -> tuple[jax.Array, jax.Array]:
        (carry,), (y,) = run_cores((self,), (carry,), (x,), ends)
        return carry, y


def run_cores(
    cores: Sequence[RecurrentCore],
    carries: Sequence[jax.Array],
    xs: Sequence[jax.Array],
    ends: jax.Array | None,
) -> tuple[tuple[jax.Array, ...], tuple[jax.Array, ...]]:
    """`RecurrentCore` s ``cores`` over their inputs ``xs`` (``[T, ..., F_k]``) from
    ``carries`` (``[..., S_k]``) with the shared ``ends [T, ...]`` (``None``: never; with
    ``T = 1`` a single step without a loop): ``(carries, ys ([T, ..., H_k], ...))``.

    Each core's input projection of every step is one GEMM ``[T·..., F] @ [F, G·H]``
    before the time scan; one `lax.scan` serves all the cores, its step doing only the
    recurrent GEMMs ``[..., H] @ [H, G·H]`` and the gates. Its backward pass (a custom
    VJP) is a reverse scan doing each step's elementwise VJP and the carry cotangent's
    GEMM ``[..., G·H] @ [G·H, H]``; the recurrent kernels' gradients are one GEMM over
    all steps after it. The values are those of the step-by-step cell (`cell_step`).
    """
    kinds = tuple((c.kind, c.size) for c in cores)
    ws = [c.weights(x.shape[-1]) for c, x in zip(cores, xs, strict=True)]
    xps = tuple(affine(x, wi, bi, jnp.float32) for x, (wi, bi, _, _) in zip(xs, ws, strict=True))
    rec = tuple((wh, bh) for _, _, wh, bh in ws)
    carries = tuple(c.astype(jnp.float32) for c in carries)
    if ends is None and xs[0].shape[0] == 1:  # one step (acting): no loop
        steps = zip(kinds, rec, xps, carries, strict=True)
        new = tuple(cell_step(k, h, w, xp[0], c) for (k, h), w, xp, c in steps)
        return new, tuple(_output(k, h, c)[None] for (k, h), c in zip(kinds, new, strict=True))
    if ends is None:
        ends = jnp.zeros(xs[0].shape[:-1], bool)
    return _scan_cores(kinds, rec, xps, carries, ends)


class RecurrentActorCritic(nn.Module):
    """Actor ``obs -> MLP -> core -> head`` and critic ``critic_obs -> MLP -> core ->
    value``, each core a `RecurrentCore` or none (``"mlp"``: the torso feeds the head);
    ``shared=True``: one torso and the actor's core feed both heads (``critic_obs`` must
    be ``None``, ``critic_kind`` is ignored and the carry has no ``"critic"`` entry).
    ``post_sizes``: dense layers after each core (``obs -> MLP -> core -> MLP -> head``;
    with ``shared``, one such MLP per head).

    ``carry``: ``{"actor": [..., S], "critic": [..., S]}`` (entries only for recurrent
    cores; `initial_carry`). ``__call__(carry, obs [T, ..., O], ends [T, ...],
    critic_obs [T, ..., C] | None) -> (carry, dist [T, ...], value [T, ...])`` runs whole
    sequences with resets (learning); ``step(carry, obs [..., O], critic_obs) -> (carry,
    dist [...], value [...])`` one step without reset (acting); ``value_step`` the value
    of one step (the carry it would give is dropped: bootstraps). ``obs_features``,
    ``critic_features``, ``bias_column`` and ``compute_dtype`` are those of
    `algorithms.common.networks.ActorCritic` (the torsos and heads; the cores compute
    in float32).
    """

    spec: ActionSpec
    hidden_sizes: Sequence[int] = (64, 64)
    activation: str = "tanh"
    actor_kind: str = "gru"
    critic_kind: str = "gru"
    core_size: int = 128
    obs_features: int | None = None
    critic_features: int | None = None
    compute_dtype: Any = jnp.float32
    bias_column: bool = False
    shared: bool = False
    post_sizes: Sequence[int] = ()

    def setup(self) -> None:
        mlp = functools.partial(
            MLP,
            self.hidden_sizes,
            self.activation,
            dtype=self.compute_dtype,
            bias_column=self.bias_column,
        )
        self.actor_torso = mlp(in_features=self.obs_features)
        if self.actor_kind != "mlp":
            self.actor_rnn = RecurrentCore(self.actor_kind, self.core_size)
        if not self.shared:
            self.critic_torso = mlp(in_features=self.critic_features)
            if self.critic_kind != "mlp":
                self.critic_rnn = RecurrentCore(self.critic_kind, self.core_size)
        post = functools.partial(
            MLP, tuple(self.post_sizes), self.activation, dtype=self.compute_dtype
        )
        if self.post_sizes and self.actor_kind != "mlp":
            self.actor_post = post()
        if self.post_sizes and (self.critic_kind != "mlp" or self.shared):
            self.critic_post = post()
        self.actor_head = ActionHead(self.spec, self.compute_dtype)
        self.value_head = DenseParams(
            1, kernel_init=orthogonal(1.0), bias_init=nn.initializers.zeros
        )

    def _heads(
        self, carry: dict, obs: jax.Array, critic_obs: Any, ends: Any, actor: bool, critic: bool
    ) -> tuple[dict, Any, Any]:
        """The torsos, the cores (one time scan for both) and the heads of the actor and/or
        the critic; ``ends=False``: ``obs [..., O]`` is one step (no reset)."""
        feats, cores, names = {}, [], []
        if self.shared and critic_obs is not None:
            raise ValueError("a shared torso and core cannot read a critic input")
        if actor or self.shared:
            feats["actor"] = self.actor_torso(obs)
        if critic and not self.shared:
            feats["critic"] = self.critic_torso(obs if critic_obs is None else critic_obs)
        for name, kind in (("actor", self.actor_kind), ("critic", self.critic_kind)):
            if name in feats and kind != "mlp":
                cores.append(self.actor_rnn if name == "actor" else self.critic_rnn)
                names.append(name)
        if cores:
            xs = [feats[n] if ends is not False else feats[n][None] for n in names]
            cs, ys = run_cores(
                cores, [carry[n] for n in names], xs, None if ends is False else ends
            )
            carry = {**carry, **dict(zip(names, cs, strict=True))}
            for n, y in zip(names, ys, strict=True):
                feats[n] = y[0] if ends is False else y
        if self.shared and critic:
            feats["critic"] = feats["actor"]
        if self.post_sizes:  # the MLPs after the cores
            if actor and self.actor_kind != "mlp":
                feats["actor"] = self.actor_post(feats["actor"])
            if critic and (self.critic_kind != "mlp" or self.shared):
                feats["critic"] = self.critic_post(feats["critic"])
        dist = self.actor_head(feats["actor"]) if actor else None
        value = None
        if critic:
            h = feats["critic"]
            value = affine(h, *self.value_head(h.shape[-1]), self.compute_dtype)[..., 0]
        return carry, dist, value

    def __call__(
        self,
        carry: dict[str, jax.Array],
        obs: jax.Array,
        ends: jax.Array,
        critic_obs: jax.Array | None = None,
    ) -> tuple[dict[str, jax.Array], Any, jax.Array]:
        return self._heads(carry, obs, critic_obs, ends, True, True)

    def step(
        self, carry: dict[str, jax.Array], obs: jax.Array, critic_obs: jax.Array | None = None
    ) -> tuple[dict[str, jax.Array], Any, jax.Array]:
        """One step of ``obs [..., O]`` (no reset): ``(carry, dist [...], value [...])``."""
        return self._heads(carry, obs, critic_obs, False, True, True)

    def policy_step(
        self, carry: dict[str, jax.Array], obs: jax.Array
    ) -> tuple[dict[str, jax.Array], Any]:
        """The actor alone for one step: ``(carry, dist [...])`` (the critic's carry is
        passed through unchanged)."""
        carry, dist, _ = self._heads(carry, obs, None, False, True, False)
        return carry, dist

    def value_step(
        self, carry: dict[str, jax.Array], obs: jax.Array, critic_obs: jax.Array | None = None
    ) -> jax.Array:
        """``[...]`` value of one step from ``carry`` (the new carry is dropped)."""
        return self._heads(carry, obs, critic_obs, False, False, True)[2]

"""TagContinuous's observations in plain JAX (the reference and the CPU path), and the
layout rules the observation kernels share with them.

Agent ``i`` observes, feature-major (for each of the 7 features ``f``, its neighbour
slots ``s``), with ``rel_f = 1`` for the five relative features ``f < 5`` (Δx, Δy,
Δspeed, Δacceleration, Δθ; 0 for type and in-game) and ``g`` the in-game flags as 1.0/0.0:

* k-nearest (`knn_obs_xla`), from the neighbour lists ``idx, valid [M, k]``::

      out[i, f·k + s] = (feats[f, idx[i, s]] − feats[f, i]·rel_f) / scale[f] · mask[i, s]
      out[i, 7k]      = time · g[i]

  with ``mask = valid & in_game[i]``: an agent out of the game sees zeros, and so does an
  empty slot (the searches pad those with ``idx = i``).
* full (`full_obs_xla`), every ``j != i`` in id order (``j = j' + (j' >= i)``)::

      out[i, f·(M−1) + j'] = (feats[f, j] − feats[f, i]·rel_f) / scale[f] · keep_if
      out[i, 7(M−1)]       = time · g[i]

  with ``keep_if = g[i]`` for ``f < 5`` and 1 otherwise.

``rows`` is a static sequence of observing agent ids (``range(lo, hi)`` for a contiguous
group, or any ids); row ``r`` of the result observes agent ``rows[r]``.

Division and bit-exactness: XLA's algebraic simplifier turns ``x / broadcast(s)`` into
``x * broadcast(1/s)`` on the CPU backend only, and ``x / constant`` into ``x *
(1/constant)`` on every backend; the two can differ by one ulp. So XLA computes these
forms' division as ``x * (1/scale)`` on the CPU, or where the scale is a compile-time
constant (params closed over), and as a true division otherwise (GPU with traced params).
The kernels are told which (`reference_uses_reciprocal`) and do the same, so they agree
with these forms bit for bit.
"""

from __future__ import annotations

from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np

__all__ = [
    "NUM_FEATURES",
    "NUM_RELATIVE",
    "check_features",
    "check_lists",
    "full_obs_size",
    "full_obs_xla",
    "knn_obs_size",
    "knn_obs_xla",
    "reference_uses_reciprocal",
    "row_ids",
    "with_valid",
]

#: Features per other agent: Δx, Δy, Δspeed, Δacceleration, Δθ, type, in-game.
NUM_FEATURES = 7
#: The first ``NUM_RELATIVE`` features are relative (``value_j − value_i``, scaled).
NUM_RELATIVE = 5

_RELATIVE = np.array([1] * NUM_RELATIVE + [0] * (NUM_FEATURES - NUM_RELATIVE), np.float32)


def knn_obs_size(k: int) -> int:
    """``7k+1`` values per observation of ``k`` neighbours."""
    return NUM_FEATURES * int(k) + 1


def full_obs_size(num_agents: int) -> int:
    """``7(M−1)+1`` values per full observation of ``M`` agents."""
    return NUM_FEATURES * (int(num_agents) - 1) + 1


def reference_uses_reciprocal(constant_scale: bool, backend: str | None = None) -> bool:
    """Whether XLA compiles the reference's ``x / broadcast(scale)`` into ``x *
    broadcast(1/scale)``: on the CPU backend always, elsewhere only when the scale is a
    compile-time constant (see the module docstring). ``backend`` defaults to
    `jax.default_backend`."""
    backend = jax.default_backend() if backend is None else backend
    return bool(constant_scale) or backend == "cpu"


def row_ids(rows: Sequence[int], m: int) -> tuple[np.ndarray, int | None]:
    """``rows`` as an int32 array ``[n]`` and its first id if contiguous (else None)."""
    ids = np.asarray(tuple(rows), np.int32).reshape(-1)
    if ids.size == 0 or np.any(ids < 0) or np.any(ids >= m) or np.unique(ids).size != ids.size:
        raise ValueError(f"rows must be distinct agent ids in [0, {m - 1}], got {tuple(rows)}")
    contiguous = bool(np.all(np.diff(ids) == 1))
    return ids, (int(ids[0]) if contiguous else None)


def _own(x: jax.Array, ids: np.ndarray, lo: int | None) -> jax.Array:
    """``x[..., rows]`` along the last axis: a static slice when contiguous."""
    if lo is not None:
        return x[..., lo : lo + ids.size]
    return x[..., ids]


def check_features(feats: jax.Array, scale: jax.Array, in_game: jax.Array, min_agents: int) -> int:
    """Validates ``feats [7, M]`` (``M >= min_agents``), ``scale [7]`` and ``in_game [M]``;
    returns ``M``."""
    if feats.ndim != 2 or feats.shape[0] != NUM_FEATURES or feats.shape[1] < min_agents:
        raise ValueError(
            f"feats must be [{NUM_FEATURES}, M] with M >= {min_agents}, got {feats.shape}"
        )
    m = feats.shape[1]
    if scale.shape != (NUM_FEATURES,):
        raise ValueError(f"scale must be [{NUM_FEATURES}], got {scale.shape}")
    if in_game.shape != (m,):
        raise ValueError(f"in_game must be [M] = [{m}], got {in_game.shape}")
    return m


def check_lists(idx: jax.Array, valid: jax.Array | None, m: int) -> int:
    """Validates the neighbour lists ``idx [M, k]`` (integer) and ``valid`` (bool, idx's
    shape; ``None``: ``idx`` holds ``−1`` in empty slots); returns ``k``."""
    if idx.ndim != 2 or idx.shape[0] != m or idx.shape[1] < 1:
        raise ValueError(f"idx must be [M, k] = [{m}, k] with k >= 1, got {idx.shape}")
    if not jnp.issubdtype(idx.dtype, jnp.integer):
        raise ValueError(f"idx must be integer, got {idx.dtype}")
    if valid is not None and valid.shape != idx.shape:
        raise ValueError(f"valid must have idx's shape {idx.shape}, got {valid.shape}")
    if valid is not None and valid.dtype != jnp.bool_:
        raise ValueError(f"valid must be bool, got {valid.dtype}")
    return idx.shape[1]


def with_valid(lists: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Neighbour lists ``[M, k]`` with ``−1`` in empty slots -> ``(idx, valid)`` with
    ``idx = i`` in row ``i``'s empty slots (`neighbors.nearest_k`'s convention)."""
    valid = lists >= 0
    own = jnp.arange(lists.shape[0], dtype=jnp.int32)[:, None]
    return jnp.where(valid, lists.astype(jnp.int32), own), valid


def knn_obs_xla(
    feats: jax.Array,
    idx: jax.Array,
    valid: jax.Array | None,
    rows: Sequence[int],
    scale: jax.Array,
    in_game: jax.Array,
    time: jax.Array,
) -> jax.Array:
    """The k-nearest observation of agents ``rows``: ``[n, 7k+1]`` float32.

    Args:
      feats: ``[7, M]`` float32: x, y, speed, acceleration, direction, type, in-game.
      idx: ``[M, k]`` int32 neighbour ids in ``[0, M)`` (the search's, all agents).
      valid: ``[M, k]`` bool, which slots hold a neighbour; ``None``: ``idx`` holds
        ``−1`` in its empty slots (the kernels' lists; read as padded with ``i``).
      rows: static agent ids observing (``n`` of them), e.g. ``range(lo, hi)``.
      scale: ``[7]`` float32 divisors of the features (1 for type and in-game).
      in_game: ``[M]`` bool.
      time: ``[]`` float32, ``t/E``.
    """
    m = check_features(feats, scale, in_game, 1)
    check_lists(idx, valid, m)
    if in_game.dtype != jnp.bool_:
        raise ValueError(f"in_game must be bool, got {in_game.dtype}")
    if valid is None:
        idx, valid = with_valid(idx)
    ids, lo = row_ids(rows, m)
    n = ids.size
    relative = _RELATIVE[None, :, None]  # [1, 7, 1]
    own = _own(feats, ids, lo).T[:, :, None]  # [n, 7, 1]
    g_own = _own(in_game.astype(jnp.float32), ids, lo)[:, None, None]  # [n, 1, 1]
    idx_r = idx[lo : lo + n] if lo is not None else idx[ids]  # [n, k]
    valid_r = valid[lo : lo + n] if lo is not None else valid[ids]
    mask = (valid_r & _own(in_game, ids, lo)[:, None]).astype(jnp.float32)[:, None, :]
    other = jnp.transpose(feats[:, idx_r], (1, 0, 2))  # [n, 7, k]
    out = (other - own * relative) / scale[None, :, None] * mask  # [n, 7, k]
    return jnp.concatenate([out.reshape(n, -1), (time * g_own[:, 0])], axis=1)


def full_obs_xla(
    feats: jax.Array, rows: Sequence[int], scale: jax.Array, g: jax.Array, time: jax.Array
) -> jax.Array:
    """The full observation of agents ``rows``: ``[n, 7(M−1)+1]`` float32.

    Args:
      feats: ``[7, M]`` float32: x, y, speed, acceleration, direction, type, in-game.
      rows: static agent ids observing (``n`` of them), e.g. ``range(M)``.
      scale: ``[7]`` float32 divisors of the features (1 for type and in-game).
      g: ``[M]`` float32 in-game flags (1 or 0).
      time: ``[]`` float32, ``t/E``.
    """
    m = check_features(feats, scale, g, 2)
    ids, lo = row_ids(rows, m)
    n = ids.size
    relative = _RELATIVE[None, :, None]  # [1, 7, 1]
    own = _own(feats, ids, lo).T[:, :, None]  # [n, 7, 1]
    g_own = _own(g, ids, lo)[:, None, None]  # [n, 1, 1]
    # neighbour slot j' of agent i is agent j' + (j' >= i): one static gather.
    cols = jnp.arange(m - 1, dtype=jnp.int32)[None, :]
    first = jnp.arange(lo, lo + n, dtype=jnp.int32) if lo is not None else jnp.asarray(ids)
    others = cols + (cols >= first[:, None])  # [n, M-1]
    other = jnp.transpose(feats[:, others], (1, 0, 2))  # [n, 7, M-1]
    keep = jnp.where(relative > 0, g_own, 1.0)  # out of game: relative parts zero
    out = (other - own * relative) / scale[None, :, None] * keep  # [n, 7, M-1]
    return jnp.concatenate([out.reshape(n, -1), (time * g_own[:, 0])], axis=1)

"""Ahead-of-time compilation in worker threads (`jaxdrive.aot`) and the host loop's
programs (`jaxdrive.loop_programs`)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from jaxdrive.aot import compile_async, matches, wait_pending
from jaxdrive.loop_programs import finite_flags, float_leaves


def test_programs_compile_side_by_side_and_match_their_arguments():
    def f(x, n):
        return {"y": x["a"] * n, "z": jnp.sum(x["b"])}

    jitted = jax.jit(f)
    x = {"a": jnp.arange(3.0), "b": jnp.ones((2, 2), jnp.int32)}
    abstract = jax.tree.map(lambda v: jax.ShapeDtypeStruct(v.shape, v.dtype), x)
    jobs = [  # lowered here, compiled in worker threads
        compile_async(jitted, abstract, jax.ShapeDtypeStruct((), jnp.float32)),
        compile_async(jax.jit(lambda v: v + 1).trace(jnp.zeros(4))),  # a traced program
    ]
    (exe, info), (exe2, info2) = (j.result() for j in jobs)
    assert info.name == "f" and info.lower_seconds > 0 and info.compile_seconds > 0
    assert info.from_cache in ("yes", "no", "no, the persistent cache is off")
    assert "compiled in" in info.text() and jitted._cache_size() == 0  # jit never compiled
    out = exe(x, np.float32(2.0))
    np.testing.assert_array_equal(out["y"], [0.0, 2.0, 4.0])
    np.testing.assert_array_equal(exe2(jnp.ones(4)), 2 * np.ones(4))
    assert matches(exe, (x, np.float32(2.0)))
    assert not matches(exe, ({**x, "a": jnp.arange(4.0)}, np.float32(2.0)))  # shape
    assert not matches(exe, ({**x, "b": jnp.ones((2, 2))}, np.float32(2.0)))  # dtype
    assert not matches(exe, ({"a": x["a"]}, np.float32(2.0)))  # structure


def test_wait_pending_returns_when_every_started_compilation_has_finished():
    jobs = [compile_async(jax.jit(lambda v, k=k: jnp.cumsum(v) * k), jnp.zeros(64)) for k in (2, 3)]
    wait_pending()
    assert all(j.done() for j in jobs)
    wait_pending()  # none pending: returns at once


def test_finite_flags_name_every_float_leaf():
    tree = {"p": {"w": jnp.array([1.0, jnp.nan])}, "i": jnp.int32(3), "b": jnp.zeros(2)}
    names, _ = float_leaves(tree)
    assert names == ["b", "p/w"]
    np.testing.assert_array_equal(finite_flags(tree), [True, False])
    assert finite_flags({"i": jnp.int32(1)}).shape == (0,)


def test_cache_event_listeners_leave_in_any_order():
    """Compilations in several threads each register a listener; one leaving first, with
    the same events recorded so far as another, must not unregister the other's (the
    listeners are removed by equality)."""
    from jaxdrive.aot import _CacheEvents

    first, second = _CacheEvents(), _CacheEvents()
    first.__enter__()
    second.__enter__()
    second.__exit__(None, None, None)  # both empty: equal as lists would be
    first("/jax/compilation_cache/cache_hits")
    first.__exit__(None, None, None)
    assert first.from_cache() == "yes" and second.from_cache() == "no, the persistent cache is off"

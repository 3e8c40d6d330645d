"""TagContinuous's Pallas kernels (Triton lowering on a GPU, interpret mode elsewhere).

Modules (this package imports none of them, so any may be imported alone):

* `search`: the k-nearest neighbour searches' public entry points (`search.nearest_k`,
  `search.nearest_k_batched`, `search.nearest_k_lists`, `search.select_method`, ...).
* `brute`, `grid` (with `grid_prep`), `sorted` (with `sorted_prep`): the three exact
  searches; `packed`: their shared per-lane lists (packed keys, merge networks, exact
  re-sort, list store).
* `obs_writer`, `full_obs`: the observation writers; `batched_step` (with
  `batched_step_kernel`, `threefry`): the batched env step.
* `triton`: helpers shared by every kernel (block sizes, interpret mode, compiler
  parameters, exact division, FMA fence).

The plain-JAX reference of the searches is `environments.tag_continuous.neighbors`.
"""

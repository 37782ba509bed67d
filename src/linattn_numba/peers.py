"""Optional peers for side-by-side timing: flash-linear-attention (fla, Triton) and PyTorch's softmax attention.

Never required: each peer is offered only when its package imports. All peers take the very same device buffers
as the rungs (zero-copy through ``__cuda_array_interface__``), in the project's layout ``[B, T, H, K]``, which is
also fla's default layout.

fla's Triton kernels are autotuned on their first call, and the autotune key of its chunk kernels names the chunk
size, the gates and K, V, but not T or the number of heads: a config tuned at one shape is reused at every other
(in the process, and through Triton's on-disk cache by another process on the same machine). At B1 T1M H2 the
config tuned at B4 T8192 H16 makes ``chunk_simple_gla`` much slower than the one tuned there (the ``fla_retune``
probe in ``figures/data/probes``). :func:`fla_peers` therefore forgets every tuned config first
(:func:`retune_fla`): each peer is timed with the config that its own shape picks.
"""

from __future__ import annotations

import importlib
import os
import sys

# Before fla is imported (it reads this once): no autotune results from Triton's disk cache, which a process timing
# another shape may have written (the key does not hold the shape; see above). A value the user set is kept.
os.environ.setdefault("FLA_CACHE_RESULTS", "0")


def _try(modname):
    try:
        return importlib.import_module(modname)
    except Exception:  # noqa: BLE001 - any import failure means "peer not available"
        return None


def versions() -> dict:
    """Versions of the peer packages that import (absent ones omitted)."""
    out = {}
    for name, mod in (("torch", "torch"), ("triton", "triton"), ("fla", "fla")):
        m = _try(mod)
        if m is not None:
            out[name] = getattr(m, "__version__", "?")
    return out


def _torch(d):
    import torch

    return torch.as_tensor(d, device="cuda")


# recurrence -> (fla module, its chunk and fused-recurrent entry points); all take g= / beta= as keywords
_FLA = {
    "plain": ("fla.ops.simple_gla", ("chunk_simple_gla", "fused_recurrent_simple_gla")),
    "decay": ("fla.ops.simple_gla", ("chunk_simple_gla", "fused_recurrent_simple_gla")),
    "delta": ("fla.ops.delta_rule", ("chunk_delta_rule", "fused_recurrent_delta_rule")),
    "gated_delta": ("fla.ops.gated_delta_rule", ("chunk_gated_delta_rule", "fused_recurrent_gated_delta_rule")),
}


def _autotuners(obj, seen):
    """The Triton autotuners in ``obj``'s chain of wrappers (``triton.heuristics`` wraps ``triton.autotune``: each
    holds the next as ``fn``)."""
    from triton.runtime.autotuner import Autotuner

    while obj is not None and id(obj) not in seen:
        seen.add(id(obj))
        if isinstance(obj, Autotuner):
            yield obj
        obj = getattr(obj, "fn", None)


def fla_autotuners():
    """``(module.name, autotuner)`` for every Triton autotuner of fla's modules imported so far, each once (an
    autotuner that several names or wrappers reach is yielded under the first). Empty without Triton."""
    if _try("triton") is None:
        return
    seen = set()
    for name, mod in list(sys.modules.items()):
        if mod is None or not (name == "fla" or name.startswith("fla.")):
            continue
        for attr, obj in list(vars(mod).items()):
            for at in _autotuners(obj, seen):
                yield f"{name}.{attr}", at


def retune_fla() -> int:
    """Forget the configs that fla's autotuned kernels chose (:func:`fla_autotuners`): their next calls tune
    again, at the shape they are then called with. Also turns off their on-disk result cache (Triton's
    ``cache_results``), which would hand back a config tuned at another shape. Returns the number of autotuners
    reset (0 without fla or Triton)."""
    n = 0
    for _, at in fla_autotuners():
        at.cache.clear()
        if hasattr(at, "cache_results"):
            at.cache_results = False
        n += 1
    return n


def fla_peers(recurrence: str, retune: bool = True) -> dict:
    """``{name: fn(q, k, v, g, beta, initial_state, output_final_state) -> (o, ht)}`` for a recurrence.

    Inputs are device arrays (any ``__cuda_array_interface__``); outputs are torch tensors. Empty without fla.
    ``retune`` (the default): :func:`retune_fla` first, so that the peers' first calls tune for the shape they are
    given (call this once per shape, before the first call at it).
    """
    if _try("fla") is None or _try("torch") is None:
        return {}
    modname, names = _FLA[recurrence]
    mod = importlib.import_module(modname)
    if retune:
        retune_fla()

    def bind(fn):
        def call(q, k, v, g, beta, h0, oft):
            kw = {name: _torch(a) for name, a in (("g", g), ("beta", beta)) if a is not None}
            return fn(_torch(q), _torch(k), _torch(v), **kw,
                      initial_state=None if h0 is None else _torch(h0), output_final_state=oft)
        return call

    return {f"fla_{name}": bind(getattr(mod, name)) for name in names}


def softmax_peer():
    """Causal softmax attention (``torch.nn.functional.scaled_dot_product_attention``), or None without torch."""
    torch = _try("torch")
    if torch is None:
        return None

    def sdpa(q, k, v, g=None, beta=None, h0=None, oft=False):
        tq, tk, tv = (_torch(x).transpose(1, 2) for x in (q, k, v))  # [B, H, T, D]
        o = torch.nn.functional.scaled_dot_product_attention(tq, tk, tv, is_causal=True)
        return o.transpose(1, 2), None

    return sdpa

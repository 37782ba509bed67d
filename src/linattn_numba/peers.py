"""Optional peers for side-by-side timing: flash-linear-attention (fla, Triton) and PyTorch's softmax attention.

Never required: each peer is offered only when its package imports. All peers take the very same device buffers
as the rungs (zero-copy through ``__cuda_array_interface__``), in the project's layout ``[B, T, H, K]``, which is
also fla's default layout.
"""

from __future__ import annotations

import importlib


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


def fla_peers(recurrence: str) -> dict:
    """``{name: fn(q, k, v, g, beta, initial_state, output_final_state) -> (o, ht)}`` for a recurrence.

    Inputs are device arrays (any ``__cuda_array_interface__``); outputs are torch tensors. Empty without fla.
    """
    if _try("fla") is None or _try("torch") is None:
        return {}
    modname, names = _FLA[recurrence]
    mod = importlib.import_module(modname)

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

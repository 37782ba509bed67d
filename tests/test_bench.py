"""``linattn-numba bench`` without a GPU: it refuses (simulator timings mean nothing), and its choices that need no
GPU (which fla peers ``--fla`` keeps, the counted FLOPs and bytes) are checked here; the timings themselves are
produced on the H200 (tools/h200.sh)."""

import pytest

from linattn_numba import bench, cli


def test_refuses_without_a_gpu(tmp_path):
    with pytest.raises(SystemExit, match="needs a CUDA GPU"):
        cli.main(["bench", "--rungs", "naive", "--no-peers", "--out", str(tmp_path / "x.json")])
    assert not (tmp_path / "x.json").exists()


@pytest.mark.parametrize("fla,expected", [
    ("all", {"fla_chunk_simple_gla", "fla_fused_recurrent_simple_gla"}),
    ("chunk", {"fla_chunk_simple_gla"}),
    ("fused_recurrent", {"fla_fused_recurrent_simple_gla"}),
])
def test_fla_peer_filter(fla, expected):
    names = ["fla_chunk_simple_gla", "fla_fused_recurrent_simple_gla"]
    assert {n for n in names if bench.wanted_peer(n, fla)} == expected


def test_fla_peer_filter_rejects_unknown():
    with pytest.raises(ValueError, match="fla must be"):
        bench.wanted_peer("fla_chunk_simple_gla", "triton")


def test_cli_rejects_unknown_fla_choice(capsys):
    with pytest.raises(SystemExit):
        cli.main(["bench", "--fla", "triton"])
    assert "invalid choice" in capsys.readouterr().err


def test_counted_work_grows_with_the_recurrence():
    """The delta rule counts more FLOPs than the additive recurrences at the same shape; bytes grow with T."""
    shape = (1, 64, 2, 16, 16)
    flops = {r: bench.counted_flops(r, *shape) for r in ("plain", "decay", "delta", "gated_delta")}
    assert flops["delta"] > flops["plain"] > 0 and flops["gated_delta"] >= flops["delta"]
    assert bench.counted_bytes("plain", 1, 128, 2, 16, 16) > bench.counted_bytes("plain", *shape)


@pytest.mark.parametrize("argv,expected", [([], None), (["--tune"], "all"), (["--tune", "step"], "step"),
                                           (["--tune", "seq"], "seq")])
def test_tune_choice_reaches_the_bench(monkeypatch, argv, expected):
    seen = []
    monkeypatch.setattr(bench, "run", lambda args: seen.append(args.tune))
    assert cli.main(["bench", *argv]) == 0
    assert seen == [expected]


def test_cli_rejects_unknown_tune_choice(capsys):
    with pytest.raises(SystemExit):
        cli.main(["bench", "--tune", "everything"])
    assert "invalid choice" in capsys.readouterr().err


def test_step_tune_configs_are_valid():
    """Every (SW, CS, SMB, VEC) of the step sweep is a launch r1 accepts: K = 128 splits evenly over SW warps,
    at most 1024 threads per block, VEC is 0 or 1."""
    for sw, cs, smb, vec in bench.STEP_CONFIGS:
        assert 128 % sw == 0 and sw * 32 <= 1024 and cs >= 1 and smb >= 1 and vec in (0, 1)


def test_sequence_tune_configs_are_valid():
    """Every (COLS, NW, TC, NS, ASYNC) of r1's sweep is a launch r1 accepts at the standard K = V = 128, and each
    ASYNC = 1 entry really gets the double buffer there (it fits the static shared memory), so the sweep's
    records compare the two stagings rather than a fallback with itself."""
    from types import SimpleNamespace

    import numpy as np

    from linattn_numba.rungs import r1_recurrent as r1

    def spec(last):  # what staging() reads of an array: shape, dtype, strides (the simulator skips the pointer)
        return SimpleNamespace(shape=(4, 8192, 16, last), dtype=np.dtype(np.float32),
                               strides=(8192 * 16 * last * 4, 16 * last * 4, last * 4, 4))

    for cols, nw, tc, ns, asy in bench.TUNE_CONFIGS:
        assert cols <= ns and 32 % ns == 0 and 1 <= tc <= 32 and nw * 32 <= 1024 and asy in (0, 1)
        used, tc_used = r1.staging(spec(128), spec(128), spec(128), cols, nw, ns, tc, bool(asy))
        assert (used, tc_used) == (bool(asy), tc), (cols, nw, tc, ns, asy)


def test_only_step_flag_reaches_the_bench(monkeypatch):
    seen = []
    monkeypatch.setattr(bench, "run", lambda args: seen.append((args.only_step, args.tune)))
    assert cli.main(["bench", "--only-step", "--tune", "step"]) == 0
    assert seen == [(True, "step")]


def test_apply_best_takes_the_least_total_time_over_the_tuned_recurrences(monkeypatch):
    """With the sweep timed on several recurrences, r1 keeps the launch with the least total time (not the one
    fastest on one recurrence), then per recurrence the faster staging with its COLS, NW, NS, and ignores failed
    or inaccurate records."""
    from linattn_numba.rungs import r1_recurrent as r1

    for name in ("DEFAULT_COLS", "DEFAULT_NW", "NS", "TC", "TC_ASYNC", "STAGE_ASYNC"):
        monkeypatch.setattr(r1, name, getattr(r1, name))

    def rec(cols, asy, recurrence, ms, rel_err=1e-7):
        return dict(key="recurrent", cols=cols, nw=8, tc=32 if asy else 16, ns=8, asy=asy, recurrence=recurrence,
                    median_ms=ms, rel_err=rel_err)

    tune = [rec(2, 1, "gated_delta", 3.5), rec(2, 1, "delta", 3.9),  # fastest on gated delta, 7.4 in all
            rec(1, 0, "gated_delta", 3.6), rec(1, 0, "delta", 3.3),  # 6.9 in all: kept
            rec(1, 1, "gated_delta", 3.7), rec(1, 1, "delta", 3.2),  # 6.9 too, but the other staging
            rec(4, 0, "gated_delta", 1.0, rel_err=1.0), rec(4, 0, "delta", 1.0)]  # wrong: never kept
    chosen = bench.apply_best(tune)
    assert chosen == dict(cols=1, nw=8, tc=16, ns=8, asy={"delta": 1, "gated_delta": 0})
    assert (r1.DEFAULT_COLS, r1.TC, r1.TC_ASYNC) == (1, 16, 32)
    assert r1.STAGE_ASYNC["delta"] and not r1.STAGE_ASYNC["gated_delta"]


def test_r1_defaults_are_what_the_committed_sweep_chose(monkeypatch):
    """r1's launch defaults (COLS, NW, NS, TC, TC_ASYNC and the staging per recurrence) are what ``apply_best``
    picks from the newest committed H200 sweep of the sequence kernel: rerunning ``bench --tune`` and
    committing its file without following it in the rung fails here."""
    import json
    from pathlib import Path

    from linattn_numba.rungs import r1_recurrent as r1

    names = ("DEFAULT_COLS", "DEFAULT_NW", "NS", "TC", "TC_ASYNC", "STAGE_ASYNC")
    defaults = {n: getattr(r1, n) for n in names}
    for n in names:
        monkeypatch.setattr(r1, n, defaults[n])
    data = Path(__file__).resolve().parents[1] / "figures" / "data"
    sweeps = [json.loads(p.read_text()) for p in data.glob("h200_*.json")]
    sweeps = [d for d in sweeps if any("cols" in t and "asy" in t for t in d.get("tune", []))]
    assert sweeps, "no committed sweep of r1's sequence kernel with both stagings"
    newest = max(sweeps, key=lambda d: d["date"])
    bench.apply_best(newest["tune"])
    assert {n: getattr(r1, n) for n in names} == defaults


def test_retune_fla_forgets_every_tuned_config(monkeypatch):
    """fla's autotune keys hold neither T nor the heads, so a config tuned at one shape would be reused at the
    next one timed: ``peers.retune_fla`` clears every autotuner of fla's imported modules, also one wrapped by
    ``triton.heuristics`` (reached through ``.fn``), and turns off Triton's disk cache of results. Checked with
    stand-ins for Triton's Autotuner and fla's modules (neither is installed here)."""
    import sys
    import types

    from linattn_numba import peers

    class Autotuner:
        def __init__(self):
            self.cache = {("key",): "config tuned at another shape"}
            self.cache_results = True

    class Heuristics:  # triton.heuristics: holds the autotuner as .fn
        def __init__(self, fn):
            self.fn = fn

    runtime = types.ModuleType("triton.runtime")
    autotuner = types.ModuleType("triton.runtime.autotuner")
    autotuner.Autotuner = Autotuner
    triton = types.ModuleType("triton")
    bare, wrapped, other = Autotuner(), Autotuner(), Autotuner()
    fla_mod = types.ModuleType("fla.ops.fake")
    fla_mod.kernel, fla_mod.wrapped, fla_mod.again = bare, Heuristics(wrapped), bare  # `again`: counted once
    not_fla = types.ModuleType("flax.fake")  # a module whose name only starts like fla's
    not_fla.kernel = other
    for name, mod in (("triton", triton), ("triton.runtime", runtime), ("triton.runtime.autotuner", autotuner),
                      ("fla.ops.fake", fla_mod), ("flax.fake", not_fla)):
        monkeypatch.setitem(sys.modules, name, mod)
    assert peers.retune_fla() == 2
    assert bare.cache == {} and wrapped.cache == {} and not bare.cache_results and not wrapped.cache_results
    assert other.cache and other.cache_results  # not fla's: left alone


def test_varied_constants():
    """The tuning tools' ``--vary``: a constant per spec with its values (digits as ints), every combination in
    order; no spec gives the one empty combination; a constant the module lacks stops the tool with its name."""
    from linattn_numba.rungs import r3_shared as r3
    from linattn_numba.rungs import r4_scan as r4

    varied, combos = bench.varied_constants(["r3_shared.SPLIT_BV=32,64", "r4_scan.SPLIT_OUT=shared,tensor_cores"])
    assert [(m, n, v) for m, n, v in varied] == [(r3, "SPLIT_BV", [32, 64]),
                                                (r4, "SPLIT_OUT", ["shared", "tensor_cores"])]
    assert combos == [(32, "shared"), (32, "tensor_cores"), (64, "shared"), (64, "tensor_cores")]
    assert bench.varied_constants(None) == ([], [()])
    with pytest.raises(SystemExit, match="r3_shared has no X_PREFETCH"):
        bench.varied_constants(["r3_shared.X_PREFETCH=none,l1"])


def test_fma_peak_kernel_matches_its_closed_form():
    """The fp32-peak probe of ``linattn-numba bench`` computes what it claims (in the simulator, a few threads): the
    bench checks the same closed form on the GPU before it times the kernel, so a miscompiled or short-cut loop
    fails there instead of reporting a rate."""
    import numpy as np
    from numba import cuda

    from linattn_numba import fma_peak as fp

    out = cuda.to_device(np.full(40, np.nan, np.float32))
    for iters in (1, 3):
        fp.fma_peak[2, 16](out, np.float32(fp.A), np.float32(fp.B), np.int64(iters))
        got = out.copy_to_host()
        want = fp.expected(iters)
        assert np.all(np.abs(got[:32] - want) <= 1e-5 * abs(want)), (got[:4], want)
        assert np.isnan(got[32:]).all()  # threads past the grid write nothing
    assert fp.expected(1) != fp.expected(3)

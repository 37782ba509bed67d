"""The Nsight Compute CSV parser (:mod:`linattn_numba.ncu`) on small hand-written inputs in ncu's format.

The snippets follow ``ncu --csv --page details`` output: a preamble of ``==PROF==`` lines and program output,
then one row per (launch, section, metric), with thousands separators in values, units that differ between ncu
versions, and (newer versions) rule columns after ``Metric Value``.
"""

import pytest

from linattn_numba import ncu

HEAD = ('"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size",'
        '"Device","CC","Section Name","Metric Name","Metric Unit","Metric Value"')
SCORES = ("linattn_numba::rungs::r2_chunked::_scores_kernel::_3clocals_3e::scores[abi:v1][abi:cw51cXTLSU]"
          "(Array<float, 4, A, mutable, aligned>, Array<float, 4, A, mutable, aligned>, long long)")
STATE = "_ZN13linattn_numba5rungs10r2_chunked13_state_kernel12_3clocals_3e5stateB2v1B8cw51cXTLEx"
R1 = ("r1_recurrent::recurrent_kernel[v1,cw51cXTLSUwv1sDUaKthqaNgoKmjgOR3W3Cw6igA9duC0hkwnNGiHEkYkrq_3d_3d]"
      "(Array<float, 4, C, mutable, aligned>, Array<float, 3, C, mutable, aligned>, float)")  # as ncu 2025 prints it


def row(kid, name, block, grid, section, metric, unit, value):
    return (f'"{kid}","4242","python3","127.0.0.1","{name}","1","7","{block}","{grid}","0","9.0",'
            f'"{section}","{metric}","{unit}","{value}"')


def snippet():
    sol = "GPU Speed Of Light Throughput"
    lines = ["==PROF== Connected to process 4242 (/usr/bin/python3.12)", "some program output", HEAD]
    for kid, name, block, grid, dur, dur_unit, sm, mem, occ, regs, smem in (
        (0, R1, "(128, 1, 1)", "(4, 64, 1)", "10,095.84", "usecond", "61.20", "12.04", "12.49", "96", "16.38"),
        (1, SCORES, "(16, 16, 1)", "(128, 64, 10)", "1.21", "msecond", "75.31", "58.10", "88.02", "32", "3.26"),
        (2, STATE, "(32, 8, 1)", "(4, 64, 1)", "9,876,543", "nsecond", "5.00", "3.10", "6.25", "88", "16.38"),
    ):
        lines += [
            row(kid, name, block, grid, sol, "DRAM Frequency", "Ghz", "3.19"),
            row(kid, name, block, grid, sol, "Duration", dur_unit, dur),
            row(kid, name, block, grid, sol, "Compute (SM) Throughput", "%", sm),
            row(kid, name, block, grid, sol, "Memory Throughput", "%", mem),
            row(kid, name, block, grid, sol, "DRAM Throughput", "%", "n/a" if kid == 2 else mem),
            row(kid, name, block, grid, "Launch Statistics", "Registers Per Thread", "register/thread", regs),
            row(kid, name, block, grid, "Launch Statistics", "Static Shared Memory Per Block", "Kbyte/block", smem),
            row(kid, name, block, grid, "Launch Statistics", "Dynamic Shared Memory Per Block", "byte/block", "0"),
            row(kid, name, block, grid, "Occupancy", "Theoretical Occupancy", "%", "100"),
            row(kid, name, block, grid, "Occupancy", "Achieved Occupancy", "%", occ),
            row(kid, name, block, grid, "Warp State Statistics", "Warp Cycles Per Issued Instruction", "cycle",
                "3.25" if kid == 0 else "12.50"),
        ]
    # a stall breakdown for r1 (WarpStateStats body rows) and for the state kernel (raw metrics)
    for metric, val in (("Stall Long Scoreboard", "1.40"), ("Stall Barrier", "0.30"), ("Stall Wait", "0.60"),
                        ("Stall Math Pipe Throttle", "0.95")):
        lines.append(row(0, R1, "(128, 1, 1)", "(4, 64, 1)", "Warp State Statistics", metric, "cycle", val))
    for metric, val in (("smsp__average_warp_latency_issue_stalled_barrier.ratio", "6.00"),
                        ("smsp__average_warp_latency_issue_stalled_long_scoreboard.ratio", "3.00"),
                        ("smsp__average_warp_latency_issue_stalled_barrier_not_issued.ratio", "5.00"),
                        ("smsp__average_warp_latency_issue_stalled_lg_throttle.ratio", "1,000.00")):
        lines.append(row(2, STATE, "(32, 8, 1)", "(4, 64, 1)", "Command line profiler metrics", metric, "", val))
    lines.append("==PROF== Disconnected from process 4242")
    return "\n".join(lines) + "\n"


def test_parses_every_launch_with_its_fields():
    rep = ncu.parse(snippet())
    assert [k.id for k in rep] == [0, 1, 2]
    assert rep.preamble[0].startswith("==PROF== Connected")
    r1, scores, state = rep.kernels
    assert (r1.module, r1.scope, r1.kernel) == (None, "r1_recurrent", "recurrent_kernel")  # short form: no module
    assert (scores.module, scores.scope, scores.kernel) == ("r2_chunked", "_scores_kernel", "scores")
    assert (state.module, state.kernel) == ("r2_chunked", "state")  # from the mangled name
    assert scores.block == (16, 16, 1) and scores.grid == (128, 64, 10)
    # durations in three units, thousands separators
    assert r1.duration_us == pytest.approx(10095.84)
    assert scores.duration_us == pytest.approx(1210.0)
    assert state.duration_us == pytest.approx(9876.543)
    assert scores.sm_throughput_pct == pytest.approx(75.31) and scores.memory_throughput_pct == pytest.approx(58.1)
    assert state.dram_throughput_pct is None  # "n/a"
    assert scores.achieved_occupancy_pct == pytest.approx(88.02)
    assert scores.theoretical_occupancy_pct == 100
    assert r1.registers_per_thread == 96 and isinstance(r1.registers_per_thread, int)
    assert scores.shared_per_block_bytes == pytest.approx(3260.0)  # Kbyte is 1000 bytes in ncu
    assert r1.cycles_per_issue == pytest.approx(3.25)


def test_stall_breakdowns_in_both_spellings():
    r1, scores, state = ncu.parse(snippet()).kernels
    assert r1.stalls == pytest.approx({"long_scoreboard": 1.4, "barrier": 0.3, "wait": 0.6, "math_pipe_throttle": 0.95})
    assert r1.stall_unit == "cycles/issue"
    assert r1.top_stalls(1)[0][0] == "long_scoreboard"
    assert sum(r1.stall_shares().values()) == pytest.approx(1.0)
    # raw metrics: "_not_issued" variants are skipped, 1,000.00 parsed
    assert state.stalls == pytest.approx({"barrier": 6.0, "long_scoreboard": 3.0, "lg_throttle": 1000.0})
    assert scores.stalls == {} and scores.stall_shares() == {} and scores.top_stalls() == []


def test_extra_rule_columns_and_pcsamp_counters():
    head = HEAD + ',"Rule Name","Rule Type","Rule Description","Estimated Speedup Type","Estimated Speedup"'
    text = "\n".join([
        head,
        row(5, "scores", "(16, 16, 1)", "(8, 2, 1)", "GPU Speed Of Light Throughput", "Duration", "us", "2.50")
        + ',"","","","",""',
        row(5, "scores", "(16, 16, 1)", "(8, 2, 1)", "GPU Speed Of Light Throughput", "", "", "")
        + ',"SOLBottleneck","OPT","This kernel grid is too small","global","80"',
        row(5, "scores", "(16, 16, 1)", "(8, 2, 1)", "Raw", "smsp__pcsamp_warps_issue_stalled_barrier", "", "120")
        + ',"","","","",""',
        row(5, "scores", "(16, 16, 1)", "(8, 2, 1)", "Raw", "smsp__pcsamp_warps_issue_stalled_short_scoreboard",
            "", "40") + ',"","","","",""',
    ])
    (k,) = ncu.parse(text).kernels
    assert (k.module, k.kernel) == (None, "scores") and k.duration_us == pytest.approx(2.5)
    assert k.stall_unit == "samples" and k.stall_shares() == pytest.approx({"barrier": 0.75, "short_scoreboard": 0.25})


@pytest.mark.parametrize("name, expected", [
    (SCORES, ("r2_chunked", "_scores_kernel", "scores")),
    (STATE, ("r2_chunked", "_state_kernel", "state")),
    (R1, (None, "r1_recurrent", "recurrent_kernel")),
    ("_state_kernel::state[v5,cw51cXTLSUwv1sD](Array<float, 4, C, mutable, aligned>, long long)",
     (None, "_state_kernel", "state")),
    ("linattn_numba::bench::_fill_kernel::_3clocals_3e::fill[abi:v1](Array<float, 1, C, mutable, aligned>, float)",
     ("bench", "_fill_kernel", "fill")),
    ("ampere_sgemm_128x64_nt", (None, None, "ampere_sgemm_128x64_nt")),  # _12 is not an escape
    ("void at::native::elementwise_kernel<128, 4, at::native::Fill<float> >(int, at::native::Fill<float>)",
     (None, "native", "elementwise_kernel")),
])
def test_kernel_names(name, expected):
    assert ncu.split_name(name) == expected


def test_not_ncu_csv_is_a_clear_error(tmp_path):
    with pytest.raises(ncu.NcuError, match="no Nsight Compute CSV header"):
        ncu.parse("==PROF== Connected\nnothing else\n")
    bad = '"ID","Process ID","Kernel Name"\n"0","1","k"\n'
    with pytest.raises(ncu.NcuError, match="lacks the columns"):
        ncu.parse(bad)


def _fake_module(name, source, tmp_path):
    import importlib.util

    path = tmp_path / f"{name}.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_assign_modules_resolves_short_names(tmp_path):
    """ncu's short names: the factory scope is looked up in the modules' source; a (scope, kernel) pair that two
    modules define goes with the launch before it."""
    mod_a = _fake_module("ra_chunked", "def _scores_kernel():\n    def scores(): pass\n\n"
                         "def _state_kernel():\n    def state(): pass\n", tmp_path)
    mod_b = _fake_module("rb_shared", "def _intra_kernel():\n    def intra(): pass\n\n"
                         "def _state_kernel():\n    def state(): pass\n\ndef top_kernel(): pass\n", tmp_path)
    index = ncu.kernel_index([mod_a, mod_b])
    assert index[("_state_kernel", "state")] == ["ra_chunked", "rb_shared"]
    assert index[("rb_shared", "top_kernel")] == ["rb_shared"] and index[("rb_shared", "intra")] == ["rb_shared"]
    names = ["_scores_kernel::scores[v1](float)", "_state_kernel::state[v2](float)",
             "_intra_kernel::intra[v3](float)", "_state_kernel::state[v4](float)", "rb_shared::top_kernel[v5]()",
             "other::thing[v6]()"]
    text = "\n".join([HEAD] + [row(i, n, "(1, 1, 1)", "(1, 1, 1)", "S", "Duration", "us", "1") for i, n in
                                enumerate(names)])
    ks = ncu.assign_modules(ncu.parse(text).kernels, index)
    assert [k.module for k in ks] == ["ra_chunked", "ra_chunked", "rb_shared", "rb_shared", "rb_shared", None]
    assert ks[1].label == "ra_chunked.state" and ks[5].label == "other::thing"


def test_launch_groups_and_summary():
    rep = ncu.parse(snippet())
    groups = ncu.launch_groups(rep.kernels)
    assert [(m, [k.kernel for k in ks]) for m, ks in groups] == [
        (None, ["recurrent_kernel"]), ("r2_chunked", ["scores", "state"])]
    twice = ncu.parse(snippet() + "\n".join(
        ln.replace('"0","4242"', '"3","4242"') for ln in snippet().splitlines() if ln.startswith('"0",')))
    groups = ncu.launch_groups(twice.kernels)
    assert [len(ks) for _, ks in groups] == [1, 2, 1]  # the second r1 launch starts a new group
    summ = dict(ncu.summarize(twice.kernels))
    assert summ["r1_recurrent::recurrent_kernel"]["launches"] == 2
    assert summ["r2_chunked.scores"]["duration_us"] == pytest.approx(1210.0)


def test_table_printer(tmp_path):
    path = tmp_path / "h200_ncu_test.csv"
    path.write_text(snippet())
    rep = ncu.load(path)
    txt = ncu.table(rep.kernels)
    lines = txt.splitlines()
    assert len(lines) == 4 and lines[0].split()[:2] == ["#", "kernel"]
    assert "r2_chunked.scores" in lines[2] and "1,210.0" in lines[2]
    assert "r1_recurrent::recurrent_kernel" in lines[1] and "long_scoreboard 43%" in lines[1]
    md = ncu.table(rep.kernels, markdown=True)
    assert md.splitlines()[1].startswith("| --: | --- |") and md.count("\n") == 4
    assert [p for p, _ in ncu.load_dir(tmp_path)] == [str(path)]
    assert ncu.main([str(path)]) == 0

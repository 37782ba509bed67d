"""tools/ncu_phases.py's split of ncu's per-instruction stall samples at the block barriers, on a small CSV in the
format of ``ncu -i REPORT --page source --csv --print-source sass`` (running ncu needs a GPU)."""

import csv
import gzip
import importlib.util
import json
import os
import pathlib

os.environ.setdefault("NUMBA_ENABLE_CUDASIM", "1")  # the tool imports the package (its ncu name parser)

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]

COLS = ["Address", "Source", "Warp Stall Sampling (All Samples)", "Warp Stall Sampling (Not-issued Samples)",
        "Instructions Executed", "stall_barrier", "stall_long_sb", "stall_selected", "stall_barrier (Not Issued)"]
# (source, samples, executed, barrier, long_sb, selected): a load phase, its barrier (whose wait ncu books on the
# next instruction), an FMA phase, a second barrier, and a tail
ROWS = [
    ("      LDG.E.128 R4, [R2.64]", 30, 8, 0, 30, 0),
    ("      STS.128 [R9], R4", 10, 8, 0, 0, 10),
    ("      BAR.SYNC.DEFER_BLOCKING 0x0", 0, 8, 0, 0, 0),
    ("      IMAD R3, R0, 0x44, R1", 20, 8, 20, 0, 0),  # the first barrier's wait
    ("      FFMA R10, R4, R5, R10", 25, 64, 0, 0, 25),
    ("  @P0 FFMA R11, R4, R6, R11", 15, 64, 0, 0, 15),
    ("      BAR.SYNC.DEFER_BLOCKING 0x0", 0, 8, 0, 0, 0),
    ("      IMAD R5, R0, 0x4, R1", 8, 8, 8, 0, 0),  # the second barrier's wait
    ("      STG.E [R6.64], R10", 5, 8, 0, 0, 5),
    ("      EXIT", 0, 8, 0, 0, 0),
]


def _tool():
    spec = importlib.util.spec_from_file_location("ncu_phases", ROOT / "tools" / "ncu_phases.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _write(path, gz=False):
    opener = gzip.open if gz else open
    with opener(path, "wt", newline="") as f:
        w = csv.writer(f, quoting=csv.QUOTE_ALL)
        w.writerow(["Kernel Name", "linattn_numba::rungs::r3_shared::_state_kernel::_3clocals_3e::state[abi:v7](x)"])
        w.writerow(COLS)
        for i, (src, smp, ex, bar, lsb, sel) in enumerate(ROWS):
            w.writerow([hex(0x100 + 16 * i), src, smp, smp - sel, ex, bar, lsb, sel, bar])
    return str(path)


@pytest.mark.parametrize("gz", [False, True])
def test_phases_split_after_each_barrier(tmp_path, gz, capsys):
    tool = _tool()
    path = _write(tmp_path / ("k.csv.gz" if gz else "k.csv"), gz)
    res = tool.report(path, ["stage", "fma", "tail"])
    out = capsys.readouterr().out
    assert "r3_shared::_state_kernel" in out
    ph = res["phases"]
    assert [p["phase"] for p in ph] == ["stage", "fma", "tail"]
    # the instruction after a barrier holds the barrier's wait: it belongs to the phase the barrier closes
    assert [p["samples"] for p in ph] == [60, 48, 5]
    assert ph[0]["stalls"]["barrier"] == 20 and ph[0]["stalls"]["long_sb"] == 30
    assert ph[1]["ffma"] == 128 and ph[0]["ldg"] == 8  # predicated FFMA counted by its opcode
    assert ph[1]["stalls"]["barrier"] == 8
    assert abs(sum(p["share"] for p in ph) - 1) < 1e-12 and abs(ph[0]["share"] - 60 / 113) < 1e-12


def test_main_labels_per_file_and_json(tmp_path):
    tool = _tool()
    a, b = _write(tmp_path / "a.csv"), _write(tmp_path / "b.csv")
    out = tmp_path / "p.json"
    assert tool.main([a, b, "--labels", "x,y,z", "--labels", "p,q,r", "--json", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert [p["phase"] for p in doc[1]["phases"]] == ["p", "q", "r"]
    with pytest.raises(SystemExit):  # two label lists for three files
        tool.main([a, b, a, "--labels", "x", "--labels", "y"])


def test_rejects_a_csv_without_sass_rows(tmp_path):
    p = tmp_path / "empty.csv"
    p.write_text('"Kernel Name","k"\n"Address","Source"\n')
    with pytest.raises(SystemExit):
        _tool().read(str(p))

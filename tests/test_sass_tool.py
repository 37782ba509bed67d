"""tools/sass.py's parsing of ``nvdisasm -c`` output, on a fixed excerpt of r6's state kernel (running the whole
script needs nvdisasm, which CI does not install)."""

import importlib.util
import os
import pathlib

os.environ.setdefault("NUMBA_ENABLE_CUDASIM", "1")

ROOT = pathlib.Path(__file__).resolve().parents[1]

SASS = """
        /*16d10*/                   IMAD R26, R10, 0x48, R69 ;
        /*16d20*/                   ISETP.GT.U32.AND P1, PT, R70, RZ, PT ;
        /*16d90*/                   LDS R66, [R26] ;
.L_x_354:
        /*16e40*/                   LOP3.LUT R25, R66, 0xffffe000, RZ, 0xc0, !PT ;
        /*16ec0*/                   HMMA.1688.F32.TF32 R48, R8.reuse, R26, R48 ;
        /*16ed0*/              @!P2 IMAD.IADD.U32 R12, R12, 0x1, R85 ;
        /*16ee0*/                   HMMA.1688.F32.TF32 R12, R8, R24, R12 ;
        /*172b0*/               @P1 BRA `(.L_x_354) ;
.L_x_353:
        /*172c0*/                   BAR.SYNC.DEFER_BLOCKING 0x0 ;
        /*172d0*/                   EXIT ;
"""


def _tool():
    spec = importlib.util.spec_from_file_location("sass_tool", ROOT / "tools" / "sass.py")
    mod = importlib.util.module_from_spec(spec)
    cudasim = os.environ.get("NUMBA_ENABLE_CUDASIM")
    try:
        spec.loader.exec_module(mod)  # the script turns the simulator off for its own process ...
    finally:
        os.environ["NUMBA_ENABLE_CUDASIM"] = cudasim  # ... which must not leak into this test session
    return mod


def test_opcode_counts_strip_modifiers_and_predicates():
    counts = _tool().opcode_counts(SASS)
    assert counts == {"IMAD": 2, "ISETP": 1, "LDS": 1, "LOP3": 1, "HMMA": 2, "BRA": 1, "BAR": 1, "EXIT": 1}


def test_blocks_with_an_opcode():
    blocks = _tool().blocks_with(SASS, "HMMA")
    assert len(blocks) == 1 and blocks[0].startswith(".L_x_354:") and blocks[0].count("HMMA") == 2
    assert _tool().blocks_with(SASS, "EXIT")[0].startswith(".L_x_353:")
    assert _tool().blocks_with(SASS, "FFMA") == []


def test_barrier_regions_split_at_bar_sync():
    regions = _tool().barrier_regions(SASS)
    assert len(regions) == 2
    assert regions[0]["HMMA"] == 2 and regions[0]["BAR"] == 1 and sum(regions[0].values()) == 9
    assert dict(regions[1]) == {"EXIT": 1}

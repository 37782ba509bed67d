"""Read a kernel's SASS without a GPU: compile one variant of a rung for sm_90, assemble it with ptxas (nvJitLink),
disassemble the cubin with ``nvdisasm`` and count the instructions by opcode.

    python3 tools/sass.py tensor_cores "state[decay,float32,o=1,h0=0,ht=0" [--threads 512] [--top 20]
                          [--out state.sass] [--around HMMA]
    python3 tools/sass.py shared "intra[gated_delta,float32,vin,o=1]" --threads 256 --min-blocks 2 [--barriers]
    python3 tools/sass.py recurrent "async recurrent K=128 g=True beta=True state=False float32" --threads 0

The first argument is a rung name (or "api", "mma"); the second a piece of a label from that rung's
``compile_targets()`` (``python -m linattn_numba.compile_check NAME`` lists them); the first matching variant is
used. ``--threads`` and ``--min-blocks`` give the launch bounds (the block size the rung launches with, and the
blocks per SM it asks for: ptxas then allocates registers as on the device; r3's intra kernel asks for 2, so at
most 128 registers). ``--around OPCODE`` prints the loop bodies that hold that opcode, to read the instructions
around the tensor-core ones; ``--barriers`` the counts of each region between block barriers (a kernel's phases).

This is how r6's first version was diagnosed (its module docstring): 2,495 IMAD and 1,003 ISETP against 45 HMMA,
the index arithmetic of Numba's ``a[i]`` with signed indices. ``nvdisasm`` is not a dependency; it comes with the
CUDA toolkit or ``pip install nvidia-cuda-nvdisasm`` (the script looks on PATH and in that package).
Run with the simulator off (the script turns it off for itself).
"""

from __future__ import annotations

import argparse
import collections
import glob
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile

os.environ["NUMBA_ENABLE_CUDASIM"] = "0"  # before numba is imported: compiling needs the real target

_OPCODE = re.compile(r"/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P[T0-9]+\s+)?([A-Z][A-Z0-9_]*)(?:\.[A-Z0-9_.]+)?")
_LABEL = re.compile(r"^\.L_x_\d+:")


def opcode_counts(sass: str) -> collections.Counter:
    """Opcode (without its modifiers: ``HMMA.1688.F32.TF32`` counts as ``HMMA``) -> number of instructions in
    ``nvdisasm -c`` output. Predicated instructions (``@P0 ...``) count under their opcode."""
    return collections.Counter(m.group(1) for m in map(_OPCODE.search, sass.splitlines()) if m)


def blocks_with(sass: str, opcode: str) -> list[str]:
    """The basic blocks (from one ``.L_x_N:`` label to the next) that contain ``opcode``."""
    blocks, cur = [], []
    for line in sass.splitlines():
        if _LABEL.match(line.strip()) and cur:
            blocks.append("\n".join(cur))
            cur = []
        cur.append(line)
    blocks.append("\n".join(cur))
    return [b for b in blocks if re.search(rf"\b{re.escape(opcode)}\b", b)]


def barrier_regions(sass: str) -> list[collections.Counter]:
    """Opcode counts of the code between block barriers, in program order: region i ends with the i-th
    ``BAR.SYNC`` (which it counts), the last one with the end of the kernel. A kernel's phases lie between its
    ``cuda.syncthreads()`` calls, so this is the static cost of each phase (its instructions, how many of them
    are FFMA, LDS, ...): how r3's intra kernel was read before its inverse changed (its docstring). Static: a
    loop body counts once."""
    regions, cur = [], collections.Counter()
    for line in sass.splitlines():
        m = _OPCODE.search(line)
        if m:
            cur[m.group(1)] += 1
            if m.group(1) == "BAR" and ".SYNC" in line:
                regions.append(cur)
                cur = collections.Counter()
    regions.append(cur)
    return regions


def find_nvdisasm() -> str | None:
    exe = shutil.which("nvdisasm")
    if exe:
        return exe
    site = sysconfig.get_paths()["purelib"]
    for cand in sorted(glob.glob(os.path.join(site, "nvidia", "*", "bin", "nvdisasm"))):
        if not os.access(cand, os.X_OK):
            os.chmod(cand, 0o755)  # pip unpacks the wheel's binary without its execute bit
        return cand
    return None


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("rung")
    ap.add_argument("variant", help="a piece of a compile_targets() label")
    ap.add_argument("--threads", type=int, default=512,
                    help="launch bounds: threads per block (0: none, as rungs launched without launch bounds, "
                         "e.g. r1's sequence kernel, are compiled)")
    ap.add_argument("--min-blocks", type=int, default=1,
                    help="launch bounds: blocks per SM the register allocation must allow (r3's intra kernel: 2)")
    ap.add_argument("--top", type=int, default=20)
    ap.add_argument("--out", help="write the whole SASS here")
    ap.add_argument("--around", help="print the loop bodies that hold this opcode (e.g. HMMA)")
    ap.add_argument("--barriers", action="store_true",
                    help="print the instruction counts of each region between block barriers (a kernel's phases)")
    args = ap.parse_args(argv)

    nvdisasm = find_nvdisasm()
    if nvdisasm is None:
        print("nvdisasm not found: install the CUDA toolkit or `pip install nvidia-cuda-nvdisasm`", file=sys.stderr)
        return 2
    from numba import cuda

    from linattn_numba import api, compile_check, mma, rungs

    mod = {"api": api, "mma": mma}.get(args.rung) or rungs.module(args.rung)
    targets = [t for t in mod.compile_targets() if args.variant in t[0]]
    if not targets:
        labels = "\n  ".join(t[0] for t in mod.compile_targets())
        print(f"no variant of {args.rung!r} matches {args.variant!r}; the labels are:\n  {labels}", file=sys.stderr)
        return 2
    label, fn, argtypes = targets[0]
    bounds = {"launch_bounds": (args.threads, args.min_blocks)} if args.threads else {}
    ptx, _ = cuda.compile_ptx(fn, argtypes, cc=(9, 0), **bounds)
    cubin, log = compile_check.link(ptx)
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        sass = subprocess.run([nvdisasm, "-c", f.name], capture_output=True, text=True, check=True).stdout
    if args.out:
        with open(args.out, "w") as f:
            f.write(sass)
    counts = opcode_counts(sass)
    regs = re.findall(r"Used (\d+) registers", log)
    spill = re.findall(r"(\d+) bytes spill stores", log)
    print(f"{label}: {sum(counts.values())} instructions, {regs[-1] if regs else '?'} registers, "
          f"{spill[-1] if spill else 0} bytes spilled (launch bounds {args.threads or 'none'}"
          f"{f', {args.min_blocks} blocks' if args.threads and args.min_blocks > 1 else ''})")
    # divergence checks: ptxas guards a warp collective it cannot prove converged with BRA.DIV and a WARPSYNC
    # fallback (r1's module docstring, "Staging", has a case where that cost a quarter of a kernel's time)
    print(f"  BRA.DIV    {sass.count('BRA.DIV'):6d}  (divergence checks; included in BRA below)")
    for op, n in counts.most_common(args.top):
        print(f"  {op:10s} {n:6d}")
    if args.barriers:
        # LD(G): global loads, LDG or (ld4's generic 128-bit loads) LD
        print("\n  region  instructions    FFMA     LDS   LD(G)  (ending at the n-th BAR.SYNC; last: the end)")
        for i, reg in enumerate(barrier_regions(sass)):
            print(f"  {i:6d}  {sum(reg.values()):12d}  {reg['FFMA']:6d}  {reg['LDS']:6d}  {reg['LDG'] + reg['LD']:6d}")
    if args.around:
        for blk in blocks_with(sass, args.around):
            print("\n" + blk)
    return 0


if __name__ == "__main__":
    sys.exit(main())

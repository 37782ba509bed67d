"""Do compute-sanitizer's racecheck and synccheck model named barriers? Tiny kernels with a known answer, for r5.

r5 ``warp_roles``'s first producer/consumer hand-off (producers ``bar.arrive`` on FULL, consumers ``bar.sync`` there;
the reverse on EMPTY) was reported by racecheck on the H200, while the simulator's happens-before check
(``linattn_numba.sim.racecheck``) finds it ordered. The answer (r5's docstring, "Sanitizers"): the tools object to
the aligned barrier forms reached from the two roles' code, not to the protocol. Each kernel here isolates one
ingredient of r5's state kernel, with 64 consumer and 32 producer threads, a two-stage ring of 256 floats per stage
and 8 chunks, so that the tools' verdict on each can be read on its own::

    pair        r5's first protocol, aligned ``bar.sync`` / ``bar.arrive``: producers wait EMPTY(s) (chunk >= 2),
                fill stage s, arrive FULL(s); consumers wait FULL(s), read the whole stage, arrive EMPTY(s) (when
                chunk + 2 exists). Correct.
    pair_bug    the same barriers, but the producers wait on EMPTY(s) after refilling stage s, not before: they
                overwrite a stage the consumers may still be reading. A real race (write after read).
    pair_na     ``pair`` with the unaligned forms ``barrier.sync`` / ``barrier.arrive`` (r5's ``handoff="pair"``).
    rendezvous  one barrier of the whole block per chunk, ``barrier.sync 1, 96`` (unaligned) from both roles'
                code: producers fill chunk c + 1 while consumers read chunk c, then everybody meets. Correct, and
                the same dependencies as ``pair`` with two stages (r5's ``handoff="rendezvous"``).
    rendezvous_aligned  the same with ``bar.sync 1, 96`` (= ``barrier.sync.aligned``: the PTX ISA wants every
                thread at the same instruction).
    rendezvous_block  the same with ``syncthreads`` (``bar.sync 0``) in each role's branch: a block barrier
                in divergent code is outside the CUDA programming model.
    cons_named  consumers only (the producer warp idles): each writes its own elements, ``bar.sync 5, 64``,
                reads the others', ``bar.sync 5, 64``: r5's barrier between P1 and P2. Correct.
    cons_bug    the same without the second consumer barrier (the next chunk's writes race the reads). A race.

Usage (on a GPU): ``compute-sanitizer --tool racecheck python3 tools/racecheck_probe.py --kernel pair`` (or
``--tool synccheck``; ``tools/h200.sh racecheck_probe`` runs every kernel under both); without the tool it only
checks the answer. ``--sim`` runs every kernel in Numba's simulator under ``linattn_numba.sim.racecheck`` and prints
its verdict. Exit status 1 when a correct kernel's answer is wrong.
"""

from __future__ import annotations

import argparse
import os
import sys

KERNELS = ("pair", "pair_bug", "pair_na", "rendezvous", "rendezvous_aligned", "rendezvous_block", "cons_named",
           "cons_bug")
NCONS, NPROD, STAGE, NCHUNK = 64, 32, 256, 8
NTOT = NCONS + NPROD
RING, CBUF = 2 * STAGE, 4 * NCONS  # shared array sizes (constants: Numba types a product expression as a variable)
FULL, EMPTY, CONS = 1, 3, 5  # r5's barrier ids


def build(name):
    """The kernel ``name``: ``k[1, NTOT](x, out)`` with x [NCHUNK * STAGE] float32, out [NCONS] float32."""
    # module globals, not closure cells: the simulator swaps the kernel's global ``cuda`` for its own
    global cuda, float32
    from numba import cuda, float32

    from linattn_numba.rungs.r5_warp_roles import bar_arrive, bar_sync, barrier_arrive, barrier_sync

    # booleans and device functions chosen here, not string tests inside the kernels (a string method would be
    # compiled as a device function)
    pair = name in ("pair", "pair_bug", "pair_na")
    late = name == "pair_bug"  # waits on EMPTY after the refill instead of before it
    block = name == "rendezvous_block"
    both = name == "cons_named"
    unaligned = name in ("pair_na", "rendezvous")
    wait = barrier_sync if unaligned else bar_sync
    arrive = barrier_arrive if unaligned else bar_arrive

    def ring(x, out):
        sm = cuda.shared.array(RING, float32)
        tid = cuda.threadIdx.x
        if tid >= NCONS:
            p = tid - NCONS
            for c in range(NCHUNK):
                s = c % 2
                if pair and not late and c >= 2:
                    wait(EMPTY + s, NTOT)  # the consumers are done with chunk c - 2
                for i in range(p, STAGE, NPROD):
                    sm[s * STAGE + i] = x[c * STAGE + i]
                if late and c >= 2:
                    wait(EMPTY + s, NTOT)  # too late: the stage is already overwritten
                if block:
                    cuda.syncthreads()
                elif pair:
                    arrive(FULL + s, NTOT)
                else:
                    wait(FULL, NTOT)  # rendezvous: chunk c staged; chunk c - 1 (the other stage) consumed
            return
        acc = float32(0.0)
        for c in range(NCHUNK):
            s = c % 2
            if block:
                cuda.syncthreads()
            elif pair:
                wait(FULL + s, NTOT)
            else:
                wait(FULL, NTOT)
            for j in range(STAGE // 4):  # elements of every producer thread
                acc += sm[s * STAGE + (tid + 4 * j) % STAGE]
            if pair and c + 2 < NCHUNK:
                arrive(EMPTY + s, NTOT)
        out[tid] = acc

    def consumers(x, out):
        sm = cuda.shared.array(CBUF, float32)
        tid = cuda.threadIdx.x
        if tid >= NCONS:
            return  # the producer warp takes no part
        acc = float32(0.0)
        for c in range(NCHUNK):
            for j in range(4):
                sm[tid + NCONS * j] = x[c * STAGE + tid + NCONS * j]
            bar_sync(CONS, NCONS)  # every element written before any other consumer reads it
            for j in range(4):
                acc += sm[(tid + 1 + NCONS * j) % (4 * NCONS)]
            if both:
                bar_sync(CONS, NCONS)  # every read done before the next chunk's writes
        out[tid] = acc

    return cuda.jit(ring if name.startswith(("pair", "rendezvous")) else consumers)


def expected(name, x):
    import numpy as np

    xs = x.reshape(NCHUNK, STAGE).astype(np.float64)
    tid = np.arange(NCONS)
    if name.startswith("cons"):
        idx = np.stack([(tid + 1 + NCONS * j) % (4 * NCONS) for j in range(4)], 1)
    else:
        idx = np.stack([(tid + 4 * j) % STAGE for j in range(STAGE // 4)], 1)
    return sum(xs[c][idx].sum(1) for c in range(NCHUNK))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--kernel", default=",".join(KERNELS), help=f"comma-separated, of {KERNELS}")
    p.add_argument("--sim", action="store_true", help="run in Numba's simulator under linattn_numba.sim.racecheck")
    a = p.parse_args(argv)
    if a.sim:
        os.environ["NUMBA_ENABLE_CUDASIM"] = "1"
    import numpy as np

    from linattn_numba import sim

    if a.sim:
        sim.install()
    bad = 0
    for name in a.kernel.split(","):
        if name not in KERNELS:
            p.error(f"unknown kernel {name!r}; one of {KERNELS}")
        x = np.random.default_rng(0).standard_normal(NCHUNK * STAGE).astype(np.float32)
        out = np.full(NCONS, np.nan, np.float32)
        verdict = ""
        if a.sim:
            try:
                with sim.racecheck():
                    build(name)[1, NTOT](x, out)
                verdict = "sim racecheck: ordered"
            except sim.SharedMemoryRace as e:
                verdict = f"sim racecheck: RACE ({str(e).splitlines()[0][:80]})"
        else:
            from numba import cuda

            d = cuda.to_device(out)
            build(name)[1, NTOT](cuda.to_device(x), d)
            out = d.copy_to_host()
        ok = bool(np.allclose(out, expected(name, x), rtol=1e-5, atol=1e-4))
        # a racy kernel may still give the right answer; a correct one must
        bad += not ok and not name.endswith("_bug")
        print(f"{name:16s} answer {'right' if ok else 'WRONG'}  {verdict}", flush=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())

"""Do compute-sanitizer's racecheck and synccheck model named barriers and mbarriers? Tiny kernels with a known
answer, for r5.

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
    pair_na     ``pair`` with the unaligned forms ``barrier.sync`` / ``barrier.arrive`` (r5's ``handoff="pair"``
                until 2026-12-04).
    pair_mb     the same hand-off on mbarrier objects (``mbarrier.arrive`` / ``mbarrier.try_wait.parity``, an int64
                array of 4 in shared memory: FULL(s) expects the 32 producers, EMPTY(s) the 64 consumers),
                r5's ``handoff="pair"`` since then. Correct.
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

r5's named-barrier pair was flagged by racecheck in 4 of 5 runs where ``pair_na`` (one block, 8 chunks) was clean.
To find which of r5's ingredients ``pair_na`` lacked, a pair kernel takes modifiers after ``+``
(``pair_na+cp+vec``)::

    cp          the producers fill the stage by ``cp.async`` (16 bytes a copy) and ``cp.async.wait_all`` before
                their FULL arrive, as r5 stages K (r5 stages V through registers: ``STS.128``, as without ``cp``)
    vec         the consumers read the stage by ``ld4`` (``LDS.128``), as r5's P2 reads K and V rows
    inplace     each consumer first rewrites its own 4 elements of the stage (x 2) and the consumers meet at
                ``bar.sync 5, 64`` before reading everybody's, as r5's P1 writes V_new over U before P2
    clate       the consumers wait ~4 us (``nanosleep``) after their reads, before the EMPTY arrive: the producers
                reach EMPTY first and wait there
    plate       the producers wait ~4 us before their EMPTY sync: the consumers arrive first

and ``--blocks`` / ``--chunks`` give more blocks and chunks (more hand-offs for a timing-dependent report).

What it showed (H200, ``tools/h200.sh racecheck_matrix``, three processes per variant:
``figures/data/probes/h200_racecheck_matrix_{84fb32f,fe4ef7a,0c9848f}.txt``): no ingredient is needed. ``pair_na``
alone is flagged once there is more than one block or many chunks (1 block x 8 or 32 chunks: 0 of 6 runs; 1 x 256:
2 of 3; 4 x 8: 3 of 3; 16 x 32 and 132 x 32: 3 of 3, thousands of hazards at one site), in both directions (the
refill against the reads before it, the reads against the fill before them), whichever role comes first (clate,
plate), and every answer is right, while ``pair_bug`` is wrong in every run. The arrive / sync pair is correct by
the PTX memory model (an arrive synchronizes with a sync on the same barrier); racecheck does not order it at
scale. ``rendezvous`` (132 x 32) and ``pair_mb`` (16 x 32, 132 x 32, 132 x 256, with every modifier): 0 hazards
in every run. So r5's pair hand-off moved to mbarriers.

Usage (on a GPU): ``compute-sanitizer --tool racecheck python3 tools/racecheck_probe.py --kernel pair`` (or
``--tool synccheck``; ``tools/h200.sh racecheck_probe`` runs every kernel under both); without the tool it only
checks the answer. ``--sim`` runs every kernel in Numba's simulator under ``linattn_numba.sim.racecheck`` and prints
its verdict. Exit status 1 when a correct kernel's answer is wrong.
"""

from __future__ import annotations

import argparse
import os
import sys

KERNELS = ("pair", "pair_bug", "pair_na", "pair_mb", "rendezvous", "rendezvous_aligned", "rendezvous_block",
           "cons_named", "cons_bug")
MODIFIERS = ("cp", "vec", "inplace", "clate", "plate")  # of a pair kernel, after "+" (module docstring)
LAG_NS = 4000  # clate / plate: how long one role dawdles before the EMPTY hand-off
NCONS, NPROD, STAGE, NCHUNK = 64, 32, 256, 8
NTOT = NCONS + NPROD
RING, CBUF = 2 * STAGE, 4 * NCONS  # shared array sizes (constants: Numba types a product expression as a variable)
FULL, EMPTY, CONS = 1, 3, 5  # r5's barrier ids


def parse(name):
    """``"pair_na+cp+vec"`` -> ``("pair_na", {"cp", "vec"})``; a ValueError for an unknown kernel or modifier."""
    base, *mods = name.split("+")
    if base not in KERNELS:
        raise ValueError(f"unknown kernel {base!r}; one of {KERNELS}")
    bad = [m for m in mods if m not in MODIFIERS]
    if bad or (mods and not base.startswith("pair")):
        raise ValueError(f"modifiers {MODIFIERS} go with a pair kernel only; got {name!r}")
    return base, frozenset(mods)


def build(name, nchunk=NCHUNK):
    """The kernel ``name``: ``k[nblocks, NTOT](x, out)`` with x [nchunk * STAGE] float32, out [nblocks * NCONS]
    float32 (every block reads the same x)."""
    # module globals, not closure cells: the simulator swaps the kernel's global ``cuda`` for its own
    global cuda, float32, int64, cp_async16, cp_async_wait_all, ld4, mb_init, mb_arrive, mb_wait
    from numba import config, cuda, float32, int64

    from linattn_numba.rungs.r5_warp_roles import (bar_arrive, bar_sync, barrier_arrive, barrier_sync, mb_arrive,
                                                   mb_init, mb_wait)
    from linattn_numba.vec import cp_async16, cp_async_wait_all, ld4

    name, mods = parse(name)
    cp, vec, inplace = "cp" in mods, "vec" in mods, "inplace" in mods
    clate, plate = "clate" in mods, "plate" in mods
    NCH = nchunk
    ALIGN = None if config.ENABLE_CUDASIM else 16  # the simulator takes no alignment (its arrays are numpy's)
    SLEEP = not config.ENABLE_CUDASIM  # the simulator has no nanosleep, and its order does not depend on timing
    # booleans and device functions chosen here, not string tests inside the kernels (a string method would be
    # compiled as a device function)
    mb = name == "pair_mb"  # the pair hand-off on mbarrier objects instead of named barriers (r5's since 2026-12-04)
    pair = name in ("pair", "pair_bug", "pair_na", "pair_mb")
    late = name == "pair_bug"  # waits on EMPTY after the refill instead of before it
    block = name == "rendezvous_block"
    both = name == "cons_named"
    unaligned = name in ("pair_na", "rendezvous")
    wait = barrier_sync if unaligned else bar_sync
    arrive = barrier_arrive if unaligned else bar_arrive

    def ring(x, out):
        sm = cuda.shared.array(RING, float32, alignment=ALIGN)  # cp.async and ld4 move 16 aligned bytes
        bars = cuda.shared.array(4, int64)  # pair_mb: FULL(0), FULL(1) (NPROD arrivals), EMPTY(0), EMPTY(1) (NCONS)
        tid = cuda.threadIdx.x
        ob = cuda.blockIdx.x * NCONS
        if mb:
            if tid < 4:
                mb_init(bars, tid, NPROD if tid < 2 else NCONS)
            cuda.syncthreads()  # the barriers are initialised before anybody arrives or waits
        if tid >= NCONS:
            p = tid - NCONS
            for c in range(NCH):
                s = c % 2
                if plate and SLEEP and c >= 2:
                    cuda.nanosleep(LAG_NS)  # one sleep may end early (the PTX ISA gives [0, 2 t]): two
                    cuda.nanosleep(LAG_NS)
                if mb and c >= 2:
                    mb_wait(bars, 2 + s, (c // 2 - 1) % 2)  # completion c // 2 - 1 of EMPTY(s)
                elif pair and not late and c >= 2:
                    wait(EMPTY + s, NTOT)  # the consumers are done with chunk c - 2
                if cp:
                    for i in range(p, STAGE // 4, NPROD):
                        cp_async16(sm, s * STAGE + 4 * i, x, (c * STAGE + 4 * i,), 16)
                    cp_async_wait_all()  # this thread's copies have landed before it arrives on FULL
                else:
                    for i in range(p, STAGE, NPROD):
                        sm[s * STAGE + i] = x[c * STAGE + i]
                if late and c >= 2:
                    wait(EMPTY + s, NTOT)  # too late: the stage is already overwritten
                if block:
                    cuda.syncthreads()
                elif mb:
                    mb_arrive(bars, s)
                elif pair:
                    arrive(FULL + s, NTOT)
                else:
                    wait(FULL, NTOT)  # rendezvous: chunk c staged; chunk c - 1 (the other stage) consumed
            return
        acc = float32(0.0)
        for c in range(NCH):
            s = c % 2
            if block:
                cuda.syncthreads()
            elif mb:
                mb_wait(bars, s, (c // 2) % 2)  # completion c // 2 of FULL(s): chunk c staged
            elif pair:
                wait(FULL + s, NTOT)
            else:
                wait(FULL, NTOT)
            if inplace:
                for j in range(4):  # this thread's own elements, as r5's P1 writes V_new over U
                    sm[s * STAGE + 4 * tid + j] = 2 * sm[s * STAGE + 4 * tid + j]
                bar_sync(CONS, NCONS)  # every consumer's rewrite before anybody reads it
            if vec:
                for j in range(STAGE // 4):  # the whole stage, a float4 at a time
                    y = ld4(sm, s * STAGE + 4 * ((tid + j) % (STAGE // 4)))
                    acc += y[0] + y[1] + y[2] + y[3]
            else:
                for j in range(STAGE // 4):  # elements of every producer thread
                    acc += sm[s * STAGE + (tid + 4 * j) % STAGE]
            if clate and SLEEP and c + 2 < NCH:
                cuda.nanosleep(LAG_NS)
                cuda.nanosleep(LAG_NS)
            if mb and c + 2 < NCH:
                mb_arrive(bars, 2 + s)
            elif pair and c + 2 < NCH:
                arrive(EMPTY + s, NTOT)
        out[ob + tid] = acc

    def consumers(x, out):
        sm = cuda.shared.array(CBUF, float32)
        tid = cuda.threadIdx.x
        if tid >= NCONS:
            return  # the producer warp takes no part
        acc = float32(0.0)
        for c in range(NCH):
            for j in range(4):
                sm[tid + NCONS * j] = x[c * STAGE + tid + NCONS * j]
            bar_sync(CONS, NCONS)  # every element written before any other consumer reads it
            for j in range(4):
                acc += sm[(tid + 1 + NCONS * j) % (4 * NCONS)]
            if both:
                bar_sync(CONS, NCONS)  # every read done before the next chunk's writes
        out[cuda.blockIdx.x * NCONS + tid] = acc

    return cuda.jit(ring if name.startswith(("pair", "rendezvous")) else consumers)


def expected(name, x, nblocks=1):
    """What ``build(name)`` writes to ``out`` [nblocks * NCONS] for the input ``x`` [nchunk * STAGE] (float64)."""
    import numpy as np

    name, mods = parse(name)
    xs = x.reshape(-1, STAGE).astype(np.float64)
    tid = np.arange(NCONS)
    if name.startswith("cons"):
        idx = np.stack([(tid + 1 + NCONS * j) % (4 * NCONS) for j in range(4)], 1)
    elif "vec" in mods:
        idx = np.tile(np.arange(STAGE), (NCONS, 1))
    else:
        idx = np.stack([(tid + 4 * j) % STAGE for j in range(STAGE // 4)], 1)
    one = sum(xs[c][idx].sum(1) for c in range(len(xs))) * (2 if "inplace" in mods else 1)
    return np.tile(one, nblocks)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--kernel", default=",".join(KERNELS),
                   help=f"comma-separated, of {KERNELS}; a pair kernel may take +modifiers of {MODIFIERS}")
    p.add_argument("--blocks", type=int, default=1, help="blocks in the grid (each runs the whole ring)")
    p.add_argument("--chunks", type=int, default=NCHUNK, help="chunks through the two-stage ring")
    p.add_argument("--sim", action="store_true", help="run in Numba's simulator under linattn_numba.sim.racecheck")
    a = p.parse_args(argv)
    if a.blocks < 1 or a.chunks < 1:
        p.error("--blocks and --chunks must be at least 1")
    names = a.kernel.split(",")
    for name in names:
        try:
            parse(name)
        except ValueError as e:
            p.error(str(e))
    if a.sim:
        os.environ["NUMBA_ENABLE_CUDASIM"] = "1"
    import numpy as np

    from linattn_numba import sim

    if a.sim:
        sim.install()
    bad = 0
    for name in names:
        x = np.random.default_rng(0).standard_normal(a.chunks * STAGE).astype(np.float32)
        out = np.full(a.blocks * NCONS, np.nan, np.float32)
        verdict = ""
        if a.sim:
            try:
                with sim.racecheck():
                    build(name, a.chunks)[a.blocks, NTOT](x, out)
                verdict = "sim racecheck: ordered"
            except sim.SharedMemoryRace as e:
                verdict = f"sim racecheck: RACE ({str(e).splitlines()[0][:80]})"
        else:
            from numba import cuda

            d = cuda.to_device(out)
            build(name, a.chunks)[a.blocks, NTOT](cuda.to_device(x), d)
            out = d.copy_to_host()
        ok = bool(np.allclose(out, expected(name, x, a.blocks), rtol=1e-5, atol=1e-3))
        # a racy kernel may still give the right answer; a correct one must
        bad += not ok and not parse(name)[0].endswith("_bug")
        print(f"{name:16s} answer {'right' if ok else 'WRONG'}  {verdict}", flush=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())

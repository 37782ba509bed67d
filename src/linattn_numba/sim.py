"""Extensions and fixes for numba-cuda's CUDA simulator, so that every kernel this project ships runs in CI.

CI machines have no GPU, so the test suite runs the kernels in numba-cuda's CUDA simulator
(``NUMBA_ENABLE_CUDASIM=1``), which executes a kernel as plain Python, one ``threading.Thread`` per CUDA
thread, one block after another. In numba-cuda 0.30.x that simulator cannot run our kernels as they are.
:func:`install` patches it in place; on a real GPU it does nothing.

How to use
----------
Set ``NUMBA_ENABLE_CUDASIM=1`` before anything imports numba, then::

    import linattn_numba.sim
    linattn_numba.sim.install()     # idempotent; returns False (and does nothing) on a real GPU

The package calls :func:`install` itself, on first use of its API, when the simulator is active, so the explicit
call is only needed by code that uses the simulator without the package's API. :func:`use_if_no_gpu` is the
switch for programs and notebooks that should run anywhere: the GPU when the driver reports one, else the
simulator. :func:`enable` does both steps
(sets the variable, then installs), but numba chooses its target once, when ``numba.cuda`` is first
imported: ``enable()`` must run before that, and raises ``RuntimeError`` after it. Importing this module
imports neither numba nor ``numba.cuda``; whether importing the *package* does depends on what
``linattn_numba/__init__.py`` imports, so when in doubt set the environment variable.

What is fixed, and why
----------------------
1. **Warp intrinsics.** 0.30's simulator has no ``shfl_sync``, ``shfl_up_sync``, ``shfl_down_sync``,
   ``shfl_xor_sync``, ``syncwarp``, ``ballot_sync``, ``activemask``, ``all_sync``, ``any_sync``,
   ``eq_sync``, ``lanemask_lt``, ``match_any_sync``, ``match_all_sync``: kernel code calling them dies with
   ``AttributeError``. They are added to the fake ``cuda`` module that the simulator injects into a kernel's
   (and its device functions') globals during a launch, so ``cuda.shfl_xor_sync(...)`` works from kernel and
   device-function code alike. (Only calls spelled ``cuda.<name>`` are simulated, as for every other
   simulator intrinsic; ``from numba.cuda import shfl_sync`` is not.) The bit intrinsics ``popc``, ``ffs``,
   ``clz`` and ``brev`` are made width-aware, because the simulator formats values with ``"{:032b}"``,
   which is wrong for negative values such as a full-warp ballot (``-1`` as int32) and for 64-bit values.
2. **Barriers.** The simulator's ``BlockManager`` busy-polls every thread of the block from a manager
   thread to find out whether all of them reached ``syncthreads()``: each barrier costs tens of
   milliseconds, and a test suite with a few hundred barriers takes minutes. It is replaced by an
   event-driven block: arrivals are counted under one lock, each waiting thread blocks on its own wake
   lock, and the last thread to arrive releases exactly the waiters of that round (a thread that returned
   counts as arrived). 64 barriers of a 128-thread block: 2.4 s stock, 0.2 s patched (2 cores).

   About the GIL switch interval: with the stock polling manager, lowering ``sys.setswitchinterval`` from
   its default 5 ms to 0.5 ms sped a 100-launch suite up from 92 s to 22 s under ``pytest -n 2``, because
   the poller hogged the GIL. With the event-driven block it is the other way round: threads block instead
   of spinning, and a short interval only adds GIL hand-offs. Measured on 2 cores, 0.5 ms vs 5 ms: 64
   barriers 0.90 s vs 0.19 s (two concurrent processes: 1.35 s vs 0.5 s), a barrier+shuffle kernel
   1.5 s vs 0.74 s, a compute-only kernel 1.75 s vs 1.32 s. So :func:`install` leaves the interval alone
   unless asked (``install(switch_interval=...)``).
3. **Shared memory.** ``cuda.shared.array`` identified an allocation by the caller's (file, line), so two
   calls on one source line returned the *same* array, and the check-then-create had a race: two threads
   could both see "not allocated yet" and each get a private array (seen in 3 of 8 runs of a 100-test
   suite under ``-n 2``), which shows up as a kernel that is wrong only sometimes. Allocations are now keyed
   by the calling frame's (file, line, bytecode offset) and created under a lock. Dynamic shared memory
   (``shape=0``) is unchanged: every such array views the same launch-sized buffer.
4. **A shared-memory race check** (added, not fixed): inside ``with sim.racecheck():`` (or with
   ``LINATTN_SIM_RACECHECK=1``) every element read and write of a shared array is checked against the
   happens-before order that ``syncthreads``, named barriers, mbarrier phases and warp collectives establish
   (vector clocks, as
   in the FastTrack race detector), and a launch with two unordered accesses to one address, one a write,
   raises :class:`SharedMemoryRace` naming both source lines. It catches a missing barrier whether or not this
   run's interleaving exposed it, and it models ``bar.arrive`` / ``bar.sync`` producer-consumer hand-offs
   (it does not tell PTX's aligned barrier forms from the unaligned ones, which compute-sanitizer does: r5
   ``warp_roles``'s "Sanitizers" and ``tools/racecheck_probe.py``).

Semantics chosen
----------------
* **Warps** are consecutive groups of 32 linear thread ids, ``tid = x + bx * (y + by * z)`` (x fastest, then
  y, then z), as on hardware. ``cuda.laneid`` is ``tid % 32``. The last warp of a block whose size is not a
  multiple of 32 is *partial*: its missing lanes do not exist.
* **A lane is live** from the launch until its thread returns from the kernel function. Threads that
  returned early and lanes that do not exist are *not* live.
* **Every warp collective is a rendezvous among the lanes named in ``mask`` that are still live.** Each
  calling lane deposits its value and waits until every live lane of the mask has arrived; lanes that
  returned (or never existed) are not waited for, so early-returning threads and partial warps do not
  deadlock a collective. The values of a round are published as one snapshot and the next round collects
  into a fresh buffer, so a fast lane that enters the next collective cannot overwrite a value a slow lane
  has not read yet (the "second phase" of a two-phase exchange). Collectives with *different* masks are
  independent rendezvous, so disjoint groups (e.g. the two half-warps, masks ``0x0000FFFF`` and
  ``0xFFFF0000``) run concurrently as on hardware.
* **Shuffles** return the value *object* deposited by the source lane, so its type (``np.float32``,
  ``np.int64``, ...) is preserved. The source lane is ``src % 32`` for ``shfl_sync``, ``lane - delta`` for
  ``shfl_up_sync``, ``lane + delta`` for ``shfl_down_sync`` and ``lane ^ lane_mask`` for ``shfl_xor_sync``.
  When the source lane is outside 0..31 (``shfl_up`` past lane 0, ``shfl_down`` past lane 31, ``xor`` with
  a mask of 32 or more) the caller gets its own value back, as on hardware. When the source lane is inside
  the warp but did not take part (it does not exist in a partial warp, it returned, or it is not in
  ``mask``) the caller also gets its own value back; on hardware that read is undefined.
* **Votes** count only the lanes that took part. ``ballot_sync`` returns an ``np.int32`` with bit ``i`` set
  for lane ``i`` (the type numba gives it on the GPU, so a full-warp ballot is ``-1``; ``cuda.popc`` of it
  is 32). ``all_sync``, ``any_sync``, ``eq_sync`` return ``bool``. ``activemask()`` returns an
  ``np.uint32`` with the bits of the warp's live lanes (the simulator cannot know which lanes are
  *converged*, so "live" is the closest meaning); ``lanemask_lt()`` an ``np.uint32``.
  ``match_any_sync``/``match_all_sync`` follow the same rendezvous and return ``np.int32`` masks.
* **Barriers** (``syncthreads``, ``syncthreads_count/and/or``, and ``cg.this_grid().sync()``, which the
  simulator maps to the block barrier) wait for every live thread of the block; a thread that returned
  counts as arrived at all later barriers, like an exited thread on hardware. ``syncthreads_count/and/or``
  count the predicates of the threads that arrived.
* **Named barriers** (PTX ``bar.sync id, count`` / ``bar.arrive id, count``, which kernels emit through an
  inline-PTX intrinsic) are simulated by :func:`bar_sync` and :func:`bar_arrive`: barrier ``id`` (1..15; 0 is
  ``syncthreads``) completes when ``count`` arrivals (a multiple of 32) have been counted, releasing the threads
  that wait in ``bar_sync``; ``bar_arrive`` counts and goes on. Each id is a separate round, independent of
  ``syncthreads``; a thread that returns does not count as arrived (the count is explicit), so a named barrier
  whose count is never reached is reported as a deadlock. Arrivals with different counts in one round raise.
* **mbarrier objects** (PTX ``mbarrier.init`` / ``mbarrier.arrive`` / ``mbarrier.try_wait.parity`` on an int64
  element of a shared array, which kernels emit through inline-PTX intrinsics) are simulated by
  :func:`mb_init`, :func:`mb_arrive` and :func:`mb_wait`: a barrier initialised with ``count`` completes its
  current phase at the ``count``-th arrival and starts the next one; ``mb_wait(bars, i, parity)`` returns once
  the most recent phase of that parity has completed (at once if it has: the current phase has the other parity),
  as a loop on ``try_wait.parity`` does on hardware. Arrive releases (the arriving thread's accesses so far), a
  wait that returns acquires the completed phase. Using an mbarrier that was never initialised raises; a wait
  that can never return is reported as a deadlock.
* **Wrong usage raises** instead of hanging or giving a silently wrong answer: a lane calling a collective
  with a ``mask`` that does not include its own lane (undefined on hardware) raises ``ValueError``; lanes of
  one mask calling different collectives in the same round (e.g. one ``shfl_sync``, another
  ``ballot_sync``) raise ``RuntimeError``; and when every live thread of a block is waiting in a barrier or
  a collective that can never complete (e.g. ``syncthreads()`` in one branch, ``syncwarp()`` in the other)
  the launch raises ``RuntimeError("deadlock ...")`` listing where the threads wait, instead of hanging CI.
* **Exceptions** in any thread abort the block: threads waiting in a barrier or collective are woken and
  unwound, and the first exception is re-raised in the launching thread with ``tid=[x, y, z] ctaid=[x, y,
  z]`` prefixed to its message, as the stock simulator does.

Limits (not fixed)
------------------
* **Grid-wide sync is wrong.** Blocks run one after another, so ``cuda.cg.this_grid().sync()`` only
  synchronises the threads of the *current* block: writes that later blocks make before the grid sync are
  not visible to earlier blocks after it. (The simulator reports ``max_cooperative_grid_blocks`` = 1.)
  Test grid-synchronising kernels with a single block, or on a GPU.
* **No real memory model.** Threads interleave only at GIL switches and every write is immediately visible
  to every thread, so missing ``threadfence``/``syncthreads``/``syncwarp`` and data races usually go
  unnoticed in results. :class:`racecheck` finds unordered *shared-memory* accesses (not global memory, not
  reads through fancy indexing); passing it shows the barrier protocol orders every access of the simulated
  launches, not that every launch shape is race-free.
* **Python number semantics.** Kernel code runs as Python on NumPy scalars. On the GPU numba types a
  Python float literal as float64, so ``acc = 0.0; acc += x[i]`` accumulates in (slow) float64 there, while
  in the simulator NumPy 2's promotion rules (Python scalars are "weak") make the same code accumulate in
  float32: the two disagree in rounding. Write ``acc = float32(0.0)`` so both are float32. Likewise Python
  ints do not wrap around at 32/64 bits.
* **Speed.** One OS thread per CUDA thread and one block at a time: keep simulated problem sizes small.
* **Version.** The patch reaches into simulator internals, so :func:`install` refuses any numba-cuda
  minor version other than 0.30 (:data:`SUPPORTED_NUMBA_CUDA`).
"""

from __future__ import annotations

import importlib.metadata
import os
import re
import sys
import threading
import time

import numpy as np

__all__ = ["install", "active", "enable", "bar_sync", "bar_arrive", "racecheck", "SharedMemoryRace",
           "SUPPORTED_NUMBA_CUDA"]

#: The numba-cuda (major, minor) version whose simulator internals this module patches.
SUPPORTED_NUMBA_CUDA = (0, 30)

WARP_SIZE = 32
FULL_MASK = 0xFFFFFFFF

# After an exception aborts a block, how long the launcher waits for the other threads to unwind before
# re-raising (threads blocked in a barrier/collective unwind at once; a thread in a long computation
# without any synchronisation only stops at its next one, so the wait is bounded).
_ABORT_JOIN_S = 1.0

_install_lock = threading.Lock()
_installed = False
# Guards the creation of static shared arrays (one lock for all launches: creation happens once per
# allocation site per launch, so contention is negligible; see _shared_array).
_shared_lock = threading.Lock()


# ---------------------------------------------------------------------------------------------------------
# Public API
# ---------------------------------------------------------------------------------------------------------


def active() -> bool:
    """True when numba's CUDA simulator is (or, if ``numba.cuda`` is not imported yet, will be) the cuda target.

    Once ``numba.cuda`` is imported the answer is fixed: it is whether ``numba.cuda.jit`` is the simulator's.
    Before that, it is numba's ``ENABLE_CUDASIM`` config, which ``numba.cuda`` reads when it is imported.
    Does not import ``numba.cuda``.
    """
    cuda = sys.modules.get("numba.cuda")
    jit = getattr(cuda, "jit", None) if cuda is not None else None
    if jit is not None:
        return getattr(jit, "__module__", "").startswith("numba.cuda.simulator")
    from numba.core import config

    return bool(config.ENABLE_CUDASIM)


def install(switch_interval: float | None = None) -> bool:
    """Patch numba-cuda's CUDA simulator in place (see the module docstring); idempotent.

    Returns ``False`` and does nothing when the simulator is not active (a real GPU), ``True`` when the
    simulator is patched (now or by an earlier call). Raises ``RuntimeError`` when the installed numba-cuda
    is not 0.30.x, because the patch replaces simulator internals that other versions may lay out
    differently. ``switch_interval``, when given, is passed to ``sys.setswitchinterval`` (process-wide);
    by default the interval is left alone, which measured fastest with the patched simulator (see the
    module docstring).
    """
    global _installed
    if not active():
        return False
    # Checked on every call (not only the first), so a bad environment is reported wherever install() runs.
    _check_version()
    if switch_interval is not None:
        sys.setswitchinterval(switch_interval)
    with _install_lock:
        if _installed:
            return True
        from numba.cuda.simulator import kernel, kernelapi

        module_cls = type(
            "SimCUDAModule",
            (_WarpIntrinsicsMixin, kernelapi.FakeCUDAModule),
            {
                "__doc__": "The simulator's fake ``cuda`` module plus warp intrinsics (linattn_numba.sim).",
                "__module__": __name__,
            },
        )
        # FakeCUDAKernel.__call__ looks both names up in kernel.py's globals at every launch.
        kernel.FakeCUDAModule = module_cls
        kernel.BlockManager = _SimBlock
        # FakeCUDAModule.__init__ builds kernelapi.FakeCUDAShared; patch the method on the class so every
        # instance (also ones built by other code) gets the fixed allocation.
        kernelapi.FakeCUDAShared.array = _shared_array
        _installed = True
    return True


def gpu_present() -> bool:
    """True when the CUDA driver loads and reports at least one device; always False when the simulator is
    requested through ``NUMBA_ENABLE_CUDASIM``. Asks the driver through ctypes: imports no numba."""
    import ctypes

    if os.environ.get("NUMBA_ENABLE_CUDASIM", "0") not in ("", "0"):
        return False
    for lib in ("libcuda.so.1", "libcuda.so", "nvcuda.dll"):
        try:
            drv = ctypes.CDLL(lib)
        except OSError:
            continue
        count = ctypes.c_int(0)
        return drv.cuInit(0) == 0 and drv.cuDeviceGetCount(ctypes.byref(count)) == 0 and count.value > 0
    return False


def use_if_no_gpu() -> bool:
    """Run on the GPU when there is one, else in the patched simulator (:func:`enable`). Returns ``True`` when
    simulating. Call it before anything imports ``numba.cuda``."""
    if "numba.cuda" in sys.modules:  # numba's choice is already made: keep it
        return install()
    return False if gpu_present() else enable()


def enable() -> bool:
    """Turn the simulator on for this process, then :func:`install` it; returns ``True``.

    Sets ``NUMBA_ENABLE_CUDASIM=1`` when ``numba.cuda`` has not been imported yet (if ``numba`` itself is
    already imported, its config is reloaded so that ``numba.cuda`` sees the variable). Raises
    ``RuntimeError`` when ``numba.cuda`` was already imported *without* the simulator: numba picks its
    target once, at import, and it cannot be switched afterwards.
    """
    if "numba.cuda" in sys.modules:
        if not active():
            raise RuntimeError(
                "linattn_numba.sim.enable(): numba.cuda was already imported without the CUDA simulator, "
                "which cannot be switched on afterwards. Set NUMBA_ENABLE_CUDASIM=1 in the environment "
                "before anything imports numba (or call enable() before importing numba.cuda)."
            )
    else:
        os.environ["NUMBA_ENABLE_CUDASIM"] = "1"
        if "numba.core.config" in sys.modules:
            from numba.core import config

            config.reload_config()
    if not install():  # pragma: no cover - only if numba's config ignores the variable
        raise RuntimeError("linattn_numba.sim.enable(): the CUDA simulator did not become active")
    return True


# ---------------------------------------------------------------------------------------------------------
# Version guard
# ---------------------------------------------------------------------------------------------------------


def _numba_cuda_version() -> str:
    """The installed numba-cuda version string (a function so that tests can substitute it)."""
    try:
        return importlib.metadata.version("numba-cuda")
    except importlib.metadata.PackageNotFoundError:
        import numba_cuda

        return numba_cuda.__version__


def _check_version() -> None:
    version = _numba_cuda_version()
    m = re.match(r"(\d+)\.(\d+)", version)
    found = (int(m.group(1)), int(m.group(2))) if m else None
    if found != SUPPORTED_NUMBA_CUDA:
        want = "%d.%d" % SUPPORTED_NUMBA_CUDA
        raise RuntimeError(
            f"linattn_numba.sim patches the internals of numba-cuda {want}.x's CUDA simulator, but "
            f"numba-cuda {version} is installed. Install numba-cuda=={want}.* (as pyproject.toml pins), or "
            f"port linattn_numba/sim.py to the new simulator (numba/cuda/simulator/kernel.py, kernelapi.py)."
        )


# ---------------------------------------------------------------------------------------------------------
# Shared memory
# ---------------------------------------------------------------------------------------------------------


def _shared_array(self, shape, dtype, alignment=None):
    """Replacement for ``FakeCUDAShared.array``: one array per allocation *site*, created race-free.

    An allocation site is the calling frame's (file, line, bytecode offset): two calls on one line are
    two sites, while the same call executed by every thread of the block, or repeatedly in a loop, is one
    site and returns the same array, which matches hardware, where a ``cuda.shared.array`` call is one
    static allocation per block. (A call inside a device function is one site whichever kernel line calls
    the device function, which also matches: numba allocates it once per kernel.)
    """
    from numba.cuda import types
    from numba.cuda.np import numpy_support

    if alignment is not None:
        raise RuntimeError("Array alignment is not supported in cudasim")
    if isinstance(dtype, types.Type):
        dtype = numpy_support.as_dtype(dtype)
    # Dynamic shared memory is requested with size 0 - this all shares the same underlying memory
    # (unchanged from the stock simulator).
    if shape == 0:
        count = self._dynshared_size // dtype.itemsize
        dyn = np.frombuffer(self._dynshared.data, dtype=dtype, count=count)
        return dyn.view(_CheckedShared) if _racecheck_on() else dyn

    caller = sys._getframe(1)
    key = (caller.f_code.co_filename, caller.f_lineno, caller.f_lasti)
    res = self._allocations.get(key)  # fast path: already created (dict reads are atomic under the GIL)
    if res is None:
        # Double-checked creation: without the lock, two threads can both miss and each create (and
        # return) a private array, so their writes never meet.
        with _shared_lock:
            res = self._allocations.get(key)
            if res is None:
                res = np.empty(shape, dtype)
                if _racecheck_on():
                    res = res.view(_CheckedShared)
                self._allocations[key] = res
    return res


# ---------------------------------------------------------------------------------------------------------
# Shared-memory race check (happens-before, vector clocks)
# ---------------------------------------------------------------------------------------------------------

_racecheck_flag = [os.environ.get("LINATTN_SIM_RACECHECK", "") not in ("", "0")]


def _racecheck_on() -> bool:
    return _racecheck_flag[0]


class racecheck:
    """Context manager that checks every shared-memory access of the kernels launched inside it for data races;
    ``LINATTN_SIM_RACECHECK=1`` turns it on for the whole process::

        with linattn_numba.sim.racecheck():
            kernel[grid, block](...)          # raises SharedMemoryRace if two threads race on shared memory

    Two accesses to the same shared-memory byte address by different threads, at least one a write, race
    unless a synchronisation orders them: ``syncthreads`` (all threads), a named barrier round (``bar_arrive``
    releases, ``bar_sync`` releases and acquires: a producer's writes before its ``bar_arrive`` are ordered
    before a consumer's reads after its ``bar_sync`` of the same round), or a warp collective among the lanes
    that took part. This is the vector-clock (happens-before) method of race detectors such as FastTrack,
    applied to the simulator's actual interleaving: it reports a missing ordering whether or not the
    interleaving of this run happened to expose it (unlike comparing results), and it knows named barriers,
    which ``compute-sanitizer --tool racecheck`` may not model. Arrays created while the check is on are
    checked; it slows a launch down several times, so keep the shapes tiny. Only shared memory is checked.
    """

    def __init__(self, enabled: bool = True):
        self._enabled = enabled
        self._saved = []

    def __enter__(self):
        self._saved.append(_racecheck_flag[0])
        _racecheck_flag[0] = self._enabled
        return self

    def __exit__(self, *exc):
        _racecheck_flag[0] = self._saved.pop()
        return False


class SharedMemoryRace(RuntimeError):
    """Two threads of a simulated block accessed one shared-memory address, at least one writing, unordered."""


def _where() -> str:
    """file:line of the kernel code that made the access (skipping this module and the vec helpers)."""
    f = sys._getframe(2)
    while f is not None and os.path.basename(f.f_code.co_filename) in ("sim.py", "vec.py"):
        f = f.f_back
    if f is None:
        return "?"
    return f"{os.path.basename(f.f_code.co_filename)}:{f.f_lineno}"


class _CheckedShared(np.ndarray):
    """A shared array whose element reads and writes are reported to the block's race detector."""

    def __array_finalize__(self, obj):
        self._addr0 = self.__array_interface__["data"][0]

    def _addrs(self, key):
        if isinstance(key, (int, np.integer)) and self.ndim == 1:
            i = int(key)
            if i < 0:
                i += self.shape[0]
            return (self._addr0 + i * self.strides[0],)
        if isinstance(key, tuple) and len(key) == self.ndim and all(isinstance(k, (int, np.integer)) for k in key):
            a = self._addr0
            for k, n, st in zip(key, self.shape, self.strides):
                k = int(k)
                a += (k + n if k < 0 else k) * st
            return (a,)
        grid = np.zeros(self.shape, np.int64) + self._addr0
        for d in range(self.ndim):
            shp = [1] * self.ndim
            shp[d] = self.shape[d]
            grid = grid + (np.arange(self.shape[d]) * self.strides[d]).reshape(shp)
        return tuple(int(x) for x in np.asarray(grid[key]).ravel())

    def _report(self, key, write):
        t = threading.current_thread()
        det = getattr(getattr(t, "_manager", None), "_race", None)
        if det is not None:
            det.access(t.thread_id, self._addrs(key), write, self.itemsize)

    def __getitem__(self, key):
        res = super().__getitem__(key)
        if not isinstance(res, np.ndarray):  # an element read (a slice is a view: its own reads are reported)
            self._report(key, False)
        return res

    def __setitem__(self, key, value):
        self._report(key, True)
        super().__setitem__(key, value)


class _RaceDetector:
    """Happens-before race detection for one block's shared memory (see :class:`racecheck`).

    ``vc[t]`` is thread t's vector clock; a synchronisation joins the clocks of the threads it orders and
    advances each one's own entry. Per byte address: the last write (thread, its clock then, where) and the
    reads since (thread -> (clock, where)). An access races with an earlier one by thread u at clock c when
    ``c > vc[me][u]``: nothing carried u's clock at that access to this thread.
    """

    MAX_REPORTS = 5

    def __init__(self, n):
        self.vc = np.zeros((n, n), np.int64)
        np.fill_diagonal(self.vc, 1)
        self.writes = {}
        self.reads = {}
        self.lock = threading.Lock()
        self.named = {}  # barrier id -> joined clock of the current round's arrivals
        self.count = 0
        self.reports = []

    def access(self, tid, addrs, write, itemsize):
        where = None
        with self.lock:
            vc = self.vc[tid]
            for a in addrs:
                for b in range(a, a + itemsize, 4) if itemsize > 4 else (a,):
                    w = self.writes.get(b)
                    if w is not None and w[0] != tid and w[1] > vc[w[0]]:
                        where = where or _where()
                        self._race(b, w, "write", tid, "write" if write else "read", where)
                    if write:
                        rd = self.reads.pop(b, None)
                        if rd:
                            for u, (c, wh) in rd.items():
                                if u != tid and c > vc[u]:
                                    where = where or _where()
                                    self._race(b, (u, c, wh), "read", tid, "write", where)
                        where = where or _where()
                        self.writes[b] = (tid, int(vc[tid]), where)
                    else:
                        where = where or _where()
                        self.reads.setdefault(b, {})[tid] = (int(vc[tid]), where)

    def _race(self, addr, first, first_kind, tid, kind, where):
        self.count += 1
        if len(self.reports) < self.MAX_REPORTS:
            self.reports.append(f"{first_kind} by thread {first[0]} at {first[2]}, then {kind} by thread {tid} at "
                                f"{where} (address 0x{addr:x}): no barrier orders them")

    def join(self, tids):
        """A synchronisation that orders every thread in ``tids`` after all of their earlier accesses."""
        if not tids:
            return
        with self.lock:
            idx = np.asarray(sorted(set(tids)))
            self.vc[idx] = self.vc[idx].max(axis=0)
            self.vc[idx, idx] += 1

    def arrive(self, bar_id, tid):
        """Named barrier ``bar_id``: thread ``tid`` releases its accesses so far into the current round."""
        with self.lock:
            acc = self.named.get(bar_id)
            self.named[bar_id] = self.vc[tid].copy() if acc is None else np.maximum(acc, self.vc[tid])
            self.vc[tid, tid] += 1

    def release(self, acc, tid):
        """Thread ``tid`` releases its accesses so far into ``acc`` (an mbarrier phase's joined clock, or None);
        returns the new joined clock."""
        with self.lock:
            out = self.vc[tid].copy() if acc is None else np.maximum(acc, self.vc[tid])
            self.vc[tid, tid] += 1
            return out

    def acquire(self, clock, tid):
        """Thread ``tid`` acquires ``clock`` (a completed mbarrier phase's joined clock)."""
        if clock is None:
            return
        with self.lock:
            self.vc[tid] = np.maximum(self.vc[tid], clock)
            self.vc[tid, tid] += 1

    def complete(self, bar_id, waiters):
        """The round of named barrier ``bar_id`` completed: the threads that waited in it acquire the round."""
        with self.lock:
            acc = self.named.pop(bar_id, None)
            if acc is None:
                return
            for t in waiters:
                self.vc[t] = np.maximum(self.vc[t], acc)
                self.vc[t, t] += 1


# ---------------------------------------------------------------------------------------------------------
# Block execution: event-driven barrier, warp collectives, exception propagation, deadlock detection
# ---------------------------------------------------------------------------------------------------------


class _BlockAborted(BaseException):
    """Raised inside simulated threads to unwind them once their block is aborted.

    A BaseException so that it is never mistaken for (or reported as) an error of the kernel itself.
    """


class _WarpGroup:
    """Rendezvous state of the collectives of one warp that use one mask.

    ``values`` collects the current round; when it completes it is published as ``published`` and a
    fresh dict collects the next round. A lane reads ``published`` after it is released and before it can
    arrive at the next round of this group; that next round cannot complete without that lane (it is
    live and in the mask), so its snapshot cannot be replaced before it is read.
    """

    __slots__ = ("kind", "values", "arrived", "waiters", "published", "warp_index")

    def __init__(self, warp_index=0):
        self.warp_index = warp_index
        self.kind = None
        self.values = {}
        self.arrived = 0  # bitmask of the lanes that arrived in the current round
        self.waiters = []  # the threads of the current round blocked until it completes
        self.published = {}


class _Warp:
    __slots__ = ("index", "alive", "groups")

    def __init__(self, index, nlanes):
        self.index = index
        # Bit i set while lane i exists and its thread has not returned. A partial last warp starts with
        # only its existing lanes set, so collectives never wait for lanes that do not exist.
        self.alive = (1 << nlanes) - 1
        self.groups = {}  # mask -> _WarpGroup


class _MBarrier:
    """One simulated mbarrier object: expected arrivals per phase, arrivals still pending in the current phase,
    completed phases, the threads waiting (with the parity they wait for), and for the race check the joined clock
    of the current phase's arrivals and that of the last completed phase."""

    __slots__ = ("count", "pending", "phase", "waiters", "acc", "done_clock")

    def __init__(self, count):
        self.count = self.pending = count
        self.phase = 0
        self.waiters = []
        self.acc = self.done_clock = None


class _SimThread(threading.Thread):
    """One simulated CUDA thread (replaces the simulator's ``BlockThread``).

    Provides what the simulator's fake ``cuda`` module reads from ``threading.current_thread()``:
    ``threadIdx``, ``blockIdx``, ``thread_id``, ``syncthreads()``, ``syncthreads_count/and/or()``; plus
    ``lane`` and ``warp`` for the warp intrinsics.
    """

    def __init__(self, block, grid_point, block_point, args):
        from numba.cuda.simulator.kernelapi import Dim3

        bx, by, _ = block._block_dim
        x, y, z = block_point
        super().__init__(name=f"cudasim tid={list(block_point)} ctaid={list(grid_point)}", daemon=True)
        self._manager = block  # the attribute name BlockThread uses
        self._args = args
        self.blockIdx = Dim3(*grid_point)
        self.threadIdx = Dim3(x, y, z)
        self.thread_id = x + bx * (y + by * z)
        self.lane = self.thread_id % WARP_SIZE
        self.warp = block._warps[self.thread_id // WARP_SIZE]
        self.debug = block._debug
        self.exception = None
        self.abort = False
        self.wait_desc = None  # what the thread is blocked in (for the deadlock report), or None
        # A binary semaphore, held except while another thread wakes this one: _SimBlock._sleep blocks on it.
        self._wake = threading.Lock()
        self._wake.acquire()

    def run(self):
        block = self._manager
        try:
            if self.debug:
                np.seterr(divide="raise")  # as the stock simulator's debug mode
            block._f(*self._args)
        except _BlockAborted:
            pass
        except Exception as e:
            # Same message format as the stock simulator's BlockThread.
            ids = "tid=%s ctaid=%s" % (list(self.threadIdx), list(self.blockIdx))
            msg = ids if str(e) == "" else "%s: %s" % (ids, e)
            try:
                exc = type(e)(msg)
            except Exception:  # an exception class whose constructor wants other arguments
                exc = RuntimeError("%s: %s" % (type(e).__name__, msg))
                exc.__cause__ = e
            self.exception = (exc, e.__traceback__)
            block._fail(exc, e.__traceback__)
        finally:
            block._thread_exit(self)

    def syncthreads(self):
        self._manager._barrier(self, False)

    def syncthreads_count(self, value):
        return self._manager._barrier(self, value)[0]

    def syncthreads_and(self, value):
        count, arrived = self._manager._barrier(self, value)
        return 1 if count == arrived else 0

    def syncthreads_or(self, value):
        return 1 if self._manager._barrier(self, value)[0] else 0


class _SimBlock:
    """Runs one thread block (replaces the simulator's polling ``BlockManager``; same constructor and ``run``).

    All bookkeeping is guarded by one lock, held only briefly. A thread that must wait (barrier or
    collective round not complete yet) puts itself on the round's waiter list, releases the lock and
    blocks on its own wake lock; the thread that completes the round (the last to arrive, or the last
    awaited thread to return) releases exactly that round's waiters. Woken threads need no shared lock
    to continue, so a barrier costs one OS wake-up per thread and no convoy on a shared lock. Counters:

    * ``_alive``: threads started and not yet returned (threads not started yet count as alive);
    * ``_blocked``: threads on a waiter list. The thread completing a round subtracts that round's
      waiters at once, so ``_blocked == _alive`` means no thread can make progress: a deadlock, which is
      reported instead of hanging.
    """

    def __init__(self, f, grid_dim, block_dim, debug):
        self._f = f
        self._grid_dim = tuple(grid_dim)
        self._block_dim = tuple(block_dim)
        self._debug = debug
        self._grid_point = None
        self._threads = []
        n = int(np.prod(self._block_dim))
        self._lock = threading.Lock()
        self._done = threading.Condition(self._lock)  # the launcher waits here
        self._alive = 0
        self._blocked = 0
        self._aborted = False
        self._error = None  # (exception, traceback) of the first failure
        # Barrier: arrivals and true predicates of the current round, its waiters, and the
        # (true count, arrivals) of the last completed round.
        self._bar_arrived = 0
        self._bar_true = 0
        self._bar_waiters = []
        self._bar_result = (0, 0)
        # Named barriers: id -> [count of the current round, arrivals, waiters].
        self._named = {}
        # mbarrier objects: shared address -> _MBarrier.
        self._mbar = {}
        self._warps = [_Warp(w, min(WARP_SIZE, n - w * WARP_SIZE)) for w in range(-(-n // WARP_SIZE))]
        self._bar_party = []  # thread ids that arrived at the current syncthreads round (race check)
        self._race = _RaceDetector(n) if _racecheck_on() else None

    # -- launcher side ------------------------------------------------------------------------------------

    def run(self, grid_point, *args):
        self._grid_point = tuple(grid_point)
        self._threads = [_SimThread(self, self._grid_point, bp, args) for bp in np.ndindex(*self._block_dim)]
        self._alive = len(self._threads)
        try:
            for t in self._threads:
                t.start()
            with self._lock:
                while self._alive and self._error is None:
                    self._done.wait()
                error = self._error
        except BaseException:
            # Could not start a thread, or the launcher was interrupted (Ctrl-C): do not leave the block's
            # threads blocked forever.
            with self._lock:
                self._abort_all()
            raise
        if error is None:
            for t in self._threads:
                t.join()  # they have all returned from the kernel; this only reaps them
            race = self._race
            if race is not None and race.count:
                raise SharedMemoryRace(
                    f"{race.count} shared-memory race(s) in simulated block ctaid={list(self._grid_point)}; "
                    f"first {len(race.reports)}:\n  " + "\n  ".join(race.reports))
            return
        deadline = time.monotonic() + _ABORT_JOIN_S
        for t in self._threads:
            if t.ident is not None:
                t.join(max(0.0, deadline - time.monotonic()))
        raise error[0].with_traceback(error[1])

    # -- called by the simulated threads (with self._lock not held) ----------------------------------------

    def _fail(self, exc, tb):
        with self._lock:
            if self._error is None:
                self._error = (exc, tb)
            self._abort_all()

    def _thread_exit(self, thread):
        with self._lock:
            self._alive -= 1
            warp = thread.warp
            warp.alive &= ~(1 << thread.lane)
            if not self._aborted:
                # The exited thread counts as arrived at every later barrier, and its lane is no longer
                # waited for by any collective: complete the rounds that were waiting only for it.
                if self._bar_arrived and self._bar_arrived >= self._alive:
                    self._complete_barrier()
                for mask, g in warp.groups.items():
                    if g.arrived and not (mask & warp.alive & ~g.arrived):
                        self._complete_group(g)
                if self._alive and self._blocked >= self._alive:
                    self._deadlock()
            if not self._alive:
                self._done.notify_all()

    def _barrier(self, thread, predicate):
        """Block-wide barrier; returns (number of true predicates, number of threads that arrived)."""
        with self._lock:
            if self._aborted:
                raise _BlockAborted
            self._bar_arrived += 1
            if self._race is not None:
                self._bar_party.append(thread.thread_id)
            if predicate:
                self._bar_true += 1
            if self._bar_arrived >= self._alive:
                self._complete_barrier()
                return self._bar_result
            self._enqueue(thread, self._bar_waiters, "syncthreads()")
        self._sleep(thread)
        # Valid until the next barrier completes, which needs this thread (see _WarpGroup).
        return self._bar_result

    def _named_barrier(self, thread, bar_id, count, wait):
        """Named barrier ``bar_id``: count an arrival; with ``wait``, block until ``count`` arrivals complete
        the round (``bar.sync``), else return at once (``bar.arrive``)."""
        bar_id, count = int(bar_id), int(count)
        op = "bar.sync" if wait else "bar.arrive"
        if not 1 <= bar_id < 16:
            raise ValueError(f"{op}: barrier id {bar_id} outside 1..15 (0 is syncthreads' barrier)")
        if count <= 0 or count % WARP_SIZE:
            raise ValueError(f"{op} {bar_id}, {count}: the thread count must be a positive multiple of 32")
        with self._lock:
            if self._aborted:
                raise _BlockAborted
            rnd = self._named.setdefault(bar_id, [None, 0, []])
            if rnd[1] and rnd[0] != count:
                raise RuntimeError(
                    f"named barrier {bar_id}: {op} with count {count} while {rnd[1]} arrivals of the current "
                    f"round used count {rnd[0]} (undefined behaviour on hardware)"
                )
            rnd[0] = count
            rnd[1] += 1
            if self._race is not None:
                self._race.arrive(bar_id, thread.thread_id)
            if rnd[1] >= count:
                waiters, rnd[2] = rnd[2], []
                rnd[0], rnd[1] = None, 0
                if self._race is not None:
                    self._race.complete(bar_id, [t.thread_id for t in waiters] + ([thread.thread_id] if wait else []))
                self._release(waiters)
                return
            if not wait:
                return
            self._enqueue(thread, rnd[2], f"bar.sync {bar_id}, {count}")
        self._sleep(thread)

    def _mbarrier(self, key, op):
        mb = self._mbar.get(key)
        if mb is None:
            raise RuntimeError(f"{op} on an mbarrier (shared address 0x{key:x}) that was never initialised "
                               "(mbarrier.init): undefined behaviour on hardware")
        return mb

    def _mb_init(self, thread, key, count):
        count = int(count)
        if count < 1:
            raise ValueError(f"mbarrier.init: the expected arrival count must be positive, got {count}")
        with self._lock:
            if self._aborted:
                raise _BlockAborted
            old = self._mbar.get(key)
            if old is not None and old.waiters:
                raise RuntimeError("mbarrier.init on an mbarrier that threads wait on (undefined behaviour)")
            self._mbar[key] = _MBarrier(count)

    def _mb_arrive(self, thread, key):
        with self._lock:
            if self._aborted:
                raise _BlockAborted
            mb = self._mbarrier(key, "mbarrier.arrive")
            if self._race is not None:
                mb.acc = self._race.release(mb.acc, thread.thread_id)
            mb.pending -= 1
            if mb.pending:
                return
            # the phase completes: its joined clock is what a wait on it acquires; the next phase starts
            mb.done_clock, mb.acc = mb.acc, None
            mb.phase += 1
            mb.pending = mb.count
            ready = [t for t, par in mb.waiters if (mb.phase & 1) != par]
            mb.waiters = [(t, par) for t, par in mb.waiters if (mb.phase & 1) == par]
            if self._race is not None:
                for t in ready:
                    self._race.acquire(mb.done_clock, t.thread_id)
            self._release(ready)

    def _mb_wait(self, thread, key, parity):
        parity = int(parity) & 1
        with self._lock:
            if self._aborted:
                raise _BlockAborted
            mb = self._mbarrier(key, "mbarrier.try_wait.parity")
            if (mb.phase & 1) != parity:  # the most recent phase of this parity has completed
                if self._race is not None:
                    self._race.acquire(mb.done_clock, thread.thread_id)
                return
            mb.waiters.append((thread, parity))
            self._enqueue(thread, [], f"mbarrier.try_wait.parity (0x{key:x}, parity {parity})")
        self._sleep(thread)

    def _collective(self, thread, kind, mask, value):
        """Warp rendezvous among the live lanes of ``mask``; returns the round's {lane: value} snapshot."""
        mask = int(mask) & FULL_MASK
        lane = thread.lane
        bit = 1 << lane
        warp = thread.warp
        if not mask & bit:
            raise ValueError(
                f"cuda.{kind}: lane {lane} of warp {warp.index} called it with mask 0x{mask:08x}, which does "
                f"not include its own lane (bit {lane}); that is undefined behaviour on hardware"
            )
        with self._lock:
            if self._aborted:
                raise _BlockAborted
            g = warp.groups.get(mask)
            if g is None:
                g = warp.groups[mask] = _WarpGroup(warp.index)
            if g.arrived and g.kind != kind:
                raise RuntimeError(
                    f"warp collective mismatch in warp {warp.index}: lane {lane} called cuda.{kind} with mask "
                    f"0x{mask:08x} while lanes 0x{g.arrived:08x} of the same mask wait in cuda.{g.kind} "
                    f"(undefined behaviour on hardware)"
                )
            g.kind = kind
            g.values[lane] = value
            g.arrived |= bit
            if not (mask & warp.alive & ~g.arrived):
                self._complete_group(g)
                return g.published
            self._enqueue(thread, g.waiters, f"cuda.{kind}(mask=0x{mask:08x}) in warp {warp.index}")
        self._sleep(thread)
        return g.published

    def _sleep(self, thread):
        # Blocks until _release() (round complete) or _abort_all() releases this thread's wake lock.
        thread._wake.acquire()
        if self._aborted:
            raise _BlockAborted

    # -- internals (self._lock held) -----------------------------------------------------------------------

    def _enqueue(self, thread, waiters, desc):
        waiters.append(thread)
        thread.wait_desc = desc
        self._blocked += 1
        if self._blocked >= self._alive:
            self._deadlock()  # aborts, which releases this thread too: its _sleep() raises _BlockAborted

    def _release(self, waiters):
        self._blocked -= len(waiters)
        for t in waiters:
            t.wait_desc = None
            t._wake.release()

    def _complete_barrier(self):
        if self._race is not None:
            self._race.join(self._bar_party)
            self._bar_party = []
        self._bar_result = (self._bar_true, self._bar_arrived)
        self._bar_arrived = self._bar_true = 0
        waiters, self._bar_waiters = self._bar_waiters, []
        self._release(waiters)

    def _complete_group(self, g):
        if self._race is not None and g.values:
            self._race.join([g.warp_index * WARP_SIZE + lane for lane in g.values])
        g.published = g.values
        g.values = {}
        g.arrived = 0
        waiters, g.waiters = g.waiters, []
        self._release(waiters)

    def _deadlock(self):
        where = {}
        for t in self._threads:
            if t.wait_desc is not None:
                where.setdefault(t.wait_desc, []).append(list(t.threadIdx))
        parts = []
        for desc, tids in sorted(where.items(), key=lambda kv: -len(kv[1])):
            shown = ", ".join(str(tid) for tid in tids[:4]) + (", ..." if len(tids) > 4 else "")
            parts.append(f"{len(tids)} in {desc} (tid {shown})")
        exc = RuntimeError(
            f"deadlock in simulated block ctaid={list(self._grid_point)}: all {self._alive} live threads are "
            f"waiting and none can proceed (a hang or undefined behaviour on hardware): " + "; ".join(parts)
        )
        if self._error is None:
            self._error = (exc, None)
        self._abort_all()

    def _abort_all(self):
        if not self._aborted:
            self._aborted = True
            for t in self._threads:
                t.abort = True
            # Wake every waiter exactly once (a wake lock released twice would raise).
            waiters, self._bar_waiters = self._bar_waiters, []
            for rnd in self._named.values():
                waiters += rnd[2]
                rnd[2] = []
            for mb in self._mbar.values():
                waiters += [t for t, _ in mb.waiters]
                mb.waiters = []
            for warp in self._warps:
                for g in warp.groups.values():
                    waiters += g.waiters
                    g.waiters = []
            self._release(waiters)
        self._done.notify_all()


# ---------------------------------------------------------------------------------------------------------
# The intrinsics, mixed into the simulator's FakeCUDAModule by install()
# ---------------------------------------------------------------------------------------------------------


def _current_thread() -> _SimThread:
    t = threading.current_thread()
    if not isinstance(t, _SimThread):
        raise RuntimeError("CUDA warp intrinsics can only be called from kernel code running in the simulator")
    return t


def bar_sync(barrier, count):
    """Simulator version of PTX ``bar.sync barrier, count`` (call it from kernel code; see "Named barriers")."""
    t = _current_thread()
    t._manager._named_barrier(t, barrier, count, True)


def bar_arrive(barrier, count):
    """Simulator version of PTX ``bar.arrive barrier, count``: counts this thread's arrival, does not wait."""
    t = _current_thread()
    t._manager._named_barrier(t, barrier, count, False)


def _mb_key(bars, i):
    """The shared address of ``bars[i]`` (an mbarrier object: an int64 element of a shared array)."""
    if bars.dtype.itemsize != 8 or bars.ndim != 1:
        raise TypeError(f"an mbarrier is an 8-byte element of a 1-d shared array, got {bars.dtype} {bars.shape}")
    i = int(i)
    if not 0 <= i < bars.shape[0]:
        raise IndexError(f"mbarrier index {i} outside the array of {bars.shape[0]}")
    return bars.__array_interface__["data"][0] + i * bars.strides[0]


def mb_init(bars, i, count):
    """Simulator version of PTX ``mbarrier.init [bars + 8 i], count`` (see "mbarrier objects")."""
    t = _current_thread()
    t._manager._mb_init(t, _mb_key(bars, i), count)


def mb_arrive(bars, i):
    """Simulator version of PTX ``mbarrier.arrive.release.cta [bars + 8 i]``: counts one arrival, does not wait."""
    t = _current_thread()
    t._manager._mb_arrive(t, _mb_key(bars, i))


def mb_wait(bars, i, parity):
    """Simulator version of a loop on PTX ``mbarrier.try_wait.parity.acquire.cta [bars + 8 i], parity``: returns
    once the most recent phase of that parity has completed."""
    t = _current_thread()
    t._manager._mb_wait(t, _mb_key(bars, i), parity)


def _to_int32(bits: int):
    """The int32 with the low 32 bits of ``bits`` (what numba's i4-typed vote/match intrinsics return)."""
    bits &= FULL_MASK
    return np.int32(bits - (1 << 32) if bits & 0x80000000 else bits)


def _unsigned(val):
    """(value as a non-negative int of its bit width, that width): 32 or 64 bits, two's complement.

    NumPy integers use their dtype's width (at least 32: the GPU intrinsics take 32- or 64-bit operands);
    Python ints 32 bits if they fit in int32/uint32, else 64.
    """
    v = int(val)
    if isinstance(val, np.integer):
        width = max(32, val.dtype.itemsize * 8)
    else:
        width = 32 if -(1 << 31) <= v < (1 << 32) else 64
    return v & ((1 << width) - 1), width


class _WarpIntrinsicsMixin:
    """Warp intrinsics and width-aware bit intrinsics for the simulator's fake ``cuda`` module."""

    # -- shuffles ----------------------------------------------------------------------------------------

    def _shfl(self, kind, mask, value, src):
        t = _current_thread()
        values = t._manager._collective(t, kind, mask, value)
        if not 0 <= src < WARP_SIZE:
            return value
        # A source lane that did not take part (absent in a partial warp, returned, not in mask): own value.
        return values.get(src, value)

    def shfl_sync(self, mask, value, src_lane):
        """``value`` of lane ``src_lane % 32``."""
        return self._shfl("shfl_sync", mask, value, int(src_lane) % WARP_SIZE)

    def shfl_up_sync(self, mask, value, delta):
        """``value`` of lane ``laneid - delta``; own value when that is below lane 0."""
        return self._shfl("shfl_up_sync", mask, value, _current_thread().lane - int(delta))

    def shfl_down_sync(self, mask, value, delta):
        """``value`` of lane ``laneid + delta``; own value when that is past lane 31 or absent."""
        return self._shfl("shfl_down_sync", mask, value, _current_thread().lane + int(delta))

    def shfl_xor_sync(self, mask, value, lane_mask):
        """``value`` of lane ``laneid ^ lane_mask`` (own value when that is outside the warp)."""
        return self._shfl("shfl_xor_sync", mask, value, _current_thread().lane ^ int(lane_mask))

    # -- votes and synchronisation -----------------------------------------------------------------------

    def _vote(self, kind, mask, predicate):
        t = _current_thread()
        return t._manager._collective(t, kind, mask, bool(predicate))

    def syncwarp(self, mask=FULL_MASK):
        """Barrier among the live lanes of ``mask``."""
        t = _current_thread()
        t._manager._collective(t, "syncwarp", mask, None)

    def ballot_sync(self, mask, predicate):
        """``np.int32`` with bit i set when lane i took part and its predicate is true."""
        votes = self._vote("ballot_sync", mask, predicate)
        return _to_int32(sum(1 << lane for lane, p in votes.items() if p))

    def all_sync(self, mask, predicate):
        return all(self._vote("all_sync", mask, predicate).values())

    def any_sync(self, mask, predicate):
        return any(self._vote("any_sync", mask, predicate).values())

    def eq_sync(self, mask, predicate):
        return len(set(self._vote("eq_sync", mask, predicate).values())) <= 1

    def match_any_sync(self, mask, value):
        """``np.int32`` mask of the participating lanes whose ``value`` equals this lane's."""
        t = _current_thread()
        values = t._manager._collective(t, "match_any_sync", mask, value)
        return _to_int32(sum(1 << lane for lane, v in values.items() if v == value))

    def match_all_sync(self, mask, value):
        """(``np.int32`` mask of the participating lanes if all values are equal else 0, all equal)."""
        t = _current_thread()
        values = t._manager._collective(t, "match_all_sync", mask, value)
        same = all(v == value for v in values.values())
        return (_to_int32(sum(1 << lane for lane in values)) if same else np.int32(0)), same

    def activemask(self):
        """``np.uint32`` of the warp's live lanes (existing and not returned); no synchronisation."""
        return np.uint32(_current_thread().warp.alive)

    def lanemask_lt(self):
        """``np.uint32`` with the bits of the lanes below this one."""
        return np.uint32((1 << _current_thread().lane) - 1)

    # -- bit intrinsics: the stock ones format with "{:032b}", wrong for negative and 64-bit values --------

    def popc(self, val):
        return bin(_unsigned(val)[0]).count("1")

    def ffs(self, val):
        v, _ = _unsigned(val)
        return (v & -v).bit_length()  # 1-based index of the lowest set bit, 0 for 0

    def clz(self, val):
        v, width = _unsigned(val)
        return width - v.bit_length()

    def brev(self, val):
        v, width = _unsigned(val)
        return int(format(v, f"0{width}b")[::-1], 2)

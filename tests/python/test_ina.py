#!/usr/bin/python3
"""test_ina.py: the Python package ina against a running ina-switch (INA_SWITCH=HOST:PORT).

Run by tests/scripts/test_python.sh. Each group of checks runs in N forked worker processes
(N=1 and N=3), one ina.Context each; the workers report every check to the parent through a
queue, and the parent waits with a deadline and kills what is left. Every rank builds every
rank's input from a seed, so each rank checks its result against the exact sum: int32 exactly
(modulo 2^32), float32 within ina.float_error_bounds() (the C library's ina_float_error_bound
per element). Options: --skip-torch (numpy only), --deadline S (default 120).
"""
import argparse
import multiprocessing as mp
import os
import queue
import socket
import subprocess
import sys
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(HERE)), "python"))

import numpy as np  # noqa: E402

import ina  # noqa: E402

SWITCH = os.environ.get("INA_SWITCH", "")


# ---- helpers used in the workers -------------------------------------------------------------


class Reporter:
    def __init__(self, q, rank, group):
        self.q, self.rank, self.group = q, rank, group

    def check(self, name, cond, detail=""):
        self.q.put((self.group, self.rank, name, bool(cond), str(detail)))
        return cond


def inputs_f32(n, count, seed):
    """Per-rank float32 inputs whose magnitudes vary by block (some tiny, some large), with
    negative values and exact zeros."""
    out = []
    for r in range(n):
        rng = np.random.default_rng(seed * 100 + r)
        x = rng.standard_normal(count).astype(np.float32)
        scale = np.repeat(np.float32(2.0) ** rng.integers(-20, 20, size=count // 512 + 1),
                          512)[:count].astype(np.float32)
        x *= scale
        x[::97] = 0
        out.append(x)
    return out


def inputs_i32(n, count, seed):
    """Per-rank int32 inputs over the whole range, so sums wrap."""
    return [np.random.default_rng(seed * 100 + 50 + r).integers(
        -2**31, 2**31, size=count, dtype=np.int64).astype(np.int32) for r in range(n)]


def wrapped_sum(xs):
    s = np.sum([x.astype(np.int64) for x in xs], axis=0)
    return ((s + 2**31) % 2**32 - 2**31).astype(np.int32)


def within_bound(result, xs, k, scale=1.0):
    """@return (ok, worst ratio |err|/bound): result vs the exact sum of xs (times scale)."""
    exact, bound = ina.float_error_bounds(xs, k)
    err = np.abs(np.asarray(result, dtype=np.float64).ravel() - exact * scale)
    bound = bound * scale + np.abs(exact * scale) * 2.0 ** -24  # + the division's rounding
    ratio = float(np.max(err / np.maximum(bound, 1e-300))) if err.size else 0.0
    return bool(np.all(err <= bound)), ratio


def expect_result(rep, name, fn, verify):
    """fn() must return a result that verify() accepts. libina implements every type and op
    used here: an InaError (NOTSUP included) is a regression, not a tolerated answer."""
    try:
        res = fn()
    except ina.InaError as e:
        rep.check(name, False, "raised %s: %s" % (e.name, e))
        return
    ok, detail = verify(res)
    rep.check(name, ok, detail)


def dtype_bounds(dtype, xs, k):
    """@return (exact, bound) per element of a SUM of xs (one array per rank) in dtype:
    ina_error_bound(dtype, N, amax of the element's block of k, exact), float64 arrays."""
    import ctypes

    lib = ina._lib.lib()
    fn = lib.ina_error_bound
    fn.restype = ctypes.c_double
    fn.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_double, ctypes.c_double]
    st = np.stack([np.asarray(x, dtype=np.float64).ravel() for x in xs])
    exact, amax_el = st.sum(axis=0), np.abs(st).max(axis=0)
    bound = np.empty(exact.size)
    for lo in range(0, exact.size, k):
        amax = float(amax_el[lo:lo + k].max())
        for i in range(lo, min(exact.size, lo + k)):
            bound[i] = fn(dtype, len(xs), amax, float(exact[i]))
    return exact, bound


# ---- groups of checks (each runs on every rank) --------------------------------------------


def group_numpy(ctx, rep, n, rank):
    k = ctx.elems_per_packet
    rep.check("info: rank and world size", (ctx.rank, ctx.world_size) == (rank, n),
              ctx.info())
    rep.check("info: one switch, one level", (ctx.shards, ctx.levels) == (1, 1), ctx.info())
    # float32, in place, several packets, a ragged tail
    count = 3 * k + 123
    xs = inputs_f32(n, count, 1)
    a = xs[rank].copy()
    r = ina.allreduce(a, ctx=ctx)
    ok, ratio = within_bound(a, xs, k)
    rep.check("numpy float32 sum within ina_float_error_bound", ok, "worst err/bound %.3g" % ratio)
    rep.check("numpy allreduce returns the same array (in place)", r is a)
    # int32, exact with wraparound
    ys = inputs_i32(n, 5000, 2)
    b = ys[rank].copy()
    ina.allreduce(b, ctx=ctx)
    rep.check("numpy int32 sum exact (wraps mod 2^32)", np.array_equal(b, wrapped_sum(ys)))
    # non-contiguous view: only the view's elements change
    base = np.arange(4000, dtype=np.int32).reshape(40, 100) * (rank + 1)
    view = base[::2, 1::3]
    before = base.copy()
    ina.allreduce(view, ctx=ctx)
    want_view = before[::2, 1::3] // (rank + 1) * (n * (n + 1) // 2)
    mask = np.ones_like(base, dtype=bool)
    mask[::2, 1::3] = False
    rep.check("numpy non-contiguous view reduced in place", np.array_equal(view, want_view))
    rep.check("numpy non-contiguous: elements outside the view untouched",
              np.array_equal(base[mask], before[mask]))
    # avg: float32 and int32 (truncated toward zero)
    c = xs[rank].copy()
    ina.allreduce(c, op="avg", ctx=ctx)
    ok, ratio = within_bound(c, xs, k, scale=1.0 / n)
    rep.check("numpy float32 avg within bound / N", ok, "worst err/bound %.3g" % ratio)
    small = [np.array([7, -7, 5, -5, 2**31 - 1], dtype=np.int32) * (1 if r == 0 else 0) +
             np.int32(r) for r in range(n)]
    d = small[rank].copy()
    ina.allreduce(d, op="avg", ctx=ctx)
    s = np.sum([x.astype(np.int64) for x in small], axis=0)
    s = (s + 2**31) % 2**32 - 2**31
    want = (np.sign(s) * (np.abs(s) // n)).astype(np.int32)
    rep.check("numpy int32 avg = wrapped sum / N truncated toward zero", np.array_equal(d, want),
              "%s vs %s" % (d, want))
    # async: two in flight, completed with test() and wait()
    e1, e2 = xs[rank][:1000].copy(), ys[rank][:777].copy()
    h1 = ina.allreduce_async(e1, ctx=ctx)
    h2 = ina.allreduce_async(e2, "sum", ctx=ctx)
    deadline = time.monotonic() + 30
    while not h1.test() and time.monotonic() < deadline:
        pass
    rep.check("async test() reports completion", h1.done)
    rep.check("async wait() returns the array", h2.wait() is e2)
    rep.check("async int32 result exact", np.array_equal(e2, wrapped_sum([y[:777] for y in ys])))
    ok, ratio = within_bound(e1, [x[:1000] for x in xs], k)
    rep.check("async float32 result within bound", ok, "worst err/bound %.3g" % ratio)
    # empty array, then float64 sum and int32 max and min: implemented, so they must work
    ina.allreduce(np.zeros(0, dtype=np.float32), ctx=ctx)
    rep.check("empty array", True)
    f64 = [x.astype(np.float64) for x in xs]

    def f64_ok(res):
        exact, bound = dtype_bounds(ina.FLOAT64, f64, k)
        err = np.abs(res - exact)
        return bool(np.all(err <= bound)), "worst err/bound %.3g" % float(
            np.max(err / np.maximum(bound, 1e-300)))
    expect_result(rep, "numpy float64 sum within ina_error_bound",
                  lambda: ina.allreduce(f64[rank].copy(), ctx=ctx), f64_ok)
    expect_result(rep, "numpy int32 max exact",
                  lambda: ina.allreduce(ys[rank].copy(), "max", ctx=ctx),
                  lambda res: (np.array_equal(res, np.max(ys, axis=0)), ""))
    expect_result(rep, "numpy int32 min exact",
                  lambda: ina.allreduce(ys[rank].copy(), "min", ctx=ctx),
                  lambda res: (np.array_equal(res, np.min(ys, axis=0)), ""))
    c = xs[rank].copy()
    h = ina.allreduce_async(c, "avg", ctx=ctx)
    rep.check("avg is done by libina (no sum-then-divide in Python)", not h._post_divide)
    h.wait()
    # float max/min: exact (order keys on the switch's int32 max/min), NaN if any rank has one
    g = xs[rank][:3000].copy()
    g[7] = np.nan if rank == n - 1 else g[7]
    want_max, want_min = np.max([x[:3000] for x in xs], axis=0), np.min([x[:3000] for x in xs], axis=0)
    want_max[7] = want_min[7] = np.nan
    h = g.copy()
    ina.allreduce(g, "max", ctx=ctx)
    ina.allreduce(h, "min", ctx=ctx)
    rep.check("numpy float32 max exact, NaN kept", np.array_equal(g, want_max, equal_nan=True))
    rep.check("numpy float32 min exact, NaN kept", np.array_equal(h, want_min, equal_nan=True))
    try:
        ina.allreduce(f64[rank].copy(), "max", ctx=ctx)
        rep.check("numpy float64 max refused (NOTSUP)", False, "it was accepted")
    except ina.InaError as e:
        rep.check("numpy float64 max refused (NOTSUP)", e.code == ina.ERR_NOTSUP, e.name)
    # argument errors, raised before anything is sent (the context stays usable)
    for what, fn, exc in (
            ("list is a TypeError", lambda: ina.allreduce([1.0, 2.0], ctx=ctx), TypeError),
            ("int64 array is a TypeError",
             lambda: ina.allreduce(np.zeros(4, dtype=np.int64), ctx=ctx), TypeError),
            ("unknown op is a ValueError",
             lambda: ina.allreduce(np.zeros(4, dtype=np.float32), "prod", ctx=ctx), ValueError),
            ("read-only array is a ValueError",
             lambda: ina.allreduce(np.broadcast_to(np.float32(1), (4,)), ctx=ctx), ValueError)):
        try:
            fn()
            rep.check(what, False, "no exception")
        except exc:
            rep.check(what, True)
    g = ys[rank][:10].copy()
    ina.allreduce(g, ctx=ctx)
    rep.check("context usable after argument errors", np.array_equal(g, wrapped_sum(
        [y[:10] for y in ys])))
    st = ctx.stats()
    rep.check("stats count the operations", st["ops"] >= 8, st)


def group_torch(ctx, rep, n, rank):
    import torch

    k = ctx.elems_per_packet
    xs = inputs_f32(n, 2 * k + 5, 3)
    t = torch.from_numpy(xs[rank].copy())
    ina.allreduce(t, ctx=ctx)
    ok, ratio = within_bound(t.numpy(), xs, k)
    rep.check("torch float32 sum within bound", ok, "worst err/bound %.3g" % ratio)
    # non-contiguous (transposed) tensor
    m = [x[:40 * 70].reshape(40, 70) for x in xs]
    tt = torch.from_numpy(m[rank].T.copy()).t()  # the transpose of a contiguous tensor
    rep.check("torch test tensor is non-contiguous", not tt.is_contiguous())
    ina.allreduce(tt, ctx=ctx)
    ok, ratio = within_bound(tt.contiguous().numpy(), m, k)
    rep.check("torch non-contiguous float32 sum within bound", ok, "worst %.3g" % ratio)
    ys = inputs_i32(n, 3000, 4)
    ti = torch.from_numpy(ys[rank].copy())
    ina.allreduce(ti, ctx=ctx)
    rep.check("torch int32 sum exact", np.array_equal(ti.numpy(), wrapped_sum(ys)))
    tv = torch.from_numpy(ys[rank].copy())[::3]
    ina.allreduce(tv, ctx=ctx)
    rep.check("torch int32 strided view exact",
              np.array_equal(tv.numpy(), wrapped_sum([y[::3] for y in ys])))
    # requires_grad leaf, avg
    w = torch.from_numpy(xs[rank].copy()).requires_grad_()
    ina.allreduce(w, op="avg", ctx=ctx)
    ok, ratio = within_bound(w.detach().numpy(), xs, k, scale=1.0 / n)
    rep.check("torch float32 avg (requires_grad leaf) within bound / N", ok, "worst %.3g" % ratio)
    h = ina.allreduce_async(torch.from_numpy(ys[rank][:100].copy()), ctx=ctx)
    rep.check("torch async", np.array_equal(h.wait().numpy(), wrapped_sum([y[:100] for y in ys])))
    for dt, code in ((torch.float16, ina.FLOAT16), (torch.bfloat16, ina.BFLOAT16),
                     (torch.float64, ina.FLOAT64)):
        # float16 tops out at 65504: bring the inputs (up to ~2^21) into its range.
        div = 256.0 if dt == torch.float16 else 1.0
        src = [torch.from_numpy(x[:500] / div).to(dt) for x in xs]

        def close(res, src=src, code=code):
            exact, bound = dtype_bounds(code, [s.double().numpy() for s in src], k)
            err = np.abs(res.double().numpy() - exact)
            return bool(np.all(err <= bound)), "worst err/bound %.3g" % float(
                np.max(err / np.maximum(bound, 1e-300)))
        expect_result(rep, "torch %s sum within ina_error_bound" % str(dt).replace("torch.", ""),
                      lambda src=src: ina.allreduce(src[rank].clone(), ctx=ctx), close)


def group_hook(ctx, rep, n, rank):
    """DDP with the ina hook against the same model reduced by gloo: same gradients."""
    import datetime

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    import ina.torch as itorch

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method="tcp://" + os.environ["TEST_MASTER"], rank=rank,
                            world_size=n, timeout=datetime.timedelta(seconds=60))
    try:
        for dtype, state in ((torch.float32, itorch.HookState(ctx)),
                             (torch.float32, itorch.HookState(ctx, background=False)),
                             (torch.float64, itorch.HookState(ctx))):
            torch.manual_seed(5)
            ref = torch.nn.Sequential(torch.nn.Linear(20, 30), torch.nn.Tanh(),
                                      torch.nn.Linear(30, 4)).to(dtype)
            mine = torch.nn.Sequential(torch.nn.Linear(20, 30), torch.nn.Tanh(),
                                       torch.nn.Linear(30, 4)).to(dtype)
            mine.load_state_dict(ref.state_dict())
            d_ref, d_ina = DDP(ref), DDP(mine)
            d_ina.register_comm_hook(state, itorch.allreduce_hook)
            g = torch.Generator().manual_seed(100 + rank)
            x = torch.randn(16, 20, generator=g).to(dtype)
            for model in (d_ref, d_ina):
                model(x).square().sum().backward()
            worst = 0.0
            for p_ref, p_ina in zip(ref.parameters(), mine.parameters()):
                scale = p_ref.grad.abs().max().item()
                worst = max(worst, (p_ref.grad - p_ina.grad).abs().max().item() / (scale or 1))
            tag = "%s, %s" % (str(dtype).replace("torch.", ""),
                              "helper thread" if state.background else "inline")
            # Per element the ina error is at most ~2^-24 relative to the bucket block's
            # largest gradient times N (ina_float_error_bound), far below 1e-5.
            rep.check("DDP hook (%s): gradients match gloo's average" % tag, worst < 1e-5,
                      "worst relative diff %.3g" % worst)
            rep.check("DDP hook (%s): gradient dtype kept" % tag,
                      all(p.grad.dtype == dtype for p in mine.parameters()))
            rep.check("DDP hook (%s): reduced by libina in its dtype, no float32 detour" % tag,
                      state.native.get(dtype, True), state.native)
            state.close()
        # state=None: the default context from the environment (RANK, WORLD_SIZE, INA_SWITCH,
        # INA_JOB as torchrun would set them).
        torch.manual_seed(6)
        lin = torch.nn.Linear(8, 3)
        dd = DDP(lin)
        dd.register_comm_hook(None, itorch.allreduce_hook)
        dd(torch.full((2, 8), float(rank + 1))).sum().backward()
        want = torch.full((3, 8), 2.0 * (n + 1) / 2)  # mean over ranks of 2*(rank+1)
        rep.check("DDP hook with state=None (default context from the environment)",
                  torch.allclose(lin.weight.grad, want, rtol=1e-6),
                  lin.weight.grad[0, :3])
        rep.check("default context came from RANK/WORLD_SIZE",
                  (ina.default_context().rank, ina.default_context().world_size) == (rank, n))
        ina.finalize()
    finally:
        dist.destroy_process_group()


def group_lifecycle(ctx, rep, n, rank):
    ctx.close()
    rep.check("close() marks the context closed", ctx.closed)
    try:
        ina.allreduce(np.zeros(4, dtype=np.float32), ctx=ctx)
        rep.check("allreduce on a closed context raises", False, "no exception")
    except ina.InaError as e:
        rep.check("allreduce on a closed context raises INA_ERR_CLOSED",
                  e.code == ina.ERR_CLOSED and e.name == "INA_ERR_CLOSED" and e.message, e)
    ctx.close()
    rep.check("close() is idempotent", True)
    with ina.Context(switch=SWITCH, rank=0, world_size=1, job="pylife-%d" % os.getpid()) as c2:
        rep.check("context manager: a one-rank job", c2.world_size == 1)
    rep.check("context manager closes", c2.closed)
    t0 = time.monotonic()
    try:
        ina.Context(switch="127.0.0.1:9", rank=0, world_size=1, job="nobody",
                    join_timeout_ms=1500, env=False)
        rep.check("no switch: Context raises", False, "no exception")
    except ina.InaError as e:
        rep.check("no switch: InaError TIMEOUT or ECONNREFUSED with a message",
                  e.code in (ina.ERR_TIMEOUT, -111) and e.message and e.name,
                  "%s (%.1f s)" % (e, time.monotonic() - t0))


def group_floatadd(ctx, rep, n, rank):
    """The context was created with float_add="switch" (worker()): the switch adds floats."""
    k = ctx.elems_per_packet
    rep.check("float_add: the switch adds floats", ctx.float_add == "switch"
              and ctx.info()["float_add"] == "switch" and ctx.path == "switch", ctx.info())
    count = 3 * k + 17
    xs = inputs_f32(n, count, 7)
    buf = xs[rank].copy()
    ina.allreduce(buf, ctx=ctx)
    exact, bound = ina.float_error_bounds(xs, k, float_add="switch")
    err = np.abs(buf.astype(np.float64) - exact)
    rep.check("float_add switch: float32 sum within ina_float_add_error_bound",
              bool(np.all(err <= bound)), "worst %.3g" % float(np.max(err / np.maximum(bound, 1e-300))))
    # NaN stays in its own element (quantized floats would make its block NaN)
    y = np.ones(2 * k, dtype=np.float32)
    if rank == 0:
        y[5] = np.nan
    ina.allreduce(y, ctx=ctx)
    rep.check("float_add switch: NaN only in its own element",
              bool(np.isnan(y[5]) and np.all(np.delete(y, 5) == n)), y[:8])
    try:
        ina.Context(switch=SWITCH, rank=0, world_size=1, job="pyfa-bad", float_add="fast")
        rep.check("float_add='fast' raises ValueError", False, "no exception")
    except ValueError as e:
        rep.check("float_add='fast' raises ValueError", "float_add" in str(e), e)


GROUPS = {"numpy": group_numpy, "torch": group_torch, "hook": group_hook,
          "lifecycle": group_lifecycle, "floatadd": group_floatadd}


def worker(q, group, n, rank, job):
    import ctypes
    import signal

    ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG: die with the parent
    rep = Reporter(q, rank, group)
    try:
        if group == "hook":  # the environment torchrun would set, for the default context
            os.environ.update({"RANK": str(rank), "WORLD_SIZE": str(n), "INA_SWITCH": SWITCH,
                               "INA_JOB": job + "-env"})
        extra = {"float_add": "switch"} if group == "floatadd" else {}
        ctx = ina.Context(switch=SWITCH, rank=rank, world_size=n, job=job, join_timeout_ms=30000,
                          timeout_ms=30000, **extra)
        GROUPS[group](ctx, rep, n, rank)
        ctx.close()
        q.put((group, rank, None, True, "done"))
    except BaseException:  # noqa: BLE001 - reported to the parent
        rep.check("no exception", False, traceback.format_exc())
        q.put((group, rank, None, False, "done"))
    finally:
        q.close()
        q.join_thread()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_group(group, n, deadline_s):
    """Fork n workers for one group. @return (passed, failed)."""
    ctx = mp.get_context("fork")
    q = ctx.Queue()
    job = ("py-%s-%d-%d" % (group, n, os.getpid()))[:31]
    os.environ["TEST_MASTER"] = "127.0.0.1:%d" % free_port()
    procs = [ctx.Process(target=worker, args=(q, group, n, r, job), daemon=True)
             for r in range(n)]
    for p in procs:
        p.start()
    passed = failed = finished = 0
    seen = {}
    deadline = time.monotonic() + deadline_s
    while finished < n and time.monotonic() < deadline:
        try:
            g, rank, name, ok, detail = q.get(timeout=0.5)
        except queue.Empty:
            if all(not p.is_alive() for p in procs) and q.empty():
                break
            continue
        if name is None:
            finished += 1
            continue
        key = (name, ok)
        seen.setdefault(key, []).append(rank)
        if ok:
            passed += 1
        else:
            failed += 1
            print("FAIL [%s N=%d rank %d] %s: %s" % (g, n, rank, name, detail), flush=True)
    for key, ranks in seen.items():
        if key[1]:
            print("ok [%s N=%d] %s (ranks %s)" % (group, n, key[0],
                                                  ",".join(map(str, sorted(ranks)))))
    if finished < n:
        failed += 1
        print("FAIL [%s N=%d] only %d of %d workers finished within %d s" % (
            group, n, finished, n, deadline_s), flush=True)
    for p in procs:
        p.join(timeout=max(1.0, deadline - time.monotonic()))
        if p.is_alive():
            p.kill()
            p.join(timeout=5)
        elif p.exitcode != 0:
            failed += 1
            print("FAIL [%s N=%d] worker exit code %s" % (group, n, p.exitcode))
    return passed, failed


def check_loader():
    """INA_LIBRARY pointing nowhere gives a clear OSError (in a fresh interpreter: the library
    is loaded once per process)."""
    code = "import ina\ntry:\n    ina.library_version()\nexcept OSError as e:\n    print(e)\n"
    env = dict(os.environ, INA_LIBRARY="/nonexistent/libina.so",
               PYTHONPATH=os.path.join(os.path.dirname(os.path.dirname(HERE)), "python"))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=60)
    ok = "INA_LIBRARY=/nonexistent/libina.so cannot be loaded" in out.stdout
    print(("ok" if ok else "FAIL") + ": INA_LIBRARY set to a missing file: clear OSError"
          + ("" if ok else " (got %r %r)" % (out.stdout, out.stderr)))
    return (1, 0) if ok else (0, 1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--skip-torch", action="store_true")
    ap.add_argument("--deadline", type=float, default=120)
    a = ap.parse_args()
    if not SWITCH:
        sys.exit("test_ina: set INA_SWITCH=HOST:PORT of a running ina-switch")
    print("libina %s from %s" % (ina.library_version(), ina.library_path()))
    if not a.skip_torch:
        import torch  # noqa: F401  (imported before forking: the workers inherit it)
    plan = [("numpy", 1), ("numpy", 3), ("lifecycle", 1), ("floatadd", 3)]
    if not a.skip_torch:
        plan += [("torch", 1), ("torch", 3), ("hook", 2)]
    passed, failed = check_loader()
    t_end = time.monotonic() + a.deadline
    for group, n in plan:
        left = t_end - time.monotonic()
        if left <= 0:
            failed += 1
            print("FAIL: out of time before %s N=%d" % (group, n))
            continue
        p, f = run_group(group, n, left)
        passed, failed = passed + p, failed + f
    print("test_ina: %d checks passed, %d failed" % (passed, failed))
    return 1 if failed or not passed else 0


if __name__ == "__main__":
    sys.exit(main())

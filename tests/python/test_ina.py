#!/usr/bin/python3
"""test_ina.py: the Python package ina against a running ina-switch (INA_SWITCH=HOST:PORT).

Run by tests/scripts/test_python.sh. Each group of checks runs in N forked worker processes
(N=1 and N=3), one ina.Context each; the workers report every check to the parent through a
queue, and the parent waits with a deadline and kills what is left. Every rank builds every
rank's input from a seed, so each rank checks its result against the exact sum: int32 exactly
(modulo 2^32), float32 within ina.float_error_bounds() (the C library's ina_float_error_bound
per element). Options: --skip-torch (numpy only), --deadline S (default 120), --groups LIST
(only those groups, e.g. backend,staged).
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


def strided_layouts(torch, rank, dtype):
    """Every non-contiguous (and a few contiguous but unusual) layout, as (name, base, view):
    base is the tensor that owns the memory, view the tensor all-reduced. Rank r's values are
    (i % 13 + 1) * (r + 1) over base's storage, so sums are exact in every dtype used."""
    def base(*shape):
        numel = 1
        for d in shape:
            numel *= d
        return ((torch.arange(numel) % 13 + 1) * (rank + 1)).to(dtype).reshape(shape)
    cl = base(2, 3, 4, 5).to(memory_format=torch.channels_last)
    scalar = base(1).reshape(())
    empty = base(0)
    out = [("transposed", base(6, 10), lambda b: b.t()),
           ("sliced with a step", base(60), lambda b: b[::3]),
           ("columns with a step", base(6, 10), lambda b: b[:, 2:9:3]),
           ("offset and step", base(60), lambda b: b[5::4]),
           ("storage offset, contiguous", base(60), lambda b: b[7:31]),
           ("channels_last", cl, lambda b: b),
           ("channels_last, sliced", cl.clone(memory_format=torch.channels_last),
            lambda b: b[:, 1:, :, ::2]),
           ("0-dim view with an offset", base(60), lambda b: b[4]),
           ("0-dim", scalar, lambda b: b),
           ("empty view with an offset", base(60), lambda b: b[9:9]),
           ("empty", empty, lambda b: b)]
    return [(name, b, fn(b), fn) for name, b, fn in out]


def check_strided(rep, n, rank, tag, reduce_fn, dtype, torch):
    """reduce_fn(tensor) all-reduces (SUM) in place. Every layout of strided_layouts: the view
    equals the view of the summed bases and the all-reduce of its contiguous copy, and no
    element of the base outside the view changed. Then expanded views raise ValueError and
    leave their memory alone."""
    for name, base, view, fn in strided_layouts(torch, rank, dtype):
        before = base.clone()
        total = sum({nm: b for nm, b, _, _ in strided_layouts(torch, r, dtype)}[name]
                    for r in range(n))
        want = fn(total)
        dense = view.contiguous().clone()
        reduce_fn(dense)
        reduce_fn(view)
        mask = torch.ones(base.shape, dtype=torch.bool)
        fn(mask).fill_(False)  # True outside the view
        rep.check("%s %s: %s equals the contiguous result" % (
            tag, str(dtype).replace("torch.", ""), name),
            torch.equal(view, want) and torch.equal(view, dense),
            "got %s want %s" % (view.flatten()[:6].tolist(), want.flatten()[:6].tolist()))
        rep.check("%s %s: %s: nothing outside the view written" % (
            tag, str(dtype).replace("torch.", ""), name),
            torch.equal(base[mask], before[mask]),
            "%d elements changed" % int((base[mask] != before[mask]).sum()))
    for name, t in (("expanded", torch.ones(3, dtype=dtype).expand(4, 3)),
                    ("broadcast row", torch.ones(1, 5, dtype=dtype).expand(3, 5))):
        mem = t._base.clone() if t._base is not None else None
        try:
            reduce_fn(t)
            rep.check("%s: %s view refused" % (tag, name), False, "no exception")
        except ValueError as e:
            rep.check("%s: %s view refused with ValueError, memory untouched" % (tag, name),
                      "overlap" in str(e) and (mem is None or torch.equal(t._base, mem)), e)


# ---- groups of checks (each runs on every rank) --------------------------------------------


def check_auto_lanes(rep, n, rank, job):
    """The defaults from the host: lanes "auto" (the default). Each rank sees 3n(rank+1)
    cores, so it proposes ina.auto_lanes()'s count, 3n(rank+1) // n capped at 4 (3, 4, 4):
    the job runs the smallest, 3 at N=3, and sums right."""
    saved = os.environ.get("INA_AUTO_CORES")
    os.environ["INA_AUTO_CORES"] = str(3 * n * (rank + 1))
    try:
        auto = ina.auto_lanes(switch=SWITCH, world_size=n)
        with ina.Context(switch=SWITCH, rank=rank, world_size=n, job=job + "-auto",
                         join_timeout_ms=30000, timeout_ms=30000) as c:
            x = np.arange(10000, dtype=np.int32) * (rank + 1)
            ina.allreduce(x, ctx=c)
            want = 1 if n == 1 else 3
            rep.check("lanes auto: the rank proposed auto_lanes()'s count, the job runs the "
                      "smallest (%d), the sum is exact" % want,
                      c.lanes_proposed == auto["lanes"] == (1 if n == 1 else min(4, 3 * (rank + 1)))
                      and c.lanes == want and c.info()["lanes_proposed"] == auto["lanes"]
                      and auto["cores"] == 3 * n * (rank + 1) and auto["local_workers"] == n
                      and np.array_equal(x, np.arange(10000, dtype=np.int32) * (n * (n + 1) // 2)),
                      (auto, c.lanes, c.lanes_proposed))
    finally:
        if saved is None:
            os.environ.pop("INA_AUTO_CORES", None)
        else:
            os.environ["INA_AUTO_CORES"] = saved


def group_numpy(ctx, rep, n, rank):
    check_auto_lanes(rep, n, rank, ctx.job)
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


class LibSpy:
    """Stands in for a Context's libina handle and records (dtype code, count, buffer address)
    of every all-reduce started: what the library was actually handed."""

    def __init__(self, lib):
        self._lib = lib
        self.started = []

    def __getattr__(self, name):
        fn = getattr(self._lib, name)
        if name != "ina_allreduce_sparse_start":
            return fn

        def start(h, send, recv, count, dtype, *rest):
            self.started.append((dtype, count, send))
            return fn(h, send, recv, count, dtype, *rest)
        return start


def group_hook16(ctx, rep, n, rank):
    """16-bit gradients: a bfloat16 or float16 bucket through allreduce_hook, and a float32 model
    through bf16_compress_hook / fp16_compress_hook, against the exact average of every rank's
    gradient (each rank computes all of them from the seeds); libina must be handed the 16-bit
    tensor itself (its dtype code, its count), never a float32 copy."""
    import datetime

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    import ina.torch as itorch

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method="tcp://" + os.environ["TEST_MASTER"], rank=rank,
                            world_size=n, timeout=datetime.timedelta(seconds=60))
    spy = ctx._lib = LibSpy(ctx._lib)
    codes = {torch.bfloat16: ina.BFLOAT16, torch.float16: ina.FLOAT16}

    def net():
        torch.manual_seed(7)
        return torch.nn.Sequential(torch.nn.Linear(20, 30), torch.nn.Tanh(),
                                   torch.nn.Linear(30, 4))

    def inputs(r):
        return torch.randn(16, 20, generator=torch.Generator().manual_seed(200 + r))

    # The exact average gradient of the float32 model, in float64, from every rank's input.
    class Bucket:  # what the hooks use of DDP's GradBucket
        def __init__(self, t):
            self.t = t

        def buffer(self):
            return self.t

    exact = None
    for r in range(n):
        m = net().double()
        m(inputs(r).double()).square().sum().backward()
        g = [p.grad / n for p in m.parameters()]
        exact = g if exact is None else [a + b for a, b in zip(exact, g)]
    try:
        cases = [("bfloat16 model, allreduce_hook", torch.bfloat16, torch.bfloat16,
                  itorch.allreduce_hook, True),
                 ("float16 model, allreduce_hook", torch.float16, torch.float16,
                  itorch.allreduce_hook, True),
                 ("float32 model, bf16_compress_hook", torch.float32, torch.bfloat16,
                  itorch.bf16_compress_hook, True),
                 ("float32 model, fp16_compress_hook", torch.float32, torch.float16,
                  itorch.fp16_compress_hook, True),
                 ("float32 model, bf16_compress_hook inline", torch.float32, torch.bfloat16,
                  itorch.bf16_compress_hook, False)]
        for tag, mdt, wire, hook, background in cases:
            state = itorch.HookState(ctx, background=background)
            model = net()
            del spy.started[:]
            if mdt != torch.float32:
                # A 16-bit model's bucket: DDP cannot run one here (Gloo before torch 2.x has no
                # bfloat16 to broadcast the parameters with, and CPU matmuls no float16), so
                # the float32 gradients are cast to mdt into the flat bucket DDP would hand over.
                model(inputs(rank)).square().sum().backward()
                flat = torch.cat([p.grad.reshape(-1) for p in model.parameters()]).to(mdt)
                hook(state, Bucket(flat)).wait()
                grads, off = [], 0
                for p in model.parameters():
                    grads.append(flat[off:off + p.numel()].view_as(p))
                    off += p.numel()
            else:
                d = DDP(model)
                d.register_comm_hook(state, hook)
                d(inputs(rank)).square().sum().backward()
                grads = [p.grad for p in model.parameters()]
            # The gradients hold the average: within the 16-bit rounding of each rank's
            # gradient and of the result (2^-9 each for bfloat16, 2^-12 for float16, relative
            # to the element), a few of them relative to the parameter's largest gradient.
            tol = {torch.bfloat16: 2.0 ** -6, torch.float16: 2.0 ** -9}[wire]
            worst = max(((g.double() - e).abs().max() / e.abs().max()).item()
                        for g, e in zip(grads, exact))
            rep.check("hook16 (%s): gradients are the average of every rank's" % tag,
                      worst <= tol, "worst relative diff %.3g (tolerance %.3g)" % (worst, tol))
            rep.check("hook16 (%s): the gradients keep the model's dtype" % tag,
                      all(g.dtype == mdt for g in grads))
            numel = sum(p.numel() for p in model.parameters())
            rep.check("hook16 (%s): libina reduced %s, the whole bucket, no float32 detour" % (
                      tag, str(wire).replace("torch.", "")),
                      len(spy.started) >= 1 and all(c == codes[wire] for c, _, _ in spy.started)
                      and sum(k for _, k, _ in spy.started) == numel
                      and state.native.get(wire, True), (spy.started, numel, state.native))
            state.close()
        # The Future of a compression hook holds the bucket itself, averaged, in float32.
        st = itorch.HookState(ctx, background=True)
        b = torch.full((5000,), float(rank + 1))
        out = itorch.bf16_compress_hook(st, Bucket(b)).wait()
        rep.check("bf16_compress_hook: the Future holds the bucket, averaged, float32",
                  out is b and b.dtype == torch.float32
                  and torch.equal(b, torch.full((5000,), (n + 1) / 2.0)), b[:3])
        st.close()
        try:
            itorch.bf16_compress_hook(object(), Bucket(b))
            rep.check("bf16_compress_hook: a wrong state is refused", False, "no exception")
        except TypeError as e:
            rep.check("bf16_compress_hook: a wrong state is refused", "HookState" in str(e), e)
    finally:
        ctx._lib = spy._lib
        dist.destroy_process_group()


def group_staged(ctx, rep, n, rank):
    """The staged path of CUDA buckets (chunks through reused host buffers, two copy streams),
    driven by ina.torch.CpuStandIn over CPU tensors: the same code as on a GPU but for the
    copies. Exact sums, the order of copies and all-reduces, the Future completing after the
    last copy back, buffer reuse, a failure midway; then DDP against gloo."""
    import datetime

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    import ina.torch as itorch

    torch.set_num_threads(1)
    # 1. One tensor of 5.5 chunks through an Engine, each copy slowed by 5 ms.
    log = []
    copier = itorch.CpuStandIn(delay_s=0.005, log=log)
    eng = itorch.Engine(ctx, device_copy=copier, chunk_bytes=16384)
    eng.events = []
    count = 4096 * 5 + 2048
    xs = [torch.arange(count, dtype=torch.int32) * (r + 1) - 7 * r for r in range(n)]
    t = xs[rank].clone()
    t0 = time.perf_counter()
    fut = eng.submit(t, "sum")
    returned_s = time.perf_counter() - t0
    rep.check("staged: submit returns before the work is done", not fut.done(),
              "returned after %.1f ms" % (returned_s * 1e3))
    fut.wait()
    want = sum(x.long() for x in xs).int()
    rep.check("staged: int32 sum exact over 6 chunks", torch.equal(t, want))
    ev = {(what, k): tm for what, k, tm in eng.events + log}
    nchunks = 6
    order_ok = all(ev[("d2h_end", k)] <= ev[("ar_start", k)] <= ev[("ar_end", k)]
                   <= ev[("h2d_start", k)] <= ev[("h2d_end", k)] <= ev[("done", None)]
                   for k in range(nchunks))
    rep.check("staged: per chunk: copy to host, all-reduce, copy back, then the Future",
              order_ok, sorted(ev.items(), key=lambda kv: kv[1]))
    rep.check("staged: chunk k+1's all-reduce starts before chunk k's ends (2 in flight)",
              all(ev[("ar_start", k + 1)] < ev[("ar_end", k)] for k in range(nchunks - 1)))
    rep.check("staged: chunk 0 goes back to the device while later chunks reduce",
              ev[("h2d_end", 0)] < ev[("ar_end", nchunks - 1)])
    allocs = copier.allocations
    for step in range(3):
        u = xs[rank].clone()
        eng.submit(u, "sum").wait()
        rep.check("staged: step %d exact, reusing the host buffer" % step,
                  torch.equal(u, want) and copier.allocations == allocs, copier.allocations)
    f32 = [torch.randn(30000, generator=torch.Generator().manual_seed(9 + r)) for r in range(n)]
    u = f32[rank].clone()
    eng.submit(u, "avg").wait()
    ok, worst = within_bound(u.numpy(), [x.numpy() for x in f32], ctx.elems_per_packet, 1.0 / n)
    rep.check("staged: float32 avg within the bound", ok, "worst %.3g" % worst)
    eng.close()
    # A failure midway (the context is closed): the Future raises, no copy is left running.
    with ina.Context(switch=SWITCH, rank=rank, world_size=n, job=ctx.job + "-x") as c2:
        e2 = itorch.Engine(c2, device_copy=copier, chunk_bytes=16384)
        c2.close()
        try:
            e2.submit(xs[rank].clone(), "sum").wait()
            rep.check("staged: a closed context fails the Future", False, "no exception")
        except Exception as e:  # noqa: BLE001
            rep.check("staged: a closed context fails the Future with INA_ERR_CLOSED",
                      isinstance(e, ina.InaError) and e.code == ina.ERR_CLOSED
                      or "INA_ERR_CLOSED" in str(e), e)
        rep.check("staged: no copy left running after the failure",
                  all(q.empty() for q in copier._queues.values()))
        e2.close()
    # Non-contiguous tensors through the Engine (what the DDP hook and the backend use):
    # staged and in place.
    for tag, e3 in (("staged", itorch.Engine(ctx, device_copy=copier, chunk_bytes=16384)),
                    ("engine in place", itorch.Engine(ctx))):
        check_strided(rep, n, rank, tag, lambda t, e3=e3: e3.submit(t, "sum").wait(),
                      torch.int32, torch)
        e3.close()
    copier.close()

    # 2. DDP, several buckets of several chunks, against gloo, over 4 steps.
    dist.init_process_group("gloo", init_method="tcp://" + os.environ["TEST_MASTER"], rank=rank,
                            world_size=n, timeout=datetime.timedelta(seconds=60))
    try:
        torch.manual_seed(5)
        # 1.3 MB of gradients: DDP's first bucket takes 1 MiB, the rest goes in 0.1 MB ones.
        def net():
            return torch.nn.Sequential(torch.nn.Linear(64, 96), torch.nn.Tanh(),
                                       torch.nn.Linear(96, 3000), torch.nn.Tanh(),
                                       torch.nn.Linear(3000, 8))
        ref, mine = net(), net()
        mine.load_state_dict(ref.state_dict())
        d_ref = DDP(ref, bucket_cap_mb=0.1)
        d_ina = DDP(mine, bucket_cap_mb=0.1)
        copier = itorch.CpuStandIn(delay_s=0.0002)
        state = itorch.HookState(ctx, device_copy=copier, chunk_bytes=65536, profile=True)
        d_ina.register_comm_hook(state, itorch.allreduce_hook)
        allocs = []
        worst = 0.0
        for step in range(4):
            g = torch.Generator().manual_seed(100 * step + rank)
            x = torch.randn(16, 64, generator=g)
            for model in (d_ref, d_ina):
                model.zero_grad(set_to_none=True)
                model(x).square().sum().backward()
            for p_ref, p_ina in zip(ref.parameters(), mine.parameters()):
                scale = p_ref.grad.abs().max().item()
                worst = max(worst, (p_ref.grad - p_ina.grad).abs().max().item() / (scale or 1))
            allocs.append(copier.allocations)
            prof = state.take_profile()
        rep.check("staged DDP: gradients match gloo's average over 4 steps", worst < 1e-5,
                  "worst relative diff %.3g" % worst)
        rep.check("staged DDP: several buckets of several chunks per step",
                  len(prof) >= 2 and max(p[4] for p in prof) >= 2,
                  [(p[3], p[4]) for p in prof])
        rep.check("staged DDP: no staging allocation after the second step (buckets rebuilt "
                  "after the first)", allocs[1] == allocs[2] == allocs[3] >= 1, allocs)
        state.close()
        copier.close()
    finally:
        dist.destroy_process_group()


def group_backend(ctx, rep, n, rank):
    """torch.distributed's backend "ina" (ina.distributed): all_reduce through ina for the
    dtypes and ops it serves, the rest through the Gloo group underneath; DDP on it against DDP
    on a Gloo group; a subgroup with a job of its own."""
    import datetime

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    import ina.distributed as idist

    ctx.close()  # the backend makes its own context
    torch.set_num_threads(1)
    dist.init_process_group("ina", init_method="tcp://" + os.environ["TEST_MASTER"], rank=rank,
                            world_size=n, timeout=datetime.timedelta(seconds=60))
    try:
        pg = dist.distributed_c10d._get_default_group()
        rep.check("backend: init_process_group('ina') gives an ina group",
                  dist.get_backend() == "ina" and isinstance(pg, idist.ProcessGroupIna)
                  and pg.ctx.world_size == n and pg.ctx.rank == rank, repr(pg))
        before = dict(pg.counts)

        def val(r, i):
            return float((r + 1) * (i % 7 + 1))
        spy = pg.ctx._lib = LibSpy(pg.ctx._lib)
        for dt in (torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int32):
            t = torch.tensor([val(rank, i) for i in range(50)]).to(dt)
            dist.all_reduce(t)
            want = torch.tensor([sum(val(r, i) for r in range(n)) for i in range(50)])
            rep.check("backend: all_reduce SUM %s" % str(dt).replace("torch.", ""),
                      torch.equal(t.double(), want.double()), t[:4])
        pg.ctx._lib = spy._lib
        rep.check("backend: float16 and bfloat16 handed to libina as themselves",
                  [c for c, _, _ in spy.started] == [ina.FLOAT32, ina.FLOAT16, ina.BFLOAT16,
                                                      ina.FLOAT64, ina.INT32], spy.started)
        t = torch.tensor([val(rank, i) for i in range(50)])
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        rep.check("backend: all_reduce MAX float32 exact",
                  torch.equal(t, torch.tensor([val(n - 1, i) for i in range(50)])))
        t = torch.tensor([val(rank, i) for i in range(50)])
        dist.all_reduce(t, op=dist.ReduceOp.MIN)
        rep.check("backend: all_reduce MIN float32 exact",
                  torch.equal(t, torch.tensor([val(0, i) for i in range(50)])))
        served = pg.counts["ina"] - before["ina"]
        rep.check("backend: those 7 went through ina", served == 7 and
                  pg.counts["gloo"] == before["gloo"], pg.counts)
        # Gloo's: int64, PRODUCT, float64 MAX (no float64 order keys in ina).
        i64 = torch.full((3,), rank + 1, dtype=torch.int64)
        dist.all_reduce(i64)
        p = torch.full((3,), float(rank + 2))
        dist.all_reduce(p, op=dist.ReduceOp.PRODUCT)
        f64 = torch.full((3,), float(rank), dtype=torch.float64)
        dist.all_reduce(f64, op=dist.ReduceOp.MAX)
        prod = 1.0
        for r in range(n):
            prod *= r + 2
        rep.check("backend: int64, PRODUCT and float64 MAX through gloo, right",
                  i64.tolist() == [n * (n + 1) // 2] * 3 and p.tolist() == [prod] * 3
                  and f64.tolist() == [n - 1.0] * 3 and pg.counts["gloo"] == before["gloo"] + 3,
                  (i64, p, f64, pg.counts))
        b = torch.full((4,), float(rank))
        dist.broadcast(b, src=n - 1)
        outs = [torch.zeros(2) for _ in range(n)]
        dist.all_gather(outs, torch.full((2,), float(rank)))
        dist.barrier()
        rep.check("backend: broadcast, all_gather, barrier through gloo",
                  b.tolist() == [n - 1.0] * 4
                  and all(o.tolist() == [float(r)] * 2 for r, o in enumerate(outs)))
        works = [dist.all_reduce(torch.full((1000,), float(rank + k)), async_op=True)
                 for k in range(3)]
        for w in works:
            w.wait()
        rep.check("backend: async all_reduce returns a Work", len(works) == 3)
        # Non-contiguous layouts: through ina (float32, int32), through Gloo (int64, and
        # PRODUCT), and asynchronously.
        before = dict(pg.counts)
        check_strided(rep, n, rank, "backend", lambda t: dist.all_reduce(t), torch.float32,
                      torch)
        check_strided(rep, n, rank, "backend", lambda t: dist.all_reduce(t), torch.int32, torch)
        rep.check("backend: the float32 and int32 layouts went through ina",
                  pg.counts["ina"] - before["ina"] == 44 and pg.counts["gloo"] == before["gloo"],
                  (before, pg.counts))
        check_strided(rep, n, rank, "backend (gloo)", lambda t: dist.all_reduce(t), torch.int64,
                      torch)
        rep.check("backend: the int64 layouts went through gloo",
                  pg.counts["gloo"] - before["gloo"] == 22, (before, pg.counts))
        check_strided(rep, n, rank, "backend async", lambda t: dist.all_reduce(
            t, async_op=True).wait(), torch.float32, torch)
        p = torch.full((4, 6), float(rank + 2))[:, ::2]
        dist.all_reduce(p, op=dist.ReduceOp.PRODUCT)
        rep.check("backend (gloo): PRODUCT of a strided view", torch.equal(
            p, torch.full((4, 3), float(prod))), p)
        b = torch.arange(12.0) * (rank + 1)
        dist.all_reduce_coalesced([b[::3], torch.ones(2)])
        rep.check("backend (gloo): all_reduce_coalesced of a strided view", torch.equal(
            b, torch.where(torch.arange(12) % 3 == 0, torch.arange(12.0) * n * (n + 1) / 2,
                           torch.arange(12.0) * (rank + 1))), b)
        try:
            dist.all_reduce_coalesced([torch.ones(1).expand(3), torch.ones(2)])
            rep.check("backend: all_reduce_coalesced refuses an expanded view", False,
                      "no exception")
        except ValueError as e:
            rep.check("backend: all_reduce_coalesced refuses an expanded view",
                      "overlap" in str(e), e)
        # DDP on the ina group against DDP on a gloo group of the same ranks.
        ref_group = dist.new_group(backend="gloo")
        torch.manual_seed(11)
        ref = torch.nn.Sequential(torch.nn.Linear(16, 40), torch.nn.Tanh(), torch.nn.Linear(40, 3))
        mine = torch.nn.Sequential(torch.nn.Linear(16, 40), torch.nn.Tanh(), torch.nn.Linear(40, 3))
        mine.load_state_dict(ref.state_dict())
        d_ref, d_ina = DDP(ref, process_group=ref_group), DDP(mine)
        worst = 0.0
        for step in range(3):
            x = torch.randn(8, 16, generator=torch.Generator().manual_seed(step * 10 + rank))
            for m in (d_ref, d_ina):
                m.zero_grad(set_to_none=True)
                m(x).square().sum().backward()
            for a, c in zip(ref.parameters(), mine.parameters()):
                worst = max(worst, ((a.grad - c.grad).abs().max() /
                                    (a.grad.abs().max() or 1)).item())
        rep.check("backend: DDP over 'ina' matches DDP over gloo (3 steps)", worst < 1e-5,
                  "worst relative diff %.3g" % worst)
        if n >= 3:
            sub = dist.new_group(ranks=[0, 1], backend="ina")
            if rank in (0, 1):
                t = torch.full((10,), float(rank + 1))
                dist.all_reduce(t, group=sub)
                rep.check("backend: a subgroup of ranks 0, 1 has its own job",
                          t.tolist() == [3.0] * 10 and sub.ctx.job != pg.ctx.job
                          and sub.ctx.world_size == 2, (sub, t[:2]))
        if hasattr(dist, "Backend") and "devices" in str(
                __import__("inspect").signature(dist.Backend.register_backend)):
            rep.check("backend: registered for cpu and cuda (torch 2.x)",
                      dist.Backend.backend_capability.get("ina") == ["cpu", "cuda"])
        elif rank == 0:
            print("SKIP [backend]: 'cpu:ina,cuda:ina' and per-device registration need torch "
                  ">= 2.0 (this is %s)" % torch.__version__, flush=True)
        pg.close()
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


def group_sparse(ctx, rep, n, rank):
    """Block-sparse all-reduce from Python (sparse= per call) and the DDP hook choosing per
    bucket (HookState(sparse="auto")). The context: sparse_min_bytes=4096 (worker())."""
    import datetime

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    import ina.torch as itorch

    rep.check("sparse: the switch offers it", ctx.sparse and ctx.info()["sparse"], ctx.info())
    count, blk = 256 * 400 + 9, 256
    xs = []
    for r in range(n):  # about 2% of the blocks non-zero per rank, a short last block
        g = np.random.default_rng(1000 + r)
        x = np.zeros(count, dtype=np.int32)
        for b in g.choice(count // blk + 1, 8, replace=False):
            x[b * blk:(b + 1) * blk] = g.integers(-1000, 1000, size=len(x[b * blk:(b + 1) * blk]))
        xs.append(x)
    want = wrapped_sum(xs)
    for mode in ("on", "auto"):
        s0 = ctx.stats()
        buf = xs[rank].copy()
        ina.allreduce(buf, ctx=ctx, sparse=mode)
        s1 = ctx.stats()
        rep.check("sparse=%r: int32 sum exact" % mode, np.array_equal(buf, want))
        rep.check("sparse=%r: went block-sparse (ina_stats.sparse_ops)" % mode,
                  s1["sparse_ops"] - s0["sparse_ops"] == ctx.lanes, (s0, s1))
    dense = (np.arange(count, dtype=np.int32) % 7 + 1) * (rank + 1)
    s0 = ctx.stats()
    ina.allreduce(dense, ctx=ctx, sparse="auto")
    s1 = ctx.stats()
    rep.check("sparse='auto' on dense data: measured, went dense, exact",
              s1["sparse_auto_dense"] - s0["sparse_auto_dense"] == ctx.lanes
              and s1["sparse_ops"] == s0["sparse_ops"] and
              np.array_equal(dense, (np.arange(count, dtype=np.int32) % 7 + 1) * (n * (n + 1) // 2)))
    fx = [x.astype(np.float32) / 7 for x in xs]
    buf = fx[rank].copy()
    ina.allreduce(buf, ctx=ctx, sparse="on")
    exact, bound = ina.float_error_bounds(fx, blk)  # bound over the 256-element sparse block
    rep.check("sparse float32: within ina_error_bound over the sparse block, zeros exact",
              bool(np.all(np.abs(buf.astype(np.float64) - exact) <= bound)) and
              bool(np.all(buf[np.all([x == 0 for x in fx], axis=0)] == 0)))
    try:
        ina.allreduce(buf, ctx=ctx, sparse="sometimes")
        rep.check("sparse='sometimes' raises ValueError", False, "no exception")
    except ValueError as e:
        rep.check("sparse='sometimes' raises ValueError", "sparse" in str(e), e)

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method="tcp://" + os.environ["TEST_MASTER"], rank=rank,
                            world_size=n, timeout=datetime.timedelta(seconds=60))
    try:
        class Model(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.emb = torch.nn.Embedding(8192, 32)
                self.lin = torch.nn.Linear(32, 8192)

            def forward(self, idx):
                return self.lin(self.emb(idx))

        def model():
            torch.manual_seed(7)
            return Model()

        ref, mine = model(), model()
        # Two buckets: DDP closes its first at 1 MiB, so the linear layer (dense gradient,
        # 1 MiB + 32 KiB) fills it, and the embedding (1 MiB, a few rows used) the next.
        d_ref, d_ina = DDP(ref, bucket_cap_mb=0.5), DDP(mine, bucket_cap_mb=0.5)
        state = itorch.HookState(ctx, sparse="auto")
        d_ina.register_comm_hook(state, itorch.allreduce_hook)
        idx = torch.tensor([rank * 37 % 8192, 5, 4000 + rank])
        # Through DDP's forward, so that its reducer runs. Two steps: DDP puts every
        # gradient in one bucket in the first, and sizes its buckets from the second on.
        for _ in range(2):
            for m in (d_ref, d_ina):
                m(idx).square().sum().backward()
        worst = 0.0
        for p_ref, p_ina in zip(ref.parameters(), mine.parameters()):
            scale = p_ref.grad.abs().max().item()
            worst = max(worst, (p_ref.grad - p_ina.grad).abs().max().item() / (scale or 1))
        rows = set(torch.nonzero(mine.emb.weight.grad.abs().sum(1)).flatten().tolist())
        want_rows = {r * 37 % 8192 for r in range(n)} | {5} | {4000 + r for r in range(n)}
        rep.check("DDP hook sparse='auto': the embedding's gradient has every rank's rows",
                  rows == want_rows, sorted(rows))
        rep.check("DDP hook sparse='auto': gradients match gloo's average", worst < 1e-5,
                  "worst relative diff %.3g" % worst)
        rep.check("DDP hook sparse='auto': the embedding's bucket sparse, the dense one dense",
                  state.sparse_buckets >= 1 and state.dense_buckets >= 1,
                  (state.sparse_buckets, state.dense_buckets))
        state.close()
    finally:
        dist.destroy_process_group()


GROUPS = {"numpy": group_numpy, "torch": group_torch, "hook": group_hook, "hook16": group_hook16,
          "staged": group_staged,
          "backend": group_backend, "lifecycle": group_lifecycle, "floatadd": group_floatadd,
          "sparse": group_sparse}


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
        if group == "sparse":
            extra = {"sparse_min_bytes": 4096}  # auto measures buckets from 4 KiB on
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
    ap.add_argument("--groups", help="run only these groups (comma list, e.g. backend,staged)")
    a = ap.parse_args()
    if not SWITCH:
        sys.exit("test_ina: set INA_SWITCH=HOST:PORT of a running ina-switch")
    print("libina %s from %s" % (ina.library_version(), ina.library_path()))
    if not a.skip_torch:
        import torch  # noqa: F401  (imported before forking: the workers inherit it)
    plan = [("numpy", 1), ("numpy", 3), ("lifecycle", 1), ("floatadd", 3)]
    if not a.skip_torch:
        plan += [("torch", 1), ("torch", 3), ("hook", 2), ("hook16", 3), ("sparse", 2),
                 ("staged", 2), ("backend", 3)]
    if a.groups:
        plan = [(g, n) for g, n in plan if g in a.groups.split(",")]
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

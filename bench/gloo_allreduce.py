#!/usr/bin/python3
"""gloo_allreduce.py: Gloo all-reduce (torch.distributed, backend "gloo", SUM) benchmark and
verifier, the Gloo peer of bench/compare.sh. Same data as ina-bench (bench/benchdata.c through
libbenchdata.so and ctypes); every result on every rank is checked against a double-precision
reference. Rank 0 prints one JSON line per size, with the keys of ina-bench --json that apply.

Timing: per iteration, dist.barrier() (not timed), then time.perf_counter() around
dist.all_reduce() on each rank; the reported time is rank 0's median over the timed iterations
(ina-bench times its call the same way, without the barrier). all_reduce works in place, so
each iteration first copies the input into the tensor (not timed).

Usage (run with /usr/bin/python3, Debian's python3-torch):
  gloo_allreduce.py --rank R --world N --master HOST:PORT --lib PATH/libbenchdata.so
                    [--sizes 4K,1M] [--dtype float32|int32|float16|bfloat16] [--iters N[,N..]]
                    [--warmup N[,N..]]
float16 and bfloat16: Gloo sums them in the type. A Gloo without bfloat16 (torch before 2.x:
"Invalid scalar type") is reported as one JSON line {"skip": reason} and exit status 4.
--iters/--warmup: one count for all sizes, or one per size.
Set GLOO_SOCKET_IFNAME to the interface to use (lo, eth0 in a namespace).
"""
import argparse
import ctypes
import datetime
import json
import sys
import time

import torch
import torch.distributed as dist

BD_FLOAT32, BD_INT32, BD_FLOAT16, BD_BFLOAT16 = 0, 1, 2, 3
DTYPES = {"float32": (BD_FLOAT32, "float32", 4), "int32": (BD_INT32, "int32", 4),
          "float16": (BD_FLOAT16, "float16", 2), "bfloat16": (BD_BFLOAT16, "bfloat16", 2)}


def parse_size(s):
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    s = s.strip()
    if s and s[-1].upper() in mult:
        return int(s[:-1]) * mult[s[-1].upper()]
    return int(s)


def counts(s, n, lo, what):
    """'N' or 'N,N,...' (one per size) -> list of n ints >= lo."""
    v = [int(x) for x in s.split(",") if x]
    if len(v) == 1:
        v = v * n
    if len(v) != n or any(x < lo for x in v):
        sys.exit("gloo_allreduce: bad %s '%s' (one count >= %d, or one per size)" % (what, s, lo))
    return v


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rank", type=int, required=True)
    ap.add_argument("--world", type=int, required=True)
    ap.add_argument("--master", required=True, help="HOST:PORT of rank 0 (TCP rendezvous)")
    ap.add_argument("--lib", required=True, help="path of libbenchdata.so")
    ap.add_argument("--sizes", default="4K,64K,1M,16M")
    ap.add_argument("--dtype", default="float32", choices=sorted(DTYPES))
    ap.add_argument("--iters", default="10")
    ap.add_argument("--warmup", default="2")
    ap.add_argument("--timeout-s", type=float, default=300)
    a = ap.parse_args()

    lib = ctypes.CDLL(a.lib)
    lib.bd_fill.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int,
                            ctypes.c_uint64, ctypes.c_int]
    lib.bd_fill.restype = None
    lib.bd_verify.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int,
                              ctypes.c_uint64, ctypes.c_int, ctypes.POINTER(ctypes.c_double),
                              ctypes.POINTER(ctypes.c_double), ctypes.c_char_p]
    lib.bd_verify.restype = ctypes.c_int64

    # N ranks share a few cores: one intra-op thread each (Gloo's own I/O is unaffected).
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method="tcp://" + a.master, rank=a.rank,
                            world_size=a.world,
                            timeout=datetime.timedelta(seconds=a.timeout_s))
    bd, tname, esize = DTYPES[a.dtype]
    tdt = getattr(torch, tname)
    try:  # refused before anything is sent, on every rank alike
        dist.all_reduce(torch.zeros(1, dtype=tdt))
    except RuntimeError as e:
        if a.rank == 0:
            print(json.dumps({"skip": "this torch's Gloo cannot all-reduce %s (%s)" % (a.dtype, e),
                              "system": "gloo", "dtype": a.dtype}), flush=True)
        dist.destroy_process_group()
        return 4
    tag = ("gloo_allreduce: rank %d" % a.rank).encode()
    any_fail = False
    sizes = [parse_size(s) for s in a.sizes.split(",") if s]
    iters_l = counts(a.iters, len(sizes), 1, "--iters")
    warmup_l = counts(a.warmup, len(sizes), 0, "--warmup")
    for size, iters, warmup in zip(sizes, iters_l, warmup_l):
        count = size // esize
        nbytes = count * esize
        send = torch.empty(count, dtype=tdt)
        buf = torch.empty(count, dtype=tdt)
        times = []
        failures = 0
        max_abs = ctypes.c_double(0.0)
        max_ratio = ctypes.c_double(0.0)
        for it in range(warmup + iters):
            lib.bd_fill(bd, send.data_ptr(), count, a.rank, nbytes, it)
            buf.copy_(send)
            dist.barrier()
            t0 = time.perf_counter()
            dist.all_reduce(buf, op=dist.ReduceOp.SUM)
            t1 = time.perf_counter()
            if it >= warmup:
                times.append(t1 - t0)
            failures += lib.bd_verify(bd, buf.data_ptr(), count, a.world, nbytes, it,
                                      ctypes.byref(max_abs), ctypes.byref(max_ratio), tag)
        verdict = torch.tensor([failures], dtype=torch.int64)
        dist.all_reduce(verdict, op=dist.ReduceOp.SUM)
        errs = torch.tensor([max_abs.value, max_ratio.value], dtype=torch.float64)
        dist.all_reduce(errs, op=dist.ReduceOp.MAX)
        fail_sum = int(verdict.item())
        any_fail = any_fail or fail_sum != 0
        if a.rank == 0:
            times.sort()
            n = len(times)
            med = times[n // 2] if n % 2 else 0.5 * (times[n // 2 - 1] + times[n // 2])
            algbw = nbytes * 8 / med / 1e9 if med > 0 else 0.0
            print(json.dumps({
                "system": "gloo", "workers": a.world, "bytes": nbytes, "count": count,
                "dtype": a.dtype, "iters": iters, "warmup": warmup, "time_s": med,
                "time_min_s": times[0], "time_max_s": times[-1],
                "time_p99_s": times[(99 * n + 99) // 100 - 1],  # nearest rank
                "algbw_gbps": algbw,
                "busbw_gbps": algbw * 2.0 * (a.world - 1) / a.world,
                "max_abs_err": float(errs[0]), "max_err_over_tol": float(errs[1]),
                "failures": fail_sum, "ok": fail_sum == 0}, separators=(",", ":")), flush=True)
    dist.barrier()
    dist.destroy_process_group()
    return 3 if any_fail else 0


if __name__ == "__main__":
    sys.exit(main())

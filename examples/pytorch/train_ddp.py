#!/usr/bin/python3
"""train_ddp.py: train a small CNN on scikit-learn's digits (8x8 images, offline) with
DistributedDataParallel on CPU processes; the gradient all-reduce goes through ina-switch
(--backend ina, the ina.torch communication hook; --backend ina-pg, the torch.distributed
backend "ina" of ina.distributed, with DDP's own all-reduce) or through Gloo (--backend gloo,
DDP's default all-reduce). With ina and gloo the process group is gloo: DDP uses it to
broadcast the initial parameters, and this script to average the per-epoch loss; with ina-pg
it is "ina", which hands those to a Gloo group underneath.

Two ways to run it:
  spawn     train_ddp.py --nproc 2 --backend ina
            starts 2 ranks itself (and, for ina with no --switch/INA_SWITCH, an ina-switch on
            127.0.0.1 with a free port, stopped at the end)
  torchrun  build/bin/ina-switch &     # listens on 127.0.0.1:48864, the library's default
            torchrun --standalone --nproc_per_node 2 examples/pytorch/train_ddp.py --backend ina
            one rank per process, from RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT; the switch from
            --switch or INA_SWITCH (default 127.0.0.1:48864)

--compress bf16 (or fp16): the gradients of the float32 model travel as 16 bits: with ina the
hook is ina.torch.bf16_compress_hook (fp16_compress_hook), with gloo and ina-pg torch's own
default_hooks.bf16_compress_hook (fp16_compress_hook) on the process group. A Gloo that cannot
all-reduce bfloat16 (torch < 2.x raises "Invalid scalar type") gets gloo_bf16_hook instead: the
same compression, the bfloat16 tensors exchanged with all_gather and summed in bfloat16 one rank
at a time, as a bfloat16 ring adds them.

Rank 0 prints per epoch the mean training loss over all ranks, the test loss and accuracy, and
the median step time (forward + backward with its all-reduces + optimizer step) of its steps;
--json prints one JSON object per epoch on stdout instead (the text goes to stderr).
Deterministic for a given --seed, --nproc and --backend: same initial weights, same shards.
"""
import argparse
import datetime
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
try:
    import ina
except ImportError:  # in-tree: <repo>/python
    sys.path.insert(0, os.path.join(REPO, "python"))
    import ina

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as tmp
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n", 2)[2])
    ap.add_argument("--backend", choices=["ina", "gloo", "ina-pg"], default="ina",
                    help="gradient all-reduce: ina (comm hook), gloo (DDP default), ina-pg "
                         "(the process group is the torch.distributed backend 'ina')")
    ap.add_argument("--nproc", type=int, default=None,
                    help="spawn this many ranks (default 2 unless RANK/WORLD_SIZE are set)")
    ap.add_argument("--switch", default=None,
                    help="ina-switch HOST:PORT (default: INA_SWITCH; with --nproc and neither, "
                         "start one)")
    ap.add_argument("--switch-bin", default=None, help="ina-switch to start (default: "
                    "$INA_BUILD_DIR/bin, <repo>/build/bin, then PATH)")
    ap.add_argument("--epochs", type=int, default=5)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--momentum", type=float, default=0.9)
    ap.add_argument("--batch-size", type=int, default=32, help="per rank")
    ap.add_argument("--hidden", type=int, default=64,
                    help="width of the hidden layer (64: 38K parameters; 1024: 540K)")
    ap.add_argument("--bucket-kb", type=int, default=0,
                    help="DDP's bucket size in KiB, the first bucket's too (default: DDP's, "
                         "25 MiB and 1 MiB for the first)")
    ap.add_argument("--compress", choices=["none", "bf16", "fp16"], default="none",
                    help="send the gradients as bfloat16 or float16 (the compression hooks)")
    ap.add_argument("--ina-sync", action="store_true",
                    help="run the ina all-reduce inside the hook (no helper thread)")
    ap.add_argument("--timeout", type=float, default=300,
                    help="seconds: the whole spawned run, and gloo's deadline")
    ap.add_argument("--json", action="store_true", help="one JSON object per epoch on stdout")
    ap.add_argument("--breakdown", action="store_true",
                    help="time each step's parts (forward, backward, optimizer) and each "
                         "bucket's all-reduce; report how much all-reduce time was hidden "
                         "behind backward (adds a comm hook that times gloo's all-reduce too)")
    return ap.parse_args(argv)


# ---- data and model ----------------------------------------------------------------------


def load_data(seed):
    """Digits as (N, 1, 8, 8) float32 in [0, 1], an 80/20 split fixed by seed."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    d = load_digits()
    x = (d.data / 16.0).astype(np.float32).reshape(-1, 1, 8, 8)
    y = d.target.astype(np.int64)
    xtr, xte, ytr, yte = train_test_split(x, y, test_size=0.2, random_state=seed, stratify=y)
    return (torch.from_numpy(xtr), torch.from_numpy(ytr), torch.from_numpy(xte),
            torch.from_numpy(yte))


class Net(nn.Module):
    """Conv(1->16) - Conv(16->32) - MaxPool - FC(512->hidden) - FC(hidden->10): 38,282
    parameters with hidden=64 (the default), 540,362 with hidden=1024."""

    def __init__(self, hidden=64):
        super().__init__()
        self.c1 = nn.Conv2d(1, 16, 3, padding=1)
        self.c2 = nn.Conv2d(16, 32, 3, padding=1)
        self.f1 = nn.Linear(32 * 4 * 4, hidden)
        self.f2 = nn.Linear(hidden, 10)

    def forward(self, x):
        x = F.relu(self.c1(x))
        x = F.max_pool2d(F.relu(self.c2(x)), 2)
        x = F.relu(self.f1(x.flatten(1)))
        return self.f2(x)


# ---- one rank ------------------------------------------------------------------------------


def run_rank(rank, world, args, master, switch, job, data):
    """Train on one rank. master: "HOST:PORT" for gloo's TCP rendezvous, or None (env://,
    as torchrun sets it). switch/job: the ina job, or None (environment)."""
    torch.set_num_threads(1)
    torch.manual_seed(args.seed)
    torch.use_deterministic_algorithms(True)
    timeout = datetime.timedelta(seconds=args.timeout)
    pg_backend = "gloo"
    if args.backend == "ina-pg":
        import ina.distributed  # noqa: F401  registers the backend "ina"

        pg_backend = "ina"
        if switch:
            os.environ["INA_SWITCH"] = switch
    if master:
        dist.init_process_group(pg_backend, init_method="tcp://" + master, rank=rank,
                                world_size=world, timeout=timeout)
    else:
        dist.init_process_group(pg_backend, timeout=timeout)
    rank, world = dist.get_rank(), dist.get_world_size()
    # The per-epoch loss bookkeeping goes through gloo whatever the backend (float64 through
    # ina would be quantized: the printed losses would differ in their last digits).
    book = dist.new_group(backend="gloo") if pg_backend != "gloo" else None
    xtr, ytr, xte, yte = data if data is not None else load_data(args.seed)
    model = Net(args.hidden)
    if args.bucket_kb:
        # DDP's first bucket has its own cap (1 MiB): the whole digits model fits in it, and
        # one bucket leaves nothing to overlap with backward.
        dist._DEFAULT_FIRST_BUCKET_BYTES = args.bucket_kb * 1024
        ddp = DDP(model, bucket_cap_mb=args.bucket_kb / 1024)
    else:
        ddp = DDP(model)
    state = None
    timer = None
    if args.backend == "ina":
        import ina.torch

        ctx = ina.Context(switch=switch, rank=rank, world_size=world, job=job)
        state = ina.torch.HookState(ctx, background=not args.ina_sync, profile=args.breakdown)
        hook = {"none": ina.torch.allreduce_hook, "bf16": ina.torch.bf16_compress_hook,
                "fp16": ina.torch.fp16_compress_hook}[args.compress]
        ddp.register_comm_hook(state, hook)
    elif args.compress != "none":
        ddp.register_comm_hook(None, torch_compress_hook(args.compress))
    elif args.breakdown:
        timer = BucketTimer(world)
        ddp.register_comm_hook(timer, timed_allreduce_hook)
    opt = torch.optim.SGD(ddp.parameters(), lr=args.lr, momentum=args.momentum)
    log = sys.stderr if args.json else sys.stdout
    if rank == 0:
        print("train_ddp: %d ranks, backend %s, %d train / %d test samples, batch %d per rank, "
              "%d parameters" % (world, args.backend, len(xtr), len(xte), args.batch_size,
                                 sum(p.numel() for p in model.parameters())), file=log,
              flush=True)
    per_rank = len(xtr) // world  # equal shards: every rank takes the same number of steps
    gen = torch.Generator()
    for epoch in range(1, args.epochs + 1):
        gen.manual_seed(args.seed * 1000 + epoch)
        perm = torch.randperm(len(xtr), generator=gen)
        mine = perm[rank * per_rank:(rank + 1) * per_rank]
        ddp.train()
        loss_sum, seen, times, parts = 0.0, 0, [], []
        for i in range(0, per_rank, args.batch_size):
            idx = mine[i:i + args.batch_size]
            x, y = xtr[idx], ytr[idx]
            t0 = time.perf_counter()
            opt.zero_grad(set_to_none=True)
            loss = F.cross_entropy(ddp(x), y)
            t1 = time.perf_counter()
            loss.backward()
            t2 = time.perf_counter()
            opt.step()
            t3 = time.perf_counter()
            times.append(t3 - t0)
            if args.breakdown:
                buckets = [(b[0], b[2]) for b in state.take_profile()] if state is not None \
                    else timer.take()
                inline = state is not None and not state.background
                parts.append(step_parts(t0, t1, t2, t3, buckets, inline))
            loss_sum += loss.item() * len(idx)
            seen += len(idx)
        tot = torch.tensor([loss_sum, float(seen)], dtype=torch.float64)
        dist.all_reduce(tot, group=book)  # gloo, outside the timed steps
        model.eval()
        with torch.no_grad():
            out = model(xte)
            test_loss = F.cross_entropy(out, yte).item()
            acc = (out.argmax(1) == yte).double().mean().item()
        rec = {"epoch": epoch, "backend": args.backend, "world": world,
               "loss": tot[0].item() / tot[1].item(), "test_loss": test_loss, "accuracy": acc,
               "steps": len(times), "step_ms_median": statistics.median(times) * 1e3}
        if args.breakdown:
            rec["breakdown_ms_median"] = {k: statistics.median(p[k] for p in parts) * 1e3
                                          for k in parts[0] if k != "hidden_frac"}
            busy = sum(p["comm_busy"] for p in parts)
            hidden = sum(p["comm_hidden"] for p in parts)
            rec["comm_hidden_frac"] = hidden / busy if busy > 0 else 0.0
        if rank == 0:
            print("epoch %d/%d: loss %.6f  test loss %.6f  accuracy %.4f  step %.2f ms (median "
                  "of %d)" % (epoch, args.epochs, rec["loss"], test_loss, acc,
                              rec["step_ms_median"], len(times)), file=log, flush=True)
            if args.breakdown:
                b = rec["breakdown_ms_median"]
                print("  medians (ms): forward %.2f, backward %.2f (compute until the last "
                      "bucket %.2f, then waiting %.2f), optimizer %.2f; all-reduce busy %.2f, "
                      "hidden behind backward %.2f; epoch total: %.0f%% of the all-reduce time "
                      "hidden" % (b["forward"], b["backward"], b["backward_compute"],
                                  b["comm_exposed"], b["optimizer"], b["comm_busy"],
                                  b["comm_hidden"], 100 * rec["comm_hidden_frac"]),
                      file=log, flush=True)
            if args.json:
                print(json.dumps(rec), flush=True)
    if state is not None:
        state.close(close_context=True)
    if pg_backend == "ina":
        dist.distributed_c10d._get_default_group().close()
    dist.destroy_process_group()


# ---- step-time breakdown (--breakdown) -------------------------------------------------------


class BucketTimer:
    """State of timed_allreduce_hook: (t_submit, t_done) of each bucket's all-reduce."""

    def __init__(self, world):
        self.world = world
        self.buckets = []
        self.lock = threading.Lock()

    def take(self):
        with self.lock:
            b, self.buckets = self.buckets, []
        return b


def timed_allreduce_hook(timer, bucket):
    """DDP's default all-reduce (divide by the world size, all_reduce on the process group,
    async), plus the time the bucket was handed over and the time its sum was in."""
    import ina.torch

    t = ina.torch.bucket_tensor(bucket)
    t.div_(timer.world)
    t_submit = time.perf_counter()
    fut = dist.all_reduce(t, async_op=True).get_future()

    def done(f):
        with timer.lock:
            timer.buckets.append((t_submit, time.perf_counter()))
        return f.value()[0]

    return fut.then(done)


# ---- 16-bit compression on the process group (--compress) -----------------------------------


def torch_compress_hook(kind):
    """torch's compression hook for kind ("bf16", "fp16"), or gloo_bf16_hook where the
    process group cannot all-reduce bfloat16 (Gloo before torch 2.x)."""
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    if kind == "fp16":
        return default_hooks.fp16_compress_hook
    probe = torch.zeros(1, dtype=torch.bfloat16)
    try:  # refused before any byte is sent, on every rank alike
        dist.all_reduce(probe)
        return default_hooks.bf16_compress_hook
    except RuntimeError:
        return gloo_bf16_hook


def gloo_bf16_hook(process_group, bucket):
    """default_hooks.bf16_compress_hook for a group that cannot sum bfloat16: the bucket cast
    to bfloat16 and divided by the world size (as that hook does), the bfloat16 tensors of all
    ranks exchanged (all_gather of their bits, as float16), summed in bfloat16 one rank at a time (each
    addition rounded to bfloat16, as a bfloat16 ring adds), cast back into the bucket."""
    import ina.torch

    group = process_group if process_group is not None else dist.group.WORLD
    world = dist.get_world_size(group)
    buf = ina.torch.bucket_tensor(bucket)
    mine = buf.to(torch.bfloat16).div_(world)
    # Gloo copies the bits of a float16 tensor as they are: the bfloat16 bits travel in one.
    parts = [torch.empty_like(mine).view(torch.float16) for _ in range(world)]
    dist.all_gather(parts, mine.view(torch.float16), group=group)
    total = parts[0].view(torch.bfloat16).clone()
    for p in parts[1:]:
        total.add_(p.view(torch.bfloat16))
    buf.copy_(total)
    fut = torch.futures.Future()
    fut.set_result(buf)
    return fut


def step_parts(t0, t1, t2, t3, buckets, inline):
    """One step's parts, in seconds. buckets: (t_submit, t_end) per bucket, served one at a
    time in submission order. The all-reduce is busy from max(submit, previous end) to its end;
    backward waits for it from the last submission (its compute is done then) to its end, and
    the rest of the busy time ran while backward computed, hidden. Inline all-reduces (in the
    hook) hide nothing."""
    busy, last_end, last_submit = 0.0, float("-inf"), t1
    for submit, end in sorted(buckets):
        busy += max(0.0, end - max(submit, last_end))
        last_end = max(last_end, end)
        last_submit = max(last_submit, submit)
    exposed = busy if inline else min(busy, max(0.0, t2 - last_submit))
    return {"step": t3 - t0, "forward": t1 - t0, "backward": t2 - t1,
            "backward_compute": max(0.0, t2 - t1 - exposed), "comm_exposed": exposed,
            "optimizer": t3 - t2, "comm_busy": busy, "comm_hidden": busy - exposed}


def _spawn_entry(rank, world, args, master, switch, job, data):
    run_rank(rank, world, args, master, switch, job, data)


# ---- launcher --------------------------------------------------------------------------------


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def find_switch_bin(args):
    cands = [args.switch_bin, os.environ.get("INA_SWITCH_BIN")]
    if os.environ.get("INA_BUILD_DIR"):
        cands.append(os.path.join(os.environ["INA_BUILD_DIR"], "bin", "ina-switch"))
    cands += [os.path.join(REPO, "build", "bin", "ina-switch"), shutil.which("ina-switch")]
    for c in cands:
        if c and os.access(c, os.X_OK):
            return c
    sys.exit("train_ddp: no ina-switch found (build it with make, or pass --switch-bin or "
             "--switch HOST:PORT)")


def _die_with_parent():
    import ctypes

    ctypes.CDLL(None).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def start_switch(args, tmpdir):
    """Start ina-switch on 127.0.0.1, a free port. @return (Popen, "127.0.0.1:PORT")."""
    port_file = os.path.join(tmpdir, "port")
    with open(os.path.join(tmpdir, "switch.log"), "w") as log:  # its counters, at exit
        proc = subprocess.Popen([find_switch_bin(args), "--listen", "127.0.0.1:0",
                                 "--port-file", port_file, "--quiet"], stdin=subprocess.DEVNULL,
                                stdout=log, stderr=log, preexec_fn=_die_with_parent)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            with open(port_file) as f:
                port = int(f.read().strip())
            return proc, "127.0.0.1:%d" % port
        except (OSError, ValueError):
            if proc.poll() is not None:
                break
            time.sleep(0.02)
    proc.kill()
    proc.wait(timeout=10)
    with open(os.path.join(tmpdir, "switch.log")) as f:
        sys.exit("train_ddp: ina-switch did not start:\n" + f.read())


def stop_switch(proc):
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)


def launch(args):
    """Spawn args.nproc ranks (fork: they inherit the imported modules and the data)."""
    switch = args.switch or os.environ.get("INA_SWITCH")
    sw_proc = None
    tmpdir = tempfile.mkdtemp(prefix="train_ddp.")
    rc = 1
    try:
        if args.backend in ("ina", "ina-pg") and not switch:
            sw_proc, switch = start_switch(args, tmpdir)
        rc = run_ranks(args, switch)
        return rc
    finally:
        if sw_proc is not None:
            stop_switch(sw_proc)
            if rc != 0:
                with open(os.path.join(tmpdir, "switch.log")) as f:
                    sys.stderr.write("train_ddp: ina-switch log:\n" + f.read())
        shutil.rmtree(tmpdir, ignore_errors=True)


def run_ranks(args, switch):
    """@return 0, 1 (a rank failed) or 124 (--timeout passed; the ranks were killed)."""
    n = args.nproc
    job = ("ddp-%d-%d" % (os.getpid(), int(time.time()) % 100000))[:31]
    master = "127.0.0.1:%d" % free_port()
    data = load_data(args.seed)
    pc = tmp.start_processes(_spawn_entry, args=(n, args, master, switch, job, data),
                             nprocs=n, join=False, start_method="fork")
    deadline = time.monotonic() + args.timeout
    try:
        while not pc.join(timeout=0.5):
            if time.monotonic() > deadline:
                print("train_ddp: timed out after %.0f s; killing the ranks" % args.timeout,
                      file=sys.stderr)
                for p in pc.processes:
                    if p.is_alive():
                        p.kill()
                for p in pc.processes:
                    p.join(10)
                return 124
    except Exception as e:  # a rank failed: start_processes already terminated the others
        print("train_ddp: %s" % e, file=sys.stderr)
        return 1
    return 0


def main(argv=None):
    args = parse_args(argv)
    torchrun = "RANK" in os.environ and "WORLD_SIZE" in os.environ and args.nproc is None
    if torchrun:
        run_rank(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), args, None,
                 args.switch, None, None)
        return 0
    if args.nproc is None:
        args.nproc = 2
    if args.nproc < 1:
        sys.exit("train_ddp: --nproc must be >= 1")
    return launch(args)


if __name__ == "__main__":
    sys.exit(main())

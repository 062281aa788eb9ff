"""ina.torch: a DistributedDataParallel communication hook that all-reduces gradient buckets
through ina-switch instead of the process group, for CPU and CUDA gradients.

    import ina.torch
    model = DDP(model)                                   # process group: gloo (or any)
    model.register_comm_hook(ina.torch.HookState(), ina.torch.allreduce_hook)
    # or state=None: the hook uses ina.default_context(), configured from the environment
    # that torchrun sets (RANK, WORLD_SIZE) plus INA_SWITCH and INA_JOB

The hook returns a torch.futures.Future holding the bucket averaged over the ranks (summed,
then divided by the world size), as DDP's default all-reduce hook does. With a HookState
(background=True, the default) the hook returns at once and the all-reduce runs on a helper
thread that owns the ina context, so backward keeps computing the next buckets meanwhile; with
background=False, or with state=None, it runs inside the hook and the Future is already
complete.

Sparse gradients (embeddings, pruned or top-k sparsified models): HookState(sparse="auto")
lets every bucket of at least sparse_min_bytes (ina.Context, default 1 MiB) measure its density
of non-zero blocks, summed over the ranks in one round trip (so every rank decides alike), and
go block-sparse below the crossover (docs/SPARSE.md), dense above; sparse="on" always sends
buckets sparse, "off" never, None (default) follows the context (INA_SPARSE). The state counts
what each bucket did (HookState.sparse_buckets, dense_buckets, last_choice). A staged (CUDA)
bucket decides per chunk.

Where the bucket lives:
  - CPU: reduced in place, with no copy (zero-copy).
  - CUDA: staged through pinned host buffers that are reused from step to step. The bucket is
    cut into chunks (chunk_bytes); all device-to-host copies are queued at once on a copy
    stream that first waits for the stream that produced the gradients; chunk k is all-reduced
    as soon as its copy is done, while later chunks are still copying, and copied back on a
    second stream as soon as its sum is in, while later chunks are being reduced. The Future
    completes when the last chunk is back on the device, so DDP may use the bucket on any
    stream. After the first steps, no memory is allocated (DeviceCopy.allocations counts).

The staged path is written against an abstract device copy (DeviceCopy): CudaCopy drives real
CUDA streams and events; CpuStandIn does the same with two copy threads over CPU tensors, so
that the chunking, the ordering and the buffer reuse are tested on machines without a GPU
(tests/python/test_ina.py).

Compression (gradients of a float32 model sent as 16 bits): bf16_compress_hook and
fp16_compress_hook cast each bucket to bfloat16 or float16, average it through ina in that
dtype (libina's FLOAT16/BFLOAT16: the bytes handed to the library are the 16-bit tensor) and
cast the result back into the bucket, as torch's default_hooks.bf16_compress_hook and
fp16_compress_hook do with the process group. Same state as allreduce_hook.

A torch.distributed backend named "ina" is in ina.distributed.
"""
import collections
import queue
import threading
import time

import torch

import ina

__all__ = ["HookState", "allreduce_hook", "bf16_compress_hook", "fp16_compress_hook",
           "bucket_tensor", "DeviceCopy", "CudaCopy",
           "CpuStandIn", "Engine", "may_overlap", "check_writable", "copy_back"]

DEFAULT_CHUNK_BYTES = 4 << 20  # big enough that ina streams at full rate, small enough to overlap
DEFAULT_DEPTH = 2              # chunks in flight on the context at once


def bucket_tensor(bucket):
    """The flat gradient tensor of a DDP GradBucket (buffer() in torch >= 1.9 and 2.x,
    get_tensor() in 1.8)."""
    for name in ("buffer", "get_tensor"):
        fn = getattr(bucket, name, None)
        if fn is not None:
            return fn()
    raise TypeError("ina.torch: unknown GradBucket API (no buffer() or get_tensor())")


# ---- layouts --------------------------------------------------------------------------------


def may_overlap(tensor):
    """True if two elements of tensor may share memory: an expanded or broadcast view (a
    stride of 0), or strides that interleave. Sufficient test: with the dimensions of more
    than one element sorted by stride, each stride must pass the last element the smaller
    ones reach (so a layout it cannot prove free of overlap counts as overlapping)."""
    reach = 0
    for stride, size in sorted((st, sz) for sz, st in zip(tensor.shape, tensor.stride())
                               if sz > 1):
        if stride <= reach:
            return True
        reach += (size - 1) * stride
    return False


def check_writable(tensor, who):
    """Raise ValueError if tensor cannot be reduced in place element by element: a sum
    written into a view whose elements share memory is not the sum (who: for the message)."""
    if may_overlap(tensor):
        raise ValueError(
            "%s: the tensor's elements overlap in memory (shape %s, strides %s: an expanded or "
            "broadcast view); an all-reduce cannot write it in place. Reduce a copy "
            "(tensor.clone() or .contiguous())" % (who, tuple(tensor.shape), tensor.stride()))


def copy_back(dst, work):
    """dst.copy_(work), the result of an all-reduce of a contiguous copy of dst, and wait
    for the copy on a CUDA device (the caller may read dst on any stream). @return dst."""
    with torch.no_grad():
        dst.copy_(work)
    if dst.device.type == "cuda":
        torch.cuda.current_stream(dst.device).synchronize()
    return dst


# ---- device copies -----------------------------------------------------------------------


class DeviceCopy:
    """What the staged path needs from a device, abstractly: host staging memory, two copy
    streams (to the host, back to the device) that run their copies in order, and handles that
    say when a copy is done. A handle is created once and reused: recording it again means
    "done once this new copy is". Implementations: CudaCopy, CpuStandIn."""

    def __init__(self):
        self.allocations = 0  # host staging buffers allocated (they are reused)

    def alloc_host(self, numel, dtype):
        raise NotImplementedError

    def new_handle(self):
        raise NotImplementedError

    def begin(self, tensor):
        """Order the copies of tensor after the work that produced it (called on the thread
        that owns that work, e.g. in the hook)."""

    def to_host(self, dst, src, handle, tag=None):
        """Queue dst.copy_(src) on the stream to the host; handle marks its end. tag: chunk
        number, for logs."""
        raise NotImplementedError

    def to_device(self, dst, src, handle, tag=None):
        """Queue dst.copy_(src) on the stream to the device; handle marks its end."""
        raise NotImplementedError

    def wait(self, handle):
        """Block until the copy last recorded on handle is done."""
        raise NotImplementedError

    def close(self):
        pass


class CudaCopy(DeviceCopy):
    """DeviceCopy on a CUDA device: pinned host buffers, one stream per direction (the GPU's
    copy engines run both at once), an event per chunk and direction."""

    def __init__(self, device):
        super().__init__()
        self.device = torch.device(device)
        self.d2h = torch.cuda.Stream(device=self.device)
        self.h2d = torch.cuda.Stream(device=self.device)
        self._produced = torch.cuda.Event()

    def alloc_host(self, numel, dtype):
        self.allocations += 1
        return torch.empty(numel, dtype=dtype, pin_memory=True)

    def new_handle(self):
        return torch.cuda.Event()

    def begin(self, tensor):
        cur = torch.cuda.current_stream(self.device)
        self._produced.record(cur)
        self.d2h.wait_event(self._produced)
        # The caching allocator must not hand the bucket's memory to anyone while our
        # streams still read or write it.
        tensor.record_stream(self.d2h)
        tensor.record_stream(self.h2d)

    def to_host(self, dst, src, handle, tag=None):
        with torch.cuda.stream(self.d2h):
            dst.copy_(src, non_blocking=True)
            handle.record(self.d2h)

    def to_device(self, dst, src, handle, tag=None):
        # The host chunk was written by libina on the CPU: nothing to wait for on the GPU.
        with torch.cuda.stream(self.h2d):
            dst.copy_(src, non_blocking=True)
            handle.record(self.h2d)

    def wait(self, handle):
        handle.synchronize()


class _StandInHandle:
    __slots__ = ("done",)

    def __init__(self):
        self.done = threading.Event()
        self.done.set()


class CpuStandIn(DeviceCopy):
    """DeviceCopy for tests on CPU tensors: each direction is a thread that runs its copies in
    the order queued, like a CUDA stream, optionally slowed by delay_s per copy. log (if not
    None) gets (what, chunk, time) tuples: 'd2h_start', 'd2h_end', 'h2d_start', 'h2d_end'."""

    def __init__(self, delay_s=0.0, log=None):
        super().__init__()
        self.delay_s = delay_s
        self.log = log
        self._lock = threading.Lock()
        self._queues = {}
        self._threads = []
        for name in ("d2h", "h2d"):
            q = queue.Queue()
            t = threading.Thread(target=self._run, args=(name, q), daemon=True,
                                 name="ina-standin-" + name)
            t.start()
            self._queues[name] = q
            self._threads.append(t)

    def _note(self, what, tag):
        if self.log is not None:
            with self._lock:
                self.log.append((what, tag, time.perf_counter()))

    def _run(self, name, q):
        while True:
            item = q.get()
            if item is None:
                return
            dst, src, handle, tag = item
            self._note(name + "_start", tag)
            if self.delay_s:
                time.sleep(self.delay_s)
            with torch.no_grad():
                dst.copy_(src)
            self._note(name + "_end", tag)
            handle.done.set()

    def alloc_host(self, numel, dtype):
        self.allocations += 1
        return torch.empty(numel, dtype=dtype)

    def new_handle(self):
        return _StandInHandle()

    def to_host(self, dst, src, handle, tag=None):
        handle.done.clear()
        self._queues["d2h"].put((dst, src, handle, tag))

    def to_device(self, dst, src, handle, tag=None):
        handle.done.clear()
        self._queues["h2d"].put((dst, src, handle, tag))

    def wait(self, handle):
        handle.done.wait()

    def close(self):
        for q in self._queues.values():
            q.put(None)
        for t in self._threads:
            t.join(timeout=10)


# ---- staging buffers -----------------------------------------------------------------------


class _Slot:
    """One host staging buffer and the copy handles of its chunks, reused across steps."""

    def __init__(self, copier, numel, dtype):
        self.host = copier.alloc_host(numel, dtype)
        self.d2h = []
        self.h2d = []

    def handles(self, copier, n):
        while len(self.d2h) < n:
            self.d2h.append(copier.new_handle())
            self.h2d.append(copier.new_handle())


class _Pool:
    """Free staging slots per dtype. A bucket takes the smallest free slot that holds it, or
    a new one; steady-state training (the same buckets every step) allocates nothing."""

    def __init__(self, copier):
        self.copier = copier
        self._free = collections.defaultdict(list)
        self._lock = threading.Lock()

    def take(self, numel, dtype):
        with self._lock:
            free = self._free[dtype]
            best = None
            for i, s in enumerate(free):
                if s.host.numel() >= numel and (best is None
                                                 or s.host.numel() < free[best].host.numel()):
                    best = i
            if best is not None:
                return free.pop(best)
        return _Slot(self.copier, numel, dtype)

    def give(self, slot):
        with self._lock:
            self._free[slot.host.dtype].append(slot)


# ---- the engine: one ina context, one helper thread ---------------------------------------


class _Job:
    __slots__ = ("tensor", "op", "fut", "slot", "chunks", "t_submit", "copier")


class Engine:
    """All-reduces tensors through one ina Context: CPU tensors in place, device tensors staged
    through reused host buffers in chunks (see the module's doc). background=True: submit()
    returns at once and a helper thread, which owns the context, does the work in submission
    order; otherwise submit() does it before returning. device_copy: a DeviceCopy used for
    every tensor, CPU ones too (tests); None: CudaCopy for CUDA tensors, zero-copy for CPU.

    sparse: "off", "on", "auto", or None (the context's mode): the block-sparse mode of every
    all-reduce (docs/SPARSE.md); sparse_buckets, dense_buckets and last_choice count what the
    buckets did (a staged bucket counts as sparse if any of its chunks went sparse).

    Every rank must submit the same tensors (count, dtype) with the same ops in the same
    order: the all-reduces are matched by their order on the context."""

    def __init__(self, ctx=None, background=True, chunk_bytes=DEFAULT_CHUNK_BYTES,
                 depth=DEFAULT_DEPTH, device_copy=None, profile=False, sparse=None):
        ina._sparse_code(sparse)  # ValueError now, not at the first bucket
        if chunk_bytes < 4096:
            raise ValueError("ina.torch: chunk_bytes %r is below 4096" % (chunk_bytes,))
        if depth < 1:
            raise ValueError("ina.torch: depth %r is below 1" % (depth,))
        self._ctx = ctx
        self.background = background
        self.chunk_bytes = int(chunk_bytes)
        self.depth = int(depth)
        self._device_copy = device_copy
        self._copiers = {}   # device -> DeviceCopy (CUDA)
        self._pools = {}     # id(DeviceCopy) -> _Pool
        self.native = {}     # dtype -> False once the library said NOTSUP for it
        self.sparse = sparse  # "off", "on", "auto", or None: the context's mode
        self.sparse_buckets = 0  # buckets that went block-sparse
        self.dense_buckets = 0   # buckets that went dense (asked, chosen by auto, or not possible)
        self.last_choice = None  # "sparse" or "dense": what the last bucket did
        self._queue = None
        self._thread = None
        self._lock = threading.Lock()
        self.profile = [] if profile else None  # (t_submit, t_start, t_end, numel, chunks)
        self.events = None   # tests: a list that gets (what, chunk, time) from the staged path

    @property
    def ctx(self):
        if self._ctx is None:
            self._ctx = ina.default_context()
        return self._ctx

    # -- submission --

    def _copier_for(self, tensor):
        if self._device_copy is not None:
            return self._device_copy
        if tensor.device.type == "cpu":
            return None
        if tensor.device.type != "cuda":
            raise TypeError("ina.torch: tensors on %s are not supported (cpu, cuda)"
                            % tensor.device)
        with self._lock:
            c = self._copiers.get(tensor.device)
            if c is None:
                c = self._copiers[tensor.device] = CudaCopy(tensor.device)
            return c

    def submit(self, tensor, op="avg"):
        """@return a torch.futures.Future that gets tensor, reduced in place with op.
        A tensor that is not contiguous (transposed, strided, channels_last, ...) is reduced
        in a contiguous copy, copied back when done; one whose elements overlap (an expanded
        view) raises ValueError (check_writable)."""
        if not tensor.is_contiguous():
            check_writable(tensor, "ina.torch")
            return self._submit(tensor.contiguous(), op).then(
                lambda f: copy_back(tensor, f.value()))
        return self._submit(tensor, op)

    def _submit(self, tensor, op):
        job = _Job()
        job.tensor, job.op, job.fut = tensor, op, torch.futures.Future()
        job.t_submit = time.perf_counter()
        job.copier = self._copier_for(tensor)
        job.slot = None
        if job.copier is not None:
            self._stage_out(job)  # on this thread: the copies follow the producer's stream
        if not self.background:
            self._do(job)
            return job.fut
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._queue = queue.Queue()
                self._thread = threading.Thread(target=self._run, args=(self._queue,),
                                                name="ina-engine", daemon=True)
                self._thread.start()
            self._queue.put(job)
        return job.fut

    def _chunking(self, tensor):
        per = max(4096, self.chunk_bytes // tensor.element_size() // 4096 * 4096)
        n = tensor.numel()
        return [(lo, min(n, lo + per)) for lo in range(0, n, per)] or [(0, 0)]

    def _pool(self, copier):
        with self._lock:
            p = self._pools.get(id(copier))
            if p is None:
                p = self._pools[id(copier)] = _Pool(copier)
            return p

    def _stage_out(self, job):
        """Queue every chunk's copy to the host (the copy stream runs them in order)."""
        t = job.tensor
        flat = t.view(-1)
        job.chunks = self._chunking(flat)
        job.slot = slot = self._pool(job.copier).take(flat.numel(), t.dtype)
        slot.handles(job.copier, len(job.chunks))
        job.copier.begin(t)
        for k, (lo, hi) in enumerate(job.chunks):
            job.copier.to_host(slot.host[lo:hi], flat[lo:hi], slot.d2h[k], tag=k)

    # -- the work --

    def _run(self, q):
        while True:
            job = q.get()
            if job is None:
                return
            self._do(job)

    def _note(self, what, k):
        if self.events is not None:
            self.events.append((what, k, time.perf_counter()))

    def _do(self, job):
        t0 = time.perf_counter()
        try:
            if job.copier is None:
                result = self._reduce_in_place(job.tensor, job.op)
            else:
                result = self._reduce_staged(job)
        except Exception as e:  # noqa: BLE001 - handed to the caller through the Future
            job.fut.set_exception(e)
            return
        finally:
            if job.slot is not None:
                self._pool(job.copier).give(job.slot)
        if self.profile is not None:
            self.profile.append((job.t_submit, t0, time.perf_counter(), job.tensor.numel(),
                                 len(job.chunks) if job.copier is not None else 1))
        self._note("done", None)
        job.fut.set_result(result)

    def _reduce_in_place(self, tensor, op):
        """The zero-copy path (a contiguous CPU tensor): ina reduces its memory."""
        ctx = self.ctx
        before = ctx.stats()["sparse_ops"]
        if self.native.get(tensor.dtype, True):
            try:
                ctx.allreduce(tensor, op=op, sparse=self.sparse)
                return self._count_choice(ctx, before, tensor)
            except ina.InaError as e:
                if e.code != ina.ERR_NOTSUP or tensor.dtype == torch.float32:
                    raise
                self.native[tensor.dtype] = False  # argument check: the context is intact
        work = tensor.to(torch.float32)
        ctx.allreduce(work, op=op, sparse=self.sparse)
        with torch.no_grad():
            tensor.copy_(work)
        return self._count_choice(ctx, before, tensor)

    def _count_choice(self, ctx, sparse_ops_before, tensor):
        """Count whether the bucket just reduced went block-sparse. @return tensor."""
        went_sparse = ctx.stats()["sparse_ops"] > sparse_ops_before
        self.last_choice = "sparse" if went_sparse else "dense"
        if went_sparse:
            self.sparse_buckets += 1
        else:
            self.dense_buckets += 1
        return tensor

    def _reduce_staged(self, job):
        """Chunk k: wait for its copy to the host, start its all-reduce (up to depth chunks in
        flight on the context), and once its sum is in, queue its copy back to the device.
        Returns after the last copy back is done."""
        ctx, copier, slot = self.ctx, job.copier, job.slot
        flat = job.tensor.view(-1)
        inflight = collections.deque()
        failure = None
        before = 0
        try:
            before = ctx.stats()["sparse_ops"]  # raises on a closed context: in the try
            for k, (lo, hi) in enumerate(job.chunks):
                copier.wait(slot.d2h[k])
                self._note("ar_start", k)
                inflight.append((k, ctx.allreduce_async(slot.host[lo:hi], job.op,
                                                        sparse=self.sparse)))
                while len(inflight) > self.depth or (k == len(job.chunks) - 1 and inflight):
                    j, req = inflight.popleft()
                    req.wait()
                    self._note("ar_end", j)
                    jlo, jhi = job.chunks[j]
                    copier.to_device(flat[jlo:jhi], slot.host[jlo:jhi], slot.h2d[j], tag=j)
        except Exception as e:  # noqa: BLE001
            failure = e
        # Nothing may still write to the staging buffer or the bucket when it is reused or
        # handed back: wait for every copy queued, whatever happened.
        for k in range(len(job.chunks)):
            copier.wait(slot.d2h[k])
            copier.wait(slot.h2d[k])
        if failure is not None:
            raise failure
        self._note("h2d_all", None)
        return self._count_choice(ctx, before, job.tensor)

    def close(self, close_context=False):
        """Stop the helper thread (after the queued work) and the copy threads of stand-ins this
        engine made; close the context if asked."""
        with self._lock:
            thread, self._thread = self._thread, None
            if thread is not None:
                self._queue.put(None)
        if thread is not None:
            thread.join(timeout=60)  # outside the lock: the thread's work takes it too
        if close_context and self._ctx is not None:
            self._ctx.close()


# ---- the DDP hook --------------------------------------------------------------------------


class HookState(Engine):
    """State of allreduce_hook: an Engine (the ina Context, default ina.default_context() on
    first use; the helper thread with background=True; the staged path for CUDA buckets) plus
    the check that the process group and the context have the same world size.

    Every rank must register the hook with the same kind of state: the all-reduces of all
    ranks are matched by their order on each context."""

    def __init__(self, ctx=None, background=True, chunk_bytes=DEFAULT_CHUNK_BYTES,
                 depth=DEFAULT_DEPTH, device_copy=None, profile=False, sparse=None):
        super().__init__(ctx, background, chunk_bytes, depth, device_copy, profile, sparse)
        self.checked_world = False

    def _check_world(self):
        if self.checked_world:
            return
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            ws = dist.get_world_size()
            if ws != self.ctx.world_size:
                raise RuntimeError("ina.torch: the process group has %d ranks but the ina "
                                   "context %d" % (ws, self.ctx.world_size))
        self.checked_world = True

    def reduce(self, tensor):
        """Average tensor over the ranks in place, now. @return tensor."""
        return self._reduce_in_place(tensor, "avg")

    def submit(self, tensor, op="avg"):
        self._check_world()
        return super().submit(tensor, op)

    def take_profile(self):
        """The per-bucket timeline since the last call (profile=True), and clear it: a list of
        (t_submit, t_start, t_end, numel, chunks), perf_counter seconds."""
        p, self.profile = self.profile, [] if self.profile is not None else None
        return p or []


_default_state = None
_default_state_lock = threading.Lock()


def _hook_state(state, who):
    """state itself, or for None the shared default HookState (ina's default context, no
    helper thread)."""
    global _default_state
    if state is None:
        with _default_state_lock:
            if _default_state is None:
                _default_state = HookState(background=False)
            return _default_state
    if not isinstance(state, HookState):
        raise TypeError("ina.torch.%s: state must be None or an ina.torch.HookState, got %s"
                        % (who, type(state).__name__))
    return state


def allreduce_hook(state, bucket):
    """DDP communication hook: average the bucket over the ranks through ina-switch.
    state: None (ina's default context, configured from the environment, no helper thread) or
    a HookState. @return torch.futures.Future[torch.Tensor]."""
    return _hook_state(state, "allreduce_hook").submit(bucket_tensor(bucket))


def _compress_hook(state, bucket, dtype, who):
    """Average the bucket through ina as dtype (16 bits a value) and write it back into the
    bucket in its own dtype. Unlike torch's hooks, which divide by the world size in the 16-bit
    type before summing (so that the sum stays in range), this asks ina for AVG: libina divides
    the sum before rounding it to dtype, so neither small nor large gradients lose range."""
    st = _hook_state(state, who)
    buf = bucket_tensor(bucket)
    if buf.dtype == dtype:  # already 16-bit (a bf16 or fp16 model): nothing to cast
        return st.submit(buf)
    compressed = buf.to(dtype)
    return st.submit(compressed).then(lambda f: copy_back(buf, f.value()))


def bf16_compress_hook(state, bucket):
    """DDP communication hook: cast the bucket to bfloat16, average it over the ranks through
    ina-switch as bfloat16, and cast the average back into the bucket (torch's
    default_hooks.bf16_compress_hook, through ina). state: as allreduce_hook's.
    @return torch.futures.Future[torch.Tensor] (the bucket, in its own dtype)."""
    return _compress_hook(state, bucket, torch.bfloat16, "bf16_compress_hook")


def fp16_compress_hook(state, bucket):
    """DDP communication hook: as bf16_compress_hook with float16 (torch's
    default_hooks.fp16_compress_hook, through ina). float16 tops out at 65504: gradients
    beyond it become Inf (so do torch's)."""
    return _compress_hook(state, bucket, torch.float16, "fp16_compress_hook")


# DDP.register_comm_hook refuses a hook whose __name__ is "bf16_compress_hook" unless CUDA 11+
# and NCCL 2.10+ are present (torch 1.10 to 2.x check the name, meaning torch's own NCCL hook):
# this one needs neither, so it goes by another name there.
bf16_compress_hook.__name__ = "ina_bf16_compress_hook"
fp16_compress_hook.__name__ = "ina_fp16_compress_hook"

"""ina.torch: a DistributedDataParallel communication hook that all-reduces gradient buckets
through ina-switch instead of the process group.

    import ina.torch
    model = DDP(model)                                   # process group: gloo (or any)
    model.register_comm_hook(ina.torch.HookState(), ina.torch.allreduce_hook)
    # or state=None: the hook uses ina.default_context(), configured from the environment
    # that torchrun sets (RANK, WORLD_SIZE) plus INA_SWITCH and INA_JOB

The hook returns a torch.futures.Future holding the bucket averaged over the ranks (summed,
then divided by the world size), as DDP's default all-reduce hook does. With a HookState
(background=True, the default) the all-reduce runs on a helper thread that owns the ina
context, so backward keeps computing the next buckets meanwhile; with background=False, or
with state=None, it runs inside the hook and the Future is already complete.

Sparse gradients (embeddings, pruned or top-k sparsified models): HookState(sparse="auto")
lets every bucket of at least sparse_min_bytes (ina.Context, default 1 MiB) measure its density
of non-zero blocks, summed over the ranks in one round trip (so every rank decides alike), and
go block-sparse below the crossover (docs/SPARSE.md), dense above; sparse="on" always sends
buckets sparse, "off" never, None (default) follows the context (INA_SPARSE). The state counts
what each bucket did (HookState.sparse_buckets, dense_buckets, last_choice).

Buckets of a dtype the C library does not reduce yet (float64, float16, bfloat16 until they
are implemented) are converted to float32, reduced, and converted back.

A torch.distributed backend named "ina" (Backend.register_backend) is not provided: torch 1.13
needs a C++ ProcessGroup extension for that. The process group stays gloo (it also does DDP's
parameter broadcast); only the gradient all-reduce goes through ina.
"""
import queue
import threading

import torch

import ina

__all__ = ["HookState", "allreduce_hook", "bucket_tensor"]


def bucket_tensor(bucket):
    """The flat gradient tensor of a DDP GradBucket (buffer() in torch >= 1.9 and 2.x,
    get_tensor() in 1.8)."""
    for name in ("buffer", "get_tensor"):
        fn = getattr(bucket, name, None)
        if fn is not None:
            return fn()
    raise TypeError("ina.torch: unknown GradBucket API (no buffer() or get_tensor())")


class HookState:
    """State of allreduce_hook: the ina Context (default: ina.default_context() on first use),
    the world size to divide by, and the helper thread (background=True).

    Every rank must register the hook with the same kind of state: the all-reduces of all
    ranks are matched by their order on each context."""

    def __init__(self, ctx=None, background=True, sparse=None):
        self._ctx = ctx
        self.background = background
        self.sparse = sparse  # "off", "on", "auto", or None: the context's mode
        ina._sparse_code(sparse)  # ValueError now, not at the first bucket
        self.sparse_buckets = 0  # buckets that went block-sparse
        self.dense_buckets = 0   # buckets that went dense (asked, chosen by auto, or not possible)
        self.last_choice = None  # "sparse" or "dense": what the last bucket did
        self.native = {}  # dtype -> False once the library said NOTSUP for it
        self._queue = None
        self._thread = None
        self._lock = threading.Lock()
        self.checked_world = False

    @property
    def ctx(self):
        if self._ctx is None:
            self._ctx = ina.default_context()
        return self._ctx

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
        """Average tensor over the ranks in place (the hook's work). @return tensor."""
        ctx = self.ctx
        if self.native.get(tensor.dtype, True):
            try:
                return self._allreduce(ctx, tensor)
            except ina.InaError as e:
                if e.code != ina.ERR_NOTSUP or tensor.dtype == torch.float32:
                    raise
                self.native[tensor.dtype] = False  # argument check: the context is intact
        work = tensor.to(torch.float32)
        self._allreduce(ctx, work)
        with torch.no_grad():
            tensor.copy_(work)
        return tensor

    def _allreduce(self, ctx, tensor):
        """One bucket, sparse or dense as self.sparse asks; counts which it went."""
        before = ctx.stats()["sparse_ops"]
        ctx.allreduce(tensor, op="avg", sparse=self.sparse)
        went_sparse = ctx.stats()["sparse_ops"] > before
        self.last_choice = "sparse" if went_sparse else "dense"
        if went_sparse:
            self.sparse_buckets += 1
        else:
            self.dense_buckets += 1
        return tensor

    def submit(self, tensor):
        """@return a Future that gets tensor, averaged."""
        self._check_world()
        fut = torch.futures.Future()
        if not self.background:
            try:
                fut.set_result(self.reduce(tensor))
            except Exception as e:  # noqa: BLE001 - handed to DDP through the Future
                fut.set_exception(e)
            return fut
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._queue = queue.Queue()
                self._thread = threading.Thread(target=self._run, args=(self._queue,),
                                                name="ina-hook", daemon=True)
                self._thread.start()
        self._queue.put((tensor, fut))
        return fut

    def _run(self, q):
        while True:
            item = q.get()
            if item is None:
                return
            tensor, fut = item
            try:
                result = self.reduce(tensor)
            except Exception as e:  # noqa: BLE001
                fut.set_exception(e)
                continue
            fut.set_result(result)

    def close(self, close_context=False):
        """Stop the helper thread (after the queued buckets) and, if asked, close the context."""
        with self._lock:
            if self._thread is not None:
                self._queue.put(None)
                self._thread.join(timeout=60)
                self._thread = None
        if close_context and self._ctx is not None:
            self._ctx.close()


_default_state = None
_default_state_lock = threading.Lock()


def allreduce_hook(state, bucket):
    """DDP communication hook: average the bucket over the ranks through ina-switch.
    state: None (ina's default context, configured from the environment, no helper thread) or
    a HookState. @return torch.futures.Future[torch.Tensor]."""
    global _default_state
    if state is None:
        with _default_state_lock:
            if _default_state is None:
                _default_state = HookState(background=False)
            state = _default_state
    elif not isinstance(state, HookState):
        raise TypeError("ina.torch.allreduce_hook: state must be None or an ina.torch.HookState, "
                        "got %s" % type(state).__name__)
    return state.submit(bucket_tensor(bucket))

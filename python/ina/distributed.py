"""ina.distributed: a torch.distributed backend named "ina".

    import ina.distributed                      # registers the backend (idempotent)
    dist.init_process_group(backend="ina")      # torch 1.13 and 2.x
    dist.init_process_group(backend="cpu:ina,cuda:ina")   # torch 2.x: per device type
    model = DDP(model)                          # its gradient all-reduces go through ina

What goes through ina: all_reduce of float32, float16, bfloat16, float64 and int32 tensors on
the CPU or a CUDA device with ReduceOp SUM, AVG, MAX or MIN (not MAX/MIN of float64), one tensor
per call (DDP's buckets, dist.all_reduce). Contiguous CPU tensors are reduced in place (no
copy), CUDA tensors through the staged path of ina.torch.Engine (pinned buffers reused, chunks
copied on their own streams). A tensor that is not contiguous (transposed, sliced with a step,
channels_last, ...) is reduced in a contiguous copy that is copied back into it, on either path
(Gloo by itself would reduce the first numel() elements of the storage); a tensor whose elements
overlap in memory (expanded or broadcast) raises ValueError, in all_reduce_coalesced too. Every
all_reduce returns at once; the work runs on a helper thread that owns the ina context, in the
order of the calls, and Work.wait() / get_future() wait for it.

Everything else (broadcast, all_gather, reduce_scatter, barrier, send/recv, ..., and all_reduce
of other dtypes or ops such as PRODUCT) is handed to a Gloo process group created underneath,
on the same store. The two are independent channels, each in call order: as with any backend,
wait for an operation before another one reads its tensor.

The ina job: every rank of the group joins the switch at INA_SWITCH (default 127.0.0.1:48864)
with its group rank and size; the job name, new per group, is made by the group's rank 0 and
shared through the group's store ("<INA_JOB or pg>-<8 hex digits>"). The other settings come
from the environment as for ina.Context (INA_LANES, INA_TIMEOUT_MS, INA_SECRET_FILE, ...).

torch >= 2.0 routes a creator that returns a ProcessGroup subclass straight into
init_process_group (Backend.register_backend(name, creator, devices=...)); torch 1.13 does the
same without the devices argument, and has no "cpu:ina,cuda:ina" syntax (docs/PYTHON.md).
"""
import inspect
import os
import threading

import torch
import torch.distributed as dist

import ina
from ina.torch import Engine, check_writable, copy_back

try:  # torch 2.x exports it as dist.ProcessGroup, 1.13 only from the C module
    from torch._C._distributed_c10d import ProcessGroup as _ProcessGroup
except ImportError:  # pragma: no cover
    _ProcessGroup = dist.ProcessGroup
from torch._C._distributed_c10d import PrefixStore, ProcessGroupGloo, _create_work_from_future

__all__ = ["ProcessGroupIna", "register", "BACKEND"]

BACKEND = "ina"

_INA_DTYPES = (torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int32)

# Collectives handed to the Gloo group as they are (every name ProcessGroup has in 1.13 or 2.x
# that is not an all-reduce; those the Gloo group lacks in this torch are skipped).
_DELEGATED = ("broadcast", "allgather", "_allgather_base", "allgather_coalesced",
              "allgather_into_tensor_coalesced", "gather", "scatter", "reduce",
              "reduce_scatter", "_reduce_scatter_base", "reduce_scatter_tensor_coalesced",
              "alltoall", "alltoall_base", "barrier", "monitored_barrier", "send", "recv",
              "recv_anysource")


def _ina_op(reduce_op):
    """The ina op of a ReduceOp, or None (Gloo's)."""
    for name, op in (("sum", dist.ReduceOp.SUM), ("max", dist.ReduceOp.MAX),
                     ("min", dist.ReduceOp.MIN)):
        if reduce_op == op:
            return name
    avg = getattr(dist.ReduceOp, "AVG", None)
    if avg is not None and reduce_op == avg:
        return "avg"
    return None


def _job_name(store, rank):
    """One name per group, made by its rank 0 and read by the others from the group's store."""
    key = "ina/job"
    if rank == 0:
        base = (os.environ.get("INA_JOB") or "pg")[:22]
        store.set(key, "%s-%s" % (base, os.urandom(4).hex()))
    return store.get(key).decode()


class ProcessGroupIna(_ProcessGroup):
    """The "ina" backend: all-reduces through ina-switch, the rest through Gloo (module doc).
    Attributes: ctx (the ina.Context), gloo (the ProcessGroupGloo underneath), engine (the
    ina.torch.Engine), counts (all-reduces served: {"ina": n, "gloo": n})."""

    def __init__(self, store, rank, size, timeout):
        super().__init__(rank, size)
        self.gloo = ProcessGroupGloo(PrefixStore("gloo/", store), rank, size, timeout)
        self.ctx = ina.Context(rank=rank, world_size=size, job=_job_name(store, rank))
        self.engine = Engine(self.ctx, background=True)
        self.counts = {"ina": 0, "gloo": 0}
        self._lock = threading.Lock()
        self._register_gloo_backend()

    def _register_gloo_backend(self):
        """torch 2.x: a C++ caller of a collective this class does not override reaches the
        ProcessGroup's registered backends; register the Gloo group for them. (torch 1.13 has
        no such registry, and its C++ callers reach the Python methods.)"""
        reg = getattr(self, "_register_backend", None)
        btype = getattr(getattr(_ProcessGroup, "BackendType", None), "GLOO", None)
        if reg is None or btype is None:
            return
        devices = [torch.device("cpu")]
        if torch.cuda.is_available():
            devices.append(torch.device("cuda"))
        for d in devices:
            reg(d, btype, self.gloo)

    def getBackendName(self):  # noqa: N802 - the C++ name
        return BACKEND

    def __repr__(self):
        return "<ina.distributed.ProcessGroupIna rank %d of %d, job %s>" % (
            self.rank(), self.size(), self.ctx.job)

    def _count(self, path):
        with self._lock:
            self.counts[path] += 1

    def allreduce(self, tensors, opts=None):
        """All-reduce through ina when it can (module doc), else through Gloo. A tensor that
        is not contiguous is reduced in a contiguous copy and copied back (either way); one
        whose elements overlap in memory (an expanded view) raises ValueError."""
        if isinstance(tensors, torch.Tensor):
            tensors = [tensors]
        for t in tensors:
            check_writable(t, "ina.distributed: all_reduce")
        reduce_op = opts.reduceOp if opts is not None else dist.ReduceOp.SUM
        op = _ina_op(reduce_op)
        if (op is None or len(tensors) != 1 or tensors[0].dtype not in _INA_DTYPES
                or tensors[0].device.type not in ("cpu", "cuda")
                or (op in ("max", "min") and tensors[0].dtype == torch.float64)):
            self._count("gloo")
            return self._gloo_allreduce(tensors, opts)
        self._count("ina")
        fut = self.engine.submit(tensors[0], op).then(lambda f: [f.value()])
        return _create_work_from_future(fut)

    def _gloo_allreduce(self, tensors, opts):
        """Gloo's all-reduce. Gloo reduces the first numel() elements of a tensor's storage
        whatever its strides, so a tensor that is not contiguous goes through a contiguous
        copy, copied back when the work completes."""
        if all(t.is_contiguous() for t in tensors):
            return self.gloo.allreduce(tensors, opts) if opts is not None \
                else self.gloo.allreduce(tensors)
        work = [t.contiguous() for t in tensors]
        w = self.gloo.allreduce(work, opts) if opts is not None else self.gloo.allreduce(work)
        fut = w.get_future().then(
            lambda f: [copy_back(t, c) for t, c in zip(tensors, f.value())])
        return _create_work_from_future(fut)

    def allreduce_coalesced(self, tensors, *args, **kwargs):
        """Gloo's (it copies each tensor into one flat buffer and back), after the check that
        no tensor's elements overlap in memory."""
        for t in tensors:
            check_writable(t, "ina.distributed: all_reduce_coalesced")
        return self.gloo.allreduce_coalesced(tensors, *args, **kwargs)

    def close(self):
        """Stop the helper thread and leave the ina job (the Gloo group stays until dropped)."""
        self.engine.close(close_context=True)


def _delegate(name):
    def method(self, *args, **kwargs):
        return getattr(self.gloo, name)(*args, **kwargs)

    method.__name__ = name
    method.__doc__ = "Handed to the Gloo group underneath."
    return method


for _name in _DELEGATED:
    if hasattr(ProcessGroupGloo, _name):
        setattr(ProcessGroupIna, _name, _delegate(_name))


def _create(store, rank, size, timeout):
    return ProcessGroupIna(store, rank, size, timeout)


_registered = False
_register_lock = threading.Lock()


def register():
    """Register the backend "ina" with torch.distributed (done on import; idempotent).
    torch 2.x: for the device types cpu and cuda."""
    global _registered
    with _register_lock:
        if _registered or BACKEND.upper() in getattr(dist.Backend, "_plugins", {}):
            _registered = True
            return
        params = inspect.signature(dist.Backend.register_backend).parameters
        if "devices" in params:
            dist.Backend.register_backend(BACKEND, _create, devices=["cpu", "cuda"])
        else:
            dist.Backend.register_backend(BACKEND, _create)
        _registered = True


register()

"""ina: Python bindings (ctypes, no compiled code) of libina, in-network aggregation.

    import ina
    ina.allreduce(grad)                 # in place; the default context comes from the environment
    with ina.Context(switch="10.0.0.1:48864", rank=0, world_size=4, job="j") as ctx:
        h = ctx.allreduce_async(x, op="avg")
        ...
        h.wait()

Buffers: contiguous CPU torch tensors and numpy arrays are reduced in place, without a copy;
anything else that is a tensor or an array (non-contiguous, on a GPU) is copied into a
contiguous CPU buffer and the result copied back. dtypes: int32, float32, float16, bfloat16
and float64 (each with its error bound, see docs/API.md). ops: "sum", "avg" (sum then division
by the world size; done by libina, or in Python by an older libina that answers NOTSUP), "max",
"min" (exact; not float64).

Threading: one Context may be shared by threads (calls are serialized by a lock); libina
itself allows one thread per context at a time. See docs/PYTHON.md.
"""
import ctypes
import os
import sys
import threading
import weakref

from . import _lib

__all__ = [
    "InaError", "Context", "Request", "allreduce", "allreduce_async", "default_context",
    "init", "finalize", "float_error_bound", "float_error_bounds", "library_version",
    "library_path", "strerror", "err_name", "last_error", "auto_lanes",
    "INT32", "FLOAT32", "FLOAT16", "BFLOAT16", "FLOAT64", "SUM", "MAX", "MIN", "AVG",
]

__version__ = _lib.VERSION  # include/ina.h's version

# ---- constants (include/ina.h) -------------------------------------------------------------

INT32, FLOAT32, FLOAT16, BFLOAT16, FLOAT64 = 0, 1, 2, 3, 4
SUM, MAX, MIN, AVG = 0, 1, 2, 3
FLOAT_ADD_NAMES = ("quantized", "switch")  # ina_config.float_add: INA_FLOAT_ADD_QUANTIZED, _SWITCH
SPARSE_NAMES = ("off", "on", "auto")       # ina_config.sparse: INA_SPARSE_OFF, _ON, _AUTO
SPARSE_DEFAULT = -1                        # per operation: the context's mode
PATH_NAMES = ("switch", "host")            # ina_info.path: INA_PATH_SWITCH, INA_PATH_HOST

OK = 0
ERR_TIMEOUT = -1001
ERR_ABORTED = -1002
ERR_REJECTED = -1003
ERR_NOSPACE = -1004
ERR_MISMATCH = -1005
ERR_CLOSED = -1006
ERR_NOTSUP = -1007
ERR_PROTO = -1008
ERR_CONFIG = -1009
ERR_BUSY = -1010
ERR_PS_FULL = -1016
ERR_STALE = -1018
ERR_RANGE = -1021
ERR_SHUTDOWN = -1022

_DTYPE_NAMES = {"int32": INT32, "float32": FLOAT32, "float16": FLOAT16, "bfloat16": BFLOAT16,
                "float64": FLOAT64}
_OPS = {"sum": SUM, "max": MAX, "min": MIN, "avg": AVG, "mean": AVG}


# ---- errors ----------------------------------------------------------------------------------


def strerror(code):
    """ina_strerror(): the library's message for any code it returns."""
    return _lib.lib().ina_strerror(int(code)).decode(errors="replace")


def err_name(code):
    """ina_err_name(): "INA_ERR_TIMEOUT", "EINVAL", ..."""
    return _lib.lib().ina_err_name(int(code)).decode(errors="replace")


def last_error(handle=None):
    """ina_last_error(): why the last call failed, in one sentence (the value and the rule,
    or the cause). handle: a context's ina_ctx pointer; None: this thread's last failed
    ina_init/ina_config_from_env."""
    return (_lib.lib().ina_last_error(handle) or b"").decode(errors="replace")


class InaError(RuntimeError):
    """A libina call failed. code: the negative status; name: its symbolic name; message:
    ina_strerror(code); what: the call that failed; detail: ina_last_error(), which says
    which value or cause (may be empty)."""

    def __init__(self, code, what="", detail=""):
        self.code = int(code)
        self.name = err_name(self.code)
        self.message = strerror(self.code)
        self.what = what
        self.detail = detail
        prefix = what + ": " if what else ""
        suffix = ": " + detail if detail else ""
        super().__init__("%s%s (%s, %d)%s" % (prefix, self.message, self.name, self.code,
                                               suffix))


def _check(rc, what, detail=""):
    if rc < 0:
        raise InaError(rc, what, detail)
    return rc


# ---- library information -----------------------------------------------------------------------


def library_version():
    """Version string of the libina that was loaded ("MAJOR.MINOR.PATCH")."""
    return _lib.lib().ina_version_string().decode()


def library_path():
    """Path (or soname) libina was loaded from."""
    return _lib.path()


def auto_lanes(switch=None, world_size=None):
    """ina_auto_lanes(): the lanes this process would propose with lanes="auto" (the default)
    for a job of world_size ranks at switch (both default to the environment, as Context reads
    it). @return a dict: lanes (1..4), cores (what the rule counted: the affinity mask, a cgroup
    quota, or INA_AUTO_CORES), local_workers (ranks of the job on this host)."""
    cfg = _lib.ConfigStruct()
    _check(_lib.lib().ina_config_from_env(ctypes.byref(cfg)), "ina_config_from_env",
           last_error(None))
    keep = []
    if switch is not None:
        keep.append(str(switch).encode())
        cfg.switch_addr = keep[-1]
    if world_size is not None:
        cfg.world_size = int(world_size)
    cores, local = ctypes.c_int(0), ctypes.c_int(0)
    lanes = _check(_lib.lib().ina_auto_lanes(ctypes.byref(cfg), ctypes.byref(cores),
                                             ctypes.byref(local)), "ina_auto_lanes")
    return {"lanes": lanes, "cores": cores.value, "local_workers": local.value}


def float_error_bound(world_size, amax, exact_sum):
    """ina_float_error_bound(): the largest |result - exact_sum| of one element of a float32
    all-reduce over world_size ranks, when the largest magnitude in the element's block (the
    elems_per_packet elements that share a packet) over all ranks is amax."""
    return _lib.lib().ina_float_error_bound(int(world_size), float(amax), float(exact_sum))


def float_error_bounds(inputs, elems_per_packet, float_add="quantized"):
    """Per-element error bounds of a float32 sum all-reduce of the arrays in inputs (one per
    rank, same size, anything numpy.asarray takes). @return (exact, bound): float64 numpy
    arrays of the flattened exact sum and of float_error_bound() for each element, or with
    float_add="switch" (Context.float_add: the switch added floats) of
    ina_float_add_error_bound()."""
    import numpy as np

    xs = [np.asarray(x, dtype=np.float64).ravel() for x in inputs]
    n = len(xs)
    if n == 0:
        raise ValueError("float_error_bounds: no inputs")
    exact = np.sum(xs, axis=0)
    count = exact.size
    if _float_add_code(float_add) == 1:
        abs_sum = np.sum(np.abs(np.stack(xs)), axis=0) if count else exact
        fn = _lib.lib().ina_float_add_error_bound
        return exact, np.array([fn(FLOAT32, n, float(abs_sum[i]), float(exact[i]))
                                for i in range(count)], dtype=np.float64)
    k = int(elems_per_packet)
    amax_el = np.max(np.abs(np.stack(xs)), axis=0) if count else exact
    nblocks = (count + k - 1) // k
    bound = np.empty(count, dtype=np.float64)
    fn = _lib.lib().ina_float_error_bound
    for b in range(nblocks):
        lo, hi = b * k, min(count, (b + 1) * k)
        amax = float(np.max(amax_el[lo:hi]))
        for i in range(lo, hi):
            bound[i] = fn(n, amax, float(exact[i]))
    return exact, bound


def _float_add_code(v):
    """"quantized" / "switch" (or 0 / 1) -> INA_FLOAT_ADD_*."""
    if v in FLOAT_ADD_NAMES:
        return FLOAT_ADD_NAMES.index(v)
    if v in (0, 1) and not isinstance(v, bool):
        return int(v)
    raise ValueError("ina: float_add must be one of %s, not %r" % (", ".join(FLOAT_ADD_NAMES), v))


# ---- buffers ---------------------------------------------------------------------------------


def _torch_module():
    return sys.modules.get("torch")


def _torch_dtype_code(torch, dt):
    table = {torch.int32: INT32, torch.float32: FLOAT32, torch.float16: FLOAT16,
             torch.bfloat16: BFLOAT16, torch.float64: FLOAT64}
    if dt not in table:
        raise TypeError("ina: unsupported torch dtype %s (int32, float32, float16, bfloat16, "
                        "float64)" % dt)
    return table[dt]


class _Buffer:
    """The memory an operation works on: obj itself when it is a contiguous CPU buffer, else a
    contiguous CPU copy (work) that finish() copies back into obj."""

    def __init__(self, obj):
        self.obj = obj
        torch = _torch_module()
        if torch is not None and isinstance(obj, torch.Tensor):
            self.kind = "torch"
            self.dtype = _torch_dtype_code(torch, obj.dtype)
            if obj.device.type == "cpu" and obj.is_contiguous():
                self.work, self.copied = obj, False
            else:
                self.work = obj.detach().to("cpu", copy=True).contiguous()
                self.copied = True
            self.ptr = self.work.data_ptr()
            self.count = self.work.numel()
            return
        np = sys.modules.get("numpy")
        if np is not None and isinstance(obj, np.ndarray):
            self.kind = "numpy"
            if not obj.dtype.isnative or obj.dtype.name not in _DTYPE_NAMES:
                raise TypeError("ina: unsupported numpy dtype %s (native int32, float32, "
                                "float16, float64)" % obj.dtype)
            if not obj.flags.writeable:
                raise ValueError("ina: the array is read-only; the all-reduce works in place")
            self.dtype = _DTYPE_NAMES[obj.dtype.name]
            if obj.flags.c_contiguous:
                self.work, self.copied = obj, False
            else:
                self.work, self.copied = np.ascontiguousarray(obj), True
            self.ptr = self.work.ctypes.data
            self.count = self.work.size
            return
        raise TypeError("ina: expected a torch.Tensor or a numpy.ndarray, got %s"
                        % type(obj).__name__)

    def divide(self, n):
        """work /= n in place (integers: truncated toward zero, as C's division)."""
        w = self.work
        if self.kind == "torch":
            torch = _torch_module()
            with torch.no_grad():
                if self.dtype == INT32:
                    w.div_(n, rounding_mode="trunc")
                else:
                    w.div_(n)
        else:
            import numpy as np

            if self.dtype == INT32:
                w64 = w.astype(np.int64)
                w[...] = np.sign(w64) * (np.abs(w64) // n)
            else:
                w /= w.dtype.type(n)

    def finish(self):
        """Copy the result back into obj if a copy was used."""
        if not self.copied:
            return
        if self.kind == "torch":
            torch = _torch_module()
            with torch.no_grad():
                self.obj.copy_(self.work)
        else:
            self.obj[...] = self.work


def _sparse_code(v):
    """"off", "on", "auto" (or 0, 1, 2; None: the context's default, -1)."""
    if v is None:
        return SPARSE_DEFAULT
    if isinstance(v, bool):
        return 1 if v else 0
    if isinstance(v, str):
        if v.lower() in SPARSE_NAMES:
            return SPARSE_NAMES.index(v.lower())
    elif int(v) in (SPARSE_DEFAULT, 0, 1, 2):
        return int(v)
    raise ValueError("ina: sparse must be one of %s or None, not %r" % (", ".join(SPARSE_NAMES), v))


def _op_code(op):
    if isinstance(op, str):
        key = op.lower()
        if key not in _OPS:
            raise ValueError("ina: unknown op %r (sum, avg, max, min)" % op)
        return _OPS[key]
    code = int(op)
    if code not in (SUM, MAX, MIN, AVG):
        raise ValueError("ina: unknown op %r" % op)
    return code


# ---- context ---------------------------------------------------------------------------------


def _default_job_from_env():
    """INA_JOB, else a name from torchrun's run id (TORCHELASTIC_RUN_ID), else None (the
    library's default, "default")."""
    if os.environ.get("INA_JOB"):
        return None  # ina_config_from_env reads it
    run_id = os.environ.get("TORCHELASTIC_RUN_ID")
    if run_id and run_id != "none":
        return ("tr-" + run_id)[:31]
    return None


def _finalize_handle(lib, handle):
    if handle.value:
        lib.ina_finalize(handle)
        handle.value = None


class Context:
    """A joined ina job (wraps ina_ctx). Arguments left None come from the environment, as
    ina_init_env() reads it (INA_SWITCH, INA_RANK or RANK, INA_WORLD_SIZE or WORLD_SIZE,
    INA_JOB, INA_ELEMS, INA_WINDOW, INA_TIMEOUT_MS, INA_JOIN_TIMEOUT_MS, INA_RTO_MS, INA_LANES,
    INA_FLOAT_ADD, INA_SPARSE, ...), or with env=False from the library's defaults. lanes:
    "auto" (or 0, the default: chosen from the host and agreed at join, see auto_lanes()) or
    1..16. float_add: "quantized" (SwitchML's block floating point, the default) or "switch"
    (the switch adds float32 values as floats where it can; ina.h INA_FLOAT_ADD_SWITCH);
    self.float_add says which is in use. busy_poll_us and fixed_point_bits are ina_config's
    fields of those names (INA_BUSY_POLL_US, INA_FIXED_POINT; busy_poll_us "auto", the
    default, spins as long as the host allows: docs/GLM.md); self.fixed_point_bits is 0
    unless float sums travel in fixed point. sparse: the default block-sparse mode of the
    context's all-reduces, "off", "on" or "auto" (ina.h INA_SPARSE_*; docs/SPARSE.md), with
    sparse_block, sparse_threshold, sparse_crossover and sparse_min_bytes; self.sparse says
    whether the switch offers it.
    Blocks until all world_size ranks joined (at most join_timeout_ms). Use as a context
    manager or call close()."""

    def __init__(self, switch=None, rank=None, world_size=None, job=None, *,
                 elems_per_packet=None, window=None, timeout_ms=None, join_timeout_ms=None,
                 rto_ms=None, lanes=None, float_add=None, busy_poll_us=None,
                 fixed_point_bits=None, sparse=None, sparse_block=None, sparse_threshold=None,
                 sparse_crossover=None, sparse_min_bytes=None, env=True):
        lib = _lib.lib()
        self._lib = lib
        self._lock = threading.RLock()
        self._pending = set()
        cfg = _lib.ConfigStruct()
        if env:
            rc = lib.ina_config_from_env(ctypes.byref(cfg))
            if rc < 0:
                raise InaError(rc, "ina_config_from_env", last_error(None))
            if job is None:
                job = _default_job_from_env()
        else:
            lib.ina_config_init(ctypes.byref(cfg))
        keep = []  # the encoded strings must live until ina_init() copied them

        def text(v):
            b = v.encode() if isinstance(v, str) else bytes(v)
            keep.append(b)
            return b

        if switch is not None:
            cfg.switch_addr = text(switch)
        if job is not None:
            cfg.job = text(job)
        if lanes == "auto":
            lanes = 0
        if busy_poll_us == "auto":
            busy_poll_us = -1  # ina.h INA_BUSY_POLL_AUTO, ina_config_init()'s default
        for name, v in (("rank", rank), ("world_size", world_size),
                        ("elems_per_packet", elems_per_packet), ("window", window),
                        ("timeout_ms", timeout_ms), ("join_timeout_ms", join_timeout_ms),
                        ("rto_ms", rto_ms), ("lanes", lanes), ("busy_poll_us", busy_poll_us),
                        ("fixed_point_bits", fixed_point_bits)):
            if v is not None:
                setattr(cfg, name, int(v))
        if float_add is not None:
            cfg.float_add = _float_add_code(float_add)
        if sparse is not None:
            code = _sparse_code(sparse)
            if code == SPARSE_DEFAULT:
                raise ValueError("ina: a context's sparse mode is off, on or auto")
            cfg.sparse = code
        for name, v, conv in (("sparse_block", sparse_block, int),
                              ("sparse_threshold", sparse_threshold, float),
                              ("sparse_crossover", sparse_crossover, float),
                              ("sparse_min_bytes", sparse_min_bytes, int)):
            if v is not None:
                setattr(cfg, name, conv(v))
        self.switch = (cfg.switch_addr or b"").decode(errors="replace")
        self.job = (cfg.job or b"").decode(errors="replace")
        handle = ctypes.c_void_p()
        rc = lib.ina_init(ctypes.byref(handle), ctypes.byref(cfg))
        if rc < 0:
            raise InaError(rc, "ina_init (switch %s, job %s, rank %d of %d)"
                           % (self.switch, self.job, cfg.rank, cfg.world_size), last_error(None))
        self._handle = handle
        # Leave the job at exit or when the Context is collected, if close() was not called.
        self._finalizer = weakref.finalize(self, _finalize_handle, lib, handle)
        info = _lib.InfoStruct()
        _check(lib.ina_get_info(handle, ctypes.byref(info)), "ina_get_info")
        self.rank = info.rank
        self.world_size = info.world_size
        self.elems_per_packet = info.elems_per_packet
        self.window = info.window
        self.job_id = info.job_id
        self.session_id = info.session_id
        self.lanes = info.lanes
        self.lanes_proposed = info.lanes_proposed
        self.path = PATH_NAMES[info.path] if 0 <= info.path < 2 else str(info.path)
        self.float_add = FLOAT_ADD_NAMES[info.float_add] if 0 <= info.float_add < 2 \
            else str(info.float_add)
        self.shm = bool(info.shm)
        self.fixed_point_bits = info.fixed_point_bits  # 0: float sums not in fixed point
        self.shards = info.shards  # switches each operation is spread over (INA_SWITCH list)
        self.levels = info.levels  # aggregation levels above the worker: 2 under a child switch
        self.sparse = bool(info.sparse)
        self.integrity = bool(info.integrity)  # every DATA and result tagged (INA_INTEGRITY=1)

    # -- lifetime --

    @property
    def closed(self):
        return not self._handle.value

    def close(self):
        """Leave the job (ina_finalize). Requests still in flight fail with INA_ERR_CLOSED (and
        the other ranks' with INA_ERR_ABORTED). Idempotent."""
        with self._lock:
            if self.closed:
                return
            for req in list(self._pending):
                req._released(ERR_CLOSED)
            self._pending.clear()
            self._finalizer()  # ina_finalize, once

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def __repr__(self):
        state = "closed" if self.closed else "rank %d of %d, %d elems/packet, window %d" % (
            self.rank, self.world_size, self.elems_per_packet, self.window)
        return "<ina.Context switch=%s job=%s %s>" % (self.switch, self.job, state)

    def _h(self):
        if self.closed:
            raise InaError(ERR_CLOSED, "ina.Context")
        return self._handle

    # -- introspection --

    def info(self):
        """Session parameters agreed at join time (ina_get_info) as a dict."""
        return {"rank": self.rank, "world_size": self.world_size,
                "elems_per_packet": self.elems_per_packet, "window": self.window,
                "job_id": self.job_id, "session_id": self.session_id, "lanes": self.lanes,
                "lanes_proposed": self.lanes_proposed,
                "path": self.path, "float_add": self.float_add, "shm": self.shm,
                "shards": self.shards, "levels": self.levels, "sparse": self.sparse,
                "integrity": self.integrity}

    def stats(self):
        """The context's counters (ina_get_stats) as a dict."""
        st = _lib.StatsStruct()
        with self._lock:
            _check(self._lib.ina_get_stats(self._h(), ctypes.byref(st)), "ina_get_stats")
        return {name: int(getattr(st, name)) for name in _lib.STATS_FIELDS}

    # -- all-reduce --

    def allreduce(self, obj, op="sum", sparse=None):
        """Blocking all-reduce of obj in place. @return obj."""
        return self.allreduce_async(obj, op, sparse).wait()

    def allreduce_async(self, obj, op="sum", sparse=None):
        """Start an all-reduce of obj in place. @return a Request; obj must not be touched until
        its wait() returned (or test() returned True). sparse: "off", "on", "auto" for this
        operation, or None for the context's mode (ina_allreduce_sparse_start)."""
        code = _op_code(op)
        mode = _sparse_code(sparse)
        buf = _Buffer(obj)
        req = ctypes.c_void_p()
        post_divide = False
        with self._lock:
            h = self._h()
            rc = self._lib.ina_allreduce_sparse_start(h, buf.ptr, buf.ptr, buf.count, buf.dtype,
                                                      code, mode, ctypes.byref(req))
            if rc == ERR_NOTSUP and code == AVG:
                # The library has no AVG yet: sum, then divide here (Request.wait()).
                rc = self._lib.ina_allreduce_sparse_start(h, buf.ptr, buf.ptr, buf.count,
                                                          buf.dtype, SUM, mode, ctypes.byref(req))
                post_divide = True
            _check(rc, "ina_allreduce_start", last_error(h) if rc < 0 else "")
            r = Request(self, req, buf, post_divide)
            self._pending.add(r)
        return r


class Request:
    """An all-reduce in flight (wraps ina_req). test() and wait() make progress; once either
    saw it finish, the result is in the buffer and the request is released."""

    def __init__(self, ctx, handle, buf, post_divide):
        self._ctx = ctx
        self._handle = handle
        self._buf = buf
        self._post_divide = post_divide
        self._status = None  # None while in flight, then the final status
        self._detail = ""  # ina_last_error() of a failure

    @property
    def done(self):
        return self._status is not None

    def _released(self, status):
        self._status = status
        self._handle = None

    def _complete(self, rc):
        if rc < 0 and not self._ctx.closed:
            self._detail = last_error(self._ctx._handle)
        self._released(rc)
        self._ctx._pending.discard(self)
        if rc == 0:
            if self._post_divide:
                self._buf.divide(self._ctx.world_size)
            self._buf.finish()

    def test(self):
        """Progress without blocking. @return True when finished (raises InaError if it
        failed), False while in flight."""
        with self._ctx._lock:
            if self._status is None:
                done = ctypes.c_int(0)
                self._ctx._lib.ina_test(self._handle, ctypes.byref(done))
                if not done.value:
                    return False
                self._complete(self._ctx._lib.ina_wait(self._handle))
        _check(self._status, "ina_test", self._detail)
        return True

    def wait(self):
        """Block until finished (bounded by the context's timeout_ms without progress).
        @return the reduced tensor or array; raises InaError if the operation failed."""
        with self._ctx._lock:
            if self._status is None:
                self._complete(self._ctx._lib.ina_wait(self._handle))
        _check(self._status, "ina_wait", self._detail)
        return self._buf.obj


# ---- default context -----------------------------------------------------------------------

_default = None
_default_lock = threading.Lock()


def init(**kwargs):
    """Create the default context (Context(**kwargs)); an error if one exists."""
    global _default
    with _default_lock:
        if _default is not None and not _default.closed:
            raise RuntimeError("ina.init: the default context exists; call ina.finalize() first")
        _default = Context(**kwargs)
        return _default


def default_context():
    """The default context, created on first use from the environment (as torchrun sets it:
    RANK, WORLD_SIZE, plus INA_SWITCH and INA_JOB; see Context)."""
    global _default
    with _default_lock:
        if _default is None or _default.closed:
            _default = Context()
        return _default


def finalize():
    """Close the default context, if any."""
    global _default
    with _default_lock:
        if _default is not None:
            _default.close()
            _default = None


def allreduce(obj, op="sum", ctx=None, sparse=None):
    """All-reduce a torch tensor or numpy array in place across the ranks of ctx (default:
    default_context()). op: "sum", "avg", "max", "min"; sparse: "off", "on", "auto" or None
    (the context's mode). @return obj."""
    return (ctx or default_context()).allreduce(obj, op, sparse)


def allreduce_async(obj, op="sum", ctx=None, sparse=None):
    """Start an all-reduce in place; @return a Request with wait() and test()."""
    return (ctx or default_context()).allreduce_async(obj, op, sparse)


def __getattr__(name):
    # `ina.torch` without importing torch when only numpy is used.
    if name == "torch":
        import importlib

        return importlib.import_module(".torch", __name__)
    raise AttributeError("module 'ina' has no attribute %r" % name)

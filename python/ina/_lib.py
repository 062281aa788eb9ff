"""_lib.py: find and load libina, and declare the C prototypes of include/ina.h for ctypes.

Search order (the first that exists wins; see find_library()):
  1. $INA_LIBRARY, a path to libina.so (an error if it is set but cannot be loaded);
  2. the in-tree build: <repo>/build/lib/libina.so, with this file at <repo>/python/ina/;
  3. the installed layout: this file at $PREFIX/lib/python3/dist-packages/ina/, the library
     at $PREFIX/lib/SONAME (libina.so.0.MINOR while the major version is 0);
  4. the dynamic loader's search path: ctypes.CDLL(SONAME).
The library found must lay out its structs as the mirrors below do (check_abi()): one that
does not is refused with an error that names it, before any struct is passed.
"""
import ctypes
import os

_HERE = os.path.dirname(os.path.abspath(__file__))

# The package's version: include/ina.h's INA_VERSION_* (tests/docs/check_version.py).
VERSION = "0.6.0"
_MAJOR, _MINOR = (int(x) for x in VERSION.split(".")[:2])
# The shared library's SONAME (CMakeLists.txt, docs/API.md#abi).
SONAME = "libina.so.%d.%d" % (_MAJOR, _MINOR) if _MAJOR == 0 else "libina.so.%d" % _MAJOR

# ---- structs (mirrors of include/ina.h; tests/python/test_abi.py compares every size and
# offset with the header, and check_abi() the sizes with the library loaded) ------------------


class ConfigStruct(ctypes.Structure):
    _fields_ = [
        ("switch_addr", ctypes.c_char_p),
        ("job", ctypes.c_char_p),
        ("rank", ctypes.c_int),
        ("world_size", ctypes.c_int),
        ("elems_per_packet", ctypes.c_int),
        ("window", ctypes.c_int),
        ("timeout_ms", ctypes.c_int),
        ("join_timeout_ms", ctypes.c_int),
        ("rto_ms", ctypes.c_int),
        ("lanes", ctypes.c_int),
        ("admission_wait_ms", ctypes.c_int),
        ("fallback", ctypes.c_int),
        ("secret_file", ctypes.c_char_p),
        ("float_add", ctypes.c_int),
        ("busy_poll_us", ctypes.c_int),
        ("fixed_point_bits", ctypes.c_int),
        ("sparse", ctypes.c_int),
        ("sparse_block", ctypes.c_int),
        ("sparse_threshold", ctypes.c_double),
        ("sparse_crossover", ctypes.c_double),
        ("sparse_min_bytes", ctypes.c_int),
        ("integrity", ctypes.c_int),
        ("wire_bits", ctypes.c_int),
        ("wire_half", ctypes.c_int),
        ("reserved", ctypes.c_uint * 1),
    ]


STATS_FIELDS = ("ops", "packets_sent", "packets_received", "retransmits", "stale_results",
                "bytes_sent", "nonfinite_blocks", "rtx_fast", "rtx_probe", "rtx_timeout",
                "fixed_invalid", "busy_poll_hits", "busy_poll_sleeps",
                "sparse_ops", "sparse_auto_dense", "sparse_blocks_sent",
                "group_rejected", "mac_rejected", "flushed_elems")


class StatsStruct(ctypes.Structure):
    _fields_ = [(name, ctypes.c_uint64) for name in STATS_FIELDS] + [
        ("reserved", ctypes.c_uint64 * 1)]


class InfoStruct(ctypes.Structure):
    _fields_ = [
        ("rank", ctypes.c_int),
        ("world_size", ctypes.c_int),
        ("elems_per_packet", ctypes.c_int),
        ("window", ctypes.c_int),
        ("job_id", ctypes.c_uint32),
        ("session_id", ctypes.c_uint32),
        ("lanes", ctypes.c_int),
        ("path", ctypes.c_int),
        ("float_add", ctypes.c_int),
        ("shm", ctypes.c_int),
        ("shards", ctypes.c_int),
        ("levels", ctypes.c_int),
        ("fixed_point_bits", ctypes.c_int),
        ("sparse", ctypes.c_int),
        ("lanes_proposed", ctypes.c_int),
        ("integrity", ctypes.c_int),
        ("wire_bits", ctypes.c_int),
        ("busy_poll_us", ctypes.c_int),
        ("reserved", ctypes.c_uint * 1),
    ]


# ---- loading ----------------------------------------------------------------------------------


def candidates():
    """The (description, path-or-name) pairs tried, in order (INA_LIBRARY handled apart)."""
    repo = os.path.dirname(os.path.dirname(_HERE))  # <repo>/python/ina -> <repo>
    intree = os.path.join(repo, "build", "lib", "libina.so")
    # $PREFIX/lib/python3/dist-packages/ina -> $PREFIX/lib
    libdir = os.path.dirname(os.path.dirname(os.path.dirname(_HERE)))
    installed = os.path.join(libdir, SONAME)
    return [("in-tree build", intree), ("installed next to the package", installed),
            ("dynamic loader search path", SONAME)]


def find_library():
    """Load libina. @return (ctypes.CDLL, path). Raises OSError with every place tried."""
    env = os.environ.get("INA_LIBRARY")
    if env:
        try:
            return ctypes.CDLL(env), env
        except OSError as e:
            raise OSError("ina: INA_LIBRARY=%s cannot be loaded: %s" % (env, e)) from e
    tried = []
    for what, path in candidates():
        if os.sep in path and not os.path.exists(path):
            tried.append("%s (%s: not found)" % (path, what))
            continue
        try:
            return ctypes.CDLL(path), path
        except OSError as e:
            tried.append("%s (%s: %s)" % (path, what, e))
    raise OSError("ina: cannot find libina; build it (make) or install it, or set INA_LIBRARY "
                  "to the path of libina.so. Tried:\n  " + "\n  ".join(tried))


# (size function of libina, ctypes mirror, C name): the structs the library fills.
MIRRORS = (("ina_config_size", ConfigStruct, "ina_config"),
           ("ina_stats_size", StatsStruct, "ina_stats"),
           ("ina_info_size", InfoStruct, "ina_info"))


def check_abi(handle, where):
    """Refuse a libina whose structs are not the size of the mirrors above: ina_config_init()
    or ina_get_stats() would write past the Python buffer. where: the path it was loaded
    from, for the message. Raises OSError naming the library, its version and the sizes."""
    try:
        fn = handle.ina_version_string
        fn.restype, fn.argtypes = ctypes.c_char_p, []
        have = fn().decode(errors="replace")
    except AttributeError:
        have = "unknown"
    wrong = []
    for name, cls, cname in MIRRORS:
        try:
            fn = getattr(handle, name)
        except AttributeError:
            raise OSError("ina: %s is libina %s, which does not say the sizes of its structs "
                          "(%s() is new in 0.6): this Python package (ina %s) needs libina %d.%d. "
                          "Rebuild it (make) or install the matching libina, or point "
                          "INA_LIBRARY at it" % (where, have, name, VERSION, _MAJOR, _MINOR)) from None
        fn.restype, fn.argtypes = ctypes.c_size_t, []
        theirs, ours = fn(), ctypes.sizeof(cls)
        if theirs != ours:
            wrong.append("%s is %d bytes there, %d here" % (cname, theirs, ours))
    if wrong:
        raise OSError("ina: %s (libina %s) lays out its structs differently from this Python "
                      "package (ina %s): %s. A stale library or a stale package: rebuild "
                      "libina (make) or install the matching one, or point INA_LIBRARY at it"
                      % (where, have, VERSION, "; ".join(wrong)))


def _declare(lib):
    c_int, c_size_t, c_void_p, c_double = ctypes.c_int, ctypes.c_size_t, ctypes.c_void_p, \
        ctypes.c_double
    protos = {
        "ina_version_number": (ctypes.c_uint, []),
        "ina_version_string": (ctypes.c_char_p, []),
        "ina_config_size": (c_size_t, []),
        "ina_stats_size": (c_size_t, []),
        "ina_info_size": (c_size_t, []),
        "ina_strerror": (ctypes.c_char_p, [c_int]),
        "ina_err_name": (ctypes.c_char_p, [c_int]),
        "ina_last_error": (ctypes.c_char_p, [c_void_p]),
        "ina_config_init": (None, [ctypes.POINTER(ConfigStruct)]),
        "ina_config_from_env": (c_int, [ctypes.POINTER(ConfigStruct)]),
        "ina_init": (c_int, [ctypes.POINTER(c_void_p), ctypes.POINTER(ConfigStruct)]),
        "ina_finalize": (c_int, [c_void_p]),
        "ina_allreduce": (c_int, [c_void_p, c_void_p, c_void_p, c_size_t, c_int, c_int]),
        "ina_allreduce_start": (c_int, [c_void_p, c_void_p, c_void_p, c_size_t, c_int, c_int,
                                        ctypes.POINTER(c_void_p)]),
        "ina_allreduce_sparse_start": (c_int, [c_void_p, c_void_p, c_void_p, c_size_t, c_int,
                                               c_int, c_int, ctypes.POINTER(c_void_p)]),
        "ina_test": (c_int, [c_void_p, ctypes.POINTER(c_int)]),
        "ina_wait": (c_int, [c_void_p]),
        "ina_get_stats": (c_int, [c_void_p, ctypes.POINTER(StatsStruct)]),
        "ina_get_info": (c_int, [c_void_p, ctypes.POINTER(InfoStruct)]),
        "ina_float_error_bound": (c_double, [c_int, c_double, c_double]),
        "ina_float_add_error_bound": (c_double, [c_int, c_int, c_double, c_double]),
        "ina_fixed_error_bound": (c_double, [c_int, c_int, c_int, c_double]),
        "ina_auto_lanes": (c_int, [ctypes.POINTER(ConfigStruct), ctypes.POINTER(c_int),
                                   ctypes.POINTER(c_int)]),
    }
    for name, (restype, argtypes) in protos.items():
        fn = getattr(lib, name)
        fn.restype = restype
        fn.argtypes = argtypes
    return lib


_LIB = None
_PATH = None


def lib():
    """The loaded libina (loaded on first use)."""
    global _LIB, _PATH
    if _LIB is None:
        handle, where = find_library()
        check_abi(handle, where)
        _LIB, _PATH = _declare(handle), where
    return _LIB


def path():
    """Where libina was loaded from (loads it if needed)."""
    lib()
    return _PATH

#!/usr/bin/env python3
"""Clean-room peer for PROTOCOL.md §5.9: shared-memory rings between a worker and
ina-switch on the same host.

Written from docs/PROTOCOL.md alone (plus the user docs for starting the tools).
It is a worker that joins over UDP (§4.1, §5.2, §7.1), creates the sealed memfd of §5.9,
attaches it with SHM_ATTACH (§4: name, pid, descriptor), moves its DATA/RESULT through the
rings, follows the sleep/doorbell rule, and leaves (§5.4).  It checks the switch's side of
all of it, plus the hostile cases §5.9 defines: every refusal of the attach checks (each
with its errno), an object of the first version (a POSIX shm object, refused unless
--shm-unsealed), corrupt indices, and, under --shm-unsealed, an object truncated under the
switch (the Faults rule: the job aborted, the switch alive).

Usage: python3 peer_shm.py --bindir DIR [--libdir DIR] [--pythondir DIR] [-v]

Python notes (what the standard library cannot do exactly as the spec says):
- "release"/"acquire" publication of the 8-byte indices: done with one aligned 8-byte
  store/load through memoryview.cast('Q') (CPython copies 8 bytes with one memcpy of a
  constant size, one mov on x86-64).  On x86-64 (TSO) stores are not reordered with
  stores and loads not with loads, and each Python statement is a separate C call, so
  program order is kept: that is enough for release/acquire there.
- "full fence": Python has none.  We call pthread_spin_lock/unlock (libc, via ctypes) on a
  private lock: on x86-64 glibc implements the lock with a LOCK-prefixed instruction,
  which is a full barrier.  (Fallback: threading.Lock, whose uncontended acquire is also a
  locked instruction in glibc.)
- "atomic exchange" on the other side's `sleeping` word: Python cannot do an atomic
  exchange on shared memory.  We read the word and, if set, store 0 (two operations).
  The only race is a store of 0 landing after the switch set the word again for a new
  sleep; a later wake-up of that sleep could then be missed until the next doorbell or
  retransmission.  It is recovered by retransmission and is counted by this script's
  lost-wake-up check if it ever happens.
"""

import argparse
import ctypes
import ctypes.util
import errno
import fcntl
import http.client
import json
import math
import mmap
import os
import random
import select
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time

# ---------------------------------------------------------------- globals / reporting

T0 = time.monotonic()
DEADLINE = T0 + 60.0          # global deadline (BRIEF: never hang)
WAITING_FOR = ["start-up"]
VERBOSE = False
RESULTS = []                   # (ok, text)
PROCS = []                     # daemons / children we started
SHM_PATHS = []                 # POSIX shm objects we created (removed at exit if still there)


def log(*a):
    if VERBOSE:
        print("#", *a, flush=True)


def check(ok, text, detail=""):
    RESULTS.append((bool(ok), text))
    line = ("ok - " if ok else "FAIL - ") + text
    if detail and (not ok or VERBOSE):
        line += "  [" + detail + "]"
    print(line, flush=True)
    return bool(ok)


class Timeout(Exception):
    pass


def time_left():
    return DEADLINE - time.monotonic()


def need_time(what):
    WAITING_FOR[0] = what
    if time.monotonic() > DEADLINE:
        raise Timeout(what)


def kill_all():
    for p in PROCS:
        try:
            if p.poll() is None:
                p.kill()
                p.wait(timeout=3)
        except Exception:
            pass


def on_alarm(signum, frame):
    print("FAIL - global deadline passed while waiting for: %s" % WAITING_FOR[0], flush=True)
    kill_all()
    os._exit(1)


# ---------------------------------------------------------------- constants (PROTOCOL.md)

MAGIC = 0x494E                 # §3
VERSION = 1                    # §3
K_DATA, K_RESULT, K_JOIN, K_JOIN_ACK, K_JOIN_NAK, K_LEAVE, K_ABORT = 1, 2, 16, 17, 18, 19, 20
K_REDIRECT, K_MIGRATE, K_SHM_ATTACH, K_SHM_ACK, K_DOORBELL = 21, 22, 23, 24, 25
K_JOIN_WAIT = 27
RANK_SWITCH = 0xFFFF           # §3
FLAG_ABORT = 0x0001            # §3 flags
FLAG_CAP_BFP = 0x0002
FLAG_CAP_SHM = 0x0008          # §3, §5.9 "Offer"
EXP_ZERO = -32768              # §8.1
EXP_NONFINITE = 32767
INT32, FLOAT32 = 0, 1          # §1 dtype values
SUM = 0                        # §1 reduction values
ERR_NOTSUP = -1007             # §4.3
ERR_ABORTED = -1002
ERR_PROTO = -1008

HDR = struct.Struct(">HBBHHIIIIHhHBB")   # §3: 32-byte header, big-endian
assert HDR.size == 32

# §5.9 object layout, host byte order
SHM_MAGIC = 0x494E415348524E47             # "INASHRNG", written last
SHM_HDR = 448
OFF_UP_HEAD, OFF_UP_TAIL, OFF_UP_SLEEP = 64, 128, 192
OFF_DN_HEAD, OFF_DN_TAIL, OFF_DN_SLEEP = 256, 320, 384
# §5.9 "The object": the size is sealed for good with all three
ALL_SEALS = fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SEAL


def hdr(kind, job=0, rank=0, session=0, token=0, slot=0, seq=0, count=0, exp=0,
        flags=0, op=0, tag=0):
    return HDR.pack(MAGIC, VERSION, kind, job, rank, session, token, slot, seq, count,
                    exp, flags, op, tag)


def parse(d):
    if len(d) < 32:
        return None
    f = HDR.unpack_from(d, 0)
    keys = ("magic", "version", "kind", "job", "rank", "session", "token", "slot", "seq",
            "count", "exp", "flags", "op", "tag")
    h = dict(zip(keys, f))
    if h["magic"] != MAGIC or h["version"] != VERSION:
        return None
    return h


# ---------------------------------------------------------------- tags (§7.2)

M64 = (1 << 64) - 1


def op_seed(n, count, dtype, reduction, s=0):
    x = ((n * 0x9E3779B97F4A7C15) & M64) ^ ((count * 0xC2B2AE3D27D4EB4F) & M64) \
        ^ dtype ^ (reduction << 8) ^ (s << 16)
    x &= M64
    x ^= x >> 31
    x = (x * 0xBF58476D1CE4E5B9) & M64
    x ^= x >> 29
    return x


def packet_tag(seed, p):
    y = ((seed + p) * 0xD6E8FEB86659FD93) & M64
    return ((y ^ (y >> 32)) >> 24) & 0xFF


# ---------------------------------------------------------------- float32 helpers (§8.1)

F32 = struct.Struct("<f")


def f32(x):
    return F32.unpack(F32.pack(x))[0]


def block_exp(vals):
    m = 0.0
    for v in vals:
        if math.isnan(v) or math.isinf(v):
            return EXP_NONFINITE
        m = max(m, abs(v))
    if m == 0.0:
        return EXP_ZERO
    return math.frexp(m)[1]            # 2^(e-1) <= m < 2^e


def ceil_log2(n):
    return 0 if n <= 1 else (n - 1).bit_length()


def encode_block(vals, E, N):
    if E == EXP_ZERO:
        return [0] * len(vals)
    if E == EXP_NONFINITE:
        out = []
        for v in vals:
            if math.isnan(v):
                out.append(1 << 18)
            elif v == math.inf:
                out.append(1)
            elif v == -math.inf:
                out.append(1 << 9)
            else:
                out.append(0)
        return out
    L = ceil_log2(N)
    s = 31 - L - E
    Q = (1 << (31 - L)) - 1
    out = []
    for v in vals:
        q = round(math.ldexp(v, s))     # exact product in double; round() is half-even
        out.append(max(-Q, min(Q, q)))
    return out


def decode_block(sums, E, N):
    if E == EXP_ZERO:
        return [0.0] * len(sums)
    if E == EXP_NONFINITE:
        out = []
        for s in sums:
            P, M, Qn = s & 0x1FF, (s >> 9) & 0x1FF, (s >> 18) & 0x1FF
            if Qn > 0 or (P > 0 and M > 0):
                out.append(math.nan)
            elif P > 0:
                out.append(math.inf)
            elif M > 0:
                out.append(-math.inf)
            else:
                out.append(math.nan)
        return out
    L = ceil_log2(N)
    return [f32(math.ldexp(float(s), E + L - 31)) for s in sums]


def to_i32(v):
    v &= 0xFFFFFFFF
    return v - (1 << 32) if v & 0x80000000 else v


# ---------------------------------------------------------------- fence

class _Fence:
    def __init__(self):
        self.kind = "threading.Lock"
        self.lock = threading.Lock()
        try:
            libc = ctypes.CDLL(ctypes.util.find_library("c") or None)
            self.spin = ctypes.c_int(0)
            if libc.pthread_spin_init(ctypes.byref(self.spin), 0) == 0:
                self._l, self._u = libc.pthread_spin_lock, libc.pthread_spin_unlock
                self.ref = ctypes.byref(self.spin)
                self.kind = "pthread_spin_lock"
        except Exception:
            pass

    def __call__(self):
        if self.kind == "pthread_spin_lock":
            self._l(self.ref)
            self._u(self.ref)
        else:
            with self.lock:
                pass


fence = _Fence()


# ---------------------------------------------------------------- the shm object (§5.9)

class _Mapped:
    """What both kinds of object share: the mapping and index access."""

    def _map(self, fd, nslots, slot_size, magic, version, hdr_nslots, hdr_slot_size):
        self.mm = mmap.mmap(fd, self.size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        self.mv = memoryview(self.mm)
        self.u64 = self.mv[0:SHM_HDR].cast("Q")
        self.u32 = self.mv[0:SHM_HDR].cast("I")
        struct.pack_into("=III", self.mm, 8, version,
                         nslots if hdr_nslots is None else hdr_nslots,
                         slot_size if hdr_slot_size is None else hdr_slot_size)
        fence()
        self.u64[0] = magic                   # magic written last
        self.up_base = SHM_HDR
        self.dn_base = SHM_HDR + nslots * slot_size

    # index access: one aligned 8-byte load/store each
    def get64(self, off):
        return self.u64[off // 8]

    def set64(self, off, v):
        self.u64[off // 8] = v & M64

    def get32(self, off):
        return self.u32[off // 4]

    def set32(self, off, v):
        self.u32[off // 4] = v

    def close_fd(self):
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None

    def close(self):
        """Unmap (touches nothing: safe on a truncated object) and close the descriptor."""
        self.close_fd()
        if self.mm is None:
            return
        self.u64.release()
        self.u32.release()
        self.mv.release()
        self.mm.close()
        self.mm = None


class ShmObject(_Mapped):
    """The worker's object (§5.9): a memfd named ina.<uid>.<16 hex>, sized with fallocate,
    header written, then sealed F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL.  The hostile
    cases pass other seals (seals=None: a memfd made without MFD_ALLOW_SEALING)."""

    legacy = False

    def __init__(self, nslots, slot_size, name=None, seals=ALL_SEALS, owner=None, magic=SHM_MAGIC,
                 version=1, size_delta=0, hdr_nslots=None, hdr_slot_size=None):
        self.nslots, self.slot_size = nslots, slot_size
        self.name = name or "ina.%d.%016x" % (os.getuid(), random.getrandbits(64))
        self.size = SHM_HDR + 2 * nslots * slot_size + size_delta
        flags = os.MFD_CLOEXEC | (os.MFD_ALLOW_SEALING if seals is not None else 0)
        self.fd = os.memfd_create(self.name, flags)
        self.fdnum = self.fd                   # what SHM_ATTACH names, even once closed
        os.posix_fallocate(self.fd, 0, self.size)   # zero-filled: indices 0, sleeping 0
        if owner is not None:
            os.fchown(self.fd, owner, owner)
        self._map(self.fd, nslots, slot_size, magic, version, hdr_nslots, hdr_slot_size)
        if seals:
            fcntl.fcntl(self.fd, fcntl.F_ADD_SEALS, seals)

    def seals(self):
        return fcntl.fcntl(self.fd, fcntl.F_GET_SEALS)


class PosixShmObject(_Mapped):
    """An object of §5.9's first version: POSIX shm in /dev/shm, /ina.<uid>.<16 hex>, mode
    0600, sized with ftruncate (which its owner can change at any time).  The descriptor is
    kept, to truncate it under the switch."""

    legacy = True

    def __init__(self, nslots, slot_size):
        self.nslots, self.slot_size = nslots, slot_size
        self.name = "/ina.%d.%016x" % (os.getuid(), random.getrandbits(64))
        self.path = "/dev/shm/" + self.name.lstrip("/")
        self.size = SHM_HDR + 2 * nslots * slot_size
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        SHM_PATHS.append(self.path)
        os.fchmod(self.fd, 0o600)              # umask-proof
        os.ftruncate(self.fd, self.size)
        self._map(self.fd, nslots, slot_size, SHM_MAGIC, 1, None, None)

    def unlink(self):
        try:
            os.unlink(self.path)
            return 0
        except OSError as e:
            return e.errno


# ---------------------------------------------------------------- ops and ranks (§7)

class Op:
    def __init__(self, n, dtype, values, k, W, N, bfp_cap):
        self.n, self.dtype, self.values = n, dtype, values
        self.count = len(values)
        self.nblocks = (self.count + k - 1) // k
        self.k, self.W, self.N = k, W, N
        if dtype == INT32:
            self.lag, self.wire = 0, 0
        elif bfp_cap and self.nblocks <= W:       # §8.7 "Who": op 3, one round
            self.lag, self.wire = 0, 3
        else:                                     # §7.2: two rounds, wire op 0
            self.lag, self.wire = min(W, self.nblocks), 0
        self.npackets = self.nblocks + self.lag
        self.seed = op_seed(n, self.count, dtype, SUM)
        self.E = {}                               # block -> agreed exponent
        self.out = [None] * self.count
        self.accepted = 0
        self.result_exp = {}                      # block -> exp of its data RESULT

    def block(self, b):
        return self.values[b * self.k:min(self.count, (b + 1) * self.k)]

    def blen(self, b):
        return min(self.k, self.count - b * self.k)

    @property
    def done(self):
        return self.accepted == self.npackets


class Rank:
    def __init__(self, port, name, rank, world, k, W, label=None):
        self.port, self.name, self.rank, self.world = port, name, rank, world
        self.k_prop, self.W_prop = k, W
        self.label = label or "%s/r%d" % (name, rank)
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.connect(("127.0.0.1", port))
        self.sock.setblocking(False)
        self.nonce = random.getrandbits(64) | 1
        self.joined = False
        self.job = self.session = self.token = 0
        self.flags = 0
        self.shm = None
        self.ring_up = False        # send DATA through the up ring
        self.ops = []
        self.cur = 0                # index into ops of the op being sent
        self.p_next = 0
        self.g = 0
        self.nextn = 1
        self.inflight = {}
        self.rounds = None
        self.failed = None
        self.aborts = []
        self.other = []             # control datagrams received (kind, hdr, body)
        self.st = dict(ring_tx=0, ring_full=0, ring_rx=0, udp_tx=0, udp_rx_results=0,
                       doorbell_tx=0, doorbell_rx=0, doorbell_rx_bad=0, retx=0,
                       stale=0, woken_word_set=0, lost_wakeups=0, sleeps=0,
                       sleep_skipped=0, corrupt=0)

    # ---- UDP
    def send(self, d):
        try:
            self.sock.send(d)
        except OSError:
            pass

    def recv_all(self):
        out = []
        while True:
            try:
                d = self.sock.recv(70000)
            except (BlockingIOError, InterruptedError):
                break
            except ConnectionRefusedError:
                continue
            out.append(d)
        return out

    # ---- JOIN (§4.1, §7.1)
    def join_datagram(self, remaining_ms):
        body = struct.pack(">QHHIIIHBBHH32s", self.nonce, self.world, self.k_prop,
                           self.W_prop, 100, 0, 0, 0, 1, 0, 0,
                           self.name.encode().ljust(32, b"\0"))
        assert len(body) == 64
        return hdr(K_JOIN, rank=self.rank, seq=max(1, remaining_ms)) + body

    def on_join_reply(self, d):
        h = parse(d)
        if h is None:
            return
        if h["kind"] == K_JOIN_ACK and len(d) >= 96:
            (nonce, world, elems, window, swv, mg, mp, lane, nl, fb, wt,
             nm) = struct.unpack_from(">QHHIIIHBBHH32s", d, 32)
            if nonce != self.nonce:
                return
            self.job, self.session, self.token = h["job"], h["session"], h["token"]
            self.flags = h["flags"]
            self.k, self.W, self.N = elems, window, world
            self.rounds = [0] * self.W
            self.joined = True
        elif h["kind"] == K_JOIN_NAK and len(d) >= 48:
            nonce, reason = struct.unpack_from(">Qi", d, 32)
            if nonce == self.nonce:
                self.failed = "JOIN_NAK %d" % reason

    # ---- attach (§5.9)
    def attach(self, obj, wait=2.0, token=None, name=None, pid=None, fd=None, short=None):
        """Send SHM_ATTACH every 100 ms for up to `wait` s; return the SHM_ACK reason or None.
        A memfd's body has 88 bytes (name, then this process's id and the descriptor); a
        first-version object's 80 (short=True: 80 bytes whatever the object).  name, pid,
        fd: what the body says instead of the truth (hostile cases)."""
        nonce = random.getrandbits(64) | 1
        body = struct.pack(">QII64s", nonce, obj.nslots, obj.slot_size,
                           (obj.name if name is None else name).encode().ljust(64, b"\0"))
        if not (obj.legacy if short is None else short):
            body += struct.pack(">II", os.getpid() if pid is None else pid,
                                obj.fdnum if fd is None else fd)
        d = hdr(K_SHM_ATTACH, job=self.job, rank=self.rank, session=self.session,
                token=self.token if token is None else token) + body
        t_end = time.monotonic() + wait
        nxt = 0.0
        while time.monotonic() < t_end:
            need_time("SHM_ACK for %s" % obj.name)
            now = time.monotonic()
            if now >= nxt:
                self.send(d)
                nxt = now + 0.1
            r, _, _ = select.select([self.sock], [], [], max(0.0, min(nxt, t_end) - now))
            for x in self.recv_all():
                h = parse(x)
                if h and h["kind"] == K_SHM_ACK and len(x) >= 48:
                    n2, reason = struct.unpack_from(">Qi", x, 32)
                    if n2 == nonce and h["session"] == self.session and h["token"] == self.token:
                        return reason
                elif h:
                    self.other.append((h["kind"], h, x[32:]))
        return None

    # ---- rings
    def up_push(self, d):
        """Producer on the up ring (§5.9 Rings, Sleep and wake)."""
        o = self.shm
        tail = self.up_tail
        head = o.get64(OFF_UP_HEAD)                   # the switch's index
        if tail - head >= o.nslots:
            self.st["ring_full"] += 1                 # full: lost, as a full socket buffer
            return
        off = o.up_base + (tail % o.nslots) * o.slot_size
        struct.pack_into("=I", o.mm, off, len(d))
        o.mm[off + 4:off + 4 + len(d)] = d
        self.up_tail = tail + 1
        o.set64(OFF_UP_TAIL, self.up_tail)            # publish (release: x86 TSO)
        self.st["ring_tx"] += 1
        self.ring_doorbell()

    def ring_doorbell(self):
        o = self.shm
        fence()                                       # full fence, then read sleeping
        if o.get32(OFF_UP_SLEEP):
            o.set32(OFF_UP_SLEEP, 0)                  # (not atomic: see module doc)
            self.send(hdr(K_DOORBELL, job=self.job, rank=self.rank, session=self.session,
                          token=self.token))
            self.st["doorbell_tx"] += 1

    def dn_pending(self):
        o = self.shm
        return o.get64(OFF_DN_TAIL) != self.dn_head

    def dn_drain(self):
        """Consumer on the down ring: copy out, then publish head + 1."""
        o = self.shm
        out = []
        while True:
            tail = o.get64(OFF_DN_TAIL)                # acquire (x86: loads in order)
            if tail == self.dn_head:
                break
            if tail < self.dn_head or tail - self.dn_head > o.nslots:
                self.st["corrupt"] += 1                # §5.9: corrupt ring -> PROTO
                self.failed = "down ring corrupt (head %d tail %d)" % (self.dn_head, tail)
                break
            off = o.dn_base + (self.dn_head % o.nslots) * o.slot_size
            ln = struct.unpack_from("=I", o.mm, off)[0]
            d = bytes(o.mm[off + 4:off + 4 + ln]) if ln <= o.slot_size - 4 else b""
            self.dn_head += 1
            o.set64(OFF_DN_HEAD, self.dn_head)
            out.append(d)
            self.st["ring_rx"] += 1
        return out

    def use_shm(self, obj):
        self.shm = obj
        self.up_tail = 0
        self.dn_head = 0

    # ---- stream (§7.2, §7.3)
    def add_op(self, dtype, values):
        op = Op(self.nextn, dtype, values, self.k, self.W, self.N,
                bool(self.flags & FLAG_CAP_BFP))
        self.nextn += 1
        self.ops.append(op)
        return op

    def xmit(self, d):
        if self.ring_up and self.shm is not None:
            self.up_push(d)
        else:
            self.send(d)
            self.st["udp_tx"] += 1

    def pump(self, now):
        # send in stream order while the conditions of §7.3 hold
        while self.failed is None and self.cur < len(self.ops):
            op = self.ops[self.cur]
            if self.p_next >= op.npackets:
                self.cur += 1
                self.p_next = 0
                continue
            p = self.p_next
            g = self.g
            slot = g % self.W
            if slot in self.inflight:
                break                                   # condition 1
            if op.dtype != INT32 and op.wire == 0 and p >= op.lag:
                if (p - op.lag) not in op.E:
                    break                               # condition 2
            seq = self.rounds[slot] & 0xFFFFFFFF
            self.rounds[slot] += 1
            b = p - op.lag
            count = op.blen(b) if p >= op.lag else 0
            if op.dtype == INT32:
                payload = op.block(b)
                exp = 0
            elif op.wire == 3:
                e = block_exp(op.block(p))
                payload = encode_block(op.block(p), e, self.N)
                exp = e
            else:
                payload = encode_block(op.block(b), op.E[b], self.N) if p >= op.lag else []
                exp = block_exp(op.block(p)) if p < op.nblocks else EXP_ZERO
            tag = packet_tag(op.seed, p)
            d = hdr(K_DATA, job=self.job, rank=self.rank, session=self.session,
                    token=self.token, slot=slot | ((seq & 1) << 31), seq=seq, count=count,
                    exp=exp, op=op.wire, tag=tag) + struct.pack(">%di" % count, *payload)
            self.inflight[slot] = dict(g=g, seq=seq, op=op, p=p, d=d, count=count, tag=tag,
                                       rto=0.1, due=now + 0.1)
            self.xmit(d)
            self.g += 1
            self.p_next += 1
        # retransmission timers (§7.6: only the identical datagram is normative)
        for slot, f in self.inflight.items():
            if now >= f["due"]:
                self.xmit(f["d"])
                self.st["retx"] += 1
                f["rto"] = min(2 * f["rto"], 1.0)
                f["due"] = now + f["rto"]

    def next_due(self):
        return min((f["due"] for f in self.inflight.values()), default=None)

    def handle(self, d, via):
        h = parse(d)
        if h is None:
            self.st["stale"] += 1
            return
        k = h["kind"]
        if k == K_ABORT:
            if h["session"] == self.session and h["token"] == self.token:
                reason = struct.unpack_from(">i", d, 40)[0] if len(d) >= 48 else ERR_ABORTED
                self.aborts.append(reason)
                self.failed = "ABORT %d" % reason
            return
        if k == K_DOORBELL:
            ok = (h["job"] == self.job and h["session"] == self.session
                  and h["token"] == self.token and len(d) >= 32)
            self.st["doorbell_rx" if ok else "doorbell_rx_bad"] += 1
            return
        if k != K_RESULT:
            self.other.append((k, h, d[32:]))
            return
        if (h["job"] != self.job or h["session"] != self.session or h["token"] != self.token):
            self.st["stale"] += 1
            return
        idx, sbit = h["slot"] & 0x7FFFFFFF, h["slot"] >> 31
        if idx >= self.W or sbit != (h["seq"] & 1) or len(d) != 32 + 4 * h["count"]:
            self.st["stale"] += 1
            return
        f = self.inflight.get(idx)
        if f is None or f["seq"] != h["seq"]:
            self.st["stale"] += 1
            return
        op = f["op"]
        if h["tag"] != f["tag"] or h["op"] != op.wire:
            self.st["stale"] += 1
            return
        if h["count"] != f["count"]:
            self.failed = "RESULT count mismatch"
            return
        if via == "udp":
            self.st["udp_rx_results"] += 1
        p = f["p"]
        vals = list(struct.unpack_from(">%di" % h["count"], d, 32))
        if op.dtype == INT32:
            b = p
            op.out[b * op.k:b * op.k + len(vals)] = vals
        elif op.wire == 3:
            b = p
            op.out[b * op.k:b * op.k + len(vals)] = decode_block(vals, h["exp"], self.N)
            op.result_exp[b] = h["exp"]
        else:
            if p < op.nblocks:
                op.E[p] = h["exp"]
            if p >= op.lag:
                b = p - op.lag
                op.out[b * op.k:b * op.k + len(vals)] = decode_block(vals, op.E[b], self.N)
                op.result_exp[b] = op.E[b]
        op.accepted += 1
        del self.inflight[idx]

    def leave(self, abort=False):
        d = hdr(K_LEAVE, job=self.job, rank=self.rank, session=self.session,
                token=self.token, flags=FLAG_ABORT if abort else 0)
        self.send(d)
        self.send(d)


def join_all(ranks, timeout=5.0):
    t_start = time.monotonic()
    t_end = t_start + timeout
    nxt = {id(r): 0.0 for r in ranks}
    backoff = {id(r): 0.1 for r in ranks}
    while True:
        need_time("JOIN_ACK for %s" % ",".join(r.label for r in ranks if not r.joined))
        if all(r.joined or r.failed for r in ranks):
            return all(r.joined for r in ranks)
        now = time.monotonic()
        if now > t_end:
            return False
        for r in ranks:
            if not r.joined and now >= nxt[id(r)]:
                r.send(r.join_datagram(int((t_end - now) * 1000)))
                nxt[id(r)] = now + backoff[id(r)]
                backoff[id(r)] = min(1.0, backoff[id(r)] * 2)
        wait = max(0.0, min(nxt[id(r)] for r in ranks if not r.joined) - now) \
            if any(not r.joined for r in ranks) else 0
        select.select([r.sock for r in ranks], [], [], min(wait, 0.1))
        for r in ranks:
            for d in r.recv_all():
                if not r.joined:
                    r.on_join_reply(d)


def progress(ranks, until, timeout=8.0, sleep_rule=True):
    """Drive ranks until until() is true.  Ring ranks follow §5.9's sleep rule before
    every blocking wait; a wait that ends by timeout with ring data present would be a
    lost wake-up."""
    t_end = time.monotonic() + timeout
    while True:
        need_time("results of %s" % ",".join(r.label for r in ranks))
        now = time.monotonic()
        for r in ranks:
            # §5.9 order: read the socket, drain the down ring first, then act on both
            udp = r.recv_all()
            if r.shm is not None:
                for d in r.dn_drain():
                    r.handle(d, "ring")
            for d in udp:
                r.handle(d, "udp")
        for r in ranks:
            r.pump(now)
        if until() or any(r.failed for r in ranks):
            return until()
        if now > t_end:
            return False
        dues = [x for x in (r.next_due() for r in ranks) if x is not None]
        wait = max(0.0, min(dues) - now) if dues else 0.05
        wait = min(wait, 0.5, max(0.0, t_end - now))
        armed = []
        if sleep_rule:
            for r in ranks:
                if r.shm is not None:
                    r.shm.set32(OFF_DN_SLEEP, 1)       # set sleeping
                    fence()                           # full fence
                    if r.dn_pending():                # look again
                        r.shm.set32(OFF_DN_SLEEP, 0)
                        r.st["sleep_skipped"] += 1
                        wait = 0.0
                    else:
                        armed.append(r)
        else:
            wait = min(wait, 0.001)                   # polling
        rd, _, _ = select.select([r.sock for r in ranks], [], [], wait)
        for r in armed:
            r.st["sleeps"] += 1
            if not rd and wait > 0.02 and r.dn_pending():
                r.st["lost_wakeups"] += 1             # slept through ring data
            if r.shm.get32(OFF_DN_SLEEP):
                r.st["woken_word_set"] += 1
                r.shm.set32(OFF_DN_SLEEP, 0)


# ---------------------------------------------------------------- data

def int_data(rank, count, salt=0):
    return [to_i32((i * 2654435761 + rank * 97 + 13 + salt * 1000003)) for i in range(count)]


def flt_data(rank, count, salt=0):
    # exact in double and float32 (small integers times powers of two)
    return [float(((i * 37 + rank * 11 + salt) % 2001) - 1000) * 2.0 ** (-(i % 7) - 3 * ((i // 64) % 4))
            for i in range(count)]


def exact_int(ranks_vals):
    return [to_i32(sum(v)) for v in zip(*ranks_vals)]


def float_check(results, ranks_vals, k, N):
    """§8.1 bound per element; returns (ok, worst ratio)."""
    L = ceil_log2(N)
    worst = 0.0
    for b in range(0, len(results), k):
        amax = max(abs(v) for rv in ranks_vals for v in rv[b:b + k])
        E = math.frexp(amax)[1] if amax else None
        for i in range(b, min(len(results), b + k)):
            exact = math.fsum(rv[i] for rv in ranks_vals)
            bound = (N * 2.0 ** (E + L - 31) if E is not None else 0.0) \
                + 2.0 ** -24 * abs(exact) + 2.0 ** -149
            err = abs(results[i] - exact)
            if err > bound:
                return False, err / bound
            worst = max(worst, err / bound)
    return True, worst


# ---------------------------------------------------------------- daemons

class Switch:
    def __init__(self, bindir, tmp, extra=(), tag="sw"):
        self.pf = os.path.join(tmp, tag + ".port")
        self.mf = os.path.join(tmp, tag + ".mport")
        self.logf = os.path.join(tmp, tag + ".log")
        args = [os.path.join(bindir, "ina-switch"), "--listen", "127.0.0.1:0",
                "--port-file", self.pf, "--metrics", "127.0.0.1:0",
                "--metrics-port-file", self.mf, "--threads", "1", "--log-level", "debug",
                "--drain-timeout", "0"] + list(extra)
        self.log = open(self.logf, "w")
        self.p = subprocess.Popen(args, stdout=self.log, stderr=self.log)
        PROCS.append(self.p)
        t_end = time.monotonic() + 5
        while True:
            need_time("ina-switch port files")
            try:
                self.port = int(open(self.pf).read().strip())
                self.mport = int(open(self.mf).read().strip())
                break
            except (OSError, ValueError):
                if time.monotonic() > t_end or self.p.poll() is not None:
                    raise RuntimeError("ina-switch did not start")
                time.sleep(0.02)

    def counters(self):
        c = http.client.HTTPConnection("127.0.0.1", self.mport, timeout=2)
        try:
            c.request("GET", "/counters")
            j = json.loads(c.getresponse().read())
        finally:
            c.close()
        out = dict(j["counters"])
        drops = out.pop("drops", {})
        for kk, v in drops.items():
            out["drop_" + kk] = v
        out["jobs"] = j.get("jobs")
        return out

    def fresh(self):
        """A snapshot taken after everything before this call (the view lags 100 ms)."""
        time.sleep(0.15)
        return self.counters()

    def wait_counters(self, pred, timeout=1.5):
        """The view is a snapshot every 100 ms: poll until pred holds."""
        t_end = time.monotonic() + timeout
        c = self.counters()
        while not pred(c) and time.monotonic() < t_end:
            need_time("switch counters")
            time.sleep(0.05)
            c = self.counters()
        return c

    def maps_has(self, name):
        try:
            return name.lstrip("/") in open("/proc/%d/maps" % self.p.pid).read()
        except OSError:
            return None

    def stop(self):
        if self.p.poll() is None:
            self.p.send_signal(signal.SIGINT)
            try:
                self.p.wait(timeout=3)
            except subprocess.TimeoutExpired:
                self.p.kill()
        self.log.close()

    def logtext(self):
        try:
            return open(self.logf).read()
        except OSError:
            return ""


def delta(a, b, key):
    return b.get(key, 0) - a.get(key, 0)


LIBINA_CHILD = r"""
import sys, os, json
import numpy as np
import ina
port, job, k, W, out = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
ci, cf, cs = int(sys.argv[6]), int(sys.argv[7]), int(sys.argv[8])
r = 1
i = np.arange(ci, dtype=np.int64)
xi = (((i * 2654435761 + r * 97 + 13) % 2**32 + 2**31) % 2**32 - 2**31).astype(np.int32)
def fl(c, salt):
    i = np.arange(c, dtype=np.int64)
    v = (((i * 37 + r * 11 + salt) % 2001) - 1000).astype(np.float64)
    return (v * np.ldexp(1.0, -(i % 7) - 3 * ((i // 64) % 4))).astype(np.float32)
xf = fl(cf, 0)
xs = fl(cs, 5)
with ina.Context(switch="127.0.0.1:" + port, rank=r, world_size=2, job=job,
                 elems_per_packet=k, window=W, lanes=1, timeout_ms=10000,
                 join_timeout_ms=10000) as ctx:
    ina.allreduce(xi, ctx=ctx)
    ina.allreduce(xf, ctx=ctx)
    ina.allreduce(xs, ctx=ctx)
    info = ctx.info()
    st = ctx.stats()
with open(out, "wb") as f:
    f.write(xi.astype('<i4').tobytes()); f.write(xf.astype('<f4').tobytes())
    f.write(xs.astype('<f4').tobytes())
with open(out + ".json", "w") as f:
    json.dump({"shm": info.get("shm"), "info": {a: str(b) for a, b in info.items()},
               "stats": {a: str(b) for a, b in st.items()}}, f)
"""


# ---------------------------------------------------------------- the checks

def ring_job(sw, name, k=64, W=8, nslots=8, slot_size=None, ring_ranks=(0,)):
    ranks = [Rank(sw.port, name, r, 2, k, W) for r in range(2)]
    if not join_all(ranks):
        raise RuntimeError("job %s did not start: %s" % (name, [r.failed for r in ranks]))
    objs = {}
    for r in ranks:
        if r.rank in ring_ranks:
            ss = slot_size or ((4 + 32 + 4 * r.k + 63) // 64) * 64
            o = ShmObject(nslots, ss)
            reason = r.attach(o)
            o.close_fd()                       # answered: the switch has its own mapping
            if reason != 0:
                raise RuntimeError("attach of %s refused: %r" % (name, reason))
            r.use_shm(o)
            r.ring_up = True
            objs[r.rank] = o
    return ranks, objs


def wait_aborts(ranks, timeout, what):
    """Take the ranks' UDP datagrams until every one has an ABORT, or timeout s."""
    t_end = time.monotonic() + timeout
    while time.monotonic() < t_end and not all(r.aborts for r in ranks):
        need_time(what)
        select.select([r.sock for r in ranks], [], [], 0.05)
        for r in ranks:
            for d in r.recv_all():
                r.handle(d, "udp")


def run_ops(ranks, specs, timeout=8.0):
    """specs: list of (dtype, [values per rank]); returns list of (ops per rank)."""
    allops = []
    for dtype, vals in specs:
        allops.append([r.add_op(dtype, vals[r.rank]) for r in ranks])
    ok = progress(ranks, lambda: all(o.done for ops in allops for o in ops), timeout)
    return ok, allops


def test_tags():
    s = op_seed(1, 6, FLOAT32, SUM)
    t = [packet_tag(s, p) for p in range(4)]
    check(t == [0xCB, 0x49, 0x68, 0x28], "§7.2 tag function reproduces §11's tags 0xCB 0x49 0x68 0x28",
          str([hex(x) for x in t]))
    a = packet_tag(op_seed(1, 4, INT32, SUM), 0)
    b = packet_tag(op_seed(1, 8, INT32, SUM), 0)
    check((a, b) == (0xA8, 0x5E), "§7.4 example tags 0xA8 / 0x5E", "%#x %#x" % (a, b))


def test_main_job(sw, args):
    """Attach, UDP-first rule, INT32 with wrap-around, FLOAT32, counters, doorbells, LEAVE."""
    c0 = sw.counters()
    k, W, nslots = 64, 8, 8
    ranks = [Rank(sw.port, "shm-main", r, 2, k, W) for r in range(2)]
    check(join_all(ranks), "job shm-main: both clean-room ranks joined (JOIN_ACK)")
    r0, r1 = ranks
    check(r0.flags & FLAG_CAP_SHM, "JOIN_ACK carries INA_FLAG_CAP_SHM (flag bit 3)",
          "flags=%#x" % r0.flags)
    check((r0.k, r0.W) == (k, W), "granted k=%d W=%d as proposed" % (k, W), "%d %d" % (r0.k, r0.W))

    slot_size = ((4 + 32 + 4 * k + 63) // 64) * 64      # ≥ 4 + 32 + 4k, multiple of 64
    obj = ShmObject(nslots, slot_size)
    st = os.fstat(obj.fd)
    check(st.st_size == SHM_HDR + 2 * nslots * slot_size and obj.seals() & ALL_SEALS == ALL_SEALS,
          "object %s: a memfd of size 448 + 2*nslots*slot_size = %d, sealed SHRINK|GROW|SEAL"
          % (obj.name, st.st_size))
    try:
        os.ftruncate(obj.fd, 0)
        e = 0
    except OSError as x:
        e = x.errno
    check(e == errno.EPERM, "the sealed object cannot be shrunk, not even by its creator (EPERM)",
          "errno=%r" % e)
    reason = r0.attach(obj)
    check(reason == 0, "SHM_ATTACH (88 bytes: name, pid, fd) answered SHM_ACK reason 0 (attached)",
          "reason=%r" % reason)
    obj.close_fd()                                      # §5.9: closed once answered
    check(sw.maps_has(obj.name) is True, "the switch process maps the memfd")
    c1 = sw.wait_counters(lambda c: delta(c0, c, "shm_attached") >= 1)
    check(delta(c0, c1, "shm_attached") == 1, "counter shm_attached +1",
          "delta=%d" % delta(c0, c1, "shm_attached"))
    reason2 = r0.attach(obj)
    check(reason2 == 0, "a repeated SHM_ATTACH gets reason 0 again (its descriptor closed by now: "
          "not looked at)", "reason=%r" % reason2)
    r0.use_shm(obj)

    # §5.9 "When the switch uses the down ring": before the up ring has delivered a datagram
    # the rank's RESULTs come by UDP.  Rank 0 is attached but sends this op by UDP.
    r0.ring_up = False
    vals = [int_data(r, 3 * k + 5, 1) for r in range(2)]
    ok, ops = run_ops(ranks, [(INT32, vals)])
    check(ok and ops[0][0].out == exact_int(vals) and ops[0][1].out == exact_int(vals),
          "INT32 SUM before any up-ring datagram: exact on both ranks")
    check(obj.get64(OFF_DN_TAIL) == 0 and r0.st["udp_rx_results"] == 4 and r0.st["ring_rx"] == 0,
          "until the up ring delivered a datagram, the switch sent rank 0's RESULTs by UDP "
          "(down ring tail 0)", "dn_tail=%d udp=%d" % (obj.get64(OFF_DN_TAIL), r0.st["udp_rx_results"]))

    # INT32 SUM through the rings, many times the ring's size (wrap-around).
    c2 = sw.wait_counters(lambda c: True)
    r0.ring_up = True
    st0 = dict(r0.st)
    n_big = 50 * k + 17                                 # 51 packets through an 8-slot ring
    specs = [(INT32, [int_data(r, n_big, 2) for r in range(2)]),
             (INT32, [int_data(r, 7, 3) for r in range(2)]),
             (INT32, [[2**31 - 1, -2**31, 5] * 300, [1, -1, -7] * 300])]   # wraps mod 2^32
    ok, ops = run_ops(ranks, specs)
    good = ok and all(o.out == exact_int(sp[1]) for sp, pair in zip(specs, ops) for o in pair)
    npk = sum(o.npackets for o in (x[0] for x in ops))
    check(good, "INT32 SUM through the rings, %d packets over an %d-slot ring (wrap-around): "
          "exact on both ranks (incl. mod 2^32 wrap)" % (npk, nslots),
          "ok=%s failed=%s" % (ok, r0.failed))
    up_tail = obj.get64(OFF_UP_TAIL)
    up_head = obj.get64(OFF_UP_HEAD)
    dn_tail = obj.get64(OFF_DN_TAIL)
    check(up_tail == r0.up_tail and up_head == up_tail and up_tail > 3 * nslots,
          "up ring: switch's head caught up with the worker's tail, indices ran past nslots "
          "(free-running)", "head=%d tail=%d" % (up_head, up_tail))
    check(dn_tail == r0.dn_head and obj.get64(OFF_DN_HEAD) == dn_tail and dn_tail >= npk,
          "down ring: the RESULTs came through it (tail=%d ≥ %d packets)" % (dn_tail, npk),
          "dn_tail=%d dn_head=%d" % (dn_tail, r0.dn_head))
    check(r0.st["udp_rx_results"] == st0["udp_rx_results"],
          "after the up ring delivered, no RESULT for rank 0 came by UDP")
    tx = r0.st["ring_tx"] - st0["ring_tx"]
    rx = r0.st["ring_rx"] - st0["ring_rx"]
    c3 = sw.wait_counters(lambda c: delta(c2, c, "shm_rx_packets") >= tx
                          and delta(c2, c, "shm_tx_packets") >= rx)
    check(delta(c2, c3, "shm_rx_packets") == tx and delta(c2, c3, "rx_packets") >= tx,
          "counter shm_rx_packets moved by the %d datagrams put on the up ring (and rx_packets "
          "includes them)" % tx, "shm_rx=%d rx=%d" % (delta(c2, c3, "shm_rx_packets"),
                                                        delta(c2, c3, "rx_packets")))
    udp_res = npk                                      # rank 1's results went by UDP
    check(delta(c2, c3, "shm_tx_packets") == rx and delta(c2, c3, "tx_packets") >= udp_res,
          "counter shm_tx_packets moved by the %d RESULTs read from the down ring" % rx,
          "shm_tx=%d tx=%d" % (delta(c2, c3, "shm_tx_packets"), delta(c2, c3, "tx_packets")))
    check(r0.st["lost_wakeups"] == 0 and r0.st["corrupt"] == 0,
          "sleep rule held during the run: no wait ended by timeout with ring data pending",
          str(r0.st))

    # FLOAT32 through the rings: two rounds (blocks > W, wire op 0) and, if offered, op 3.
    fspecs = [(FLOAT32, [flt_data(r, 20 * k + 9) for r in range(2)])]
    small = r0.flags & FLAG_CAP_BFP
    if small:
        fspecs.append((FLOAT32, [flt_data(r, 5 * k, 3) for r in range(2)]))
    ok, ops = run_ops(ranks, fspecs)
    for sp, pair in zip(fspecs, ops):
        o0, o1 = pair
        same = [F32.pack(x) for x in o0.out] == [F32.pack(x) for x in o1.out]
        bok, worst = float_check(o0.out, sp[1], k, 2) if ok else (False, 0)
        check(ok and same and bok,
              "FLOAT32 SUM through the rings (%d elems, wire op %d, lag %d): both ranks equal, "
              "within §8.1's bound" % (o0.count, o0.wire, o0.lag),
              "ok=%s same=%s worst err/bound=%.3g" % (ok, same, worst))

    # ---- doorbell, switch -> worker (§5.9 Sleep and wake)
    c4 = sw.wait_counters(lambda c: True)
    vals = [int_data(r, 4 * k, 7) for r in range(2)]
    o0 = r0.add_op(INT32, vals[0])
    o1 = r1.add_op(INT32, vals[1])
    now = time.monotonic()
    r0.pump(now)                                       # rank 0's DATA on the up ring
    time.sleep(0.05)
    db0 = r0.st["doorbell_rx"]
    obj.set32(OFF_DN_SLEEP, 1)                         # rank 0 goes to sleep
    fence()
    pending = r0.dn_pending()
    r1.pump(now)                                       # rank 1 completes the rounds
    rd, _, _ = select.select([r0.sock], [], [], 1.0)   # rank 0 blocks on its UDP socket
    t_wake = time.monotonic() - now
    word = obj.get32(OFF_DN_SLEEP)
    dgrams = r0.recv_all()
    kinds = [parse(d)["kind"] for d in dgrams if parse(d)]
    ring_has = r0.dn_pending()
    for d in dgrams:
        r0.handle(d, "udp")
    check(not pending and rd and K_DOORBELL in kinds and r0.st["doorbell_rx"] > db0,
          "a sleeping worker (down 'sleeping' set, ring empty) is woken by a DOORBELL over UDP "
          "with its job/session/token", "kinds=%s wake=%.3fs" % (kinds, t_wake))
    check(word == 0 and ring_has,
          "the switch cleared the worker's sleeping word and its RESULTs were in the down ring "
          "before the DOORBELL", "word=%d ring=%s" % (word, ring_has))
    ok = progress(ranks, lambda: o0.done and o1.done)
    check(ok and o0.out == exact_int(vals) and o1.out == exact_int(vals),
          "nothing lost: the woken op completes exactly")
    c5 = sw.wait_counters(lambda c: delta(c4, c, "doorbells") >= 1)
    db_sw_to_w = delta(c4, c5, "doorbells")
    check(db_sw_to_w >= 1, "counter doorbells moved for the switch's DOORBELL", "delta=%d" % db_sw_to_w)

    # ---- doorbell, worker -> switch
    t_end = time.monotonic() + 1.0
    while obj.get32(OFF_UP_SLEEP) == 0 and time.monotonic() < t_end:
        time.sleep(0.01)
    sw_sleeping = obj.get32(OFF_UP_SLEEP)
    check(sw_sleeping != 0, "an idle switch sets the up ring's sleeping word (value %d)" % sw_sleeping)
    c6 = sw.wait_counters(lambda c: True)
    vals = [int_data(r, 2 * k, 9) for r in range(2)]
    o1 = r1.add_op(INT32, vals[1])
    o0 = r0.add_op(INT32, vals[0])
    now = time.monotonic()
    r1.pump(now)                                       # rank 1 by UDP first
    time.sleep(0.05)                                   # the switch goes back to sleep
    t_end = time.monotonic() + 0.5
    while obj.get32(OFF_UP_SLEEP) == 0 and time.monotonic() < t_end:
        time.sleep(0.002)
    word_before = obj.get32(OFF_UP_SLEEP)
    dbt = r0.st["doorbell_tx"]
    t_send = time.monotonic()
    r0.pump(t_send)                                    # rank 0 publishes, sees the word
    rang = r0.st["doorbell_tx"] - dbt
    ok = progress(ranks, lambda: o0.done and o1.done, timeout=3)
    lat = time.monotonic() - t_send
    check(word_before != 0 and rang >= 1,
          "worker after publishing: fence, read the switch's sleeping word, cleared it and sent "
          "a DOORBELL (%d)" % rang, "word=%d" % word_before)
    check(ok and o0.out == exact_int(vals) and r0.st["retx"] == 0 and lat < 0.09,
          "switch woken by the worker's DOORBELL: round completed in %.1f ms, no retransmission"
          % (lat * 1000), "retx=%d" % r0.st["retx"])
    c7 = sw.wait_counters(lambda c: delta(c6, c, "doorbells") >= 1)
    db_w_to_sw = delta(c6, c7, "doorbells")
    log("doorbells delta: switch->worker phase %d, worker->switch phase %d" % (db_sw_to_w, db_w_to_sw))

    # ---- informational: what happens when a producer does NOT ring (spec: wake-up lost
    # until something else wakes the switch).  Not a check of the switch: reported.
    info = {}
    t_end = time.monotonic() + 1.0
    while obj.get32(OFF_UP_SLEEP) == 0 and time.monotonic() < t_end:
        time.sleep(0.01)
    vals = [int_data(r, k, 11) for r in range(2)]
    o1 = r1.add_op(INT32, vals[1])
    o0 = r0.add_op(INT32, vals[0])
    now = time.monotonic()
    r1.pump(now)
    time.sleep(0.1)
    # publish rank 0's packet without the doorbell
    f_save = r0.ring_doorbell
    r0.ring_doorbell = lambda: None
    r0.pump(time.monotonic())
    r0.ring_doorbell = f_save
    t_pub = time.monotonic()
    t_end = t_pub + 0.3
    while time.monotonic() < t_end and obj.get64(OFF_UP_HEAD) != r0.up_tail:
        time.sleep(0.002)
    info["no_doorbell_consumed_after_ms"] = (None if obj.get64(OFF_UP_HEAD) != r0.up_tail
                                             else round((time.monotonic() - t_pub) * 1000, 1))
    ok = progress(ranks, lambda: o0.done and o1.done, timeout=3)
    check(ok and o0.out == exact_int(vals),
          "a datagram published without a DOORBELL is still delivered in the end (recovered)",
          str(info))
    note("DATA published on the up ring without a DOORBELL while the switch's sleeping word "
         "was set: consumed after %s ms" % info["no_doorbell_consumed_after_ms"])

    # ---- teardown (§5.4, §5.9 End)
    c8 = sw.fresh()
    got = r0.st["doorbell_rx"] + r1.st["doorbell_rx"]
    check(delta(c0, c8, "doorbells") == got and r0.st["doorbell_rx_bad"] == 0,
          "counter doorbells = the DOORBELLs the switch sent (%d received by the worker); "
          "the %d the worker sent are not in it" % (got, r0.st["doorbell_tx"]),
          "delta=%d" % delta(c0, c8, "doorbells"))
    for r in ranks:
        r.leave()
    c9 = sw.wait_counters(lambda c: delta(c8, c, "jobs_ended") >= 1)
    check(delta(c8, c9, "jobs_ended") == 1 and c9["jobs"] == c8["jobs"] - 1,
          "LEAVE of both ranks ends the job silently (jobs_ended +1)",
          "ended=%d jobs %s->%s" % (delta(c8, c9, "jobs_ended"), c8["jobs"], c9["jobs"]))
    t_end = time.monotonic() + 1.0
    while sw.maps_has(obj.name) and time.monotonic() < t_end:
        time.sleep(0.02)
    check(sw.maps_has(obj.name) is False, "the switch unmapped the rank's rings when the job was freed")
    obj.close()
    r0.sock.close()
    r1.sock.close()
    return {"doorbells_sw_to_worker_phase": db_sw_to_w, "doorbells_worker_to_sw_phase": db_w_to_sw,
            "r0": r0.st, "no_doorbell": info}


def test_libina_mixed(sw, args):
    """Rank 0: clean-room over rings.  Rank 1: libina through the Python binding."""
    py = "/usr/bin/python3"
    libdir = args.libdir or "/work/cleanroom/lib"
    pydir = args.pythondir or "/work/cleanroom/python"
    lib = os.path.join(libdir, "libina.so")
    if not (os.path.exists(py) and os.path.exists(lib) and os.path.isdir(os.path.join(pydir, "ina"))):
        check(False, "libina mixed job: binding or library missing (%s, %s)" % (lib, pydir))
        return
    k, W = 64, 8
    ci, cf, cs = 30 * k + 3, 12 * k + 1, 3 * k + 2
    out = os.path.join(args.tmp, "libina.out")
    env = dict(os.environ, PYTHONPATH=pydir, INA_LIBRARY=lib, INA_QUIET="1")
    env.pop("INA_SHM", None)
    if os.environ.get("INA_PEER_PRELOAD"):
        env["LD_PRELOAD"] = os.environ["INA_PEER_PRELOAD"]
        env["ASAN_OPTIONS"] = "detect_leaks=0:abort_on_error=1"
    child = subprocess.Popen([py, "-c", LIBINA_CHILD, str(sw.port), "shm-mixed", str(k), str(W),
                              out, str(ci), str(cf), str(cs)], env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    PROCS.append(child)
    r0 = Rank(sw.port, "shm-mixed", 0, 2, k, W)
    ok = join_all([r0], timeout=10)
    check(ok, "mixed job: clean-room rank 0 and libina rank 1 joined")
    if not ok:
        return
    obj = ShmObject(8, ((4 + 32 + 4 * r0.k + 63) // 64) * 64)
    reason = r0.attach(obj)
    obj.close_fd()
    check(reason == 0, "mixed job: rank 0's rings attached", "reason=%r" % reason)
    r0.use_shm(obj)
    r0.ring_up = True
    vi = int_data(0, ci)
    vf = flt_data(0, cf)
    vs = flt_data(0, cs, 5)
    ops = [r0.add_op(INT32, vi), r0.add_op(FLOAT32, vf), r0.add_op(FLOAT32, vs)]
    ok = progress([r0], lambda: all(o.done for o in ops), timeout=10)
    check(ok, "mixed job: clean-room rank's three ops completed over rings", str(r0.failed))
    r0.leave()
    try:
        so, _ = child.communicate(timeout=max(1.0, min(10.0, time_left() - 5)))
    except subprocess.TimeoutExpired:
        child.kill()
        so, _ = child.communicate()
    if child.returncode != 0:
        check(False, "libina rank exited %d" % child.returncode, so.decode(errors="replace")[-800:])
        return
    raw = open(out, "rb").read()
    meta = json.load(open(out + ".json"))
    li = list(struct.unpack_from("<%di" % ci, raw, 0))
    lf = list(struct.unpack_from("<%df" % cf, raw, 4 * ci))
    ls = list(struct.unpack_from("<%df" % cs, raw, 4 * (ci + cf)))
    other_i = int_data(1, ci)
    check(ok and ops[0].out == exact_int([vi, other_i]) and li == ops[0].out,
          "mixed job INT32 SUM (%d elems, ring wrap): exact on both, libina agrees" % ci)
    for o, lres, salt in ((ops[1], lf, 0), (ops[2], ls, 5)):
        same = [F32.pack(x) for x in o.out] == [F32.pack(x) for x in lres]
        bok, worst = float_check(o.out, [flt_data(0, o.count, salt), flt_data(1, o.count, salt)],
                                 r0.k, 2)
        check(ok and same and bok, "mixed job FLOAT32 SUM (%d elems, wire op %d): bit-identical to "
              "libina's result, within §8.1's bound" % (o.count, o.wire),
              "same=%s worst=%.3g" % (same, worst))
    check(str(meta.get("shm")).lower() in ("true", "1"),
          "libina rank reports ina_info.shm (it used rings too)", "shm=%r" % meta.get("shm"))
    obj.close()
    r0.sock.close()


def test_hostile(sw, args):
    """Refused objects (§5.9 Attach), wrong token, oversized length, corrupt index."""
    k, W = 64, 8
    ss = ((4 + 32 + 4 * k + 63) // 64) * 64
    # job C (victim) and job D (bystander, on rings) run side by side.
    C = [Rank(sw.port, "shm-hostile", r, 2, k, W) for r in range(2)]
    D, dobjs = ring_job(sw, "shm-other", k=k, W=W)
    check(join_all(C), "job shm-hostile joined; bystander job shm-other runs on rings")
    sw.wait_counters(lambda c: True)  # a fresh snapshot before the hostile cases
    reasons = {}

    def refused(label, want, make=None, attach=None, **kw):
        """One refusal of §5.9's attach checks: SHM_ACK with the errno of the check
        (want, positive), drop SHM +1, nothing attached, the object not mapped."""
        o = make() if make else ShmObject(8, ss, **kw)
        before = sw.fresh()
        reason = C[0].attach(o, wait=0.6, **(attach or {}))
        mapped = sw.maps_has(o.name)
        exists = o.unlink() == 0 if o.legacy else None    # the worker removes it (first version)
        o.close()
        after = sw.wait_counters(lambda c: delta(before, c, "drop_SHM") >= 1, timeout=0.6)
        reasons[label] = reason
        check(reason == -want and delta(before, after, "drop_SHM") == 1
              and delta(before, after, "shm_attached") == 0 and not mapped,
              "refused: %s -> SHM_ACK reason -%s, drop SHM +1, not mapped"
              % (label, errno.errorcode.get(want, want)),
              "reason=%r dSHM=%d mapped=%s" % (reason, delta(before, after, "drop_SHM"), mapped))
        return exists

    ex = {}
    u = os.getuid()
    if u == 0:
        refused("object owned by another user (uid 65534) (check 7)", errno.EPERM, owner=65534)
    refused("bad magic (check 8)", errno.EPROTO, magic=0x1122334455667788)
    refused("version 2 (check 8)", errno.EPROTO, version=2)
    refused("size not 448 + 2*nslots*slot_size (check 8)", errno.EPROTO, size_delta=64)
    refused("nslots 6, not a power of 2 (check 3)", errno.EINVAL, make=lambda: ShmObject(6, ss))
    refused("slot_size 256 < the job's largest datagram (4+32+4k=%d) (check 1)" % (36 + 4 * k),
            errno.EINVAL, make=lambda: ShmObject(8, 256))
    refused("header nslots 16, SHM_ATTACH nslots 8 (check 8)", errno.EPROTO, hdr_nslots=16)
    refused("name outside the pattern (inb.<uid>.<hex>) (check 3)", errno.EINVAL,
            name="inb.%d.%016x" % (u, random.getrandbits(64)))
    refused("name with 15 hex digits (check 3)", errno.EINVAL,
            name="ina.%d.%015x" % (u, random.getrandbits(60)))
    refused("name with uppercase hex digits (check 3)", errno.EINVAL,
            name="ina.%d.%016X" % (u, random.getrandbits(64) | (0xA << 60)))
    refused("a memfd's name in an 80-byte body (no pid, no fd) (check 3)", errno.EINVAL,
            attach={"short": True})
    refused("pid 0 (check 3)", errno.EINVAL, attach={"pid": 0})
    refused("no such process (pid 2^31 - 2) (check 4)", errno.ENOENT, attach={"pid": 2**31 - 2})
    refused("no such descriptor (fd 65000) (check 4)", errno.ENOENT, attach={"fd": 65000})
    null = os.open("/dev/null", os.O_RDONLY)
    refused("another descriptor of ours (/dev/null) (check 5)", errno.ENOENT, attach={"fd": null})
    os.close(null)
    refused("the body names another memfd than the descriptor holds (check 5)", errno.ENOENT,
            attach={"name": "ina.%d.%016x" % (u, random.getrandbits(64))})
    refused("a memfd made without MFD_ALLOW_SEALING (check 6)", errno.EPERM, seals=None)
    refused("a memfd with no seals (check 6)", errno.EPERM, seals=0)
    refused("sealed SHRINK|GROW only, not SEAL (check 6)", errno.EPERM,
            seals=fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW)
    refused("sealed SHRINK|SEAL: it may grow (check 6)", errno.EPERM,
            seals=fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_SEAL)
    refused("sealed GROW|SEAL: it may shrink (check 6)", errno.EPERM,
            seals=fcntl.F_SEAL_GROW | fcntl.F_SEAL_SEAL)
    ex["first_version"] = refused("an object of the first version (POSIX shm, 80 bytes) (check 2)",
                                  errno.EPERM, make=lambda: PosixShmObject(8, ss))
    check(ex["first_version"] is True, "a refused first-version object's name is left to the worker "
          "(it removed it)")
    log("refusal reasons:", reasons)

    # wrong token: header check like a LEAVE's -> silent drop JOIN
    o = ShmObject(8, ss)
    before = sw.fresh()
    reason = C[0].attach(o, wait=0.4, token=C[0].token ^ 0x5A5A5A5A)
    after = sw.wait_counters(lambda c: delta(before, c, "drop_JOIN") >= 1, timeout=0.6)
    check(reason is None and delta(before, after, "drop_JOIN") >= 1 and not sw.maps_has(o.name),
          "SHM_ATTACH with a wrong token: no answer, drop JOIN, object left alone",
          "reason=%r dJOIN=%d" % (reason, delta(before, after, "drop_JOIN")))
    # now the real attach of the victim's rank 0
    reason = C[0].attach(o)
    o.close_fd()
    check(reason == 0, "after the refusals a correct SHM_ATTACH is accepted", "reason=%r" % reason)
    C[0].use_shm(o)
    C[0].ring_up = True
    vals = [int_data(r, 6 * k, 21) for r in range(2)]
    ok, ops = run_ops(C, [(INT32, vals)])
    check(ok and ops[0][0].out == exact_int(vals), "victim job runs INT32 SUM over its rings")

    # oversized length in an up slot: taken as an empty datagram (drop SHORT), ring goes on
    before = sw.fresh()
    tail = C[0].up_tail
    off = o.up_base + (tail % o.nslots) * o.slot_size
    struct.pack_into("=I", o.mm, off, o.slot_size)          # > slot_size - 4
    o.mm[off + 4:off + 36] = hdr(K_DATA, job=C[0].job, rank=0, session=C[0].session,
                                 token=C[0].token)
    C[0].up_tail = tail + 1
    o.set64(OFF_UP_TAIL, C[0].up_tail)
    C[0].ring_doorbell()
    C[0].send(hdr(K_DOORBELL, job=C[0].job, rank=0, session=C[0].session, token=C[0].token))
    after = sw.wait_counters(lambda c: delta(before, c, "drop_SHORT") >= 1, timeout=1.0)
    check(delta(before, after, "drop_SHORT") == 1 and o.get64(OFF_UP_HEAD) == C[0].up_tail
          and delta(before, after, "jobs_aborted") == 0,
          "slot length above slot_size-4 is an empty datagram: drop SHORT +1, consumed, job goes on",
          "dSHORT=%d head=%d tail=%d" % (delta(before, after, "drop_SHORT"),
                                         o.get64(OFF_UP_HEAD), C[0].up_tail))
    vals = [int_data(r, 3 * k, 22) for r in range(2)]
    ok, ops = run_ops(C, [(INT32, vals)])
    check(ok and ops[0][0].out == exact_int(vals) and ops[0][1].out == exact_int(vals),
          "victim job still exact after the oversized slot")

    # out-of-range index: the worker's up tail more than nslots ahead of the switch's head
    before = sw.fresh()
    C[0].up_tail += o.nslots + 3
    o.set64(OFF_UP_TAIL, C[0].up_tail)
    C[0].send(hdr(K_DOORBELL, job=C[0].job, rank=0, session=C[0].session, token=C[0].token))
    wait_aborts(C, 1.5, "ABORT after a corrupt ring index")
    after = sw.wait_counters(lambda c: delta(before, c, "drop_SHM") >= 1
                             and delta(before, c, "jobs_aborted") >= 1, timeout=1.0)
    check(C[0].aborts and C[1].aborts and delta(before, after, "drop_SHM") >= 1
          and delta(before, after, "jobs_aborted") == 1,
          "up tail > head + nslots: switch aborts the job (ABORT to every rank, reason %s), "
          "drop SHM +1" % (C[0].aborts[:1] or "-"),
          "aborts=%s/%s dSHM=%d dAborted=%d" % (C[0].aborts, C[1].aborts,
                                                 delta(before, after, "drop_SHM"),
                                                 delta(before, after, "jobs_aborted")))
    check("ring_corrupt" in sw.logtext(), "switch logged job_aborted reason=ring_corrupt")
    t_end = time.monotonic() + 1.0
    while sw.maps_has(o.name) and time.monotonic() < t_end:
        time.sleep(0.02)
    check(sw.maps_has(o.name) is False, "aborted job's rings unmapped by the switch")
    o.close()

    # the bystander job still serves correctly (rings, wrap-around)
    vals = [int_data(r, 25 * k + 1, 23) for r in range(2)]
    fv = [flt_data(r, 10 * k + 3, 9) for r in range(2)]
    ok, ops = run_ops(D, [(INT32, vals), (FLOAT32, fv)])
    bok, _ = float_check(ops[1][0].out, fv, k, 2) if ok else (False, 0)
    check(ok and ops[0][0].out == exact_int(vals) and ops[0][1].out == exact_int(vals) and bok,
          "after the abort, the other job on rings still computes exact INT32 and bounded FLOAT32 sums")
    for r in D:
        r.leave()
    for r in C:
        r.leave()
    for r in C + D:
        r.sock.close()
    for x in dobjs.values():
        x.close()
    return {"reasons": reasons}


def note(text):
    print("# note: " + text, flush=True)


def test_experiments(sw, args):
    """Behaviour the spec leaves open: reported as notes, each also checked for the part the
    spec does define (the switch keeps serving)."""
    k, W = 64, 8
    ss = ((4 + 32 + 4 * k + 63) // 64) * 64
    res = {}
    # (1) another uid in the name, then a second SHM_ATTACH naming another object
    r = Rank(sw.port, "shm-reattach", 0, 1, k, W)
    check(join_all([r]), "job shm-reattach (N=1) joined")
    a = ShmObject(8, ss, name="ina.%d.%016x" % (os.getuid() + 1, random.getrandbits(64)))
    res["other_uid_name_reason"] = r.attach(a, wait=0.6)
    a.close_fd()
    b = ShmObject(8, ss)
    res["second_object_reason"] = r.attach(b, wait=0.6)
    res["second_object_mapped_by_switch"] = sw.maps_has(b.name)
    # §5.9: any <uid> matching the pattern is accepted (the owner is what counts); a second
    # SHM_ATTACH naming another object is refused -EBUSY and that object left untouched.
    check(res["other_uid_name_reason"] == 0,
          "a name with another uid (ina.<uid+1>.<hex>) owned by this user is attached (reason %r)"
          % (res["other_uid_name_reason"],))
    check(res["second_object_reason"] == -errno.EBUSY and not res["second_object_mapped_by_switch"],
          "a second SHM_ATTACH naming another object: SHM_ACK -EBUSY (%r), not mapped by the "
          "switch" % (res["second_object_reason"],))
    # the rank's rings are still the first object's: a DATA there completes
    d = hdr(K_DATA, job=r.job, rank=0, session=r.session, token=r.token, slot=0, seq=0,
            count=3, op=0, tag=packet_tag(op_seed(1, 3, INT32, SUM), 0)) + struct.pack(">3i", 1, 2, 3)
    r.use_shm(a)
    r.up_push(d)
    r.send(hdr(K_DOORBELL, job=r.job, rank=0, session=r.session, token=r.token))
    deadline = time.monotonic() + 1.0
    while a.get64(OFF_UP_HEAD) != 1 and time.monotonic() < deadline:
        time.sleep(0.01)
    check(a.get64(OFF_UP_HEAD) == 1 and b.get64(OFF_UP_HEAD) == 0,
          "after the refusal the switch still reads the first object's up ring")
    r.leave()
    r.sock.close()
    a.close()
    b.close()

    # (2) switch as producer: the worker moves its down head ahead of the switch's tail
    ranks, objs = ring_job(sw, "shm-dnhead", k=k, W=W)
    o = objs[0]
    vals = [int_data(x, 2 * k, 31) for x in range(2)]
    ok, ops = run_ops(ranks, [(INT32, vals)])
    before = sw.fresh()
    t = o.get64(OFF_DN_TAIL)
    o.set64(OFF_DN_HEAD, t + 5)
    ranks[0].shm = None                 # stop reading the ring: watch the switch only
    vals = [int_data(x, 2 * k, 32) for x in range(2)]
    for x in ranks:
        x.add_op(INT32, vals[x.rank])
    progress(ranks, lambda: bool(ranks[0].aborts) or all(x.ops[-1].done for x in ranks),
             timeout=0.6)
    after = sw.wait_counters(lambda c: delta(before, c, "drop_SHM") >= 1, timeout=0.3)
    res["dn_head_ahead"] = {"abort": ranks[0].aborts, "dSHM": delta(before, after, "drop_SHM"),
                            "down_tail_moved": o.get64(OFF_DN_TAIL) - t,
                            "rank1_done": ranks[1].ops[-1].done,
                            "rank0_retx": ranks[0].st["retx"]}
    x = res["dn_head_ahead"]
    check(x["abort"] and x["dSHM"] >= 1 and x["down_tail_moved"] == 0,
          "worker's down head 5 ahead of the switch's tail (corrupt, switch as producer): job "
          "aborted (ABORT reason %s), drop SHM, nothing written" % x["abort"][:1], str(x))
    for x in ranks:
        x.leave(abort=True)
        x.sock.close()
    o.close()
    return res


def test_noshm(bindir, tmp):
    sw2 = Switch(bindir, tmp, ["--no-shm"], tag="noshm")
    try:
        ranks = [Rank(sw2.port, "shm-off", r, 1, 16, 8) for r in range(1)]
        check(join_all(ranks), "--no-shm switch: job joined")
        r = ranks[0]
        check(not (r.flags & FLAG_CAP_SHM), "--no-shm: JOIN_ACK lacks INA_FLAG_CAP_SHM",
              "flags=%#x" % r.flags)
        o = ShmObject(8, 128)
        before = sw2.counters()
        reason = r.attach(o, wait=0.6)
        after = sw2.wait_counters(lambda c: delta(before, c, "drop_SHM") >= 1, timeout=0.6)
        check(reason == ERR_NOTSUP and delta(before, after, "drop_SHM") == 1,
              "--no-shm: SHM_ATTACH answered INA_ERR_NOTSUP (-1007), drop SHM +1",
              "reason=%r dSHM=%d" % (reason, delta(before, after, "drop_SHM")))
        o.close()
        # the job works over UDP
        ops = [r.add_op(INT32, [5, -3, 2**31 - 1])]
        ok = progress(ranks, lambda: ops[0].done, timeout=2)
        check(ok and ops[0].out == [5, -3, 2**31 - 1], "--no-shm: the job runs over UDP (N=1)")
        r.leave()
        r.sock.close()
    finally:
        sw2.stop()


def test_unsealed(bindir, tmp):
    """--shm-unsealed (§5.9 "The first version", "Faults"): a POSIX shm object is mapped;
    truncated under the switch, it costs its job, not the switch, nor the job beside it."""
    sw2 = Switch(bindir, tmp, ["--shm-unsealed"], tag="unsealed")
    try:
        k, W = 64, 8
        ss = ((4 + 32 + 4 * k + 63) // 64) * 64
        D, dobjs = ring_job(sw2, "shm-v2-beside", k=k, W=W)   # sealed rings, untouched
        V = [Rank(sw2.port, "shm-v1", r, 2, k, W) for r in range(2)]
        check(join_all(V), "--shm-unsealed: job shm-v1 joined")
        o = PosixShmObject(8, ss)
        reason = V[0].attach(o)
        check(reason == 0 and not os.path.exists(o.path),
              "--shm-unsealed: a first-version object (80-byte SHM_ATTACH) is attached, reason 0, "
              "and the switch removed its name", "reason=%r" % reason)
        V[0].use_shm(o)
        V[0].ring_up = True
        vals = [int_data(r, 5 * k + 3, 41) for r in range(2)]
        ok, ops = run_ops(V, [(INT32, vals)])
        check(ok and ops[0][0].out == exact_int(vals) and o.get64(OFF_UP_TAIL) > 0,
              "--shm-unsealed: the first-version rings carry an exact INT32 SUM")
        # The attack: take every page away under the switch's mapping. From here on
        # nothing of this process touches the object either (it would fault here too).
        before = sw2.fresh()
        V[0].shm = None
        V[0].ring_up = False
        os.ftruncate(o.fd, 0)
        o.close()
        wait_aborts(V, 2.0, "ABORT after the ring object was truncated")  # rings read every ≤ 200 ms
        after = sw2.wait_counters(lambda c: delta(before, c, "shm_faults") >= 1
                                  and delta(before, c, "jobs_aborted") >= 1, timeout=1.0)
        check(sw2.p.poll() is None, "the switch survived the truncation (no SIGBUS death)")
        check(V[0].aborts[:1] == [ERR_PROTO] and V[1].aborts[:1] == [ERR_PROTO],
              "the job of the truncated object is aborted: ABORT reason INA_ERR_PROTO to every rank",
              "aborts=%s/%s" % (V[0].aborts, V[1].aborts))
        check(delta(before, after, "shm_faults") == 1 and delta(before, after, "drop_SHM") >= 1
              and delta(before, after, "jobs_aborted") == 1,
              "counters: shm_faults +1, drop SHM, jobs_aborted +1",
              "dFaults=%d dSHM=%d dAborted=%d" % (delta(before, after, "shm_faults"),
                                                 delta(before, after, "drop_SHM"),
                                                 delta(before, after, "jobs_aborted")))
        check("ring_fault" in sw2.logtext(), "switch logged job_aborted reason=ring_fault")
        vals = [int_data(r, 12 * k + 1, 42) for r in range(2)]
        ok, ops = run_ops(D, [(INT32, vals)])
        check(ok and ops[0][0].out == exact_int(vals) and ops[0][1].out == exact_int(vals),
              "the job beside it, on sealed rings, still computes exact sums")
        for r in D + V:
            r.leave()
            r.sock.close()
        for x in dobjs.values():
            x.close()
    finally:
        sw2.stop()


def main():
    global VERBOSE
    ap = argparse.ArgumentParser()
    ap.add_argument("--bindir", required=True)
    ap.add_argument("--libdir")
    ap.add_argument("--pythondir")
    ap.add_argument("-v", "--verbose", action="store_true")
    args = ap.parse_args()
    VERBOSE = args.verbose
    signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(int(DEADLINE - time.monotonic()) + 5)
    if sys.platform != "linux" or not os.path.isdir("/dev/shm"):
        print("FAIL - needs Linux with /dev/shm")
        return 1
    log("python", sys.version.split()[0], "fence via", fence.kind)
    tmp = tempfile.mkdtemp(prefix="peer_shm.")
    args.tmp = tmp
    sw = None
    notes = {}
    try:
        test_tags()
        sw = Switch(args.bindir, tmp)
        notes["main"] = test_main_job(sw, args)
        test_libina_mixed(sw, args)
        notes["hostile"] = test_hostile(sw, args)
        notes["experiments"] = test_experiments(sw, args)
        test_noshm(args.bindir, tmp)
        test_unsealed(args.bindir, tmp)
        # the switch survived everything
        c = sw.counters()
        check(sw.p.poll() is None and c["jobs"] == 0,
              "switch still running, no job left (jobs=%s)" % c["jobs"])
    except Timeout as e:
        check(False, "deadline passed while waiting for: %s" % e)
    except Exception as e:
        import traceback
        traceback.print_exc()
        check(False, "exception: %r (waiting for: %s)" % (e, WAITING_FOR[0]))
    finally:
        if sw is not None:
            sw.stop()
            if VERBOSE:
                sys.stdout.write(sw.logtext()[-6000:])
        kill_all()
        left = [p for p in SHM_PATHS if os.path.exists(p)]
        check(not left, "no object this run created is left in /dev/shm", str(left))
        for p in SHM_PATHS:
            try:
                os.unlink(p)
            except OSError:
                pass
        if not VERBOSE:
            import shutil
            shutil.rmtree(tmp, ignore_errors=True)
    log("notes:", json.dumps(notes, default=str))
    nfail = sum(1 for ok, _ in RESULTS if not ok)
    print("# %d checks, %d failed, %.1f s" % (len(RESULTS), nfail, time.monotonic() - T0))
    return 0 if nfail == 0 and RESULTS else 1


if __name__ == "__main__":
    sys.exit(main())

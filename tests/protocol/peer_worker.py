#!/usr/bin/env python3
"""Clean-room ina worker peer and conformance test (PROTOCOL.md §1-§11, §13).

Written from docs/PROTOCOL.md alone (no project source was read).  It starts
its own ina-switch on 127.0.0.1 with free ports, runs jobs of clean-room ranks
(threads of this process) and a mixed job with one rank run by libina, and
prints one "ok - ..." / "FAIL - ..." line per check.  Exit 0 only if every
check passed.

  python3 peer_worker.py --bindir DIR [--libdir DIR] [--pythondir DIR] [-v]

Standard library only (Python >= 3.9).  The libina rank of the mixed job runs
in a child Python process, through the `ina` binding when numpy is importable
there, otherwise through libina's C API (ina(3): ina_init_env, ina_allreduce,
ina_finalize) called with ctypes.
"""

import argparse
import json
import math
import os
import random
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

# ---------------------------------------------------------------------------
# Constants (PROTOCOL.md §3, §4, Appendix)
# ---------------------------------------------------------------------------
MAGIC = 0x494E                      # §3 offset 0
VERSION = 1                         # §3 offset 2
HDR = struct.Struct(">HBBHHIIIIHhHBB")  # §3: 32-byte header, big-endian (§2 byte order)
assert HDR.size == 32

K_DATA, K_RESULT = 1, 2             # §4
K_JOIN, K_JOIN_ACK, K_JOIN_NAK, K_LEAVE, K_ABORT, K_REDIRECT = 16, 17, 18, 19, 20, 21
K_JOIN_WAIT = 27

RANK_SWITCH = 0xFFFF                # §3 rank field of switch packets
FLAG_ABORT = 0x0001                 # §3 flags bit 0 of LEAVE
FLAG_CAP_BFP = 0x0002               # §3 flags bit 1 of JOIN_ACK: op 3 (§8.7)
FLAG_CAP_FIX = 0x0040               # §3 flags bit 6 of JOIN_ACK: op 5 (§13)

EXP_ZERO = -32768                   # §8.1 INA_EXP_ZERO
EXP_NONFINITE = 32767               # §8.1 INA_EXP_NONFINITE
FIX_INVALID = -(1 << 31)            # §13.3 INA_FIX_INVALID

DT_INT32, DT_FLOAT32 = 0, 1         # §1 dtype values
RED_SUM = 0                         # §1 reduction values
WOP_ADD, WOP_BFP, WOP_FIX = 0, 3, 5  # §3 offset 30, wire ops

ERR = {-1001: "TIMEOUT", -1002: "ABORTED", -1003: "REJECTED", -1004: "NOSPACE",
       -1005: "MISMATCH", -1008: "PROTO", -1022: "SHUTDOWN"}   # §4.3

MAX_ELEMS = 16368                   # §2 INA_MAX_ELEMS
SW_VERSION = 100                    # §4.1 sw_version: informational

# JOIN body, §4.1: nonce u64, world u16, elems u16, window u32, sw_version u32,
# mcast_group u32, mcast_port u16, lane u8, nlanes u8, fallback_port u16,
# wait u16, name 32 bytes NUL-padded.
JOIN_BODY = struct.Struct(">QHHIIIHBBHH32s")
assert JOIN_BODY.size == 64

VERBOSE = False
M64 = (1 << 64) - 1


def log(*a):
    if VERBOSE:
        print("#", *a, file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------
# Watchdog: a global deadline so the script never hangs (BRIEF).
# ---------------------------------------------------------------------------
class Watchdog:
    def __init__(self, seconds):
        self.waiting = "start-up"
        self.cleanup = []
        self.deadline = time.monotonic() + seconds
        t = threading.Thread(target=self._run, daemon=True)
        t.start()

    def _run(self):
        while time.monotonic() < self.deadline:
            time.sleep(0.2)
        print("FAIL - global deadline passed while waiting for: %s" % self.waiting, flush=True)
        for fn in self.cleanup:
            try:
                fn()
            except Exception:
                pass
        os._exit(1)


WD = None


def waiting(what):
    if WD is not None:
        WD.waiting = what
    log("waiting:", what)


# ---------------------------------------------------------------------------
# Header helpers (§3)
# ---------------------------------------------------------------------------
def pack_hdr(kind, job=0, rank=0, session=0, token=0, slot=0, setbit=0, seq=0,
             count=0, exp=0, flags=0, op=0, tag=0, version=VERSION, magic=MAGIC):
    # §3 offset 16: bit 31 = set S, bits 0..30 = slot index relative to the job's range.
    slotw = (slot & 0x7FFFFFFF) | ((setbit & 1) << 31)
    return HDR.pack(magic, version, kind, job, rank, session, token, slotw,
                    seq & 0xFFFFFFFF, count, exp, flags, op, tag)


class Hdr:
    __slots__ = ("magic", "version", "kind", "job", "rank", "session", "token",
                 "slot", "setbit", "seq", "count", "exp", "flags", "op", "tag")

    def __init__(self, b):
        (self.magic, self.version, self.kind, self.job, self.rank, self.session,
         self.token, slotw, self.seq, self.count, self.exp, self.flags, self.op,
         self.tag) = HDR.unpack_from(b, 0)
        self.slot = slotw & 0x7FFFFFFF
        self.setbit = slotw >> 31


def pack_i32(vals):
    # §2: payload int32 big-endian two's complement.
    return struct.pack(">%di" % len(vals), *vals)


def unpack_i32(b, n, off=32):
    return list(struct.unpack_from(">%di" % n, b, off))


def wrap32(v):
    v &= 0xFFFFFFFF
    return v - (1 << 32) if v & 0x80000000 else v


# ---------------------------------------------------------------------------
# Tag (§7.2; op 5 mixes in f, §13.3)
# ---------------------------------------------------------------------------
def op_seed(n, count, dtype, reduction, f=0):
    x = ((n * 0x9E3779B97F4A7C15) & M64) ^ ((count * 0xC2B2AE3D27D4EB4F) & M64) \
        ^ dtype ^ (reduction << 8) ^ (f << 16)
    x &= M64
    x ^= x >> 31
    x = (x * 0xBF58476D1CE4E5B9) & M64
    x ^= x >> 29
    return x


def packet_tag(seed, p):
    y = ((seed + p) * 0xD6E8FEB86659FD93) & M64
    return ((y ^ (y >> 32)) >> 24) & 0xFF


# ---------------------------------------------------------------------------
# Quantization (§8.1 FLOAT32, §8.7 op 3, §13.3 op 5)
# ---------------------------------------------------------------------------
def f32(x):
    """Round a double to binary32 (RNE) and back."""
    try:
        return struct.unpack("<f", struct.pack("<f", x))[0]
    except OverflowError:
        return math.copysign(math.inf, x)


def ceil_log2(n):
    return (n - 1).bit_length()      # §8.1 L = ceil(log2 N), 0 for N = 1


def block_exp(xs):
    """§8.1 block exponent of one rank's block."""
    m = 0.0
    for x in xs:
        if math.isnan(x) or math.isinf(x):
            return EXP_NONFINITE
        ax = abs(x)
        if ax > m:
            m = ax
    if m == 0.0:
        return EXP_ZERO
    return math.frexp(m)[1]          # 2^(e-1) <= m < 2^e


def encode_f32(xs, E, L):
    """§8.1 encode with agreed (or, op 3, own) exponent E."""
    if E == EXP_ZERO:
        return [0] * len(xs)
    if E == EXP_NONFINITE:
        out = []
        for x in xs:
            if math.isnan(x):
                out.append(1 << 18)
            elif math.isinf(x):
                out.append(1 if x > 0 else 1 << 9)
            else:
                out.append(0)
        return out
    s = 31 - L - E
    Q = (1 << (31 - L)) - 1
    out = []
    for x in xs:
        q = round(math.ldexp(x, s))      # exact product in double; round() is half-even
        out.append(max(-Q, min(Q, q)))
    return out


def decode_f32(sums, E, L):
    """§8.1 decode of a sum with exponent E."""
    if E == EXP_ZERO:
        return [0.0] * len(sums)
    if E == EXP_NONFINITE:
        out = []
        for s in sums:
            s &= 0xFFFFFFFF
            P, M, Qf = s & 0x1FF, (s >> 9) & 0x1FF, (s >> 18) & 0x1FF
            if Qf > 0 or (P > 0 and M > 0):
                out.append(math.nan)
            elif P > 0:
                out.append(math.inf)
            elif M > 0:
                out.append(-math.inf)
            else:
                out.append(math.nan)
        return out
    return [f32(math.ldexp(s, E + L - 31)) for s in sums]


def encode_fix(xs, f):
    """§13.3: q = round(x * 2^f), invalid code for NaN/Inf/out of range."""
    out = []
    for x in xs:
        if math.isnan(x) or math.isinf(x):
            out.append(FIX_INVALID)
            continue
        q = round(math.ldexp(x, f))
        out.append(q if abs(q) <= (1 << 31) - 1 else FIX_INVALID)
    return out


def decode_fix(vals, f):
    return [math.nan if v == FIX_INVALID else f32(math.ldexp(v, -f)) for v in vals]


def f32_bound(N, amax, exact):
    """§8.1 / §8.6 FLOAT32 bound per element."""
    L = ceil_log2(N)
    b = 2.0 ** -24 * abs(exact) + 2.0 ** -149
    if amax > 0:
        E = math.frexp(amax)[1]
        b += N * 2.0 ** (E + L - 31)
    return b


def fix_bound(N, f, exact):
    """§13.3 bound, FLOAT32 (rel 2^-24, sub 2^-149)."""
    rel = 2.0 ** -24
    return N * 2.0 ** -(f + 1) * (1 + rel) + rel * abs(exact) + 2.0 ** -149


# ---------------------------------------------------------------------------
# The clean-room worker (§7)
# ---------------------------------------------------------------------------
class ProtoError(Exception):
    def __init__(self, code, msg):
        Exception.__init__(self, "%s (%s)" % (msg, ERR.get(code, code)))
        self.code = code


class Peer:
    def __init__(self, addr, name, rank, world, elems, window, rto=0.1):
        # §2: one UDP socket per context, connect()ed to the switch.
        self.addr = addr
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.connect(addr)
        self.name = name
        self.rank = rank
        self.world = world
        self.prop_elems = elems
        self.prop_window = window
        self.rto0 = rto
        self.job = self.session = self.token = 0
        self.k = self.W = 0
        self.ack_flags = 0
        self.nonce = 0
        self.g = 0                     # §1 stream index, never reset
        self.nops = 0                  # §1 op number n
        self.rounds = []               # per slot use count (§7.3: seq = slot.round++)
        self.retransmits = 0
        self.stale = 0
        self.sent_log = {}             # g -> last datagram sent for it (for hostile replays)
        self.left = False

    # ---- join (§7.1, §4.1) ------------------------------------------------
    def join_body(self, nonce):
        return JOIN_BODY.pack(nonce, self.world, self.prop_elems, self.prop_window,
                              SW_VERSION, 0, 0, 0, 1, 0, 0,
                              self.name.encode().ljust(32, b"\0"))

    def join(self, timeout=10.0):
        self.nonce = random.getrandbits(64) or 1      # §7.1 random nonzero
        body = self.join_body(self.nonce)
        t0 = time.monotonic()
        deadline = t0 + timeout
        gaps = [0.1, 0.2, 0.4, 0.8]                   # §7.1 schedule, cap 1 s
        nsent = 0
        next_send = t0
        redirects = 0
        while True:
            now = time.monotonic()
            if now >= deadline:
                raise ProtoError(-1001, "join timeout")
            if now >= next_send:
                left_ms = max(1, int((deadline - now) * 1000))
                # §3: JOIN seq = remaining join time in ms; job/session/token 0.
                hdr = pack_hdr(K_JOIN, rank=self.rank, seq=left_ms)
                try:
                    self.sock.send(hdr + body)
                except ConnectionRefusedError:
                    pass                              # §7.1: ignored while joining
                next_send = now + (gaps[nsent] if nsent < len(gaps) else 1.0)
                nsent += 1
            self.sock.settimeout(max(0.001, min(next_send, deadline) - time.monotonic()))
            try:
                d = self.sock.recv(65535)
            except socket.timeout:
                continue
            except ConnectionRefusedError:
                continue
            if len(d) < 32:
                continue
            h = Hdr(d)
            if h.magic != MAGIC:
                continue
            if h.version != VERSION:
                if h.kind in (K_JOIN_ACK, K_JOIN_NAK):
                    raise ProtoError(-1008, "reply of another version")
                continue
            if h.kind == K_JOIN_ACK and len(d) >= 96:
                b = JOIN_BODY.unpack_from(d, 32)
                if b[0] != self.nonce:
                    continue
                world, elems, window, lane, nlanes = b[1], b[2], b[3], b[7], b[8]
                if (world != self.world or lane != 0 or nlanes not in (0, 1)
                        or not 1 <= elems <= MAX_ELEMS or not 1 <= window <= 4096
                        or window & (window - 1)):
                    raise ProtoError(-1008, "JOIN_ACK with invalid parameters")
                self.job, self.session, self.token = h.job, h.session, h.token
                self.k, self.W = elems, window
                self.ack_flags = h.flags
                self.rounds = [0] * window
                return self
            if h.kind == K_JOIN_NAK and len(d) >= 48:
                nonce, reason = struct.unpack_from(">Qi", d, 32)
                if nonce == self.nonce:
                    raise ProtoError(reason if reason < 0 else -1003, "JOIN_NAK")
                continue
            if h.kind == K_REDIRECT and len(d) >= 48:
                nonce, _r, port = struct.unpack_from(">QiH", d, 32)
                if nonce != self.nonce:
                    continue
                redirects += 1
                if port == 0 or redirects > 4:
                    raise ProtoError(-1008, "bad redirect")
                self.addr = (self.addr[0], port)      # §5.6: same host, that port
                self.sock.connect(self.addr)
                nsent, next_send = 0, time.monotonic()
                continue
            # §7.1: anything else (JOIN_WAIT included) is ignored while joining.

    @property
    def cap_bfp(self):
        return bool(self.ack_flags & FLAG_CAP_BFP)

    @property
    def cap_fix(self):
        return bool(self.ack_flags & FLAG_CAP_FIX)

    def leave(self, abort=False):
        # §7.1 / §5.4: LEAVE sent twice, no reply; flags bit 0 = abort.
        hdr = pack_hdr(K_LEAVE, job=self.job, rank=self.rank, session=self.session,
                       token=self.token, flags=FLAG_ABORT if abort else 0)
        for _ in range(2):
            try:
                self.sock.send(hdr)
            except OSError:
                pass
        self.left = True

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass

    # ---- one all-reduce (§7.2 - §7.6) --------------------------------------
    def allreduce(self, values, dtype=DT_INT32, mode=None, f=0, drop_tx=None, drop_rx=None,
                  op_timeout=8.0):
        """mode: 'int' (INT32), 'two' (§8.1 two rounds), 'bfp' (op 3, §8.7),
        'fix' (op 5, §13).  drop_tx(g, attempt) / drop_rx(g, arrival) simulate
        loss of this rank's own DATA / RESULT.  Returns the reduced list."""
        count = len(values)
        if count == 0:
            return []                   # §7.2: count 0 sends nothing, takes no number
        if mode is None:
            mode = "int" if dtype == DT_INT32 else "two"
        self.nops += 1
        n = self.nops
        k, W, N = self.k, self.W, self.world
        L = ceil_log2(N)
        nblocks = (count + k - 1) // k
        if mode == "int":
            lag, wop = 0, WOP_ADD
        elif mode == "two":
            lag, wop = min(W, nblocks), WOP_ADD
        elif mode == "bfp":
            assert nblocks <= W         # §8.7: op 3 only for B <= W
            lag, wop = 0, WOP_BFP
        elif mode == "fix":
            lag, wop = 0, WOP_FIX
        else:
            raise ValueError(mode)
        npk = nblocks + lag
        seed = op_seed(n, count, dtype, RED_SUM, f if mode == "fix" else 0)
        blocks = [values[b * k:(b + 1) * k] for b in range(nblocks)]
        own_e = [block_exp(bl) for bl in blocks] if mode in ("two", "bfp") else None
        E = {}                          # agreed exponent per block (two rounds)
        out = [None] * count
        g0 = self.g
        inflight = {}                   # slot -> packet record
        accepted = [False] * npk
        ndone = 0
        next_p = 0
        last_progress = time.monotonic()

        def build(p):
            g = g0 + p
            slot = g % W
            seq = self.rounds[slot]                      # §7.3 seq = slot.round++
            self.rounds[slot] = (seq + 1) & 0xFFFFFFFF
            exp = 0
            if mode == "int":
                payload = blocks[p]
            elif mode == "two":
                # §7.2: packet p carries block p-lag encoded with E(p-lag) and
                # announces the exponent of block p (ZERO past the last block).
                exp = own_e[p] if p < nblocks else EXP_ZERO
                payload = encode_f32(blocks[p - lag], E[p - lag], L) if p >= lag else []
            elif mode == "bfp":
                # §8.7: block p quantized with the rank's own exponent.
                exp = own_e[p]
                payload = encode_f32(blocks[p], exp, L)
            else:
                payload = encode_fix(blocks[p], f)       # §13.2: exp 0
            cnt = len(payload)
            tag = packet_tag(seed, p)
            dgram = pack_hdr(K_DATA, job=self.job, rank=self.rank, session=self.session,
                             token=self.token, slot=slot, setbit=seq & 1, seq=seq,
                             count=cnt, exp=exp, op=wop, tag=tag) + pack_i32(payload)
            return {"p": p, "g": g, "slot": slot, "seq": seq, "tag": tag, "count": cnt,
                    "dgram": dgram, "ntx": 0, "nrx": 0, "rto": self.rto0,
                    "deadline": 0.0, "rtx": False}

        def xmit(rec):
            attempt = rec["ntx"]
            rec["ntx"] += 1
            self.sent_log[rec["g"]] = rec["dgram"]
            if drop_tx is not None and drop_tx(rec["g"], attempt):
                log("rank", self.rank, "drops its DATA g=%d attempt %d" % (rec["g"], attempt))
                return
            try:
                self.sock.send(rec["dgram"])
            except OSError:
                pass

        while ndone < npk:
            now = time.monotonic()
            # §7.3 send conditions, strictly in stream order.
            while next_p < npk:
                slot = (g0 + next_p) % W
                if slot in inflight:
                    break                                 # condition 1
                if mode == "two" and next_p >= lag and not accepted[next_p - lag]:
                    break                                 # condition 2
                rec = build(next_p)
                rec["deadline"] = time.monotonic() + rec["rto"]
                inflight[slot] = rec
                xmit(rec)
                next_p += 1
            # §7.6 timers: resend the same datagram, double the timeout (cap 1 s).
            now = time.monotonic()
            for rec in list(inflight.values()):
                if rec["deadline"] <= now:
                    xmit(rec)
                    self.retransmits += 1
                    rec["rtx"] = True
                    rec["rto"] = min(2 * rec["rto"], 1.0)
                    rec["deadline"] = now + rec["rto"]
            if now - last_progress > op_timeout:
                self.leave(abort=True)                   # §7.6 local failure
                raise ProtoError(-1001, "op %d: no RESULT for %.1f s" % (n, op_timeout))
            nxt = min([r["deadline"] for r in inflight.values()] or [now + 0.05])
            self.sock.settimeout(min(0.05, max(0.001, nxt - now)))
            try:
                d = self.sock.recv(65535)
            except socket.timeout:
                continue
            except ConnectionRefusedError:
                continue
            # §7.5 rule 1: truncated or fails header decode -> ignore.
            if len(d) < 32 or len(d) > 32 + max(4 * k, 64):
                self.stale += 1
                continue
            h = Hdr(d)
            if h.magic != MAGIC or h.version != VERSION or \
                    (h.kind in (K_DATA, K_RESULT) and len(d) != 32 + 4 * h.count):
                self.stale += 1
                continue
            # rule 2: ABORT of our session.
            if h.kind == K_ABORT and h.session == self.session and h.token == self.token:
                reason = struct.unpack_from(">i", d, 40)[0] if len(d) >= 48 else -1002
                raise ProtoError(reason, "ABORT")
            # rule 3: other kinds ignored.
            if h.kind != K_RESULT:
                self.stale += 1
                continue
            # rule 4
            if (h.job != self.job or h.session != self.session or h.token != self.token
                    or h.slot >= W or h.setbit != (h.seq & 1)):
                self.stale += 1
                continue
            rec = inflight.get(h.slot)
            # rule 5
            if rec is None or rec["seq"] != h.seq:
                self.stale += 1
                continue
            # rule 6
            if h.tag != rec["tag"] or h.op != wop:
                self.stale += 1
                continue
            # rule 7
            if h.count != rec["count"]:
                self.leave(abort=True)
                raise ProtoError(-1005, "RESULT count %d != sent %d" % (h.count, rec["count"]))
            arrival = rec["nrx"]
            rec["nrx"] += 1
            if drop_rx is not None and drop_rx(rec["g"], arrival):
                log("rank", self.rank, "ignores RESULT g=%d arrival %d" % (rec["g"], arrival))
                continue
            # rule 8: accept.
            p = rec["p"]
            sums = unpack_i32(d, h.count)
            if mode == "int":
                out[p * k:p * k + h.count] = sums
            elif mode == "two":
                if p < nblocks:
                    E[p] = h.exp                          # agreed E of block p
                if p >= lag:
                    b = p - lag
                    out[b * k:b * k + h.count] = decode_f32(sums, E[b], L)
            elif mode == "bfp":
                out[p * k:p * k + h.count] = decode_f32(sums, h.exp, L)  # RESULT's exp
            else:
                out[p * k:p * k + h.count] = decode_fix(sums, f)
            del inflight[h.slot]
            accepted[p] = True
            ndone += 1
            last_progress = time.monotonic()
            # §7.6 fast retransmit: a result for g >= g' + 3 shows g' lost.
            for r in list(inflight.values()):
                if r["g"] + 3 <= rec["g"] and not r["rtx"]:
                    xmit(r)
                    self.retransmits += 1
                    r["rtx"] = True
                    r["deadline"] = time.monotonic() + r["rto"]
        self.g = g0 + npk
        return out


# ---------------------------------------------------------------------------
# Switch and operator view
# ---------------------------------------------------------------------------
class Switch:
    def __init__(self, bindir, tmp, extra=(), threads=1):
        self.portfile = os.path.join(tmp, "port")
        self.mportfile = os.path.join(tmp, "mport")
        self.errpath = os.path.join(tmp, "switch.err")
        self.err = open(self.errpath, "w")
        cmd = [os.path.join(bindir, "ina-switch"), "--listen", "127.0.0.1:0",
               "--port-file", self.portfile, "--threads", str(threads),
               "--metrics", "127.0.0.1:0", "--metrics-port-file", self.mportfile,
               "--drain-timeout", "0"] + list(extra)
        self.proc = subprocess.Popen(cmd, stdout=self.err, stderr=self.err)
        t0 = time.monotonic()
        waiting("ina-switch to write its port files")
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError("ina-switch exited: %s" % open(self.errpath).read())
            try:
                self.port = int(open(self.portfile).read().strip())
                self.mport = int(open(self.mportfile).read().strip())
                break
            except (OSError, ValueError):
                pass
            if time.monotonic() - t0 > 5:
                raise RuntimeError("ina-switch did not write its port files")
            time.sleep(0.02)
        self.addr = ("127.0.0.1", self.port)

    def get(self, path):
        with urllib.request.urlopen("http://127.0.0.1:%d%s" % (self.mport, path), timeout=2) as r:
            return json.loads(r.read().decode())

    def counters(self):
        c = self.get("/counters")["counters"]
        flat = dict((k, v) for k, v in c.items() if k != "drops")
        for k, v in c.get("drops", {}).items():
            flat["drop_" + k] = v
        return flat

    def settled(self):
        """Counters once every earlier datagram is in the snapshot (refreshed every
        100 ms, TOOLS.md): wait until two reads 150 ms apart agree."""
        prev = self.counters()
        for _ in range(10):
            time.sleep(0.15)
            cur = self.counters()
            if cur == prev:
                return cur
            prev = cur
        return prev

    def wait_counters(self, pred, timeout=1.5):
        """The view is a snapshot refreshed every 100 ms (TOOLS.md)."""
        t0 = time.monotonic()
        while True:
            c = self.counters()
            if pred(c) or time.monotonic() - t0 > timeout:
                return c
            time.sleep(0.05)

    def stop(self):
        if self.proc.poll() is None:
            try:
                self.proc.send_signal(signal.SIGINT)
                self.proc.wait(timeout=3)
            except Exception:
                self.proc.kill()
                self.proc.wait()
        self.err.close()


# ---------------------------------------------------------------------------
# Test plumbing
# ---------------------------------------------------------------------------
RESULTS = []


def check(cond, what, detail=""):
    RESULTS.append(bool(cond))
    if cond:
        print("ok - %s" % what, flush=True)
    else:
        print("FAIL - %s%s" % (what, (": " + detail) if detail else ""), flush=True)
    return bool(cond)


def run_ranks(fns, timeout=20.0):
    """Run one function per rank in threads; return (results, errors)."""
    res = [None] * len(fns)
    errs = [None] * len(fns)

    def wrap(i):
        try:
            res[i] = fns[i]()
        except BaseException as e:            # reported by the caller
            errs[i] = e

    ts = [threading.Thread(target=wrap, args=(i,), daemon=True) for i in range(len(fns))]
    for t in ts:
        t.start()
    t0 = time.monotonic()
    for t in ts:
        t.join(max(0.0, timeout - (time.monotonic() - t0)))
    for i, t in enumerate(ts):
        if t.is_alive():
            errs[i] = TimeoutError("rank %d still running" % i)
    return res, errs


def int_data(rng, n):
    return [rng.randint(-(1 << 31), (1 << 31) - 1) for _ in range(n)]


def float_data(rng, n, k, zero_block=None):
    """float32 values whose magnitude varies per block (tests exponent agreement)."""
    out = []
    for i in range(n):
        b = i // k
        if zero_block is not None and b == zero_block:
            out.append(0.0)
            continue
        scale = 2.0 ** ((b * 7) % 23 - 10)
        out.append(f32(rng.uniform(-1.0, 1.0) * scale))
    return out


def int_sum(*arrs):
    return [wrap32(sum(t)) for t in zip(*arrs)]


def float_errors(inputs, result, k, bound_fn):
    """Return list of violations (index, got, exact, bound)."""
    N = len(inputs)
    bad = []
    for i in range(len(result)):
        b = i // k
        lo, hi = b * k, min((b + 1) * k, len(result))
        amax = max(abs(x) for arr in inputs for x in arr[lo:hi])
        exact = math.fsum(arr[i] for arr in inputs)
        bound = bound_fn(N, amax, exact)
        if not (abs(result[i] - exact) <= bound):
            bad.append((i, result[i], exact, bound))
    return bad


def same_bits(a, b):
    if len(a) != len(b):
        return False
    pa = struct.pack("<%df" % len(a), *a)
    pb = struct.pack("<%df" % len(b), *b)
    return pa == pb


def recv_one(sock, timeout):
    sock.settimeout(timeout)
    try:
        return sock.recv(65535)
    except (socket.timeout, ConnectionRefusedError):
        return None


# ---------------------------------------------------------------------------
# The checks
# ---------------------------------------------------------------------------
def check_local():
    """The peer's encodings against the spec's own examples (§7.2, §7.4, §11)."""
    s1 = op_seed(1, 6, DT_FLOAT32, RED_SUM)
    tags = [packet_tag(s1, p) for p in range(4)]
    s2 = op_seed(2, 6, DT_FLOAT32, RED_SUM)
    check(tags == [0xCB, 0x49, 0x68, 0x28] and packet_tag(s2, 0) == 0x1C,
          "tag hash reproduces §7.2/§11 (0xCB 0x49 0x68 0x28, op 2: 0x1C)",
          "got %s, op2 %#x" % ([hex(t) for t in tags], packet_tag(s2, 0)))
    t4 = packet_tag(op_seed(1, 4, DT_INT32, RED_SUM), 0)
    t8 = packet_tag(op_seed(1, 8, DT_INT32, RED_SUM), 0)
    # §7.4's example (an earlier text said 0x85 / 0xC5, which this peer found wrong).
    check((t4, t8) == (0xA8, 0x5E),
          "tag hash reproduces §7.4's example (INT32 ops of 4 and 8: 0xA8, 0x5E)",
          "got %#x, %#x" % (t4, t8))
    # §11 worked example: N=2, L=1, block exponents and payloads.
    A = [1.0, 2.0, 3.0, 4.0, 0.5, -0.25]
    B = [-1.5, 0.0, 8.0, 1.0, 0.0, 0.0]
    eA = [block_exp(A[:4]), block_exp(A[4:])]
    eB = [block_exp(B[:4]), block_exp(B[4:])]
    E0, E1 = max(eA[0], eB[0]), max(eA[1], eB[1])
    qA = encode_f32(A[:4], E0, 1)
    qB = encode_f32(B[:4], E0, 1)
    qA1 = encode_f32(A[4:], E1, 1)
    qB1 = encode_f32(B[4:], E1, 1)
    res = decode_f32([a + b for a, b in zip(qA, qB)], E0, 1) + \
        decode_f32([a + b for a, b in zip(qA1, qB1)], E1, 1)
    dg = pack_hdr(K_DATA, job=1, rank=0, session=0x8BC17368, token=0x12345678, slot=0,
                  setbit=1, seq=1, count=4, exp=EXP_ZERO, op=0, tag=0x68) + pack_i32(qA)
    want = bytes.fromhex("494E0101 00010000 8BC17368 12345678 80000000 00000001 00048000"
                         " 00000068 04000000 08000000 0C000000 10000000".replace(" ", ""))
    check(eA == [3, 0] and eB == [4, EXP_ZERO] and
          qB == [-100663296, 0, 536870912, 67108864] and qA1 == [536870912, -268435456] and
          res == [-0.5, 2.0, 11.0, 5.0, 0.5, -0.25] and dg == want,
          "§11 worked example: exponents, payloads, header bytes and decode",
          "eA %s eB %s qB %s res %s" % (eA, eB, qB, res))


def check_hostile_joins(sw):
    """§5.2 step 1 (other version -> JOIN_NAK PROTO in v1) and step 3 (REJECTED)."""
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.connect(sw.addr)
    try:
        nonce = 0x1122334455667788
        body = JOIN_BODY.pack(nonce, 2, 64, 8, SW_VERSION, 0, 0, 0, 1, 0, 0,
                              b"hostile-v2".ljust(32, b"\0"))
        waiting("JOIN_NAK PROTO for a version-2 JOIN")
        s.send(pack_hdr(K_JOIN, rank=0, seq=1000, version=2) + body)
        d = recv_one(s, 1.0)
        ok = d is not None and len(d) >= 48
        if ok:
            h = Hdr(d)
            nn, reason = struct.unpack_from(">Qi", d, 32)
            ok = (h.magic == MAGIC and h.version == 1 and h.kind == K_JOIN_NAK and
                  nn == nonce and reason == -1008)
        check(ok, "JOIN of version 2 is answered by a v1 JOIN_NAK PROTO echoing the nonce",
              repr(d))
        # window 3 is not a power of 2 -> JOIN_NAK REJECTED (§5.2 step 3).
        nonce2 = 0x0102030405060708
        body = JOIN_BODY.pack(nonce2, 2, 64, 3, SW_VERSION, 0, 0, 0, 1, 0, 0,
                              b"hostile-w3".ljust(32, b"\0"))
        waiting("JOIN_NAK REJECTED for window 3")
        s.send(pack_hdr(K_JOIN, rank=0, seq=1000) + body)
        d = recv_one(s, 1.0)
        ok = d is not None and len(d) >= 48
        if ok:
            h = Hdr(d)
            nn, reason = struct.unpack_from(">Qi", d, 32)
            ok = h.kind == K_JOIN_NAK and nn == nonce2 and reason == -1003
        check(ok, "JOIN with window 3 (not a power of 2) is answered JOIN_NAK REJECTED", repr(d))
        # A JOIN whose name has no NUL within 32 bytes is dropped silently (step 2).
        c0 = sw.settled()
        body = JOIN_BODY.pack(0x99, 2, 64, 8, SW_VERSION, 0, 0, 0, 1, 0, 0, b"x" * 32)
        s.send(pack_hdr(K_JOIN, rank=0, seq=1000) + body)
        d = recv_one(s, 0.3)
        c1 = sw.wait_counters(lambda c: c["drop_JOIN"] > c0["drop_JOIN"])
        check(d is None and c1["drop_JOIN"] == c0["drop_JOIN"] + 1,
              "JOIN with an unterminated name is dropped silently (counter JOIN)",
              "reply %r, drop_JOIN %d -> %d" % (d, c0["drop_JOIN"], c1["drop_JOIN"]))
    finally:
        s.close()


def check_clean_job(sw):
    """Two clean-room ranks: INT32, FLOAT32 (two rounds, op 3), op 5, loss, hostile, LEAVE."""
    k, W, N = 64, 8, 2
    peers = [Peer(sw.addr, "cr-main", r, N, k, W) for r in range(N)]
    try:
        waiting("two clean-room ranks to join job cr-main")
        res, errs = run_ranks([p.join for p in peers], 15)
        if not check(not any(errs), "two clean-room ranks join (JOIN/JOIN_ACK)", repr(errs)):
            return
        p0, p1 = peers
        check(p0.k == k and p0.W == W and p0.session != 0 and 1 <= p0.job <= 64 and
              (p0.job, p0.session, p0.token, p0.k, p0.W) ==
              (p1.job, p1.session, p1.token, p1.k, p1.W),
              "JOIN_ACK grants k=64 W=8, the same job/session/token to both ranks",
              "p0 %s p1 %s" % ((p0.job, p0.session, p0.k, p0.W), (p1.job, p1.session, p1.k, p1.W)))

        rng = random.Random(1234)

        # ---- INT32 SUM, several sizes, slots reused (> W*k = 512 elements) ----
        sizes = [1, 64, 65, 500, 513, 5000]
        inputs = [[int_data(rng, n) for n in sizes] for _ in range(N)]
        # include the extremes so the wrapping add (§8.5) is exercised
        inputs[0][3][0], inputs[1][3][0] = (1 << 31) - 1, 1
        inputs[0][3][1], inputs[1][3][1] = -(1 << 31), -1

        def int_ops(r):
            return lambda: [peers[r].allreduce(inputs[r][i], DT_INT32) for i in range(len(sizes))]

        waiting("INT32 SUM all-reduces of sizes %s" % sizes)
        c_before = sw.settled()
        res, errs = run_ranks([int_ops(0), int_ops(1)])
        ok = not any(errs)
        detail = repr(errs)
        if ok:
            for i, n in enumerate(sizes):
                want = int_sum(inputs[0][i], inputs[1][i])
                if res[0][i] != want or res[1][i] != want:
                    ok = False
                    detail = "size %d differs" % n
                    break
        check(ok, "INT32 SUM of sizes %s exact on both ranks (5000 elements = 79 packets "
              "through 8 slots: ~10 rounds per slot)" % sizes, detail)
        c_after = sw.settled()
        npk = sum((n + k - 1) // k for n in sizes)
        check(c_after["completions"] - c_before["completions"] == npk,
              "switch completed exactly one round per packet (%d)" % npk,
              "completions +%d" % (c_after["completions"] - c_before["completions"]))

        # ---- FLOAT32 SUM, quantized (§8.1): large (two rounds, lag = W), small forced
        # two rounds (lag < W, send condition 2 on another slot), op 3 when offered ----
        fl_cases = [("two", 2000, None, "FLOAT32 SUM, 2000 elements: two rounds (lag = W = 8), "
                     "a zero block included"),
                    ("two", 150, None, "FLOAT32 SUM, 150 elements forced to two rounds "
                     "(lag = 3 < W)")]
        if p0.cap_bfp and p1.cap_bfp:
            fl_cases.append(("bfp", 500, None, "FLOAT32 SUM via op 3 (§8.7, 8 blocks = W, "
                             "one round, per-rank exponents)"))
        else:
            check(False, "switch offers op 3 (JOIN_ACK flag bit 1)", "flags %#x" % p0.ack_flags)
        for mode, n, _x, what in fl_cases:
            ins = [float_data(rng, n, k, zero_block=3 if n > 1000 else None) for _ in range(N)]
            if mode == "bfp":
                # make ranks' block exponents differ so the switch must shift (§8.7)
                ins[1] = [f32(x * (2.0 ** ((i // k) % 5 - 2))) for i, x in enumerate(ins[1])]
            waiting(what)
            res, errs = run_ranks([lambda r=r: peers[r].allreduce(ins[r], DT_FLOAT32, mode)
                                   for r in range(N)])
            if errs[0] or errs[1]:
                check(False, what, repr(errs))
                continue
            bad = float_errors(ins, res[0], k, f32_bound)
            check(not bad and same_bits(res[0], res[1]),
                  what + ": within the §8.1 bound, same bits on both ranks",
                  "%d elements out of bound, first %r" % (len(bad), bad[:1]))

        # ---- op 5, fixed point (§13) ----
        if p0.cap_fix:
            f = 16
            n = 700
            ins = [[f32(rng.uniform(-200.0, 200.0)) for _ in range(n)] for _ in range(N)]
            ins[0][5] = 40000.0           # valid per rank; 2*40000*2^16 > 2^31-1 -> invalid sum
            ins[1][5] = 40000.0
            ins[0][9] = math.inf          # invalid code from one rank sticks
            waiting("op 5 fixed-point SUM")
            res, errs = run_ranks([lambda r=r: peers[r].allreduce(ins[r], DT_FLOAT32, "fix", f=f)
                                   for r in range(N)])
            if errs[0] or errs[1]:
                check(False, "FLOAT32 SUM via op 5 (f=16)", repr(errs))
            else:
                bad = []
                for i in range(n):
                    if i in (5, 9):
                        continue
                    exact = ins[0][i] + ins[1][i]
                    if not abs(res[0][i] - exact) <= fix_bound(N, f, exact):
                        bad.append((i, res[0][i], exact))
                check(not bad and same_bits(res[0], res[1]),
                      "FLOAT32 SUM via op 5 (f=16, 700 elements): within the §13.3 bound, "
                      "same bits on both ranks", repr(bad[:2]))
                check(math.isnan(res[0][5]) and math.isnan(res[0][9]) and
                      math.isnan(res[1][5]) and math.isnan(res[1][9]),
                      "op 5: out-of-range sum and an Inf input come back as the invalid code (NaN)",
                      "%r %r" % (res[0][5], res[0][9]))
        else:
            check(False, "switch offers op 5 (JOIN_ACK flag bit 6)", "flags %#x" % p0.ack_flags)

        # ---- loss recovery from the worker side (§7.6, §9) ----
        n = 3000
        ins = [int_data(rng, n) for _ in range(N)]
        fins = [float_data(rng, 1500, k) for _ in range(N)]
        base0 = p0.g
        base1 = p1.g
        drop0 = lambda g, a: a == 0 and (g - base0) % 5 == 2          # noqa: E731
        drop1_rx = lambda g, a: a == 0 and (g - base1) % 7 == 3       # noqa: E731
        r0, r1 = p0.retransmits, p1.retransmits
        c_before = sw.settled()

        def lossy(r):
            def fn():
                a = peers[r].allreduce(ins[r], DT_INT32,
                                       drop_tx=drop0 if r == 0 else None,
                                       drop_rx=drop1_rx if r == 1 else None)
                b = peers[r].allreduce(fins[r], DT_FLOAT32, "two",
                                       drop_tx=(lambda g, at: at == 0 and g % 6 == 1) if r == 0
                                       else None,
                                       drop_rx=(lambda g, at: at == 0 and g % 4 == 0) if r == 1
                                       else (lambda g, at: at == 0 and g % 9 == 5))
                return a, b
            return fn

        waiting("INT32/FLOAT32 all-reduce with deliberate loss")
        res, errs = run_ranks([lossy(0), lossy(1)])
        if errs[0] or errs[1]:
            check(False, "loss recovery", repr(errs))
        else:
            want = int_sum(*ins)
            c_after = sw.wait_counters(lambda c: c["results_resent"] > c_before["results_resent"])
            check(res[0][0] == want and res[1][0] == want,
                  "INT32 SUM of 3000 exact although rank 0 dropped every 5th DATA and rank 1 "
                  "ignored every 7th RESULT (retransmits: %d, %d)" %
                  (p0.retransmits - r0, p1.retransmits - r1))
            bad = float_errors(fins, res[0][1], k, f32_bound)
            check(not bad and same_bits(res[0][1], res[1][1]),
                  "FLOAT32 two-round SUM with lost DATA and RESULTs (exponent packets "
                  "included) within the bound, same bits on both ranks", repr(bad[:1]))
            check(c_after["results_resent"] > c_before["results_resent"] and
                  p0.retransmits > r0 and p1.retransmits > r1,
                  "switch answered retransmitted DATA of complete rounds with RESULT "
                  "(results_resent +%d)" % (c_after["results_resent"] - c_before["results_resent"]))

        # ---- hostile DATA (§6.1): each dropped with its counter, job unharmed ----
        check_hostile_data(sw, peers, rng)

        # ---- clean LEAVE (§5.4) ----
        c_before = sw.settled()
        job = p0.job
        for p in peers:
            p.leave()
        c_after = sw.wait_counters(lambda c: c["jobs_ended"] > c_before["jobs_ended"])
        jobs = sw.get("/jobs")["jobs"]
        still = [j for j in jobs if j.get("id") == job or j.get("job") == "cr-main"
                 or j.get("name") == "cr-main"]
        check(c_after["jobs_ended"] == c_before["jobs_ended"] + 1 and not still,
              "LEAVE of both ranks ends the job silently (jobs_ended +1, gone from /jobs)",
              "jobs_ended +%d, jobs %r" % (c_after["jobs_ended"] - c_before["jobs_ended"], still))
        # a late DATA after the job ended: NO_JOB (§5.4/§5.5); no reply.
        late = p0.sent_log[max(p0.sent_log)]
        LATE["dgram"], LATE["job"] = late, p0.job
        p0.sock.send(late)
        d = recv_one(p0.sock, 0.3)
        c2 = sw.wait_counters(lambda c: c["drop_NO_JOB"] > c_after["drop_NO_JOB"])
        check(d is None and c2["drop_NO_JOB"] == c_after["drop_NO_JOB"] + 1,
              "DATA of the ended session is dropped as NO_JOB, no answer",
              "reply %r" % (d,))
    finally:
        for p in peers:
            if not p.left and p.session:
                p.leave()
            p.close()


LATE = {}


def check_hostile_data(sw, peers, rng):
    """§6.1: each malformed or forged DATA is dropped with its counter; the forgeries aim at
    the slot and round the job uses next, so one wrongly accepted would corrupt its sum."""
    p0, p1 = peers
    k, W = p0.k, p0.W
    g = p0.g
    slot = g % W
    seq = p0.rounds[slot]           # next round of that slot: a forged copy would start it

    def dg(**kw):
        a = dict(kind=K_DATA, job=p0.job, rank=0, session=p0.session, token=p0.token,
                 slot=slot, setbit=seq & 1, seq=seq, count=4, exp=0, op=0, tag=0x5A)
        a.update(kw)
        payload = kw.pop("payload", None)
        a.pop("payload", None)
        return pack_hdr(**a) + (payload if payload is not None else pack_i32([7, 7, 7, 7]))

    cases = [
        ("SHORT", b"IN\x01\x01" + b"\0" * 20),
        ("MAGIC", dg(magic=0x4E49)),
        ("VERSION", dg(version=2)),
        ("LENGTH", dg(payload=pack_i32([7, 7, 7]))),
        ("KIND", dg(kind=99)),
        ("NO_JOB", dg(job=64 if p0.job != 64 else 63)),
        ("NO_JOB", dg(job=0)),
        ("SESSION", dg(session=(p0.session + 1) & 0xFFFFFFFF or 1)),
        ("TOKEN", dg(token=p0.token ^ 0x00010000)),
        ("RANK", dg(rank=2)),
        ("SLOT", dg(slot=W)),
        ("COUNT", dg(count=k + 1, payload=pack_i32([1] * (k + 1)))),
        ("OP", dg(op=6)),
        ("SET", dg(setbit=(seq & 1) ^ 1)),
        ("FUTURE", dg(seq=seq + 2)),
    ]
    c0 = sw.settled()
    expect = {}
    for cause, d in cases:
        p0.sock.send(d)
        expect["drop_" + cause] = expect.get("drop_" + cause, 0) + 1
    # wrong source port, otherwise valid: SOURCE (§6.1 check 11)
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.connect(sw.addr)
    s.send(dg())
    expect["drop_SOURCE"] = 1
    # a stale copy: the first DATA rank 0 ever sent (slot 0, seq 0) -> STALE (§6.4)
    first = min(p0.sent_log)
    p0.sock.send(p0.sent_log[first])
    expect["drop_STALE"] = 1
    waiting("switch counters for the hostile DATA")
    c1 = sw.wait_counters(lambda c: all(c[n] - c0[n] >= v for n, v in expect.items()))
    wrong = ["%s +%d (want +%d)" % (n, c1[n] - c0[n], v) for n, v in expect.items()
             if c1[n] - c0[n] != v]
    check(not wrong and c1["contributions"] == c0["contributions"],
          "17 forged/malformed DATA each dropped with its §6.1 counter "
          "(SHORT MAGIC VERSION LENGTH KIND NO_JOB SESSION TOKEN RANK SOURCE SLOT COUNT OP SET "
          "FUTURE STALE), none added", "; ".join(wrong) +
          " contributions +%d" % (c1["contributions"] - c0["contributions"]))
    # none of them is answered: the peer sockets stay silent
    d = recv_one(s, 0.1)
    s.close()
    # a duplicate of a complete round: RESULT to that rank only (§6.2 "Duplicate, complete").
    # First drain late RESULTs of earlier retransmissions (§9: ignored by the worker).
    for p in peers:
        while recv_one(p.sock, 0.05) is not None:
            p.stale += 1
    last_g = max(p0.sent_log)
    dup = p0.sent_log[last_g]
    hdup = Hdr(dup)
    p0.sock.send(dup)
    waiting("RESULT answering a duplicate of a complete round")
    r = recv_one(p0.sock, 1.0)
    other = recv_one(p1.sock, 0.2)
    ok = r is not None and len(r) >= 32
    if ok:
        h = Hdr(r)
        ok = (h.kind == K_RESULT and h.slot == hdup.slot and h.seq == hdup.seq and
              h.tag == hdup.tag and h.rank == RANK_SWITCH and h.session == p0.session and
              len(r) == 32 + 4 * h.count and h.count == hdup.count)
    check(ok and other is None and d is None,
          "duplicate DATA of a complete round answered with its RESULT, to that rank only",
          "got %r, other rank got %r" % (r and r[:32], other and other[:32]))
    # the job still computes correctly, through the very slot/seq the forgeries aimed at
    ins = [int_data(rng, 700) for _ in range(2)]
    waiting("INT32 all-reduce after the hostile DATA")
    res, errs = run_ranks([lambda r=r: peers[r].allreduce(ins[r], DT_INT32) for r in range(2)])
    want = int_sum(*ins)
    check(not errs[0] and not errs[1] and res[0] == want and res[1] == want,
          "INT32 SUM after the hostile DATA is exact (job unharmed)", repr(errs))


def check_mismatch(sw):
    """§6.2 Mismatch: ranks disagree in a round -> ABORT MISMATCH to every rank."""
    peers = [Peer(sw.addr, "cr-mismatch", r, 2, 16, 8) for r in range(2)]
    try:
        waiting("ranks of job cr-mismatch to join")
        _res, errs = run_ranks([p.join for p in peers], 10)
        if any(errs):
            check(False, "mismatch job joins", repr(errs))
            return
        p0 = peers[0]
        # §6.3: every set starts complete at round -2 / -1 with all bits set, so a DATA
        # for round -2 is a duplicate of a complete, empty round: a count-0 RESULT.
        p0.sock.send(pack_hdr(K_DATA, job=p0.job, rank=0, session=p0.session,
                              token=p0.token, slot=3, setbit=0, seq=0xFFFFFFFE, count=0,
                              tag=0x77))
        waiting("count-0 RESULT for round -2")
        r = recv_one(p0.sock, 1.0)
        ok = r is not None and len(r) == 32
        if ok:
            h = Hdr(r)
            ok = (h.kind == K_RESULT and h.slot == 3 and h.setbit == 0 and
                  h.seq == 0xFFFFFFFE and h.count == 0 and h.tag == 0 and h.op == 0)
        check(ok, "DATA for the initial round -2 is answered with a count-0 RESULT "
              "(tag 0, op 0) (§6.3)", repr(r))
        # §5.5: DATA of an earlier session whose job id now holds another ACTIVE session
        c0 = sw.settled()
        if LATE.get("job") == p0.job:
            s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            s.connect(sw.addr)
            s.send(LATE["dgram"])
            s.close()
            c1 = sw.wait_counters(lambda c: c["drop_SESSION"] > c0["drop_SESSION"])
            check(c1["drop_SESSION"] == c0["drop_SESSION"] + 1 and
                  c1["contributions"] == c0["contributions"],
                  "DATA of an earlier session to a reused job id is dropped as SESSION (§5.5)")
            c0 = sw.settled()
        # rank 0: one op of 8 ints; rank 1: one op of 4 ints (other count, other tag).
        waiting("ABORT MISMATCH")
        res, errs = run_ranks([lambda: peers[0].allreduce([1] * 8, op_timeout=3),
                               lambda: peers[1].allreduce([1] * 4, op_timeout=3)], 10)
        codes = [getattr(e, "code", None) for e in errs]
        c1 = sw.wait_counters(lambda c: c["drop_MISMATCH"] > c0["drop_MISMATCH"])
        check(codes == [-1005, -1005] and c1["drop_MISMATCH"] == c0["drop_MISMATCH"] + 1 and
              c1["jobs_aborted"] == c0["jobs_aborted"] + 1,
              "ranks that disagree on a round both get ABORT MISMATCH (drop MISMATCH +1)",
              "codes %r errs %r" % (codes, errs))
        for p in peers:
            p.left = True                     # the job is gone
    finally:
        for p in peers:
            p.close()


def fnv1a32(name):
    h = 2166136261
    for b in name.encode():
        h = ((h ^ b) * 16777619) & 0xFFFFFFFF
    return h


def check_redirect(bindir, tmp):
    """§5.6: with --threads 2, a JOIN to thread 0 for a job of thread 1 is answered with
    REDIRECT; the job then runs at thread 1 (job id = shard*64 + entry + 1)."""
    name = next(n for n in ("redir-%d" % i for i in range(100)) if fnv1a32(n) % 2 == 1)
    d = os.path.join(tmp, "t2")
    os.mkdir(d)
    sw2 = Switch(bindir, d, threads=2)
    WD.cleanup.append(lambda: (sw2.proc.kill(), sw2.proc.wait(1)))
    peers = [Peer(sw2.addr, name, r, 2, 32, 8) for r in range(2)]
    try:
        waiting("join through REDIRECT at a 2-thread switch")
        ins = [int_data(random.Random(r), 300) for r in range(2)]

        def fn(r):
            def run():
                peers[r].join(5)
                return peers[r].allreduce(ins[r], DT_INT32)
            return run
        res, errs = run_ranks([fn(0), fn(1)], 10)
        want = int_sum(*ins)
        ok = not any(errs) and res[0] == want and res[1] == want
        c = sw2.wait_counters(lambda c: c["join_redirects"] >= 2) if ok else {}
        check(ok and all(p.addr[1] != sw2.port for p in peers) and
              c.get("join_redirects", 0) >= 2,
              "JOIN for another dataplane thread's job follows REDIRECT; INT32 SUM exact there "
              "(job id %s)" % (peers[0].job,), repr(errs))
        if not ok:
            return
        # §5.4: LEAVE with flags bit 0 ends the session: ABORT ABORTED to every rank.
        p0, p1 = peers
        p0.leave(abort=True)
        waiting("ABORT after an abort-LEAVE")
        aborts = []
        t_end = time.monotonic() + 0.5
        while time.monotonic() < t_end:
            r = recv_one(p1.sock, max(0.01, t_end - time.monotonic()))
            if r is None:
                break
            h = Hdr(r)
            if h.kind == K_ABORT and len(r) >= 48:
                aborts.append((h.job, h.session, h.token, h.rank,
                               struct.unpack_from(">Qi", r, 32)))
        check(aborts and all(a == (p1.job, p1.session, p1.token, RANK_SWITCH, (0, -1002))
                             for a in aborts),
              "LEAVE with the abort flag: the other rank gets ABORT ABORTED (nonce 0) of its "
              "session (%d copies)" % len(aborts), repr(aborts))
        p1.left = True
    finally:
        for p in peers:
            p.close()
        sw2.stop()


# ---------------------------------------------------------------------------
# Mixed job: one clean-room rank, one libina rank
# ---------------------------------------------------------------------------
CHILD = r'''
import json, os, sys, struct
spec = json.load(open(sys.argv[1]))
out = {"api": None, "jobs": []}
def run_binding(job):
    import numpy as np, ina
    os.environ["INA_FIXED_POINT"] = str(job.get("fixed", 0))
    ctx = ina.Context(switch=spec["switch"], rank=spec["rank"], world_size=spec["world"],
                      job=job["name"], elems_per_packet=spec["k"], window=spec["W"],
                      timeout_ms=8000, join_timeout_ms=10000, lanes=1)
    res = []
    try:
        for op in job["ops"]:
            dt = np.int32 if op["dtype"] == 0 else np.float32
            a = np.array(op["data"], dtype=dt)
            ina.allreduce(a, op="sum", ctx=ctx)
            res.append([int(x) for x in a] if op["dtype"] == 0 else [float(x) for x in a])
        info = ctx.info()
        return {"res": res, "info": {k: (v if isinstance(v, (int, float, str, bool)) else str(v))
                                     for k, v in dict(info).items()}}
    finally:
        ctx.close()
def run_ctypes(job):
    import ctypes
    lib = ctypes.CDLL(spec["library"])
    lib.ina_init_env.argtypes = [ctypes.POINTER(ctypes.c_void_p)]
    lib.ina_allreduce.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p,
                                  ctypes.c_size_t, ctypes.c_int, ctypes.c_int]
    lib.ina_finalize.argtypes = [ctypes.c_void_p]
    lib.ina_err_name.restype = ctypes.c_char_p
    lib.ina_last_error.restype = ctypes.c_char_p
    lib.ina_last_error.argtypes = [ctypes.c_void_p]
    os.environ.update({"INA_SWITCH": spec["switch"], "INA_RANK": str(spec["rank"]),
                       "INA_WORLD_SIZE": str(spec["world"]), "INA_JOB": job["name"],
                       "INA_ELEMS": str(spec["k"]), "INA_WINDOW": str(spec["W"]),
                       "INA_LANES": "1", "INA_TIMEOUT_MS": "8000",
                       "INA_JOIN_TIMEOUT_MS": "10000", "INA_QUIET": "1",
                       "INA_FIXED_POINT": str(job.get("fixed", 0))})
    ctx = ctypes.c_void_p()
    rc = lib.ina_init_env(ctypes.byref(ctx))
    if rc != 0:
        raise RuntimeError("ina_init_env: %s %s" % (lib.ina_err_name(rc),
                                                     lib.ina_last_error(None)))
    res = []
    try:
        for op in job["ops"]:
            n = len(op["data"])
            if op["dtype"] == 0:
                a = (ctypes.c_int32 * n)(*op["data"])
            else:
                a = (ctypes.c_float * n)(*op["data"])
            rc = lib.ina_allreduce(ctx, a, a, n, op["dtype"], 0)
            if rc != 0:
                raise RuntimeError("ina_allreduce: %s %s" % (lib.ina_err_name(rc),
                                                             lib.ina_last_error(ctx)))
            res.append([int(x) for x in a] if op["dtype"] == 0 else [float(x) for x in a])
        return {"res": res}
    finally:
        lib.ina_finalize(ctx)
api = spec["api"]
if api == "auto":
    try:
        import numpy, ina  # noqa
        api = "binding"
    except ImportError:
        api = "ctypes"
if api == "binding":
    runner, out["api"] = run_binding, "python binding (ina.Context, ina.allreduce)"
else:
    runner, out["api"] = run_ctypes, "libina C API via ctypes (ina(3); the binding needs numpy)"
try:
    for job in spec["jobs"]:
        out["jobs"].append(runner(job))
except Exception as e:
    out["error"] = "%s: %s" % (type(e).__name__, e)
print(json.dumps(out))
'''


def check_mixed(sw, args):
    k, W, N = 64, 8, 2
    rng = random.Random(99)
    f = 20
    int_sizes = [300, 1500]
    jobs = [
        {"name": "mixed-q", "ops": (
            [{"dtype": 0, "data": int_data(rng, n)} for n in int_sizes] +
            [{"dtype": 1, "data": float_data(rng, 400, k), "mode": "bfp"},     # 7 blocks <= W
             {"dtype": 1, "data": float_data(rng, 1800, k), "mode": "two"}])},  # 29 blocks > W
        {"name": "mixed-fix", "fixed": f, "ops": [
            {"dtype": 1, "data": [f32(rng.uniform(-50, 50)) for _ in range(1000)],
             "mode": "fix"},
            # 2 blocks <= W: op 3 would also apply; with f the op is 5 (§13.2 "at any size")
            {"dtype": 1, "data": [f32(rng.uniform(-50, 50)) for _ in range(100)],
             "mode": "fix"}]},
    ]
    mine = [[(op["dtype"], [f32(x * 1.25) if op["dtype"] else rng.randint(-(1 << 31),
             (1 << 31) - 1) for x in op["data"]]) for op in job["ops"]] for job in jobs]
    lib = os.path.join(args.libdir, "libina.so")
    spec = {"switch": "127.0.0.1:%d" % sw.port, "rank": 1, "world": N, "k": k, "W": W,
            "library": lib, "api": args.libina_api, "jobs": [{"name": j["name"], "fixed": j.get("fixed", 0),
                                      "ops": [{"dtype": o["dtype"], "data": o["data"]}
                                              for o in j["ops"]]} for j in jobs]}
    env = dict(os.environ)
    env["PYTHONPATH"] = args.pythondir + (os.pathsep + env["PYTHONPATH"]
                                          if env.get("PYTHONPATH") else "")
    env["INA_LIBRARY"] = lib
    env["INA_QUIET"] = "1"
    # An ASan build's libina can only be loaded with the ASan runtime preloaded, and only
    # into the libina rank: the daemons are linked with their own (tests/scripts/
    # test_protocol_peers.sh sets INA_PEER_PRELOAD there).
    if os.environ.get("INA_PEER_PRELOAD"):
        env["LD_PRELOAD"] = os.environ["INA_PEER_PRELOAD"]
        env["ASAN_OPTIONS"] = "detect_leaks=0:abort_on_error=1"
    for v in ("INA_FAULT", "INA_ONE_ROUND", "INA_FLOAT_ADD", "INA_SPARSE", "INA_SECRET_FILE"):
        env.pop(v, None)
    specpath = os.path.join(args.tmp, "child.json")
    with open(specpath, "w") as fh:
        json.dump(spec, fh)
    child = subprocess.Popen([sys.executable, "-c", CHILD, specpath], stdin=subprocess.DEVNULL,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, text=True)
    WD.cleanup.append(lambda: (child.kill(), child.wait(1)))
    mine_res = []
    err = None
    try:
        for ji, job in enumerate(jobs):
            waiting("mixed job %s: clean-room rank 0 with libina rank 1" % job["name"])
            p = Peer(sw.addr, job["name"], 0, N, k, W)
            try:
                p.join(12)
                rr = []
                for oi, op in enumerate(job["ops"]):
                    mode = op.get("mode")
                    if mode == "bfp" and not p.cap_bfp:
                        mode = "two"
                    if mode == "fix" and not p.cap_fix:
                        raise RuntimeError("switch does not offer op 5")
                    # in the first job rank 0 also loses some of its own DATA
                    drop = (lambda g, a: a == 0 and g % 11 == 4) if ji == 0 else None
                    rr.append(p.allreduce(mine[ji][oi][1], op["dtype"], mode, f=f,
                                          drop_tx=drop))
                mine_res.append(rr)
                p.leave()
            finally:
                p.close()
    except Exception as e:
        err = e
    waiting("the libina child process to finish")
    try:
        out, cerr = child.communicate(timeout=15)
    except subprocess.TimeoutExpired:
        child.kill()
        out, cerr = child.communicate()
    try:
        cres = json.loads(out.strip().splitlines()[-1])
    except Exception:
        cres = {"error": "no JSON from child: %r %r" % (out[-300:], cerr[-500:])}
    if err is not None or cres.get("error"):
        check(False, "mixed job (clean-room rank 0 + libina rank 1)",
              "peer: %r; libina: %s" % (err, cres.get("error")))
        return
    print("# libina side used the %s" % cres["api"], flush=True)
    # job 1
    lres = cres["jobs"][0]["res"]
    names = ["INT32 SUM 300", "INT32 SUM 1500 (slots reused)",
             "FLOAT32 SUM 400 (7 blocks <= W: op 3 if offered)",
             "FLOAT32 SUM 1800 (two rounds, lag = W)"]
    for oi, op in enumerate(jobs[0]["ops"]):
        a, b = mine[0][oi][1], op["data"]
        r_mine, r_lib = mine_res[0][oi], lres[oi]
        if op["dtype"] == 0:
            want = int_sum(a, b)
            check(r_mine == want and r_lib == want,
                  "mixed job: %s exact on the clean-room and the libina rank" % names[oi])
        else:
            bad = float_errors([a, b], r_mine, k, f32_bound)
            check(not bad and same_bits(r_mine, r_lib),
                  "mixed job: %s within the §8.1 bound, bit-identical on both ranks" % names[oi],
                  "%d out of bound %r; same bits %s" % (len(bad), bad[:1],
                                                       same_bits(r_mine, r_lib)))
    # job 2: fixed point
    for oi, what in ((0, "1000 (16 blocks)"), (1, "100 (2 blocks <= W: op 5, not op 3)")):
        a, b = mine[1][oi][1], jobs[1]["ops"][oi]["data"]
        r_mine, r_lib = mine_res[1][oi], cres["jobs"][1]["res"][oi]
        bad = [(i, r_mine[i]) for i in range(len(a))
               if not abs(r_mine[i] - (a[i] + b[i])) <= fix_bound(2, f, a[i] + b[i])]
        check(not bad and same_bits(r_mine, r_lib),
              "mixed job: FLOAT32 SUM %s via op 5 (f=20, INA_FIXED_POINT) within the §13.3 "
              "bound, bit-identical on both ranks" % what,
              "%r same %s" % (bad[:2], same_bits(r_mine, r_lib)))


# ---------------------------------------------------------------------------
def main():
    global VERBOSE, WD
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bindir", required=True)
    ap.add_argument("--libdir", default=None)
    ap.add_argument("--pythondir", default=None)
    ap.add_argument("-v", "--verbose", action="store_true")
    ap.add_argument("--deadline", type=float, default=60.0,
                    help="global deadline in seconds (default 60)")
    ap.add_argument("--libina-api", choices=("auto", "binding", "ctypes"), default="auto",
                    help="how the mixed job's libina rank is driven: the ina Python binding "
                         "(needs numpy), libina's C API through ctypes, or auto (binding if "
                         "numpy imports)")
    args = ap.parse_args()
    VERBOSE = args.verbose
    if args.libdir is None:
        args.libdir = os.path.join(os.path.dirname(os.path.abspath(args.bindir)), "lib")
    if args.pythondir is None:
        args.pythondir = os.path.join(os.path.dirname(os.path.abspath(args.bindir)), "python")
    WD = Watchdog(args.deadline)
    tmp = tempfile.mkdtemp(prefix="ina-peer-worker-")
    args.tmp = tmp
    sw = None
    t0 = time.monotonic()
    try:
        check_local()
        sw = Switch(args.bindir, tmp)
        WD.cleanup.append(lambda: (sw.proc.kill(), sw.proc.wait(1)))
        WD.cleanup.append(lambda: shutil.rmtree(tmp, ignore_errors=True))
        check_hostile_joins(sw)
        check_clean_job(sw)
        check_mismatch(sw)
        check_redirect(args.bindir, tmp)
        if os.path.exists(os.path.join(args.libdir, "libina.so")):
            check_mixed(sw, args)
        else:
            check(False, "mixed job: libina not found in %s" % args.libdir)
    except Exception as e:
        import traceback
        traceback.print_exc()
        check(False, "unexpected exception: %r" % (e,))
    finally:
        if sw is not None:
            sw.stop()
            if VERBOSE or not all(RESULTS):
                try:
                    tail = open(sw.errpath).read().splitlines()
                    for line in tail[-25:]:
                        print("# switch: " + line)
                except OSError:
                    pass
        shutil.rmtree(tmp, ignore_errors=True)
    npass = sum(RESULTS)
    print("# %d/%d checks passed in %.1f s" % (npass, len(RESULTS), time.monotonic() - t0))
    sys.exit(0 if RESULTS and all(RESULTS) else 1)


if __name__ == "__main__":
    main()

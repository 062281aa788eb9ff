#!/usr/bin/env python3
"""Clean-room peer and conformance test for block-sparse all-reduce
(docs/PROTOCOL.md section 17, wire ops 7 and 8).

Written from PROTOCOL.md alone (plus the user docs for how to start the tools
and how to ask libina for sparse mode).  It implements just enough of a
worker (sections 2-7: JOIN, DATA/RESULT, LEAVE) to join a job at ina-switch
and run block-sparse all-reduces by the schedule of section 17.5, then checks:

  * the section 17.10 worked example, live, byte for byte;
  * 2 and 3 clean-room ranks, INT32 (op 7) and FLOAT32 (op 7 quantized,
    op 8 binary32 adds), blocks non-zero on one rank, on both, on none;
  * all-zero and all-non-zero vectors;
  * a mixed job: one clean-room rank and one libina rank (Python binding);
  * loss on the worker side (own DATA dropped, RESULTs ignored);
  * hostile DATA: malformed payloads (dropped as SPARSE, round still
    completes) and a place mismatch (job aborted with MISMATCH).

Usage: python3 peer_sparse.py --bindir DIR [--libdir DIR] [--pythondir DIR] [-v]
Standard library only.  Exits 0 only if every check passed.
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

# ---------------------------------------------------------------- constants
# §3 header, §4 kinds, §4.3 reason codes, §17.2/§17.3 sparse constants.
MAGIC = 0x494E
VERSION = 1
K_DATA, K_RESULT = 1, 2
K_JOIN, K_JOIN_ACK, K_JOIN_NAK, K_LEAVE, K_ABORT, K_REDIRECT = 16, 17, 18, 19, 20, 21
K_JOIN_WAIT = 27
RANK_SWITCH = 0xFFFF
FLAG_ABORT = 0x0001          # §3 flags bit 0 of LEAVE
FLAG_CAP_F32 = 0x0004        # §3 flags bit 2 of JOIN_ACK (op 4; op 8 needs it too, §17.1)
FLAG_CAP_SPARSE = 0x0100     # §3 flags bit 8 of JOIN_ACK (§17.1)
OP_SPARSE_I32, OP_SPARSE_F32 = 7, 8   # §3 byte 30, §17.1
END = 0xFFFFFFFF             # §17.2
INFO_HAS = 1 << 31           # §17.3 info bit 31
INFO_FIRST = 1 << 30         # §17.3 info bit 30
EXP_ZERO, EXP_NONFINITE = -32768, 32767   # §8.1
ERR_MISMATCH = -1005         # §4.3
DT_INT32, DT_FLOAT32 = 0, 1  # §1 dtype values
RED_SUM = 0                  # §1 reduction values
SPARSE_MODE_ON = 1           # §17.6: s = mode + 16*B, mode 1 ON

# §3: 32-byte header, big-endian: magic, version, kind, job, rank, session,
# token, slot (bit 31 = set), seq, count, exp (int16), flags, op, tag.
HDR = struct.Struct(">HBBHHIIIIHhHBB")
assert HDR.size == 32
# §4.1: JOIN / JOIN_ACK body, 64 bytes.
JOIN_BODY = struct.Struct(">QHHIIIHBBHH32s")
assert JOIN_BODY.size == 64

M64 = (1 << 64) - 1
VERBOSE = False
WAITING = ["start-up"]       # what we wait for, printed by the global deadline
CHILDREN = []                # processes to kill, always
RESULTS = []                 # (ok, text)


def log(*a):
    if VERBOSE:
        print("#", *a, file=sys.stderr, flush=True)


def check(ok, text):
    RESULTS.append((bool(ok), text))
    print(("ok - " if ok else "FAIL - ") + text, flush=True)
    return ok


# ---------------------------------------------------------------- numerics
def i32(v):
    """Wrap to signed 32-bit two's complement (§8.5)."""
    v &= 0xFFFFFFFF
    return v - (1 << 32) if v & 0x80000000 else v


def f32(x):
    """Round a double to the nearest binary32 (RNE)."""
    return struct.unpack(">f", struct.pack(">f", x))[0]


def f32_bits(x):
    return struct.unpack(">I", struct.pack(">f", x))[0]


def bits_f32(b):
    return struct.unpack(">f", struct.pack(">I", b & 0xFFFFFFFF))[0]


def ceil_log2(n):
    """L = ceil(log2 N), 0 for N = 1 (§8.1)."""
    return 0 if n <= 1 else (n - 1).bit_length()


def block_exp(xs):
    """§8.1 block exponent of a rank: NONFINITE, ZERO, or e with
    2^(e-1) <= max|x| < 2^e (frexp)."""
    m = 0.0
    for x in xs:
        if math.isnan(x) or math.isinf(x):
            return EXP_NONFINITE
        m = max(m, abs(x))
    if m == 0.0:
        return EXP_ZERO
    return math.frexp(m)[1]


def quantize(x, E, L):
    """§8.1 encode with the agreed exponent E."""
    if E == EXP_ZERO:
        return 0
    if E == EXP_NONFINITE:
        if math.isnan(x):
            return 1 << 18
        if math.isinf(x):
            return 1 if x > 0 else 1 << 9
        return 0
    Q = (1 << (31 - L)) - 1
    v = math.ldexp(x, 31 - L - E)            # exact in double (§8.1)
    v = max(-Q, min(Q, v))
    return int(round(v))                       # Python round(): half to even


def dequantize(q, E, L):
    """§8.1 decode of a summed int32 with exponent E (FLOAT32)."""
    if E == EXP_ZERO:
        return 0.0
    if E == EXP_NONFINITE:
        P, Mm, Qn = q & 0x1FF, (q >> 9) & 0x1FF, (q >> 18) & 0x1FF
        if Qn > 0 or (P > 0 and Mm > 0):
            return float("nan")
        if P > 0:
            return float("inf")
        if Mm > 0:
            return float("-inf")
        return float("nan")
    return f32(math.ldexp(float(q), E + L - 31))


def op_seed(n, count, dtype, reduction, s=0):
    """§7.2 op seed, with §17.6's extra term ^ s << 16."""
    x = ((n * 0x9E3779B97F4A7C15) ^ (count * 0xC2B2AE3D27D4EB4F) ^ dtype
         ^ (reduction << 8) ^ (s << 16)) & M64
    x ^= x >> 31
    x = (x * 0xBF58476D1CE4E5B9) & M64
    x ^= x >> 29
    return x


def packet_tag(seed, p):
    """§7.2 packet tag."""
    y = ((seed + p) * 0xD6E8FEB86659FD93) & M64
    return ((y ^ (y >> 32)) >> 24) & 0xFF


# ---------------------------------------------------------------- sparse payload
def parse_sparse_payload(words, k):
    """§17.3: returns (B, places[(pos, next, info)], blocks{j: words}) or
    raises ValueError when not well formed."""
    if len(words) < 1:
        raise ValueError("count < 1")
    layout = words[0]
    B = layout >> 16
    np_ = (layout >> 8) & 0xFF
    if layout & 0xFF:
        raise ValueError("layout low byte not 0")
    if not 1 <= B <= 4096:
        raise ValueError("B out of range")
    if 1 + np_ * (3 + B) > k:
        raise ValueError("1 + np(3+B) > k")
    if len(words) < 1 + 3 * np_:
        raise ValueError("short descriptors")
    places = []
    nhas = 0
    for j in range(np_):
        pos, nxt, info = words[1 + 3 * j], words[2 + 3 * j], words[3 + 3 * j]
        if info & 0x3FFF0000:
            raise ValueError("info bits 29..16 set")
        if pos == END:
            raise ValueError("pos is END")
        first, has = bool(info & INFO_FIRST), bool(info & INFO_HAS)
        if first and has:
            raise ValueError("FIRST and HAS")
        if nxt != END and not (nxt >= pos if first else nxt > pos):
            raise ValueError("next before pos")
        places.append((pos, nxt, info))
        nhas += has
    if len(words) != 1 + 3 * np_ + B * nhas:
        raise ValueError("count is not 1 + 3np + B*HAS")
    blocks = {}
    off = 1 + 3 * np_
    for j, (pos, nxt, info) in enumerate(places):
        if info & INFO_HAS:
            blocks[j] = words[off:off + B]
            off += B
    return B, places, blocks


def info_exp(info):
    e = info & 0xFFFF
    return e - 0x10000 if e & 0x8000 else e


# ---------------------------------------------------------------- the peer
class PeerError(Exception):
    def __init__(self, code, what):
        super().__init__("%s (%d)" % (what, code))
        self.code = code


class Place:
    __slots__ = ("col", "pos", "first", "E", "next", "has", "exp")

    def __init__(self, col, pos, first, E):
        self.col, self.pos, self.first, self.E = col, pos, first, E
        self.next = END
        self.has = False
        self.exp = 0


class Packet:
    __slots__ = ("p", "g", "slot", "seq", "tag", "places", "data", "sent",
                 "deadline", "timeout", "tx", "ignored_result", "result")


class Peer:
    """A clean-room worker: one UDP socket connect()ed to the switch (§2)."""

    def __init__(self, addr, job, rank, world, elems, window, float_add=False):
        self.addr = addr
        self.job_name = job
        self.rank = rank
        self.N = world
        self.elems, self.window = elems, window
        self.float_add = float_add
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.connect(addr)
        self.nonce = random.getrandbits(64) or 1           # §7.1: nonzero
        self.job = self.session = self.token = 0
        self.k = self.W = 0
        self.ack_flags = 0
        self.opn = 0           # §1 op number n of the last non-empty op
        self.g = 0             # §1 stream index of the next packet
        self.slot_use = []     # §1 use count of each slot (seq of its next round)
        self.retransmits = 0
        self.stale = 0
        self.tx_log = []       # (p, bytes) of the last op, for checks
        self.rx_bytes_sent = 0
        self.aborted = None

    # -- §7.1 join -----------------------------------------------------
    def _join_datagram(self, remaining_ms):
        name = self.job_name.encode()
        body = JOIN_BODY.pack(self.nonce, self.N, self.elems, self.window,
                              100, 0, 0, 0, 1, 0, 0, name)   # lane 0, nlanes 1 fixed
        # §3 JOIN header: job, session, token 0; rank = proposed rank;
        # seq = remaining join time in ms (§5.2 step 7, §7.1).
        hdr = HDR.pack(MAGIC, VERSION, K_JOIN, 0, self.rank, 0, 0, 0,
                       max(1, remaining_ms), 0, 0, 0, 0, 0)
        return hdr + body

    def join(self, timeout=8.0):
        WAITING[0] = "JOIN_ACK for %s rank %d" % (self.job_name, self.rank)
        t0 = time.monotonic()
        deadline = t0 + timeout
        delays = [0.1, 0.2, 0.4, 0.8]          # §7.1 schedule, then 1 s
        nsent = 0
        next_send = t0
        while True:
            now = time.monotonic()
            if now >= deadline:
                raise PeerError(-1001, "join timeout")
            if now >= next_send:
                try:
                    self.sock.send(self._join_datagram(int((deadline - now) * 1000)))
                except ConnectionRefusedError:
                    pass                          # §7.1: ignored while joining
                next_send = now + (delays[nsent] if nsent < len(delays) else 1.0)
                nsent += 1
            self.sock.settimeout(max(0.001, min(next_send, deadline) - time.monotonic()))
            try:
                d = self.sock.recv(65536)
            except socket.timeout:
                continue
            except ConnectionRefusedError:
                continue
            if len(d) < 32:
                continue
            h = HDR.unpack_from(d)
            if h[0] != MAGIC:
                continue
            kind = h[2]
            if h[1] != VERSION:
                if kind in (K_JOIN_ACK, K_JOIN_NAK):
                    raise PeerError(-1008, "reply of another version")
                continue
            if kind == K_JOIN_ACK and len(d) >= 96:
                b = JOIN_BODY.unpack_from(d, 32)
                if b[0] != self.nonce:
                    continue
                world, elems, window, lane, nlanes = b[1], b[2], b[3], b[7], b[8]
                if (world != self.N or lane != 0 or nlanes not in (0, 1)
                        or not 1 <= elems <= 16368
                        or not (1 <= window <= 4096 and window & (window - 1) == 0)):
                    raise PeerError(-1008, "JOIN_ACK grants invalid parameters")
                self.job, self.session, self.token = h[3], h[5], h[6]
                self.k, self.W = elems, window
                self.ack_flags = h[11]
                self.slot_use = [0] * self.W
                self.L = ceil_log2(self.N)
                log("rank", self.rank, "joined job", self.job, "k", self.k, "W", self.W,
                    "flags 0x%x" % self.ack_flags)
                return
            if kind == K_JOIN_NAK and len(d) >= 48:
                nonce, reason = struct.unpack_from(">Qi", d, 32)
                if nonce == self.nonce:
                    raise PeerError(reason, "JOIN_NAK")
            if kind == K_REDIRECT and len(d) >= 48:
                nonce, _r, port = struct.unpack_from(">QiH", d, 32)
                if nonce == self.nonce:
                    if port == 0:
                        raise PeerError(-1008, "REDIRECT to port 0")
                    self.addr = (self.addr[0], port)
                    self.sock.connect(self.addr)
                    next_send = time.monotonic()
            # JOIN_WAIT and anything else: ignored (§7.1)

    def leave(self, abort=False):
        hdr = HDR.pack(MAGIC, VERSION, K_LEAVE, self.job, self.rank, self.session,
                       self.token, 0, 0, 0, 0, FLAG_ABORT if abort else 0, 0, 0)
        for _ in range(2):                       # §7.1: sent twice
            try:
                self.sock.send(hdr)
            except OSError:
                pass

    def close(self):
        self.sock.close()

    def send_raw(self, datagram):
        self.sock.send(datagram)

    def data_header(self, slot, seq, count, op, tag):
        # §17.1 "Header": slot, seq, tag as §7.2; count = payload words;
        # exp 0; flags 0; op 7 or 8.  §3: slot bit 31 = set = seq & 1.
        return HDR.pack(MAGIC, VERSION, K_DATA, self.job, self.rank, self.session,
                        self.token, slot | ((seq & 1) << 31), seq & 0xFFFFFFFF,
                        count, 0, 0, op, tag)

    # -- §17 block-sparse all-reduce ------------------------------------
    def sparse_allreduce(self, vals, dtype, B, drop_tx=(), drop_rx=(),
                         hostile=None, op_timeout=10.0, seed=None):
        """Run one block-sparse SUM (§17.5-§17.7).  vals: list of int or
        float (binary32 values).  drop_tx: packet indices whose first copy
        is not sent (loss).  drop_rx: packet indices whose first RESULT is
        ignored (lost RESULT).  hostile: {p: [raw datagram builders]} sent
        before packet p's first copy.  Returns the output list."""
        count = len(vals)
        assert count > 0
        k, W, L = self.k, self.W, self.L
        if not self.ack_flags & FLAG_CAP_SPARSE:
            raise PeerError(-1007, "switch does not offer sparse")
        if dtype == DT_FLOAT32 and self.float_add and self.ack_flags & FLAG_CAP_F32:
            op = OP_SPARSE_F32                                  # §17.1 op 8
        else:
            op = OP_SPARSE_I32                                  # §17.1 op 7
        # §17.2 terms
        C = min(255, (k - 1) // (B + 3))
        if C < 1:
            raise PeerError(-1007, "C = 0: would go dense")
        nblocks = -(-count // B)
        M = max(1, min(32, nblocks // (2 * W * C)))
        K = -(-nblocks // M)
        if seed is None:
            self.opn += 1
            s = SPARSE_MODE_ON + 16 * B                          # §17.6 tag term
            seed = op_seed(self.opn, count, dtype, RED_SUM, s)
        self.last_geometry = dict(C=C, M=M, K=K, nblocks=nblocks, op=op)

        blocks = [vals[b * B:(b + 1) * B] for b in range(nblocks)]
        if dtype == DT_INT32:
            nz = [any(x != 0 for x in blk) for blk in blocks]    # §17.2 INT32
            exps = [0] * nblocks
        else:
            # §17.2: zero when every |x| <= t, t = 0; NaN is never zero.
            nz = [any(not (abs(x) <= 0.0) for x in blk) for blk in blocks]
            exps = [block_exp(blk) for blk in blocks]

        def col_range(c):
            return c * M, min((c + 1) * M, nblocks)

        def next_nz(frm, c):
            for b in range(frm, col_range(c)[1]):
                if nz[b]:
                    return b
            return END

        out = [None] * count
        writes = [0] * nblocks
        g0 = self.g
        U = 0
        packets = []
        inflight = {}
        ended = False
        npackets = None
        self.tx_log = []
        p = 0
        t_last_progress = time.monotonic()
        WAITING[0] = "RESULTs of sparse op %d (job %s rank %d)" % (self.opn, self.job_name, self.rank)

        def encode_block(blk, E):
            words = []
            for x in blk:
                if dtype == DT_INT32:
                    words.append(x & 0xFFFFFFFF)
                elif op == OP_SPARSE_F32:
                    words.append(f32_bits(x))                     # §8.8
                else:
                    words.append(quantize(x, E, L) & 0xFFFFFFFF)  # §8.1
            words += [0] * (B - len(words))                       # §17.5 pad
            return words

        def build(p):
            places = []
            if p >= W:                                            # §17.5 rule 1
                for pl in packets[p - W].places:
                    if pl.next != END:
                        places.append(Place(pl.col, pl.next, False, pl.exp))
            nonlocal U
            while len(places) < C and U < K:                      # §17.5 rule 2
                places.append(Place(U, U * M, True, None))
                U += 1
            if not places and all(not packets[q].places
                                  for q in range(max(0, p - W + 1), p)):
                return None                                       # §17.5 the end
            words = [(B << 16) | (len(places) << 8)]              # §17.3 layout
            blockwords = []
            for pl in places:
                pl.next = next_nz(pl.pos if pl.first else pl.pos + 1, pl.col)
                pl.has = (not pl.first) and nz[pl.pos]
                e = 0
                if op == OP_SPARSE_I32 and dtype != DT_INT32:
                    e = exps[pl.next] if pl.next != END else EXP_ZERO
                info = (INFO_HAS if pl.has else 0) | (INFO_FIRST if pl.first else 0) | (e & 0xFFFF)
                words += [pl.pos, pl.next, info]
                if pl.has:
                    blockwords += encode_block(blocks[pl.pos], pl.E)
            words += blockwords
            pk = Packet()
            pk.p, pk.g = p, g0 + p
            pk.slot = pk.g % W
            pk.seq = self.slot_use[pk.slot]
            self.slot_use[pk.slot] += 1
            pk.tag = packet_tag(seed, p)
            pk.places = places
            pk.data = self.data_header(pk.slot, pk.seq, len(words), op, pk.tag) + \
                struct.pack(">%dI" % len(words), *words)
            pk.tx = 0
            pk.timeout = 0.1
            pk.ignored_result = None
            pk.result = None
            return pk

        def transmit(pk, now):
            if pk.tx == 0 and hostile and pk.p in hostile:
                for mk in hostile[pk.p]:
                    self.send_raw(mk(self, pk))
            if pk.tx == 0 and pk.p in drop_tx:
                log("rank", self.rank, "drops its DATA p", pk.p)
            else:
                self.sock.send(pk.data)
                self.tx_log.append((pk.p, pk.data))
            if pk.tx:
                self.retransmits += 1
            pk.tx += 1
            pk.deadline = now + pk.timeout
            pk.timeout = min(pk.timeout * 2, 1.0)                  # §7.6 doubling, cap 1 s

        def fail(code, why):
            raise PeerError(code, why)

        def on_result(d):
            # §7.5 rules 1-6
            if len(d) > 32 + max(4 * k, 64) or len(d) < 32:
                self.stale += 1
                return
            h = HDR.unpack_from(d)
            magic, ver, kind, job, _rk, sess, tok, slotw, seq, cnt, _exp, _fl, rop, rtag = h
            if magic != MAGIC or ver != VERSION:
                self.stale += 1
                return
            if kind in (K_DATA, K_RESULT) and len(d) != 32 + 4 * cnt:
                self.stale += 1
                return
            if kind == K_ABORT and sess == self.session and tok == self.token:
                reason = struct.unpack_from(">i", d, 40)[0] if len(d) >= 48 else -1002
                self.aborted = reason
                fail(reason, "ABORT")
            if kind != K_RESULT:
                self.stale += 1
                return
            slot, setbit = slotw & 0x7FFFFFFF, slotw >> 31
            if job != self.job or sess != self.session or tok != self.token or \
                    slot >= W or setbit != (seq & 1):
                self.stale += 1
                return
            pk = inflight.get(slot)
            if pk is None or pk.seq != seq:
                self.stale += 1
                return
            if rtag != pk.tag or rop != op:
                self.stale += 1
                return
            if pk.ignored_result is None and pk.p in drop_rx:
                pk.ignored_result = d            # simulate a lost RESULT
                log("rank", self.rank, "ignores RESULT p", pk.p)
                return
            # §17.7 checks
            words = struct.unpack_from(">%dI" % cnt, d, 32)
            try:
                rB, rplaces, rblocks = parse_sparse_payload(words, k)
            except ValueError as e:
                fail(ERR_MISMATCH, "RESULT not well formed: %s" % e)
            if words[0] != (B << 16) | (len(pk.places) << 8):
                fail(ERR_MISMATCH, "RESULT layout differs")
            for j, (pl, (rpos, rnext, rinfo)) in enumerate(zip(pk.places, rplaces)):
                lo, hi = col_range(pl.col)
                if (rpos != pl.pos or bool(rinfo & INFO_FIRST) != pl.first
                        or (pl.has and not rinfo & INFO_HAS)
                        or (not pl.first and not rinfo & INFO_HAS)
                        or rnext > pl.next
                        or (rnext != END and not lo <= rnext < hi)):
                    fail(ERR_MISMATCH, "RESULT place %d inconsistent" % j)
            # decode (§17.7)
            for j, (pl, (rpos, rnext, rinfo)) in enumerate(zip(pk.places, rplaces)):
                lo, hi = col_range(pl.col)
                if rinfo & INFO_HAS:
                    blk = rblocks[j]
                    base = pl.pos * B
                    n_el = min(B, count - base)
                    for i in range(n_el):
                        w = blk[i]
                        if dtype == DT_INT32:
                            out[base + i] = i32(w)
                        elif op == OP_SPARSE_F32:
                            out[base + i] = bits_f32(w)
                        else:
                            out[base + i] = dequantize(i32(w), pl.E, L)
                    writes[pl.pos] += 1
                zfrom = pl.pos if pl.first else pl.pos + 1
                zto = hi if rnext == END else rnext
                for b in range(zfrom, zto):
                    for i in range(b * B, min((b + 1) * B, count)):
                        out[i] = 0 if dtype == DT_INT32 else 0.0
                    writes[b] += 1
                pl.next = rnext                 # kept for the slot's next packet
                pl.exp = info_exp(rinfo)
            pk.result = d
            del inflight[slot]
            return pk

        while True:
            now = time.monotonic()
            # send in stream order while slot g mod W is free (§7.3 rule 1)
            while not ended and (g0 + p) % W not in inflight:
                pk = build(p)
                if pk is None:
                    ended, npackets = True, p
                    break
                packets.append(pk)
                inflight[pk.slot] = pk
                transmit(pk, now)
                p += 1
            if ended and not inflight:
                break
            if now - t_last_progress > op_timeout:
                fail(-1001, "operation timeout: in flight p=%s" % sorted(x.p for x in inflight.values()))
            nd = min(x.deadline for x in inflight.values())
            if nd <= now:
                for x in list(inflight.values()):
                    if x.deadline <= now:
                        transmit(x, now)                          # §7.6 timer expiry
                continue
            self.sock.settimeout(max(0.0005, nd - now))
            try:
                d = self.sock.recv(65536)
            except socket.timeout:
                continue
            except ConnectionRefusedError:
                continue
            if on_result(d) is not None:
                t_last_progress = time.monotonic()

        self.g = g0 + npackets
        self.last_npackets = npackets
        self.last_packets = packets
        self.last_writes = writes
        return out


    # -- §7.2 dense INT32 SUM (for §17.6's probe and auto's dense choice) --
    def dense_i32(self, vals, seed, op_timeout=6.0, wop=0):
        k, W = self.k, self.W
        count = len(vals)
        nb = -(-count // k)
        g0 = self.g
        out = [None] * count
        inflight = {}
        p = 0
        done = 0
        t_prog = time.monotonic()
        while done < nb:
            now = time.monotonic()
            while p < nb and (g0 + p) % W not in inflight:       # §7.3 rule 1
                pk = Packet()
                pk.p, pk.slot = p, (g0 + p) % W
                pk.seq = self.slot_use[pk.slot]
                self.slot_use[pk.slot] += 1
                pk.tag = packet_tag(seed, p)
                blk = vals[p * k:(p + 1) * k]
                pk.data = self.data_header(pk.slot, pk.seq, len(blk), wop, pk.tag) + \
                    struct.pack(">%di" % len(blk), *blk)
                pk.timeout = 0.2
                pk.deadline = now + 0.1
                self.sock.send(pk.data)
                inflight[pk.slot] = pk
                p += 1
            if now - t_prog > op_timeout:
                raise PeerError(-1001, "dense operation timeout")
            for x in inflight.values():
                if x.deadline <= now:
                    self.sock.send(x.data)
                    self.retransmits += 1
                    x.deadline = now + x.timeout
                    x.timeout = min(2 * x.timeout, 1.0)
            nd = min(x.deadline for x in inflight.values())
            self.sock.settimeout(max(0.0005, nd - time.monotonic()))
            try:
                d = self.sock.recv(65536)
            except (socket.timeout, ConnectionRefusedError):
                continue
            if len(d) < 32:
                continue
            h = HDR.unpack_from(d)
            if h[0] != MAGIC or h[1] != VERSION:
                continue
            if h[2] == K_ABORT and h[5] == self.session and h[6] == self.token:
                raise PeerError(struct.unpack_from(">i", d, 40)[0] if len(d) >= 48 else -1002, "ABORT")
            if h[2] != K_RESULT or len(d) != 32 + 4 * h[9]:
                continue
            slot = h[7] & 0x7FFFFFFF
            if h[3] != self.job or h[5] != self.session or h[6] != self.token or slot >= W \
                    or (h[7] >> 31) != (h[8] & 1):
                continue
            pk = inflight.get(slot)
            if pk is None or pk.seq != h[8] or h[13] != pk.tag or h[12] != wop:
                continue
            blk_n = min(k, count - pk.p * k)
            if h[9] != blk_n:
                raise PeerError(ERR_MISMATCH, "dense RESULT count")
            out[pk.p * k:pk.p * k + blk_n] = struct.unpack_from(">%di" % blk_n, d, 32)
            del inflight[slot]
            done += 1
            t_prog = time.monotonic()
        self.g = g0 + nb
        return list(out)

    def auto_allreduce_i32(self, vals, B, crossover=0.4, min_bytes=1 << 20):
        """§17.6 INA_SPARSE_AUTO for an INT32 SUM.  Returns (out, choice)."""
        count = len(vals)
        self.opn += 1                             # the operation's number n
        seed = op_seed(self.opn, count, DT_INT32, RED_SUM, 2 + 16 * B)   # mode 2 AUTO
        if count * 4 < min_bytes:
            return self.dense_i32(vals, seed), "dense-small"
        nblocks = -(-count // B)
        nnz = sum(1 for b in range(nblocks) if any(vals[b * B:(b + 1) * B]))
        # the probe: INT32 SUM, count 1, wire op 0, one packet, seed ^ 0x5052424F
        S = self.dense_i32([(nnz << 20) // nblocks], seed ^ 0x5052424F)[0]
        self.last_probe_sum = S
        if float(S) < crossover * float(1 << 20):
            return self.sparse_allreduce(vals, DT_INT32, B, seed=seed), "sparse"
        return self.dense_i32(vals, seed), "dense"


# ---------------------------------------------------------------- switch
class Switch:
    def __init__(self, bindir, tmp, extra=()):
        self.tmp = tmp
        pf = os.path.join(tmp, "port")
        mf = os.path.join(tmp, "mport")
        for f in (pf, mf):
            if os.path.exists(f):
                os.unlink(f)
        self.err = open(os.path.join(tmp, "switch.err"), "w+")
        # ina-switch --help: port 0 picks a free port, --port-file reports it;
        # one dataplane thread (no REDIRECT needed, §5.6), UDP only.
        cmd = [os.path.join(bindir, "ina-switch"), "--listen", "127.0.0.1:0",
               "--port-file", pf, "--threads", "1", "--no-shm",
               "--metrics", "127.0.0.1:0", "--metrics-port-file", mf,
               "--log-level", "warn"] + list(extra)
        WAITING[0] = "ina-switch to write its port file"
        self.proc = subprocess.Popen(cmd, stdout=self.err, stderr=self.err)
        CHILDREN.append(self.proc)
        t = time.monotonic()
        while time.monotonic() - t < 5:
            if self.proc.poll() is not None:
                raise RuntimeError("ina-switch exited: %s" % self.stderr())
            try:
                self.port = int(open(pf).read().strip())
                self.mport = int(open(mf).read().strip())
                break
            except (OSError, ValueError):
                time.sleep(0.02)
        else:
            raise RuntimeError("ina-switch wrote no port file")
        self.addr = ("127.0.0.1", self.port)

    def counters(self):
        # TOOLS.md: the dataplane threads publish a snapshot every 100 ms.
        time.sleep(0.25)
        WAITING[0] = "ina-switch /counters"
        with urllib.request.urlopen("http://127.0.0.1:%d/counters" % self.mport, timeout=3) as r:
            return json.loads(r.read().decode())["counters"]

    def stderr(self):
        self.err.flush()
        self.err.seek(0)
        return self.err.read()

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(3)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def counters_delta(a, b):
    d = {}
    for key, v in b.items():
        if key == "drops":
            for c, n in v.items():
                d["drop_" + c] = n - a["drops"].get(c, 0)
        else:
            d[key] = v - a.get(key, 0)
    return d


# ---------------------------------------------------------------- helpers
def run_ranks(peers, fn):
    """Run fn(peer) on a thread per peer; returns list of (result, exc)."""
    res = [None] * len(peers)

    def body(i):
        try:
            res[i] = (fn(peers[i]), None)
        except Exception as e:  # noqa: BLE001 (reported by the checks)
            res[i] = (None, e)

    ts = [threading.Thread(target=body, args=(i,), daemon=True) for i in range(len(peers))]
    for t in ts:
        t.start()
    for t in ts:
        t.join(25)
    return [r if r is not None else (None, RuntimeError("thread hung")) for r in res]


def make_job(sw, name, N, elems, window, float_add=False):
    peers = [Peer(sw.addr, name, r, N, elems, window, float_add) for r in range(N)]
    res = run_ranks(peers, lambda pe: pe.join())
    for _, e in res:
        if e:
            raise e
    return peers


def end_job(peers):
    for pe in peers:
        pe.leave()
        pe.close()


def gen_pattern(rng, N, nblocks, B, count, dtype, cats=None):
    """Per-block categories: every subset of ranks (none, one only, several,
    all), so blocks overlap only partly.  Returns N vectors."""
    vecs = [[0] * count if dtype == DT_INT32 else [0.0] * count for _ in range(N)]
    for b in range(nblocks):
        mask = cats[b] if cats else rng.randrange(1 << N)
        for r in range(N):
            if not mask >> r & 1:
                continue
            for i in range(b * B, min((b + 1) * B, count)):
                if dtype == DT_INT32:
                    v = rng.choice([0, rng.randrange(-1000, 1000),
                                    rng.randrange(-(1 << 31), 1 << 31)])
                else:
                    v = f32(rng.uniform(-1, 1) * 2.0 ** rng.randrange(-6, 7)) if rng.random() < 0.9 else 0.0
                vecs[r][i] = v
            # a non-zero block must have one non-zero element
            i0 = b * B
            if all(vecs[r][i] == 0 for i in range(b * B, min((b + 1) * B, count))):
                vecs[r][i0] = 7 if dtype == DT_INT32 else 0.375
    return vecs


def expected_int(vecs):
    return [i32(sum(col)) for col in zip(*vecs)]


def float_bound_ok(vecs, out, B, N):
    """§17.9: §8.6's FLOAT32 bound with amax over the B-element block."""
    L = ceil_log2(N)
    count = len(out)
    for b in range(-(-count // B)):
        lo, hi = b * B, min((b + 1) * B, count)
        amax = max(abs(v[i]) for v in vecs for i in range(lo, hi))
        E = math.frexp(amax)[1] if amax > 0 else None
        for i in range(lo, hi):
            exact = math.fsum(v[i] for v in vecs)
            bound = 2.0 ** -24 * abs(exact) + 2.0 ** -149
            if E is not None:
                bound += N * 2.0 ** (E + L - 31)
            if out[i] is None or not abs(out[i] - exact) <= bound:
                return False, (i, out[i], exact, bound)
    return True, None


def model_quantized(vecs, B, N):
    """What every rank must get bit for bit from op 7 FLOAT32 (§17.9:
    integer sums of deterministic values): E = max of the ranks' block
    exponents, Σq, decode."""
    L = ceil_log2(N)
    count = len(vecs[0])
    out = []
    for b in range(-(-count // B)):
        lo, hi = b * B, min((b + 1) * B, count)
        E = max(block_exp(v[lo:hi]) for v in vecs)
        for i in range(lo, hi):
            q = i32(sum(quantize(v[i], E, L) for v in vecs))
            out.append(dequantize(q, E, L))
    return out


def same_floats(a, b):
    return len(a) == len(b) and all(x is not None and y is not None and f32_bits(x) == f32_bits(y)
                                    for x, y in zip(a, b))


# ---------------------------------------------------------------- checks
def check_tags():
    # §11: tags of op 1, 6 FLOAT32 SUM elements, p = 0..3: 0xCB 0x49 0x68 0x28.
    sd = op_seed(1, 6, DT_FLOAT32, RED_SUM)
    got = [packet_tag(sd, p) for p in range(4)]
    check(got == [0xCB, 0x49, 0x68, 0x28], "§7.2 tag function reproduces §11's tags %s" %
          " ".join("%02X" % t for t in got))


def check_worked_example(sw):
    """§17.10 live: N=2, W=2, k=11, B=2, INT32 SUM of 8 elements."""
    peers = make_job(sw, "sp-example", 2, 11, 2)
    try:
        check(peers[0].k == 11 and peers[0].W == 2 and peers[0].ack_flags & FLAG_CAP_SPARSE,
              "§17.10 job granted k=11 W=2 with JOIN_ACK flag bit 8 (CAP_SPARSE)")
        A = [0, 0, 5, 6, 0, 0, 1, 1]
        Bv = [0, 0, 1, 0, 0, 0, 0, 0]
        res = run_ranks(peers, lambda pe: pe.sparse_allreduce(A if pe.rank == 0 else Bv, DT_INT32, 2))
        errs = [e for _, e in res if e]
        outs = [o for o, _ in res]
        check(not errs and all(o == [0, 0, 6, 6, 0, 0, 1, 1] for o in outs),
              "§17.10 both ranks get [0 0 6 6 0 0 1 1] (%s)" % (errs or outs[0]))
        g = peers[0].last_geometry
        check((g["C"], g["M"], g["K"]) == (2, 1, 4) and peers[0].last_npackets == 5
              and peers[1].last_npackets == 5,
              "§17.10 C=2 M=1 K=4 and npackets=5 on both ranks (got C=%d M=%d K=%d n=%d/%d)"
              % (g["C"], g["M"], g["K"], peers[0].last_npackets, peers[1].last_npackets))
        pk2 = [d for p, d in peers[0].tx_log if p == 2]
        want = bytes.fromhex("00020100 00000001 FFFFFFFF 80000000 00000005 00000006".replace(" ", ""))
        check(pk2 and len(pk2[0]) == 32 + 24 and pk2[0][32:] == want and pk2[0][30] == 7
              and HDR.unpack_from(pk2[0])[9] == 6,
              "§17.10 rank A's packet 2 is 56 bytes, count 6, op 7, payload as printed")
        # rank B with nothing at pos in packet 3 sends descriptors only (count 4)
        pk3b = [d for p, d in peers[1].tx_log if p == 3]
        check(pk3b and HDR.unpack_from(pk3b[0])[9] == 4,
              "§17.10 rank B's packet 3 (no block at pos 3) has count 4")
        pk4 = [d for p, d in peers[0].tx_log if p == 4]
        check(pk4 and len(pk4[0]) == 36 and pk4[0][32:] == bytes.fromhex("00020000"),
              "§17.10 packet 4 is the empty packet (layout word alone, np = 0)")
    finally:
        end_job(peers)


def run_sparse_job(sw, name, N, elems, window, B, dtype, count, seed, float_add=False,
                   vec_fn=None, label="", loss=None, counters=False):
    rng = random.Random(seed)
    nblocks = -(-count // B)
    vecs = vec_fn(rng, N, nblocks, B, count) if vec_fn else \
        gen_pattern(rng, N, nblocks, B, count, dtype)
    peers = make_job(sw, name, N, elems, window, float_add)
    try:
        c0 = sw.counters() if counters else None

        def fn(pe):
            a = dict(loss.get(pe.rank, {})) if loss else {}
            return pe.sparse_allreduce(vecs[pe.rank], dtype, B, **a)

        res = run_ranks(peers, fn)
        errs = [e for _, e in res if e]
        outs = [o for o, _ in res]
        g = peers[0].last_geometry
        geo = "N=%d k=%d W=%d B=%d C=%d M=%d K=%d op %d, %d packets" % (
            N, peers[0].k, peers[0].W, B, g["C"], g["M"], g["K"], g["op"], peers[0].last_npackets)
        if errs:
            check(False, "%s: ranks failed: %s" % (label, errs))
            return None
        once = all(all(w == 1 for w in pe.last_writes) for pe in peers)
        if dtype == DT_INT32:
            exp = expected_int(vecs)
            check(all(o == exp for o in outs) and once,
                  "%s: INT32 exact on every rank, every block written once (%s)" % (label, geo))
        else:
            same = all(same_floats(o, outs[0]) for o in outs)
            okb, why = float_bound_ok(vecs, outs[0], B, N)
            if g["op"] == OP_SPARSE_I32:
                model = model_quantized(vecs, B, N)
                check(same and okb and same_floats(outs[0], model) and once,
                      "%s: FLOAT32 op 7 bit-identical on every rank, = §17.9 model, within §8.6 bound (%s)%s"
                      % (label, geo, "" if okb else " worst %r" % (why,)))
            else:
                # op 8, N = 2: one binary32 addition (or a copy) per element.
                if N == 2:
                    exact = [f32(a + b) for a, b in zip(vecs[0], vecs[1])]
                    okx = same_floats(outs[0], exact)
                else:
                    okx = True
                check(same and okx and once,
                      "%s: FLOAT32 op 8 identical on every rank%s (%s)"
                      % (label, ", = binary32(a+b)" if N == 2 else "", geo))
        if counters:
            c1 = sw.counters()
            d = counters_delta(c0, c1)
            sent = sum(len(pe.tx_log) for pe in peers)
            sbytes = sum(len(x) for pe in peers for _, x in pe.tx_log)
            blocks = sum(sum(1 for pl in pk.places if pl.has) for pe in peers for pk in pe.last_packets)
            rounds = peers[0].last_npackets
            check(d["sparse_rx_packets"] == sent and d["sparse_rx_bytes"] == sbytes and
                  d["sparse_rx_blocks"] == blocks and d["sparse_tx_packets"] == N * rounds and
                  d["completions"] == rounds,
                  "%s: §17.4 counters: rx %d pkts/%d bytes/%d blocks, tx %d = N x rounds (got %d/%d/%d, %d)"
                  % (label, sent, sbytes, blocks, N * rounds, d["sparse_rx_packets"],
                     d["sparse_rx_bytes"], d["sparse_rx_blocks"], d["sparse_tx_packets"]))
        return peers, vecs, outs
    finally:
        end_job(peers)


def check_loss(sw):
    """Worker-side loss: rank 0 drops the first copy of some of its own
    DATA, rank 1 ignores some RESULTs; both complete by §17.8/§7.6."""
    c0 = sw.counters()
    N, B, count = 2, 4, 4 * 60 + 3
    rng = random.Random(11)
    nblocks = -(-count // B)
    vecs = gen_pattern(rng, N, nblocks, B, count, DT_INT32)
    peers = make_job(sw, "sp-loss", N, 64, 4)
    try:
        drop_tx = {0, 3, 5, 9, 14}
        drop_rx = {1, 4, 6, 10}
        res = run_ranks(peers, lambda pe: pe.sparse_allreduce(
            vecs[pe.rank], DT_INT32, B,
            drop_tx=drop_tx if pe.rank == 0 else (),
            drop_rx=drop_rx if pe.rank == 1 else ()))
        errs = [e for _, e in res if e]
        outs = [o for o, _ in res]
        exp = expected_int(vecs)
        np_ = peers[0].last_npackets
        check(not errs and all(o == exp for o in outs) and peers[0].retransmits >= len(drop_tx),
              "loss: rank 0 dropped its DATA %s, rank 1 ignored RESULTs %s: both exact, %d packets, rank 0 retransmitted %d"
              % (sorted(drop_tx), sorted(drop_rx), np_, peers[0].retransmits))
        # a lost RESULT is recovered from the stored set (§17.4, §17.8): the
        # resent RESULT is the same datagram as the one we ignored.
        same = all(pk.ignored_result == pk.result for pk in peers[1].last_packets if pk.p in drop_rx)
        d = counters_delta(c0, sw.counters())
        check(same and d["results_resent"] >= len(drop_rx),
              "loss: duplicates of complete sparse rounds answered with the stored RESULT, byte-identical (results_resent +%d)"
              % d["results_resent"])
    finally:
        end_job(peers)


def hostile_builders(B):
    """Malformed payloads of §17.3, each built from the sender's real packet
    so that every check of §6.1 up to 15 passes."""

    def mutate(fn):
        def mk(peer, pk):
            h = list(HDR.unpack_from(pk.data))
            words = list(struct.unpack_from(">%dI" % h[9], pk.data, 32))
            words = fn(words)
            h[9] = len(words)
            return HDR.pack(*h) + struct.pack(">%dI" % len(words), *words)
        return mk

    def pos_end(w):
        w[1] = END
        return w

    def first_and_has(w):
        # place 0 is FIRST in the first packet: add HAS and its block
        w[3] |= INFO_HAS
        np_ = (w[0] >> 8) & 0xFF
        return w[:1 + 3 * np_] + [1] * B + w[1 + 3 * np_:]

    def bad_count(w):
        return w + [0]

    def layout_low(w):
        w[0] |= 1
        return w

    def info_bits(w):
        w[3] |= 1 << 20
        return w

    def next_before(w):
        w[1] = 5          # pos 5 (column 0's first position is 0, but
        w[2] = 4          # the switch cannot know): next 4 < pos 5
        return w

    def b_zero(w):
        w[0] &= 0x0000FF00
        return w

    def too_many_places_mk(peer, pk):
        # np = C + 1 valid descriptors: 1 + np(3+B) > k although count <= k
        n = (peer.k - 1) // (3 + B) + 1
        words = [(B << 16) | (n << 8)]
        for j in range(n):
            words += [j, END, INFO_FIRST]
        h = list(HDR.unpack_from(pk.data))
        h[9] = len(words)
        return HDR.pack(*h) + struct.pack(">%dI" % len(words), *words)

    return [("pos = END", mutate(pos_end)), ("FIRST and HAS", mutate(first_and_has)),
            ("count != 1+3np+B*HAS", mutate(bad_count)), ("layout low byte != 0", mutate(layout_low)),
            ("info bits 29..16 set", mutate(info_bits)), ("next < pos", mutate(next_before)),
            ("B = 0", mutate(b_zero)), ("1+np(3+B) > k", too_many_places_mk)]


def check_hostile_malformed(sw):
    N, B, count = 2, 4, 4 * 30 + 1
    rng = random.Random(5)
    nblocks = -(-count // B)
    vecs = gen_pattern(rng, N, nblocks, B, count, DT_INT32)
    builders = hostile_builders(B)
    peers = make_job(sw, "sp-hostile", N, 64, 4)
    try:
        c0 = sw.counters()
        # rank 1 sends every malformed variant before the real first copy of
        # its packets 0 and 2 (slot 0 round 0, slot 2 round 0).
        hostile = {0: [m for _, m in builders], 2: [m for _, m in builders]}
        res = run_ranks(peers, lambda pe: pe.sparse_allreduce(
            vecs[pe.rank], DT_INT32, B, hostile=hostile if pe.rank == 1 else None))
        errs = [e for _, e in res if e]
        outs = [o for o, _ in res]
        d = counters_delta(c0, sw.counters())
        want = 2 * len(builders)
        check(d["drop_SPARSE"] == want and d["drop_MISMATCH"] == 0 and d["jobs_aborted"] == 0,
              "hostile: %d malformed op-7 DATA (%s) dropped as SPARSE, no abort (SPARSE +%d, MISMATCH +%d)"
              % (want, ", ".join(n for n, _ in builders), d["drop_SPARSE"], d["drop_MISMATCH"]))
        check(not errs and all(o == expected_int(vecs) for o in outs),
              "hostile: the job's sparse all-reduce still exact after the malformed DATA (%s)"
              % (errs or "ok"))
        # and a second operation in the same job
        res = run_ranks(peers, lambda pe: pe.sparse_allreduce(vecs[1 - pe.rank], DT_INT32, B))
        check(all(e is None for _, e in res) and all(o == expected_int(vecs) for o, _ in res),
              "hostile: a later sparse operation in the same job is exact too")
    finally:
        end_job(peers)


def check_hostile_mismatch(sw):
    """§17.4 Mismatch: a new rank's place pos differs -> MISMATCH, ABORT."""
    N, B, count = 2, 4, 40
    vecs = [[1] * count, [2] * count]
    peers = make_job(sw, "sp-mismatch", N, 64, 2)
    try:
        c0 = sw.counters()

        def shift_pos(peer, pk):
            h = list(HDR.unpack_from(pk.data))
            words = list(struct.unpack_from(">%dI" % h[9], pk.data, 32))
            words[1] += 1                        # block index of place 0, off by one
            if words[2] != END and words[2] < words[1]:
                words[2] = words[1]              # keep it well formed (§17.3)
            return HDR.pack(*h) + struct.pack(">%dI" % len(words), *words)

        def fn(pe):
            if pe.rank == 1:
                time.sleep(0.05)                  # let rank 0's round 0 arrive first
                # rank 1 replaces its packet 0 by one with another pos: send the
                # forged one and drop its real first copy.
                return pe.sparse_allreduce(vecs[1], DT_INT32, B, drop_tx={0},
                                           hostile={0: [shift_pos]}, op_timeout=3)
            return pe.sparse_allreduce(vecs[0], DT_INT32, B, op_timeout=3)

        res = run_ranks(peers, fn)
        codes = [getattr(e, "code", None) for _, e in res]
        d = counters_delta(c0, sw.counters())
        check(codes == [ERR_MISMATCH, ERR_MISMATCH] and d["drop_MISMATCH"] == 1 and d["jobs_aborted"] == 1,
              "hostile: a place whose pos differs within a round -> drop MISMATCH and ABORT MISMATCH to both ranks (codes %s, MISMATCH +%d, jobs_aborted +%d)"
              % (codes, d["drop_MISMATCH"], d["jobs_aborted"]))
    finally:
        end_job(peers)


LIBINA_SCRIPT = r"""
import json, sys
import numpy as np
import ina
cfg = json.load(open(sys.argv[1]))
kw = dict(switch=cfg["switch"], rank=cfg["rank"], world_size=cfg["world"], job=cfg["job"],
          elems_per_packet=cfg["elems"], window=cfg["window"], lanes=1, sparse="on",
          sparse_block=cfg["B"], join_timeout_ms=8000, timeout_ms=8000)
if cfg.get("float_add"):
    kw["float_add"] = "switch"
if cfg.get("min_bytes"):
    kw["sparse_min_bytes"] = cfg["min_bytes"]
out = {"results": []}
with ina.Context(**kw) as ctx:
    out["info"] = {"k": ctx.elems_per_packet, "W": ctx.window, "sparse": ctx.sparse,
                   "float_add": ctx.float_add}
    for op in cfg["ops"]:
        if op["dtype"] == "int32":
            a = np.array(op["data"], dtype=np.int32)
        else:
            a = np.array(op["data"], dtype=np.uint32).view(np.float32).copy()
        try:
            ina.allreduce(a, op=op.get("op", "sum"), ctx=ctx, sparse=op.get("sparse", "on"))
        except ina.InaError as e:
            out["results"].append({"error": e.code, "name": e.name})
            break
        out["results"].append(a.view(np.uint32).tolist() if a.dtype == np.float32 else a.tolist())
    out["stats"] = {k: v for k, v in ctx.stats().items() if "sparse" in k}
print(json.dumps(out))
"""


def find_numpy_python(pydir, env):
    for exe in [sys.executable, "/usr/bin/python3", shutil.which("python3")]:
        if not exe or not os.path.exists(exe):
            continue
        try:
            r = subprocess.run([exe, "-c", "import numpy, ina"], env=env, timeout=10,
                               capture_output=True)
            if r.returncode == 0:
                return exe
        except (OSError, subprocess.TimeoutExpired):
            pass
    return None


def start_libina_rank(exe, env, tmp, name, cfg, what):
    """Run LIBINA_SCRIPT as the libina rank of job `name`: the child reads its job
    (switch, rank, ops) from a JSON file and prints its results as JSON."""
    cfgf = os.path.join(tmp, name + ".json")
    with open(cfgf, "w") as fh:
        json.dump(cfg, fh)
    scr = os.path.join(tmp, "libina_rank.py")
    with open(scr, "w") as fh:
        fh.write(LIBINA_SCRIPT)
    WAITING[0] = what
    proc = subprocess.Popen([exe, scr, cfgf], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    CHILDREN.append(proc)
    return proc


def finish_libina_rank(proc, timeout):
    """Wait up to timeout s for the libina rank (then kill it): (stdout, stderr, its
    JSON result or None)."""
    try:
        so, se = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        so, se = proc.communicate()
    try:
        return so, se, json.loads(so.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return so, se, None


def libina_env(args):
    env = dict(os.environ)
    env["PYTHONPATH"] = args.pythondir + (":" + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env["INA_LIBRARY"] = os.path.join(args.libdir, "libina.so")
    env["INA_SHM"] = "0"
    env["INA_QUIET"] = "1"
    # An ASan build's libina can only be loaded with the ASan runtime preloaded, and only
    # into the libina rank: the daemons are linked with their own (tests/scripts/
    # test_protocol_peers.sh sets INA_PEER_PRELOAD there).
    if os.environ.get("INA_PEER_PRELOAD"):
        env["LD_PRELOAD"] = os.environ["INA_PEER_PRELOAD"]
        env["ASAN_OPTIONS"] = "detect_leaks=0:abort_on_error=1"
    return env


def check_libina_vs_fake_switch(args, tmp):
    """A clean-room switch for a job of one libina rank (N = 1: a RESULT
    is the DATA's payload, §17.4 with one contribution).  Op 1 is answered
    faithfully; op 2's first RESULT names, for a place whose column holds no
    non-zero block of the rank, a next block far outside the operation (a
    block index out of range, still well formed by §17.3).  §17.7: libina
    must fail with INA_ERR_MISMATCH, and (§7.1, §7.6) send LEAVE with the
    abort flag."""
    env = libina_env(args)
    exe = find_numpy_python(args.pythondir, env)
    if not exe:
        check(False, "fake switch: no python3 with numpy for the libina rank")
        return
    B, k, W, count = 32, 300, 4, 32 * 20
    nblocks = count // B
    fs = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    fs.bind(("127.0.0.1", 0))
    fs.settimeout(0.05)
    d1 = [0] * count
    for i in range(32 * 3, 32 * 4):
        d1[i] = i
    d1[32 * 7 + 5] = -9
    d2 = [0] * count                 # op 2: block 0 zero -> place 0's next is END
    d2[32 * 12] = 4
    name = "sp-fake"
    cfg = {"switch": "127.0.0.1:%d" % fs.getsockname()[1], "rank": 0, "world": 1,
           "job": name, "elems": k, "window": W, "B": B,
           "ops": [{"dtype": "int32", "data": d1}, {"dtype": "int32", "data": d2}]}
    proc = start_libina_rank(exe, env, tmp, name, cfg, "libina rank against the clean-room switch")
    session, token, job = 0x5EED0001, random.getrandbits(32), 3
    tag2 = packet_tag(op_seed(2, count, DT_INT32, RED_SUM, SPARSE_MODE_ON + 16 * B), 0)
    bad_data = []
    leaves = []
    forged = []
    ndata = 0
    t_end = time.monotonic() + 12
    try:
        while time.monotonic() < t_end and proc.poll() is None:
            try:
                d, src = fs.recvfrom(65536)
            except socket.timeout:
                continue
            if len(d) < 32:
                continue
            h = list(HDR.unpack_from(d))
            if h[0] != MAGIC or h[1] != VERSION:
                continue
            kind = h[2]
            if kind == K_JOIN and len(d) >= 96:
                b = list(JOIN_BODY.unpack_from(d, 32))
                # §4.1 JOIN_ACK: the rank's nonce, N, granted k and W, name.
                b[2], b[3], b[4] = min(b[2], k), min(b[3], W), 100
                b[5] = b[6] = b[9] = b[10] = 0
                ack = HDR.pack(MAGIC, VERSION, K_JOIN_ACK, job, RANK_SWITCH, session, token,
                               0, 0, 0, 0, FLAG_CAP_SPARSE, 0, 0) + JOIN_BODY.pack(*b)
                fs.sendto(ack, src)
            elif kind == K_LEAVE:
                leaves.append(h[11])
            elif kind == K_DATA:
                ndata += 1
                cnt = h[9]
                if len(d) != 32 + 4 * cnt or h[3] != job or h[5] != session or h[6] != token:
                    bad_data.append("header")
                    continue
                words = list(struct.unpack_from(">%dI" % cnt, d, 32))
                try:
                    parse_sparse_payload(words, k)
                except ValueError as e:
                    bad_data.append(str(e))
                if h[12] != OP_SPARSE_I32 or h[10] != 0 or h[11] != 0:
                    bad_data.append("op/exp/flags")
                if h[13] == tag2 and (h[7] & 0x7FFFFFFF) == 0 and not forged:
                    np_ = (words[0] >> 8) & 0xFF
                    for j in range(np_):
                        if words[2 + 3 * j] == END:
                            words[2 + 3 * j] = nblocks + 1000   # out of range, > pos
                            forged.append((j, words[1 + 3 * j]))
                            break
                # RESULT of a round of one rank: its payload (§17.4), header
                # as §6.2 with rank 0xFFFF, count, exp 0, op and tag echoed.
                h[2], h[4], h[9], h[10], h[11] = K_RESULT, RANK_SWITCH, len(words), 0, 0
                fs.sendto(HDR.pack(*h) + struct.pack(">%dI" % len(words), *words), src)
    finally:
        fs.close()
    so, se, lib = finish_libina_rank(proc, 5)
    if lib is None:
        check(False, "fake switch: libina rank gave no result (rc %s): %s" % (proc.returncode, se[-600:]))
        return
    res = lib["results"]
    check(len(res) >= 1 and res[0] == d1 and not bad_data and ndata > 0,
          "clean-room switch: libina's %d sparse DATA are well formed (§17.3, exp 0, flags 0, op 7) and op 1 through it is exact"
          % ndata)
    code = res[1].get("error") if len(res) > 1 and isinstance(res[1], dict) else res[1:] and "no error"
    check(forged and code == ERR_MISMATCH and any(f & FLAG_ABORT for f in leaves),
          "clean-room switch: a RESULT whose next (block %d) lies outside the place's column -> libina fails INA_ERR_MISMATCH (%s) and sends LEAVE with the abort flag (LEAVE flags %s)"
          % (nblocks + 1000, code, leaves))


def check_mixed_auto(sw, args, tmp):
    """§17.6 auto mode, mixed: the clean-room rank runs the probe and the
    choice from the spec; libina runs sparse="auto".  Op 1 is sparse after
    its probe (low density), op 2 dense after its probe (high density), op 3
    dense without a probe (below sparse_min_bytes)."""
    env = libina_env(args)
    exe = find_numpy_python(args.pythondir, env)
    if not exe:
        check(False, "mixed auto: no python3 with numpy for the libina rank")
        return
    B, k, W, min_bytes = 32, 300, 4, 4096
    rng = random.Random(77)
    specs = [(32 * 64, [1 if rng.random() < 0.1 else 0 for _ in range(64)]),
             (32 * 64 + 5, [3] * 65)]
    ops = []
    for count, cats in specs:
        nb = -(-count // B)
        ops.append((count, gen_pattern(rng, 2, nb, B, count, DT_INT32, cats)))
    name = "sp-auto"
    cfg = {"switch": "127.0.0.1:%d" % sw.port, "rank": 1, "world": 2, "job": name,
           "elems": k, "window": W, "B": B, "min_bytes": min_bytes,
           "ops": [{"dtype": "int32", "data": v[1], "sparse": "auto"} for _, v in ops]}
    proc = start_libina_rank(exe, env, tmp, name, cfg, "libina rank of %s" % name)
    peer = Peer(sw.addr, name, 0, 2, k, W)
    mine, choices, err = [], [], None
    try:
        peer.join()
        for count, vecs in ops:
            o, c = peer.auto_allreduce_i32(vecs[0], B, min_bytes=min_bytes)
            mine.append(o)
            choices.append(c)
        peer.leave()
    except Exception as e:  # noqa: BLE001
        err = e
        peer.leave(abort=True)
    finally:
        peer.close()
    so, se, lib = finish_libina_rank(proc, 12)
    if err or lib is None:
        check(False, "mixed auto: job failed: clean-room rank: %r (choices %s); libina rc=%s: %s"
              % (err, choices, proc.returncode, (se or so)[-600:]))
        return
    st = lib.get("stats", {})
    ok = all(m == expected_int(v) and t == expected_int(v)
             for m, t, (_, v) in zip(mine, lib["results"], ops))
    check(ok and choices == ["sparse", "dense"] and st.get("sparse_ops") == 1
          and st.get("sparse_auto_dense") == 1,
          "mixed auto: probe then sparse, probe then dense: clean-room %s, libina sparse_ops %s "
          "sparse_auto_dense %s, all exact on both ranks" % (choices, st.get("sparse_ops"),
                                                           st.get("sparse_auto_dense")))


def check_mixed_dense_tags(sw, args, tmp):
    """§17.6: s = mode + 16·B only for an operation that streams sparse or
    has a probe; one asked sparse that goes dense without a probe has s = 0.
    Two one-op jobs with libina: (a) sparse="on" INT32 MAX (goes dense: MAX),
    (b) sparse="auto" INT32 SUM below sparse_min_bytes (dense, no probe).
    The clean-room rank sends the dense packets with the tag the spec gives.
    (An earlier §17.6 said s = mode + 16·B "even when the operation then goes
    dense"; this check found that libina disagreed, and the text was fixed.)"""
    env = libina_env(args)
    exe = find_numpy_python(args.pythondir, env)
    if not exe:
        check(False, "mixed dense tags: no python3 with numpy for the libina rank")
        return
    B, k, W, min_bytes = 32, 300, 4, 4096
    rng = random.Random(31)
    for name, mode, red, wop, count in (
            ("sp-on-max", SPARSE_MODE_ON, 1, 1, 700),
            ("sp-auto-small", 2, RED_SUM, 0, 200)):
        vecs = [[rng.randrange(-99, 99) for _ in range(count)] for _ in range(2)]
        cfg = {"switch": "127.0.0.1:%d" % sw.port, "rank": 1, "world": 2, "job": name,
               "elems": k, "window": W, "B": B, "min_bytes": min_bytes,
               "ops": [{"dtype": "int32", "data": vecs[1], "op": "max" if red == 1 else "sum",
                        "sparse": "on" if mode == 1 else "auto"}]}
        proc = start_libina_rank(exe, env, tmp, name, cfg, "libina rank of %s" % name)
        peer = Peer(sw.addr, name, 0, 2, k, W)
        err, mine = None, None
        try:
            peer.join()
            peer.opn += 1
            seed = op_seed(peer.opn, count, DT_INT32, red, 0)  # §17.6: no probe, so s = 0
            mine = peer.dense_i32(vecs[0], seed, wop=wop, op_timeout=3)
            peer.leave()
        except Exception as e:  # noqa: BLE001
            err = e
            peer.leave(abort=True)
        finally:
            peer.close()
        so, se, lib = finish_libina_rank(proc, 10)
        try:
            theirs = lib["results"][0]
        except (TypeError, IndexError, KeyError):
            theirs = "no output: " + se[-300:]
        exp = [max(a, b) for a, b in zip(*vecs)] if red == 1 else expected_int(vecs)
        what = ("sparse=on INT32 MAX (dense)" if red == 1 else
                "sparse=auto INT32 SUM of %d bytes < sparse_min_bytes (dense, no probe)" % (4 * count))
        good = err is None and mine == exp and theirs == exp
        check(good,
              "mixed %s: tag seed with s = 0 as §17.6 says -> %s"
              % (what, "both exact" if good else
                 "clean-room rank failed %r, libina %s" % (err, theirs if isinstance(theirs, str) else
                                                         theirs if isinstance(theirs, dict) else "ok")))


def check_mixed(sw, args, tmp, float_add=False):
    """One clean-room rank (0) and one libina rank (1, Python binding)."""
    pydir = args.pythondir
    env = libina_env(args)
    exe = find_numpy_python(pydir, env)
    label = "mixed%s" % (" op 8" if float_add else "")
    if not exe:
        check(False, "%s: no python3 with numpy for the libina rank" % label)
        return
    B, k, W = 32, 300, 4
    rng = random.Random(99 if float_add else 42)
    ops = []
    if float_add:
        specs = [(DT_FLOAT32, 32 * 20 + 9)]
    else:
        specs = [(DT_INT32, 32 * 40 + 7), (DT_FLOAT32, 32 * 41 + 3), (DT_INT32, 32 * 300)]
    for dtype, count in specs:
        nb = -(-count // B)
        vecs = gen_pattern(rng, 2, nb, B, count, dtype)
        ops.append((dtype, count, vecs))
    ops_cfg = []
    for dtype, count, vecs in ops:
        data = vecs[1] if dtype == DT_INT32 else [f32_bits(x) for x in vecs[1]]
        ops_cfg.append({"dtype": "int32" if dtype == DT_INT32 else "float32", "data": data})
    name = "sp-mixed8" if float_add else "sp-mixed"
    cfg = {"switch": "127.0.0.1:%d" % sw.port, "rank": 1, "world": 2, "job": name,
           "elems": k, "window": W, "B": B, "float_add": float_add, "ops": ops_cfg}
    proc = start_libina_rank(exe, env, tmp, name, cfg, "libina rank of %s" % name)
    peer = Peer(sw.addr, name, 0, 2, k, W, float_add)
    mine = []
    err = None
    try:
        peer.join()
        for dtype, count, vecs in ops:
            mine.append(peer.sparse_allreduce(vecs[0], dtype, B, op_timeout=6))
        peer.leave()
    except Exception as e:  # noqa: BLE001
        err = e
        peer.leave(abort=True)
    finally:
        peer.close()
    so, se, lib = finish_libina_rank(proc, 12)
    if err or lib is None:
        check(False, "%s: job failed: clean-room rank: %r; libina rank rc=%s: %s" %
              (label, err, proc.returncode, (se or so)[-600:]))
        return
    log("libina info", lib["info"], "stats", lib.get("stats"))
    check(lib["info"]["k"] == k and lib["info"]["W"] == W and lib["info"]["sparse"] and
          lib["stats"].get("sparse_ops", 0) == len(ops),
          "%s: libina joined the clean-room rank's job (k=%d W=%d), ctx.sparse true, sparse_ops %s = %d"
          % (label, k, W, lib["stats"].get("sparse_ops"), len(ops)))
    for i, (dtype, count, vecs) in enumerate(ops):
        theirs = lib["results"][i]
        g = "op %d: %s count %d" % (i + 1, "INT32" if dtype == DT_INT32 else "FLOAT32", count)
        if dtype == DT_INT32:
            exp = expected_int(vecs)
            check(mine[i] == exp and theirs == exp,
                  "%s %s: clean-room and libina ranks both exact" % (label, g))
        else:
            mb = [f32_bits(x) for x in mine[i]]
            okb, why = float_bound_ok(vecs, mine[i], B, 2)
            if float_add:
                exact = [f32_bits(f32(a + b)) for a, b in zip(vecs[0], vecs[1])]
                check(mb == theirs and mb == exact,
                      "%s %s: op 8, both ranks identical and = binary32(a+b)" % (label, g))
            else:
                model = [f32_bits(x) for x in model_quantized(vecs, B, 2)]
                check(mb == theirs and okb and mb == model,
                      "%s %s: op 7 quantized, both ranks bit-identical, = model, within bound" % (label, g))


def main():
    global VERBOSE
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bindir", required=True)
    ap.add_argument("--libdir", default=None)
    ap.add_argument("--pythondir", default=None)
    ap.add_argument("-v", action="store_true")
    ap.add_argument("--deadline", type=float, default=60.0)
    args = ap.parse_args()
    VERBOSE = args.v
    root = os.path.dirname(os.path.abspath(args.bindir.rstrip("/")))
    args.libdir = args.libdir or os.path.join(root, "lib")
    args.pythondir = args.pythondir or os.path.join(root, "python")

    def on_deadline():
        print("FAIL - global deadline (%.0f s) passed while waiting for: %s" % (args.deadline, WAITING[0]),
              flush=True)
        for p in CHILDREN:
            try:
                p.kill()
            except OSError:
                pass
        os._exit(1)

    timer = threading.Timer(args.deadline, on_deadline)
    timer.daemon = True
    timer.start()
    tmp = tempfile.mkdtemp(prefix="peer_sparse.")
    sw = None
    t0 = time.monotonic()
    try:
        check_tags()
        sw = Switch(args.bindir, tmp)
        check_worked_example(sw)
        # 2 ranks, INT32, partly overlapping blocks, M = 1 and M > 1
        run_sparse_job(sw, "sp-int2", 2, 64, 4, 4, DT_INT32, 4 * 37 + 2, 1,
                       label="2 ranks INT32", counters=True)
        run_sparse_job(sw, "sp-int2m", 2, 64, 2, 4, DT_INT32, 4 * 300 - 1, 2,
                       label="2 ranks INT32 columns of M>1 blocks")
        # 3 ranks, INT32 and FLOAT32
        run_sparse_job(sw, "sp-int3", 3, 100, 4, 8, DT_INT32, 8 * 50 + 5, 3,
                       label="3 ranks INT32")
        run_sparse_job(sw, "sp-f32-2", 2, 64, 4, 4, DT_FLOAT32, 4 * 45 + 1, 4,
                       label="2 ranks")
        run_sparse_job(sw, "sp-f32-3", 3, 100, 2, 8, DT_FLOAT32, 8 * 90 + 3, 6,
                       label="3 ranks")
        run_sparse_job(sw, "sp-f8-2", 2, 64, 4, 4, DT_FLOAT32, 4 * 45 + 1, 7, float_add=True,
                       label="2 ranks float_add")
        # all blocks zero, all blocks non-zero (on every rank)
        run_sparse_job(sw, "sp-zero", 2, 64, 4, 4, DT_INT32, 4 * 40 + 1, 8,
                       vec_fn=lambda rng, N, nb, B, c: gen_pattern(rng, N, nb, B, c, DT_INT32, [0] * nb),
                       label="all blocks zero")
        run_sparse_job(sw, "sp-full", 2, 64, 4, 4, DT_INT32, 4 * 40 + 1, 9,
                       vec_fn=lambda rng, N, nb, B, c: gen_pattern(rng, N, nb, B, c, DT_INT32, [3] * nb),
                       label="all blocks non-zero")
        run_sparse_job(sw, "sp-fzero", 2, 64, 4, 4, DT_FLOAT32, 4 * 40 + 1, 10,
                       vec_fn=lambda rng, N, nb, B, c: gen_pattern(rng, N, nb, B, c, DT_FLOAT32, [0] * nb),
                       label="all blocks zero")
        run_sparse_job(sw, "sp-ffull", 2, 64, 4, 4, DT_FLOAT32, 4 * 40 + 1, 12,
                       vec_fn=lambda rng, N, nb, B, c: gen_pattern(rng, N, nb, B, c, DT_FLOAT32, [3] * nb),
                       label="all blocks non-zero")
        check_loss(sw)
        check_hostile_malformed(sw)
        check_hostile_mismatch(sw)
        check_mixed(sw, args, tmp)
        check_mixed(sw, args, tmp, float_add=True)
        check_mixed_auto(sw, args, tmp)
        check_mixed_dense_tags(sw, args, tmp)
        check_libina_vs_fake_switch(args, tmp)
    except Exception as e:  # noqa: BLE001
        import traceback
        traceback.print_exc()
        check(False, "unexpected error while %s: %r" % (WAITING[0], e))
    finally:
        if sw:
            sw.stop()
            if VERBOSE:
                sys.stderr.write(sw.stderr()[-3000:])
        for p in CHILDREN:
            if p.poll() is None:
                p.kill()
        shutil.rmtree(tmp, ignore_errors=True)
        timer.cancel()
    nfail = sum(1 for ok, _ in RESULTS if not ok)
    print("# %d checks, %d failed, %.1f s" % (len(RESULTS), nfail, time.monotonic() - t0))
    return 0 if nfail == 0 and RESULTS else 1


if __name__ == "__main__":
    sys.exit(main())

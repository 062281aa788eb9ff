#!/usr/bin/env python3
"""Clean-room peer for the 16-bit wire (docs/PROTOCOL.md section 8.10, since 0.6).

Written from PROTOCOL.md alone (sections 3, 4.1, 6.2, 7.2, 7.5, 8.10, 12.4) and the user
documentation for starting ina-switch. It plays workers that send FLOAT16, BFLOAT16 and
FLOAT32 sums as 16-bit elements (ops 10 and 11), against a real ina-switch:

  - the offer: JOIN_ACK flag bit 9 from a default switch, none with --int-ops-only, which
    drops op 10 (no RESULT);
  - three clean-room ranks driven from one thread, so that the arrival order at the switch
    is known: every RESULT (op, count, exp s, payload bits) equals this peer's model of the
    switch (section 8.10.4), for binary16 and bfloat16 elements, NaN, +-Inf, -0,
    subnormals, FLOAT32 scaled per block into binary16, sums past 65504 (s > 0), odd
    lengths (the pad element), and a duplicate answered with the same bytes;
  - the decoded results (section 8.10.5) within section 8.10.6's bound of the exact sums;
  - ops 10 and 11 in one round: ABORT MISMATCH;
  - mixed jobs with a libina rank (the `ina` package, numpy): FLOAT16 SUM and AVG, and
    FLOAT32 with INA_WIRE_BITS=16 in bfloat16 and (INA_WIRE_HALF=fp16) binary16: the
    switch echoes op 10 or 11 (so libina sent it), every rank gets the same bits, within
    the bound.

Standard library only (the libina rank needs numpy). Prints `ok - ...` or `FAIL - ...`
per check and exits 0 only if every check passed.
"""

import argparse
import json
import math
import os
import random
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time

T0 = time.monotonic()
DEADLINE = 150.0
RESULTS = []
PROCS = []
TMPDIRS = []
VERBOSE = False

MAGIC, VERSION = 0x494E, 1
K_DATA, K_RESULT, K_JOIN, K_JOIN_ACK, K_JOIN_NAK, K_LEAVE, K_ABORT = 1, 2, 16, 17, 18, 19, 20
RANK_SWITCH = 0xFFFF
SLOT_SET = 0x80000000
FLAG_CAP_H16 = 0x0200
OP_F16, OP_BF16 = 10, 11
I32, F32, F16, BF16, F64 = 0, 1, 2, 3, 4          # dtype values (section 1)
SUM, MAX, MIN, AVG = 0, 1, 2, 3                    # reductions (section 1)
ERR_MISMATCH = -1005
F16_QNAN, BF16_QNAN = 0x7E00, 0x7FC0
HDR = struct.Struct(">HBBHHIIIIHhHBB")


class PeerError(Exception):
    pass


def log(*a):
    if VERBOSE:
        print("#", *a, flush=True)


def check(ok, text):
    RESULTS.append((bool(ok), text))
    print("%s - %s" % ("ok" if ok else "FAIL", text), flush=True)
    return ok


def time_left():
    return DEADLINE - (time.monotonic() - T0)


def watchdog():
    while time_left() > 0:
        time.sleep(1)
    print("FAIL - deadline of %.0f s passed" % DEADLINE, flush=True)
    for p in PROCS:
        try:
            p.kill()
        except Exception:
            pass
    os._exit(1)


# ---- numbers: binary32, binary16, bfloat16 (section 8.10.2, 8.10.3) --------------------------

def f32(x):
    """x rounded to binary32, to nearest even, with IEEE overflow."""
    if math.isnan(x) or math.isinf(x):
        return x
    try:
        return struct.unpack(">f", struct.pack(">f", x))[0]
    except OverflowError:
        return math.copysign(math.inf, x)


def f32_bits(x):
    return struct.unpack(">I", struct.pack(">f", f32(x)))[0]


def f32_of_bits(b):
    return struct.unpack(">f", struct.pack(">I", b))[0]


def rne_f16(x):
    """binary16 bits of x (a double): to nearest even, gradual underflow, IEEE overflow."""
    if math.isnan(x):
        return F16_QNAN
    try:
        return struct.unpack(">H", struct.pack(">e", x))[0]
    except OverflowError:
        return 0xFC00 if x < 0 else 0x7C00


def rne_bf16(x):
    """bfloat16 bits of x (a double), rounded once: 8 significant bits, binary32's range."""
    if math.isnan(x):
        return BF16_QNAN
    sign = 0x8000 if math.copysign(1.0, x) < 0 else 0
    a = abs(x)
    if math.isinf(a):
        return sign | 0x7F80
    if a == 0:
        return sign
    m, e = math.frexp(a)                 # a = m 2^e, 0.5 <= m < 1
    q = 2.0 ** -133 if e - 1 < -126 else 2.0 ** (e - 8)   # the quantum there
    v = round(a / q) * q                  # exact quotient; round(): ties to even
    if v >= 2.0 ** 128:
        return sign | 0x7F80
    return sign | (f32_bits(v) >> 16)


def val(fmt, w):
    """The value of a 16-bit element (section 8.10.2)."""
    if fmt == OP_F16:
        return struct.unpack(">e", struct.pack(">H", w))[0]
    return f32_of_bits(w << 16)


def rne_fmt(fmt, x):
    return rne_f16(x) if fmt == OP_F16 else rne_bf16(x)


def clamp_e(e):
    return max(-126, min(126, e))


def is_nan16(fmt, w):
    return math.isnan(val(fmt, w))


# ---- the worker's encode and decode (section 8.10.3, 8.10.5) ----------------------------------

def f32_scale(xs):
    """c of a FLOAT32 block on binary16: clamp(E - 15), 2^(E-1) <= M < 2^E (M its largest finite |x|)."""
    m = max((abs(x) for x in xs if math.isfinite(x)), default=0.0)
    if m == 0:
        return 0
    return clamp_e(math.frexp(m)[1] - 15)


def encode(dt, fmt, xs):
    """(exp, elements) of one block of values xs of dt (FLOAT16 / BFLOAT16 values are exact)."""
    if dt == F16:
        return 0, [rne_f16(x) for x in xs]
    if dt == BF16:
        return 0, [rne_bf16(x) for x in xs]
    if fmt == OP_BF16:
        return 0, [rne_bf16(f32(x)) for x in xs]
    c = f32_scale(xs)
    return c, [rne_f16(f32(x * 2.0 ** -c)) for x in xs]


def decode(dt, fmt, red, ws, s, n):
    """RESULT elements ws with exp s -> the dtype's values (as doubles) (section 8.10.5)."""
    out = []
    for w in ws:
        v = val(fmt, w)
        if math.isnan(v):
            out.append(math.nan)
            continue
        y = (v / n if red == AVG else v) * 2.0 ** s
        if dt == F32:
            out.append(f32(y))
        elif dt == F16:
            out.append(val(OP_F16, rne_f16(y)))
        else:
            out.append(val(OP_BF16, rne_bf16(y)))
    return out


# ---- the switch, as section 8.10.4 says --------------------------------------------------------

def lane_of(fmt, w, e):
    return f32(val(fmt, w) * 2.0 ** clamp_e(e))


def result_exp(fmt, lanes, sexp):
    s = clamp_e(sexp)
    if fmt == OP_BF16:
        return s
    fin = [abs(v) for v in lanes if math.isfinite(v) and v != 0]
    if not fin:
        return s
    b = f32_bits(max(fin))
    k, f = ((b >> 23) & 0xFF) - 127, b & 0x7FFFFF
    s_fit = k - 14 if f >= 0x7FF000 else k - 15
    return max(s, s_fit)


def switch_model(fmt, contribs):
    """contribs: [(exp, elements)] in arrival order -> (s, RESULT elements)."""
    e0, w0 = contribs[0]
    lanes = [lane_of(fmt, w, e0) for w in w0]
    sexp = e0
    for e, ws in contribs[1:]:
        lanes = [f32(a + lane_of(fmt, w, e)) for a, w in zip(lanes, ws)]
        sexp = max(sexp, e)
    s = result_exp(fmt, lanes, sexp)
    out = []
    for v in lanes:
        if math.isnan(v):
            out.append(F16_QNAN if fmt == OP_F16 else BF16_QNAN)
        else:
            out.append(rne_fmt(fmt, f32(v * 2.0 ** -clamp_e(s))))
    return s, out


def bound(dt, fmt, red, n, xs, s):
    """Section 8.10.6: the bound on |result - exact| (AVG: against exact / N) of one element."""
    rho, sigma = (2.0 ** -11, 2.0 ** -25) if fmt == OP_F16 else (2.0 ** -8, 2.0 ** -134)
    tau = 2.0 ** s * sigma + 2.0 ** -150
    X = sum(abs(x) for x in xs)
    S = abs(math.fsum(xs))
    u = 2.0 ** -24
    if dt == F32:
        D = rho * X + n * tau + (n - 1) * u * ((1 + rho) * X + n * tau)
    else:
        D = (n - 1) * u * X
    B = D + rho * (S + D) + tau
    if red == SUM:
        if dt == F32:
            return B + 2.0 ** -150
        if s >= 0:                         # FLOAT16 on op 10, BFLOAT16 on op 11: no rounding
            return B
    rd, sd = {F32: (2.0 ** -24, 2.0 ** -149), F16: (2.0 ** -11, 2.0 ** -25),
              BF16: (2.0 ** -8, 2.0 ** -134)}[dt]
    if red == SUM:
        return B + rd * (S + B) + sd
    return B / n + 2.0 ** -53 * (S + B) / n + rd * (1 + 2.0 ** -53) * (S + B) / n + sd


# ---- the wire (sections 3, 4.1, 7.2) -----------------------------------------------------------

def pack_hdr(kind, job=0, rank=0, session=0, token=0, slot=0, seq=0, count=0, exp=0, flags=0, op=0,
             tag=0):
    return HDR.pack(MAGIC, VERSION, kind, job, rank, session, token, slot, seq, count, exp, flags,
                    op, tag)


def op_tag(n, count, dtype, red, p):
    M = (1 << 64) - 1
    x = ((n * 0x9E3779B97F4A7C15) ^ (count * 0xC2B2AE3D27D4EB4F) ^ dtype ^ (red << 8)) & M
    x ^= x >> 31
    x = (x * 0xBF58476D1CE4E5B9) & M
    x ^= x >> 29
    y = ((x + p) * 0xD6E8FEB86659FD93) & M
    return ((y ^ (y >> 32)) >> 24) & 0xFF


def words(ws):
    """16-bit elements -> payload bytes: big-endian, a zero pad element after an odd count."""
    ws = list(ws) + ([0] if len(ws) % 2 else [])
    return struct.pack(">%dH" % len(ws), *ws)


class Rank:
    """One clean-room worker: its socket, its join, its stream position."""

    def __init__(self, addr, name, rank, n, k, w):
        self.addr, self.name, self.rank, self.n = addr, name, rank, n
        self.k_prop, self.w_prop = k, w
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.connect(addr)
        self.g = 0          # stream index of the next packet (section 7.2)
        self.nops = 0       # op number of the last non-empty op
        self.inflight = {}  # (slot, seq) -> (datagram, expected tag, op, count)
        self.results = {}   # (slot, seq) -> (header tuple, payload)
        self.aborted = None

    def join(self, deadline):
        nonce = random.getrandbits(63) | 1
        body = struct.pack(">QHHIIIHBBHH32s", nonce, self.n, self.k_prop, self.w_prop, 600, 0, 0,
                           0, 1, 0, 0, self.name.encode())
        dgram = pack_hdr(K_JOIN, rank=self.rank) + body
        for d in self.datagrams(deadline, lambda: self.sock.send(dgram), sent=False):
            if len(d) < 96:
                continue
            h = HDR.unpack_from(d)
            if h[2] == K_JOIN_NAK:
                raise PeerError("rank %d: JOIN_NAK" % self.rank)
            if h[2] != K_JOIN_ACK or struct.unpack_from(">Q", d, 32)[0] != nonce:
                continue
            self.job, self.session, self.token, self.caps = h[3], h[5], h[6], h[11]
            self.k = struct.unpack_from(">H", d, 42)[0]
            self.W = struct.unpack_from(">I", d, 44)[0]
            log("rank %d joined job %d k=%d W=%d flags 0x%04x" % (self.rank, self.job, self.k,
                                                                    self.W, self.caps))
            return
        raise PeerError("rank %d: no JOIN_ACK" % self.rank)

    def datagrams(self, deadline, resend, sent):
        """The datagrams that arrive until deadline; resend() every 0.5 s (at once unless sent)."""
        last = time.monotonic() if sent else 0.0
        self.sock.settimeout(0.05)
        while time.monotonic() < deadline:
            if time.monotonic() - last > 0.5:
                resend()
                last = time.monotonic()
            try:
                yield self.sock.recv(70000)
            except socket.timeout:
                continue

    def leave(self):
        try:
            self.sock.send(pack_hdr(K_LEAVE, job=self.job, rank=self.rank, session=self.session,
                                    token=self.token))
        except OSError:
            pass

    def packets(self, dt, red, fmt, xs, forced_op=None):
        """Build the op's DATA datagrams (one round per block of 2k elements, lag 0)."""
        self.nops += 1
        per = 2 * self.k
        nb = -(-len(xs) // per)
        out = []
        for p in range(nb):
            blk = xs[p * per:(p + 1) * per]
            e, ws = encode(dt, fmt, blk)
            g = self.g + p
            slot, seq = g % self.W, g // self.W
            op = forced_op if forced_op is not None else fmt
            tag = op_tag(self.nops, len(xs), dt, red, p)
            cnt = (len(ws) + 1) // 2
            d = pack_hdr(K_DATA, self.job, self.rank, self.session, self.token,
                         slot | (SLOT_SET if seq & 1 else 0), seq, cnt, e, 0, op, tag) + words(ws)
            out.append(((slot, seq), d, tag, op, cnt, e, ws))
        self.g += nb
        return out

    def send(self, pkts):
        for key, d, tag, op, cnt, _e, _ws in pkts:
            self.inflight[key] = (d, tag, op, cnt)
            self.sock.send(d)

    def collect(self, pkts, deadline):
        """Wait for the RESULT of every packet (section 7.5), resending on a timeout."""
        want = {key for key, *_ in pkts}
        got = {}

        def resend():
            for key in want - set(got):
                self.sock.send(self.inflight[key][0])

        for d in self.datagrams(deadline, resend, sent=True):
            if not want - set(got) or self.aborted is not None:
                break
            if len(d) < 32:
                continue
            h = HDR.unpack_from(d)
            if h[0] != MAGIC or h[1] != VERSION:
                continue
            if h[2] == K_ABORT and h[5] == self.session and h[6] == self.token:
                self.aborted = struct.unpack_from(">i", d, 40)[0] if len(d) >= 44 else None
                break
            if h[2] != K_RESULT or len(d) != 32 + 4 * h[9]:
                continue
            if (h[3], h[5], h[6]) != (self.job, self.session, self.token):
                continue
            key = (h[7] & ~SLOT_SET, h[8])
            if key not in want or key in got:
                continue
            _d, tag, op, cnt = self.inflight[key]
            if h[13] != tag or h[12] != op or h[9] != cnt:
                continue
            got[key] = (h, d[32:])
            if not want - set(got):
                break
        for key in got:
            self.inflight.pop(key, None)
        return got


# ---- the programs ------------------------------------------------------------------------------

def rnd_vals(rng, n, lo, hi, special=()):
    xs = [rng.choice((-1, 1)) * rng.uniform(1, 2) * 2.0 ** rng.randint(lo, hi) for _ in range(n)]
    for i, v in special:
        xs[i] = v
    return xs


def exact_vals(dt, xs):
    """The values a rank actually holds: FLOAT16 and BFLOAT16 rounded to the type, FLOAT32 to binary32."""
    if dt == F16:
        return [val(OP_F16, rne_f16(x)) for x in xs]
    if dt == BF16:
        return [val(OP_BF16, rne_bf16(x)) for x in xs]
    return [f32(x) for x in xs]


def check_op(tag, dt, fmt, red, n, k, inputs, pkts_by_rank, got_by_rank):
    """Bits against the model (arrival order: rank 0, 1, ..., n - 1), values within the bound."""
    problems = []
    count = len(inputs[0])
    per = 2 * k
    res_vals = {}
    for p in range(len(pkts_by_rank[0])):
        contribs = [(pk[p][5], pk[p][6]) for pk in pkts_by_rank]
        s, model = switch_model(fmt, contribs)
        key = pkts_by_rank[0][p][0]
        for r, got in enumerate(got_by_rank):
            if key not in got:
                problems.append("rank %d: no RESULT for packet %d" % (r, p))
                continue
            h, pl = got[key]
            ws = list(struct.unpack(">%dH" % (2 * h[9]), pl))
            if h[10] != s:
                problems.append("packet %d: RESULT exp %d, model %d" % (p, h[10], s))
            nel = len(model)
            if ws[:nel] != model:
                i = next(j for j in range(nel) if ws[j] != model[j])
                problems.append("packet %d element %d: 0x%04x, model 0x%04x" % (p, i, ws[i], model[i]))
            if nel % 2 and ws[nel] != 0:
                problems.append("packet %d: pad element 0x%04x, not 0 (8.10.4: +0 + ... = +0)" %
                                (p, ws[nel]))
            res_vals.setdefault(r, []).extend(decode(dt, fmt, red, ws[:nel], h[10], n))
        if problems:
            break
    if not problems:
        held = [exact_vals(dt, xs) for xs in inputs]
        for i in range(count):
            xs = [held[r][i] for r in range(n)]
            got = res_vals[0][i]
            if any(math.isnan(x) for x in xs) or (any(x == math.inf for x in xs) and
                                                   any(x == -math.inf for x in xs)):
                ok = math.isnan(got)
            elif any(math.isinf(x) for x in xs):
                ok = got == next(x for x in xs if math.isinf(x))
            else:
                ex = math.fsum(xs) / (n if red == AVG else 1)
                b = bound(dt, fmt, red, n, xs, got_s(got_by_rank[0], pkts_by_rank[0], i, per))
                ok = abs(got - ex) <= b or (math.isinf(got) and abs(ex) + b >= 65504 and dt == F16)
            if not ok:
                problems.append("element %d: %r, exact %r" % (i, got, math.fsum(xs)))
                break
        if any(res_vals[r] != res_vals[0] for r in res_vals if not any(map(math.isnan, res_vals[r]))):
            problems.append("ranks decoded different values")
    return check(not problems, "%s: %d elements: RESULT bits as 8.10.4's switch, values within "
                 "8.10.6's bound%s" % (tag, count, (" (" + "; ".join(problems[:3]) + ")") if problems else ""))


def got_s(got, pkts, i, per):
    return got[pkts[i // per][0]][0][10]


def join_all(addr, name, n, k, w):
    """n clean-room ranks of job `name`, joined (the JOINs in parallel: the job starts when all
    are in), or None."""
    ranks = [Rank(addr, name, r, n, k, w) for r in range(n)]
    ths = [threading.Thread(target=r.join, args=(time.monotonic() + 15,), daemon=True) for r in ranks]
    for t in ths:
        t.start()
    for t in ths:
        t.join(20)
    if not all(hasattr(r, "job") for r in ranks):
        check(False, "%s: every rank joined" % name)
        return None
    return ranks


def run_sequential(addr, name, n, progs, k=64, w=16):
    """n clean-room ranks in one thread: each op's packets sent rank 0 first, then 1, ..."""
    ranks = join_all(addr, name, n, k, w)
    if not ranks:
        return
    check(all(r.caps & FLAG_CAP_H16 for r in ranks),
          "%s: JOIN_ACK sets flag bit 9 (INA_FLAG_CAP_H16, 8.10.1): 0x%04x" % (name, ranks[0].caps))
    for label, dt, fmt, red, inputs in progs:
        pk = [r.packets(dt, red, fmt, inputs[r.rank]) for r in ranks]
        for r in ranks:
            r.send(pk[r.rank])
        got = [r.collect(pk[r.rank], time.monotonic() + 10) for r in ranks]
        check_op("%s/%s" % (name, label), dt, fmt, red, n, ranks[0].k, inputs, pk, got)
        if label == "f16-sum":  # a duplicate of a complete round: the same bytes again (6.2)
            key, d = pk[1][0][0], pk[1][0][1]
            ranks[1].inflight[key] = (d, pk[1][0][2], pk[1][0][3], pk[1][0][4])
            ranks[1].sock.send(d)
            again = ranks[1].collect([pk[1][0]], time.monotonic() + 5)
            check(key in again and again[key][1] == got[1][key][1] and
                  again[key][0][10] == got[1][key][0][10],
                  "%s: a duplicate DATA of a complete round gets the same RESULT bytes and exp" % name)
    for r in ranks:
        r.leave()


def programs(rng, n, k):
    per = 2 * k
    f16_special = [(0, math.nan), (1, math.inf), (2, -0.0), (3, 2.0 ** -24), (4, 65504.0),
                   (5, 6e-8), (6, -1.5 * 2.0 ** -20)]
    ps = []
    for label, dt, fmt, red, count, lo, hi, sp in (
            ("f16-sum", F16, OP_F16, SUM, 2 * per + 3, -14, 10, f16_special),
            ("f16-avg", F16, OP_F16, AVG, per + 1, -20, 12, [(0, 60000.0), (1, -0.0)]),
            ("bf16-sum", BF16, OP_BF16, SUM, per + 7, -130, 126,
             [(0, 3.0e38), (1, math.nan), (2, -math.inf), (3, 2.0 ** -133)]),
            ("bf16-avg", BF16, OP_BF16, AVG, 2 * per, -40, 40, []),
            ("f32-on-bf16-sum", F32, OP_BF16, SUM, per + 5, -60, 60, [(0, 1e-40)]),
            ("f32-on-f16-sum", F32, OP_F16, SUM, 2 * per + 1, -30, 30, [(2, 1e30), (3, 1e-30)]),
            ("f32-on-f16-avg", F32, OP_F16, AVG, per - 1, 20, 100, [(4, math.inf)])):
        inputs = [rnd_vals(rng, count, lo, hi, sp if r == 0 else ()) for r in range(n)]
        inputs = [exact_vals(dt, xs) for xs in inputs]
        ps.append((label, dt, fmt, red, inputs))
    # sums past binary16's largest finite value: s > 0 keeps them (8.10.4, 8.10.5)
    ps.append(("f16-avg-past-65504", F16, OP_F16, AVG, [[30000.0, 1.0, -40000.0]] * n))
    return ps


def run_mismatch(addr, name):
    ranks = join_all(addr, name, 2, 8, 4)
    if not ranks:
        return
    pk0 = ranks[0].packets(F16, SUM, OP_F16, [1.0, 2.0])
    pk1 = ranks[1].packets(BF16, SUM, OP_BF16, [1.0, 2.0], forced_op=OP_BF16)
    ranks[0].send(pk0)
    ranks[1].send(pk1)
    ranks[0].collect(pk0, time.monotonic() + 3)
    check(ranks[0].aborted == ERR_MISMATCH,
          "%s: ops 10 and 11 in one round -> ABORT MISMATCH (6.2): reason %s" % (name, ranks[0].aborted))


def run_int_ops_only(addr, name):
    ranks = [Rank(addr, name, 0, 1, 8, 4)]
    ranks[0].join(time.monotonic() + 15)
    check(not (ranks[0].caps & FLAG_CAP_H16),
          "%s: --int-ops-only: JOIN_ACK without flag bit 9 (0x%04x)" % (name, ranks[0].caps))
    pk = ranks[0].packets(F16, SUM, OP_F16, [1.0, 2.0, 3.0])
    ranks[0].send(pk)
    got = ranks[0].collect(pk, time.monotonic() + 1.5)
    check(not got and ranks[0].aborted is None,
          "%s: --int-ops-only drops op 10 (no RESULT: 6.1 check 14, OP)" % name)
    ranks[0].leave()


# ---- mixed jobs with libina ---------------------------------------------------------------------

LIBINA_CHILD = r'''
import sys, json
req = json.load(sys.stdin)
out = {}
try:
    import numpy as np
    import ina
    ctx = ina.Context(switch=req["switch"], rank=req["rank"], world_size=req["world"],
                      job=req["job"], elems_per_packet=req["k"], window=req["W"], lanes=1,
                      timeout_ms=15000, join_timeout_ms=20000)
    out["info"] = {k: str(v) for k, v in dict(ctx.info()).items()}
    res = []
    for o in req["ops"]:
        if o["dt"] == 2:
            a = np.array(o["bits"], dtype=np.uint16).view(np.float16)
            ina.allreduce(a, op=o["red"], ctx=ctx)
            res.append([int(v) for v in a.view(np.uint16).tolist()])
        else:
            a = np.array(o["bits"], dtype=np.uint32).view(np.float32)
            ina.allreduce(a, op=o["red"], ctx=ctx)
            res.append([int(v) for v in a.view(np.uint32).tolist()])
    out["ops"] = res
    ctx.close()
except Exception as e:
    out["fatal"] = "%s: %s" % (type(e).__name__, e)
print(json.dumps(out))
'''


def have_numpy(args, env):
    p = subprocess.run([sys.executable, "-c", "import numpy, ina"], env=env,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return p.returncode == 0


def run_mixed(args, addr, name, wire_env, progs, n=3, libina_rank=2, k=64, w=16):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.path.abspath(args.pythondir)
    env["INA_LIBRARY"] = os.path.join(os.path.abspath(args.libdir), "libina.so")
    env["INA_QUIET"] = "1"
    env["INA_FALLBACK"] = "none"
    for v in ("INA_FLOAT_ADD", "INA_FIXED_POINT", "INA_SPARSE", "INA_WIRE_BITS", "INA_WIRE_HALF",
              "INA_FAULT"):
        env.pop(v, None)
    env.update(wire_env)
    pre = os.environ.get("INA_PEER_PRELOAD")   # an ASan build's runtime (test_protocol_peers.sh)
    if pre:
        env["LD_PRELOAD"] = pre
        env["ASAN_OPTIONS"] = "detect_leaks=0:abort_on_error=1"
    if not have_numpy(args, env):
        print("# skip: no numpy or ina package for the libina rank of %s" % name, flush=True)
        return
    def bits(dt, x):
        return rne_f16(x) if dt == F16 else f32_bits(x)
    req = {"switch": "%s:%d" % addr, "rank": libina_rank, "world": n, "job": name, "k": k, "W": w,
           "ops": [{"dt": dt, "red": "sum" if red == SUM else "avg",
                    "bits": [bits(dt, x) for x in inputs[libina_rank]]}
                   for _l, dt, _f, red, inputs in progs]}
    child = subprocess.Popen([sys.executable, "-c", LIBINA_CHILD], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
                             cwd=tempfile.gettempdir())
    PROCS.append(child)
    child.stdin.write(json.dumps(req).encode())
    child.stdin.close()
    child.stdin = None
    ranks = [Rank(addr, name, r, n, k, w) for r in range(n) if r != libina_rank]
    outs = {r.rank: [] for r in ranks}
    errs = []

    def body(rk):
        try:
            rk.join(time.monotonic() + 20)
            for _l, dt, fmt, red, inputs in progs:
                pk = rk.packets(dt, red, fmt, inputs[rk.rank])
                rk.send(pk)
                got = rk.collect(pk, time.monotonic() + 10)
                outs[rk.rank].append((pk, got))
            rk.leave()
        except Exception as e:
            errs.append("%s: %s" % (type(e).__name__, e))

    ths = [threading.Thread(target=body, args=(rk,), daemon=True) for rk in ranks]
    for t in ths:
        t.start()
    for t in ths:
        t.join(40)
    try:
        so, se = child.communicate(timeout=30)
        lib = json.loads(so.decode().strip().splitlines()[-1])
    except Exception as e:
        lib = {"fatal": "libina rank: %s" % e}
    check(not errs and "fatal" not in lib and len(lib.get("ops", [])) == len(progs),
          "%s: clean-room ranks and the libina rank ran all %d ops%s" %
          (name, len(progs), " (%s)" % "; ".join(errs + [str(lib.get("fatal", ""))]) if errs or "fatal" in lib else ""))
    if errs or "fatal" in lib:
        return
    for i, (label, dt, fmt, red, inputs) in enumerate(progs):
        problems = []
        r0 = ranks[0].rank
        pk, got = outs[r0][i]
        ops = {got[key][0][12] for key in got}
        if ops != {fmt} or len(got) != len(pk):
            problems.append("RESULT ops %s (want %d), %d of %d RESULTs" % (sorted(ops), fmt, len(got), len(pk)))
        vals = []
        per = 2 * ranks[0].k
        for p, (key, *_rest) in enumerate(pk):
            if key not in got:
                break
            h, pl = got[key]
            nel = min(per, len(inputs[0]) - p * per)
            vals.extend(decode(dt, fmt, red, list(struct.unpack(">%dH" % (2 * h[9]), pl))[:nel], h[10], n))
        lv = [val(OP_F16, b) if dt == F16 else f32_of_bits(b) for b in lib["ops"][i]]
        same = len(lv) == len(vals) and all((math.isnan(a) and math.isnan(b)) or a == b
                                            for a, b in zip(lv, vals))
        if not same:
            problems.append("libina's results differ from the clean-room rank's decode")
        for j, got_v in enumerate(vals):
            xs = [inputs[r][j] for r in range(n)]
            ex = math.fsum(xs) / (n if red == AVG else 1)
            s = got[pk[j // per][0]][0][10]
            if abs(got_v - ex) > bound(dt, fmt, red, n, xs, s):
                problems.append("element %d: %r, exact %r" % (j, got_v, ex))
                break
        check(not problems, "%s/%s: op %d echoed, libina and clean-room ranks alike, within 8.10.6's "
              "bound%s" % (name, label, fmt, (" (" + "; ".join(problems) + ")") if problems else ""))


# ---- main ----------------------------------------------------------------------------------------

def start_switch(args, extra):
    d = tempfile.mkdtemp(prefix="peer_wire16_")
    TMPDIRS.append(d)
    pf = os.path.join(d, "port")
    cmd = [os.path.join(args.bindir, "ina-switch"), "--listen", "127.0.0.1:0", "--port-file", pf,
           "--threads", "1", "--quiet"] + extra
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    PROCS.append(p)
    t_end = time.monotonic() + 10
    while time.monotonic() < t_end:
        if p.poll() is not None:
            raise PeerError("ina-switch exited: %s" % p.stderr.read().decode()[-500:])
        try:
            with open(pf) as f:
                s = f.read().strip()
            if s:
                return ("127.0.0.1", int(s)), p
        except OSError:
            pass
        time.sleep(0.05)
    raise PeerError("ina-switch wrote no port file")


def self_tests():
    ok = (rne_f16(65520.0) == 0x7C00 and rne_f16(65519.0) == 0x7BFF and rne_bf16(1.0) == 0x3F80 and
          rne_bf16(1 + 2 ** -8) == 0x3F80 and rne_bf16(1 + 3 * 2 ** -8) == 0x3F82 and
          rne_bf16(2.0 ** -133) == 0x0001 and rne_bf16(2.0 ** 128 * (1 - 2 ** -9)) == 0x7F80 and
          result_exp(OP_F16, [90000.0], 0) == 1 and result_exp(OP_F16, [65519.0], 0) == 0 and
          result_exp(OP_F16, [65520.0], 0) == 1 and op_tag(1, 8, I32, SUM, 0) == op_tag(1, 8, I32, SUM, 0))
    check(ok, "self-test: roundings to binary16 and bfloat16, s_fit (8.10.4)")


def main():
    global VERBOSE
    ap = argparse.ArgumentParser()
    ap.add_argument("--bindir", required=True)
    ap.add_argument("--libdir", default="build/lib")
    ap.add_argument("--pythondir", default="python")
    ap.add_argument("-v", action="store_true")
    args = ap.parse_args()
    VERBOSE = args.v
    threading.Thread(target=watchdog, daemon=True).start()
    rng = random.Random(20261128)
    try:
        self_tests()
        addr, _sw = start_switch(args, [])
        n, k = 3, 64
        run_sequential(addr, "w16-seq", n, programs(rng, n, k), k=k)
        run_mismatch(addr, "w16-mismatch")
        per = 2 * k
        mixed = [("f16-sum", F16, OP_F16, SUM,
                  [exact_vals(F16, rnd_vals(rng, 3 * per + 5, -12, 8)) for _ in range(n)]),
                 ("f16-avg", F16, OP_F16, AVG,
                  [exact_vals(F16, rnd_vals(rng, per, -12, 8)) for _ in range(n)])]
        run_mixed(args, addr, "w16-mixed-f16", {}, mixed)
        f32p = [("f32-sum", F32, OP_BF16, SUM,
                 [exact_vals(F32, rnd_vals(rng, 2 * per + 9, -40, 40)) for _ in range(n)])]
        run_mixed(args, addr, "w16-mixed-f32-bf16", {"INA_WIRE_BITS": "16"}, f32p)
        f32h = [(l, d, OP_F16, r, x) for l, d, _f, r, x in f32p]
        run_mixed(args, addr, "w16-mixed-f32-fp16", {"INA_WIRE_BITS": "16", "INA_WIRE_HALF": "fp16"},
                  f32h)
        addr2, _sw2 = start_switch(args, ["--int-ops-only"])
        run_int_ops_only(addr2, "w16-intops")
    except Exception as e:
        check(False, "peer aborted: %s: %s" % (type(e).__name__, e))
    finally:
        for p in PROCS:
            try:
                p.kill()
                p.wait(5)
            except Exception:
                pass
        for d in TMPDIRS:
            shutil.rmtree(d, ignore_errors=True)
    nfail = sum(1 for ok, _ in RESULTS if not ok)
    print("# %d checks, %d failed, %.1f s" % (len(RESULTS), nfail, time.monotonic() - T0), flush=True)
    sys.exit(0 if nfail == 0 and RESULTS else 1)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Clean-room peer for the float dtypes and reductions of the ina data path.

Written from docs/PROTOCOL.md alone (sections 2-8 and 13), as a conformance test:
it starts ina-switch, runs jobs whose ranks are clean-room workers (this file)
and, in mixed jobs, one libina rank through the Python binding, and checks every
result against the value the spec defines, bit for bit where the spec makes it
exact, and against the error bounds of section 8.6 (8.8, 13.3) with exact
rational sums.

Covered: FLOAT32, FLOAT16, BFLOAT16, FLOAT64 SUM and AVG in two rounds (op 0,
section 7.2 / 8.1-8.4), in one round (op 3, 8.7), as floats (op 4, 8.8) and in
fixed point (op 5, 13); NONFINITE class codes (8.1); float MAX/MIN order keys
(ops 1, 2, 8.9); hostile DATA (forged exp, forged class codes, garbage under an
exp of ZERO, an out-of-range exp, the fixed-point invalid code).

Usage: python3 peer_floats.py --bindir DIR [--libdir DIR] [--pythondir DIR] [-v]
Standard library only; exits 0 only if every check passed.
"""

import argparse
import itertools
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
from fractions import Fraction

# ---------------------------------------------------------------------------
# Global deadline (BRIEF: never hang)
# ---------------------------------------------------------------------------
GLOBAL_LIMIT_S = 60.0
T0 = time.monotonic()
WAITING = ["start-up"]
PROCS = []          # every process we started (daemons, libina ranks)
TMPDIRS = []
VERBOSE = False
RESULTS = []        # (ok, text)
_print_lock = threading.Lock()


def log(*a):
    if VERBOSE:
        with _print_lock:
            print("#", *a, flush=True)


def check(ok, text):
    RESULTS.append((bool(ok), text))
    with _print_lock:
        print(("ok - " if ok else "FAIL - ") + text, flush=True)
    return ok


def kill_all():
    for p in PROCS:
        try:
            if p.poll() is None:
                p.kill()
        except Exception:
            pass
    for p in PROCS:
        try:
            p.wait(timeout=2)
        except Exception:
            pass


def watchdog():
    while True:
        time.sleep(0.5)
        if time.monotonic() - T0 > GLOBAL_LIMIT_S:
            with _print_lock:
                print("FAIL - global deadline (%.0f s) passed while waiting for: %s"
                      % (GLOBAL_LIMIT_S, WAITING[0]), flush=True)
            kill_all()
            os._exit(1)


def time_left():
    return GLOBAL_LIMIT_S - (time.monotonic() - T0)


# ---------------------------------------------------------------------------
# Constants (section 1, 3, 8)
# ---------------------------------------------------------------------------
MAGIC, VERSION = 0x494E, 1
K_DATA, K_RESULT, K_JOIN, K_JOIN_ACK, K_JOIN_NAK, K_LEAVE, K_ABORT, K_REDIRECT = 1, 2, 16, 17, 18, 19, 20, 21
RANK_SWITCH = 0xFFFF
FLAG_ABORT, FLAG_CAP_BFP, FLAG_CAP_F32, FLAG_CAP_FIX = 0x1, 0x2, 0x4, 0x40
I32, F32, F16, BF16, F64 = 0, 1, 2, 3, 4          # dtype values, section 1
SUM, MAX, MIN, AVG = 0, 1, 2, 3                   # reduction values, section 1
DT_NAME = {I32: "INT32", F32: "FLOAT32", F16: "FLOAT16", BF16: "BFLOAT16", F64: "FLOAT64"}
RED_NAME = {SUM: "SUM", MAX: "MAX", MIN: "MIN", AVG: "AVG"}
EXP_ZERO, EXP_NF = -32768, 32767                  # section 8.1
FIX_INVALID = -(1 << 31)                          # section 13.3
ERR_MISMATCH, ERR_RANGE = -1005, -1021

# header: section 3 (32 bytes, big-endian)
HDR = struct.Struct(">HBBHHIIIIHhHBB")
assert HDR.size == 32


def pack_hdr(kind, job=0, rank=0, session=0, token=0, slot=0, seq=0, count=0, exp=0,
             flags=0, op=0, tag=0):
    return HDR.pack(MAGIC, VERSION, kind, job, rank, session, token, slot, seq & 0xFFFFFFFF,
                    count, exp, flags, op, tag)


def s32(x):
    x &= 0xFFFFFFFF
    return x - (1 << 32) if x & 0x80000000 else x


# ---------------------------------------------------------------------------
# Number formats: exact conversions and one correct rounding (RNE)
# ---------------------------------------------------------------------------
# (precision incl. hidden bit, exponent bits, width)
FMT = {F32: (24, 8, 32), F16: (11, 5, 16), BF16: (8, 8, 16), F64: (53, 11, 64)}


def to_float(dt, b):
    """Exact value of a bit pattern as a Python float (section 8.2: 16-bit values are exact floats)."""
    if dt == F32:
        return struct.unpack(">f", struct.pack(">I", b & 0xFFFFFFFF))[0]
    if dt == F16:
        return struct.unpack(">e", struct.pack(">H", b & 0xFFFF))[0]
    if dt == BF16:
        return struct.unpack(">f", struct.pack(">I", (b & 0xFFFF) << 16))[0]
    if dt == F64:
        return struct.unpack(">d", struct.pack(">Q", b & 0xFFFFFFFFFFFFFFFF))[0]
    raise ValueError(dt)


def pow2(k):
    return Fraction(1 << k) if k >= 0 else Fraction(1, 1 << -k)


def round_to(dt, v):
    """Round v (float or Fraction) once to dtype dt, nearest-even, IEEE overflow to +-Inf,
    gradual underflow; returns the bit pattern. NaN -> the canonical quiet NaN."""
    p, eb, w = FMT[dt]
    sign_bit = 1 << (w - 1)
    bias = (1 << (eb - 1)) - 1
    inf_bits = ((1 << eb) - 1) << (p - 1)
    if isinstance(v, float):
        if math.isnan(v):
            return inf_bits | (1 << (p - 2))
        if math.isinf(v):
            return inf_bits | (sign_bit if v < 0 else 0)
        if v == 0:
            return sign_bit if math.copysign(1.0, v) < 0 else 0
        if dt == F64:
            return struct.unpack(">Q", struct.pack(">d", v))[0]
        fr = Fraction(v)
    else:
        fr = v
        if fr == 0:
            return 0
    s = sign_bit if fr < 0 else 0
    a = abs(fr)
    e = a.numerator.bit_length() - a.denominator.bit_length()
    if a < pow2(e):
        e -= 1
    emin = 1 - bias
    qe = max(e, emin) - (p - 1)
    scaled = a / pow2(qe)
    n = scaled.numerator // scaled.denominator
    r = scaled - n
    if r > Fraction(1, 2) or (r == Fraction(1, 2) and (n & 1)):
        n += 1
    if n >= (1 << p):
        n >>= 1
        qe += 1
    if n < (1 << (p - 1)):           # subnormal (qe is emin - p + 1 here)
        return s | n
    ef = qe + (p - 1) + bias
    if ef >= (1 << eb) - 1:
        return s | inf_bits
    return s | (ef << (p - 1)) | (n - (1 << (p - 1)))


def is_nan_bits(dt, b):
    return math.isnan(to_float(dt, b))


def same(dt, a, b):
    """Bit equality, except that any two NaNs are equal (the spec does not fix NaN bits
    of a decoded sum: 'NaN payloads are not preserved', section 8.1)."""
    if is_nan_bits(dt, a) and is_nan_bits(dt, b):
        return True
    return a == b


def bits_of(dt, x):
    return round_to(dt, float(x)) if not isinstance(x, Fraction) else round_to(dt, x)


def fmt_val(dt, b):
    return "%r(0x%X)" % (to_float(dt, b), b)


def max_finite(dt):
    p, eb, _ = FMT[dt]
    bias = (1 << (eb - 1)) - 1
    return (2 - pow2(1 - p)) * pow2(bias)


# ---------------------------------------------------------------------------
# Section 8.1 - 8.4: block floating point
# ---------------------------------------------------------------------------
def L_of(N):
    return (N - 1).bit_length()          # ceil(log2 N), 0 for N = 1


def block_exp(dt, xs):
    """ina__quant_block_exp (section 8.1; FLOAT64 floored at -960, section 8.3)."""
    if any(math.isnan(x) or math.isinf(x) for x in xs):
        return EXP_NF
    amax = max((abs(x) for x in xs), default=0.0)
    if amax == 0:
        return EXP_ZERO
    e = math.frexp(amax)[1]              # 2^(e-1) <= amax < 2^e
    if dt == F64:
        e = max(e, -960)
    return e


def class_code(x):
    """NONFINITE class codes, section 8.1."""
    if math.isnan(x):
        return 1 << 18
    if math.isinf(x):
        return 1 if x > 0 else 1 << 9
    return 0


def encode(xs, E, N):
    """Section 8.1 encode with agreed exponent E (also 8.3 for doubles)."""
    if E == EXP_ZERO:
        return [0] * len(xs)
    if E == EXP_NF:
        return [class_code(x) for x in xs]
    L = L_of(N)
    s = 31 - L - E
    Q = (1 << (31 - L)) - 1
    out = []
    for x in xs:
        if math.isnan(x) or math.isinf(x):   # cannot happen with E = max(e); defensive
            out.append(0)
            continue
        try:
            t = math.ldexp(x, s)
        except OverflowError:
            t = math.copysign(float("inf"), x)
        if math.isinf(t):
            q = Q if t > 0 else -Q
        else:
            q = max(-Q, min(Q, round(t)))     # Python round(): half to even
        out.append(q)
    return out


def decode_nf(code):
    c = code & 0xFFFFFFFF
    P, M, Qf = c & 0x1FF, (c >> 9) & 0x1FF, (c >> 18) & 0x1FF
    if Qf > 0 or (P > 0 and M > 0):
        return float("nan")
    if P > 0:
        return float("inf")
    if M > 0:
        return float("-inf")
    return float("nan")


def decode(dt, sums, E, N, avg):
    """Section 8.1 decode (8.2 for the 16-bit types, 8.3 FLOAT64, 8.4 AVG)."""
    out = []
    if E == EXP_ZERO:
        return [0] * len(sums)          # +0.0
    if E == EXP_NF:
        return [round_to(dt, decode_nf(s)) for s in sums]
    L = L_of(N)
    sc = E + L - 31
    for s in sums:
        s = s32(s)
        try:
            if avg:
                v = math.ldexp(s / N, sc)      # (sum/N) rounded once in double, exact scaling
            else:
                v = math.ldexp(float(s), sc)   # exact
        except OverflowError:
            v = math.copysign(float("inf"), s)
        out.append(round_to(dt, v))
    return out


# Section 8.7: the switch's op-3 combine
def rshift_round(x, d):
    if d > 32:
        return 0
    return (x + (1 << (d - 1))) >> d       # floor((x + 2^(d-1)) / 2^d), 64-bit


def op3_combine(Sexp, V, e, P):
    if e == EXP_NF or Sexp == EXP_NF:
        if e == EXP_NF and Sexp != EXP_NF:
            return e, list(P)
        if e == EXP_NF and Sexp == EXP_NF:
            return Sexp, [s32(v + p) for v, p in zip(V, P)]
        return Sexp, V
    if e == EXP_ZERO:
        return Sexp, V
    if Sexp == EXP_ZERO:
        return e, list(P)
    d = e - Sexp
    if d > 0:
        V = [rshift_round(v, d) for v in V]
        return e, [s32(v + p) for v, p in zip(V, P)]
    if d == 0:
        return Sexp, [s32(v + p) for v, p in zip(V, P)]
    return Sexp, [s32(v + rshift_round(p, -d)) for v, p in zip(V, P)]


# Section 8.8: binary32 add with IEEE rules
def f32_add(a, b):
    fa, fb = to_float(F32, a), to_float(F32, b)
    if math.isnan(fa) or math.isnan(fb):
        return 0x7FC00000
    if math.isinf(fa) or math.isinf(fb):
        if math.isinf(fa) and math.isinf(fb) and (fa > 0) != (fb > 0):
            return 0x7FC00000
        return a if math.isinf(fa) else b
    ex = Fraction(fa) + Fraction(fb)
    if ex == 0:
        if fa == 0 and fb == 0 and (a >> 31) and (b >> 31):
            return 0x80000000          # -0 + -0 = -0
        return 0                       # exact zero sum: +0 under RNE
    return round_to(F32, ex)


def widen32(dt, b):
    """16-bit and 32-bit patterns widened exactly to binary32 bits (section 8.2, 8.8)."""
    if dt == F32:
        return b & 0xFFFFFFFF
    if dt == BF16:
        return (b & 0xFFFF) << 16
    if dt == F16:
        x = to_float(F16, b)
        if math.isnan(x):               # keep a NaN a NaN (sign and top payload bits)
            return ((b & 0x8000) << 16) | 0x7F800000 | ((b & 0x3FF) << 13)
        return round_to(F32, x)
    raise ValueError(dt)


# Section 13.3: fixed point
def fix_encode(x, f):
    if math.isnan(x) or math.isinf(x):
        return FIX_INVALID
    try:
        t = math.ldexp(x, f)
    except OverflowError:
        return FIX_INVALID
    if math.isinf(t):
        return FIX_INVALID
    q = round(t)
    if abs(q) > (1 << 31) - 1:
        return FIX_INVALID
    return q


def fix_combine(V, q):
    if V == FIX_INVALID or q == FIX_INVALID:
        return FIX_INVALID
    s = V + q
    if s > (1 << 31) - 1 or s < -((1 << 31) - 1):
        return FIX_INVALID
    return s


def fix_decode(dt, v, f, N, avg):
    v = s32(v)
    if v == FIX_INVALID:
        return round_to(dt, float("nan"))
    x = math.ldexp(float(v), -f)
    if avg:
        x = x / N
    return round_to(dt, x)


# Section 8.9: order keys
def key_map(b):
    b &= 0xFFFFFFFF
    return b ^ ((((0 - (b >> 31)) & 0xFFFFFFFF) >> 1))


def key_encode(dt, b, red):
    w = widen32(dt, b)
    if math.isnan(to_float(F32, w)):
        w = 0x7FC00000 if red == MAX else 0xFFC00000
    return s32(key_map(w))


def key_decode(dt, k):
    b = key_map(k)
    if math.isnan(to_float(F32, b)):
        b = 0x7FC00000
    if dt == F32:
        return b
    if dt == BF16:
        if math.isnan(to_float(F32, b)):
            return 0x7FC0
        return b >> 16                 # exact: it is one of the inputs
    return round_to(F16, to_float(F32, b))


# Section 7.2: tags
M64 = (1 << 64) - 1


def op_tag(n, count, dtype, red, s, p):
    x = ((n * 0x9E3779B97F4A7C15) & M64) ^ ((count * 0xC2B2AE3D27D4EB4F) & M64) ^ dtype ^ (red << 8) ^ (s << 16)
    x &= M64
    x ^= x >> 31
    x = (x * 0xBF58476D1CE4E5B9) & M64
    x ^= x >> 29
    y = ((x + p) * 0xD6E8FEB86659FD93) & M64
    return ((y ^ (y >> 32)) >> 24) & 0xFF


def choose_wire(dt, red, count, k, W, N, caps, cfg):
    """Which wire op and lag an op uses (sections 7.2, 8.7 'Who' and precedence, 8.8, 8.9, 13.2).
    These ranks are configured to keep the 32-bit wire (section 8.10.1): never ops 10, 11."""
    nb = -(-count // k)
    if red in (MAX, MIN):
        return red, 0
    if dt == I32:
        return 0, 0
    if cfg.get("float_add") and (caps & FLAG_CAP_F32) and dt != F64:
        return 4, 0
    if cfg.get("fixed") and (caps & FLAG_CAP_FIX):
        return 5, 0
    # 8.7 'Who': a worker sends op 3 at N <= 2; the switch combines op 3 at any N (an older
    # worker sends it at any N), which clean-room-only jobs check with one_round="any".
    one = cfg.get("one_round", True)
    if (caps & FLAG_CAP_BFP) and one and (N <= 2 or one == "any") and nb <= W:
        return 3, 0
    return 0, min(W, nb)


# ---------------------------------------------------------------------------
# Contributions: what rank r puts into the payload of one block (shared by the
# clean-room worker and the reference). forge(kind, block, ...) may replace it.
# ---------------------------------------------------------------------------
class Contrib:
    def __init__(self, dt, red, wire, N, k, bits, fixed=0, forge=None):
        self.dt, self.red, self.wire, self.N, self.k = dt, red, wire, N, k
        self.bits = bits
        self.fixed = fixed
        self.forge = forge or {}
        self.nb = -(-len(bits) // k)
        self.blocks = [bits[b * k:(b + 1) * k] for b in range(self.nb)]
        if dt != I32:
            self.fl = [[to_float(dt, x) for x in blk] for blk in self.blocks]

    def exp_of(self, b):
        """exp field announcing block b (ops 0 and 3)."""
        if "exp" in self.forge and b in self.forge["exp"]:
            return self.forge["exp"][b]
        return block_exp(self.dt, self.fl[b])

    def payload(self, b, E=None):
        if "payload" in self.forge and b in self.forge["payload"]:
            return list(self.forge["payload"][b])
        dt, wire = self.dt, self.wire
        if wire in (1, 2) and dt != I32:
            return [key_encode(dt, x, self.red) for x in self.blocks[b]]
        if dt == I32:
            return [s32(x) for x in self.blocks[b]]
        if wire == 4:
            return [s32(widen32(dt, x)) for x in self.blocks[b]]
        if wire == 5:
            return [fix_encode(x, self.fixed) for x in self.fl[b]]
        if wire == 3:
            return encode(self.fl[b], self.exp_of(b), self.N)
        return encode(self.fl[b], E, self.N)      # wire 0, two rounds


def decode_block(dt, red, wire, N, payload, E, fixed):
    avg = red == AVG
    if wire in (1, 2):
        if dt == I32:
            return [p & 0xFFFFFFFF for p in payload]
        return [key_decode(dt, p) for p in payload]
    if dt == I32:
        v = [s32(p) for p in payload]
        if avg:
            v = [int(x / N) if x >= 0 else -int(-x / N) for x in v]
        return [x & 0xFFFFFFFF for x in v]
    if wire == 4:
        out = []
        for p in payload:
            f = to_float(F32, p & 0xFFFFFFFF)
            if avg:
                out.append(round_to(dt, f / N) if not math.isnan(f) else round_to(dt, f))
            elif dt == F32:
                out.append(p & 0xFFFFFFFF)
            else:
                out.append(round_to(dt, f))
        return out
    if wire == 5:
        return [fix_decode(dt, p, fixed, N, avg) for p in payload]
    return decode(dt, payload, E, N, avg)


def reference(contribs, dt, red, wire, N, fixed=0):
    """Per block: the set of results (tuples of bits) the spec allows, and the RESULT exps.
    Ops 3 and 4 depend on arrival order (8.7, 8.8): every order is enumerated."""
    nb = contribs[0].nb
    allowed = []
    for b in range(nb):
        if wire == 0 and dt != I32:
            E = max(c.exp_of(b) for c in contribs)      # int16 max (section 8.1)
            sums = [0] * len(contribs[0].blocks[b])
            for c in contribs:
                sums = [s32(x + y) for x, y in zip(sums, c.payload(b, E))]
            allowed.append({tuple(decode_block(dt, red, 0, N, sums, E, fixed))})
            continue
        res = set()
        for order in itertools.permutations(range(N)):
            first = contribs[order[0]]
            if wire == 3:
                Sexp, V = first.exp_of(b), first.payload(b)
                for r in order[1:]:
                    Sexp, V = op3_combine(Sexp, V, contribs[r].exp_of(b), contribs[r].payload(b))
                res.add(tuple(decode_block(dt, red, 3, N, V, Sexp, fixed)))
            elif wire == 4:
                V = [p & 0xFFFFFFFF for p in first.payload(b)]
                for r in order[1:]:
                    V = [f32_add(v, p & 0xFFFFFFFF) for v, p in zip(V, contribs[r].payload(b))]
                res.add(tuple(decode_block(dt, red, 4, N, V, 0, fixed)))
            elif wire == 5:
                V = list(first.payload(b))
                for r in order[1:]:
                    V = [fix_combine(v, q) for v, q in zip(V, contribs[r].payload(b))]
                res.add(tuple(decode_block(dt, red, 5, N, V, 0, fixed)))
            elif wire in (1, 2):
                V = list(first.payload(b))
                for r in order[1:]:
                    P = contribs[r].payload(b)
                    V = [max(v, p) if wire == 1 else min(v, p) for v, p in zip(V, P)]
                res.add(tuple(decode_block(dt, red, wire, N, V, 0, fixed)))
            else:
                V = list(first.payload(b))
                for r in order[1:]:
                    V = [s32(v + p) for v, p in zip(V, contribs[r].payload(b))]
                res.add(tuple(decode_block(dt, red, 0, N, V, 0, fixed)))
                break
        allowed.append(res)
    return allowed


# ---------------------------------------------------------------------------
# Error bounds (8.1, 8.2, 8.3, 8.4, 8.6, 8.8, 13.3) against exact rational sums
# ---------------------------------------------------------------------------
REL = {F32: (pow2(-24), pow2(-149)), F16: (pow2(-11), pow2(-25)), BF16: (pow2(-8), pow2(-134)),
       F64: (Fraction(0), Fraction(0))}


def check_bound(dt, red, wire, N, k, inputs, result, fixed=0):
    """Returns a list of violations (strings). inputs: per rank bit lists."""
    bad = []
    count = len(result)
    L = L_of(N)
    rel, sub = REL[dt]
    for b in range(-(-count // k)):
        idx = range(b * k, min(count, (b + 1) * k))
        vals = [[to_float(dt, inputs[r][i]) for i in idx] for r in range(N)]
        block_nf = any(math.isnan(x) or math.isinf(x) for row in vals for x in row)
        if block_nf and wire in (0, 3):
            continue            # a NONFINITE block: checked exactly, not by the bound
        amax = max((abs(x) for row in vals for x in row if not (math.isnan(x) or math.isinf(x))), default=0.0)
        if amax == 0:
            first = Fraction(0)
        else:
            E = math.frexp(amax)[1]
            if dt == F64:
                E = max(E, -960)
            first = N * pow2(E + L - 31)
        for j, i in enumerate(idx):
            xs = [vals[r][j] for r in range(N)]
            if any(math.isnan(x) or math.isinf(x) for x in xs):
                continue            # ops 4, 5: only its own element is affected
            exact = sum(Fraction(x) for x in xs)
            if wire == 4:
                abs_sum = sum(abs(Fraction(x)) for x in xs)
                bnd = (N - 1) * pow2(-24) * abs_sum * (1 + rel) + rel * abs(exact) + sub
            elif wire == 5:
                bnd = N * pow2(-(fixed + 1)) * (1 + rel) + rel * abs(exact) + sub
            else:
                bnd = first + rel * abs(exact) + sub
            target = exact
            if red == AVG:
                target = exact / N
                bnd = bnd / N + pow2(-52) * abs(target) + sub
            got = to_float(dt, result[i])
            if math.isnan(got):
                bad.append("elem %d: NaN for finite inputs" % i)
                continue
            if math.isinf(got):
                # allowed when the exact value is within the bound of the overflow threshold
                if abs(target) + bnd >= max_finite(dt) and (got > 0) == (target > 0):
                    continue
                bad.append("elem %d: %r, exact %s" % (i, got, float(target)))
                continue
            err = abs(Fraction(got) - target)
            if err > bnd:
                bad.append("elem %d: got %r exact %r err %.3g > bound %.3g"
                           % (i, got, float(target), float(err), float(bnd)))
    return bad


# ---------------------------------------------------------------------------
# The clean-room worker (sections 2, 3, 4.1, 5, 7)
# ---------------------------------------------------------------------------
class PeerError(Exception):
    pass


class Worker:
    def __init__(self, addr, name, rank, N, k, W, cfg=None):
        self.addr, self.name, self.rank, self.N = addr, name, rank, N
        self.k_prop, self.W_prop = k, W
        self.cfg = dict(cfg or {})
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.connect(addr)       # section 2: one connected socket per context
        self.sock.settimeout(0.05)
        self.nops = 0                 # op number n (section 1)
        self.g = 0                    # stream index (section 7.2)
        self.stale = 0
        self.session = None
        self.retransmits = 0
        self.nonfinite_blocks = 0     # blocks decoded with E = NONFINITE (8.1 ina_stats.nonfinite_blocks)
        self.fixed_invalid = 0        # elements that came back invalid (13.3 ina_stats.fixed_invalid)

    # section 4.1, 5.2, 7.1
    def join(self, deadline):
        nonce = random.getrandbits(64) or 1
        name = self.name.encode()
        body = struct.pack(">QHHIIIHBBHH32s", nonce, self.N, self.k_prop, self.W_prop, 100, 0, 0,
                           0, 1, 0, 0, name)
        assert len(body) == 64
        next_send, gap = 0.0, 0.1
        while True:
            now = time.monotonic()
            if now > deadline:
                raise PeerError("rank %d: no JOIN_ACK" % self.rank)
            if now >= next_send:
                left_ms = max(1, int((deadline - now) * 1000))
                self.sock.send(pack_hdr(K_JOIN, rank=self.rank, seq=left_ms) + body)
                next_send = now + gap
                gap = min(1.0, gap * 2)
            try:
                d = self.sock.recv(65535)
            except socket.timeout:
                continue
            except ConnectionRefusedError:
                continue
            if len(d) < 32:
                continue
            h = HDR.unpack_from(d)
            if h[0] != MAGIC or h[1] != VERSION:
                continue
            kind = h[2]
            if kind == K_JOIN_ACK and len(d) >= 96:
                (bn, world, elems, window, _v, _g, _p, lane, nlanes) = struct.unpack_from(">QHHIIIHBB", d, 32)
                if bn != nonce:
                    continue
                if world != self.N or lane != 0 or nlanes != 1 or not (1 <= elems <= 16360) \
                        or window < 1 or window > 4096 or window & (window - 1):
                    raise PeerError("JOIN_ACK with invalid parameters")
                self.job, self.session, self.token = h[3], h[5], h[6]
                self.k, self.W, self.caps = elems, window, h[11]
                log("rank %d joined job %d session %08x k=%d W=%d flags=0x%x"
                    % (self.rank, self.job, self.session, self.k, self.W, self.caps))
                return
            if kind == K_JOIN_NAK and len(d) >= 48:
                bn, reason = struct.unpack_from(">Qi", d, 32)
                if bn == nonce:
                    raise PeerError("JOIN_NAK %d" % reason)
            if kind == K_REDIRECT and len(d) >= 48:
                bn, _r, port = struct.unpack_from(">QiH", d, 32)
                if bn == nonce and port:
                    self.sock.connect((self.addr[0], port))
                    next_send, gap = 0.0, 0.1

    def leave(self, abort=False):
        if self.session is None:
            return
        pk = pack_hdr(K_LEAVE, self.job, self.rank, self.session, self.token,
                      flags=FLAG_ABORT if abort else 0)
        for _ in range(2):
            try:
                self.sock.send(pk)
            except OSError:
                pass
        self.sock.close()

    def allreduce(self, dt, red, bits, forge=None, deadline=None):
        """One op; returns dict(result=bits, wire=, lag=, raw={p: (exp, op, tag, payload)}, status=)."""
        count = len(bits)
        deadline = deadline or (time.monotonic() + 10)
        if count == 0:
            return {"result": [], "wire": None, "raw": {}, "status": 0}
        k, W, N = self.k, self.W, self.N
        self.nops += 1
        n = self.nops
        wire, lag = choose_wire(dt, red, count, k, W, N, self.caps, self.cfg)
        fixed = self.cfg.get("fixed", 0) if wire == 5 else 0
        c = Contrib(dt, red, wire, N, k, bits, fixed, forge)
        nb = c.nb
        npk = nb + lag
        two_round = wire == 0 and dt != I32
        g0 = self.g
        E = {}          # agreed exponent per block (two rounds)
        raw = {}
        inflight = {}   # slot -> [p, seq, datagram, due, timeout]
        nextp = 0
        while len(raw) < npk:
            now = time.monotonic()
            if now > deadline:
                raise PeerError("rank %d: op %d (%s %s) timed out, %d/%d results"
                                % (self.rank, n, DT_NAME[dt], RED_NAME[red], len(raw), npk))
            # section 7.3 send conditions, strictly in stream order
            while nextp < npk:
                g = g0 + nextp
                slot = g % W
                if slot in inflight:
                    break
                if two_round and nextp >= lag and (nextp - lag) not in raw:
                    break
                seq = (g // W) & 0xFFFFFFFF
                p = nextp
                if two_round:
                    cnt = len(c.blocks[p - lag]) if p >= lag else 0
                    exp = c.exp_of(p) if p < nb else EXP_ZERO
                    pay = c.payload(p - lag, E[p - lag]) if p >= lag else []
                elif wire == 3:
                    cnt, exp, pay = len(c.blocks[p]), c.exp_of(p), c.payload(p)
                else:
                    cnt, exp, pay = len(c.blocks[p]), 0, c.payload(p)
                tag = op_tag(n, count, dt, red, fixed, p)
                dg = pack_hdr(K_DATA, self.job, self.rank, self.session, self.token,
                              slot | ((seq & 1) << 31), seq, cnt, exp, 0, wire, tag)
                dg += struct.pack(">%di" % cnt, *[s32(x) for x in pay])
                self.sock.send(dg)
                inflight[slot] = [p, seq, dg, now + 0.1, 0.1]
                nextp += 1
            wait = 0.05
            if inflight:
                wait = max(0.001, min(0.05, min(v[3] for v in inflight.values()) - now))
            self.sock.settimeout(wait)
            try:
                d = self.sock.recv(65535)
            except socket.timeout:
                d = None
            except ConnectionRefusedError:
                d = None
            if d is not None:
                self._on_datagram(d, inflight, raw, E, nb, lag, two_round, n, count, dt, red, fixed, wire)
            now = time.monotonic()
            for v in inflight.values():       # section 7.6: resend the identical datagram
                if now >= v[3]:
                    self.sock.send(v[2])
                    self.retransmits += 1
                    v[4] = min(1.0, v[4] * 2)
                    v[3] = now + v[4]
        self.g = g0 + npk
        # decode (section 7.5 rule 8)
        out, status = [], 0
        for b in range(nb):
            p = b + lag
            exp, op, tag, pay = raw[p]
            Eb = E.get(b) if two_round else exp
            blk = decode_block(dt, red, wire, N, pay, Eb, fixed)
            if wire in (0, 3) and dt != I32 and Eb == EXP_NF:
                self.nonfinite_blocks += 1
            if wire == 5 and any(s32(x) == FIX_INVALID for x in pay):
                status = ERR_RANGE
                self.fixed_invalid += sum(1 for x in pay if s32(x) == FIX_INVALID)
            out.extend(blk)
        return {"result": out, "wire": wire, "lag": lag, "raw": raw, "status": status, "n": n}

    def _on_datagram(self, d, inflight, raw, E, nb, lag, two_round, n, count, dt, red, fixed, wire):
        # section 7.5, in order
        if len(d) < 32:
            self.stale += 1
            return
        h = HDR.unpack_from(d)
        (magic, ver, kind, job, _rank, session, token, slotf, seq, cnt, exp, _flags, op, tag) = h
        if magic != MAGIC or ver != VERSION:
            self.stale += 1
            return
        if kind == K_ABORT and session == self.session and token == self.token:
            reason = struct.unpack_from(">i", d, 40)[0] if len(d) >= 48 else -1002
            raise PeerError("rank %d: ABORT reason %d" % (self.rank, reason))
        if kind != K_RESULT or len(d) != 32 + 4 * cnt:
            self.stale += 1
            return
        if job != self.job or session != self.session or token != self.token:
            self.stale += 1
            return
        slot, setb = slotf & 0x7FFFFFFF, slotf >> 31
        if slot >= self.W or setb != (seq & 1):
            self.stale += 1
            return
        fl = inflight.get(slot)
        if fl is None or fl[1] != seq:
            self.stale += 1
            return
        p = fl[0]
        if tag != op_tag(n, count, dt, red, fixed, p) or op != wire:
            self.stale += 1
            return
        sent_cnt = struct.unpack_from(">H", fl[2], 24)[0]
        if cnt != sent_cnt:
            raise PeerError("rank %d: RESULT count %d != %d" % (self.rank, cnt, sent_cnt))
        pay = list(struct.unpack_from(">%di" % cnt, d, 32))
        raw[p] = (exp, op, tag, pay)
        if two_round and p < nb:
            E[p] = exp
        del inflight[slot]


# ---------------------------------------------------------------------------
# The libina rank (Python binding, run by /usr/bin/python3 in a child process)
# ---------------------------------------------------------------------------
LIBINA_CHILD = r'''
import sys, json, time
req = json.load(sys.stdin)
out = {"ops": []}
try:
    import numpy as np
    import ina
    torch = None
    if any(o["dt"] == 3 for o in req["ops"]):
        import torch
    kw = dict(switch=req["switch"], rank=req["rank"], world_size=req["world"], job=req["job"],
              elems_per_packet=req["k"], window=req["W"], lanes=1, timeout_ms=15000,
              join_timeout_ms=20000)
    if req.get("float_add"):
        kw["float_add"] = "switch"
    if req.get("fixed"):
        kw["fixed_point_bits"] = req["fixed"]
    ctx = ina.Context(**kw)
    out["info"] = {a: str(getattr(ctx, a, None)) for a in
                   ("float_add", "elems_per_packet", "window", "lanes", "path")}
    try:
        out["info"]["ctx_info"] = {k: str(v) for k, v in dict(ctx.info()).items()}
    except Exception as e:
        out["info"]["ctx_info_err"] = repr(e)
    U = {1: np.uint32, 2: np.uint16, 4: np.uint64}
    F = {1: np.float32, 2: np.float16, 4: np.float64}
    for o in req["ops"]:
        dt, bits = o["dt"], o["bits"]
        if dt == 3:
            a = torch.tensor([b - 65536 if b >= 32768 else b for b in bits],
                             dtype=torch.int16).view(torch.bfloat16)
        else:
            a = np.array(bits, dtype=U[dt]).view(F[dt])
        err = None
        if o.get("delay"):
            time.sleep(o["delay"])
        try:
            ina.allreduce(a, op=o["red"], ctx=ctx)
        except ina.InaError as e:
            err = [e.code, e.name]
        if dt == 3:
            rb = [v & 0xFFFF for v in a.view(torch.int16).tolist()]
        else:
            rb = [int(v) for v in a.view(U[dt]).tolist()]
        out["ops"].append({"bits": rb, "err": err})
        if err and err[0] != -1021:
            break
    try:
        out["stats"] = {k: str(v) for k, v in dict(ctx.stats()).items()}
    except Exception as e:
        out["stats_err"] = repr(e)
    ctx.close()
except BaseException as e:
    import traceback
    out["fatal"] = traceback.format_exc()
print(json.dumps(out), flush=True)
'''

HAVE_TORCH = None


def libina_env(args):
    env = dict(os.environ)
    env["PYTHONPATH"] = args.pythondir
    env["INA_LIBRARY"] = os.path.join(args.libdir, "libina.so")
    env["INA_QUIET"] = "1"
    env["INA_FALLBACK"] = "none"
    env["INA_LANES"] = "1"
    for v in ("INA_FLOAT_ADD", "INA_FIXED_POINT", "INA_ONE_ROUND", "INA_SPARSE", "INA_FAULT",
              "INA_WIRE_HALF"):
        env.pop(v, None)
    # This peer plays sections 8.1-8.9 and 13: its ranks keep the 32-bit wire, which
    # section 8.10.1 lets a worker do ("unless the worker is configured to keep the
    # 32-bit wire (libina: INA_WIRE_BITS=32)"). peer_wire16.py plays section 8.10.
    env["INA_WIRE_BITS"] = "32"
    pre = os.environ.get("INA_PEER_PRELOAD")
    if pre:
        env["LD_PRELOAD"] = pre
        env["ASAN_OPTIONS"] = "detect_leaks=0:abort_on_error=1"
    return env


def have_torch(args):
    global HAVE_TORCH
    if HAVE_TORCH is None:
        try:
            r = subprocess.run(["/usr/bin/python3", "-c", "import torch"], env=libina_env(args),
                               capture_output=True, timeout=20)
            HAVE_TORCH = r.returncode == 0
        except Exception:
            HAVE_TORCH = False
    return HAVE_TORCH


# ---------------------------------------------------------------------------
# Test programs
# ---------------------------------------------------------------------------
NMAX = 3
K_ELEMS, WINDOW = 8, 4    # small k and W: ops of <= 4 blocks take op 3, larger ones two rounds


def rnd_vals(rng, n, lo_exp, hi_exp, zero_p=0.0, neg=True):
    out = []
    for _ in range(n):
        if rng.random() < zero_p:
            out.append(0.0)
            continue
        v = rng.uniform(1, 2) * 2.0 ** rng.randint(lo_exp, hi_exp - 1)
        if neg and rng.random() < 0.5:
            v = -v
        out.append(v)
    return out


def as_bits(dt, xs):
    return [bits_of(dt, x) for x in xs]


def prog_quant(rng):
    """Ops of the 'quantized' job: each returns (label, dt, red, inputs[NMAX], forge{rank: ...})."""
    P = []
    inf, nan = float("inf"), float("nan")
    # FLOAT16 SUM, 5 blocks (> W): two rounds, op 0
    ins = []
    for r in range(NMAX):
        xs = rnd_vals(rng, 8, -3, 1)                              # block 0: ~[-2, 2]
        xs += [1000.0 * (r + 1), -0.001, 0.0005, 3.0, -7.5, 0.125, 0.01, -900.0]   # wide range
        xs += [rng.choice([5.96e-8, -5.96e-8, 1.2e-7, 6.0e-5, -3.0e-6]) for _ in range(8)]  # subnormals
        xs += ([0.0] * 8 if r == 0 else rnd_vals(rng, 8, -10, 5))
        xs += [20000.0, -20000.0, 19999.0, 65504.0 / 4, 1.0, -1.0, 0.5, 100.0][:6]  # short last block
        ins.append(as_bits(F16, xs))
    P.append(("FLOAT16 SUM 38 (two rounds, wide range, subnormals)", F16, SUM, ins))
    # BFLOAT16 SUM
    ins = []
    for r in range(NMAX):
        xs = rnd_vals(rng, 8, -5, 5)
        xs += [1e30, -1e-30, 1e-30 * (r + 1), 2.0, -3.0, 1e29, 1e-20, 0.0]
        xs += [3.0e38, -3.0e38, 3.3e38, 1.0, 2e38, -2e38, 1e38, 0.0]    # overflow to +-Inf allowed
        xs += rnd_vals(rng, 8, -20, 20)
        xs += [1e-39, -2e-39, 9.2e-41, 1e-38][:3 + r]                   # subnormal bfloat16
        ins.append(as_bits(BF16, xs[:8 * 4 + 3]))
    P.append(("BFLOAT16 SUM 35 (two rounds, 1e30 with 1e-30, overflow)", BF16, SUM, ins))
    # FLOAT64 SUM
    ins = []
    for r in range(NMAX):
        xs = rnd_vals(rng, 8, -30, 30)
        xs += [1e300, -1e-300, 1e-300, -1e300 * (1 + r * 1e-15), 1.0, 2.0 ** -1000, 7.0, 0.0]
        xs += [1e-300, -2e-301, 5e-305, 2.0 ** -1074, 0.0, -1e-299, 3e-300, 1e-310]   # below 2^-961: floor
        xs += [8.0 - 2.0 ** -50, -(8.0 - 2.0 ** -50), 1.0, 8.0 - 2.0 ** -49, 0.0, 0.0, 0.0, 2.0]  # clamp
        xs += [1e308, -1e308 if r == 0 else 1e308, 1.0, 2.0, 3.0]                   # double overflow
        ins.append(as_bits(F64, xs))
    P.append(("FLOAT64 SUM 37 (two rounds, floor -960, clamp, overflow)", F64, SUM, ins))
    # FLOAT32 AVG, two rounds
    ins = [as_bits(F32, rnd_vals(rng, 40, -8, 8, zero_p=0.1)) for _ in range(NMAX)]
    P.append(("FLOAT32 AVG 40 (two rounds)", F32, AVG, ins))
    # FLOAT16 AVG, one round: sum overflows half, the average does not (section 8.4)
    ins = [as_bits(F16, [40000.0, -40000.0, 30000.0, 60000.0, 1.0, 0.5, -3.0, 2.0]
                   + rnd_vals(rng, 8, -6, 6)) for _ in range(NMAX)]
    P.append(("FLOAT16 AVG 16 (op 3, sum overflows half, average finite)", F16, AVG, ins))
    # NONFINITE, two rounds: 5 blocks
    def nf_rows(nblk):
        rows = []
        for r in range(NMAX):
            xs = [1.0, 2.0, -3.0, nan if r == 0 else 4.0, 5.0, 6.0, 7.0, 8.0]      # block 0: NaN + finite
            xs += [inf, inf if r == 0 else -inf, -inf if r == 0 else 1.0, 9.0,      # block 1
                   nan if r == 1 else 0.0, inf, -inf if r != 0 else -5.0, 0.0]
            # block 2: +-Inf on rank 0 only; the other ranks' finite values have op-3 payloads with bits
            # inside the class-code fields (2^-8 at e = 1 gives q = 2^21), which must not be added (8.7)
            xs += ([inf, -inf, 1.0, 2.0, 0.0, -1.0, 3.0, 0.5] if r == 0 else
                   [2.0 ** -8, -(2.0 ** -8), 1.5, 2.0 ** -8, 2.0 ** -17, 1.0, -1.25, 0.75])
            xs += [1.0, 2.0, 3.0, -inf if r == 2 else 4.0, 0.0, 0.0, 0.0, 0.0]       # block 3
            xs += rnd_vals(rng, 8, -4, 4)                                             # block 4: finite
            rows.append(as_bits(F32, xs[:8 * nblk]))
        return rows
    P.append(("FLOAT32 SUM 40 NaN/+-Inf (two rounds, NONFINITE class codes)", F32, SUM, nf_rows(5)))
    # op 3 combines depend on which contribution is first (8.7): run the NONFINITE case with rank 0
    # first and with rank 0 last (a 0.1 s head start), so both paths of the switch rule run
    rows = nf_rows(3)
    P.append(("FLOAT32 SUM 24 NaN/+-Inf (op 3, rank 0 first)", F32, SUM, rows, {}, {"delay": {1: 0.1, 2: 0.1}}))
    P.append(("FLOAT32 SUM 24 NaN/+-Inf (op 3, rank 0 last)", F32, SUM, rows, {}, {"delay": {0: 0.1}}))
    # MAX / MIN
    specials = [
        [-0.0, 0.0, -0.0, -1.0, -inf, inf, nan, 1e-45, -1e-45, 3.4028234663852886e38,
         -3.4028234663852886e38, 1.5, -2.5, 0.0, -7.0, 2.0, 1e-40, -1e-40, 100.0, -100.0, 0.0, -0.0, 5.0, 6.0],
        [0.0, -0.0, -0.0, -2.0, -inf, 1.0, 1.0, 0.0, 0.0, 1.0, 1.0, 1.5, -2.5, -inf, -7.5, nan, 2e-40, -2e-40,
         -100.0, 100.0, -0.0, 0.0, -5.0, inf],
        [0.0, 0.0, -0.0, -3.0, -3.0, -inf, -1.0, 1e-45, -1e-45, 2.0, -2.0, -1.5, -2.5, 1e-45, -7.25, 3.0,
         3e-40, -3e-40, 0.0, 0.0, 0.0, 0.0, -inf, -inf],
    ]
    ins = [as_bits(F32, s) for s in specials]
    ins[1][15] = 0xFFC00001           # a negative NaN with payload (section 8.9: any sign or payload)
    P.append(("FLOAT32 MAX 24 (-0/+0, negatives, +-Inf, NaN, subnormals)", F32, MAX, ins))
    P.append(("FLOAT32 MIN 24 (-0/+0, negatives, +-Inf, NaN, subnormals)", F32, MIN, ins))
    sp16 = [[x if not (isinstance(x, float) and abs(x) > 60000 and not math.isinf(x)) else 60000.0
             for x in s[:16]] for s in specials]
    P.append(("FLOAT16 MAX 16", F16, MAX, [as_bits(F16, s) for s in sp16]))
    P.append(("BFLOAT16 MIN 16", BF16, MIN, [as_bits(BF16, s[:16]) for s in specials]))
    P.append(("BFLOAT16 MAX 16", BF16, MAX, [as_bits(BF16, s[8:24]) for s in specials]))
    # adversarial FLOAT32 sums (wide dynamic range within a block) for the bound of 8.6
    def adv_rows(nblk):
        rows = []
        for r in range(NMAX):
            xs = [1e38 if r == 0 else 1.0, 1.0, -1.0, 3.0e-38, 1e-45, 123456.789, -1e37, 0.1]   # 1e38 dominates
            xs += [3.4028234663852886e38, 3.4e38, -3.4e38, 1.0, 0.0, 2.0, 1e30, -1e30]           # overflow
            xs += [1e-45 * (r + 1), 2e-45, -1e-45, 0.0, 3e-45, 1.4e-44, -7e-45, 1e-45]          # only subnormals
            xs += [1.0000001 if r == 0 else -1.0, -0.9999999, 8.0 - 2 ** -21, -(8.0 - 2 ** -21),
                   16777217.0, 0.3, -0.3, 1e-7]                                                 # cancellation, 2^E-ulp
            xs += rnd_vals(rng, 8, -126, 127)                                                    # huge spread
            rows.append(as_bits(F32, xs[:8 * nblk]))
        return rows
    P.append(("FLOAT32 SUM 40 adversarial (two rounds)", F32, SUM, adv_rows(5)))
    P.append(("FLOAT32 SUM 24 adversarial (op 3)", F32, SUM, adv_rows(3)))
    ins = []
    for r in range(NMAX):
        xs = [1e300 if r == 1 else 1.0, 1e-300, -1.0, 8.0 - 2.0 ** -50, 2.0 ** -1074, 3.0, 0.0, -1e299]
        xs += [1e-300 * (r + 1), 2e-305, -1e-299, 0.0, 4.9e-324, 1e-310, 0.0, 0.0]
        ins.append(as_bits(F64, xs))
    P.append(("FLOAT64 SUM 16 (op 3, floor -960, clamp)", F64, SUM, ins))
    # ties: with N = 2 (L = 1) and E = 3, x * 2^27 = j + 1/2 for x = (2j+1) * 2^-28 (section 8.1 RNE);
    # op 3: ranks whose block exponents differ by 1 and 2, odd and negative payloads, so that the
    # switch's shift round(x / 2^d) = floor((x + 2^(d-1)) / 2^d) meets its ties (section 8.7)
    ins = []
    for r in range(NMAX):
        ties = [4.0 if r == 0 else 2.0 if r == 1 else 1.0] + [(2 * j + 1) * 2.0 ** -28 * (-1) ** j for j in range(7)]
        odd = [(8.0 if r == 0 else 4.0 if r == 1 else 2.0)] + \
              [-(2 * rng.randint(1, 1 << 20) + 1) * 2.0 ** (-18 - r) for _ in range(7)]
        ins.append(as_bits(F32, ties + odd))
    P.append(("FLOAT32 SUM 16 ties (op 3: RNE at encode, shift rounding of 8.7)", F32, SUM, ins))
    P.append(("FLOAT32 SUM 40 ties (two rounds)", F32, SUM, [(row * 3)[:40] for row in ins]))
    ins = [as_bits(BF16, rnd_vals(rng, 16, -60, 60, zero_p=0.1)) for _ in range(NMAX)]
    P.append(("BFLOAT16 SUM 16 (op 3)", BF16, SUM, ins))
    ins = [as_bits(F16, rnd_vals(rng, 16, -24, 15, zero_p=0.1)) for _ in range(NMAX)]
    P.append(("FLOAT16 SUM 16 (op 3, subnormal to 2^15)", F16, SUM, ins))
    ins = [as_bits(F64, rnd_vals(rng, 16, -900, 900)) for _ in range(NMAX)]
    P.append(("FLOAT64 AVG 16 (op 3, huge spread)", F64, AVG, ins))
    return P


def prog_quant_hostile(rng, forger):
    """Hostile ops appended to the quantized job; the forging rank is a clean-room rank."""
    P = []
    # (1) two rounds: the forger claims exp NONFINITE for block 1 although its data is finite, and
    # sends forged class codes (bits outside the three 9-bit fields, both +Inf and -Inf from one
    # rank, ...). Section 8.1: E = max over ranks, so E(1) = NONFINITE, honest ranks send class codes,
    # and every element decodes by the P/M/Q rule.
    ins = []
    for r in range(NMAX):
        xs = rnd_vals(rng, 8, -3, 3)
        xs += [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]                  # block 1: finite everywhere
        xs += rnd_vals(rng, 8, -3, 3)
        xs += [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]                  # block 3: +-Inf on honest ranks
        if r != forger:
            xs[24 + 2] = float("inf")
            xs[24 + 3] = float("-inf")
        xs += rnd_vals(rng, 8, -3, 3)
        ins.append(as_bits(F32, xs))
    codes = [0, 1 << 27, 5, 1, (1 << 9) | 1, 1 << 18, 0x7FFFFFFF, -1]
    # block 1: forged exp and codes; block 3: honest exp (the block is NONFINITE anyway), forged codes
    forge = {forger: {"exp": {1: EXP_NF}, "payload": {1: codes, 3: codes}}}
    P.append(("HOSTILE forged exp NONFINITE + forged class codes (two rounds)", F32, SUM, ins, forge))
    # (2) op 3: the forger sends exp ZERO with a garbage payload; section 8.7: 'if e is ZERO: nothing'
    # (and a ZERO first contribution is replaced by the next real one): the garbage never counts.
    ins = [as_bits(F32, rnd_vals(rng, 16, -10, 10)) for _ in range(NMAX)]
    forge = {forger: {"exp": {0: EXP_ZERO, 1: EXP_ZERO},
                      "payload": {0: [0x12345678, -0x7FFFFFFF, 77, -1, 1 << 30, 3, 5, 7],
                                  1: [0x7FFFFFFF] * 8}}}
    P.append(("HOSTILE exp ZERO with garbage payload (op 3, forger first)", F32, SUM, ins, forge,
              {"delay": {r: 0.1 for r in range(NMAX) if r != forger}}))
    P.append(("HOSTILE exp ZERO with garbage payload (op 3, forger last)", F32, SUM, ins, forge,
              {"delay": {forger: 0.1}}))
    # (3) after the hostile ops the job still works
    ins = [as_bits(F32, rnd_vals(rng, 40, -5, 5)) for _ in range(NMAX)]
    P.append(("FLOAT32 SUM 40 after the hostile ops (two rounds)", F32, SUM, ins))
    return P


def prog_fadd(rng):
    inf, nan = float("inf"), float("nan")
    P = []
    rows = []
    for r in range(NMAX):
        xs = [1e8 if r == 0 else (1.0 if r == 1 else -1e8), 1.0, -0.0, -0.0 if r != 1 else 0.0,
              nan if r == 2 else 1.0, inf if r == 0 else 1.0, inf if r == 0 else (-inf if r == 1 else 0.0),
              3.4028234663852886e38]
        xs += [1e-45, -1e-45 if r == 1 else 1e-45, 1.1754942e-38, -1.1754942e-38 * (r + 1), 0.1, 0.2, 0.3, 1e-8]
        xs += rnd_vals(rng, 24, -30, 30)
        rows.append(as_bits(F32, xs))
    P.append(("FLOAT32 SUM 40 (op 4: NaN, +-Inf, -0, subnormals, overflow, order)", F32, SUM, rows))
    rows = [as_bits(F16, [60000.0, -60000.0, 1e-7, 0.1, 2048.0, 1.0, -0.0, 65504.0]
                    + rnd_vals(rng, 16, -14, 14)) for _ in range(NMAX)]
    rows[1][6] = 0x7E00               # NaN
    P.append(("FLOAT16 SUM 24 (op 4, rounded once to half)", F16, SUM, rows))
    rows = [as_bits(BF16, rnd_vals(rng, 24, -100, 100)) for _ in range(NMAX)]
    P.append(("BFLOAT16 SUM 24 (op 4)", BF16, SUM, rows))
    rows = [as_bits(F32, rnd_vals(rng, 16, -20, 20)) for _ in range(NMAX)]
    P.append(("FLOAT32 AVG 16 (op 4)", F32, AVG, rows))
    rows = [as_bits(F16, [40000.0] * 4 + rnd_vals(rng, 4, -5, 5)) for _ in range(NMAX)]
    P.append(("FLOAT16 AVG 8 (op 4, sum overflows half)", F16, AVG, rows))
    rows = [as_bits(F64, rnd_vals(rng, 16, -50, 50)) for _ in range(NMAX)]
    P.append(("FLOAT64 SUM 16 with float adds (keeps op 3)", F64, SUM, rows))
    rows = [as_bits(F64, rnd_vals(rng, 40, -50, 50)) for _ in range(NMAX)]
    P.append(("FLOAT64 SUM 40 with float adds (keeps two rounds)", F64, SUM, rows))
    rows = [as_bits(F32, rnd_vals(rng, 8, -3, 3)) for _ in range(NMAX)]
    P.append(("FLOAT32 MAX 8 with float adds (keeps op 1)", F32, MAX, rows))
    return P


FIXED_BITS = 16


def prog_fixed(rng, forger):
    P = []
    lim = ((1 << 31) - 1) / 2 ** FIXED_BITS / NMAX       # 'valid is guaranteed' range, 13.3
    # elements 0..7 are ties of x * 2^f (odd multiples of 2^-(f+1), both signs): section 13.3 RNE
    rows = [as_bits(F32, [(2 * rng.randint(0, 1000) + 1) * 2.0 ** -(FIXED_BITS + 1) * (-1) ** j for j in range(8)]
                    + [rng.uniform(-lim, lim) for _ in range(32)]) for _ in range(NMAX)]
    P.append(("FLOAT32 SUM 40 (op 5, f = %d, ties)" % FIXED_BITS, F32, SUM, rows))
    rows = [as_bits(F64, [rng.uniform(-lim, lim) * rng.choice([1, 1e-3, 1e-6]) for _ in range(16)])
            for _ in range(NMAX)]
    P.append(("FLOAT64 SUM 16 (op 5)", F64, SUM, rows))
    rows = [as_bits(F16, [rng.uniform(-1000, 1000) for _ in range(16)]) for _ in range(NMAX)]
    P.append(("FLOAT16 AVG 16 (op 5)", F16, AVG, rows))
    rows = [as_bits(BF16, [rng.uniform(-lim, lim) for _ in range(16)]) for _ in range(NMAX)]
    P.append(("BFLOAT16 SUM 16 (op 5)", BF16, SUM, rows))
    # hostile: the forger sends the invalid code at element 0 though its value is finite; element 1
    # overflows the range (32767 * 2^16 on each rank); element 2 is a NaN on a libina/honest rank.
    rows = []
    for r in range(NMAX):
        xs = [1.0, 32767.0, 2.0 if r == forger else float("nan"), 3.0] + [rng.uniform(-100, 100) for _ in range(12)]
        rows.append(as_bits(F32, xs))
    honest_pay = [fix_encode(to_float(F32, b), FIXED_BITS) for b in rows[forger][:8]]
    forge = {forger: {"payload": {0: [FIX_INVALID] + honest_pay[1:]}}}
    P.append(("HOSTILE fixed-point invalid code / out of range / NaN (op 5)", F32, SUM, rows, forge))
    rows = [as_bits(F32, [rng.uniform(-100, 100) for _ in range(8)]) for _ in range(NMAX)]
    P.append(("FLOAT32 SUM 8 after INA_ERR_RANGE (op 5, context usable)", F32, SUM, rows))
    rows = [as_bits(F32, rnd_vals(rng, 8, -3, 3)) for _ in range(NMAX)]
    P.append(("FLOAT32 MIN 8 with fixed point (keeps op 2)", F32, MIN, rows))
    return P


# ---------------------------------------------------------------------------
# Running jobs
# ---------------------------------------------------------------------------
def expected_wire_name(w):
    return {0: "op 0", 1: "op 1", 2: "op 2", 3: "op 3", 4: "op 4", 5: "op 5"}[w]


def run_job(args, addr, jobname, N, prog, cfg, libina_rank=None, expect_caps=None):
    """Run `prog` as a job of N ranks: clean-room ranks in threads, plus a libina rank if
    libina_rank is not None. Then check every op."""
    tag = "%s/%s" % (jobname.split("-")[0], "mixed" if libina_rank is not None else "cr%d" % N)
    cr_ranks = [r for r in range(N) if r != libina_rank]
    child = None
    if libina_rank is not None:
        req = {"switch": "%s:%d" % addr, "rank": libina_rank, "world": N, "job": jobname,
               "k": K_ELEMS, "W": WINDOW, "float_add": bool(cfg.get("float_add")),
               "fixed": cfg.get("fixed", 0),
               "ops": [{"dt": o[1], "red": RED_NAME[o[2]].lower(), "bits": o[3][libina_rank],
                        "delay": (o[5].get("delay", {}) if len(o) > 5 else {}).get(libina_rank, 0)}
                       for o in prog]}
        child = subprocess.Popen(["/usr/bin/python3", "-c", LIBINA_CHILD], stdin=subprocess.PIPE,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=libina_env(args),
                                 cwd=tempfile.gettempdir())
        PROCS.append(child)
        child.stdin.write(json.dumps(req).encode())
        child.stdin.close()
        child.stdin = None
    workers = [Worker(addr, jobname, r, N, K_ELEMS, WINDOW, cfg) for r in cr_ranks]
    outs = {r: [] for r in cr_ranks}
    errs = {}

    def body(w):
        try:
            w.join(time.monotonic() + min(25, time_left()))
            for o in prog:
                forge = o[4].get(w.rank) if len(o) > 4 else None
                delay = (o[5].get("delay", {}) if len(o) > 5 else {}).get(w.rank, 0)
                if delay:
                    time.sleep(delay)       # arrival order at the switch (8.7: order-dependent paths)
                outs[w.rank].append(w.allreduce(o[1], o[2], o[3][w.rank], forge,
                                                time.monotonic() + min(15, time_left())))
            w.leave()
        except Exception as e:
            errs[w.rank] = "%s: %s" % (type(e).__name__, e)
            try:
                w.leave(abort=True)
            except Exception:
                pass

    WAITING[0] = "job %s (%d ranks%s)" % (jobname, N, ", libina rank %d" % libina_rank if child else "")
    ths = [threading.Thread(target=body, args=(w,), daemon=True) for w in workers]
    for t in ths:
        t.start()
    for t in ths:
        t.join(max(1, time_left() - 2))
    lib = None
    if child is not None:
        try:
            so, se = child.communicate(timeout=max(1, time_left() - 2))
            try:
                lib = json.loads(so.decode().strip().splitlines()[-1])
            except Exception:
                lib = {"fatal": "no JSON from libina rank: rc=%s stderr=%s" % (child.returncode, se.decode()[-2000:])}
        except subprocess.TimeoutExpired:
            child.kill()
            lib = {"fatal": "libina rank did not finish"}
    ok_join = check(not errs and all(len(outs[r]) == len(prog) for r in cr_ranks),
                    "%s: clean-room ranks %s ran all %d ops%s" % (tag, cr_ranks, len(prog),
                                                                 (" (" + "; ".join(errs.values()) + ")") if errs else ""))
    if lib is not None:
        check("fatal" not in lib and len(lib.get("ops", [])) == len(prog),
              "%s: libina rank %d ran all %d ops%s" % (tag, libina_rank, len(prog),
                                                       (" (" + str(lib.get("fatal"))[-600:] + ")") if "fatal" in lib else ""))
        log("libina info", lib.get("info"), "stats", lib.get("stats"))
    if not ok_join:
        return workers, lib, None
    w0 = workers[0]
    if expect_caps is not None:
        check((w0.caps & expect_caps) == expect_caps,
              "%s: JOIN_ACK flags 0x%04x offer 0x%04x (section 3)" % (tag, w0.caps, expect_caps))
    # per-op checks
    for i, o in enumerate(prog):
        label, dt, red, inputs = o[0], o[1], o[2], o[3]
        forge = o[4] if len(o) > 4 else {}
        opts = o[5] if len(o) > 5 else {}
        if opts.get("raw_only"):
            continue            # decoded value not defined by the spec: checked on raw RESULTs by the caller
        count = len(inputs[0])
        wire, lag = choose_wire(dt, red, count, w0.k, w0.W, N, w0.caps, cfg)
        fixed = cfg.get("fixed", 0) if wire == 5 else 0
        contribs = [Contrib(dt, red, wire, N, w0.k, inputs[r], fixed, forge.get(r)) for r in range(N)]
        allowed = reference(contribs, dt, red, wire, N, fixed)
        results = {("cr%d" % r): outs[r][i]["result"] for r in cr_ranks}
        statuses = {("cr%d" % r): outs[r][i]["status"] for r in cr_ranks}
        if lib is not None and i < len(lib.get("ops", [])):
            results["libina%d" % libina_rank] = lib["ops"][i]["bits"]
            e = lib["ops"][i]["err"]
            statuses["libina%d" % libina_rank] = e[0] if e else 0
        # the wire op the switch echoed (proves every rank, libina too, sent that op: section 6.2)
        raw_ops = {outs[r][i]["raw"][p][1] for r in cr_ranks for p in outs[r][i]["raw"]}
        problems = []
        if raw_ops != {wire}:
            problems.append("RESULT ops %s, expected %d" % (sorted(raw_ops), wire))
        # RESULT exps = int16 max of what every rank (libina too) put in exp (6.2, 7.2, 8.7, 8.8, 8.9, 13.2)
        nbk = contribs[0].nb
        lag_ = lag if (wire == 0 and dt != I32) else 0
        for p in range(nbk + lag_):
            if wire in (0, 3) and dt != I32:
                want = max(c.exp_of(p) for c in contribs) if p < nbk else EXP_ZERO
            else:
                want = 0
            got = {outs[r][i]["raw"][p][0] for r in cr_ranks}
            if got != {want}:
                problems.append("RESULT exp of packet %d: %s, expected %d" % (p, sorted(got), want))
                break
        # section 13.3: an invalid element makes the op return INA_ERR_RANGE (on every rank)
        exp_status = ERR_RANGE if (wire == 5 and any(
            is_nan_bits(dt, x) for blk in allowed for t in blk for x in t)) else 0
        for who, res in results.items():
            if len(res) != count:
                problems.append("%s: %d results" % (who, len(res)))
                continue
            for b in range(len(allowed)):
                blk = tuple(res[b * w0.k:(b + 1) * w0.k])
                if not any(all(same(dt, x, y) for x, y in zip(blk, t)) for t in allowed[b]):
                    t = next(iter(allowed[b]))
                    diffs = [(b * w0.k + j, fmt_val(dt, x), fmt_val(dt, y)) for j, (x, y) in enumerate(zip(blk, t))
                             if not same(dt, x, y)]
                    problems.append("%s block %d differs from the spec (of %d allowed), first (elem, got, spec): %s"
                                    % (who, b, len(allowed[b]), diffs[:3]))
            if statuses.get(who, 0) != exp_status:
                problems.append("%s: status %s, expected %s" % (who, statuses.get(who), exp_status))
        # all ranks got the same result (one RESULT per round): bits identical, NaNs as a class
        vals = list(results.values())
        if len(vals) > 1 and all(len(v) == count for v in vals):
            crv = [results["cr%d" % r] for r in cr_ranks]
            if any(v != crv[0] for v in crv):
                problems.append("clean-room ranks disagree bit-wise")
            for who, v in results.items():
                if not all(same(dt, x, y) for x, y in zip(v, vals[0])):
                    problems.append("%s disagrees with %s" % (who, list(results)[0]))
            if wire == 4 and dt == F32 and red == SUM and any(v != vals[0] for v in vals):
                problems.append("op 4 FLOAT32 SUM: bit patterns (NaN payloads too) differ between ranks")
        check(not problems, "%s: %s [%s, %d ranks]: spec result%s" % (
            tag, label, expected_wire_name(wire), N,
            ", identical on all ranks" if len(results) > 1 else "") +
            ("" if not problems else " -- " + "; ".join(problems[:4])))
        # error bound against exact rational sums (sections 8.6, 8.4, 8.8, 13.3)
        if red in (SUM, AVG) and not forge and dt != I32:
            bad = []
            for who, res in results.items():
                if len(res) == count:
                    bad += ["%s %s" % (who, x) for x in check_bound(dt, red, wire, N, w0.k, inputs, res, fixed)]
            nchk = sum(1 for r in range(count)
                       if all(not (math.isnan(to_float(dt, inputs[q][r])) or math.isinf(to_float(dt, inputs[q][r])))
                              for q in range(N)))
            check(not bad, "%s: %s: %d finite elements x %d ranks within the bound of %s" % (
                tag, label, nchk, len(results),
                {0: "8.6", 3: "8.6/8.7", 4: "8.8", 5: "13.3"}[wire]) + ("" if not bad else " -- " + "; ".join(bad[:3])))
    # libina's counters against what the clean-room rank decoded from the same RESULTs
    if lib is not None and "stats" in lib:
        st = lib["stats"]
        if "nonfinite_blocks" in st:
            check(int(st["nonfinite_blocks"]) == w0.nonfinite_blocks,
                  "%s: libina ina_stats.nonfinite_blocks = %s = blocks decoded with E NONFINITE (%d, section 8.1)"
                  % (tag, st["nonfinite_blocks"], w0.nonfinite_blocks))
        if cfg.get("fixed") and "fixed_invalid" in st:
            check(int(st["fixed_invalid"]) == w0.fixed_invalid and w0.fixed_invalid > 0,
                  "%s: libina ina_stats.fixed_invalid = %s = invalid elements (%d, section 13.3/13.5)"
                  % (tag, st["fixed_invalid"], w0.fixed_invalid))
    return workers, lib, outs


# ---------------------------------------------------------------------------
# Hostile exps the switch must not range-check (section 6.1: 'The exp and tag of DATA are not
# range-checked'; 6.2: S.exp = max as int16; 8.7: round(x / 2^d) = 0 when d > 32)
# ---------------------------------------------------------------------------
def run_exp_range_job(args, addr, N, libina_rank):
    rng = random.Random(7)
    big = 20000
    bits = [as_bits(F32, [1.0, -2.0, 3.5, 0.25, 100.0, -0.5, 7.0, 1e-3]) for _ in range(NMAX)]
    forged = [5, -6, 7, -8, 9, 10, 11, 12]
    prog = [
        # op 3 (1 block <= W): rank 0 forges exp 20000 (FLOAT32 allows -148..128) and its payload
        ("exp %d op 3" % big, F32, SUM, bits, {0: {"exp": {0: big}, "payload": {0: forged}}}, {"raw_only": True}),
        # two rounds (5 blocks): rank 0 forges the exp of block 2 in its exponent-only packet
        ("exp %d two rounds" % big, F32, SUM, [b * 5 for b in bits], {0: {"exp": {2: big}}}, {"raw_only": True}),
        ("FLOAT32 SUM 16 after out-of-range exps (op 3)", F32, SUM,
         [as_bits(F32, rnd_vals(rng, 16, -8, 8)) for _ in range(NMAX)]),
        ("FLOAT32 SUM 40 after out-of-range exps (two rounds)", F32, SUM,
         [as_bits(F32, rnd_vals(rng, 40, -8, 8)) for _ in range(NMAX)]),
    ]
    name = "exprange-%06x" % random.getrandbits(24)
    cfg = {} if libina_rank is not None else {"one_round": "any"}
    workers, lib, outs = run_job(args, addr, name, N, prog, cfg, libina_rank=libina_rank)
    tag = "exprange/%s" % ("mixed" if libina_rank is not None else "cr%d" % N)
    if outs is None:
        return
    a = outs[0][0]
    exp, op, _tag, pay = a["raw"][0]
    check(a["wire"] == 3 and exp == big and pay == forged,
          "%s: HOSTILE op 3 DATA with exp %d (outside -148..128) is not range-checked (6.1): the switch "
          "keeps it as S.exp and shifts the other ranks out (8.7, d > 32 -> 0): RESULT exp %d payload %s"
          % (tag, big, exp, pay[:4]))
    b = outs[0][1]
    e0 = max(block_exp(F32, [to_float(F32, x) for x in bits[r]]) for r in range(N))
    check(b["wire"] == 0 and b["raw"][2][0] == big and b["raw"][0][0] == e0,
          "%s: HOSTILE exponent-only DATA with exp %d: RESULT exp = int16 max = %d (6.2)"
          % (tag, big, b["raw"][2][0]))
    if lib is not None:
        ops = lib.get("ops", [])
        check(len(ops) == len(prog) and all(o["err"] is None for o in ops),
              "%s: libina completed the ops with out-of-range exps without error (decode of such an exp: "
              "not defined by the spec)" % tag)


def start_switch(args, extra):
    d = tempfile.mkdtemp(prefix="peer_floats_")
    TMPDIRS.append(d)
    pf = os.path.join(d, "port")
    cmd = [os.path.join(args.bindir, "ina-switch"), "--listen", "127.0.0.1:0", "--port-file", pf,
           "--threads", "1", "--quiet"] + extra
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    PROCS.append(p)
    WAITING[0] = "ina-switch port file"
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
        time.sleep(0.02)
    raise PeerError("ina-switch wrote no port file")


def self_tests():
    # section 7.2 worked example tags; section 11 values
    tags = [op_tag(1, 6, F32, SUM, 0, p) for p in range(4)]
    check(tags == [0xCB, 0x49, 0x68, 0x28], "tag function reproduces section 7.2/11 tags %s" % [hex(t) for t in tags])
    A = [1.0, 2.0, 3.0, 4.0]
    B = [-1.5, 0.0, 8.0, 1.0]
    qa, qb = encode(A, 4, 2), encode(B, 4, 2)
    s = [x + y for x, y in zip(qa, qb)]
    dec = [to_float(F32, x) for x in decode(F32, s, 4, 2, False)]
    check(qa == [67108864, 134217728, 201326592, 268435456] and dec == [-0.5, 2.0, 11.0, 5.0],
          "encode/decode reproduce section 11's payloads and sums")
    # 8.9 keys order as floats
    vals = [float("-inf"), -3.4e38, -1.0, -1e-45, -0.0, 0.0, 1e-45, 1.0, 3.4e38, float("inf")]
    keys = [key_encode(F32, bits_of(F32, v), MAX) for v in vals]
    check(keys == sorted(keys) and len(set(keys)) == len(keys) and
          all(key_decode(F32, k) == bits_of(F32, v) for k, v in zip(keys, vals)),
          "section 8.9 keys order like the floats and map back to themselves")


def main():
    global VERBOSE
    ap = argparse.ArgumentParser()
    ap.add_argument("--bindir", required=True)
    ap.add_argument("--libdir", default="/work/cleanroom/lib")
    ap.add_argument("--pythondir", default="/work/cleanroom/python")
    ap.add_argument("-v", action="store_true")
    args = ap.parse_args()
    VERBOSE = args.v
    threading.Thread(target=watchdog, daemon=True).start()
    rng = random.Random(20261127)
    try:
        self_tests()
        addr, _sw = start_switch(args, [])
        torch_ok = have_torch(args)
        # --- quantized job (ops 0 and 3), the default switch
        pq = prog_quant(rng)
        ph = prog_quant_hostile(rng, forger=0)
        mixed_prog = pq + ph
        if not torch_ok:
            print("# skip: /usr/bin/python3 has no torch: BFLOAT16 runs with clean-room ranks only", flush=True)
            mixed_prog = [o for o in mixed_prog if o[1] != BF16]
        run_job(args, addr, "quant-%06x" % random.getrandbits(24), 2, mixed_prog, {}, libina_rank=1,
                expect_caps=FLAG_CAP_BFP)
        run_job(args, addr, "quant-%06x" % random.getrandbits(24), 3, pq + ph, {"one_round": "any"})
        # --- floats added as floats (op 4): libina with float_add=switch
        pf = prog_fadd(rng)
        mp = pf if torch_ok else [o for o in pf if o[1] != BF16]
        run_job(args, addr, "fadd-%06x" % random.getrandbits(24), 2, mp, {"float_add": True}, libina_rank=0,
                expect_caps=FLAG_CAP_F32)
        run_job(args, addr, "fadd-%06x" % random.getrandbits(24), 3, pf, {"float_add": True})
        # --- fixed point (op 5, section 13)
        px = prog_fixed(rng, forger=1)
        mp = px if torch_ok else [o for o in px if o[1] != BF16]
        run_job(args, addr, "fixed-%06x" % random.getrandbits(24), 2, mp, {"fixed": FIXED_BITS}, libina_rank=0,
                expect_caps=FLAG_CAP_FIX)
        px3 = prog_fixed(rng, forger=1)
        run_job(args, addr, "fixed-%06x" % random.getrandbits(24), 3, px3, {"fixed": FIXED_BITS})
        # --- out-of-range exps (switch side)
        run_exp_range_job(args, addr, 2, 1)
        run_exp_range_job(args, addr, 3, None)
    except Exception as e:
        check(False, "peer aborted: %s: %s" % (type(e).__name__, e))
    finally:
        WAITING[0] = "daemons to exit"
        kill_all()
        for d in TMPDIRS:
            shutil.rmtree(d, ignore_errors=True)
    nfail = sum(1 for ok, _ in RESULTS if not ok)
    print("# %d checks, %d failed, %.1f s" % (len(RESULTS), nfail, time.monotonic() - T0), flush=True)
    sys.exit(0 if nfail == 0 and RESULTS else 1)


if __name__ == "__main__":
    main()

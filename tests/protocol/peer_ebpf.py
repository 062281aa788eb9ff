#!/usr/bin/env python3
"""Clean-room peer and conformance test for the in-kernel eBPF dataplane of ina-switch.

Written from docs/PROTOCOL.md alone (section 16, with sections 2-8 for the worker side),
plus docs/EBPF.md for the command-line behaviour of `--dataplane ebpf`.

It runs the same jobs against `ina-switch --dataplane ebpf --iface lo` and against the
default userspace dataplane, both inside a private network namespace that this script
creates and always deletes (it re-executes itself under `ip netns exec NAME`), and
compares what section 16 says must be equal.

Phases 8 and 9 (fragments, k capped to the MTU) were rewritten by the lead from the
corrected section 16 after this peer found that the eBPF dataplane could not serve a k
its interface's MTU would fragment.

Usage: python3 peer_ebpf.py --bindir DIR [--libdir DIR] [--pythondir DIR] [-v]
Exit status: 0 all checks passed, 1 a check failed, 77 the eBPF dataplane cannot run here.
"""

import argparse
import ctypes
import fractions
import json
import math
import os
import platform
import random
import select
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

SKIP = 77
OUTER_DEADLINE_S = 50.0     # backstop of the outer (host) process
INNER_DEADLINE_S = 40.0     # the namespace side's own deadline (prints what it waited for)

# ---------------------------------------------------------------------------------------
# Wire constants (PROTOCOL.md §3, §4, §4.3, Appendix)
# ---------------------------------------------------------------------------------------
MAGIC = 0x494E                  # §3 offset 0
VERSION = 1                     # §3 offset 2
K_DATA, K_RESULT = 1, 2         # §4
K_HOT_DATA = 5                  # §4 (§14.3)
K_JOIN, K_JOIN_ACK, K_JOIN_NAK, K_LEAVE, K_ABORT = 16, 17, 18, 19, 20
K_REDIRECT, K_MIGRATE = 21, 22
K_WITHDRAW, K_JOIN_WAIT, K_TREE_JOIN = 26, 27, 28
RANK_SWITCH = 0xFFFF            # §3 offset 6
FLAG_ABORT = 0x0001             # §3 flags bit 0 (LEAVE)
FLAG_CAP_BFP = 0x0002           # bit 1: op 3
FLAG_CAP_F32 = 0x0004           # bit 2: op 4
FLAG_CAP_SHM = 0x0008           # bit 3: rings
FLAG_CAP_FIX = 0x0040           # bit 6: op 5
FLAG_CAP_HOT = 0x0080           # bit 7: hot table
FLAG_CAP_SPARSE = 0x0100        # bit 8: ops 7, 8
ERR_TIMEOUT, ERR_ABORTED, ERR_REJECTED = -1001, -1002, -1003
ERR_NOSPACE, ERR_MISMATCH = -1004, -1005
EXP_ZERO, EXP_NONFINITE = -32768, 32767     # §8.1
DT_INT32, DT_FLOAT32 = 0, 1                 # §1
RED_SUM, RED_MAX, RED_MIN = 0, 1, 2         # §1
EBPF_MAX_K = 2048                           # §16 table, last row; Appendix

# §3: the 32-byte header, big-endian (§2 byte order):
# magic(2) version(1) kind(1) job(2) rank(2) session(4) token(4) slot(4: bit 31 = set)
# seq(4) count(2) exp(int16) flags(2) op(1) tag(1)
HDR = struct.Struct(">HBBHHIIIIHhHBB")
assert HDR.size == 32

VERBOSE = False
DEADLINE = None
WAITING_FOR = "start"


class Deadline(Exception):
    pass


class Skip(Exception):
    pass


def vlog(*a):
    if VERBOSE:
        print("#", *a, flush=True)


def remaining():
    return DEADLINE - time.monotonic()


def waiting(what):
    """Name what the run waits for now; raise Deadline once the global deadline passed."""
    global WAITING_FOR
    WAITING_FOR = what
    if remaining() <= 0:
        raise Deadline(what)


def header(kind, job=0, rank=0, session=0, token=0, slot=0, set_bit=0, seq=0, count=0,
           exp=0, flags=0, op=0, tag=0):
    # §3: slot word = set << 31 | slot index
    return HDR.pack(MAGIC, VERSION, kind, job, rank, session & 0xFFFFFFFF, token & 0xFFFFFFFF,
                    ((set_bit & 1) << 31) | (slot & 0x7FFFFFFF), seq & 0xFFFFFFFF, count,
                    exp, flags, op, tag)


def parse_header(b):
    if len(b) < 32:
        return None
    (magic, ver, kind, job, rank, session, token, slotw, seq, count, exp, flags, op,
     tag) = HDR.unpack_from(b, 0)
    return dict(magic=magic, version=ver, kind=kind, job=job, rank=rank, session=session,
                token=token, slot=slotw & 0x7FFFFFFF, set=slotw >> 31, seq=seq, count=count,
                exp=exp, flags=flags, op=op, tag=tag)


def i32(x):
    x &= 0xFFFFFFFF
    return x - (1 << 32) if x & 0x80000000 else x


def payload_bytes(vals):
    # §2: every payload int32 big-endian two's complement
    return struct.pack(">%di" % len(vals), *[i32(v) for v in vals])


def payload_ints(b, count):
    return list(struct.unpack_from(">%di" % count, b, 32))


# ---------------------------------------------------------------------------------------
# §7.2: the packet tag
# ---------------------------------------------------------------------------------------
M64 = (1 << 64) - 1


def op_seed(n, count, dtype, red, s=0):
    x = ((n * 0x9E3779B97F4A7C15) & M64) ^ ((count * 0xC2B2AE3D27D4EB4F) & M64) \
        ^ dtype ^ (red << 8) ^ (s << 16)
    x &= M64
    x ^= x >> 31
    x = (x * 0xBF58476D1CE4E5B9) & M64
    x ^= x >> 29
    return x


def packet_tag(seed, p):
    y = ((seed + p) * 0xD6E8FEB86659FD93) & M64
    return ((y ^ (y >> 32)) >> 24) & 0xFF


# ---------------------------------------------------------------------------------------
# §8.1: FLOAT32 block floating point
# ---------------------------------------------------------------------------------------
def f32(x):
    return struct.unpack(">f", struct.pack(">f", x))[0]


def block_exp(xs):
    """§8.1: e with 2^(e-1) <= max|x| < 2^e (frexp); ZERO for all zeros."""
    m = max((abs(x) for x in xs), default=0.0)
    if m == 0.0:
        return EXP_ZERO
    return math.frexp(m)[1]


def ceil_log2(n):
    return 0 if n <= 1 else (n - 1).bit_length()


def encode_block(xs, E, N):
    """§8.1 encode: q = clamp(round_half_even(x * 2^s), -Q, Q), s = 31 - L - E."""
    if E == EXP_ZERO:
        return [0] * len(xs)
    L = ceil_log2(N)
    s = 31 - L - E
    Q = (1 << (31 - L)) - 1
    out = []
    for x in xs:
        v = round(math.ldexp(x, s))          # Python round(): half to even
        out.append(max(-Q, min(Q, v)))
    return out


def decode_block(qs, E, N):
    """§8.1 decode: float(sum_q * 2^(E+L-31)); ZERO -> +0.0."""
    if E == EXP_ZERO:
        return [0.0] * len(qs)
    L = ceil_log2(N)
    return [f32(math.ldexp(q, E + L - 31)) for q in qs]


def f32_bound(N, E, exact):
    """§8.1/§8.6 bound for FLOAT32 SUM."""
    L = ceil_log2(N)
    first = N * math.ldexp(1.0, E + L - 31) if E != EXP_ZERO else 0.0
    return first + math.ldexp(abs(exact), -24) + math.ldexp(1.0, -149)


def bfp_shift(x, d):
    """§8.7: round(x / 2^d) = floor((x + 2^(d-1)) / 2^d) in 64 bits, 0 when d > 32."""
    if d > 32:
        return 0
    return (x + (1 << (d - 1))) >> d


def bfp_combine(contribs):
    """§8.7 switch rule for op 3, contributions (exp, payload) in arrival order.
    Returns (S.exp, values) as the RESULT carries them."""
    Sexp, V = contribs[0][0], list(contribs[0][1])
    for e, pl in contribs[1:]:
        if e == EXP_NONFINITE or Sexp == EXP_NONFINITE:
            if e == EXP_NONFINITE and Sexp != EXP_NONFINITE:
                V, Sexp = list(pl), EXP_NONFINITE
            elif e == EXP_NONFINITE and Sexp == EXP_NONFINITE:
                V = [i32(a + b) for a, b in zip(V, pl)]
        elif e == EXP_ZERO:
            pass
        elif Sexp == EXP_ZERO:
            V, Sexp = list(pl), e
        else:
            d = e - Sexp
            if d > 0:
                V = [bfp_shift(v, d) for v in V]
                Sexp = e
                V = [i32(a + b) for a, b in zip(V, pl)]
            elif d == 0:
                V = [i32(a + b) for a, b in zip(V, pl)]
            else:
                V = [i32(a + bfp_shift(b, -d)) for a, b in zip(V, pl)]
    return Sexp, V


# ---------------------------------------------------------------------------------------
# Checks
# ---------------------------------------------------------------------------------------
class Checks:
    def __init__(self):
        self.n_ok = 0
        self.n_fail = 0

    def check(self, cond, what, detail=""):
        if cond:
            self.n_ok += 1
            print("ok - %s" % what, flush=True)
        else:
            self.n_fail += 1
            print("FAIL - %s%s" % (what, (": " + detail) if detail else ""), flush=True)
        return cond


C = Checks()


# ---------------------------------------------------------------------------------------
# The switch processes (run inside the namespace)
# ---------------------------------------------------------------------------------------
class Switch:
    def __init__(self, bindir, tmpdir, name, extra):
        self.name = name
        self.bindir = bindir
        self.tmpdir = tmpdir
        self.extra = list(extra)
        self.proc = None
        self.port = None
        self.mport = None
        self.errpath = os.path.join(tmpdir, name + ".err")
        self.exit_report = None

    def start(self):
        pf = os.path.join(self.tmpdir, self.name + ".port")
        mpf = os.path.join(self.tmpdir, self.name + ".mport")
        for p in (pf, mpf):
            if os.path.exists(p):
                os.unlink(p)
        # §2: port 0 picks a free port; --port-file tells it. --metrics serves /counters
        # (docs/TOOLS.md) and makes the switch fold the program's counters every 100 ms
        # (docs/EBPF.md, "Control plane").
        cmd = [os.path.join(self.bindir, "ina-switch"), "--listen", "127.0.0.1:0",
               "--port-file", pf, "--metrics", "127.0.0.1:0", "--metrics-port-file", mpf,
               "--log-level", "info"] + self.extra
        vlog("start", " ".join(cmd))
        self.err = open(self.errpath, "wb")
        self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=self.err,
                                     stderr=self.err)
        while True:
            waiting("%s switch to write its port files" % self.name)
            if self.proc.poll() is not None:
                return False
            try:
                with open(pf) as f:
                    t = f.read().strip()
                with open(mpf) as f:
                    m = f.read().strip()
                if t and m:
                    self.port = int(t)
                    self.mport = int(m)
                    return True
            except (OSError, ValueError):
                pass
            time.sleep(0.01)

    def stderr_text(self):
        try:
            with open(self.errpath, "rb") as f:
                return f.read().decode("utf-8", "replace")
        except OSError:
            return ""

    def http(self, method, path, timeout=1.0):
        url = "http://127.0.0.1:%d%s" % (self.mport, path)
        req = urllib.request.Request(url, method=method, data=b"" if method == "POST" else None)
        try:
            with urllib.request.urlopen(req, timeout=min(timeout, max(0.05, remaining()))) as r:
                return r.status, json.loads(r.read().decode() or "null")
        except urllib.error.HTTPError as e:
            try:
                body = json.loads(e.read().decode() or "null")
            except ValueError:
                body = None
            return e.code, body

    def counters(self):
        st, js = self.http("GET", "/counters")
        if st != 200:
            raise RuntimeError("GET /counters: %s" % st)
        c = dict(js["counters"])
        drops = c.pop("drops")
        for k, v in drops.items():
            c["drop_" + k] = v
        return c

    def stop(self):
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)    # SIGINT stops at once (§5.4 Drain)
            try:
                self.proc.wait(timeout=3)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.err.close()
        txt = self.stderr_text()
        rep = {}
        for line in txt.splitlines():
            parts = line.split()
            if len(parts) == 2 and parts[1].lstrip("-").isdigit():
                rep[parts[0]] = int(parts[1])
        self.exit_report = rep
        self.proc = None


# ---------------------------------------------------------------------------------------
# The worker side: ranks, jobs, the stream (§7)
# ---------------------------------------------------------------------------------------
class Rank:
    def __init__(self, sw, rank, world):
        self.sw = sw
        self.rank = rank
        self.world = world
        # §2: one UDP socket per context; JOIN, DATA and LEAVE all leave from it. It is
        # deliberately NOT connect()ed, so that the source of every reply is checked here
        # (a RESULT must come from the switch's address:port, §2, §16).
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 21)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.setblocking(False)
        self.addr = ("127.0.0.1", sw.port)
        self.nonce = random.getrandbits(64) | 1      # §7.1: random, nonzero
        self.job = self.session = self.token = 0
        self.k = self.W = 0
        self.ack_flags = 0
        self.g = 0          # §7.2: stream index, never reset
        self.nops = 0       # §1: op number of the last non-empty op
        self.other = []     # datagrams received that were not accepted RESULTs
        self.foreign = []   # datagrams from a source other than the switch

    def send(self, b):
        self.sock.sendto(b, self.addr)

    def recv_all(self):
        out = []
        while True:
            try:
                b, src = self.sock.recvfrom(70000)
            except BlockingIOError:
                return out
            if src != self.addr:
                self.foreign.append((src, b))
                continue
            out.append(b)

    def close(self):
        self.sock.close()


def join_body(nonce, world, elems, window, name, fallback_port=0, wait=0, lane=0, nlanes=1):
    # §4.1: nonce(8) world(2) elems(2) window(4) sw_version(4) mcast_group(4) mcast_port(2)
    # lane(1) nlanes(1) fallback_port(2) wait(2) name(32, NUL-padded, a NUL within)
    nm = name.encode()
    assert 1 <= len(nm) <= 31
    return struct.pack(">QHHIIIHBBHH32s", nonce, world, elems, window, 100, 0, 0, lane, nlanes,
                       fallback_port, wait, nm)


def parse_join_ack(b):
    h = parse_header(b)
    (nonce, world, elems, window, swv, mgroup, mport, lane, nlanes, fb, wait,
     name) = struct.unpack_from(">QHHIIIHBBHH32s", b, 32)
    return h, dict(nonce=nonce, world=world, elems=elems, window=window, mcast_group=mgroup,
                   lane=lane, nlanes=nlanes, name=name.split(b"\0")[0].decode())


class Job:
    def __init__(self, sw, name, world, k, W, fallback_port=0):
        self.sw = sw
        self.name = name
        self.world = world
        self.ranks = [Rank(sw, r, world) for r in range(world)]
        self.k_prop = k
        self.W_prop = W
        self.fallback_port = fallback_port
        self.acks = {}

    def join(self):
        """§7.1: JOIN every rank (seq = remaining join time in ms), re-send on the schedule
        until each rank has its JOIN_ACK with its nonce."""
        pending = set(range(self.world))
        next_send = {r: 0.0 for r in pending}
        backoff = {r: 0.1 for r in pending}
        t_end = time.monotonic() + 5.0
        while pending:
            waiting("JOIN_ACK of job %s on %s" % (self.name, self.sw.name))
            now = time.monotonic()
            if now > t_end:
                raise RuntimeError("no JOIN_ACK for job %s" % self.name)
            for r in sorted(pending):
                if now >= next_send[r]:
                    rk = self.ranks[r]
                    body = join_body(rk.nonce, self.world, self.k_prop, self.W_prop, self.name,
                                     self.fallback_port if r == 0 else 0)
                    left_ms = max(1, int((t_end - now) * 1000))
                    rk.send(header(K_JOIN, rank=r, seq=left_ms) + body)
                    next_send[r] = now + backoff[r]
                    backoff[r] = min(1.0, backoff[r] * 2)
            select.select([rk.sock for rk in self.ranks], [], [], 0.02)
            for r in list(pending):
                rk = self.ranks[r]
                for b in rk.recv_all():
                    h = parse_header(b)
                    if not h or h["magic"] != MAGIC or h["version"] != VERSION:
                        continue
                    if h["kind"] == K_JOIN_NAK:
                        reason = struct.unpack_from(">Qi", b, 32)[1]
                        raise RuntimeError("JOIN_NAK %d for job %s" % (reason, self.name))
                    if h["kind"] != K_JOIN_ACK or len(b) < 96:
                        continue
                    hh, body = parse_join_ack(b)
                    if body["nonce"] != rk.nonce:
                        continue
                    rk.job, rk.session, rk.token = hh["job"], hh["session"], hh["token"]
                    rk.k, rk.W, rk.ack_flags = body["elems"], body["window"], hh["flags"]
                    self.acks[r] = (hh, body, b)
                    pending.discard(r)
        r0 = self.ranks[0]
        self.id, self.session, self.token = r0.job, r0.session, r0.token
        self.k, self.W = r0.k, r0.W
        return self

    def leave(self):
        # §5.4 / §7.1: LEAVE sent twice, no reply.
        for rk in self.ranks:
            b = header(K_LEAVE, job=rk.job, rank=rk.rank, session=rk.session, token=rk.token)
            rk.send(b)
            rk.send(b)

    def close(self):
        for rk in self.ranks:
            rk.close()


class Op:
    """One all-reduce of one op number. dtype INT32 or FLOAT32; wire op 0, 1, 2 or 3."""

    def __init__(self, dtype, red, inputs, wire_op=None):
        self.dtype = dtype
        self.red = red
        self.inputs = inputs          # per rank: list of values
        self.count = len(inputs[0])
        if wire_op is None:
            wire_op = red             # §3 op: 0 add, 1 max, 2 min
        self.wire_op = wire_op


def run_op(job, op, drop_send=None, drop_result=None, rto=0.03, label=""):
    """Run one op on every rank of the job at once, by §7.2 (stream), §7.3 (send conditions),
    §7.5 (result handling) and §7.6 (a resend is the identical datagram). Packets are sent in
    rank order, each rank sending every packet it may, so that contributions of a round reach
    the switch in rank order (that fixes op 3's rounding, §8.7).
    Returns (outputs per rank, results: {(rank, p): raw RESULT}, state per rank)."""
    N, k, W = job.world, job.k, job.W
    count = op.count
    nblocks = (count + k - 1) // k
    two_round = op.dtype == DT_FLOAT32 and op.wire_op == 0
    lag = min(W, nblocks) if two_round else 0          # §7.2
    npk = nblocks + lag
    st = []
    for rk in job.ranks:
        rk.nops += 1
        s = dict(g0=rk.g, p=0, inflight={}, acc={}, E={}, out=[None] * count,
                 seed=op_seed(rk.nops, count, op.dtype, op.red), sends=0, resends=0)
        xs = op.inputs[rk.rank]
        s["own_e"] = [block_exp(xs[b * k:(b + 1) * k]) for b in range(nblocks)] \
            if op.dtype == DT_FLOAT32 else None
        st.append(s)
        rk.g += npk

    def build(rk, s, p):
        g = s["g0"] + p
        slot, seq = g % W, (g // W) & 0xFFFFFFFF     # §7.2: slot = g mod W, seq = g div W
        xs = op.inputs[rk.rank]
        cnt, exp, vals = 0, 0, []
        if op.dtype == DT_INT32:
            vals = xs[p * k:(p + 1) * k]
            cnt = len(vals)
        elif op.wire_op == 3:                        # §8.7: own exponent, one round
            blk = xs[p * k:(p + 1) * k]
            exp = s["own_e"][p]
            vals = encode_block(blk, exp, N)
            cnt = len(vals)
        else:                                        # §7.2 two rounds, wire op 0
            exp = s["own_e"][p] if p < nblocks else EXP_ZERO
            if p >= lag:
                b = p - lag
                blk = xs[b * k:(b + 1) * k]
                vals = encode_block(blk, s["E"][b], N)
                cnt = len(vals)
        tag = packet_tag(s["seed"], p)
        return header(K_DATA, job=rk.job, rank=rk.rank, session=rk.session, token=rk.token,
                      slot=slot, set_bit=seq & 1, seq=seq, count=cnt, exp=exp, op=op.wire_op,
                      tag=tag) + payload_bytes(vals), (slot, seq, cnt, tag)

    def can_send(s, p):
        if p >= npk:
            return False
        g = s["g0"] + p
        if any(((s["g0"] + q) % W) == g % W for q in s["inflight"]):   # §7.3 cond. 1
            return False
        if two_round and p >= lag and (p - lag) not in s["acc"]:         # §7.3 cond. 2
            return False
        return True

    results = {}
    t_start = time.monotonic()
    nres = [0] * N
    while any(len(s["acc"]) < npk for s in st):
        waiting("RESULTs of op %s on %s (accepted %s of %d)" % (
            label, job.sw.name, [len(s["acc"]) for s in st], npk))
        if time.monotonic() - t_start > 8.0:
            raise RuntimeError("op %s made no progress: accepted %s of %d" % (
                label, [len(s["acc"]) for s in st], npk))
        now = time.monotonic()
        for rk, s in zip(job.ranks, st):
            while can_send(s, s["p"]):
                p = s["p"]
                b, meta = build(rk, s, p)
                s["inflight"][p] = [b, now, meta]
                s["p"] += 1
                s["sends"] += 1
                if drop_send and drop_send(rk.rank, p):
                    continue                        # lost on the way (worker-side loss)
                rk.send(b)
            for p, ent in s["inflight"].items():    # §7.6: resend the identical datagram
                if now - ent[1] >= rto:
                    rk.send(ent[0])
                    ent[1] = now
                    s["resends"] += 1
        select.select([rk.sock for rk in job.ranks], [], [], 0.005)
        for rk, s in zip(job.ranks, st):
            for b in rk.recv_all():
                h = parse_header(b)
                # §7.5 rule 1..4
                if (not h or h["magic"] != MAGIC or h["version"] != VERSION or
                        h["kind"] != K_RESULT or len(b) != 32 + 4 * h["count"] or
                        h["job"] != rk.job or h["session"] != rk.session or
                        h["token"] != rk.token or h["slot"] >= W or
                        h["set"] != (h["seq"] & 1)):
                    rk.other.append(b)
                    continue
                # rule 5: match (slot, seq) to an in-flight packet
                hit = None
                for p, ent in s["inflight"].items():
                    if ent[2][0] == h["slot"] and ent[2][1] == h["seq"]:
                        hit = p
                        break
                if hit is None:
                    rk.other.append(b)
                    continue
                if h["tag"] != s["inflight"][hit][2][3] or h["op"] != op.wire_op:   # rule 6
                    rk.other.append(b)
                    continue
                if h["count"] != s["inflight"][hit][2][2]:                          # rule 7
                    raise RuntimeError("RESULT count mismatch (rule 7)")
                nres[rk.rank] += 1
                if drop_result and drop_result(rk.rank, hit, nres[rk.rank]):
                    continue                        # lost on the way back
                # rule 8: accept
                p = hit
                del s["inflight"][p]
                s["acc"][p] = b
                results[(rk.rank, p)] = b
                vals = payload_ints(b, h["count"])
                if op.dtype == DT_INT32:
                    s["out"][p * k:p * k + len(vals)] = vals
                elif op.wire_op == 3:
                    s["out"][p * k:p * k + len(vals)] = decode_block(vals, h["exp"], N)
                else:
                    if p < nblocks:
                        s["E"][p] = h["exp"]     # §7.2: E(b) = exp of the RESULT of packet b
                    if p >= lag:
                        bb = p - lag
                        s["out"][bb * k:bb * k + len(vals)] = decode_block(vals, s["E"][bb], N)
    return [s["out"] for s in st], results, st


def expected_int(op):
    N = len(op.inputs)
    out = []
    for i in range(op.count):
        col = [op.inputs[r][i] for r in range(N)]
        if op.red == RED_SUM:
            out.append(i32(sum(col)))
        elif op.red == RED_MAX:
            out.append(max(col))
        else:
            out.append(min(col))
    return out


def check_float(op, outs, k):
    """Per element against the §8.1 bound with the block's agreed exponent."""
    N = len(op.inputs)
    worst = ""
    for r in range(N):
        if len(outs[r]) != op.count or any(v is None for v in outs[r]):
            return False, "rank %d: incomplete output" % r
    for i in range(op.count):
        b = i // k
        blk_e = max(block_exp(op.inputs[r][b * k:(b + 1) * k]) for r in range(N))
        exact = float(sum(fractions.Fraction(op.inputs[r][i]) for r in range(N)))
        bound = f32_bound(N, blk_e, exact)
        for r in range(N):
            if abs(outs[r][i] - exact) > bound:
                return False, "elem %d rank %d: %r vs exact %r (bound %g)" % (
                    i, r, outs[r][i], exact, bound)
        if any(struct.pack(">f", outs[r][i]) != struct.pack(">f", outs[0][i])
               for r in range(N)):
            return False, "elem %d differs between ranks" % i
    return True, worst


def expected_results(job, op, st):
    """The RESULT datagrams §6.2 defines (header per §6.2's RESULT header, payload the
    round's values), for every packet p of the op, given the inputs (contributions in rank
    order for op 3, §8.7). Keys p -> bytes."""
    N, k, W = job.world, job.k, job.W
    count = op.count
    nblocks = (count + k - 1) // k
    two_round = op.dtype == DT_FLOAT32 and op.wire_op == 0
    lag = min(W, nblocks) if two_round else 0
    s0 = st[0]
    exps = {}
    out = {}
    for p in range(nblocks + lag):
        g = s0["g0"] + p
        slot, seq = g % W, (g // W) & 0xFFFFFFFF
        tag = packet_tag(s0["seed"], p)
        contribs = []
        for r in range(N):
            xs = op.inputs[r]
            if op.dtype == DT_INT32:
                vals, e = xs[p * k:(p + 1) * k], 0
            elif op.wire_op == 3:
                blk = xs[p * k:(p + 1) * k]
                e = block_exp(blk)
                vals = encode_block(blk, e, N)
            else:
                e = block_exp(xs[p * k:(p + 1) * k]) if p < nblocks else EXP_ZERO
                vals = []
                if p >= lag:
                    b = p - lag
                    vals = encode_block(xs[b * k:(b + 1) * k], exps[b], N)
            contribs.append((e, vals))
        cnt = len(contribs[0][1])
        if op.wire_op == 3:
            rexp, V = bfp_combine(contribs)
        else:
            rexp = max(c[0] for c in contribs)       # §6.2: S.exp = max as int16
            V = []
            for i in range(cnt):
                col = [c[1][i] for c in contribs]
                if op.wire_op == 0:
                    V.append(i32(sum(col)))
                elif op.wire_op == 1:
                    V.append(max(col))
                else:
                    V.append(min(col))
        if two_round and p < nblocks:
            exps[p] = rexp
        out[p] = header(K_RESULT, job=job.id, rank=RANK_SWITCH, session=job.session,
                        token=job.token, slot=slot, set_bit=seq & 1, seq=seq, count=cnt,
                        exp=rexp, flags=0, op=op.wire_op, tag=tag) + payload_bytes(V)
    return out


def masked(b):
    """A RESULT with job id, session and token blanked: what two switches must agree on."""
    return b[:4] + b"\0\0" + b[6:8] + b"\0" * 8 + b[16:]


def drain(ranks, t=0.1):
    """Collect what arrives in t seconds, per rank."""
    got = {rk.rank: [] for rk in ranks}
    end = time.monotonic() + t
    while True:
        left = end - time.monotonic()
        if left <= 0:
            break
        waiting("datagrams for %.2fs" % t)
        select.select([rk.sock for rk in ranks], [], [], min(left, 0.02))
        for rk in ranks:
            got[rk.rank].extend(rk.recv_all())
    return got


def wait_for(ranks, pred, t=1.0, what="a datagram"):
    """Receive until pred(rank, bytes) is true for some datagram; return (rank, bytes)."""
    end = time.monotonic() + t
    while time.monotonic() < end:
        waiting(what)
        select.select([rk.sock for rk in ranks], [], [], 0.02)
        for rk in ranks:
            for b in rk.recv_all():
                if pred(rk, b):
                    return rk, b
                rk.other.append(b)
    return None, None


def counter_delta(a, b):
    return {key: b.get(key, 0) - a.get(key, 0) for key in set(a) | set(b)}


def settled(sw, t=1.0):
    """/counters once two reads a tick apart agree: the program's counters reach the
    switch's once a tick (100 ms with --metrics; §16, docs/EBPF.md), so a base read at once
    after traffic would miss what is still to be folded in."""
    prev = sw.counters()
    end = time.monotonic() + t
    while True:
        waiting("counters of %s to settle" % sw.name)
        time.sleep(0.12)
        cur = sw.counters()
        if cur == prev or time.monotonic() > end:
            return cur
        prev = cur


def wait_counters(sw, base, expect, t=2.0):
    """Poll /counters until every expected delta is reached (the eBPF program's counters are
    folded in once a tick: 100 ms with --metrics, §16, docs/EBPF.md), then return deltas."""
    end = time.monotonic() + t
    while True:
        waiting("counters %s on %s" % (expect, sw.name))
        d = counter_delta(base, sw.counters())
        if all(d.get(key, 0) == v for key, v in expect.items()) or time.monotonic() > end:
            # one more tick, so that a counter that keeps moving shows up
            time.sleep(0.15)
            return counter_delta(base, sw.counters())
        time.sleep(0.05)


COMPARED = ["contributions", "completions", "results_resent", "jobs_started", "jobs_ended",
            "jobs_aborted", "jobs_evicted"]


def drops_and_main(d):
    return dict(sorted((key, v) for key, v in d.items()
                       if (key.startswith("drop_") or key in COMPARED) and v))


# ---------------------------------------------------------------------------------------
# Raw capture on lo (the program's frames, §16 "Results of the eBPF dataplane")
# ---------------------------------------------------------------------------------------
def open_capture():
    try:
        s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(0x0003))
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 23)
        s.bind(("lo", 0))
        s.setblocking(False)
        return s
    except OSError as e:
        vlog("no packet capture:", e)
        return None


def read_capture(s, sw_port):
    frames = []
    while True:
        try:
            b = s.recv(70000)
        except BlockingIOError:
            break
        if len(b) < 14 + 20 + 8 or b[12:14] != b"\x08\x00":
            continue
        ip = b[14:]
        ihl = (ip[0] & 15) * 4
        if ip[9] != 17:
            continue
        udp = ip[ihl:]
        sport, dport, ulen, csum = struct.unpack_from(">HHHH", udp, 0)
        pl = udp[8:]
        if sport != sw_port or len(pl) < 32 or pl[:3] != b"IN\x01" or pl[3] != K_RESULT:
            continue
        frames.append(dict(ttl=ip[8], src=socket.inet_ntoa(ip[12:16]),
                           dst=socket.inet_ntoa(ip[16:20]), csum=csum, ulen=ulen,
                           iphdr_ok=ip_checksum(ip[:ihl]) == 0, plen=len(pl), dport=dport,
                           frag=struct.unpack_from(">H", ip, 6)[0] & 0x3FFF))
    return frames


def ip_checksum(h):
    s = 0
    for i in range(0, len(h), 2):
        s += (h[i] << 8) + h[i + 1]
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return (~s) & 0xFFFF


# ---------------------------------------------------------------------------------------
# Inputs
# ---------------------------------------------------------------------------------------
def rnd_int_inputs(rng, N, count):
    return [[rng.randint(-(1 << 31), (1 << 31) - 1) for _ in range(count)] for _ in range(N)]


def rnd_float_inputs(rng, N, count, k, zero_blocks=()):
    out = []
    for r in range(N):
        xs = [f32(rng.uniform(-1, 1) * math.ldexp(1.0, rng.randint(-12, 12)))
              for _ in range(count)]
        for (rr, b) in zero_blocks:
            if rr == r or rr == -1:
                for i in range(b * k, min(count, (b + 1) * k)):
                    xs[i] = 0.0
        out.append(xs)
    return out


# ---------------------------------------------------------------------------------------
# The suite, run once per dataplane. Returns what is compared across dataplanes.
# ---------------------------------------------------------------------------------------
def op_plan(seed, N, k, W):
    """The same list of ops for both dataplanes: INT32 SUM/MAX/MIN, FLOAT32 SUM in two rounds
    (op 0) and in one (op 3, only for ops of at most W blocks, §8.7), several sizes, the
    stream reusing every slot many times."""
    rng = random.Random(seed)
    plan = []
    for n in (1, k, k + 5, 3 * W * k + 7):
        plan.append(("int32 sum n=%d" % n, Op(DT_INT32, RED_SUM, rnd_int_inputs(rng, N, n))))
    plan.append(("int32 max n=%d" % (2 * k + 1),
                 Op(DT_INT32, RED_MAX, rnd_int_inputs(rng, N, 2 * k + 1))))
    plan.append(("int32 min n=%d" % (2 * k + 1),
                 Op(DT_INT32, RED_MIN, rnd_int_inputs(rng, N, 2 * k + 1))))
    for n in (1, k + 3, 2 * W * k + 1):
        zb = [(1, 1)] if n > 2 * k else []
        plan.append(("float32 sum two-round n=%d" % n,
                     Op(DT_FLOAT32, RED_SUM, rnd_float_inputs(rng, N, n, k, zb), wire_op=0)))
    for n in (1, 2 * k + 9, W * k):
        zb = [(0, 1)] if n > k else []
        if n == W * k:
            zb = [(-1, 0), (1, 2)]      # a block zero on every rank, one zero on rank 1
        plan.append(("float32 sum op3 n=%d" % n,
                     Op(DT_FLOAT32, RED_SUM, rnd_float_inputs(rng, N, n, k, zb), wire_op=3)))
    return plan


def run_plan(job, plan, tagname, res_store, capture=None):
    """Run every op; check each result; store the RESULT bytes (masked) for the cross check."""
    k = job.k
    all_ok = True
    spec_ok = True
    detail = ""
    for label, op in plan:
        outs, results, st = run_op(job, op, label=label)
        if op.dtype == DT_INT32:
            exp = expected_int(op)
            ok = all(o == exp for o in outs)
            d = "" if ok else "rank outputs differ from the exact %s" % label
        else:
            ok, d = check_float(op, outs, k)
        C.check(ok, "%s: %s: %s on every rank (%s)" % (
            tagname, label, "exact" if op.dtype == DT_INT32 else "within the §8.1 bound",
            "N=%d k=%d W=%d" % (job.world, job.k, job.W)), d)
        all_ok &= ok
        exp_res = expected_results(job, op, st)
        for (r, p), b in sorted(results.items()):
            res_store.append(((label, r, p), masked(b)))
            if b != exp_res[p]:
                if spec_ok:
                    detail = "%s rank %d packet %d: got %s want %s" % (
                        label, r, p, b[:48].hex(), exp_res[p][:48].hex())
                spec_ok = False
    C.check(spec_ok, "%s: every RESULT (N=%d) is byte for byte the §6.2/§16 RESULT "
            "(kind 2, rank 0xFFFF, flags 0, round's slot/seq/count/op/tag/exp, sums; "
            "op 3 per §8.7's shifts)" % (tagname, job.world), detail)
    return all_ok


def suite(sw, is_ebpf, tmp, rec):
    tn = sw.name

    # ---- 1. JOIN_ACK: capability flags and k (§3 flags, §4.1, §5.3, §16) -------------
    base = settled(sw)
    job = Job(sw, "cr-ebpf-kcap", 1, 16368, 4).join()
    h, body, raw = job.acks[0]
    rec["kcap_ack_flags"] = h["flags"]
    if is_ebpf:
        C.check(body["elems"] == EBPF_MAX_K,
                "%s: JOIN proposing k=16368 (switch --max-elems 4096) is granted k=%d "
                "(§16: at most 2048)" % (tn, EBPF_MAX_K), "granted %d" % body["elems"])
        bad = h["flags"] & (FLAG_CAP_F32 | FLAG_CAP_FIX | FLAG_CAP_SPARSE | FLAG_CAP_HOT |
                            FLAG_CAP_SHM)
        C.check(bad == 0, "%s: JOIN_ACK flag bits 2 (F32), 3 (SHM), 6 (FIX), 7 (HOT), "
                "8 (SPARSE) are 0 (§16)" % tn, "flags 0x%04x" % h["flags"])
        C.check(h["flags"] & FLAG_CAP_BFP,
                "%s: JOIN_ACK flag bit 1 (op 3, block floating point) is set (§16)" % tn,
                "flags 0x%04x" % h["flags"])
    else:
        C.check(body["elems"] == 4096,
                "%s: JOIN proposing k=16368 at --max-elems 4096 is granted 4096 (§5.3)" % tn,
                "granted %d" % body["elems"])
        C.check((h["flags"] & (FLAG_CAP_BFP | FLAG_CAP_F32 | FLAG_CAP_FIX | FLAG_CAP_SPARSE))
                == (FLAG_CAP_BFP | FLAG_CAP_F32 | FLAG_CAP_FIX | FLAG_CAP_SPARSE),
                "%s: JOIN_ACK offers ops 3, 4, 5 and 7/8 (flag bits 1, 2, 6, 8)" % tn,
                "flags 0x%04x" % h["flags"])
    C.check(body["window"] == 4 and body["world"] == 1 and body["nonce"] == job.ranks[0].nonce
            and h["rank"] == RANK_SWITCH and h["session"] != 0,
            "%s: JOIN_ACK body echoes nonce, world 1, window 4; header rank 0xFFFF, "
            "session != 0 (§4.1)" % tn)
    # A full-size packet through the program: k = 2048 elements, 8224-byte datagrams.
    rng = random.Random(7)
    big = Op(DT_INT32, RED_SUM, rnd_int_inputs(rng, 1, 2 * job.k + 5))
    outs, results, st = run_op(job, big, label="kcap")
    C.check(outs[0] == expected_int(big) and len(results) == 3,
            "%s: INT32 SUM of %d elements with k=%d (packets of %d bytes) exact" % (
                tn, big.count, job.k, 32 + 4 * job.k))
    job.leave()
    job.close()

    # ---- 2. Job A: N=2, k=64, W=4: the op plan, raw frames, duplicates, hostile DATA -----
    cap = open_capture() if is_ebpf else None
    if cap:
        read_capture(cap, sw.port)      # empty it
    jobA = Job(sw, "cr-ebpf-a", 2, 64, 4).join()
    C.check(jobA.k == 64 and jobA.W == 4, "%s: job A granted k=64 W=4" % tn,
            "k=%d W=%d" % (jobA.k, jobA.W))
    rec["A"] = []
    b0 = settled(sw)
    run_plan(jobA, op_plan(11, 2, jobA.k, jobA.W), tn + " N=2", rec["A"])
    if cap:
        frames = read_capture(cap, sw.port)
        cap.close()
        n_res = len(rec["A"])
        good = [f for f in frames if f["ttl"] == 64 and f["csum"] == 0 and f["iphdr_ok"] and
                f["src"] == "127.0.0.1" and f["dst"] == "127.0.0.1" and f["frag"] == 0 and
                f["ulen"] == 8 + f["plen"]]
        C.check(len(frames) >= n_res and len(good) == len(frames),
                "%s: every RESULT frame the program sent (%d captured on lo, %d RESULTs "
                "accepted) has IPv4 TTL 64, a valid IPv4 header checksum, UDP checksum 0, "
                "source 127.0.0.1:switch port (§16)" % (tn, len(frames), n_res),
                "bad: %s" % [f for f in frames if f not in good][:3])
    rec["A_counters"] = drops_and_main(wait_counters(sw, b0, {}, t=0.2))

    # -- duplicate of a complete round: RESULT to the sender only (§6.2, §9, §16) --
    base = settled(sw)
    opD = Op(DT_INT32, RED_SUM, rnd_int_inputs(random.Random(3), 2, 10))
    outs, results, st = run_op(jobA, opD, label="dup")
    last = st[1]["acc"][0]
    r0, r1 = jobA.ranks
    # rank 1 sends its DATA of that (complete) round again: the identical datagram
    g = st[1]["g0"]
    data = header(K_DATA, job=r1.job, rank=1, session=r1.session, token=r1.token,
                  slot=g % jobA.W, set_bit=(g // jobA.W) & 1, seq=g // jobA.W, count=10,
                  op=0, tag=packet_tag(st[1]["seed"], 0)) + payload_bytes(opD.inputs[1])
    r1.send(data)
    got = drain(jobA.ranks, 0.25)
    C.check(got[1] == [last] and got[0] == [],
            "%s: a duplicate DATA of a complete round is answered with the stored RESULT, "
            "byte-identical, to its sender only (§6.2 Duplicate, complete; §16)" % tn,
            "rank0 got %d, rank1 got %s" % (len(got[0]), [x.hex()[:40] for x in got[1]]))
    d = wait_counters(sw, base, {"results_resent": 1, "completions": 1})
    C.check(d.get("results_resent") == 1 and d.get("completions") == 1,
            "%s: results_resent counted once, completions once (§6.2)" % tn,
            "deltas %s" % drops_and_main(d))
    rec["dup_counters"] = drops_and_main(d)

    # -- hostile DATA: each dropped by its §6.1 counter; the job still correct after ----
    base = settled(sw)
    W, k = jobA.W, jobA.k
    g = r0.g                              # the next stream position: a fresh round
    slot, seq = g % W, (g // W) & 0xFFFFFFFF
    pl4 = payload_bytes([1, 2, 3, 4])

    def D(rank=0, job=None, session=None, token=None, slot_=None, set_=None, seq_=None,
          count=4, op=0, tag=0x11, pl=pl4, kind=K_DATA, ver=VERSION, magic=MAGIC):
        rk = r0
        b = bytearray(header(kind, job=rk.job if job is None else job, rank=rank,
                             session=rk.session if session is None else session,
                             token=rk.token if token is None else token,
                             slot=slot if slot_ is None else slot_,
                             set_bit=(seq if seq_ is None else seq_) & 1 if set_ is None
                             else set_, seq=seq if seq_ is None else seq_, count=count,
                             op=op, tag=tag) + pl)
        b[2] = ver
        b[0:2] = struct.pack(">H", magic)
        return bytes(b)

    stranger = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    stranger.bind(("127.0.0.1", 0))
    hostile = [
        ("wrong token", D(token=r0.token ^ 0x5A5A5A5A), "drop_TOKEN", r0.sock),
        ("wrong session", D(session=(r0.session + 1) or 1), "drop_SESSION", r0.sock),
        ("slot index = W", D(slot_=W), "drop_SLOT", r0.sock),
        ("count = k+1 (length 32+4(k+1))",
         D(count=k + 1, pl=payload_bytes(list(range(k + 1)))), "drop_COUNT", r0.sock),
        ("length != 32+4*count", D(count=5), "drop_LENGTH", r0.sock),
        ("rank = N", D(rank=2), "drop_RANK", r0.sock),
        ("another source address:port", D(), "drop_SOURCE", stranger),
        ("set bit != seq & 1", D(set_=(seq & 1) ^ 1), "drop_SET", r0.sock),
        ("job id of no active job", D(job=63), "drop_NO_JOB", r0.sock),
        ("op 6", D(op=6), "drop_OP", r0.sock),
        ("stale round (seq - 4)", D(seq_=(seq - 4) & 0xFFFFFFFF), "drop_STALE", r0.sock),
        ("future round (seq + 4)", D(seq_=(seq + 4) & 0xFFFFFFFF), "drop_FUTURE", r0.sock),
        ("31 bytes", D()[:31], "drop_SHORT", r0.sock),
        ("bad magic", D(magic=0x4E49), "drop_MAGIC", r0.sock),
        ("version 2", D(ver=2), "drop_VERSION", r0.sock),
        ("kind 99", D(kind=99), "drop_KIND", r0.sock),
    ]
    for what, b, ctr, s in hostile:
        s.sendto(b, ("127.0.0.1", sw.port))
    # slot rule: rank 0 starts the fresh round, sends it again (DUP_PENDING), and sends
    # the round after it into the same set while it is not complete (NOT_READY).
    real = Op(DT_INT32, RED_SUM, rnd_int_inputs(random.Random(5), 2, 3))
    tag0 = packet_tag(op_seed(r0.nops + 1, 3, DT_INT32, RED_SUM), 0)
    first = D(count=3, tag=tag0, pl=payload_bytes(real.inputs[0]))
    r0.send(first)
    r0.send(first)
    r0.send(D(seq_=(seq + 2) & 0xFFFFFFFF, tag=tag0))
    expect = {c: 1 for _, _, c, _ in hostile}
    expect.update({"drop_DUP_PENDING": 1, "drop_NOT_READY": 1, "contributions": 1})
    got = drain(jobA.ranks, 0.1)
    d = wait_counters(sw, base, expect)
    bad = {key: (d.get(key, 0), v) for key, v in expect.items() if d.get(key, 0) != v}
    extra = {key: v for key, v in d.items() if key.startswith("drop_") and v and
             key not in expect}
    C.check(not bad and not extra,
            "%s: hostile DATA dropped, one count each: %s (§6.1; read after the fold, §16)" % (
                tn, ", ".join(c[5:] for c in sorted(expect) if c.startswith("drop_"))),
            "wrong (got, want): %s; unexpected: %s" % (bad, extra))
    C.check(got[0] == [] and got[1] == [] and not r0.foreign,
            "%s: no answer to any hostile datagram (§6.1: dropped)" % tn,
            "rank0 %d rank1 %d" % (len(got[0]), len(got[1])))
    stranger.close()
    rec["hostile_counters"] = drops_and_main(d)
    # the job goes on: rank 0's contribution is in; the stream continues with it.
    # (run_op resends rank 0's identical packet, which the switch drops or answers.)
    outs, results, st = run_op(jobA, real, label="after hostile")
    C.check(all(o == expected_int(real) for o in outs),
            "%s: after the hostile datagrams the job still gives exact sums" % tn)
    more = op_plan(12, 2, jobA.k, jobA.W)[3:4]
    ok = run_plan(jobA, more, tn + " after hostile", [])

    # -- ops the program does not offer: 4, 5, 7 dropped with OP (§6.1 check 14, §16) ----
    if is_ebpf:
        base = settled(sw)
        g = r0.g
        slot, seq = g % W, (g // W) & 0xFFFFFFFF
        for opn in (4, 5, 7):
            r0.send(D(op=opn, tag=0x22))
            r1.send(D(rank=1, op=opn, tag=0x22))
        got = drain(jobA.ranks, 0.1)
        d = wait_counters(sw, base, {"drop_OP": 6})
        C.check(d.get("drop_OP") == 6 and d.get("contributions", 0) == 0 and
                d.get("jobs_aborted", 0) == 0 and not got[0] and not got[1],
                "%s: DATA with op 4, 5 and 7 (from both ranks) dropped, drop OP +6, "
                "no contribution, no answer, job not aborted (§16, §6.1 check 14)" % tn,
                "deltas %s" % drops_and_main(d))
        outs, results, st = run_op(jobA, Op(DT_INT32, RED_SUM, [[5] * 3, [7] * 3]),
                                   label="after ops")
        C.check(all(o == [12] * 3 for o in outs),
                "%s: the rounds those DATA named still work afterwards" % tn)
    jobA.leave()
    jobA.close()

    # ---- 3. Job B: N=3, k=16, W=8: the op plan again with three ranks -------------------
    jobB = Job(sw, "cr-ebpf-b", 3, 16, 8).join()
    rec["B"] = []
    b0 = settled(sw)
    run_plan(jobB, op_plan(21, 3, jobB.k, jobB.W), tn + " N=3", rec["B"])
    rec["B_counters"] = drops_and_main(wait_counters(sw, b0, {}, t=0.2))
    jobB.leave()
    jobB.close()

    # ---- 4. Job C: N=3, worker-side loss of DATA and of RESULTs ----------------------
    jobC = Job(sw, "cr-ebpf-c", 3, 32, 4).join()
    base = settled(sw)
    rng = random.Random(31)
    lossplan = [("int32 sum", Op(DT_INT32, RED_SUM, rnd_int_inputs(rng, 3, 700))),
                ("float32 two-round", Op(DT_FLOAT32, RED_SUM,
                                         rnd_float_inputs(rng, 3, 300, 32), 0)),
                ("float32 op3", Op(DT_FLOAT32, RED_SUM, rnd_float_inputs(rng, 3, 100, 32),
                                   3))]
    allok = True
    resent_total = 0
    for label, op in lossplan:
        # rank 1 loses the first send of every 5th packet; rank 0 loses every 4th RESULT
        outs, results, st = run_op(
            jobC, op, label="loss " + label,
            drop_send=lambda r, p: r == 1 and p % 5 == 2,
            drop_result=lambda r, p, n: r == 0 and n % 4 == 1)
        if op.dtype == DT_INT32:
            ok = all(o == expected_int(op) for o in outs)
        else:
            ok = check_float(op, outs, jobC.k)[0]
        allok &= ok
        resent_total += sum(s["resends"] for s in st)
    d = wait_counters(sw, base, {})
    C.check(allok and d.get("results_resent", 0) > 0 and resent_total > 0,
            "%s: N=3 with lost DATA (rank 1) and lost RESULTs (rank 0) recovered by "
            "resending the identical DATA: results correct, results_resent=%d (§9)" % (
                tn, d.get("results_resent", 0)),
            "ok=%s resends=%d deltas=%s" % (allok, resent_total, drops_and_main(d)))
    jobC.leave()
    jobC.close()

    # ---- 5. TREE_JOIN (§12.3) ---------------------------------------------------------
    base = settled(sw)
    rk = Rank(sw, 0, 2)
    body = join_body(rk.nonce, 2, 64, 4, "cr-ebpf-tree") + bytes([1]) + bytes(31)  # set {0}
    rk.send(header(K_TREE_JOIN, rank=0) + body)
    _, b = wait_for([rk], lambda r, b: len(b) >= 32 and b[3] in (K_JOIN_NAK, K_JOIN_ACK,
                                                                  K_JOIN_WAIT),
                    t=1.0, what="answer to TREE_JOIN")
    if is_ebpf:
        reason = struct.unpack_from(">Qi", b, 32) if b and len(b) >= 48 else (None, None)
        d = wait_counters(sw, base, {"drop_JOIN": 1})
        C.check(b is not None and b[3] == K_JOIN_NAK and reason[0] == rk.nonce and
                reason[1] == ERR_REJECTED and d.get("drop_JOIN") == 1,
                "%s: TREE_JOIN answered JOIN_NAK REJECTED (-1003) with its nonce, drop JOIN +1 "
                "(§16)" % tn, "answer %s, deltas %s" % (b and b[:48].hex(), drops_and_main(d)))
        txt = sw.stderr_text()
        C.check("tree_not_in_this_dataplane" in txt,
                "%s: logged join_refused reason=tree_not_in_this_dataplane (docs/EBPF.md)" % tn)
    else:
        C.check(b is not None and b[3] == K_JOIN_WAIT,
                "%s: the userspace switch registers the same TREE_JOIN (JOIN_WAIT, §12.3)" % tn,
                "answer %s" % (b and b[:40].hex()))
        # withdraw the registration again (§5.2 WITHDRAW: same body)
        rk.send(header(K_WITHDRAW, rank=0) + body[:64])
    rk.close()

    # ---- 6. MISMATCH: tags differ in a round -> drop MISMATCH, ABORT MISMATCH (§6.2) ----
    jobE = Job(sw, "cr-ebpf-e", 2, 8, 4).join()
    base = settled(sw)
    for rk in jobE.ranks:
        rk.send(header(K_DATA, job=rk.job, rank=rk.rank, session=rk.session, token=rk.token,
                       slot=0, set_bit=0, seq=0, count=2, op=0, tag=0x10 + rk.rank)
                + payload_bytes([1, 2]))
    aborts = {}
    end = time.monotonic() + 1.5
    while len(aborts) < 2 and time.monotonic() < end:
        waiting("ABORT MISMATCH on %s" % tn)
        select.select([rk.sock for rk in jobE.ranks], [], [], 0.02)
        for rk in jobE.ranks:
            for b in rk.recv_all():
                h = parse_header(b)
                if h and h["kind"] == K_ABORT and len(b) >= 48:
                    aborts[rk.rank] = (h, struct.unpack_from(">Qi", b, 32))
    d = wait_counters(sw, base, {"drop_MISMATCH": 1, "jobs_aborted": 1})
    ok = (len(aborts) == 2 and all(a[0]["session"] == jobE.session and
                                   a[0]["token"] == jobE.token and a[1] == (0, ERR_MISMATCH)
                                   for a in aborts.values()))
    C.check(ok and d.get("drop_MISMATCH") == 1 and d.get("jobs_aborted") == 1,
            "%s: a round with two tags: ABORT MISMATCH (-1005) to both ranks, drop MISMATCH "
            "+1, jobs_aborted +1 (§6.2, §16)" % tn,
            "aborts %s deltas %s" % (aborts, drops_and_main(d)))
    rec["mismatch_counters"] = drops_and_main(d)
    jobE.leave()
    jobE.close()

    # ---- 7. Eviction (§5.8): DATA at or past the bound answered with MIGRATE ------------
    fb = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    fb.bind(("127.0.0.1", 0))
    fbport = fb.getsockname()[1]
    jobF = Job(sw, "cr-ebpf-f", 2, 16, 4, fallback_port=fbport).join()
    rng = random.Random(41)
    opF = Op(DT_INT32, RED_SUM, rnd_int_inputs(rng, 2, 16 * 6))
    outs, _, _ = run_op(jobF, opF, label="before evict")   # g = 0..5: slots 0,1 reused
    ok = all(o == expected_int(opF) for o in outs)
    # rank 0 sends positions 6 and 7 (slots 2, 3, round 1), rank 1 only position 6
    r0, r1 = jobF.ranks
    vals = {6: [[1] * 4, [2] * 4], 7: [[3] * 4, [4] * 4]}
    seedF = op_seed(2, 8, DT_INT32, RED_SUM)

    def FD(rk, gpos, p):
        return header(K_DATA, job=rk.job, rank=rk.rank, session=rk.session, token=rk.token,
                      slot=gpos % 4, set_bit=(gpos // 4) & 1, seq=gpos // 4, count=4, op=0,
                      tag=packet_tag(seedF, p)) + payload_bytes(vals[gpos][rk.rank])
    r0.send(FD(r0, 6, 0))
    r0.send(FD(r0, 7, 1))
    r1.send(FD(r1, 6, 0))
    got = drain(jobF.ranks, 0.1)
    ok &= len(got[0]) == 1 and len(got[1]) == 1
    base = settled(sw)
    # the job must be in the operator view's snapshot first (docs/TOOLS.md)
    st_code = None
    end = time.monotonic() + 2.0
    while time.monotonic() < end:
        waiting("POST /jobs/%d/evict on %s" % (jobF.id, tn))
        st_code, _ = sw.http("POST", "/jobs/%d/evict" % jobF.id)
        if st_code == 202:
            break
        time.sleep(0.05)
    migr = {}
    end = time.monotonic() + 1.5
    while len(migr) < 2 and time.monotonic() < end:
        waiting("MIGRATE on %s" % tn)
        select.select([rk.sock for rk in jobF.ranks], [], [], 0.02)
        for rk in jobF.ranks:
            for b in rk.recv_all():
                if len(b) >= 32 and b[3] == K_MIGRATE:
                    migr[rk.rank] = b
    # §4 MIGRATE: 32-byte body: nonce 0, reason NOSPACE, bytes 16..21 rank 0's fallback
    # address and port, bytes 24..31 the bound B (uint64). Exactly 64 bytes.
    B_want = 8          # §5.8: max over slots of r*W + j, plus 1: slot 3 round 1 -> 7 + 1
    parsed = {}
    for r, b in migr.items():
        h = parse_header(b)
        nonce, reason, _res, fa, fp, _r2, bound = struct.unpack_from(">QiI4sHHQ", b, 32)
        parsed[r] = (len(b), h["job"], h["session"], h["token"], h["rank"], nonce, reason,
                     socket.inet_ntoa(fa), fp, bound)
    want = (64, jobF.id, jobF.session, jobF.token, RANK_SWITCH, 0, ERR_NOSPACE, "127.0.0.1",
            fbport, B_want)
    C.check(ok and st_code == 202 and len(parsed) == 2 and
            all(v == want for v in parsed.values()),
            "%s: eviction: MIGRATE to both ranks, 64 bytes, reason NOSPACE, rank 0's fallback "
            "127.0.0.1:%d, bound B=%d (§4, §5.8)" % (tn, fbport, B_want),
            "http %s, got %s, want %s" % (st_code, parsed, want))
    # (the fallback port, body bytes 20..21, is a different socket per dataplane)
    rec["migrate"] = {r: masked(b)[:52] + b"\0\0" + b[54:] for r, b in migr.items()}
    # a position below B is still served: rank 1's position 7 completes the round
    r1.send(FD(r1, 7, 1))
    got = drain(jobF.ranks, 0.15)
    res7 = [b for b in got[0] + got[1] if len(b) >= 32 and b[3] == K_RESULT]
    C.check(len(res7) == 2 and all(payload_ints(b, 4) == [7] * 4 for b in res7),
            "%s: after the eviction a position below B (7) is still aggregated and answered "
            "to both ranks (§5.8)" % tn, "got %s" % [x.hex()[:80] for x in got[0] + got[1]])
    # position 8 (slot 0, round 2) is at the bound: dropped EVICTED, answered with MIGRATE
    r0.send(header(K_DATA, job=r0.job, rank=0, session=r0.session, token=r0.token, slot=0,
                   set_bit=0, seq=2, count=4, op=0, tag=packet_tag(op_seed(3, 4, 0, 0), 0))
            + payload_bytes([9] * 4))
    got = drain(jobF.ranks, 0.15)
    d = wait_counters(sw, base, {"drop_EVICTED": 1, "jobs_evicted": 1})
    m0 = [b for b in got[0] if len(b) >= 32 and b[3] == K_MIGRATE]
    C.check(len(m0) == 1 and len(m0[0]) == 64 and struct.unpack_from(">Q", m0[0], 56)[0] ==
            B_want and not got[1] and d.get("drop_EVICTED") == 1 and
            d.get("jobs_evicted") == 1 and d.get("contributions", 0) == 1,
            "%s: DATA at the bound (position 8) dropped EVICTED and answered with the MIGRATE "
            "again, to its sender (§5.8, §16)" % tn,
            "rank0 %s rank1 %d deltas %s" % ([x.hex() for x in got[0]], len(got[1]),
                                             drops_and_main(d)))
    rec["evict_counters"] = drops_and_main(d)
    jobF.leave()
    fb.close()
    time.sleep(0.05)
    jobF.close()

    # ---- 8. Datagrams the program does not see whole: IP fragments (§16) ----------------
    # lo's MTU in this namespace goes down to 1500 after the switch started, so larger DATA
    # arrive as IP fragments (reassembled before the socket, not before the TC hook). §16:
    # the switch hands a DATA of at most 3558 bytes back to the program; a round's results
    # are clones at the link layer, and those larger than the MTU do not leave, so a rank
    # that misses its RESULT retransmits and the complete round answers it. A larger DATA
    # is dropped, DATAPLANE. (Phase 9 checks k's cap for an MTU known at start.)
    subprocess.run(["ip", "link", "set", "lo", "mtu", "1500"], check=True)
    try:
        jobG = Job(sw, "cr-ebpf-g", 3, 512, 4).join()
        base = settled(sw)
        # one round, each rank's 2080-byte DATA once, in rank order
        datas = []
        for rk in jobG.ranks:
            datas.append(header(K_DATA, job=rk.job, rank=rk.rank, session=rk.session,
                                token=rk.token, slot=0, set_bit=0, seq=0, count=512, op=0,
                                tag=0x5A) + payload_bytes([rk.rank + 1] * 512))
            rk.send(datas[-1])

        def got_result(bs):
            return any(len(b) == 2080 and b[3] == K_RESULT and payload_ints(b, 512) == [6] * 512
                       for b in bs)
        got = drain(jobG.ranks, 0.3)
        have = [got_result(got[r]) for r in range(3)]
        # §7.6: a rank without its RESULT resends the identical DATA (twice at most here)
        for _ in range(2):
            missing = [r for r in range(3) if not have[r]]
            if not missing:
                break
            for r in missing:
                jobG.ranks[r].send(datas[r])
            got = drain(jobG.ranks, 0.3)
            for r in missing:
                have[r] = got_result(got[r])
        d = wait_counters(sw, base, {"completions": 1})
        C.check(all(have) and d.get("completions") == 1 and d.get("contributions") == 3,
                "%s: a round completed by fragmented (2080-byte, lo MTU lowered to 1500) DATA "
                "reaches every rank, at once or by answering its retransmission, and is counted "
                "once (§16, §6.2)" % tn, "RESULT at ranks %s; deltas %s" % (have,
                                                                          drops_and_main(d)))
        # the rest of the stream goes on (with retransmissions where a RESULT is missing)
        jobG.ranks[0].g = jobG.ranks[1].g = jobG.ranks[2].g = 1
        for rk in jobG.ranks:
            rk.nops = 1
        opG = Op(DT_INT32, RED_SUM, rnd_int_inputs(random.Random(51), 3, 5 * jobG.k + 3))
        outs, _, _ = run_op(jobG, opG, label="fragments")
        d = wait_counters(sw, base, {})
        C.check(all(o == expected_int(opG) for o in outs) and d.get("drop_DATAPLANE", 0) == 0,
                "%s: INT32 SUM, N=3, 2080-byte DATA sent as IP fragments: exact, no drop "
                "DATAPLANE (§16: such DATA reaches the socket and is handed back)" % tn,
                "deltas %s" % drops_and_main(d))
        jobG.leave()
        jobG.close()
        # a fragmented DATA of 8224 bytes (k = 2048): the userspace dataplane aggregates it;
        # the eBPF one cannot hand it back (over 3558 bytes) and drops it, DATAPLANE (§16)
        jobH = Job(sw, "cr-ebpf-h", 1, 2048, 1).join()
        base = settled(sw)
        rk = jobH.ranks[0]
        rk.send(header(K_DATA, job=rk.job, rank=0, session=rk.session, token=rk.token, slot=0,
                       set_bit=0, seq=0, count=jobH.k, op=0, tag=0x33)
                + payload_bytes([3] * jobH.k))
        got = drain(jobH.ranks, 0.3)
        d = wait_counters(sw, base, {})
        answered = any(b[3] == K_RESULT for b in got[0])
        if is_ebpf:
            ok = not answered and d.get("drop_DATAPLANE") == 1
            what = "dropped, drop DATAPLANE +1"
        else:
            ok = answered and d.get("completions") == 1
            what = "aggregated and answered"
        C.check(ok, "%s: a fragmented %d-byte DATA is %s (§16)" % (tn, 32 + 4 * jobH.k, what),
                "answered %s, deltas %s" % (answered, drops_and_main(d)))
        rec["too_big_answered"] = answered
        jobH.leave()
        jobH.close()
    finally:
        subprocess.run(["ip", "link", "set", "lo", "mtu", "65536"])


def mtu_phase(bindir, tmp, switches):
    """§16: an eBPF switch caps k to what fits its interface's MTU at start,
    ⌊(MTU − 20 − 8 − 32) / 4⌋, with a message; DATA and RESULTs then pass whole."""
    subprocess.run(["ip", "link", "set", "lo", "mtu", "1500"], check=True)
    try:
        sw = Switch(bindir, tmp, "ebpf-mtu", ["--dataplane", "ebpf", "--iface", "lo"])
        switches.append(sw)
        if not sw.start():
            C.check(False, "eBPF switch on lo with MTU 1500 starts", sw.stderr_text()[:200])
            return
        fit = (1500 - 20 - 8 - 32) // 4
        job = Job(sw, "cr-ebpf-mtu", 2, 512, 4).join()
        ks = [job.acks[r][1]["elems"] for r in range(2)]
        C.check(ks == [fit, fit] and ("capped to %d" % fit) in sw.stderr_text(),
                "ebpf-mtu: with lo's MTU 1500 at start, a proposal of k=512 is granted k=%d and "
                "the switch says it capped --max-elems (§16)" % fit,
                "granted %s; stderr %r" % (ks, sw.stderr_text()[-300:]))
        base = settled(sw)
        op = Op(DT_INT32, RED_SUM, rnd_int_inputs(random.Random(61), 2, 7 * fit + 5))
        outs, _, _ = run_op(job, op, label="mtu")
        d = wait_counters(sw, base, {})
        C.check(all(o == expected_int(op) for o in outs) and d.get("drop_DATAPLANE", 0) == 0
                and d.get("results_resent", 0) == 0,
                "ebpf-mtu: INT32 SUM of %d elements at k=%d exact, nothing fed back or resent"
                % (7 * fit + 5, fit), "deltas %s" % drops_and_main(d))
        job.leave()
        job.close()
        sw.stop()
    finally:
        subprocess.run(["ip", "link", "set", "lo", "mtu", "65536"])


def start_refusals(bindir, tmp):
    """docs/EBPF.md "Running it": refusals at start (exit status and message)."""
    sw = os.path.join(bindir, "ina-switch")
    cases = [
        (["--dataplane", "ebpf", "--iface", "lo", "--shm"], 2, "--shm"),
        (["--dataplane", "ebpf", "--iface", "lo", "--multicast"], 1,
         "the kernel drops multicast from a loopback address on input"),
        (["--dataplane", "ebpf", "--iface", "lo", "--threads", "2"], 2, "--threads"),
        (["--dataplane", "ebpf", "--iface", "lo", "--parent", "127.0.0.1:9"], 2, "--parent"),
        (["--dataplane", "ebpf", "--iface", "lo", "--fault-rx", "drop=0.1"], 2, "--fault-rx"),
        (["--dataplane", "ebpf", "--iface", "lo", "--fault-tx", "drop=0.1"], 2, "--fault-tx"),
        (["--dataplane", "ebpf"], 2, "--iface"),
        (["--iface", "lo"], 2, "--iface"),
    ]
    for args, rc_want, msg in cases:
        waiting("ina-switch %s to exit" % " ".join(args))
        try:
            p = subprocess.run([sw, "--listen", "127.0.0.1:0"] + args, stdin=subprocess.DEVNULL,
                               capture_output=True, timeout=min(5, max(0.5, remaining())))
            rc, err = p.returncode, p.stderr.decode("utf-8", "replace")
        except subprocess.TimeoutExpired:
            rc, err = None, "still running after 5 s"
        C.check(rc == rc_want and msg in err,
                "ina-switch %s refused at start: exit status %d, message naming '%s' "
                "(docs/EBPF.md)" % (" ".join(args), rc_want, msg),
                "exit %s: %s" % (rc, err.strip()[:200]))


def idle_phase(bindir, tmp, switches):
    """§16: the idle timer (§5.4) is refreshed by the program's last-DATA time, read once a
    tick. A job whose DATA only the program sees must stay alive while it sends, and be
    aborted with TIMEOUT once it stops."""
    sw = Switch(bindir, tmp, "ebpf-idle", ["--dataplane", "ebpf", "--iface", "lo",
                                           "--idle-timeout", "1"])
    switches.append(sw)
    if not sw.start():
        C.check(False, "second eBPF switch (--idle-timeout 1) starts", sw.stderr_text()[:200])
        return
    job = Job(sw, "cr-ebpf-idle", 1, 4, 2).join()
    rk = job.ranks[0]
    t_end = time.monotonic() + 2.6
    g = 0
    nres = 0
    aborted = None
    while time.monotonic() < t_end:
        waiting("RESULTs of the idle job")
        rk.send(header(K_DATA, job=rk.job, rank=0, session=rk.session, token=rk.token,
                       slot=g % 2, set_bit=(g // 2) & 1, seq=g // 2, count=1, op=0, tag=7)
                + payload_bytes([g]))
        t_last = time.monotonic()
        g += 1
        for b in drain([rk], 0.25)[0]:
            if b[3] == K_RESULT:
                nres += 1
            elif b[3] == K_ABORT:
                aborted = b
    C.check(aborted is None and nres == g,
            "ebpf-idle: a job sending DATA every 250 ms for 2.6 s at --idle-timeout 1 is kept "
            "alive (%d/%d RESULTs, no ABORT; §16: the program's last-DATA time)" % (nres, g),
            "aborted: %s" % (aborted and aborted.hex()))
    _, b = wait_for([rk], lambda r, b: len(b) >= 48 and b[3] == K_ABORT, t=4.0,
                    what="ABORT TIMEOUT of the idle job")
    dt = time.monotonic() - t_last
    reason = struct.unpack_from(">i", b, 40)[0] if b else None
    C.check(b is not None and reason == ERR_TIMEOUT and 0.95 <= dt <= 3.5,
            "ebpf-idle: once silent, the job is aborted with ABORT TIMEOUT (-1001) %.2f s after "
            "its last DATA (§5.4, --idle-timeout 1)" % dt, "reason %s" % reason)
    job.close()
    sw.stop()


# ---------------------------------------------------------------------------------------
# Skip detection
# ---------------------------------------------------------------------------------------
def kernel_loads_bpf():
    """Try BPF_PROG_LOAD of a 2-instruction SCHED_CLS program ("r0 = 0; exit")."""
    nr = {"x86_64": 321, "aarch64": 280, "riscv64": 280, "ppc64le": 361, "s390x": 351}.get(
        platform.machine())
    if nr is None:
        return None
    libc = ctypes.CDLL(None, use_errno=True)
    insns = (ctypes.c_uint64 * 2)(0x00000000000000b7, 0x0000000000000095)
    lic = ctypes.create_string_buffer(b"GPL")
    attr = (ctypes.c_uint8 * 128)()
    struct.pack_into("=IIQQ", attr, 0, 3, 2, ctypes.addressof(insns), ctypes.addressof(lic))
    fd = libc.syscall(ctypes.c_long(nr), ctypes.c_int(5), ctypes.byref(attr),
                      ctypes.c_uint(128))
    if fd >= 0:
        os.close(fd)
        return True
    return False


def classify_start_failure(sw):
    txt = sw.stderr_text()
    rc = sw.proc.returncode if sw.proc else None
    lines = [x.strip() for x in txt.splitlines() if x.strip()]

    def line_with(*words):
        for x in lines:
            if any(w in x.lower() for w in words):
                return x
        return None
    x = line_with("built without the ebpf dataplane")
    if x:
        return "SKIP: %s" % x
    x = line_with("not permitted")
    if x:
        return "SKIP: the switch may not load BPF programs here: %s" % x
    x = line_with("bpf", "verifier")
    if rc == 1 and x and kernel_loads_bpf() is not True:
        return "SKIP: this kernel does not load BPF programs: %s" % x
    return None


# ---------------------------------------------------------------------------------------
# Namespace side
# ---------------------------------------------------------------------------------------
def inner_main(args):
    global DEADLINE
    DEADLINE = time.monotonic() + INNER_DEADLINE_S
    tmp = args.tmpdir
    switches = []
    try:
        # §16 / the brief: this side runs in its own network namespace: never the host's lo.
        my_ns = os.stat("/proc/self/ns/net").st_ino
        if str(my_ns) == args.host_netns:
            print("FAIL - not in a private network namespace")
            return 1
        subprocess.run(["ip", "link", "set", "lo", "up"], check=True)

        ebpf = Switch(args.bindir, tmp, "ebpf",
                      ["--dataplane", "ebpf", "--iface", "lo", "--max-elems", "4096"])
        switches.append(ebpf)
        if not ebpf.start():
            why = classify_start_failure(ebpf)
            if why:
                print(why, flush=True)
                return SKIP
            print("FAIL - ina-switch --dataplane ebpf --iface lo did not start (exit %s): %s" % (
                ebpf.proc.returncode, ebpf.stderr_text().strip()[:400]), flush=True)
            return 1
        user = Switch(args.bindir, tmp, "userspace", ["--threads", "1", "--max-elems", "4096"])
        switches.append(user)
        if not user.start():
            print("FAIL - the userspace switch did not start: %s" % user.stderr_text()[:300])
            return 1
        C.check(True, "running in private network namespace %s (netns inode %d, host %s)" % (
            args.netns_name, my_ns, args.host_netns))
        txt = ebpf.stderr_text()
        C.check("event=dataplane" in txt and "kind=ebpf" in txt and "iface=lo" in txt
                and "max_elems=2048" in txt,
                "ebpf switch logs dataplane kind=ebpf iface=lo max_elems=2048 (--max-elems "
                "4096 capped, docs/EBPF.md)")
        # one CPU for this process from here on: contributions reach the switches in the
        # order they are sent (§8.7's rounding depends on it)
        try:
            os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})
        except (AttributeError, OSError):
            pass

        # the tag function itself (§7.2, §11's worked example)
        sd = op_seed(1, 6, DT_FLOAT32, RED_SUM)
        C.check([packet_tag(sd, p) for p in range(4)] == [0xCB, 0x49, 0x68, 0x28],
                "tag function reproduces §11's tags 0xCB 0x49 0x68 0x28")

        rec_e, rec_u = {}, {}
        suite(ebpf, True, tmp, rec_e)
        suite(user, False, tmp, rec_u)

        # ---- cross-dataplane comparison (§16: same UDP payload byte for byte) ----
        for key in ("A", "B"):
            a, b = rec_e[key], rec_u[key]
            diff = [(x[0], x[1].hex()[:64], y[1].hex()[:64]) for x, y in zip(a, b)
                    if x != y]
            C.check(len(a) == len(b) and len(a) > 0 and not diff,
                    "job %s: all %d RESULT payloads from the eBPF dataplane are byte-identical "
                    "to the userspace dataplane's (job id, session, token masked; §16)" % (
                        key, len(a)), "len %d vs %d, first diffs %s" % (len(a), len(b),
                                                                         diff[:2]))
        for key in ("A_counters", "dup_counters", "hostile_counters", "B_counters",
                    "mismatch_counters", "evict_counters"):
            C.check(rec_e[key] == rec_u[key],
                    "counter deltas of phase %s equal on both dataplanes: %s (§16)" % (
                        key[:-9], rec_e[key]), "ebpf %s userspace %s" % (rec_e[key],
                                                                         rec_u[key]))
        C.check(rec_e["migrate"] == rec_u["migrate"] and len(rec_e["migrate"]) == 2,
                "MIGRATE datagrams byte-identical on both dataplanes (job, session, token and the "
                "fallback port masked)")

        # ---- refusals at start, then the exit report's eBPF counters --------------------
        start_refusals(args.bindir, tmp)
        ebpf.stop()
        rep = ebpf.exit_report or {}
        pu, fb, tb, dp = (rep.get(x, -1) for x in ("ebpf_passed_up", "ebpf_fed_back",
                                                    "ebpf_too_big", "drop_DATAPLANE"))
        C.check(fb > 0 and tb == dp and pu == fb + tb + 1,
                "exit report: ebpf_passed_up=%d = ebpf_fed_back=%d + ebpf_too_big=%d + the one "
                "evicted DATA; drop_DATAPLANE=%d = ebpf_too_big (docs/EBPF.md Counters)"
                % (pu, fb, tb, dp))
        # after the switch exits, nothing of it stays on this namespace's lo
        if shutil.which("tc"):
            out = subprocess.run(["tc", "filter", "show", "dev", "lo", "ingress"],
                                 capture_output=True, text=True)
            C.check(out.returncode != 0 or "bpf" not in out.stdout,
                    "no TC filter left on lo after the eBPF switch exited", out.stdout[:200])
        idle_phase(args.bindir, tmp, switches)
        mtu_phase(args.bindir, tmp, switches)
    except Deadline as e:
        print("FAIL - deadline passed while waiting for: %s" % e, flush=True)
        return 1
    except Exception as e:   # noqa: BLE001 - every failure is a reported failure
        import traceback
        traceback.print_exc()
        print("FAIL - %s: %s (while waiting for: %s)" % (type(e).__name__, e, WAITING_FOR),
              flush=True)
        return 1
    finally:
        for sw in switches:
            try:
                sw.stop()
            except Exception:   # noqa: BLE001
                if sw.proc and sw.proc.poll() is None:
                    sw.proc.kill()
        if VERBOSE:
            for sw in switches:
                vlog("---- %s stderr (tail)" % sw.name)
                for line in sw.stderr_text().splitlines()[-8:]:
                    vlog(line)
    print("# %d ok, %d failed" % (C.n_ok, C.n_fail), flush=True)
    return 0 if C.n_fail == 0 else 1


# ---------------------------------------------------------------------------------------
# Host side: create the namespace, re-exec inside it, always delete it
# ---------------------------------------------------------------------------------------
def outer_main(args):
    if os.geteuid() != 0:
        print("SKIP: the eBPF dataplane needs root (and a private network namespace); "
              "running as uid %d" % os.geteuid())
        return SKIP
    swbin = os.path.join(args.bindir, "ina-switch")
    if not os.access(swbin, os.X_OK):
        print("FAIL - no ina-switch in %s" % args.bindir)
        return 1
    ipbin = shutil.which("ip")
    if not ipbin:
        print("SKIP: no 'ip' command to create a network namespace")
        return SKIP
    name = "inaebpf%d" % os.getpid()
    tmp = tempfile.mkdtemp(prefix="peer_ebpf.")
    created = False
    child = None

    def on_signal(signum, frame):
        raise KeyboardInterrupt()
    signal.signal(signal.SIGTERM, on_signal)
    try:
        p = subprocess.run([ipbin, "netns", "add", name], capture_output=True, text=True)
        if p.returncode != 0:
            print("SKIP: cannot create a network namespace: %s" % p.stderr.strip())
            return SKIP
        created = True
        host_ns = os.stat("/proc/self/ns/net").st_ino
        cmd = [ipbin, "netns", "exec", name, sys.executable, os.path.abspath(__file__),
               "--in-netns", "--netns-name", name, "--host-netns", str(host_ns),
               "--tmpdir", tmp, "--bindir", os.path.abspath(args.bindir)]
        if args.verbose:
            cmd.append("-v")
        child = subprocess.Popen(cmd, start_new_session=True)
        try:
            return child.wait(timeout=OUTER_DEADLINE_S)
        except subprocess.TimeoutExpired:
            print("FAIL - global deadline (%ds) passed waiting for the namespace side to "
                  "finish" % OUTER_DEADLINE_S, flush=True)
            return 1
    except KeyboardInterrupt:
        print("FAIL - interrupted", flush=True)
        return 1
    finally:
        if child is not None and child.poll() is None:
            try:
                os.killpg(child.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            child.wait()
        if created:
            # kill anything still left in the namespace (our switches), then delete it
            pids = subprocess.run([ipbin, "netns", "pids", name], capture_output=True,
                                  text=True).stdout.split()
            for pid in pids:
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except (ProcessLookupError, ValueError):
                    pass
            subprocess.run([ipbin, "netns", "del", name], capture_output=True)
        shutil.rmtree(tmp, ignore_errors=True)


def main():
    global VERBOSE
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bindir", required=True)
    ap.add_argument("--libdir")          # accepted for the common CLI; libina is not used
    ap.add_argument("--pythondir")
    ap.add_argument("-v", "--verbose", action="store_true")
    ap.add_argument("--in-netns", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--netns-name", help=argparse.SUPPRESS)
    ap.add_argument("--host-netns", help=argparse.SUPPRESS)
    ap.add_argument("--tmpdir", help=argparse.SUPPRESS)
    args = ap.parse_args()
    VERBOSE = args.verbose
    if args.in_netns:
        sys.exit(inner_main(args))
    sys.exit(outer_main(args))


if __name__ == "__main__":
    main()

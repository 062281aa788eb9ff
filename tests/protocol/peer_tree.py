#!/usr/bin/env python3
"""Clean-room peer for PROTOCOL.md §12 (shards and trees), written from the text alone.

It plays, against the real binaries:
  A. a CHILD switch (§12.3-§12.6) under a real parent ina-switch, with clean-room workers
     and libina ranks below it and beside it (direct members of the parent);
  B. a PARENT switch (§12.3 "At the parent", §12.4 "Parent") above a real child
     `ina-switch --parent`, with clean-room workers and a libina rank below the child;
  C. a worker that cuts one all-reduce over 2 real ina-switch shards (§12.1), beside a libina
     rank that lists the same 2 switches.
Standard library only.  Usage:
  python3 peer_tree.py --bindir DIR [--libdir DIR] [--pythondir DIR] [-v]
"""
import argparse
import collections
import json
import math
import os
import random
import select
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

T0 = time.monotonic()
GLOBAL_LIMIT = 60.0          # seconds: never hang
VERBOSE = False
WAITING = ["startup"]        # what we are waiting for (printed on the global deadline)
RESULTS = []                 # (ok, name)


def remaining():
    return GLOBAL_LIMIT - (time.monotonic() - T0)


def vlog(*a):
    if VERBOSE:
        print("#", "%7.3f" % (time.monotonic() - T0), *a, flush=True)


def check(name, cond, detail=""):
    RESULTS.append((bool(cond), name))
    if cond:
        print("ok - %s" % name, flush=True)
    else:
        print("FAIL - %s%s" % (name, (": " + str(detail)) if detail != "" else ""), flush=True)
    return bool(cond)


class Deadline(Exception):
    pass


# ---------------------------------------------------------------------------------------
# Wire format (§3 header, §4 bodies)
# ---------------------------------------------------------------------------------------
MAGIC, VERSION = 0x494E, 1                                   # §3 offsets 0, 2
DATA, RESULT = 1, 2                                          # §4 kinds
JOIN, JOIN_ACK, JOIN_NAK, LEAVE, ABORT, REDIRECT = 16, 17, 18, 19, 20, 21
WITHDRAW, JOIN_WAIT, TREE_JOIN = 26, 27, 28
RANK_SWITCH = 0xFFFF                                         # §3 rank of switch packets
FLAG_ABORT = 0x0001                                          # LEAVE flags bit 0
FLAG_CAP_BFP, FLAG_CAP_F32, FLAG_CAP_SHM = 0x0002, 0x0004, 0x0008
LEVELS_MASK = 0x0030                                         # §12 levels above, bits 4..5
FLAG_LANES_AUTO = 0x0800
ERR_TIMEOUT, ERR_ABORTED, ERR_REJECTED, ERR_NOSPACE, ERR_MISMATCH = -1001, -1002, -1003, -1004, -1005
ERR_PROTO = -1008
EXP_ZERO, EXP_NONFINITE = -32768, 32767                      # §8.1
SW_VERSION = 100                                             # §4.1 sw_version (informational)

# §3: 32-byte header, big-endian, fixed offsets:
# magic u16, version u8, kind u8, job u16, rank u16, session u32, token u32,
# slot u32 (bit 31 = set), seq u32, count u16, exp i16, flags u16, op u8, tag u8
HDR = struct.Struct(">HBBHHIIIIHhHBB")
# §4.1 JOIN body, 64 bytes: nonce u64, world u16, elems u16, window u32, sw_version u32,
# mcast_group u32, mcast_port u16, lane u8, nlanes u8, fallback_port u16, wait u16, name[32]
JBODY = struct.Struct(">QHHIIIHBBHH32s")
# §4.2 NAK / ABORT / REDIRECT body, 16 bytes: nonce u64, reason i32, port/world u16, nlanes u8, rsvd
NBODY = struct.Struct(">QiHBB")
# §4.5 JOIN_WAIT body, 48 bytes: nonce u64, world u16, joined u16, state u8, 3 reserved, bitmap[32]
WBODY = struct.Struct(">QHHB3x32s")


def hdr(kind, job=0, rank=0, session=0, token=0, slot=0, seq=0, count=0, exp=0, flags=0, op=0, tag=0):
    return HDR.pack(MAGIC, VERSION, kind, job, rank, session & 0xFFFFFFFF, token & 0xFFFFFFFF,
                    slot & 0xFFFFFFFF, seq & 0xFFFFFFFF, count, exp, flags, op, tag)


def parse(d):
    if len(d) < 32:
        return None
    f = HDR.unpack_from(d)
    if f[0] != MAGIC or f[1] != VERSION:
        return None
    h = dict(kind=f[2], job=f[3], rank=f[4], session=f[5], token=f[6], slot=f[7] & 0x7FFFFFFF,
             set=f[7] >> 31, rawslot=f[7], seq=f[8], count=f[9], exp=f[10], flags=f[11], op=f[12],
             tag=f[13], body=d[32:], raw=d)
    if h["kind"] in (DATA, RESULT):
        if len(d) != 32 + 4 * h["count"]:               # §3 / §6.1 check 4: exact length
            return None
        h["payload"] = list(struct.unpack(">%di" % h["count"], d[32:]))
    return h


def jbody(nonce, world, elems, window, lane=0, nlanes=1, fallback=0, wait=0, name=b"", sw=SW_VERSION):
    return JBODY.pack(nonce, world, elems, window, sw, 0, 0, lane, nlanes, fallback, wait,
                      name.ljust(32, b"\0")[:32])


def parse_jbody(b):
    if len(b) < 64:
        return None
    f = JBODY.unpack_from(b)
    name = f[11]
    if b"\0" not in name:                                   # §4.1: a NUL must occur
        return None
    return dict(nonce=f[0], world=f[1], elems=f[2], window=f[3], sw=f[4], mgroup=f[5], mport=f[6],
                lane=f[7], nlanes=f[8] or 1, fallback=f[9], wait=f[10], name=name.split(b"\0")[0])


def nbody(reason, nonce=0, port=0, nl=0):
    return NBODY.pack(nonce, reason, port, nl, 0)


def nak_reason(b):
    if len(b) < 16:
        return ERR_ABORTED                                   # §4: ABORT shorter: ABORTED
    return NBODY.unpack_from(b)[1]


def bitmap(ranks):
    # §12 "set": rank r is bit r & 7 of byte r >> 3
    b = bytearray(32)
    for r in ranks:
        b[r >> 3] |= 1 << (r & 7)
    return bytes(b)


def bitmap_ranks(b):
    return [r for r in range(256) if b[r >> 3] & (1 << (r & 7))]


def wrap32(v):
    return ((v + 0x80000000) & 0xFFFFFFFF) - 0x80000000


def payload(vals):
    return struct.pack(">%di" % len(vals), *vals)


M64 = (1 << 64) - 1


def op_tag(n, count, dtype, reduction, p, s=0):
    # §7.2 tag of packet p of op number n
    x = ((n * 0x9E3779B97F4A7C15) ^ (count * 0xC2B2AE3D27D4EB4F) ^ dtype ^ (reduction << 8) ^ (s << 16)) & M64
    x ^= x >> 31
    x = (x * 0xBF58476D1CE4E5B9) & M64
    x ^= x >> 29
    y = ((x + p) * 0xD6E8FEB86659FD93) & M64
    return ((y ^ (y >> 32)) >> 24) & 0xFF


def log2ceil(n):
    return (n - 1).bit_length()                              # L = ceil(log2 N), 0 for N = 1


def block_exp(vals):
    # §8.1 block exponent: e with 2^(e-1) <= max|x| < 2^e; ZERO when all zero
    amax = max((abs(v) for v in vals), default=0.0)
    if amax == 0.0:
        return EXP_ZERO
    return math.frexp(amax)[1]


def f32(v):
    return struct.unpack("<f", struct.pack("<f", v))[0]


def quant(x, E, N):
    # §8.1 encode with agreed E
    if E == EXP_ZERO:
        return 0
    L = log2ceil(N)
    Q = (1 << (31 - L)) - 1
    q = round(math.ldexp(x, 31 - L - E))                     # exact product, round half even
    return max(-Q, min(Q, q))


def dequant(s, E, N):
    # §8.1 decode: float(Σq · 2^(E+L−31)), one rounding to float
    if E == EXP_ZERO:
        return 0.0
    return f32(math.ldexp(s, E + log2ceil(N) - 31))


# Shared deterministic data generator: the same source runs in the libina ranks.
GEN_SRC = r'''
def gen_data(dtype, count, rank, salt):
    import struct as _s, math as _m
    x = (rank * 1000003 + salt * 7919 + count * 31 + 17) & 0x7FFFFFFF
    out = []
    for i in range(count):
        x = (x * 1103515245 + 12345) & 0x7FFFFFFF
        if dtype == 0:
            v = (x % 2000001) - 1000000
            if i % 37 == 5:
                v = ((x * 2) & 0xFFFFFFFF) - 0x80000000      # large: exercises the wrap
            out.append(v)
        else:
            m = ((x % 2000001) - 1000000) / 1000000.0
            e = (x >> 23) % 11 - 5
            out.append(_s.unpack("<f", _s.pack("<f", _m.ldexp(m, e)))[0])
    return out
'''
exec(GEN_SRC)


def expected(dtype, count, salt, ranks, k):
    """Exact sum (int32 wrap or exact real) and, for float32, the §8.6 bound per element."""
    datas = [gen_data(dtype, count, r, salt) for r in ranks]
    N = len(ranks)
    if dtype == 0:
        return [wrap32(sum(d[i] for d in datas)) for i in range(count)], None
    exact = [math.fsum(d[i] for d in datas) for i in range(count)]
    L = log2ceil(N)
    bounds = []
    for b in range(0, count, k):
        amax = max(abs(d[i]) for d in datas for i in range(b, min(count, b + k)))
        for i in range(b, min(count, b + k)):
            first = 0.0 if amax == 0 else N * math.ldexp(1.0, math.frexp(amax)[1] + L - 31)
            bounds.append(first + 2.0 ** -24 * abs(exact[i]) + 2.0 ** -149)   # §8.6 / §12.7
    return exact, bounds


def verify(result, dtype, count, salt, ranks, k):
    exp_, bounds = expected(dtype, count, salt, ranks, k)
    if result is None or len(result) != count:
        return False, "missing/short result"
    if dtype == 0:
        bad = [i for i in range(count) if result[i] != exp_[i]]
        return (not bad), ("first bad index %d: %r != %r" % (bad[0], result[bad[0]], exp_[bad[0]]) if bad else "")
    bad = [i for i in range(count) if abs(result[i] - exp_[i]) > bounds[i]]
    return (not bad), ("index %d: %r vs %r (bound %g)" % (bad[0], result[bad[0]], exp_[bad[0]], bounds[bad[0]]) if bad else "")


def npackets(dtype, count, k, W):
    # §7.2: nblocks + lag; lag = min(W, nblocks) for a float SUM in two rounds (op 0)
    nb = -(-count // k)
    return nb + (min(W, nb) if dtype != 0 else 0)


# ---------------------------------------------------------------------------------------
# Clean-room worker (§7)
# ---------------------------------------------------------------------------------------
class Aborted(Exception):
    def __init__(self, reason):
        Exception.__init__(self, "ABORT reason %d" % reason)
        self.reason = reason


class Refused(Exception):
    def __init__(self, reason):
        Exception.__init__(self, "JOIN_NAK reason %d" % reason)
        self.reason = reason


class Worker:
    def __init__(self, addr, rank, world, name, elems=64, window=8, lane=0, nlanes=1, label=""):
        self.addr, self.rank, self.world, self.name = addr, rank, world, name.encode()
        self.elems, self.window, self.lane, self.nlanes = elems, window, lane, nlanes
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.connect(addr)                              # §2: one connected socket
        self.nonce = random.getrandbits(64) | 1
        self.g = 0                                           # §7.2 stream index
        self.opnum = 0
        self.retransmits = 0
        self.label = label or "rank%d" % rank
        self.last_wait = None
        self.ack_flags = None
        self.joined = False

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass

    def _recv(self, tmo):
        tmo = min(max(tmo, 0.0), remaining())
        if remaining() <= 0:
            raise Deadline("%s waiting for a datagram" % self.label)
        self.sock.settimeout(max(tmo, 0.001))
        try:
            return self.sock.recv(70000)
        except socket.timeout:
            return None
        except ConnectionRefusedError:
            return None

    def join(self, timeout=12.0):
        body = jbody(self.nonce, self.world, self.elems, self.window, self.lane, self.nlanes, 0, 0, self.name)
        end = time.monotonic() + timeout
        backoff, nxt = 0.1, 0.0
        while True:
            now = time.monotonic()
            if now >= end or remaining() <= 0:
                raise Deadline("%s: JOIN of %s not answered" % (self.label, self.name))
            if now >= nxt:
                left_ms = max(1, int((end - now) * 1000))       # §7.1: seq = time left, ms
                self.sock.send(hdr(JOIN, rank=self.rank, seq=left_ms) + body)
                nxt = now + backoff
                backoff = min(1.0, backoff * 2)                 # §7.1 schedule 100, 200, ... 1000
            d = self._recv(min(nxt, end) - time.monotonic())
            h = parse(d) if d else None
            if not h:
                continue
            if h["kind"] == JOIN_WAIT and len(h["body"]) >= 48:
                w = WBODY.unpack_from(h["body"])
                if w[0] == self.nonce:
                    self.last_wait = dict(world=w[1], joined=w[2], state=w[3], ranks=bitmap_ranks(w[4]))
            elif h["kind"] == JOIN_NAK and len(h["body"]) >= 16:
                if NBODY.unpack_from(h["body"])[0] == self.nonce:
                    raise Refused(nak_reason(h["body"]))
            elif h["kind"] == JOIN_ACK:
                b = parse_jbody(h["body"])
                if not b or b["nonce"] != self.nonce:
                    continue
                # §7.1 JOIN_ACK validation
                if b["world"] != self.world or b["lane"] != self.lane or b["nlanes"] != self.nlanes \
                        or not 1 <= b["elems"] <= 16368 or b["window"] < 1 or b["window"] & (b["window"] - 1):
                    raise Refused(ERR_PROTO)
                self.job, self.session, self.token = h["job"], h["session"], h["token"]
                self.k, self.W = b["elems"], b["window"]
                self.ack_flags = h["flags"]
                self.ack_body = b
                self.joined = True
                vlog("%s joined job=%d session=%08x k=%d W=%d flags=%#x" % (self.label, self.job, self.session,
                                                                          self.k, self.W, self.ack_flags))
                return

    def send_leave(self, abort=False, body=b""):
        for _ in range(2):                                   # §7.1: LEAVE sent twice
            self.sock.send(hdr(LEAVE, job=self.job, rank=self.rank, session=self.session, token=self.token,
                               flags=FLAG_ABORT if abort else 0) + body)

    def allreduce(self, dtype, data, timeout=10.0, count_override=None, tag_override=None):
        """One SUM all-reduce (§7.2-§7.5). dtype 0 = INT32, 1 = FLOAT32."""
        count = len(data)
        if count == 0:
            return []
        self.opnum += 1
        k, W, N = self.k, self.W, self.world
        nb = -(-count // k)
        lag = min(W, nb) if dtype != 0 else 0
        npk = nb + lag
        g0 = self.g
        blocks = [data[b * k:(b + 1) * k] for b in range(nb)]
        own_e = [block_exp(bl) for bl in blocks] if dtype != 0 else None
        E = [None] * nb
        out = [None] * count
        inflight = {}                                        # slot -> [p, seq, datagram, deadline, rto]
        nextp, done = 0, 0
        tcount = count if count_override is None else count_override
        last_progress = time.monotonic()
        while done < npk:
            # §7.3 send conditions, strictly in stream order
            while nextp < npk:
                g = g0 + nextp
                slot = g % W
                if slot in inflight:
                    break
                if dtype != 0 and nextp >= lag and E[nextp - lag] is None:
                    break
                p = nextp
                seq = (g // W) & 0xFFFFFFFF
                if p >= lag:
                    b = p - lag
                    vals = blocks[b] if dtype == 0 else [quant(x, E[b], N) for x in blocks[b]]
                else:
                    vals = []
                exp = 0 if dtype == 0 else (own_e[p] if p < nb else EXP_ZERO)
                tag = op_tag(self.opnum, tcount, dtype, 0, p) if tag_override is None else tag_override
                dg = hdr(DATA, job=self.job, rank=self.rank, session=self.session, token=self.token,
                         slot=slot | ((seq & 1) << 31), seq=seq, count=len(vals), exp=exp, op=0, tag=tag) + payload(vals)
                self.sock.send(dg)
                inflight[slot] = [p, seq, dg, time.monotonic() + 0.05, 0.05, tag, len(vals)]
                nextp += 1
            if done >= npk:
                break
            now = time.monotonic()
            if now - last_progress > timeout:
                raise Deadline("%s: op %d made no progress (%d/%d results)" % (self.label, self.opnum, done, npk))
            nd = min([e[3] for e in inflight.values()] + [now + 0.05])
            d = self._recv(nd - now)
            if d:
                h = parse(d)
                if h and h["kind"] == ABORT and h["session"] == self.session and h["token"] == self.token:
                    raise Aborted(nak_reason(h["body"]))      # §7.5 rule 2
                if h and h["kind"] == RESULT and h["job"] == self.job and h["session"] == self.session \
                        and h["token"] == self.token and h["slot"] < W and h["set"] == (h["seq"] & 1):
                    e = inflight.get(h["slot"])
                    if e and e[1] == h["seq"] and h["tag"] == e[5] and h["op"] == 0:   # §7.5 rules 5, 6
                        if h["count"] != e[6]:
                            raise Aborted(ERR_MISMATCH)        # §7.5 rule 7
                        p = e[0]
                        if dtype != 0 and p < nb:
                            E[p] = h["exp"]                    # agreed exponent of block p
                        if p >= lag:
                            b = p - lag
                            res = h["payload"] if dtype == 0 else [dequant(s, E[b], N) for s in h["payload"]]
                            out[b * k:b * k + len(res)] = res
                        del inflight[h["slot"]]
                        done += 1
                        last_progress = time.monotonic()
            now = time.monotonic()
            for e in inflight.values():                      # §7.6: resend the identical datagram
                if e[3] <= now:
                    self.sock.send(e[2])
                    self.retransmits += 1
                    e[4] = min(0.5, e[4] * 2)
                    e[3] = now + e[4]
        self.g = g0 + npk
        return out

    def wait_abort(self, timeout):
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            d = self._recv(end - time.monotonic())
            h = parse(d) if d else None
            if h and h["kind"] == ABORT and h["session"] == self.session and h["token"] == self.token:
                return nak_reason(h["body"])
        return None


def shard_order(addrs):
    """§12.1 shard order: by IPv4 address, then port, as unsigned numbers, ascending
    (stable: an address listed twice keeps the list's order)."""
    return sorted(addrs, key=lambda a: (struct.unpack("!I", socket.inet_aton(a[0]))[0], a[1]))


class ShardedWorker:
    """§12.1: P = M parts (L = 1), part p JOINs shard p (in shard order) with lane = p, nlanes = P."""

    def __init__(self, addrs, rank, world, name, elems=64, window=8):
        addrs = shard_order(addrs)
        P = len(addrs)
        self.parts = [Worker(a, rank, world, name, elems, window, lane=p, nlanes=P, label="rank%d.part%d" % (rank, p))
                      for p, a in enumerate(addrs)]

    def join(self):
        for w in self.parts:                                  # §12.1 order: part 0, 1, ...
            w.join()

    def allreduce(self, dtype, data):
        P = len(self.parts)
        k = self.parts[0].k                                   # blocks of part 0's k
        B = -(-len(data) // k)
        out = []
        for p, w in enumerate(self.parts):
            lo, hi = (B * p) // P, (B * (p + 1)) // P         # blocks ⌊B·p/P⌋ .. ⌊B·(p+1)/P⌋−1
            piece = data[lo * k:min(len(data), hi * k)]
            if piece:                                         # empty parts are not sent
                out.extend(w.allreduce(dtype, piece))
        return out

    def leave(self):
        for w in self.parts:
            w.send_leave()

    def close(self):
        for w in self.parts:
            w.close()


# ---------------------------------------------------------------------------------------
# A set of a slot (§6.2), shared by the clean-room child and parent
# ---------------------------------------------------------------------------------------
def fresh_sets(W, full):
    # §6.3: set 0 = round -2, set 1 = round -1, complete, count 0
    sets = []
    for i in range(W):
        for s in (0, 1):
            sets.append(dict(seq=(0xFFFFFFFE + s) & 0xFFFFFFFF, count=0, tag=0, op=0, nrecv=full, exp=0,
                             state="complete", bitmap=set(range(1 << 9)), values=[]))
    return sets


def combine(S, op, vals):
    if op == 0:
        S["values"] = [wrap32(a + b) for a, b in zip(S["values"], vals)]
    elif op == 1:
        S["values"] = [max(a, b) for a, b in zip(S["values"], vals)]
    else:
        S["values"] = [min(a, b) for a, b in zip(S["values"], vals)]


class Faults:
    """Deterministic drop/duplicate decisions: returns how many copies to send (0, 1 or 2)."""

    def __init__(self, seed, drop=0.0, dup=0.0):
        self.rnd = random.Random(seed)
        self.drop, self.dup = drop, dup
        self.dropped = self.duplicated = 0

    def copies(self):
        x = self.rnd.random()
        if x < self.drop:
            self.dropped += 1
            return 0
        if x < self.drop + self.dup:
            self.duplicated += 1
            return 2
        return 1


class Node(threading.Thread):
    """A UDP endpoint run by one thread: the clean-room child or parent."""

    def __init__(self, label):
        threading.Thread.__init__(self, daemon=True)
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.addr = self.sock.getsockname()
        self.stop = False
        self.lock = threading.RLock()
        self.cnt = collections.Counter()
        self.events = []
        self.label = label
        self.error = None

    def ev(self, *a):
        with self.lock:
            self.events.append(a)
        vlog(self.label, *a)

    def find(self, name):
        with self.lock:
            return [e for e in self.events if e[0] == name]

    def send(self, d, addr):
        try:
            self.sock.sendto(d, addr)
        except OSError:
            pass

    def run(self):
        try:
            while not self.stop and remaining() > 0:
                r, _, _ = select.select([self.sock], [], [], 0.01)
                if r:
                    try:
                        d, a = self.sock.recvfrom(70000)
                    except OSError:
                        continue
                    with self.lock:
                        self.handle(d, a)
                with self.lock:
                    self.tick()
        except Exception as e:                               # surfaced by the checks
            self.error = repr(e)
            import traceback
            traceback.print_exc()

    def tick(self):
        pass


# ---------------------------------------------------------------------------------------
# Clean-room CHILD switch (§12.3 "At the child", §12.4 "Child", §12.5, §12.6)
# ---------------------------------------------------------------------------------------
class CleanChild(Node):
    def __init__(self, parent_addr, max_elems=2048, pool=64):
        Node.__init__(self, "child")
        self.parent = parent_addr
        self.max_elems, self.pool = max_elems, pool
        self.jobs = {}                       # name -> job dict
        self.byid = {}
        self.next_id = 1
        self.up_faults = Faults(1)
        self.down_faults = Faults(2)

    # -- membership -------------------------------------------------------------------
    def tree_join(self, j):
        ranks = sorted(j["members"])
        rep = ranks[0]
        elems = min([m["elems"] for m in j["members"].values()] + [self.max_elems])
        win = min(m["window"] for m in j["members"].values())
        p2 = 1
        while p2 * 2 <= min(win, self.pool):
            p2 *= 2
        j["prop_elems"], j["prop_window"] = elems, p2
        wait = min(m["wait"] for m in j["members"].values())
        # §12.3 TREE_JOIN: header rank = rep, every other field 0; body = JOIN body + set
        d = hdr(TREE_JOIN, rank=rep) + jbody(j["tnonce"], j["world"], elems, p2, 0, 1, 0, wait, j["name"]) + bitmap(ranks)
        self.send(d, self.parent)
        self.cnt["tree_join_sent"] += 1

    def tick(self):
        now = time.monotonic()
        for j in list(self.jobs.values()):
            if j["state"] == "joining" and j["members"] and now >= j["tj_next"]:
                self.tree_join(j)                             # §12.3 1.: 100, 200, 400, 800, 1000 ms
                j["tj_next"] = now + j["tj_back"]
                j["tj_back"] = min(1.0, j["tj_back"] * 2)

    def member_ack(self, j, r):
        m = j["members"][r]
        lv = min(3, ((j["pflags"] & LEVELS_MASK) >> 4) + 1)   # §12.3: parent's levels + 1, at most 3
        flags = lv << 4                                       # no op 3, no op 4 (not implemented here)
        d = hdr(JOIN_ACK, job=j["id"], rank=RANK_SWITCH, session=j["session"], token=j["token"], flags=flags) + \
            jbody(m["nonce"], j["world"], j["k"], j["W"], 0, 1, 0, 0, j["name"])
        self.send(d, m["addr"])

    def free(self, j):
        self.jobs.pop(j["name"], None)
        self.byid.pop(j.get("id"), None)

    def abort_members(self, j, reason):
        for m in j["members"].values():
            self.send(hdr(ABORT, job=j["id"], rank=RANK_SWITCH, session=j["session"], token=j["token"]) +
                      nbody(reason), m["addr"])

    def abort_local(self, j, reason):
        # §12.6 abort at the child: ABORT members, LEAVE(abort) + NAK body (nonce 0, reason) twice
        self.ev("local_abort", reason)
        self.abort_members(j, reason)
        for _ in range(2):
            self.send(hdr(LEAVE, job=j["pjob"], rank=j["rep"], session=j["psession"], token=j["ptoken"],
                          flags=FLAG_ABORT) + nbody(reason), self.parent)
        self.free(j)

    # -- input --------------------------------------------------------------------------
    def handle(self, d, a):
        h = parse(d)
        if not h:
            self.cnt["bad"] += 1
            return
        if a == self.parent:
            return self.from_parent(h)
        k = h["kind"]
        if k == JOIN:
            return self.on_join(h, a)
        if k == DATA:
            return self.on_data(h, a)
        if k == LEAVE:
            return self.on_leave(h, a)
        self.cnt["KIND"] += 1

    def on_join(self, h, a):
        b = parse_jbody(h["body"])
        if not b or not b["name"] or h["rank"] >= b["world"]:
            self.cnt["JOIN"] += 1
            return
        name = b["name"]
        j = self.jobs.get(name)
        if j and j["state"] == "active":
            m = j["members"].get(h["rank"])
            if m and m["nonce"] == b["nonce"] and m["addr"] == a:
                self.member_ack(j, h["rank"])                  # §5.2 step 5: ACK again
            else:
                self.cnt["JOIN"] += 1
            return
        if not j:
            j = dict(name=name, world=b["world"], members={}, state="joining",
                     tnonce=random.getrandbits(64) | 1, tj_next=0.0, tj_back=0.1, redirects=0)
            self.jobs[name] = j
        old = j["members"].get(h["rank"])
        new = dict(nonce=b["nonce"], addr=a, elems=b["elems"], window=b["window"], wait=b["wait"], left=False)
        j["members"][h["rank"]] = new
        if old is None or any(old[x] != new[x] for x in ("nonce", "addr", "elems", "window")):
            j["tj_next"], j["tj_back"] = 0.0, 0.1             # §12.3 1.: a change is sent at once
            self.ev("member_joined", name, h["rank"])

    def from_parent(self, h):
        k = h["kind"]
        if k in (JOIN_ACK, JOIN_NAK, JOIN_WAIT, REDIRECT):
            nonce = struct.unpack_from(">Q", h["body"])[0] if len(h["body"]) >= 8 else None
            j = next((x for x in self.jobs.values() if x["state"] == "joining" and x["tnonce"] == nonce), None)
            if not j:
                self.cnt["UPSTREAM"] += 1
                return
            if k == JOIN_WAIT:
                w = WBODY.unpack_from(h["body"])
                self.ev("join_wait", j["name"], dict(world=w[1], joined=w[2], state=w[3], ranks=bitmap_ranks(w[4])))
                return
            if k == JOIN_NAK:
                reason = nak_reason(h["body"])
                self.ev("parent_nak", j["name"], reason)
                for m in j["members"].values():
                    self.send(hdr(JOIN_NAK, rank=RANK_SWITCH) + nbody(reason if reason < 0 else ERR_REJECTED, m["nonce"]),
                              m["addr"])
                self.free(j)
                return
            if k == REDIRECT:
                self.cnt["redirect"] += 1                     # not expected with --threads 1
                return
            b = parse_jbody(h["body"])
            ok = b and b["world"] == j["world"] and b["lane"] == 0 and b["nlanes"] == 1 and \
                1 <= b["elems"] <= j["prop_elems"] and 1 <= b["window"] <= j["prop_window"] and \
                not (b["window"] & (b["window"] - 1))
            self.ev("parent_ack", j["name"], dict(job=h["job"], session=h["session"], token=h["token"],
                                                  flags=h["flags"], elems=b and b["elems"],
                                                  window=b and b["window"], ok=ok))
            if not ok:
                return
            j.update(state="active", pjob=h["job"], psession=h["session"], ptoken=h["token"], pflags=h["flags"],
                     k=b["elems"], W=b["window"], id=self.next_id, session=random.getrandbits(32) | 1,
                     token=random.getrandbits(32), rep=min(j["members"]))
            self.next_id += 1
            self.byid[j["id"]] = j
            j["sets"] = fresh_sets(j["W"], len(j["members"]))
            for r in j["members"]:
                self.member_ack(j, r)
            return
        j = next((x for x in self.jobs.values() if x["state"] == "active" and x["pjob"] == h["job"]
                  and x["psession"] == h["session"] and x["ptoken"] == h["token"]), None)
        if not j:
            self.cnt["UPSTREAM"] += 1
            return
        if k == ABORT:
            # §12.6: ABORT from the parent: pass the reason down, free, send nothing back
            reason = nak_reason(h["body"])
            self.ev("parent_abort", j["name"], reason, dict(job=h["job"], session=h["session"], token=h["token"]))
            self.abort_members(j, reason)
            self.free(j)
            return
        if k != RESULT:
            self.cnt["UPSTREAM"] += 1
            return
        # §12.4 RESULT from the parent
        if h["slot"] >= j["W"] or h["set"] != (h["seq"] & 1):
            self.cnt["UPSTREAM"] += 1
            return
        S = j["sets"][2 * h["slot"] + h["set"]]
        if S["state"] != "up" or S["seq"] != h["seq"] or S["count"] != h["count"] or S["tag"] != h["tag"] \
                or S["op"] != h["op"]:
            self.cnt["UPSTREAM"] += 1
            return
        S["values"], S["exp"], S["state"] = h["payload"], h["exp"], "complete"
        self.cnt["up_results"] += 1
        self.send_result(j, S, h, None)

    def send_result(self, j, S, h, only):
        d = hdr(RESULT, job=j["id"], rank=RANK_SWITCH, session=j["session"], token=j["token"],
                slot=h["slot"] | (h["set"] << 31), seq=S["seq"], count=S["count"], exp=S["exp"], op=S["op"],
                tag=S["tag"]) + payload(S["values"])
        for r in sorted(j["members"]):
            if only is not None and r != only:
                continue
            for _ in range(self.down_faults.copies()):        # test fault: drop/dup results downward
                self.send(d, j["members"][r]["addr"])

    def send_up(self, j, S, h):
        d = hdr(DATA, job=j["pjob"], rank=j["rep"], session=j["psession"], token=j["ptoken"],
                slot=h["slot"] | (h["set"] << 31), seq=S["seq"], count=S["count"], exp=S["exp"], flags=0,
                op=S["op"], tag=S["tag"]) + payload(S["values"])
        for _ in range(self.up_faults.copies()):              # test fault: drop/dup partial sums
            self.send(d, self.parent)

    def on_data(self, h, a):
        j = self.byid.get(h["job"])
        # §6.1 checks 6..15 at the child
        if not j or j["state"] != "active":
            self.cnt["NO_JOB"] += 1
            return
        if h["session"] != j["session"]:
            self.cnt["SESSION"] += 1
            return
        if h["token"] != j["token"]:
            self.cnt["TOKEN"] += 1
            return
        m = j["members"].get(h["rank"])
        if not m:
            self.cnt["RANK"] += 1
            return
        if m["addr"] != a:
            self.cnt["SOURCE"] += 1
            return
        if h["slot"] >= j["W"]:
            self.cnt["SLOT"] += 1
            return
        if h["count"] > j["k"]:
            self.cnt["COUNT"] += 1
            return
        if h["op"] not in (0, 1, 2):                           # §12.4: op 3 not offered; no op 4 here
            self.cnt["OP"] += 1
            return
        if h["set"] != (h["seq"] & 1):
            self.cnt["SET"] += 1
            return
        S = j["sets"][2 * h["slot"] + h["set"]]
        dd = wrap32(h["seq"] - S["seq"])
        size = len(j["members"])
        r = h["rank"]
        if dd == 2:
            if S["state"] != "complete":
                self.cnt["NOT_READY"] += 1
                return
            S.update(seq=h["seq"], count=h["count"], tag=h["tag"], op=h["op"], exp=h["exp"], nrecv=1,
                     bitmap={r}, values=list(h["payload"]), state="collecting")
        elif dd == 0:
            if r in S["bitmap"]:
                if S["state"] == "complete":
                    self.cnt["results_resent"] += 1
                    self.send_result(j, S, h, r)
                elif S["state"] == "up":
                    self.cnt["up_resent"] += 1                # §12.4: duplicate while up -> DATA again
                    self.send_up(j, S, h)
                else:
                    self.cnt["DUP_PENDING"] += 1
                return
            if h["count"] != S["count"] or h["tag"] != S["tag"] or h["op"] != S["op"]:
                self.cnt["MISMATCH"] += 1
                self.abort_local(j, ERR_MISMATCH)
                return
            S["bitmap"].add(r)
            S["nrecv"] += 1
            S["exp"] = max(S["exp"], h["exp"])
            combine(S, h["op"], h["payload"])
        elif dd < 0:
            self.cnt["STALE"] += 1
            return
        else:
            self.cnt["FUTURE"] += 1
            return
        if S["nrecv"] == size:
            S["state"] = "up"                                 # §12.4: nrecv reaches the set's size
            self.cnt["up_packets"] += 1
            self.send_up(j, S, h)

    def on_leave(self, h, a):
        j = self.byid.get(h["job"])
        if not j or j["state"] != "active":
            self.cnt["NO_JOB"] += 1
            return
        m = j["members"].get(h["rank"])
        if h["session"] != j["session"] or h["token"] != j["token"] or not m or m["addr"] != a:
            self.cnt["JOIN"] += 1
            return
        if h["flags"] & FLAG_ABORT:
            self.abort_local(j, ERR_ABORTED)
            return
        m["left"] = True
        if all(x["left"] for x in j["members"].values()):
            # §12.6 leave: every local member left -> LEAVE (flags 0) twice, free the job
            for _ in range(2):
                self.send(hdr(LEAVE, job=j["pjob"], rank=j["rep"], session=j["psession"], token=j["ptoken"]),
                          self.parent)
            self.ev("sent_leave", j["name"])
            self.free(j)

    # test helpers
    def membership(self, name):
        with self.lock:
            j = self.jobs.get(name.encode())
            return dict(j) if j else None


# ---------------------------------------------------------------------------------------
# Clean-room PARENT switch (§12.3 "At the parent", §12.4 "Parent", §6 with weights)
# ---------------------------------------------------------------------------------------
class CleanParent(Node):
    def __init__(self):
        Node.__init__(self, "parent")
        self.jobs = {}
        self.byid = {}
        self.next_id = 1
        self.child_result_faults = Faults(3)
        self.up_seen = {}          # (name, g) -> first partial sum payload from a tree member
        self.tree_joins = []       # raw TREE_JOIN datagrams and sources
        self.leaves = []

    def handle(self, d, a):
        h = parse(d)
        if not h:
            self.cnt["bad"] += 1
            return
        k = h["kind"]
        if k in (JOIN, TREE_JOIN):
            return self.on_join(h, a)
        if k == DATA:
            return self.on_data(h, a)
        if k == LEAVE:
            return self.on_leave(h, a)
        self.cnt["KIND"] += 1

    def nak(self, a, nonce, reason):
        self.send(hdr(JOIN_NAK, rank=RANK_SWITCH) + nbody(reason, nonce), a)

    def on_join(self, h, a):
        tree = h["kind"] == TREE_JOIN
        if tree:
            self.tree_joins.append((h, a))
            if len(h["raw"]) < 128:                           # §12.3: length accepted >= 128
                self.cnt["JOIN"] += 1
                return
        b = parse_jbody(h["body"])
        if not b:
            self.cnt["JOIN"] += 1
            return
        ranks = bitmap_ranks(h["body"][64:96]) if tree else [h["rank"]]
        if not ranks or max(ranks) >= b["world"] or ranks[0] != h["rank"] or not b["name"]:
            self.nak(a, b["nonce"], ERR_REJECTED)
            return
        name = b["name"]
        j = self.jobs.get(name)
        if j and j["state"] == "active":
            reg = j["owner"].get(h["rank"])
            if reg and reg["nonce"] == b["nonce"] and reg["addr"] == a and reg["weight"] == len(ranks):
                self.ack(j, reg)                              # §12.3 step 5: the JOIN_ACK again
            else:
                self.cnt["JOIN"] += 1
            return
        if not j:
            j = dict(name=name, world=b["world"], state="joining", regs=[], owner={})
            self.jobs[name] = j
        now = time.monotonic()
        # §5.2 step 6' (§12.3): a rank held by another member (not this nonce+address) from
        # another IP address, whose registration lives (deadline not passed, last JOIN at
        # most 3.5 s old), is not taken: JOIN_NAK REJECTED.
        for r in j["regs"]:
            same = r["nonce"] == b["nonce"] and r["addr"] == a
            alive = (not r["deadline"] or now <= r["deadline"]) and now - r["seen"] <= 3.5
            if not same and set(r["ranks"]) & set(ranks) and r["addr"][0] != a[0] and alive:
                self.cnt["joins_refused_taken"] += 1
                self.nak(a, b["nonce"], ERR_REJECTED)
                return
        # §12.3 step 7: (a) forget this nonce+address, (b) forget registrations holding the ranks, (c) record
        drop = [r for r in j["regs"] if (r["nonce"] == b["nonce"] and r["addr"] == a) or set(r["ranks"]) & set(ranks)]
        j["regs"] = [r for r in j["regs"] if r not in drop]
        reg = dict(rep=ranks[0], ranks=ranks, weight=len(ranks), nonce=b["nonce"], addr=a, elems=b["elems"],
                   window=b["window"], tree=tree, left=False, seen=now,
                   deadline=now + h["seq"] / 1000.0 if h["seq"] else 0)
        j["regs"].append(reg)
        j["owner"] = {r: g for g in j["regs"] for r in g["ranks"]}
        if len(j["owner"]) == j["world"]:
            return self.start_job(j)
        # §12.3 step 9 / §4.5: JOIN_WAIT
        w = WBODY.pack(b["nonce"], j["world"], len(j["owner"]), 0, bitmap(j["owner"].keys()))
        self.send(hdr(JOIN_WAIT, rank=RANK_SWITCH) + w, a)

    def start_job(self, j):
        j["k"] = min(r["elems"] for r in j["regs"])
        W = min(r["window"] for r in j["regs"])
        p2 = 1
        while p2 * 2 <= min(W, 64):
            p2 *= 2
        j.update(W=p2, state="active", id=self.next_id, session=random.getrandbits(32) | 1,
                 token=random.getrandbits(32))
        self.next_id += 1
        self.byid[j["id"]] = j
        j["sets"] = fresh_sets(p2, j["world"])
        j["left"] = 0
        for reg in j["regs"]:
            self.ack(j, reg)
        self.ev("started", j["name"])

    def ack(self, j, reg):
        # a tree job: no op 3 (bit 1 clear), levels above = 0 (a root)
        d = hdr(JOIN_ACK, job=j["id"], rank=RANK_SWITCH, session=j["session"], token=j["token"], flags=0) + \
            jbody(reg["nonce"], j["world"], j["k"], j["W"], 0, 1, 0, 0, j["name"])
        self.send(d, reg["addr"])

    def abort(self, j, reason):
        for reg in j["regs"]:
            self.send(hdr(ABORT, job=j["id"], rank=RANK_SWITCH, session=j["session"], token=j["token"]) +
                      nbody(reason), reg["addr"])
        self.jobs.pop(j["name"], None)
        self.byid.pop(j["id"], None)
        self.ev("aborted", j["name"], reason)

    def on_leave(self, h, a):
        self.leaves.append((h, a))
        j = self.byid.get(h["job"])
        if not j:
            self.cnt["NO_JOB"] += 1
            return
        reg = j["owner"].get(h["rank"])
        if h["session"] != j["session"] or h["token"] != j["token"] or not reg or reg["addr"] != a or reg["rep"] != h["rank"]:
            self.cnt["JOIN"] += 1
            return
        if h["flags"] & FLAG_ABORT:
            reason = ERR_ABORTED
            if len(h["body"]) >= 16 and nak_reason(h["body"]) in (ERR_MISMATCH, ERR_TIMEOUT, ERR_NOSPACE):
                reason = nak_reason(h["body"])               # §12.6 LEAVE with a body
            return self.abort(j, reason)
        if not reg["left"]:
            reg["left"] = True
            j["left"] += reg["weight"]                        # §12.6: a LEAVE counts as its weight
        if j["left"] == j["world"]:
            self.jobs.pop(j["name"], None)
            self.byid.pop(j["id"], None)
            self.ev("ended", j["name"])

    def send_result(self, j, S, h, only):
        d = hdr(RESULT, job=j["id"], rank=RANK_SWITCH, session=j["session"], token=j["token"],
                slot=h["slot"] | (h["set"] << 31), seq=S["seq"], count=S["count"], exp=S["exp"], op=S["op"],
                tag=S["tag"]) + payload(S["values"])
        for reg in sorted(j["regs"], key=lambda r: r["rep"]):
            if only is not None and reg["rep"] != only:
                continue
            n = 1
            if reg["tree"]:
                n = self.child_result_faults.copies()         # test fault: drop/dup results to the child
            for _ in range(n):
                self.send(d, reg["addr"])

    def on_data(self, h, a):
        j = self.byid.get(h["job"])
        if not j:
            self.cnt["NO_JOB"] += 1
            return
        if h["session"] != j["session"] or h["token"] != j["token"]:
            self.cnt["TOKEN"] += 1
            return
        reg = j["owner"].get(h["rank"])
        if not reg or reg["rep"] != h["rank"]:                # §12.4: weight > 0, else RANK
            self.cnt["RANK"] += 1
            return
        if reg["addr"] != a:
            self.cnt["SOURCE"] += 1
            return
        if h["slot"] >= j["W"] or h["count"] > j["k"] or h["op"] not in (0, 1, 2) or h["set"] != (h["seq"] & 1):
            self.cnt["CHECK"] += 1
            return
        if reg["tree"]:
            g = h["seq"] * j["W"] + h["slot"]
            self.up_seen.setdefault((j["name"], g), (h["payload"], h["flags"], h["exp"]))
        S = j["sets"][2 * h["slot"] + h["set"]]
        dd = wrap32(h["seq"] - S["seq"])
        r = h["rank"]
        if dd == 2:
            if S["state"] != "complete":
                self.cnt["NOT_READY"] += 1
                return
            S.update(seq=h["seq"], count=h["count"], tag=h["tag"], op=h["op"], exp=h["exp"], nrecv=reg["weight"],
                     bitmap={r}, values=list(h["payload"]), state="collecting")
        elif dd == 0:
            if r in S["bitmap"]:
                if S["state"] == "complete":
                    self.cnt["results_resent"] += 1
                    self.send_result(j, S, h, r)
                else:
                    self.cnt["DUP_PENDING"] += 1
                return
            if h["count"] != S["count"] or h["tag"] != S["tag"] or h["op"] != S["op"]:
                self.cnt["MISMATCH"] += 1
                return self.abort(j, ERR_MISMATCH)
            S["bitmap"].add(r)
            S["nrecv"] += reg["weight"]
            S["exp"] = max(S["exp"], h["exp"])
            combine(S, h["op"], h["payload"])
        elif dd < 0:
            self.cnt["STALE"] += 1
            return
        else:
            self.cnt["FUTURE"] += 1
            return
        if S["nrecv"] == j["world"]:
            S["state"] = "complete"
            self.cnt["completions"] += 1
            self.send_result(j, S, h, None)


# ---------------------------------------------------------------------------------------
# Processes: ina-switch and libina ranks
# ---------------------------------------------------------------------------------------
PROCS = []


class Switch:
    def __init__(self, bindir, tmp, label, extra=()):
        self.label = label
        self.pf = os.path.join(tmp, label + ".port")
        self.mf = os.path.join(tmp, label + ".mport")
        self.errf = open(os.path.join(tmp, label + ".err"), "w+")
        args = [os.path.join(bindir, "ina-switch"), "--listen", "127.0.0.1:0", "--port-file", self.pf,
                "--metrics", "127.0.0.1:0", "--metrics-port-file", self.mf, "--threads", "1",
                "--min-job-slots", "1", "--slots", "256"] + (["--log-level", "debug"] if VERBOSE else []) + list(extra)
        self.p = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=self.errf)
        PROCS.append(self.p)
        WAITING[0] = "%s to write its port files" % label
        while not (os.path.exists(self.pf) and os.path.getsize(self.pf) > 0 and os.path.exists(self.mf)
                   and os.path.getsize(self.mf) > 0):
            if self.p.poll() is not None:
                raise RuntimeError("%s exited: %s" % (label, self.tail()))
            if remaining() <= 0:
                raise Deadline(WAITING[0])
            time.sleep(0.02)
        time.sleep(0.02)
        self.port = int(open(self.pf).read().strip())
        self.mport = int(open(self.mf).read().strip())
        self.addr = ("127.0.0.1", self.port)

    def tail(self):
        try:
            self.errf.flush()
            self.errf.seek(0)
            return self.errf.read()[-3000:]
        except Exception:
            return ""

    def counters(self):
        with urllib.request.urlopen("http://127.0.0.1:%d/counters" % self.mport, timeout=3) as r:
            c = json.loads(r.read().decode())
        flat = dict(c["counters"])
        for kk, v in c["counters"]["drops"].items():
            flat["drop_" + kk] = v
        flat["jobs"] = c["jobs"]
        return flat

    def settled(self):
        time.sleep(0.25)                                     # the view lags by about 100 ms
        return self.counters()


class LibinaRank:
    SRC = r'''
import os, sys, json, time
import numpy as np
import ina
''' + GEN_SRC + r'''
plan = json.loads(os.environ["PEER_PLAN"])
res = {"results": [], "error": None}
ctx = None
try:
    ctx = ina.Context()
    try:
        res["info"] = {k: (v if isinstance(v, (int, float, str, bool)) or v is None else str(v))
                       for k, v in dict(ctx.info()).items()}
    except Exception as e:
        res["info"] = {"error": repr(e)}
    print("JOINED", flush=True)
    for op in plan["ops"]:
        if op.get("barrier"):
            t = time.time() + 20
            while not os.path.exists(op["barrier"]) and time.time() < t:
                time.sleep(0.005)
        vals = gen_data(op["dtype"], op["count"], plan["rank"], op["salt"])
        arr = np.array(vals, dtype=np.int32 if op["dtype"] == 0 else np.float32)
        ina.allreduce(arr, ctx=ctx)
        res["results"].append([int(v) for v in arr] if op["dtype"] == 0 else [float(v) for v in arr])
except ina.InaError as e:
    res["error"] = {"name": e.name, "code": e.code}
except Exception as e:
    res["error"] = {"name": "python", "repr": repr(e)}
finally:
    if ctx is not None:
        try:
            ctx.close()
        except Exception:
            pass
print("RESULT " + json.dumps(res), flush=True)
'''

    def __init__(self, args, switch_list, rank, world, job, ops, elems=64, window=8):
        env = dict(os.environ)
        env.update(PYTHONPATH=args.pythondir, INA_LIBRARY=os.path.join(args.libdir, "libina.so"),
                   INA_SWITCH=switch_list, INA_RANK=str(rank), INA_WORLD_SIZE=str(world), INA_JOB=job,
                   INA_ELEMS=str(elems), INA_WINDOW=str(window), INA_LANES="1", INA_SHM="0",
                   INA_FALLBACK="none", INA_QUIET="1", INA_TIMEOUT_MS="6000", INA_JOIN_TIMEOUT_MS="15000",
                   PEER_PLAN=json.dumps(dict(rank=rank, ops=ops)))
        for v in ("RANK", "WORLD_SIZE", "INA_FAULT"):
            env.pop(v, None)
        if os.environ.get("INA_PEER_PRELOAD"):
            env["LD_PRELOAD"] = os.environ["INA_PEER_PRELOAD"]
            env["ASAN_OPTIONS"] = "detect_leaks=0:abort_on_error=1"
        self.p = subprocess.Popen(["/usr/bin/python3", "-c", self.SRC], env=env, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True)
        PROCS.append(self.p)
        self.rank = rank
        self.out = None

    def result(self, timeout=15.0):
        if self.out is None:
            WAITING[0] = "libina rank %d to finish" % self.rank
            try:
                so, se = self.p.communicate(timeout=max(0.5, min(timeout, remaining())))
            except subprocess.TimeoutExpired:
                self.p.kill()
                so, se = self.p.communicate()
            self.out = {"error": {"name": "no output", "stderr": se[-1500:]}, "results": []}
            for line in so.splitlines():
                if line.startswith("RESULT "):
                    self.out = json.loads(line[7:])
            if self.out.get("error") and VERBOSE:
                vlog("libina rank", self.rank, "stderr:", se[-1500:])
        return self.out


def run_thread(fn):
    box = {}

    def body():
        try:
            box["value"] = fn()
        except BaseException as e:     # noqa
            box["error"] = e
            vlog("thread error:", repr(e))
    t = threading.Thread(target=body, daemon=True)
    t.start()
    box["thread"] = t
    return box


def join_box(box, timeout=15.0):
    box["thread"].join(max(0.1, min(timeout, remaining())))
    if box["thread"].is_alive():
        raise Deadline("a worker thread (%s)" % WAITING[0])
    if "error" in box:
        return None, box["error"]
    return box.get("value"), None


def wait_for(pred, what, timeout=8.0):
    WAITING[0] = what
    end = time.monotonic() + timeout
    while time.monotonic() < end and remaining() > 0:
        v = pred()
        if v:
            return v
        time.sleep(0.01)
    return pred()


# ---------------------------------------------------------------------------------------
# A: a clean-room CHILD under a real parent
# ---------------------------------------------------------------------------------------
OPS_A = [dict(dtype=0, count=1, salt=1), dict(dtype=0, count=64, salt=2), dict(dtype=0, count=200, salt=3),
         dict(dtype=0, count=1000, salt=4), dict(dtype=1, count=1, salt=5), dict(dtype=1, count=100, salt=6),
         dict(dtype=1, count=700, salt=7), dict(dtype=0, count=300, salt=8)]


def scenario_child(args, tmp):
    P = Switch(args.bindir, tmp, "parentA")
    C = CleanChild(P.addr)
    C.start()
    try:
        _scenario_child(args, tmp, P, C)
    finally:
        C.stop = True


def _scenario_child(args, tmp, P, C):
    N = 4
    barrier = os.path.join(tmp, "barrierA")
    final = dict(dtype=0, count=130, salt=9, barrier=barrier)
    ops = OPS_A + [final]
    c0 = P.counters()
    C.up_faults = Faults(11, drop=0.08, dup=0.10)             # §12.5: loss and duplicates upward
    C.down_faults = Faults(12, drop=0.05, dup=0.08)           # and downward

    hostile_ev = threading.Event()
    results = {}

    def clean(rank, addr, label):
        w = Worker(addr, rank, N, "ta", label=label)
        try:
            w.join()
            res = []
            for op in OPS_A:
                res.append(w.allreduce(op["dtype"], gen_data(op["dtype"], op["count"], rank, op["salt"])))
            results[rank] = w
            WAITING[0] = "the hostile step of scenario A"
            hostile_ev.wait(min(20, remaining()))
            res.append(w.allreduce(0, gen_data(0, final["count"], rank, final["salt"])))
            time.sleep(0.05)
            w.send_leave()
            return res
        finally:
            pass

    # the child's members first: rank 0 (clean-room) and rank 1 (libina), both at the child
    b0 = run_thread(lambda: clean(0, C.addr, "rank0@child"))
    L1 = LibinaRank(args, "127.0.0.1:%d" % C.addr[1], 1, N, "ta", ops)
    jw = wait_for(lambda: [e for e in C.find("join_wait") if e[2]["joined"] == 2], "JOIN_WAIT for {0,1}", 10)
    check("A tree: real parent answers a TREE_JOIN of set {0,1} with JOIN_WAIT (world 4, joined 2, ranks 0,1)",
          jw and jw[-1][2]["world"] == 4 and jw[-1][2]["ranks"] == [0, 1] and jw[-1][2]["state"] == 0, jw)
    check("A tree: the job has not started while direct members are missing (no JOIN_ACK yet)",
          not C.find("parent_ack"), C.find("parent_ack"))
    # §5.2 step 6', §12.3: a TREE_JOIN from another host claiming the joining job's ranks
    # {0, 1} (registered, alive, by the child) and rank 2 is refused; the child keeps them.
    far = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        far.bind(("127.0.0.2", 0))
        cT = P.settled()
        nonce = random.getrandbits(64) | 1
        far.sendto(hdr(TREE_JOIN, rank=0) + jbody(nonce, N, 64, 8, 0, 1, 0, 0, b"ta") + bitmap([0, 1, 2]),
                   P.addr)
        far.settimeout(1.0)
        try:
            h = parse(far.recv(2000))
            got = (h["kind"], NBODY.unpack_from(h["body"])[0] == nonce, nak_reason(h["body"])) if h else None
        except socket.timeout:
            got = None
        check("A takeover: TREE_JOIN from another IP claiming live ranks of a joining job -> JOIN_NAK REJECTED",
              got == (JOIN_NAK, True, ERR_REJECTED), got)
        n0 = len(C.find("join_wait"))
        jw = wait_for(lambda: C.find("join_wait")[n0:], "a JOIN_WAIT to the child after the takeover", 5)
        check("A takeover: the child still holds {0, 1} at the parent (its next JOIN_WAIT)",
              jw and jw[-1][2]["ranks"] == [0, 1], jw and jw[-1][2])
        cU = P.settled()
        check("A takeover: counted in joins_refused_taken (+1), no tree_joins from it",
              cU["joins_refused_taken"] - cT["joins_refused_taken"] == 1,
              cU["joins_refused_taken"] - cT["joins_refused_taken"])
    except OSError as e:
        check("A takeover: TREE_JOIN from 127.0.0.2 could be sent", False, e)
    finally:
        far.close()
    # the direct members of the parent: rank 2 (clean-room), rank 3 (libina)
    b2 = run_thread(lambda: clean(2, P.addr, "rank2@parent"))
    L3 = LibinaRank(args, "127.0.0.1:%d" % P.port, 3, N, "ta", ops)
    ack = wait_for(lambda: C.find("parent_ack"), "the parent's JOIN_ACK to the child", 12)
    pa = ack[0][2] if ack else {}
    check("A tree: parent's JOIN_ACK to the child is valid (elems/window within the proposal)", pa.get("ok"), pa)
    check("A tree: parent's JOIN_ACK to the child: levels bits 4..5 = 0, no op 3 (bit 1 clear)",
          ack and (pa["flags"] & LEVELS_MASK) == 0 and not (pa["flags"] & FLAG_CAP_BFP), pa)
    wait_for(lambda: 2 in results and 0 in results, "clean-room ranks 0 and 2 to finish the first ops", 20)
    w2 = results.get(2)
    check("A tree: JOIN_ACK to a direct worker of a tree job has op 3 off (flag bit 1 clear)",
          w2 is not None and not (w2.ack_flags & FLAG_CAP_BFP), w2 and hex(w2.ack_flags))
    c_mid = P.settled()
    check("A tree: parent counts tree_joins >= 1", c_mid["tree_joins"] - c0["tree_joins"] >= 1,
          c_mid["tree_joins"] - c0["tree_joins"])

    # ---- hostile step, job still running (ranks 0 and 2 wait; libina waits on the barrier file)
    mem = C.membership("ta")
    stranger = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    stranger.bind(("127.0.0.1", 0))
    if mem and mem.get("state") == "active":
        base = dict(job=mem["pjob"], session=mem["psession"], slot=0, seq=0x40000000, count=1, op=0, tag=0)
        cA = P.settled()
        # forged partial sum with a wrong token, from the child's own address: §6.1 check 9, TOKEN
        C.send(hdr(DATA, rank=mem["rep"], token=mem["ptoken"] ^ 0x5A5A, **base) + payload([12345]), P.addr)
        # the right token from another address:port: §6.1 check 11, SOURCE
        stranger.sendto(hdr(DATA, rank=mem["rep"], token=mem["ptoken"], **base) + payload([12345]), P.addr)
        # a rank the child stands for (weight 0) from the child's address: §12.4, RANK
        C.send(hdr(DATA, rank=1, token=mem["ptoken"], **base) + payload([12345]), P.addr)
        cB = P.settled()
        check("A hostile: forged partial sum with a wrong token dropped (drop TOKEN +1)",
              cB["drop_TOKEN"] - cA["drop_TOKEN"] == 1, cB["drop_TOKEN"] - cA["drop_TOKEN"])
        check("A hostile: partial sum from a wrong address:port dropped (drop SOURCE +1)",
              cB["drop_SOURCE"] - cA["drop_SOURCE"] == 1, cB["drop_SOURCE"] - cA["drop_SOURCE"])
        check("A hostile: DATA as a rank of weight 0 (stood for by the child) dropped (drop RANK +1)",
              cB["drop_RANK"] - cA["drop_RANK"] == 1,
              "RANK +%d FUTURE +%d" % (cB["drop_RANK"] - cA["drop_RANK"], cB["drop_FUTURE"] - cA["drop_FUTURE"]))
        # a TREE_JOIN for the running job's rep from another IP address: §5.2 step 5', REJECTED
        far = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            far.bind(("127.0.0.2", 0))
            nonce = random.getrandbits(64) | 1
            far.sendto(hdr(TREE_JOIN, rank=0) + jbody(nonce, N, 64, 8, 0, 1, 0, 0, b"ta") + bitmap([0, 1]), P.addr)
            far.settimeout(1.0)
            try:
                d = far.recv(2000)
                h = parse(d)
                got = (h["kind"], NBODY.unpack_from(h["body"])[0] == nonce, nak_reason(h["body"])) if h else None
            except socket.timeout:
                got = None
            check("A hostile: TREE_JOIN for an active job's ranks from another IP -> JOIN_NAK REJECTED, nonce echoed",
                  got == (JOIN_NAK, True, ERR_REJECTED), got)
        except OSError as e:
            check("A hostile: TREE_JOIN from 127.0.0.2 could be sent", False, e)
        finally:
            far.close()
    else:
        check("A hostile: child membership active for the hostile step", False, mem)
    stranger.close()
    # release everyone for the final op: the job must still serve correct sums
    open(barrier, "w").close()
    hostile_ev.set()

    r0, e0 = join_box(b0, 25)
    r2, e2 = join_box(b2, 25)
    o1, o3 = L1.result(25), L3.result(25)
    check("A tree: clean-room worker under the clean child finished", e0 is None, e0)
    check("A tree: clean-room worker direct at the real parent finished", e2 is None, e2)
    check("A tree: libina rank 1 (under the clean-room child) finished", not o1.get("error"), o1.get("error"))
    check("A tree: libina rank 3 (direct at the real parent) finished", not o3.get("error"), o3.get("error"))
    check("A tree: libina under the child reports levels = 2, direct libina levels = 1",
          o1.get("info", {}).get("levels") == 2 and o3.get("info", {}).get("levels") == 1,
          (o1.get("info", {}).get("levels"), o3.get("info", {}).get("levels")))
    k = 64
    for i, op in enumerate(ops):
        what = "%s SUM %d" % ("INT32" if op["dtype"] == 0 else "FLOAT32", op["count"])
        allres = [(r0 or [None] * 20)[i] if r0 else None, (o1["results"] + [None] * 20)[i],
                  (r2 or [None] * 20)[i] if r2 else None, (o3["results"] + [None] * 20)[i]]
        oks = [verify(x, op["dtype"], op["count"], op["salt"], range(N), k) for x in allres]
        same = all(x == allres[0] for x in allres)
        check("A data: %s through child+parent on all 4 ranks %s%s" %
              (what, "exact" if op["dtype"] == 0 else "within the §12.7 bound", ", identical on every rank"),
              all(o for o, _ in oks) and same, [m for o, m in oks if not o] or "ranks differ")
    # exactly once: contributions = 3 members per round, completions = rounds
    T = sum(npackets(op["dtype"], op["count"], 64, 8) for op in ops)
    left_ok = wait_for(lambda: P.counters()["jobs"] == 0, "the parent to free job ta after every LEAVE", 3)
    c1 = P.settled()
    dc = {x: c1[x] - c0[x] for x in c1 if isinstance(c1[x], int)}
    check("A loss: faults were injected both ways (up drop %d dup %d, down drop %d dup %d)" %
          (C.up_faults.dropped, C.up_faults.duplicated, C.down_faults.dropped, C.down_faults.duplicated),
          C.up_faults.dropped > 0 and C.up_faults.duplicated > 0 and C.down_faults.dropped > 0)
    check("A loss: parent completed every round exactly once (completions %d = %d packets)" % (dc["completions"], T),
          dc["completions"] == T, dc["completions"])
    check("A loss: parent added every member's contribution exactly once (contributions %d = 3 x %d)" %
          (dc["contributions"], T), dc["contributions"] == 3 * T, dc["contributions"])
    check("A loss: duplicate partial sums were caught at the parent (DUP_PENDING + results_resent + STALE > 0)",
          dc["drop_DUP_PENDING"] + dc["results_resent"] + dc["drop_STALE"] > 0,
          (dc["drop_DUP_PENDING"], dc["results_resent"], dc["drop_STALE"]))
    check("A loss: the clean child resent partial sums on workers' retransmissions (up_resent %d)" % C.cnt["up_resent"],
          C.cnt["up_resent"] > 0)
    check("A leave: child's LEAVE (weight 2) + direct LEAVEs end the job at the parent (jobs 0, jobs_ended +1, "
          "no abort)", left_ok and dc["jobs_ended"] == 1 and dc["jobs_aborted"] == 0,
          (c1["jobs"], dc["jobs_ended"], dc["jobs_aborted"]))

    # ---- malformed TREE_JOINs at the real parent (§12.3 step 3, step 2)
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind(("127.0.0.1", 0))
    s.settimeout(0.6)

    def tj(rank, ranks, world=4, short=False):
        nonce = random.getrandbits(64) | 1
        d = hdr(TREE_JOIN, rank=rank) + jbody(nonce, world, 64, 8, 0, 1, 0, 0, b"bad%d" % random.getrandbits(16))
        if not short:
            d += bitmap(ranks)
        s.sendto(d, P.addr)
        try:
            h = parse(s.recv(2000))
            return (h["kind"], NBODY.unpack_from(h["body"])[0] == nonce, nak_reason(h["body"])) if h else None
        except socket.timeout:
            return None
    cA = P.settled()
    r = tj(1, [1, 2])
    check("A tree: a well-formed TREE_JOIN (rep 1, set {1,2}) of a new job -> JOIN_WAIT",
          r is not None and r[0] == JOIN_WAIT, r)
    r = tj(0, [1, 2])
    check("A hostile: TREE_JOIN whose lowest rank is not the header rank -> JOIN_NAK REJECTED", r == (JOIN_NAK, True, ERR_REJECTED), r)
    r = tj(0, [])
    check("A hostile: TREE_JOIN with an empty set -> JOIN_NAK REJECTED", r == (JOIN_NAK, True, ERR_REJECTED), r)
    r = tj(2, [2, 5], world=4)
    check("A hostile: TREE_JOIN with a rank >= world_size -> JOIN_NAK REJECTED", r == (JOIN_NAK, True, ERR_REJECTED), r)
    r = tj(0, [0], short=True)
    cB = P.settled()
    check("A hostile: TREE_JOIN with a 64-byte body -> silent drop, counter JOIN",
          r is None and cB["drop_JOIN"] - cA["drop_JOIN"] >= 4, (r, cB["drop_JOIN"] - cA["drop_JOIN"]))
    s.close()

    # ---- §12.6: an abort at the child (a disagreement) reaches the parent's other members with its reason
    C.up_faults, C.down_faults = Faults(21), Faults(22)
    N3 = 3
    wk = [Worker(C.addr, 0, N3, "tb", label="tb0"), Worker(C.addr, 1, N3, "tb", label="tb1"),
          Worker(P.addr, 2, N3, "tb", label="tb2")]
    bx = [run_thread(w.join) for w in wk]
    errs = [join_box(b, 12)[1] for b in bx]
    if not check("A abort: job tb (2 under the child, 1 direct) joined", not any(errs), errs):
        return
    cA = P.settled()
    # rank 0 and rank 1 disagree (counts 100 and 50): the child sees a MISMATCH
    bx = [run_thread(lambda: wk[0].allreduce(0, [1] * 100, timeout=4)),
          run_thread(lambda: (time.sleep(0.05), wk[1].allreduce(0, [1] * 50, timeout=4))[1]),
          run_thread(lambda: wk[2].allreduce(0, [1] * 100, timeout=4))]
    outs = [join_box(b, 8) for b in bx]
    reasons = [getattr(e, "reason", repr(e)) for _, e in outs]
    check("A abort: child-level MISMATCH -> child's workers get ABORT MISMATCH", reasons[0] == ERR_MISMATCH and
          reasons[1] == ERR_MISMATCH, reasons)
    check("A abort: child's LEAVE(abort, body MISMATCH) -> real parent ABORTs its direct member with MISMATCH",
          reasons[2] == ERR_MISMATCH, reasons[2])
    cB = P.settled()
    check("A abort: parent counted the abort (jobs_aborted +1)",
          cB["jobs_aborted"] - cA["jobs_aborted"] == 1, cB["jobs_aborted"] - cA["jobs_aborted"])
    for w in wk:
        w.close()

    # ---- §12.6: an abort at the parent (a direct rank's LEAVE with the abort flag) reaches the child
    wk = [Worker(C.addr, 0, N3, "tc", label="tc0"), Worker(C.addr, 1, N3, "tc", label="tc1"),
          Worker(P.addr, 2, N3, "tc", label="tc2")]
    bx = [run_thread(w.join) for w in wk]
    errs = [join_box(b, 12)[1] for b in bx]
    if not check("A abort: job tc joined", not any(errs), errs):
        return
    mem = C.membership("tc")
    bx = [run_thread(lambda: wk[0].allreduce(0, [2] * 10, timeout=4)),
          run_thread(lambda: wk[1].allreduce(0, [3] * 10, timeout=4))]
    time.sleep(0.15)
    wk[2].send_leave(abort=True)
    outs = [join_box(b, 8) for b in bx]
    reasons = [getattr(e, "reason", repr(e)) for _, e in outs]
    pab = C.find("parent_abort")
    pab = [e for e in pab if e[1] == b"tc"]
    check("A abort: real parent sends the child ABORT ABORTED with the membership's job, session and token",
          pab and pab[0][2] == ERR_ABORTED and mem and pab[0][3] == dict(job=mem["pjob"], session=mem["psession"],
                                                                          token=mem["ptoken"]), pab)
    check("A abort: the child's workers get ABORT ABORTED", reasons == [ERR_ABORTED, ERR_ABORTED], reasons)
    for w in wk:
        w.close()
    check("A: the clean-room child hit no internal error", C.error is None, C.error)


# ---------------------------------------------------------------------------------------
# B: a clean-room PARENT above a real child
# ---------------------------------------------------------------------------------------
OPS_B = [dict(dtype=0, count=1, salt=31), dict(dtype=0, count=200, salt=32), dict(dtype=0, count=1000, salt=33),
         dict(dtype=1, count=100, salt=34), dict(dtype=1, count=700, salt=35)]


def scenario_parent(args, tmp):
    Q = CleanParent()
    Q.start()
    try:
        R = Switch(args.bindir, tmp, "childB", ["--parent", "127.0.0.1:%d" % Q.addr[1], "--no-shm"])
        _scenario_parent(args, tmp, Q, R)
    finally:
        Q.stop = True


def _scenario_parent(args, tmp, Q, R):
    N = 3
    barrier = os.path.join(tmp, "barrierB")
    final = dict(dtype=0, count=90, salt=36, barrier=barrier)
    ops = OPS_B + [final]
    hostile_ev = threading.Event()
    reached = threading.Event()
    workers = {}

    def clean(rank, addr):
        w = Worker(addr, rank, N, "pa", label="B.rank%d" % rank)
        workers[rank] = w
        w.join()
        res = [w.allreduce(op["dtype"], gen_data(op["dtype"], op["count"], rank, op["salt"])) for op in OPS_B]
        if rank == 0:
            reached.set()
        hostile_ev.wait(min(20, remaining()))
        res.append(w.allreduce(0, gen_data(0, final["count"], rank, final["salt"])))
        time.sleep(0.05)
        w.send_leave()
        return res

    c0 = R.counters()
    with Q.lock:
        Q.child_result_faults = Faults(41, drop=0.08, dup=0.12)
    b0 = run_thread(lambda: clean(0, R.addr))
    L1 = LibinaRank(args, "127.0.0.1:%d" % R.port, 1, N, "pa", ops)
    tjs = wait_for(lambda: [t for t in Q.tree_joins if bitmap_ranks(t[0]["body"][64:96]) == [0, 1]],
                   "the real child's TREE_JOIN with set {0,1}", 12)
    if tjs:
        h, a = tjs[0]
        b = parse_jbody(h["body"])
        check("B tree: real child's TREE_JOIN header: kind 28, rank = rep 0, other fields 0, length >= 128",
              h["rank"] == 0 and a == R.addr and len(h["raw"]) >= 128 and
              (h["job"], h["session"], h["token"], h["rawslot"], h["count"], h["exp"], h["op"], h["tag"]) == (0,) * 8,
              (h["rank"], a, len(h["raw"])))
        nonces = set(parse_jbody(t[0]["body"])["nonce"] for t in tjs)
        check("B tree: TREE_JOIN body: world 3, name, elems <= 64, window a power of 2 >= 1, one nonce",
              b["world"] == 3 and b["name"] == b"pa" and 1 <= b["elems"] <= 64 and b["window"] >= 1 and
              not (b["window"] & (b["window"] - 1)) and len(nonces) == 1 and b["nonce"] != 0, b)
    else:
        check("B tree: real child sent a TREE_JOIN with set {0,1}", False, [bitmap_ranks(t[0]["body"][64:96]) for t in Q.tree_joins])
    b2 = run_thread(lambda: clean(2, Q.addr))
    st = wait_for(lambda: Q.find("started"), "the clean parent to start job pa", 12)
    check("B tree: clean parent started job pa once the child's set and the direct rank covered N = 3", st, Q.events)
    wait_for(lambda: reached.is_set(), "rank 0 under the real child to finish its ops", 25)
    w0 = workers.get(0)
    check("B tree: the real child's JOIN_ACK to its worker has levels = 1 (bits 4..5) and no op 3",
          w0 is not None and w0.ack_flags is not None and (w0.ack_flags & LEVELS_MASK) == 0x10 and
          not (w0.ack_flags & FLAG_CAP_BFP), w0 and w0.ack_flags)
    with Q.lock:
        jj = Q.jobs.get(b"pa")
        mem_tok = (jj["id"], jj["session"], jj["token"]) if jj else None
    open(barrier, "w").close()
    hostile_ev.set()
    r0, e0 = join_box(b0, 25)
    r2, e2 = join_box(b2, 25)
    o1 = L1.result(25)
    check("B tree: clean worker under the real child finished", e0 is None, e0)
    check("B tree: clean worker direct at the clean parent finished", e2 is None, e2)
    check("B tree: libina rank under the real child finished, levels = 2",
          not o1.get("error") and o1.get("info", {}).get("levels") == 2, (o1.get("error"), o1.get("info")))
    k = 64
    g = 0
    with Q.lock:
        pass
    part_ok, part_bad = 0, []
    for i, op in enumerate(ops):
        what = "%s SUM %d" % ("INT32" if op["dtype"] == 0 else "FLOAT32", op["count"])
        allres = [(r0 or [None] * 20)[i] if r0 else None, (o1["results"] + [None] * 20)[i],
                  (r2 or [None] * 20)[i] if r2 else None]
        oks = [verify(x, op["dtype"], op["count"], op["salt"], range(N), k) for x in allres]
        check("B data: %s through real child + clean parent on all 3 ranks %s" %
              (what, "exact" if op["dtype"] == 0 else "within the bound, identical"),
              all(o for o, _ in oks) and all(x == allres[0] for x in allres), [m for o, m in oks if not o] or "differ")
        # the partial sums the real child sent up: the exact sum of ranks 0 and 1 (INT32)
        npk = npackets(op["dtype"], op["count"], 64, 8)
        if op["dtype"] == 0:
            d0, d1 = gen_data(0, op["count"], 0, op["salt"]), gen_data(0, op["count"], 1, op["salt"])
            for p in range(npk):
                got = Q.up_seen.get((b"pa", g + p))
                want = [wrap32(a + b) for a, b in zip(d0[p * k:(p + 1) * k], d1[p * k:(p + 1) * k])]
                if got and got[0] == want and got[1] == 0:
                    part_ok += 1
                else:
                    part_bad.append((g + p, got and got[0][:3], want[:3]))
        g += npk
    check("B data: every INT32 partial sum from the real child = sum of its two ranks, flags 0 (%d packets)" % part_ok,
          part_ok > 0 and not part_bad, part_bad[:3])
    T = g
    wait_for(lambda: Q.find("ended"), "the real child's LEAVE to end job pa at the clean parent", 4)
    c1 = R.settled()
    dc = {x: c1[x] - c0[x] for x in c1 if isinstance(c1[x], int)}
    lv = [h for h, a in Q.leaves if a == R.addr and h["job"] == (mem_tok or (0,))[0]]
    check("B leave: real child sends LEAVE (flags 0, rank 0 = rep, membership's job/session/token) twice",
          mem_tok and len(lv) == 2 and all(h["flags"] == 0 and h["rank"] == 0 and h["session"] == mem_tok[1]
                                           and h["token"] == mem_tok[2] for h in lv), [(h["flags"], h["rank"]) for h in lv])
    check("B leave: the clean parent ended the job (LEAVE weight 2 + direct LEAVE = 3 ranks)", Q.find("ended"), Q.events[-3:])
    fd = Q.child_result_faults
    check("B loss: the clean parent dropped %d and duplicated %d RESULTs to the child" % (fd.dropped, fd.duplicated),
          fd.dropped > 0 and fd.duplicated > 0)
    check("B loss: real child: up_packets = %d rounds, up_results = %d rounds (each passed down once)" % (T, T),
          dc["up_packets"] == T and dc["up_results"] == T, (dc["up_packets"], dc["up_results"]))
    check("B loss: real child re-sent partial sums after lost RESULTs (up_resent > 0)", dc["up_resent"] > 0, dc["up_resent"])
    check("B loss: real child dropped the duplicated parent RESULTs as UPSTREAM (>= %d)" % fd.duplicated,
          dc["drop_UPSTREAM"] >= fd.duplicated, dc["drop_UPSTREAM"])
    vlog("real child counter deltas:", {x: v for x, v in dc.items() if v})
    check("B loss: real child adds each worker once and completes each round once (completions %d, contributions 2x) and ended the job normally" % T,
          dc["completions"] == T and dc["contributions"] == 2 * T and dc["jobs_ended"] == 1 and dc["jobs_aborted"] == 0,
          (dc["completions"], dc["contributions"], dc["jobs_ended"], dc["jobs_aborted"]))

    # ---- §12.6 abort at the real child (a disagreement) -> LEAVE(abort) with body MISMATCH to the parent
    with Q.lock:
        Q.child_result_faults = Faults(42)
    N3 = 3
    wk = [Worker(R.addr, 0, N3, "pb", label="pb0"), Worker(R.addr, 1, N3, "pb", label="pb1"),
          Worker(Q.addr, 2, N3, "pb", label="pb2")]
    bx = [run_thread(w.join) for w in wk]
    errs = [join_box(b, 12)[1] for b in bx]
    if check("B abort: job pb joined", not any(errs), errs):
        bx = [run_thread(lambda: wk[0].allreduce(0, [1] * 100, timeout=4)),
              run_thread(lambda: (time.sleep(0.05), wk[1].allreduce(0, [1] * 50, timeout=4))[1]),
              run_thread(lambda: wk[2].allreduce(0, [1] * 100, timeout=4))]
        outs = [join_box(b, 8) for b in bx]
        reasons = [getattr(e, "reason", repr(e)) for _, e in outs]
        wait_for(lambda: len([h for h, a in Q.leaves if a == R.addr and h["flags"] & FLAG_ABORT]) >= 2,
                 "the real child's two abort-LEAVEs", 1.0)
        la = [h for h, a in Q.leaves if a == R.addr and h["flags"] & FLAG_ABORT]
        check("B abort: real child's workers get ABORT MISMATCH", reasons[:2] == [ERR_MISMATCH, ERR_MISMATCH], reasons)
        check("B abort: real child sends the parent LEAVE(abort) with a 16-byte body: nonce 0, reason MISMATCH",
              la and len(la[0]["body"]) >= 16 and NBODY.unpack_from(la[0]["body"])[0] == 0 and
              nak_reason(la[0]["body"]) == ERR_MISMATCH, [(len(h["body"]), h["body"][:16].hex()) for h in la])
        check("B abort: ... and does so twice", len(la) == 2, len(la))
        check("B abort: the direct rank learns the same reason (MISMATCH)", reasons[2] == ERR_MISMATCH, reasons[2])
    for w in wk:
        w.close()

    # ---- §12.6 ABORT from the parent -> the real child's workers with the same reason
    wk = [Worker(R.addr, 0, N3, "pc", label="pc0"), Worker(R.addr, 1, N3, "pc", label="pc1"),
          Worker(Q.addr, 2, N3, "pc", label="pc2")]
    bx = [run_thread(w.join) for w in wk]
    errs = [join_box(b, 12)[1] for b in bx]
    if check("B abort: job pc joined", not any(errs), errs):
        bx = [run_thread(lambda: wk[0].allreduce(0, [2] * 10, timeout=4)),
              run_thread(lambda: wk[1].allreduce(0, [3] * 10, timeout=4))]
        # the child's set (slot 0, round 0) goes *up*; the clean parent holds it (rank 2 sends nothing)
        up = wait_for(lambda: Q.up_seen.get((b"pc", 0)), "the real child's partial sum of job pc", 5)
        with Q.lock:
            jj = Q.jobs.get(b"pc")
            mt = (jj["id"], jj["session"], jj["token"]) if jj else None
        if up and mt:
            cA = R.settled()
            forged = hdr(RESULT, job=mt[0], rank=RANK_SWITCH, session=mt[1], token=mt[2], slot=0, seq=0, count=10,
                         exp=0, op=0, tag=op_tag(1, 10, 0, 0, 0)) + payload([666] * 10)
            s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            s.bind(("127.0.0.1", 0))
            s.sendto(forged, R.addr)           # a RESULT that fits the awaited round, from a stranger
            s.close()
            Q.send(hdr(RESULT, job=mt[0], rank=RANK_SWITCH, session=mt[1], token=mt[2] ^ 1, slot=0, seq=0, count=10,
                       exp=0, op=0, tag=op_tag(1, 10, 0, 0, 0)) + payload([667] * 10), R.addr)   # wrong token
            Q.send(hdr(RESULT, job=mt[0], rank=RANK_SWITCH, session=mt[1], token=mt[2], slot=0, seq=0x1000, count=10,
                       exp=0, op=0, tag=op_tag(1, 10, 0, 0, 0)) + payload([668] * 10), R.addr)   # not awaited
            cB = R.settled()
            dd = {x: cB[x] - cA[x] for x in cB if isinstance(cB[x], int)}
            nz = {x: v for x, v in dd.items() if x.startswith("drop_") and v}
            vlog("drops for forged RESULTs at the real child:", nz)
            check("B hostile: the parent's RESULT for a round not awaited and the wrong-token RESULT count UPSTREAM",
                  dd["drop_UPSTREAM"] >= 2, nz)
            check("B hostile: RESULTs for the awaited round from a stranger / with a wrong token, and one for a round "
                  "not awaited, are all dropped (3 drops, up_results +0, workers still waiting)",
                  sum(nz.values()) == 3 and dd["up_results"] == 0 and bx[0]["thread"].is_alive()
                  and bx[1]["thread"].is_alive(), (nz, dd["up_results"]))
        else:
            check("B hostile: the real child sent its partial sum of job pc up", False, (up, mt))
        with Q.lock:
            Q.abort(Q.jobs[b"pc"], ERR_TIMEOUT)
        outs = [join_box(b, 8) for b in bx]
        reasons = [getattr(e, "reason", repr(e)) for _, e in outs]
        check("B abort: ABORT TIMEOUT from the parent reaches the child's workers unchanged", reasons == [ERR_TIMEOUT] * 2,
              reasons)
        cB = R.settled()
        back = [h for h, a in Q.leaves if a == R.addr and mt and h["session"] == mt[1]]
        check("B abort: the real child sent nothing back and freed the job (jobs 0, no LEAVE)",
              cB["jobs"] == 0 and not back, (cB["jobs"], len(back)))
    for w in wk:
        w.close()
    check("B: the clean-room parent hit no internal error", Q.error is None, Q.error)


# ---------------------------------------------------------------------------------------
# C: shards from the worker's side (§12.1)
# ---------------------------------------------------------------------------------------
OPS_S = [dict(dtype=0, count=1000, salt=51), dict(dtype=1, count=700, salt=52), dict(dtype=0, count=10, salt=53),
         dict(dtype=0, count=130, salt=54)]


def scenario_shards(args, tmp):
    S1 = Switch(args.bindir, tmp, "shard1", ["--no-shm", "--int-ops-only"])  # no op 3 (§8.7): two rounds
    S2 = Switch(args.bindir, tmp, "shard2", ["--no-shm", "--int-ops-only"])
    S1, S2 = sorted((S1, S2), key=lambda s: shard_order([S1.addr, S2.addr]).index(s.addr))  # shard 0, 1
    c1a, c2a = S1.counters(), S2.counters()
    N = 2
    sw = ShardedWorker([S2.addr, S1.addr], 0, N, "sh")                  # any order (§12.1)

    def run():
        sw.join()
        res = [sw.allreduce(op["dtype"], gen_data(op["dtype"], op["count"], 0, op["salt"])) for op in OPS_S]
        sw.leave()
        return res
    b = run_thread(run)
    L = LibinaRank(args, "127.0.0.1:%d,127.0.0.1:%d" % (S1.port, S2.port), 1, N, "sh", OPS_S)
    r0, e0 = join_box(b, 25)
    o1 = L.result(25)
    check("C shards: clean-room 2-part worker finished", e0 is None, e0)
    check("C shards: libina rank over the same 2 switches finished (shards = 2)",
          not o1.get("error") and o1.get("info", {}).get("shards") in (2, None), (o1.get("error"), o1.get("info")))
    for i, op in enumerate(OPS_S):
        allres = [(r0 or [None] * 9)[i] if r0 else None, (o1["results"] + [None] * 9)[i]]
        oks = [verify(x, op["dtype"], op["count"], op["salt"], range(N), 64) for x in allres]
        check("C shards: %s SUM %d cut over 2 shards, both ranks %s" % ("INT32" if op["dtype"] == 0 else "FLOAT32",
              op["count"], "exact" if op["dtype"] == 0 else "within the bound, identical"),
              all(o for o, _ in oks) and allres[0] == allres[1], [m for o, m in oks if not o] or "differ")
    # the cut: part p holds blocks ⌊B·p/2⌋ .. ⌊B·(p+1)/2⌋−1; each part an ordinary stream
    want = [0, 0]
    for op in OPS_S:
        B = -(-op["count"] // 64)
        for p in range(2):
            lo, hi = B * p // 2, B * (p + 1) // 2
            cnt = min(op["count"], hi * 64) - lo * 64
            if cnt > 0:
                want[p] += npackets(op["dtype"], cnt, 64, 8)
    c1b, c2b = S1.settled(), S2.settled()
    got = [c1b["completions"] - c1a["completions"], c2b["completions"] - c2a["completions"]]
    check("C shards: each switch completed exactly its part's packets (%s)" % want, got == want, got)
    sw.close()
    if VERBOSE:
        vlog("shard1 log:", S1.tail()[-1500:])
        vlog("shard2 log:", S2.tail()[-1500:])


# ---------------------------------------------------------------------------------------
def main():
    global VERBOSE
    ap = argparse.ArgumentParser()
    ap.add_argument("--bindir", required=True)
    ap.add_argument("--libdir", default=None)
    ap.add_argument("--pythondir", default=None)
    ap.add_argument("-v", action="store_true")
    args = ap.parse_args()
    VERBOSE = args.v
    if args.libdir is None:
        lib = os.environ.get("INA_LIBRARY")
        args.libdir = os.path.dirname(lib) if lib else os.path.join(os.path.dirname(args.bindir.rstrip("/")), "lib")
    if args.pythondir is None:
        args.pythondir = os.environ.get("PYTHONPATH", "").split(":")[0] or \
            os.path.join(os.path.dirname(args.bindir.rstrip("/")), "python")
    tmp = tempfile.mkdtemp(prefix="peer_tree.")
    # §7.2 tags: the worked example of §11 (op 1, 6 FLOAT32 elements)
    check("tag function reproduces §11 (0xCB 0x49 0x68 0x28)",
          [op_tag(1, 6, 1, 0, p) for p in range(4)] == [0xCB, 0x49, 0x68, 0x28],
          [hex(op_tag(1, 6, 1, 0, p)) for p in range(4)])

    def watchdog():
        while True:
            time.sleep(0.5)
            if remaining() <= 0:
                print("FAIL - global deadline (%.0f s) passed while waiting for: %s" % (GLOBAL_LIMIT, WAITING[0]),
                      flush=True)
                for p in PROCS:
                    try:
                        p.kill()
                    except Exception:
                        pass
                os._exit(1)
    threading.Thread(target=watchdog, daemon=True).start()
    try:
        only = os.environ.get("PEER_TREE_ONLY", "ABC")
        for name, fn in (("A", scenario_child), ("B", scenario_parent), ("C", scenario_shards)):
            if name not in only:
                continue
            try:
                fn(args, tmp)
            except Exception as e:
                import traceback
                if VERBOSE:
                    traceback.print_exc()
                check("scenario %s ran to the end" % name, False, repr(e))
    finally:
        for p in PROCS:
            try:
                if p.poll() is None:
                    p.send_signal(2)
            except Exception:
                pass
        for p in PROCS:
            try:
                p.wait(timeout=2)
            except Exception:
                try:
                    p.kill()
                except Exception:
                    pass
    nfail = sum(1 for ok, _ in RESULTS if not ok)
    print("# %d checks, %d failed, %.1f s" % (len(RESULTS), nfail, time.monotonic() - T0), flush=True)
    import shutil
    shutil.rmtree(tmp, ignore_errors=True)
    sys.exit(0 if nfail == 0 and RESULTS else 1)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Clean-room MLfabric peer and conformance test (PROTOCOL.md §15, with §3, §14.2;
§15.9: elastic jobs, PS_SYNC/PS_STATE/PS_REPLAY at ina-ps, ina-sched's leases, voids,
departures, failover and recovery against fake servers).

Written from docs/PROTOCOL.md alone.  It plays two workers of a bounded-staleness
(STALE) job against the real ina-ps and ina-sched (and, for §15.8, a chain of two
ina-ps), and checks what the spec lets a worker observe.

usage: python3 peer_mlfabric.py --bindir DIR [--libdir DIR] [--pythondir DIR] [-v]
"""
import argparse
import json
import os
import random
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
import urllib.request

# ---------------------------------------------------------------- constants
MAGIC = 0x494E            # §3 offset 0
VERSION = 1               # §3 offset 2
# §4 / §14.2 / §15 kinds
PS_JOIN, PS_JOIN_ACK, PS_JOIN_NAK = 32, 33, 34
PS_PULL, PS_PULL_RESP = 39, 40
PS_LEAVE = 43
UPDATE, UPDATE_ACK = 48, 49
SCHED_REQ, SCHED_GRANT, SCHED_DONE = 50, 51, 52
CHAIN_FWD, CHAIN_ACK = 55, 56
PS_SYNC, PS_STATE, PS_REPLAY = 53, 54, 57   # §15.9
SYNC_STATE, SYNC_VOID, SYNC_REPLAY, SYNC_DEPART = 0, 1, 2, 3   # §15.9.2 actions
FATE_TAKEN, FATE_VOIDED, FATE_HELD, FATE_WAITING, FATE_UNKNOWN, FATE_NO_JOB = 0, 1, 2, 3, 4, 5
VOIDED = 2                # §15.2 UPDATE_ACK status 2
REQ_LEAVE = 2             # §15.3 REQ flags bit 1
RANK_SWITCH = 0xFFFF      # §3 offset 6
STAMP_NONE = 0xFFFFFFFF   # §15.2 body bytes 0..3
BASE_AT_GRANT = 0xFFFFFFFF  # §15.3 INA_SCHED_BASE_AT_GRANT
REQ_AGGREGATE = 1         # §15.3 REQ flags bit 0
ERR_STALE = -1018         # §4.3
ERR_MISMATCH = -1005
ERR_NOTSUP = -1007
ERR_REJECTED = -1003
HELD = 1                  # §15.2 UPDATE_ACK status 1
DONE_MEMBER = 2           # §15.3 INA_SCHED_DONE_MEMBER

HDR = struct.Struct(">HBBHHIIIIHhHBB")   # §3: 32 bytes, big-endian (§2)
assert HDR.size == 32
# §14.2.1 PS_JOIN body, 96 bytes; bytes 92..93 start M (§15.9.1), 94..95 reserved
PSJOIN = struct.Struct(">QHHHHBBBBffffIQ32sIIIHH")
assert PSJOIN.size == 96

VERBOSE = False
WAITING = "start"
FAILS = 0
NCHECKS = 0


def log(*a):
    if VERBOSE:
        print("#", *a, flush=True)


def check(cond, what, detail=""):
    global FAILS, NCHECKS
    NCHECKS += 1
    if cond:
        print("ok - %s" % what, flush=True)
    else:
        FAILS += 1
        print("FAIL - %s%s" % (what, (": " + detail) if detail else ""), flush=True)
    return cond


class Deadline(Exception):
    pass


def on_alarm(signum, frame):
    raise Deadline("global deadline passed while waiting for: %s" % WAITING)


# ---------------------------------------------------------------- encoding
def hdr(kind, job=0, rank=0, session=0, token=0, slot=0, seq=0, count=0,
        exp=0, flags=0, op=0, tag=0, version=VERSION, magic=MAGIC):
    # §3: every field at a fixed offset, big-endian; unused fields 0.
    return HDR.pack(magic, version, kind, job, rank, session, token, slot,
                    seq & 0xFFFFFFFF, count, exp, flags, op, tag)


def parse(data):
    if len(data) < 32:
        return None
    f = HDR.unpack_from(data, 0)
    keys = ("magic", "version", "kind", "job", "rank", "session", "token",
            "slot", "seq", "count", "exp", "flags", "op", "tag")
    h = dict(zip(keys, f))
    h["body"] = data[32:]
    h["len"] = len(data)
    return h


def name32(s):
    b = s.encode()
    assert len(b) <= 31
    return b + b"\0" * (32 - len(b))   # NUL-padded, a NUL in the 32 bytes


def entries(grad, dim):
    """§15.2 body bytes 8..: n × (key u64, dim × f32)."""
    out = b""
    for key in sorted(grad):
        vals = grad[key]
        assert len(vals) == dim
        out += struct.pack(">Q", key) + struct.pack(">%df" % dim, *vals)
    return out


# ---------------------------------------------------------------- sockets
class Sock:
    """One UDP socket connect()ed to one peer (§2: replies come to the source)."""

    def __init__(self, addr):
        self.s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.s.bind(("127.0.0.1", 0))
        self.s.connect(addr)
        self.addr = addr

    def send(self, data):
        self.s.send(data)

    def recv(self, timeout, want=None):
        """Next datagram accepted by want(h) within timeout, else None."""
        end = time.monotonic() + timeout
        while True:
            left = end - time.monotonic()
            if left <= 0:
                return None
            self.s.settimeout(left)
            try:
                data = self.s.recv(65536)
            except socket.timeout:
                return None
            except ConnectionRefusedError:
                continue
            h = parse(data)
            if h is None:
                continue
            log("rx", self.addr[1], "kind", h["kind"], "slot", h["slot"], "seq", h["seq"],
                "len", h["len"])
            if want is None or want(h):
                return h

    def drain(self):
        while self.recv(0.01) is not None:
            pass

    def close(self):
        self.s.close()


# ---------------------------------------------------------------- ina-ps worker side
class PsRank:
    """A rank of one STALE job at one ina-ps (§14.2, §15.1, §15.2)."""

    def __init__(self, addr, name, world, rank, dim, D, mode=1, nonce=None, start=0):
        self.sock = Sock(addr)
        self.name, self.world, self.rank, self.dim, self.D, self.mode = name, world, rank, dim, D, mode
        self.start = start
        self.nonce = nonce or random.getrandbits(63) | 1
        self.job = self.session = self.token = 0
        self.pull_id = 0

    def join_datagram(self):
        # §14.2.1: nonce, world, shard 0, nshards 1, dim, optim 0 SGD, mode, init 0 ZERO,
        # max_delay (byte 19, §15.1), lr 1.0, eps 0, init_acc 0, init_scale 0,
        # sw_version, init_seed, name, hot_keys 0 (§15.1: a STALE job needs 0), P, E, 0.
        body = PSJOIN.pack(self.nonce, self.world, 0, 1, self.dim, 0, self.mode, 0, self.D,
                           1.0, 0.0, 0.0, 0.0, 100, 0, name32(self.name), 0, 0, 0, self.start, 0)
        return hdr(PS_JOIN, rank=self.rank) + body

    def take_join_answer(self, h):
        if h["kind"] == PS_JOIN_ACK and len(h["body"]) >= 96:
            b = PSJOIN.unpack_from(h["body"], 0)
            if b[0] != self.nonce or h["session"] == 0:
                return None
            self.job, self.session, self.token = h["job"], h["session"], h["token"]
            return ("ack", b)
        if h["kind"] == PS_JOIN_NAK and len(h["body"]) >= 12:
            nonce, reason = struct.unpack_from(">Qi", h["body"], 0)
            if nonce == self.nonce:
                return ("nak", reason)
        return None

    def pull(self, keys, timeout=1.0):
        """PS_PULL (§14.2.5); STALE: the answer's seq is the version V (§15.1)."""
        global WAITING
        self.pull_id += 1
        rid = self.pull_id
        dg = hdr(PS_PULL, self.job, self.rank, self.session, self.token, slot=rid, seq=0,
                 count=len(keys)) + b"".join(struct.pack(">Q", k) for k in keys)
        WAITING = "PS_PULL_RESP job %s rank %d" % (self.name, self.rank)
        for _ in range(3):
            self.sock.send(dg)
            h = self.sock.recv(timeout / 3, lambda h: h["kind"] == PS_PULL_RESP and h["slot"] == rid)
            if h:
                n = h["count"]
                vals = struct.unpack_from(">%df" % (n * self.dim), h["body"], 0)
                return h["seq"], {k: list(vals[i * self.dim:(i + 1) * self.dim]) for i, k in enumerate(keys)}
        return None, None

    def update_dg(self, u, base, stamp, grad, members=0, **over):
        """UPDATE (§15.2): slot = u, seq = base b, count = n; body stamp, members, entries."""
        f = dict(job=self.job, rank=self.rank, session=self.session, token=self.token,
                 slot=u, seq=base, count=len(grad))
        f.update(over)
        return hdr(UPDATE, **f) + struct.pack(">II", stamp, members) + entries(grad, self.dim)

    def wait_ack(self, u, timeout, want_final=False):
        """UPDATE_ACK (§15.2): slot = u, body status i32, V, delay, stamp."""
        def w(h):
            if h["kind"] != UPDATE_ACK or h["slot"] != u or len(h["body"]) < 16:
                return False
            if h["session"] != self.session or h["token"] != self.token:
                return False
            if want_final and struct.unpack_from(">i", h["body"], 0)[0] == HELD:
                return False
            return True
        h = self.sock.recv(timeout, w)
        if h is None:
            return None
        st, v, d, g = struct.unpack_from(">iIII", h["body"], 0)
        return dict(status=st, V=v, delay=d, stamp=g, seq=h["seq"], rank=h["rank"])

    def update(self, u, base, stamp, grad, members=0, timeout=1.0, want_final=True):
        """Send an UPDATE, resend every 200 ms until an UPDATE_ACK (final unless HELD ok)."""
        global WAITING
        WAITING = "UPDATE_ACK u=%d job %s rank %d" % (u, self.name, self.rank)
        dg = self.update_dg(u, base, stamp, grad, members)
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            self.sock.send(dg)
            a = self.wait_ack(u, 0.2, want_final)
            if a:
                return a
        return None


def ps_join_all(ranks, timeout=3.0):
    """§14.2.2: PS_JOIN from every rank, resent until each is answered."""
    global WAITING
    WAITING = "PS_JOIN_ACK/NAK for job %s" % ranks[0].name
    res = [None] * len(ranks)
    end = time.monotonic() + timeout
    while time.monotonic() < end and any(r is None for r in res):
        for i, r in enumerate(ranks):
            if res[i] is None:
                r.sock.send(r.join_datagram())
        t = time.monotonic() + 0.2
        for i, r in enumerate(ranks):
            while res[i] is None and time.monotonic() < t:
                h = r.sock.recv(max(0.0, t - time.monotonic()))
                if h is None:
                    break
                res[i] = r.take_join_answer(h)
    return res


# ---------------------------------------------------------------- ina-sched worker side
class SchedRank:
    """A rank talking to ina-sched (§15.3)."""

    def __init__(self, addr, name, rank):
        self.sock = Sock(addr)
        self.name, self.rank = name, rank

    def req_dg(self, q, base, nbytes=1000, flags=0, rank=None, name=None):
        # §15.3 REQ: header rank, slot = q, seq = b; body 40 B: bytes, flags, name.
        # job, session and token are not mentioned for REQ ("No session"): written 0.
        return (hdr(SCHED_REQ, rank=self.rank if rank is None else rank, slot=q, seq=base)
                + struct.pack(">II", nbytes, flags) + name32(self.name if name is None else name))

    def done_dg(self, q, g, status, nbytes, usec, version):
        # §15.3 DONE: header rank, slot = q, seq = g; body status, bytes, usec, V.
        return hdr(SCHED_DONE, rank=self.rank, slot=q, seq=g) + struct.pack(
            ">iIII", status, nbytes, usec, version)

    def wait_grant(self, q, timeout):
        h = self.sock.recv(timeout, lambda h: h["kind"] == SCHED_GRANT and h["slot"] == q)
        if h is None:
            return None
        st, g, bound, strag, k, idx = struct.unpack_from(">iIIIII", h["body"], 0)
        return dict(status=st, g=g, seq=h["seq"], bound=bound, straggler=strag, k=k,
                    index=idx, rank=h["rank"], len=h["len"])

    def req(self, q, base, timeout=0.6, **kw):
        global WAITING
        WAITING = "GRANT for q=%d rank %d (%s)" % (q, self.rank, self.name)
        self.sock.send(self.req_dg(q, base, **kw))
        return self.wait_grant(q, timeout)

    def done(self, q, g, status=0, nbytes=1000, usec=100, version=0):
        self.sock.send(self.done_dg(q, g, status, nbytes, usec, version))


# ---------------------------------------------------------------- daemons
class Daemons:
    def __init__(self, bindir, tmp):
        self.bindir, self.tmp, self.procs = bindir, tmp, []

    def start(self, name, args, portfiles):
        err = open(os.path.join(self.tmp, "%s.%d.err" % (name, len(self.procs))), "w+")
        for pf in portfiles:
            if os.path.exists(pf):
                os.unlink(pf)
        p = subprocess.Popen([os.path.join(self.bindir, name)] + args, stdin=subprocess.DEVNULL,
                             stdout=subprocess.DEVNULL, stderr=err)
        p.errfile = err
        self.procs.append(p)
        ports = []
        global WAITING
        for pf in portfiles:
            WAITING = "%s to write its port file %s" % (name, pf)
            end = time.monotonic() + 5
            while time.monotonic() < end:
                if p.poll() is not None:
                    raise RuntimeError("%s exited early: %s" % (name, self.stderr(p)))
                try:
                    with open(pf) as f:
                        t = f.read().strip()
                    if t:
                        ports.append(int(t))
                        break
                except (OSError, ValueError):
                    pass
                time.sleep(0.02)
            else:
                raise RuntimeError("%s wrote no port file" % name)
        return p, ports

    def stderr(self, p):
        p.errfile.flush()
        p.errfile.seek(0)
        return p.errfile.read()

    def stop(self, p, timeout=3):
        """SIGTERM, wait; the exit report (counters) is on stderr."""
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
            try:
                p.wait(timeout)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        return self.stderr(p)

    def kill_all(self):
        for p in self.procs:
            if p.poll() is None:
                p.kill()
                try:
                    p.wait(2)
                except subprocess.TimeoutExpired:
                    pass


def sched_counters(text):
    """ina-sched's exit report: 'name value' lines (format found by running it; §15.5
    names the counters but not the report's format)."""
    c = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].lstrip("-").isdigit():
            c[parts[0]] = int(parts[1])
    return c


def ps_counters(mport, settle=0.22):
    # ina-ps publishes its counters about every 100 ms (found by experiment; not in the docs),
    # so wait a little for the effect of what was just sent.
    time.sleep(settle)
    with urllib.request.urlopen("http://127.0.0.1:%d/counters" % mport, timeout=2) as r:
        j = json.loads(r.read().decode())
    c = dict(j["counters"])
    for k, v in j["counters"].get("drops", {}).items():
        c["drop_" + k] = v
    return c


def free_port():
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


# ================================================================ the tests
def grad_of(scale, keys, dim):
    return {k: [float(scale * (i + 1) + j) for j in range(dim)] for i, k in enumerate(keys)}


def test_stale_and_sched(d, tmp, ps_addr, ps_m):
    """Job 'mlfa', D = 1, world 2; ina-sched with the default window D + 1 = 2."""
    global WAITING
    NAME, D, DIM, KEYS = "mlfa", 1, 2, [11, 22]
    sp, (sport,) = d.start("ina-sched", ["--job", NAME, "--world", "2", "--max-delay", str(D),
                                         "--listen", "127.0.0.1:0", "--port-file",
                                         os.path.join(tmp, "sa.port"), "--log-level", "error"],
                           [os.path.join(tmp, "sa.port")])
    saddr = ("127.0.0.1", sport)
    P = [PsRank(ps_addr, NAME, 2, r, DIM, D) for r in range(2)]
    S = [SchedRank(saddr, NAME, r) for r in range(2)]

    res = ps_join_all(P)
    ok = all(r and r[0] == "ack" for r in res)
    check(ok and all(r[1][6] == 1 and r[1][8] == D for r in res),
          "§15.1 PS_JOIN mode 1 (STALE), max_delay %d: both ranks get PS_JOIN_ACK echoing mode and D" % D,
          repr(res))
    if not ok:
        return sp
    V, vals = P[0].pull(KEYS)
    check(V == 0 and vals == {k: [0.0] * DIM for k in KEYS},
          "§15.1 PS_PULL_RESP of a STALE job carries version 0 in seq, initial values 0", "%r %r" % (V, vals))

    # --- §15.3 grants in update mode: base b given
    g0 = S[0].req(1, 0)
    check(g0 is not None and g0["status"] == 0 and g0["g"] == 0 and g0["seq"] == 0 and g0["k"] == 1
          and g0["index"] == 0 and g0["rank"] == RANK_SWITCH and g0["len"] == 56,
          "§15.3 rank 0 REQ q=1 b=0: GRANT status 0, stamp 0 (seq and body), k=1, 56 bytes", repr(g0))
    g1 = S[1].req(1, 0)
    check(g1 is not None and g1["status"] == 0 and g1["g"] == 1 and g1["seq"] == 1,
          "§15.3 rank 1 REQ q=1 b=0 while one grant is out (A+O-b = 1 <= D): GRANT stamp 1", repr(g1))
    log("bounds", g0 and g0["bound"], g1 and g1["bound"])
    check(g0 is not None and g1 is not None and g0["bound"] <= 1 and g1["bound"] <= D and g1["bound"] >= g0["bound"],
          "§15.3 GRANT bytes 8..11 (bound A+O) within D and not decreasing (%s, %s)"
          % (g0 and g0["bound"], g1 and g1["bound"]))
    g1b = S[1].req(1, 0)
    check(g1b is not None and g1b["g"] == 1 and g1b["status"] == 0,
          "§15.3 a copy of a GRANTED REQ gets the same GRANT again (stamp 1)", repr(g1b))

    # --- §15.2 step 2: rank 1's stamp 1 arrives before stamp 0 -> HELD
    grad0 = grad_of(1, KEYS, DIM)      # {11: [1,2], 22: [2,3]}
    grad1 = grad_of(10, KEYS, DIM)     # {11: [10,11], 22: [20,21]}
    c0 = ps_counters(ps_m)
    WAITING = "HELD UPDATE_ACK for rank 1"
    P[1].sock.send(P[1].update_dg(1, 0, 1, grad1))
    a = P[1].wait_ack(1, 1.0)
    check(a is not None and a["status"] == HELD and a["V"] == 0 and a["delay"] == 0 and a["stamp"] == 1
          and a["seq"] == 0 and a["rank"] == RANK_SWITCH,
          "§15.2 step 2: UPDATE with stamp 1 before stamp 0 is answered HELD (status 1, V 0, delay 0, stamp 1)", repr(a))
    P[1].sock.send(P[1].update_dg(1, 0, 1, grad1))
    a2 = P[1].wait_ack(1, 1.0)
    c1 = ps_counters(ps_m)
    check(a2 is not None and a2["status"] == HELD and c1["updates_held"] - c0["updates_held"] == 1
          and c1["update_dups"] - c0["update_dups"] == 1,
          "§15.2 step 2: a second copy of the held update is answered HELD again, counted update_dups, held once",
          "%r held+%d dups+%d" % (a2, c1["updates_held"] - c0["updates_held"], c1["update_dups"] - c0["update_dups"]))

    # --- stamp 0 arrives: applied, then the held stamp 1 is taken
    a = P[0].update(1, 0, 0, grad0)
    check(a is not None and a["status"] == 0 and a["V"] == 1 and a["seq"] == 1 and a["delay"] == 0 and a["stamp"] == 0,
          "§15.2 step 4: stamp 0 (b=0) applied: status 0, V 1 (body and seq), delay 0", repr(a))
    WAITING = "UPDATE_ACK with the outcome of the held stamp 1"
    a = P[1].wait_ack(1, 1.0, want_final=True)
    spont = a is not None
    if a is None:   # not told unsolicited: ask again with a copy (§15.2 step 1)
        a = P[1].update(1, 0, 1, grad1)
    check(spont, "§15.2 step 2/4: the held update's outcome is sent unsolicited once stamp 0 is taken")
    check(a is not None and a["status"] == 0 and a["V"] == 2 and a["delay"] == 1 and a["stamp"] == 1,
          "§15.2 step 4: held stamp 1 (b=0) applied at delay 1 <= D: V 2", repr(a))

    # --- duplicates: a copy of the last update is answered, not applied (§15.2 step 1)
    c0 = ps_counters(ps_m)
    a = P[0].update(1, 0, 0, grad0)
    V, vals = P[0].pull(KEYS)
    c1 = ps_counters(ps_m)
    want = {k: [-(grad0[k][j] + grad1[k][j]) for j in range(DIM)] for k in KEYS}
    check(a is not None and a["status"] == 0 and a["V"] == 1 and a["delay"] == 0
          and c1["update_dups"] - c0["update_dups"] == 1,
          "§15.2 step 1: a copy of rank 0's update 1 gets the stored UPDATE_ACK (V 1), update_dups +1", repr(a))
    check(V == 2 and vals == want,
          "§15.2/§14.1: model = -(lr=1)·(g0+g1) exactly once each, version 2 after the copy",
          "V=%r %r want %r" % (V, vals, want))

    S[0].done(1, 0, 0, 400, 50, 1)
    S[1].done(1, 1, 0, 400, 50, 2)   # A = 2, O = 0
    time.sleep(0.05)
    r = S[0].req(1, 0)
    check(r is not None and r["status"] == 0 and r["g"] == 0,
          "§15.3 a copy of an ANSWERED request (after its DONE) gets its GRANT again (stamp 0), nothing new",
          repr(r))

    # --- §15.3: base too old -> refused at once
    r = S[0].req(2, 0)
    check(r is not None and r["status"] == ERR_STALE and r["seq"] == 0xFFFFFFFF and r["k"] == 1,
          "§15.3 REQ q=2 with b=0 when A=2 > b+D: GRANT status -1018 (STALE), seq 0xFFFFFFFF, k 1", repr(r))
    # --- §15.2 step 4: the server refuses an unstamped update with delay 2 > D
    c0 = ps_counters(ps_m)
    a = P[0].update(2, 0, STAMP_NONE, grad0)
    V, vals2 = P[0].pull(KEYS)
    c1 = ps_counters(ps_m)
    check(a is not None and a["status"] == ERR_STALE and a["V"] == 2 and a["delay"] == 2
          and a["stamp"] == STAMP_NONE and V == 2 and vals2 == want
          and c1["updates_stale"] - c0["updates_stale"] == 1,
          "§15.2 step 4: unstamped UPDATE with delay 2 > D=1 refused -1018, model and version unchanged",
          "%r V=%r" % (a, V))

    # --- hostile datagrams to ina-sched: none may be granted (§15.3, §15.5 drops)
    hostile = [
        ("REQ naming another job", S[0].sock, S[0].req_dg(3, 2, name="other")),
        ("REQ truncated to 71 bytes", S[0].sock, S[0].req_dg(3, 2)[:71]),
        ("REQ with rank 7 >= world", S[0].sock, S[0].req_dg(3, 2, rank=7)),
        ("REQ for rank 1 from rank 0's address", S[0].sock, S[0].req_dg(3, 2, rank=1)),
        ("REQ with an id older than the current one", S[0].sock, S[0].req_dg(1, 2)),
        ("REQ with a bad magic", S[0].sock, b"XX" + S[0].req_dg(3, 2)[2:]),
        ("REQ of version 2", S[0].sock, hdr(SCHED_REQ, rank=0, slot=3, seq=2, version=2) + S[0].req_dg(3, 2)[32:]),
        ("a GRANT sent to the scheduler", S[0].sock, hdr(SCHED_GRANT, rank=0, slot=3) + bytes(24)),
        ("DONE for a request never granted", S[1].sock, S[1].done_dg(9, 9, 0, 1, 1, 2)),
        ("a 20-byte datagram", S[0].sock, b"IN\x01\x32" + bytes(16)),
    ]
    for what, sk, dg in hostile:
        sk.send(dg)
    got = [S[0].sock.recv(0.3), S[1].sock.recv(0.05)]
    check(got == [None, None], "§15.3/§15.5 %d malformed or forged datagrams to ina-sched get no GRANT"
          % len(hostile), repr(got))

    # --- the scheduler still grants correctly: stamp 2 next; held request of rank 1
    r0 = S[0].req(3, 2)
    check(r0 is not None and r0["status"] == 0 and r0["g"] == 2,
          "§15.3 after the hostile datagrams, rank 0 REQ q=3 b=2 is granted the next stamp 2", repr(r0))
    # rank 1 asks with b=1: A+O-b = 2+1-1 = 2 > D (held), A-b = 1 <= D (not refused at once)
    r1 = S[1].req(2, 1, timeout=0.3)
    check(r1 is None, "§15.3 rank 1 REQ b=1 while A+O-b = 2 > D=1: held back, no GRANT", repr(r1))
    a = P[0].update(3, 2, 2, grad0)
    check(a is not None and a["status"] == 0 and a["V"] == 3 and a["delay"] == 0,
          "§15.2 rank 0 update 3 with stamp 2 (after its refused update 2) applied, V 3", repr(a))
    S[0].done(3, 2, 0, 400, 50, 3)      # A = 3: rank 1's pending b=1 can never fit (A-b = 2 > D)
    r1 = S[1].wait_grant(2, 0.5)
    check(r1 is not None and r1["status"] == ERR_STALE,
          "§15.3 the held request (b=1) is refused once A-b = 2 > D (after rank 0's DONE)", repr(r1))
    r1 = S[1].req(3, 3)
    check(r1 is not None and r1["status"] == 0 and r1["g"] == 3,
          "§15.3 rank 1 REQ q=3 with the fresh base 3: GRANT stamp 3", repr(r1))

    # --- hostile datagrams to ina-ps: each dropped with the named counter, no answer
    pr = P[1]
    good = pr.update_dg(2, 3, 3, grad1)
    bad = [
        ("LENGTH", "UPDATE one byte short", good[:-1]),
        ("LENGTH", "UPDATE with members 300", good[:36] + struct.pack(">I", 300) + good[40:]),
        ("TOKEN", "UPDATE with a forged token", pr.update_dg(2, 3, 3, grad1, token=pr.token ^ 0x5A5A)),
        ("SESSION", "UPDATE with another session", pr.update_dg(2, 3, 3, grad1, session=pr.session + 77)),
        ("NO_JOB", "UPDATE for job id 16 (not active)", pr.update_dg(2, 3, 3, grad1, job=16)),
        ("RANK", "UPDATE with rank 5 >= N", pr.update_dg(2, 3, 3, grad1, rank=5)),
        ("ORDER", "UPDATE with a base b=9 > V", pr.update_dg(2, 9, 3, grad1)),
        ("ORDER", "UPDATE with id last+2", pr.update_dg(3, 3, 3, grad1)),
        ("ORDER", "UPDATE with stamp G+20 (beyond the 16 held)", pr.update_dg(2, 3, 23, grad1)),
        ("ORDER", "UPDATE with a stamp already taken (2)", pr.update_dg(2, 3, 2, grad1)),
        ("SOURCE", "UPDATE for rank 1 from rank 0's address", None),
    ]
    c1 = ps_counters(ps_m)
    for ctr, what, dg in bad:
        c0 = c1
        if dg is None:
            P[0].sock.send(pr.update_dg(2, 3, 3, grad1))
            ans = P[0].sock.recv(0.1)
        else:
            pr.sock.send(dg)
            ans = pr.sock.recv(0.1)
        c1 = ps_counters(ps_m)
        delta = c1["drop_" + ctr] - c0["drop_" + ctr]
        applied = c1["updates_applied"] - c0["updates_applied"]
        check(ans is None and delta == 1 and applied == 0,
              "§15.2/§14.2.3 %s: dropped (%s +1), no answer, nothing applied" % (what, ctr),
              "answer=%r %s+%d applied+%d" % (ans and ans["kind"], ctr, delta, applied))
    a = P[1].update(2, 3, 3, grad1)
    V, vals = P[1].pull(KEYS)
    want = {k: [-(2 * grad0[k][j] + 2 * grad1[k][j]) for j in range(DIM)] for k in KEYS}
    check(a is not None and a["status"] == 0 and a["V"] == 4 and V == 4 and vals == want,
          "§15.2 after the forged UPDATEs the genuine stamp 3 is applied: V 4, model = -(2·g0 + 2·g1) "
          "(the refused update not applied)",
          "%r V=%r %r want %r" % (a, V, vals, want))
    S[1].done(3, 3, 0, 400, 50, 4)
    time.sleep(0.05)
    # --- an impossible base: the job is at version 4, a REQ claims b = 1000.  §15.3: A is "at
    # least the largest base or version any REQ or DONE reported", so it is granted, and from
    # then on every honest update request (b = 4) is refused at once (A - b > D).
    r = S[0].req(4, 1000)
    r1 = S[1].req(4, 4)
    check(r is not None and r["status"] == 0 and r["g"] == 4 and r["bound"] >= 1000
          and r1 is not None and r1["status"] == ERR_STALE,
          "§15.3 REQ with impossible base 1000 (V is 4): granted, A raised to >= 1000, and an honest REQ "
          "b=4 is then refused -1018 (as specified; see report)", "%r / %r" % (r, r1))
    c = ps_counters(ps_m)
    check(c["delay_violations"] == 0 and c["delay_max"] == 1,
          "§15.2/§15.5 ina-ps delay_violations 0, delay_max 1", "%d %d" % (c["delay_violations"], c["delay_max"]))
    for r in P + S:
        r.sock.close()
    return sp


def test_holdback_and_groups(d, tmp, ps_addr, ps_m):
    """Job 'mlfz', D = 0, world 2; ina-sched --aggregate 2 (§15.7)."""
    NAME, D, DIM, KEYS = "mlfz", 0, 3, [5]
    sp, (sport,) = d.start("ina-sched", ["--job", NAME, "--world", "2", "--max-delay", str(D),
                                         "--aggregate", "2", "--listen", "127.0.0.1:0", "--port-file",
                                         os.path.join(tmp, "sb.port"), "--log-level", "error"],
                           [os.path.join(tmp, "sb.port")])
    saddr = ("127.0.0.1", sport)
    P = [PsRank(ps_addr, NAME, 2, r, DIM, D) for r in range(2)]
    S = [SchedRank(saddr, NAME, r) for r in range(2)]
    res = ps_join_all(P)
    if not check(all(r and r[0] == "ack" for r in res), "§15.1 job mlfz (D=0) joined by both ranks", repr(res)):
        return sp
    # --- fetch requests (§15.3: seq 0xFFFFFFFF), D = 0: one grant at a time
    g = S[1].req(1, BASE_AT_GRANT)
    check(g is not None and g["status"] == 0 and g["g"] == 0,
          "§15.3 fetch REQ of rank 1 (O=0 <= D): GRANT stamp 0", repr(g))
    t0 = time.monotonic()
    g0 = S[0].req(1, BASE_AT_GRANT, timeout=0.3)
    check(g0 is None, "§15.3 fetch REQ of rank 0 while rank 1 holds a grant (O=1 > D=0): held back, no GRANT",
          repr(g0))
    V, _ = P[1].pull(KEYS)
    a = P[1].update(1, V, 0, {5: [1.0, 2.0, 3.0]})
    check(a is not None and a["status"] == 0 and a["V"] == 1 and a["delay"] == 0,
          "§15.2 rank 1 sends stamp 0 with the pulled base: applied, V 1", repr(a))
    S[1].done(1, 0, 0, 100, 300, 1)
    g0 = S[0].wait_grant(1, 1.0)
    check(g0 is not None and g0["status"] == 0 and g0["g"] == 1 and time.monotonic() - t0 > 0.25,
          "§15.3 rank 0's held fetch request is granted (stamp 1) once rank 1's DONE arrives", repr(g0))
    V, _ = P[0].pull(KEYS)
    a = P[0].update(1, V, 1, {5: [4.0, 4.0, 4.0]})
    check(V == 1 and a is not None and a["status"] == 0 and a["V"] == 2 and a["delay"] == 0,
          "§15.3 the fetch grant's update (base = version pulled after the GRANT) meets delay 0 <= D", repr(a))
    S[0].done(1, 1, 0, 100, 300, 2)
    time.sleep(0.05)

    # --- §15.7 group grant: two groupable fetch requests pending at the same moment
    g = S[1].req(2, BASE_AT_GRANT, flags=REQ_AGGREGATE)
    check(g is not None and g["status"] == 0 and g["g"] == 2 and g["k"] == 1,
          "§15.7 a groupable fetch REQ alone is granted alone (k 1), stamp 2", repr(g))
    h0 = S[0].req(2, BASE_AT_GRANT, flags=REQ_AGGREGATE, timeout=0.15)
    check(h0 is None, "§15.7 rank 0's groupable REQ waits while stamp 2 is out (D=0)", repr(h0))
    V, _ = P[1].pull(KEYS)
    a = P[1].update(2, V, 2, {5: [1.0, 1.0, 1.0]})
    check(a is not None and a["status"] == 0 and a["V"] == 3, "§15.2 stamp 2 applied, V 3", repr(a))
    # no DONE for q=2: the next REQ ends it (implicit_dones), and both requests wait together
    S[1].sock.send(S[1].req_dg(3, BASE_AT_GRANT, flags=REQ_AGGREGATE))
    gr = [S[0].wait_grant(2, 1.0), S[1].wait_grant(3, 1.0)]
    ok = (all(x is not None and x["status"] == 0 for x in gr) and gr[0]["g"] == gr[1]["g"] == 3
          and gr[0]["k"] == gr[1]["k"] == 2 and sorted([gr[0]["index"], gr[1]["index"]]) == [0, 1])
    check(ok, "§15.7 REQ q=3 ends q=2 implicitly; both waiting requests get one group GRANT: stamp 3, k 2, "
          "indexes 0 and 1", repr(gr))
    if ok:
        leader = 0 if gr[0]["index"] == 0 else 1
        member = 1 - leader
        lq, mq = (2, 3) if leader == 0 else (3, 2)
        V0, _ = P[0].pull(KEYS)
        V1, _ = P[1].pull(KEYS)
        # The members' sum would be made in an ina-switch (§15.7, INT32 MIN of bases and FLOAT32
        # SUM); the server sees only the leader's UPDATE, so this peer sums locally.
        ga, gb = [0.5, 1.0, -2.0], [0.25, 3.0, 2.0]
        s = [x + y for x, y in zip(ga, gb)]
        c0 = ps_counters(ps_m)
        next_u = {0: 2, 1: 3}
        lu = next_u[leader]
        a = P[leader].update(lu, min(V0, V1), 3, {5: s}, members=2)
        c1 = ps_counters(ps_m)
        check(a is not None and a["status"] == 0 and a["V"] == 4 and a["delay"] == 0
              and c1["updates_aggregated"] - c0["updates_aggregated"] == 1
              and c1["aggregated_members"] - c0["aggregated_members"] == 2,
              "§15.7/§15.2 leader's UPDATE with members 2 (the sum) applied as one version (V 4), "
              "updates_aggregated +1, aggregated_members +2", repr(a))
        V, vals = P[member].pull(KEYS)
        want = [-(p + x) for p, x in zip([6.0, 7.0, 8.0], s)]   # earlier: [1,2,3]+[4,4,4]+[1,1,1]
        check(V == 4 and vals == {5: want}, "§15.7 the model took the group's sum once: %r" % want,
              "V=%r %r" % (V, vals))
        S[member].done(mq, 3, DONE_MEMBER, 200, 300, 4)
        S[leader].done(lq, 3, 0, 200, 300, 4)
        time.sleep(0.05)
        # the group counted once in O: with D = 0 a new fetch request is granted only if O = 0
        g = S[member].req(mq + 1, BASE_AT_GRANT)
        check(g is not None and g["status"] == 0 and g["g"] == 4 and g["k"] == 1,
              "§15.7 after the member's and the leader's DONE, O is 0 again: next fetch REQ granted stamp 4",
              repr(g))
        if g:
            V, _ = P[member].pull(KEYS)
            a = P[member].update(next_u[member], V, 4, {5: [0.0, 0.0, 1.0]})
            check(a is not None and a["status"] == 0 and a["V"] == 5,
                  "§15.7 the member's update id did not advance in the group: its next id %d applied, V 5"
                  % next_u[member], repr(a))
            S[member].done(mq + 1, 4, 0, 100, 100, 5)
    for r in P + S:
        r.sock.close()
    return sp


def test_ps_join_rules(ps_addr, ps_m):
    """§15.1 PS_JOIN mode and max_delay rules."""
    a = PsRank(ps_addr, "mlfbad", 1, 0, 2, 1, mode=2)
    r = ps_join_all([a], 1.0)[0]
    check(r == ("nak", ERR_NOTSUP), "§15.1 PS_JOIN with mode 2 refused PS_JOIN_NAK NOTSUP (-1007)", repr(r))
    a.sock.close()
    x = PsRank(ps_addr, "mlfmis", 2, 0, 2, 1)
    y = PsRank(ps_addr, "mlfmis", 2, 1, 2, 2)
    x.sock.send(x.join_datagram())
    time.sleep(0.05)
    r = ps_join_all([y], 1.0)[0]
    check(r == ("nak", ERR_MISMATCH), "§15.1 a rank with another max_delay gets PS_JOIN_NAK MISMATCH (-1005)",
          repr(r))
    x.sock.close()
    y.sock.close()
    # §15.1: UPDATE in a SYNC job is dropped MODE
    s = PsRank(ps_addr, "mlfsync", 1, 0, 2, 0, mode=0)
    r = ps_join_all([s], 1.0)[0]
    if check(r is not None and r[0] == "ack", "§14.2.2 a SYNC job (mode 0) joins", repr(r)):
        c0 = ps_counters(ps_m)
        s.sock.send(s.update_dg(1, 0, STAMP_NONE, {1: [1.0, 1.0]}))
        ans = s.sock.recv(0.15)
        c1 = ps_counters(ps_m)
        check(ans is None and c1["drop_MODE"] - c0["drop_MODE"] == 1 and c1["updates_applied"] == c0["updates_applied"],
              "§15.1 UPDATE in a SYNC job: dropped MODE, no answer", "%r MODE+%d" % (
                  ans and ans["kind"], c1["drop_MODE"] - c0["drop_MODE"]))
    s.sock.close()


def test_unbounded(ps_addr, ps_m):
    """§15.1/§15.2 step 4: max_delay 255 is no bound; 254 still bounds."""
    for D in (254, 255):
        name = "mlfub%d" % D
        a, b = PsRank(ps_addr, name, 2, 0, 2, D), PsRank(ps_addr, name, 2, 1, 2, D)
        res = ps_join_all([a, b])
        if not check(all(r and r[0] == "ack" and r[1][8] == D for r in res),
                     "§15.1 a STALE job with max_delay %d joins (D echoed)" % D, repr(res)):
            continue
        # rank 0 alone moves the version to 300 with count-0 updates (§15.2: count 0 is valid)
        ok = True
        for u in range(1, 301):
            r = a.update(u, u - 1, STAMP_NONE, {})
            ok = ok and r is not None and r["status"] == 0 and r["V"] == u
        check(ok, "§15.2 300 count-0 updates of rank 0 each applied on the newest version (D=%d)" % D)
        c0 = ps_counters(ps_m)
        r = b.update(1, 0, STAMP_NONE, {7: [1.0, 2.0]})   # computed on version 0: delay 300
        c1 = ps_counters(ps_m)
        if D == 255:
            check(r is not None and r["status"] == 0 and r["delay"] == 300 and r["V"] == 301
                  and c1["updates_applied"] - c0["updates_applied"] == 1 and c1["delay_violations"] == 0,
                  "§15.1/§15.2 step 4: D=255 is no bound: an update 300 versions behind is applied (V 301), "
                  "no delay violation", repr(r))
            V, vals = b.pull([7])
            check(V == 301 and vals == {7: [-1.0, -2.0]},
                  "§15.2 the unbounded update changed the model (lr 1): V 301", "%r %r" % (V, vals))
        else:
            check(r is not None and r["status"] == ERR_STALE and r["delay"] == 300 and r["V"] == 300,
                  "§15.2 step 4: D=254 refuses delay 300 (-1018), V stays 300", repr(r))
        r = b.update(2, (r["V"] if r else 300) - 255, STAMP_NONE, {})   # a delay of exactly 255
        check(r is not None and r["delay"] == 255 and (r["status"] == 0) == (D == 255),
              "§15.2 step 4: delay 255 %s with D=%d" % ("applied" if D == 255 else "refused", D), repr(r))
        a.sock.close()
        b.sock.close()


def test_chain(d, tmp, verbose_ctr=False):
    """§15.8: primary --chain-to replica; worker UPDATEs go to the primary only."""
    global WAITING
    NAME, D, DIM, KEYS = "mlfc", 1, 2, [7, 8]
    pport = free_port()
    rp, (rport, rm) = d.start("ina-ps", ["--listen", "127.0.0.1:0", "--port-file", os.path.join(tmp, "rep.port"),
                                         "--chain-from", "127.0.0.1:%d" % pport, "--metrics", "127.0.0.1:0",
                                         "--metrics-port-file", os.path.join(tmp, "rep.mport"), "--quiet"],
                              [os.path.join(tmp, "rep.port"), os.path.join(tmp, "rep.mport")])
    pp, (pport2, pm) = d.start("ina-ps", ["--listen", "127.0.0.1:%d" % pport, "--port-file",
                                          os.path.join(tmp, "pri.port"), "--chain-to", "127.0.0.1:%d" % rport,
                                          "--metrics", "127.0.0.1:0", "--metrics-port-file",
                                          os.path.join(tmp, "pri.mport"), "--quiet"],
                               [os.path.join(tmp, "pri.port"), os.path.join(tmp, "pri.mport")])
    paddr, raddr = ("127.0.0.1", pport), ("127.0.0.1", rport)
    Pp = [PsRank(paddr, NAME, 2, r, DIM, D) for r in range(2)]
    Pr = [PsRank(raddr, NAME, 2, r, DIM, D, nonce=Pp[r].nonce) for r in range(2)]
    res = ps_join_all(Pp) + ps_join_all(Pr)
    if not check(all(r and r[0] == "ack" for r in res), "§15.8 both ranks join the primary and the replica",
                 repr(res)):
        return
    g0, g1 = grad_of(1, KEYS, DIM), grad_of(3, KEYS, DIM)
    # stamp 0 from rank 0, stamp 1 from rank 1, to the primary only
    WAITING = "chain: outcome of stamp 0 from the primary"
    Pp[0].sock.send(Pp[0].update_dg(1, 0, 0, g0))
    first = Pp[0].wait_ack(1, 1.0)
    fin = first if first and first["status"] != HELD else Pp[0].wait_ack(1, 1.5, want_final=True)
    check(fin is not None and fin["status"] == 0 and fin["V"] == 1 and fin["stamp"] == 0,
          "§15.8 primary answers stamp 0's outcome (applied, V 1) after the replica's CHAIN_ACK "
          "(first answer: %s)" % ("HELD" if first and first["status"] == HELD else
                                  (first and first["status"])), repr(fin))
    a = Pp[1].update(1, 0, 1, g1, timeout=2.0)
    check(a is not None and a["status"] == 0 and a["V"] == 2 and a["delay"] == 1,
          "§15.8 stamp 1 (b=0) through the chain: applied at delay 1, V 2", repr(a))
    Vp, vp = Pp[0].pull(KEYS)
    Vr, vr = Pr[0].pull(KEYS)
    want = {k: [-(g0[k][j] + g1[k][j]) for j in range(DIM)] for k in KEYS}
    check(Vp == Vr == 2 and vp == vr == want,
          "§15.8 the replica, fed only by forwards, equals the primary: version 2, same values",
          "primary %r %r replica %r %r" % (Vp, vp, Vr, vr))
    cp, cr = ps_counters(pm), ps_counters(rm)
    check(cp["chain_forwarded"] == 2 and cr["chain_fwd_received"] >= 2 and cr["chain_acks_sent"] >= 2
          and cp["chain_acks"] >= 1 and cp["chain_mismatch"] == 0 and cp["chain_broken"] == 0,
          "§15.8 counters: chain_forwarded 2, replica chain_fwd_received/chain_acks_sent >= 2, no mismatch",
          "fwd %d rcv %d sent %d acks %d" % (cp["chain_forwarded"], cr["chain_fwd_received"],
                                              cr["chain_acks_sent"], cp["chain_acks"]))
    # forged CHAIN_FWD from a worker's address to the replica; forged CHAIN_ACK to the primary
    fwd = (hdr(CHAIN_FWD, Pp[0].job, 0, Pp[0].session, Pp[0].token, slot=2, seq=2, count=len(g0))
           + name32(NAME) + struct.pack(">II", 2, 0) + entries(g0, DIM))
    ack = (hdr(CHAIN_ACK, Pp[0].job, RANK_SWITCH, Pp[0].session, Pp[0].token, slot=2, seq=3)
           + struct.pack(">iIIII", 0, 3, 0, 2, 3))
    Pr[0].sock.send(fwd)
    Pp[0].sock.send(ack)
    time.sleep(0.1)
    cp2, cr2 = ps_counters(pm), ps_counters(rm)
    Vr, vr = Pr[0].pull(KEYS)
    check(cr2["drop_CHAIN_SOURCE"] - cr["drop_CHAIN_SOURCE"] == 1 and cp2["drop_CHAIN_SOURCE"] - cp["drop_CHAIN_SOURCE"] == 1
          and Vr == 2 and vr == want,
          "§15.8 a CHAIN_FWD and a CHAIN_ACK from a worker's address are dropped CHAIN_SOURCE; replica unchanged",
          "replica +%d primary +%d V=%r" % (cr2["drop_CHAIN_SOURCE"] - cr["drop_CHAIN_SOURCE"],
                                            cp2["drop_CHAIN_SOURCE"] - cp["drop_CHAIN_SOURCE"], Vr))
    for r in Pp + Pr:
        r.sock.close()


# ================================================================ §15.9 membership and failures
def fnv1a64(h, data):
    for byte in data:
        h = ((h ^ byte) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def digest_of(model):
    """§15.9.2: sum mod 2^64 over stored keys of FNV-1a-64(key BE, values as binary32 BE)."""
    total = 0
    for key, vals in model.items():
        h = fnv1a64(0xCBF29CE484222325, struct.pack(">Q", key))
        h = fnv1a64(h, struct.pack(">%df" % len(vals), *vals))
        total = (total + h) & 0xFFFFFFFFFFFFFFFF
    return total


STATE = struct.Struct(">32sIIIIIIII HHQ 32s32s")   # §15.9.2 PS_STATE body, 140 bytes
assert STATE.size == 140


class Link:
    """One unconnected UDP socket: ina-sched's side toward ina-ps, or a fake ina-ps."""

    def __init__(self):
        self.s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.s.bind(("127.0.0.1", 0))
        self.port = self.s.getsockname()[1]
        self.q = 0

    def sendto(self, data, addr):
        self.s.sendto(data, addr)

    def recv(self, timeout, want=None):
        end = time.monotonic() + timeout
        while True:
            left = end - time.monotonic()
            if left <= 0:
                return None, None
            self.s.settimeout(left)
            try:
                data, frm = self.s.recvfrom(65536)
            except socket.timeout:
                return None, None
            except ConnectionRefusedError:
                continue
            h = parse(data)
            if h is not None and (want is None or want(h)):
                h["raw"] = data
                return h, frm

    def sync_dg(self, name, action, arg, n=1, length=None):
        # §15.9.2 PS_SYNC: rank 0xFFFF, slot q, body name, action, argument, count (44 B)
        self.q += 1
        dg = hdr(PS_SYNC, rank=RANK_SWITCH, slot=self.q) + name32(name) + struct.pack(">III", action, arg, n)
        return dg if length is None else dg[:length]

    def sync(self, addr, name, action, arg, n=1, timeout=1.0):
        """PS_SYNC to addr; its PS_STATE decoded (and any PS_REPLAY that came first)."""
        global WAITING
        WAITING = "PS_STATE for action %d arg %d" % (action, arg)
        self.sendto(self.sync_dg(name, action, arg, n), addr)
        q, replay = self.q, None
        while True:
            h, frm = self.recv(timeout, lambda h: h["kind"] in (PS_STATE, PS_REPLAY))
            if h is None:
                return None, replay
            if h["kind"] == PS_REPLAY:
                replay = h
                continue
            if h["slot"] == q:
                return decode_state(h), replay


def decode_state(h):
    f = STATE.unpack_from(h["body"], 0)
    keys = ("name", "action", "arg", "result", "run", "V", "G", "held", "flags", "world",
            "start", "digest", "joined", "left")
    st = dict(zip(keys, f))
    st["len"], st["seq"], st["rank"] = h["len"], h["seq"], h["rank"]
    st["joined_set"] = {r for r in range(256) if st["joined"][r // 8] >> (r % 8) & 1}
    st["left_set"] = {r for r in range(256) if st["left"][r // 8] >> (r % 8) & 1}
    return st


def test_elastic(ps_addr, ps_m):
    """§15.9.1: PS_JOIN start M < N; later ranks join the running job; a rank used once."""
    NAME, DIM = "mlfe", 2
    c0 = ps_counters(ps_m)
    P = [PsRank(ps_addr, NAME, 3, r, DIM, 1, start=2) for r in range(3)]
    res = ps_join_all(P[:2])
    ok = all(r and r[0] == "ack" for r in res)
    check(ok and all(r[1][19] == 2 for r in res),
          "§15.9.1 world 3, start 2: both starting ranks get PS_JOIN_ACK echoing start 2", repr(res))
    if not ok:
        return
    r2 = ps_join_all([P[2]])[0]
    check(r2 is not None and r2[0] == "ack" and P[2].session == P[0].session and P[2].token == P[0].token,
          "§15.9.1 rank 2 joins the running job: PS_JOIN_ACK at once, the job's session and token", repr(r2))
    again = PsRank(ps_addr, NAME, 3, 1, DIM, 1, start=2)   # rank 1 restarted: new port, new nonce
    ra = ps_join_all([again], 1.0)[0]
    check(ra == ("nak", ERR_REJECTED),
          "§15.9.1 rank 1 restarted (same IP, new nonce and port): PS_JOIN_NAK REJECTED", repr(ra))
    V, vals = P[0].pull([1, 2])
    c1 = ps_counters(ps_m)
    check(V == 0 and c1["ranks_joined_late"] - c0["ranks_joined_late"] == 1
          and c1["ranks_refused"] - c0["ranks_refused"] == 1,
          "§15.9.1 the job goes on (rank 0 pulls), ranks_joined_late +1, ranks_refused +1",
          "V=%r late+%d refused+%d" % (V, c1["ranks_joined_late"] - c0["ranks_joined_late"],
                                      c1["ranks_refused"] - c0["ranks_refused"]))
    z = PsRank(ps_addr, "mlfe0", 1, 0, DIM, 1, start=0)
    rz = ps_join_all([z])[0]
    check(rz is not None and rz[0] == "ack" and rz[1][19] == 1, "§15.9.1 start 0 is read as N and echoed as N",
          repr(rz))
    sy = PsRank(ps_addr, "mlfes", 2, 0, DIM, 0, mode=0, start=1)
    check(ps_join_all([sy], 1.0)[0] == ("nak", ERR_NOTSUP), "§15.9.1 a SYNC job with start < N: NAK NOTSUP")
    big = PsRank(ps_addr, "mlfeb", 3, 0, DIM, 1, start=4)
    check(ps_join_all([big], 1.0)[0] == ("nak", ERR_REJECTED), "§15.9.1 start > N: NAK REJECTED")
    for r in P + [again, z, sy, big]:
        r.sock.close()


def test_ps_membership(d, tmp):
    """§15.9.2, §15.9.3, §15.2 step 2b: ina-ps --sched played by this peer."""
    global WAITING
    link = Link()
    a_p, (a_port, a_m) = d.start("ina-ps", ["--listen", "127.0.0.1:0", "--port-file", os.path.join(tmp, "ma.port"),
                                            "--sched", "127.0.0.1:%d" % link.port, "--metrics", "127.0.0.1:0",
                                            "--metrics-port-file", os.path.join(tmp, "ma.mport"), "--quiet"],
                                 [os.path.join(tmp, "ma.port"), os.path.join(tmp, "ma.mport")])
    b_p, (b_port, b_m) = d.start("ina-ps", ["--listen", "127.0.0.1:0", "--port-file", os.path.join(tmp, "mb.port"),
                                            "--sched", "127.0.0.1:%d" % link.port, "--metrics", "127.0.0.1:0",
                                            "--metrics-port-file", os.path.join(tmp, "mb.mport"), "--quiet"],
                                 [os.path.join(tmp, "mb.port"), os.path.join(tmp, "mb.mport")])
    A_addr, B_addr = ("127.0.0.1", a_port), ("127.0.0.1", b_port)
    NAME, D, DIM, KEYS = "mlfm", 2, 2, [3, 4]
    A = [PsRank(A_addr, NAME, 3, r, DIM, D) for r in range(3)]
    B = [PsRank(B_addr, NAME, 3, r, DIM, D, nonce=A[r].nonce) for r in range(3)]
    res = ps_join_all(A) + ps_join_all(B)
    if not check(all(r and r[0] == "ack" for r in res), "§15.9 three ranks join two servers started with --sched",
                 repr(res)):
        return
    st, _ = link.sync(A_addr, NAME, SYNC_STATE, 0)
    check(st is not None and st["len"] == 172 and st["rank"] == RANK_SWITCH and st["V"] == 0 and st["G"] == 0
          and st["world"] == 3 and st["start"] == 3 and st["joined_set"] == {0, 1, 2} and not st["left_set"]
          and st["digest"] == 0 and st["result"] == FATE_WAITING and st["action"] == SYNC_STATE,
          "§15.9.2 PS_STATE of a new job: 172 bytes, V 0, G 0, N 3, M 3, ranks 0..2 joined, digest 0, "
          "stamp 0 WAITING", repr(st and {k: st[k] for k in ("len", "V", "G", "world", "start", "digest", "result")}))
    g0, g1, g2, g3 = (grad_of(k, KEYS, DIM) for k in (1, 2, 3, 4))
    for S in (A, B):
        a = S[0].update(1, 0, 0, g0)
        check(a is not None and a["status"] == 0 and a["V"] == 1, "§15.2 stamp 0 applied at %s" %
              ("the primary" if S is A else "the replica"), repr(a))
        S[2].sock.send(S[2].update_dg(1, 0, 2, g2))
        a = S[2].wait_ack(1, 1.0)
        check(a is not None and a["status"] == HELD, "§15.2 stamp 2 held (stamp 1's worker died)", repr(a))
    st, _ = link.sync(A_addr, NAME, SYNC_STATE, 2)
    check(st is not None and st["result"] == FATE_HELD and st["held"] == 1 << 1 and st["V"] == 1 and st["G"] == 1,
          "§15.9.2 fate of stamp 2: HELD, held bit 1 (G + 1), V 1, G 1", repr(st and (st["result"], st["held"])))
    st, _ = link.sync(A_addr, NAME, SYNC_STATE, 1)
    check(st is not None and st["result"] == FATE_WAITING, "§15.9.2 fate of stamp 1: WAITING")
    st, _ = link.sync(A_addr, NAME, SYNC_VOID, 1, 1)
    check(st is not None and st["result"] == FATE_VOIDED and st["run"] == 1 and st["G"] == 3 and st["V"] == 2,
          "§15.9.2 VOID 1: voided (run 1), the held stamp 2 taken at once: G 3, V 2",
          repr(st and {k: st[k] for k in ("result", "run", "G", "V")}))
    a = A[2].wait_ack(1, 1.0, want_final=True)
    check(a is not None and a["status"] == 0 and a["V"] == 2 and a["delay"] == 1,
          "§15.9.2 the held update's outcome goes to its rank unasked (applied, V 2, delay 1)", repr(a))
    c0 = ps_counters(a_m)
    a = A[1].update(1, 0, 1, g1)
    a2 = A[1].update(1, 0, 1, g1)
    c1 = ps_counters(a_m)
    check(a is not None and a["status"] == VOIDED and a["V"] == 2 and a["delay"] == 0 and a["stamp"] == 1
          and a2 is not None and a2["status"] == VOIDED and c1["updates_voided"] - c0["updates_voided"] == 1
          and c1["update_dups"] - c0["update_dups"] == 1 and c1["updates_applied"] == c0["updates_applied"],
          "§15.2 step 2b: the voided stamp's late update is answered VOIDED (V 2, delay 0), a copy the same, "
          "nothing applied", "%r %r" % (a, a2))
    st, _ = link.sync(B_addr, NAME, SYNC_VOID, 1, 1)    # the void repeated at the replica
    b2 = B[2].wait_ack(1, 1.0, want_final=True)
    sa, _ = link.sync(A_addr, NAME, SYNC_STATE, 0)
    check(st is not None and st["result"] == FATE_VOIDED and b2 is not None and b2["status"] == 0
          and sa is not None and st["G"] == sa["G"] == 3 and st["V"] == sa["V"] == 2 and st["digest"] == sa["digest"],
          "§15.9.4 the void repeated at the replica: the same stamps, version and digest as the primary",
          repr(st and sa and (st["G"], sa["G"], st["digest"], sa["digest"])))
    V, model = A[0].pull(KEYS)
    check(sa is not None and V == 2 and digest_of(model) == sa["digest"],
          "§15.9.2 the digest is the text's FNV-1a sum over the stored keys of the pulled model",
          "%x vs %x" % (digest_of(model or {}), sa and sa["digest"] or 0))
    st, _ = link.sync(A_addr, NAME, SYNC_STATE, 0)
    check(st is not None and st["result"] == FATE_TAKEN, "§15.9.2 fate of stamp 0: TAKEN")
    # stamp 3 reaches the primary only (its worker died before the replica had it): replayed
    a = A[0].update(2, 2, 3, g3)
    check(a is not None and a["status"] == 0 and a["V"] == 3, "§15.2 stamp 3 applied at the primary", repr(a))
    st, rp = link.sync(A_addr, NAME, SYNC_REPLAY, 3)
    want_body = name32(NAME) + struct.pack(">II", 3, 0) + entries(g3, DIM)
    check(st is not None and st["result"] == FATE_TAKEN and st["run"] == 1 and rp is not None
          and rp["rank"] == 0 and rp["slot"] == 2 and rp["seq"] == 2 and rp["count"] == len(KEYS)
          and rp["body"] == want_body,
          "§15.9.3 REPLAY 3: a PS_REPLAY (rank 0, u 2, b 2, the name and the UPDATE's body) before the "
          "PS_STATE (TAKEN, run 1)", repr(st and (st["result"], st["run"])) + " " + repr(rp and (rp["rank"], rp["slot"])))
    if rp is not None:
        link.sendto(rp["raw"], B_addr)
        b = B[0].wait_ack(2, 1.0, want_final=True)
        sb, _ = link.sync(B_addr, NAME, SYNC_STATE, 0)
        sa, _ = link.sync(A_addr, NAME, SYNC_STATE, 0)
        check(b is not None and b["status"] == 0 and b["V"] == 3 and sb is not None and sa is not None
              and sb["G"] == sa["G"] == 4 and sb["digest"] == sa["digest"],
              "§15.9.3 the replica takes the PS_REPLAY as rank 0's update (answered to rank 0): in step again",
              repr(b) + repr(sb and sa and (sb["G"], sa["G"])))
    st, rp = link.sync(A_addr, NAME, SYNC_REPLAY, 0)
    check(st is not None and st["run"] == 0 and rp is None,
          "§15.9.2 REPLAY of a stamp whose rank has sent a later update: none (run 0)")
    st, _ = link.sync(A_addr, NAME, SYNC_DEPART, 1)
    check(st is not None and st["left_set"] == {1} and st["joined_set"] == {0, 1, 2},
          "§15.9.2 DEPART 1: rank 1 left", repr(st and st["left_set"]))
    # forged and malformed
    c0 = ps_counters(a_m)
    A[0].sock.send(link.sync_dg(NAME, SYNC_VOID, 4, 1))          # from a rank's address
    link.sendto(link.sync_dg(NAME, SYNC_STATE, 0, length=75), A_addr)
    link.sendto(link.sync_dg(NAME, 4, 0), A_addr)
    link.sendto(link.sync_dg(NAME, SYNC_VOID, 4, 65), A_addr)
    link.sendto(link.sync_dg(NAME, SYNC_VOID, 4, 0), A_addr)
    h, _ = link.recv(0.2)
    c1 = ps_counters(a_m)
    check(h is None and c1["drop_SCHED_SOURCE"] - c0["drop_SCHED_SOURCE"] == 1
          and c1["drop_SCHED_LENGTH"] - c0["drop_SCHED_LENGTH"] == 4,
          "§15.9.2 a PS_SYNC from elsewhere (SCHED_SOURCE), 75 bytes, action 4, count 65 or 0 (SCHED_LENGTH): "
          "dropped, no answer", "source+%d length+%d" % (c1["drop_SCHED_SOURCE"] - c0["drop_SCHED_SOURCE"],
                                                       c1["drop_SCHED_LENGTH"] - c0["drop_SCHED_LENGTH"]))
    st, _ = link.sync(A_addr, "nosuch", SYNC_VOID, 0, 1)
    check(st is not None and st["result"] == FATE_NO_JOB and st["G"] == 0 and st["seq"] == 0,
          "§15.9.2 an unknown name: PS_STATE result 5 (NO_JOB), zeros")
    for r in A + B:
        r.sock.close()
    d.stop(a_p)
    d.stop(b_p)


class FakeServer:
    """A server as ina-sched sees it (§15.9.5), answering its PS_SYNCs as told."""

    def __init__(self, name):
        self.link, self.name = Link(), name
        self.V = self.G = 0
        self.joined, self.left, self.digest, self.silent = {0, 1}, set(), 0, False
        self.log = []   # (time, action, arg, n)
        self.fate = {}  # (action, arg) -> (result, run)

    def bits(self, ranks):
        b = bytearray(32)
        for r in ranks:
            b[r // 8] |= 1 << (r % 8)
        return bytes(b)

    def answer(self, h, frm):
        action, arg, n = struct.unpack_from(">III", h["body"], 32)
        self.log.append((time.monotonic(), action, arg, n, h["len"], h["rank"], h["body"][:32]))
        if self.silent:
            return
        if action == SYNC_DEPART:
            self.left.add(arg)
        result, run = self.fate.get((action, arg), (FATE_TAKEN if arg < self.G else FATE_WAITING, 0))
        if result == FATE_NO_JOB:
            body = name32(self.name) + struct.pack(">IIII", action, arg, result, 0) + bytes(140 - 48)
        else:
            body = (name32(self.name) + struct.pack(">IIIIIIII", action, arg, result, run, self.V, self.G, 0, 0)
                    + struct.pack(">HHQ", 2, 2, self.digest) + self.bits(self.joined) + self.bits(self.left))
        self.link.sendto(hdr(PS_STATE, rank=RANK_SWITCH, slot=h["slot"], seq=self.V) + body, frm)


def pump(servers, secs):
    """Answer both fake servers' PS_SYNCs for secs seconds."""
    end = time.monotonic() + secs
    while time.monotonic() < end:
        for s in servers:
            h, frm = s.link.recv(0.005, lambda h: h["kind"] == PS_SYNC)
            if h is not None:
                s.answer(h, frm)


def test_sched_servers(d, tmp):
    """§15.9.5: ina-sched --ps/--replica against two fake servers played by this peer."""
    global WAITING
    NAME = "mlfs"
    P, R = FakeServer(NAME), FakeServer(NAME)
    P.fate[(SYNC_STATE, 0)] = (FATE_NO_JOB, 0)   # a new job: nothing to rebuild
    P.silent = R.silent = True
    args = ["--job", NAME, "--world", "2", "--max-delay", "1", "--ps", "127.0.0.1:%d" % P.link.port,
            "--replica", "127.0.0.1:%d" % R.link.port, "--grant-timeout", "300", "--failover-ms", "800",
            "--listen", "127.0.0.1:0", "--port-file", os.path.join(tmp, "sm.port"), "--log-level", "error"]
    sp, (sport,) = d.start("ina-sched", args, [os.path.join(tmp, "sm.port")])
    S = [SchedRank(("127.0.0.1", sport), NAME, r) for r in range(2)]
    S[0].sock.send(S[0].req_dg(1, BASE_AT_GRANT))
    pump([P, R], 0.35)
    g = S[0].wait_grant(1, 0.01)
    probes = [t for (t, a, arg, n, ln, rk, nm) in P.log if a == SYNC_STATE]
    gaps = [b - a for a, b in zip(probes, probes[1:])]
    check(len(probes) >= 3 and all(0.06 < x < 0.2 for x in gaps) and all(ln == 76 and rk == RANK_SWITCH
                                                                          and nm == name32(NAME)
                                                                          for (_, _, _, _, ln, rk, nm) in P.log),
          "§15.9.5 PS_SYNC STATE probes (76 bytes, rank 0xFFFF, the job's name) every 100 ms", repr(gaps))
    check(g is None, "§15.9.5 recovering: no GRANT before the authority's first PS_STATE", repr(g))
    P.silent = R.silent = False
    P.fate[(SYNC_VOID, 0)] = (FATE_VOIDED, 1)    # rank 0 will die holding stamp 0
    R.fate[(SYNC_VOID, 0)] = (FATE_VOIDED, 1)
    g, t_end = None, time.monotonic() + 0.5
    while g is None and time.monotonic() < t_end:
        pump([P, R], 0.005)
        g = S[0].wait_grant(1, 0.001)
    t0 = time.monotonic()
    check(g is not None and g["status"] == 0 and g["g"] == 0,
          "§15.9.5 the authority says NO_JOB (a new job): the kept REQ is granted stamp 0", repr(g))
    del P.fate[(SYNC_STATE, 0)]
    # no DONE: after its 300 ms lease, VOID 0 at the primary
    while time.monotonic() - t0 < 0.8 and not any(x[1] == SYNC_VOID for x in P.log):
        pump([P, R], 0.005)
    tv = [t for (t, a, arg, n, *_r) in P.log if a == SYNC_VOID and arg == 0 and n == 1]
    check(bool(tv) and 0.25 < tv[0] - t0 < 0.6,
          "§15.9.5 the lease (300 ms) ran out: PS_SYNC VOID 0 (count 1) to the primary",
          "after %.3f s" % (tv[0] - t0 if tv else -1))
    P.G, P.V = 1, 0
    pump([P, R], 0.3)
    rv = [x for x in R.log if x[1] == SYNC_VOID and x[2] == 0 and x[0] >= tv[0]] if tv else []
    deps = [x for x in P.log if x[1] == SYNC_DEPART and x[2] == 0]
    check(bool(rv), "§15.9.5 voided at the authority: the void repeated at the replica (VOID 0 there)")
    check(bool(deps) and 0 in P.left, "§15.9.5 its rank departed: PS_SYNC DEPART 0 after a probe")
    P.log.clear()
    pump([P, R], 0.25)
    check(not any(x[1] == SYNC_DEPART for x in P.log), "§15.9.5 no DEPART once the state shows rank 0 left")
    # rank 1 leaves: no answer
    S[1].sock.send(S[1].req_dg(1, BASE_AT_GRANT, flags=REQ_LEAVE))
    S[1].sock.send(S[1].req_dg(1, BASE_AT_GRANT, flags=REQ_LEAVE))
    check(S[1].wait_grant(1, 0.2) is None, "§15.9.5 a REQ with flag LEAVE (and its copy): no answer")
    # rank 0 returns and takes stamp 1; it dies again; the primary goes silent: the replica
    # becomes the authority and the void is asked of it
    S[0].sock.send(S[0].req_dg(2, BASE_AT_GRANT))
    pump([P, R], 0.05)
    g = S[0].wait_grant(2, 0.3)
    check(g is not None and g["status"] == 0 and g["g"] == 1, "§15.9.5 the departed rank asks again: stamp 1",
          repr(g))
    P.silent = True
    R.fate[(SYNC_VOID, 1)] = (FATE_VOIDED, 1)
    R.log.clear()
    t0 = time.monotonic()
    while time.monotonic() - t0 < 1.6 and not any(x[1] == SYNC_VOID and x[2] == 1 for x in R.log):
        pump([P, R], 0.02)
    rv = [x[0] - t0 for x in R.log if x[1] == SYNC_VOID and x[2] == 1]
    check(bool(rv) and rv[0] > 0.6, "§15.9.5 the primary silent past --failover-ms: stamp 1 voided at the replica, "
          "now the authority", "after %.3f s" % (rv[0] if rv else -1))
    c = sched_counters(d.stop(sp))
    check(c.get("stamps_voided") == 2 and c.get("void_relays") == 1 and c.get("server_failovers") == 1
          and c.get("leaves") == 1 and c.get("ranks_departed", 0) >= 2 and c.get("bound_violations") == 0,
          "§15.5 ina-sched report: stamps_voided 2, void_relays 1, server_failovers 1, leaves 1",
          repr({k: c.get(k) for k in ("stamps_voided", "void_relays", "server_failovers", "leaves",
                                      "ranks_departed")}))
    # a scheduler starting on a running job (V 10, G 12, ranks 0 and 1): both ask, then grants
    P2, R2 = FakeServer(NAME), FakeServer(NAME)
    P2.V, P2.G = 10, 12
    R2.V, R2.G = 10, 12
    args[7], args[9] = "127.0.0.1:%d" % P2.link.port, "127.0.0.1:%d" % R2.link.port
    sp, (sport,) = d.start("ina-sched", args, [os.path.join(tmp, "sm.port")])
    S2 = [SchedRank(("127.0.0.1", sport), NAME, r) for r in range(2)]
    S2[0].sock.send(S2[0].req_dg(5, BASE_AT_GRANT))
    pump([P2, R2], 0.15)
    check(S2[0].wait_grant(5, 0.01) is None, "§15.9.5 recovery: no GRANT while rank 1 has not asked")
    S2[1].sock.send(S2[1].req_dg(9, BASE_AT_GRANT))
    pump([P2, R2], 0.1)
    g0, g1 = S2[0].wait_grant(5, 0.2), S2[1].wait_grant(9, 0.2)
    check(g0 is not None and g1 is not None and {g0["g"], g1["g"]} == {12, 13} and min(g0["bound"], g1["bound"]) == 10,
          "§15.9.5 every live rank asked: grants from the servers' next stamp 12, A from their version 10",
          repr((g0, g1)))
    c = sched_counters(d.stop(sp))
    check(c.get("recoveries") == 1 and c.get("replica_checks", 0) >= 1 and c.get("replica_mismatch") == 0,
          "§15.9.5 report: recoveries 1; the replica checked at the same stamp, no mismatch",
          repr({k: c.get(k) for k in ("recoveries", "replica_checks", "replica_mismatch")}))
    for r in S + S2:
        r.sock.close()


def main():
    global VERBOSE, WAITING
    ap = argparse.ArgumentParser()
    ap.add_argument("--bindir", required=True)
    ap.add_argument("--libdir")
    ap.add_argument("--pythondir")
    ap.add_argument("-v", action="store_true")
    args = ap.parse_args()
    VERBOSE = args.v
    signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(90)
    tmp = tempfile.mkdtemp(prefix="peer_mlf.")
    d = Daemons(args.bindir, tmp)
    try:
        pp, (pport, pm) = d.start("ina-ps", ["--listen", "127.0.0.1:0", "--port-file", os.path.join(tmp, "ps.port"),
                                             "--metrics", "127.0.0.1:0", "--metrics-port-file",
                                             os.path.join(tmp, "ps.mport"), "--quiet"],
                                  [os.path.join(tmp, "ps.port"), os.path.join(tmp, "ps.mport")])
        ps_addr = ("127.0.0.1", pport)
        sa = test_stale_and_sched(d, tmp, ps_addr, pm)
        sb = test_holdback_and_groups(d, tmp, ps_addr, pm)
        test_ps_join_rules(ps_addr, pm)
        test_unbounded(ps_addr, pm)
        # the scheduler's counters: exit report on SIGTERM (§15.5)
        ca = sched_counters(d.stop(sa))
        log("sched A", ca)
        check(ca.get("bound_violations", -1) == 0 and ca.get("refused_stale", 0) == 3
              and ca.get("request_dups", 0) >= 1,
              "§15.5 ina-sched (D=1) report: bound_violations 0, refused_stale 3, request_dups >= 1",
              repr({k: ca.get(k) for k in ("bound_violations", "refused_stale", "request_dups")}))
        for ctr in ("NAME", "LENGTH", "RANK", "SOURCE", "ORDER", "MAGIC", "VERSION", "KIND", "SHORT"):
            check(ca.get("drop_" + ctr, 0) >= 1, "§15.5 ina-sched counted drop %s for the forged datagram" % ctr,
                  "drop_%s = %r" % (ctr, ca.get("drop_" + ctr)))
        cb = sched_counters(d.stop(sb))
        log("sched B", cb)
        check(cb.get("groups") == 1 and cb.get("group_members") == 2 and cb.get("member_dones") == 1
              and cb.get("member_failed") == 0 and cb.get("implicit_dones") == 1 and cb.get("fetch_requests", 0) >= 5,
              "§15.5/§15.7 ina-sched (--aggregate 2) report: groups 1, group_members 2, member_dones 1, "
              "implicit_dones 1", repr({k: cb.get(k) for k in ("groups", "group_members", "member_dones",
                                                                "member_failed", "implicit_dones",
                                                                "fetch_requests", "grants")}))
        test_chain(d, tmp)
        test_elastic(ps_addr, pm)
        test_ps_membership(d, tmp)
        c = ps_counters(pm)
        before = c["drop_SCHED_SOURCE"]
        lk = Link()
        lk.sendto(lk.sync_dg("mlfa", SYNC_STATE, 0), ps_addr)
        h, _ = lk.recv(0.2)
        check(h is None and ps_counters(pm)["drop_SCHED_SOURCE"] - before == 1,
              "§15.9.2 a server without --sched drops PS_SYNC (SCHED_SOURCE), no answer")
        test_sched_servers(d, tmp)
    except Deadline as e:
        print("FAIL - %s" % e, flush=True)
        d.kill_all()
        sys.exit(1)
    except Exception as e:   # a daemon that did not start, a socket error: fail, never hang
        print("FAIL - unexpected error while waiting for %s: %r" % (WAITING, e), flush=True)
        d.kill_all()
        sys.exit(1)
    finally:
        signal.alarm(0)
        d.kill_all()
    print("# %d checks, %d failed" % (NCHECKS, FAILS))
    sys.exit(1 if FAILS else 0)


if __name__ == "__main__":
    main()

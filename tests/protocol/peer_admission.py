#!/usr/bin/env python3
"""Clean-room peer for admission and the job life-cycle at ina-switch.

Written from docs/PROTOCOL.md alone (sections cited inline), covering §4.4 (shared
secret, its cookies and replays), §4.5 (JOIN_WAIT), §4.6 (session keys, tags,
per-packet integrity; with §4.1's multicast rules), §5.1-§5.8 (job states, JOIN
processing in code order, sessions that end once, ranks a stranger cannot take,
WITHDRAW and expiry, parameter agreement, slot admission and WAITING, teardown,
packets of an earlier session, lanes and dataplane threads, fallback address,
eviction) with §2, §3, §4.1-§4.3 and §6 as needed.  It speaks raw UDP to ina-switch
daemons it starts itself, and checks what comes back.

Usage: python3 peer_admission.py --bindir DIR [--libdir DIR] [--pythondir DIR] [-v]
One mixed check runs a libina rank 0 through the Python binding (/usr/bin/python3 with
PYTHONPATH = --pythondir, default /work/cleanroom/python, and INA_LIBRARY = --libdir/libina.so,
default /work/cleanroom/lib) to exercise §5.7 against the real host aggregator.
Standard library only.  Prints one "ok - ..." / "FAIL - ..." line per check and exits
0 only if every check passed.
"""

import argparse
import hashlib
import hmac
import json
import os
import random
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

# ----------------------------------------------------------------------------------
# Wire format
# ----------------------------------------------------------------------------------

# §3: the 32-byte header, every field big-endian (§2 "Byte order"):
# magic u16, version u8, kind u8, job u16, rank u16, session u32, token u32,
# slot u32 (bit 31 = set), seq u32, count u16, exp i16, flags u16, op u8, tag u8.
HDR = struct.Struct(">HBBHHIIIIHhHBB")
MAGIC, VERSION = 0x494E, 1
# §4 packet kinds
K_DATA, K_RESULT = 1, 2
K_JOIN, K_JOIN_ACK, K_JOIN_NAK, K_LEAVE, K_ABORT, K_REDIRECT, K_MIGRATE = 16, 17, 18, 19, 20, 21, 22
K_WITHDRAW, K_JOIN_WAIT, K_TREE_JOIN, K_JOIN_COOKIE = 26, 27, 28, 29
RANK_SWITCH = 0xFFFF                      # §3 rank field of switch → worker packets
FLAG_ABORT = 0x0001                       # §3 flags bit 0 of LEAVE
FLAG_LANES_AUTO = 0x0800                  # §3 flags bit 11 of JOIN / JOIN_ACK, §5.6
FLAG_INTEGRITY = 0x1000                   # §3 flags bit 12 of JOIN / JOIN_ACK, §4.6
# §4.1 JOIN / JOIN_ACK body, 64 bytes from byte 32:
# nonce u64, world u16, elems u16, window u32, sw_version u32, mcast_group u32,
# mcast_port u16, lane u8, nlanes u8, fallback_port u16, wait u16, name 32 bytes.
JBODY = struct.Struct(">QHHIIIHBBHH32s")
# §4.2 NAK body (16 bytes; 24 with the NOSPACE fallback): nonce u64, reason i32,
# port/world u16, nlanes u8, reserved u8, [fallback_addr u32, fallback_port u16, reserved u16]
NAK = struct.Struct(">QiHBB")
# §4.2: in a JOIN_NAK of any reason but MISMATCH, bytes 12..15 are instead sw_version u32.
NAK_VERSION = struct.Struct(">QiI")
NAK_FB = struct.Struct(">IHH")
ABORT_CAUSE = struct.Struct(">BBH4sH")  # §4.2: ABORT body bytes 16..25: cause, 0, rank, addr, port
# §4.5 JOIN_WAIT body, 48 bytes: nonce u64, world u16, joined u16, state u8, 3 reserved,
# 32-byte bitmap.
JWAIT = struct.Struct(">QHHB3s32s")
# §4.3 reason codes on the wire
ERR_TIMEOUT, ERR_ABORTED, ERR_REJECTED, ERR_NOSPACE, ERR_MISMATCH, ERR_PROTO = (
    -1001, -1002, -1003, -1004, -1005, -1008)
ERR_NOTSUP = -1007                        # §4.3: JOIN_NAK of an integrity mismatch (§4.6)

def hdr(kind, job=0, rank=0, session=0, token=0, slot=0, seq=0, count=0, exp=0,
        flags=0, op=0, tag=0, version=VERSION):
    return HDR.pack(MAGIC, version, kind, job, rank, session, token, slot, seq, count,
                    exp, flags, op, tag)


def dec_hdr(d):
    names = ("magic", "version", "kind", "job", "rank", "session", "token", "slot",
             "seq", "count", "exp", "flags", "op", "tag")
    return dict(zip(names, HDR.unpack_from(d)))


def fnv1a32(name):
    # §5.6: FNV-1a-32 starting at 2166136261, h = (h XOR b) * 16777619 mod 2^32
    h = 2166136261
    for b in name.encode():
        h = ((h ^ b) * 16777619) & 0xFFFFFFFF
    return h


def shard_of(name, lane, threads):
    # §5.6: shard = (FNV-1a-32(name) + lane) mod T
    return (fnv1a32(name) + lane) % threads


def op_tag(n, count, p, dtype=0, reduction=0, s=0):
    # §7.2: the tag of packet p of op number n (INT32 = dtype 0, SUM = reduction 0).
    M = (1 << 64) - 1
    x = ((n * 0x9E3779B97F4A7C15) & M) ^ ((count * 0xC2B2AE3D27D4EB4F) & M) ^ dtype \
        ^ (reduction << 8) ^ (s << 16)
    x ^= x >> 31
    x = (x * 0xBF58476D1CE4E5B9) & M
    x ^= x >> 29
    y = ((x + p) * 0xD6E8FEB86659FD93) & M
    return ((y ^ (y >> 32)) >> 24) & 0xFF


def new_nonce():
    # §4.1 / §7.1: random, nonzero, 64 bits
    return random.getrandbits(64) | 1


# ----------------------------------------------------------------------------------
# Test harness
# ----------------------------------------------------------------------------------

VERBOSE = False
RESULTS = []          # (ok, text)
WAITING_FOR = ["start-up"]
GLOBAL_DEADLINE_S = 60


class Deadline(Exception):
    pass


def on_alarm(signum, frame):
    raise Deadline()


def log(*a):
    if VERBOSE:
        print("#", *a, flush=True)


def check(cond, text, detail=""):
    ok = bool(cond)
    RESULTS.append((ok, text))
    if ok:
        print("ok - %s" % text, flush=True)
    else:
        print("FAIL - %s%s" % (text, (": " + detail) if detail else ""), flush=True)
    return ok


def waiting(what):
    WAITING_FOR[0] = what
    log("step:", what)


class Switch:
    """One ina-switch process on 127.0.0.1, with its operator view (TOOLS.md)."""

    def __init__(self, bindir, tmp, args, listen="127.0.0.1:0", secret=None):
        self.tmp = tmp
        tag = "%08x" % random.getrandbits(32)
        self.port_file = os.path.join(tmp, "sw-%s.port" % tag)
        self.mport_file = os.path.join(tmp, "sw-%s.mport" % tag)
        self.log_path = os.path.join(tmp, "sw-%s.log" % tag)
        cmd = [os.path.join(bindir, "ina-switch"), "--listen", listen,
               "--port-file", self.port_file, "--metrics", "127.0.0.1:0",
               "--metrics-port-file", self.mport_file, "--no-shm"] + args
        if secret is not None:
            sf = os.path.join(tmp, "sw-%s.secret" % tag)
            with open(sf, "wb") as f:
                f.write(secret)
            cmd += ["--secret-file", sf]
        self.logf = open(self.log_path, "w+")
        log("start", " ".join(cmd))
        self.proc = subprocess.Popen(cmd, stdout=self.logf, stderr=self.logf)
        waiting("ina-switch to write its port files (%s)" % " ".join(args))
        t_end = time.time() + 5
        self.port = self.mport = None
        while time.time() < t_end:
            try:
                self.port = int(open(self.port_file).read().strip())
                self.mport = int(open(self.mport_file).read().strip())
                break
            except (OSError, ValueError):
                if self.proc.poll() is not None:
                    break
                time.sleep(0.02)
        if self.port is None or self.mport is None:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait(3)
            raise RuntimeError("ina-switch did not start: " + self.read_log()[-2000:])

    def read_log(self):
        try:
            with open(self.log_path) as f:
                return f.read()
        except OSError:
            return ""

    def _url(self, path):
        return "http://127.0.0.1:%d%s" % (self.mport, path)

    def get(self, path):
        waiting("GET %s from the operator view" % path)
        with urllib.request.urlopen(self._url(path), timeout=3) as r:
            return json.loads(r.read())

    def post(self, path):
        waiting("POST %s to the operator view" % path)
        # The operator view knows jobs from the snapshot the dataplane publishes every
        # 100 ms (TOOLS.md): a job younger than that is not found yet (404).
        time.sleep(0.25)
        req = urllib.request.Request(self._url(path), data=b"", method="POST")
        try:
            with urllib.request.urlopen(req, timeout=3) as r:
                return r.status, r.read()
        except urllib.error.HTTPError as e:
            return e.code, e.read()

    def counters(self):
        # TOOLS.md: the threads publish a snapshot every 100 ms; wait past one.
        time.sleep(0.25)
        c = self.get("/counters")["counters"]
        return c

    def jobs(self):
        time.sleep(0.25)
        return self.get("/jobs")["jobs"]

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)     # SIGINT stops at once (§5.4)
            try:
                self.proc.wait(3)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(3)
        self.logf.close()


class Peer:
    """One rank's UDP socket, connect()ed to a switch port (§2 "Worker socket")."""

    def __init__(self, port, ip="127.0.0.1"):
        self.s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.s.bind((ip, 0))
        self.s.connect(("127.0.0.1", port))
        self.addr = self.s.getsockname()
        self.backlog = []

    def reconnect(self, port):
        self.s.connect(("127.0.0.1", port))

    def send(self, b):
        try:
            self.s.send(b)
        except ConnectionRefusedError:
            pass

    def recv_any(self, timeout):
        self.s.settimeout(max(timeout, 0.001))
        try:
            return self.s.recv(70000)
        except socket.timeout:
            return None
        except ConnectionRefusedError:
            return None

    def expect(self, kinds, nonce=None, timeout=1.0, what=""):
        """Next datagram whose kind is in kinds (and, for bodies with a nonce at
        offset 0, whose nonce matches); others are kept in self.backlog."""
        if isinstance(kinds, int):
            kinds = (kinds,)
        waiting("%s (kinds %s)" % (what or "a reply", kinds))
        t_end = time.time() + timeout
        while True:
            left = t_end - time.time()
            if left <= 0:
                return None
            d = self.recv_any(left)
            if d is None:
                return None
            if len(d) < 32:
                self.backlog.append(d)
                continue
            h = dec_hdr(d)
            if h["magic"] != MAGIC or h["kind"] not in kinds:
                self.backlog.append(d)
                continue
            if nonce is not None and len(d) >= 40 and struct.unpack_from(">Q", d, 32)[0] != nonce:
                self.backlog.append(d)
                continue
            return d

    def quiet(self, t=0.2):
        """Collect whatever arrives in t seconds."""
        out = []
        t_end = time.time() + t
        while True:
            left = t_end - time.time()
            if left <= 0:
                return out
            d = self.recv_any(left)
            if d is None:
                return out
            out.append(d)

    def drain(self):
        self.quiet(0.01)
        self.backlog = []

    def close(self):
        self.s.close()


class Rank:
    """A clean-room worker rank: its JOIN body and, after JOIN_ACK, its session."""

    def __init__(self, port, name, rank, world, elems=64, window=8, lane=0, nlanes=1,
                 fb=0, wait=0, flags=0, ip="127.0.0.1", nonce=None):
        self.peer = Peer(port, ip)
        self.name, self.rank, self.world = name, rank, world
        self.elems, self.window, self.lane, self.nlanes = elems, window, lane, nlanes
        self.fb, self.wait, self.flags = fb, wait, flags
        self.nonce = nonce or new_nonce()
        self.cookie = bytes(32)           # §4.4: zeros until the switch hands one out
        self.job = self.session = self.token = None
        self.k = self.W = None
        self.ack = None

    def body(self):
        # §4.1 JOIN body: sw_version informational (100 = 0.1.0), mcast fields 0.
        return JBODY.pack(self.nonce, self.world, self.elems, self.window, 100, 0, 0,
                          self.lane, self.nlanes, self.fb, self.wait, self.name.encode())

    def join_dgram(self, secret=None, seq=0, cookie=None):
        # §3 header use: JOIN carries only rank, seq (remaining join time) and flag bit 11.
        d = hdr(K_JOIN, rank=self.rank, seq=seq, flags=self.flags) + self.body()
        if secret is not None:
            # §4.4: bytes 96..127 the cookie (zeros: none yet), 128..159 HMAC(S, bytes 0..127)
            d += self.cookie if cookie is None else cookie
            d += hmac.new(secret, d[:128], hashlib.sha256).digest()
        return d

    def take_cookie(self, d):
        # §4 JOIN_COOKIE (29): nonce (8), then the cookie (32)
        self.cookie = d[40:72]

    def join(self, secret=None, seq=0):
        """A JOIN.  With a secret and no cookie yet, as §4.4's worker: the switch answers
        JOIN_COOKIE, and the JOIN goes again at once with its cookie.  Returns that
        JOIN_COOKIE, or None."""
        self.peer.send(self.join_dgram(secret, seq))
        if secret is None or self.cookie != bytes(32):
            return None
        d = self.peer.expect(K_JOIN_COOKIE, self.nonce, 1.0, "JOIN_COOKIE for %s rank %d"
                             % (self.name, self.rank))
        if d is not None:
            self.take_cookie(d)
            self.peer.send(self.join_dgram(secret, seq))
        return d

    def withdraw(self, secret=None, twice=True):
        # §4 WITHDRAW (26): the JOIN body of the rank's JOINs; header rank only (§3).
        d = hdr(K_WITHDRAW, rank=self.rank) + self.body()
        if secret is not None:
            d += hmac.new(secret, d[:96], hashlib.sha256).digest()    # §4.4 row WITHDRAW: no cookie
        self.peer.send(d)
        if twice:
            self.peer.send(d)                                         # §5.2: sent twice

    def take_ack(self, d):
        h = dec_hdr(d)
        b = JBODY.unpack_from(d, 32)
        self.ack = (h, b)
        self.job, self.session, self.token = h["job"], h["session"], h["token"]
        self.k, self.W = b[2], b[3]
        return h, b

    def wait_ack(self, timeout=1.0):
        d = self.peer.expect((K_JOIN_ACK, K_JOIN_NAK), self.nonce, timeout,
                             "JOIN_ACK for %s rank %d lane %d" % (self.name, self.rank, self.lane))
        if d is None or dec_hdr(d)["kind"] != K_JOIN_ACK:
            return None
        self.take_ack(d)
        return d

    def data(self, slot, seq, vals, tag=None, n=1, p=None, count=None, session=None,
             token=None):
        # §3/§7.2 DATA: slot index | set << 31 with set = seq & 1, INT32 (exp 0), op 0.
        if tag is None:
            tag = op_tag(n, len(vals), p if p is not None else 0)
        cnt = len(vals) if count is None else count
        d = hdr(K_DATA, job=self.job, rank=self.rank,
                session=self.session if session is None else session,
                token=self.token if token is None else token,
                slot=slot | ((seq & 1) << 31), seq=seq, count=cnt, exp=0, op=0, tag=tag)
        d += struct.pack(">%di" % len(vals), *vals)
        self.peer.send(d)
        return d

    def leave(self, abort=False, session=None, token=None, rank=None):
        d = hdr(K_LEAVE, job=self.job, rank=self.rank if rank is None else rank,
                session=self.session if session is None else session,
                token=self.token if token is None else token,
                flags=FLAG_ABORT if abort else 0)
        self.peer.send(d)
        self.peer.send(d)                                             # §7.1: twice

    def close(self):
        self.peer.close()


def nak_of(d):
    """(header, nonce, reason, port/world, nlanes, fallback (addr, port) or None)"""
    h = dec_hdr(d)
    nonce, reason, pw, nl, _r = NAK.unpack_from(d, 32)
    fb = None
    if len(d) >= 32 + 24:
        a, p, _ = NAK_FB.unpack_from(d, 48)
        fb = (a, p)
    return h, nonce, reason, pw, nl, fb


def jwait_of(d):
    h = dec_hdr(d)
    nonce, world, joined, state, resv, bitmap = JWAIT.unpack_from(d, 32)
    return h, nonce, world, joined, state, resv, bitmap


def bitmap_of(ranks):
    bm = bytearray(32)
    for r in ranks:
        bm[r // 8] |= 1 << (r % 8)          # §4.5: bit r mod 8 of byte r/8, LSB first
    return bytes(bm)


def ip_of(s):
    return struct.unpack(">I", socket.inet_aton(s))[0]


def start_job(ranks, secret=None, timeout=1.5):
    """All ranks JOIN; returns True when every rank got a JOIN_ACK."""
    for r in ranks:
        r.join(secret)
    ok = True
    for r in ranks:
        if r.wait_ack(timeout) is None:
            ok = False
    return ok


def run_round(ranks, slot, seq, vals_by_rank, n=1, p=0):
    """One slot round of an INT32 SUM (§6.2): every rank sends, every rank must get a
    RESULT with the element-wise sum.  Returns the list of sums received (None if lost)."""
    for r, v in zip(ranks, vals_by_rank):
        r.data(slot, seq, v, tag=op_tag(n, len(v), p), n=n, p=p)
    out = []
    for r in ranks:
        d = r.peer.expect(K_RESULT, None, 1.0, "RESULT slot %d seq %d on %s" % (slot, seq, r.name))
        if d is None:
            out.append(None)
            continue
        h = dec_hdr(d)
        if (h["job"], h["session"], h["token"], h["slot"] & 0x7FFFFFFF, h["seq"]) != \
                (r.job, r.session, r.token, slot, seq):
            out.append(("wrong header", h))
            continue
        out.append(list(struct.unpack_from(">%di" % h["count"], d, 32)))
    return out


def expected_sum(vals_by_rank):
    s = [0] * len(vals_by_rank[0])
    for v in vals_by_rank:
        for i, x in enumerate(v):
            s[i] = (s[i] + x + 2 ** 31) % 2 ** 32 - 2 ** 31
    return s


def free_port_run(n):
    """A base port P with P..P+n-1 free on 127.0.0.1 (UDP)."""
    for _ in range(200):
        s0 = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s0.bind(("127.0.0.1", 0))
        base = s0.getsockname()[1]
        socks = [s0]
        ok = base + n < 65536
        for i in range(1, n):
            if not ok:
                break
            s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            try:
                s.bind(("127.0.0.1", base + i))
                socks.append(s)
            except OSError:
                s.close()
                ok = False
        for s in socks:
            s.close()
        if ok:
            return base
    raise RuntimeError("no run of free ports")


# ----------------------------------------------------------------------------------
# The checks
# ----------------------------------------------------------------------------------

def test_secret(bindir, tmp, closers):
    """§4.4 shared-secret extension, §5.2 step 2'."""
    secret = b"clean-room secret \x01\xfe"
    sw = Switch(bindir, tmp, ["--threads", "1"], secret=secret + b"\r\n")
    closers.append(sw.stop)
    # §4.4: S is the file's bytes less trailing CR/LF.
    name = "sec-job"
    r0 = Rank(sw.port, name, 0, 2)
    r1 = Rank(sw.port, name, 1, 2)
    closers.extend([r0.close, r1.close])

    # A JOIN without the 32-byte proof (96 bytes): JOIN_NAK REJECTED (§5.2 step 2').
    r0.join(None)
    d = r0.peer.expect(K_JOIN_NAK, r0.nonce, 1.0, "JOIN_NAK to a JOIN without proof")
    ok = d is not None
    if ok:
        h, nonce, reason, pw, nl, fb = nak_of(d)
        ok = (reason == ERR_REJECTED and h["job"] == 0 and h["session"] == 0
              and h["rank"] == RANK_SWITCH and len(d) >= 48)
    check(ok, "secret: JOIN without proof -> JOIN_NAK REJECTED (nonce echoed, job/session 0)",
          repr(d and nak_of(d)))
    # §4.2: a REJECTED body is 20 bytes, byte 16 the cause: 2 = auth.
    check(d is not None and len(d) >= 32 + 20 and d[32 + 16] == 2,
          "secret: the JOIN_NAK REJECTED says cause 2 (auth) in body byte 16 (4.2)",
          repr(d and d[32:]))

    # A wrong proof: REJECTED.
    bad = r0.join_dgram(b"not the secret")
    r0.peer.send(bad)
    d = r0.peer.expect(K_JOIN_NAK, r0.nonce, 1.0, "JOIN_NAK to a wrong proof")
    check(d is not None and nak_of(d)[2] == ERR_REJECTED and len(d) >= 52 and d[48] == 2,
          "secret: JOIN with a wrong HMAC -> JOIN_NAK REJECTED, cause 2 (auth, 4.2)")

    # The proof keyed with the file's bytes including the trailing CR/LF is wrong (§4.4).
    r0.peer.send(r0.join_dgram(secret + b"\r\n"))
    d = r0.peer.expect(K_JOIN_NAK, r0.nonce, 1.0, "JOIN_NAK to a proof keyed with CRLF")
    check(d is not None and nak_of(d)[2] == ERR_REJECTED,
          "secret: HMAC keyed with the file's trailing CR/LF is refused (S excludes them)")

    # A proof over other bytes (one body byte changed after signing): REJECTED.
    good = bytearray(r0.join_dgram(secret))
    good[32 + 11] ^= 0x01            # elems changed after the HMAC was computed
    r0.peer.send(bytes(good))
    d = r0.peer.expect(K_JOIN_NAK, r0.nonce, 1.0, "JOIN_NAK to a tampered JOIN")
    check(d is not None and nak_of(d)[2] == ERR_REJECTED,
          "secret: JOIN whose body was altered after signing -> REJECTED")

    # The layout before the cookie (the proof at bytes 96..127 over bytes 0..95): refused.
    old = hdr(K_JOIN, rank=0) + r0.body()
    old += hmac.new(secret, old, hashlib.sha256).digest()
    r0.peer.send(old)
    d = r0.peer.expect(K_JOIN_NAK, r0.nonce, 1.0, "JOIN_NAK to a JOIN with its proof at 96")
    check(d is not None and nak_of(d)[2] == ERR_REJECTED,
          "secret: a JOIN of 128 bytes (proof at 96..127, no cookie) -> REJECTED (§4.4)")

    # §5.2 step 2″: a valid proof over a zero cookie -> JOIN_COOKIE, nothing registered.
    c0 = sw.counters()
    r0.peer.send(r0.join_dgram(secret))
    kinds = (K_JOIN_COOKIE, K_JOIN_WAIT, K_JOIN_ACK, K_JOIN_NAK)
    d = r0.peer.expect(kinds, r0.nonce, 1.0, "JOIN_COOKIE")
    ok = d is not None and len(d) >= 72
    if ok:
        h = dec_hdr(d)
        ok = (h["kind"] == K_JOIN_COOKIE and h["rank"] == RANK_SWITCH and h["job"] == 0 and
              h["session"] == 0 and h["token"] == 0)
    check(ok, "secret: a proved JOIN without a cookie -> JOIN_COOKIE (nonce echoed, 40-byte body)",
          repr(d and (dec_hdr(d), len(d))))
    if ok:
        r0.take_cookie(d)
    # The cookie is good only from the source it was made for (§4.4): from another port
    # the switch asks again, with another cookie.
    other = Peer(sw.port)
    closers.append(other.close)
    other.send(r0.join_dgram(secret))
    d = other.expect(kinds, r0.nonce, 1.0, "JOIN_COOKIE to the cookie from another port")
    check(d is not None and dec_hdr(d)["kind"] == K_JOIN_COOKIE and d[40:72] != r0.cookie,
          "secret: the cookie sent from another port is not taken: JOIN_COOKIE, a new cookie",
          repr(d and dec_hdr(d)["kind"]))
    # A cookie changed after the switch made it, under a valid proof: asked again.
    bent = bytearray(r0.cookie)
    bent[31] ^= 0x80
    r0.peer.send(r0.join_dgram(secret, cookie=bytes(bent)))
    d = r0.peer.expect(kinds, r0.nonce, 1.0, "JOIN_COOKIE to a bent cookie")
    check(d is not None and dec_hdr(d)["kind"] == K_JOIN_COOKIE,
          "secret: a cookie the switch did not make -> JOIN_COOKIE", repr(d and dec_hdr(d)))

    # Correct proof and cookie: admitted.  Rank 0 first gets JOIN_WAIT (§5.2 step 9).
    r0.peer.send(r0.join_dgram(secret))
    d = r0.peer.expect((K_JOIN_WAIT, K_JOIN_ACK, K_JOIN_NAK), r0.nonce, 1.0, "JOIN_WAIT (secret)")
    check(d is not None and dec_hdr(d)["kind"] == K_JOIN_WAIT,
          "secret: JOIN with a valid proof and its cookie is registered (JOIN_WAIT)",
          repr(d and dec_hdr(d)))
    c1 = sw.counters()
    check(c1["join_challenges"] - c0["join_challenges"] == 3,
          "secret: the three JOIN_COOKIEs count in join_challenges",
          "+%d" % (c1["join_challenges"] - c0["join_challenges"]))
    r1.join(secret)
    acks = []
    for r in (r0, r1):
        d = r.peer.expect((K_JOIN_ACK, K_JOIN_NAK), r.nonce, 1.0, "JOIN_ACK (secret)")
        acks.append(d)
    ok = all(d is not None and dec_hdr(d)["kind"] == K_JOIN_ACK for d in acks)
    check(ok, "secret: both ranks with valid proofs get JOIN_ACK")
    proofs_ok = ok and all(
        len(d) >= 128 and hmac.compare_digest(
            d[96:128], hmac.new(secret, d[:96], hashlib.sha256).digest()) for d in acks)
    check(proofs_ok, "secret: each JOIN_ACK carries HMAC-SHA256(S, bytes 0..95) at 96..127",
          repr([len(d) for d in acks if d]))
    if ok:
        for r, d in zip((r0, r1), acks):
            r.take_ack(d)
        vals = [[1, -2, 3, 2 ** 31 - 1], [10, 20, -30, 1]]
        res = run_round([r0, r1], 0, 0, vals)
        check(res == [expected_sum(vals)] * 2, "secret: DATA of the admitted job is summed",
              repr(res))
    c = sw.counters()
    check(c["drops"].get("AUTH") == 5, "secret: the five refused JOINs count as drop AUTH",
          "AUTH=%r" % c["drops"].get("AUTH"))

    # WITHDRAW with a secret (§4 WITHDRAW row, §5.2): a proof is required.
    j = [Rank(sw.port, "sec-wd", r, 3) for r in range(3)]
    closers.extend(x.close for x in j)
    j[0].join(secret)
    j[1].join(secret)
    j[0].peer.expect(K_JOIN_WAIT, j[0].nonce, 1.0, "JOIN_WAIT sec-wd r0")
    j[1].peer.expect(K_JOIN_WAIT, j[1].nonce, 1.0, "JOIN_WAIT sec-wd r1")
    cw0 = sw.counters()
    j[1].withdraw(None)                                 # no proof: dropped
    j[1].withdraw(b"wrong secret")                      # wrong proof: dropped
    cw1 = sw.counters()
    check(cw1["drops"]["JOIN"] - cw0["drops"]["JOIN"] == 4 and
          cw1["drops"]["AUTH"] == cw0["drops"]["AUTH"],
          "secret: unproved WITHDRAWs (2 x 2 copies) are dropped with counter JOIN (§5.2)",
          "JOIN +%d AUTH +%d" % (cw1["drops"]["JOIN"] - cw0["drops"]["JOIN"],
                                 cw1["drops"]["AUTH"] - cw0["drops"]["AUTH"]))
    j[0].join(secret)
    d = j[0].peer.expect(K_JOIN_WAIT, j[0].nonce, 1.0, "JOIN_WAIT after unproved WITHDRAW")
    check(d is not None and jwait_of(d)[3] == 2,
          "secret: WITHDRAW without a valid proof is ignored (rank stays registered)",
          repr(d and jwait_of(d)))
    j[1].withdraw(secret)
    time.sleep(0.05)
    j[0].join(secret)
    d = j[0].peer.expect(K_JOIN_WAIT, j[0].nonce, 1.0, "JOIN_WAIT after proved WITHDRAW")
    check(d is not None and jwait_of(d)[3] == 1 and jwait_of(d)[6] == bitmap_of([0]),
          "secret: WITHDRAW with the proof over its bytes 0..95 forgets the registration",
          repr(d and jwait_of(d)))
    j[0].withdraw(secret)
    if not ok:
        return
    # §4.4 "Replay": r0's JOIN, byte for byte as it went (its cookie and proof), sent again
    # after the session ended: refused while its cookie is fresh (§5.2 step 3‴), only
    # challenged once it is stale; either way no job.
    captured = r0.join_dgram(secret)
    r0.leave()
    r1.leave()
    time.sleep(0.05)
    c2 = sw.counters()
    r0.peer.drain()
    r0.peer.send(captured)
    kinds = (K_JOIN_COOKIE, K_JOIN_WAIT, K_JOIN_ACK, K_JOIN_NAK)
    d = r0.peer.expect(kinds, r0.nonce, 1.0, "JOIN_NAK to a replayed JOIN")
    check(d is not None and dec_hdr(d)["kind"] == K_JOIN_NAK and nak_of(d)[2] == ERR_REJECTED,
          "secret: an ended session's JOIN replayed with its fresh cookie -> REJECTED "
          "(step 3‴)", repr(d and dec_hdr(d)["kind"]))
    c3 = sw.counters()
    check(c3["joins_replayed"] - c2["joins_replayed"] == 1, "secret: counted in joins_replayed")
    time.sleep(4.2 - 0.25)                  # past the cookie's 4 s
    r0.peer.send(captured)
    d = r0.peer.expect(kinds, r0.nonce, 1.0, "JOIN_COOKIE to a stale replayed JOIN")
    check(d is not None and dec_hdr(d)["kind"] == K_JOIN_COOKIE,
          "secret: the same JOIN 4 s later -> JOIN_COOKIE only (its cookie is stale)",
          repr(d and dec_hdr(d)["kind"]))
    c4 = sw.counters()
    check(c4["jobs_started"] == c3["jobs_started"] == c2["jobs_started"],
          "secret: no job started by the replays", repr((c2["jobs_started"], c4["jobs_started"])))


def test_end_once(sw, closers):
    """§5.2 step 3‴ and "Sessions end once"; step 6′ (a stranger cannot take a joining rank)."""
    kinds = (K_JOIN_NAK, K_JOIN_WAIT, K_JOIN_ACK)
    # A job runs and ends; its ranks' JOINs, sent again byte for byte from their own
    # addresses, are refused: the session ends once.
    e = [Rank(sw.port, "once", r, 2) for r in range(2)]
    closers.extend(x.close for x in e)
    ok = start_job(e)
    check(ok, "end once: a job of two ranks starts")
    captured = [x.join_dgram() for x in e]
    for x in e:
        x.leave()
    time.sleep(0.05)
    c0 = sw.counters()
    for x, d in zip(e, captured):
        x.peer.drain()
        x.peer.send(d)
    got = []
    for x in e:
        d = x.peer.expect(kinds, x.nonce, 1.0, "JOIN_NAK to a JOIN of an ended session")
        got.append(d and (dec_hdr(d)["kind"], nak_of(d)[2], d[48] if len(d) >= 52 else None))
    check(got == [(K_JOIN_NAK, ERR_REJECTED, 5)] * 2,
          "step 3‴: the JOINs of a session that ended, replayed -> JOIN_NAK REJECTED, cause 5 "
          "(session_ended, 4.2)", repr(got))
    c1 = sw.counters()
    check(c1["joins_replayed"] - c0["joins_replayed"] == 2 and
          c1["drops"]["JOIN"] - c0["drops"]["JOIN"] == 2,
          "step 3‴: counted in joins_replayed and drop JOIN",
          "+%d, +%d" % (c1["joins_replayed"] - c0["joins_replayed"],
                        c1["drops"]["JOIN"] - c0["drops"]["JOIN"]))
    check(c1["jobs_started"] == c0["jobs_started"] and
          all(j["name"] != "once" for j in sw.jobs()),
          "step 3‴: no job of that name after the replay")
    # The job's next incarnation (new nonces) runs as ever, and the old JOIN replayed
    # meanwhile does not end it (step 3‴ comes before step 5″).
    n = [Rank(sw.port, "once", r, 2) for r in range(2)]
    closers.extend(x.close for x in n)
    ok = start_job(n)
    check(ok, "end once: a new incarnation of the job starts")
    e[0].peer.send(captured[0])
    d = e[0].peer.expect(kinds, e[0].nonce, 1.0, "JOIN_NAK to a replay during the new session")
    check(d is not None and nak_of(d)[2] == ERR_REJECTED,
          "step 3‴: a replay from the same host while the new session runs -> REJECTED")
    if ok:
        vals = [[3, 4], [5, -6]]
        res = run_round(n, 0, 0, vals)
        check(res == [expected_sum(vals)] * 2, "end once: the new session is not ended by it",
              repr(res))
        for x in n:
            x.leave()

    # Step 6′: rank 0 of a joining job registered from 127.0.0.1; a JOIN of rank 0
    # from 127.0.0.2 (another host, another nonce) may not take it while it lives.
    t0 = Rank(sw.port, "taken", 0, 2)
    closers.append(t0.close)
    t0.join()
    d = t0.peer.expect(kinds, t0.nonce, 1.0, "JOIN_WAIT taken r0")
    check(d is not None and dec_hdr(d)["kind"] == K_JOIN_WAIT, "takeover: rank 0 registered")
    c2 = sw.counters()
    s0 = Rank(sw.port, "taken", 0, 2, ip="127.0.0.2")
    closers.append(s0.close)
    s0.join()
    d = s0.peer.expect(kinds, s0.nonce, 1.0, "JOIN_NAK to the stranger's JOIN")
    check(d is not None and dec_hdr(d)["kind"] == K_JOIN_NAK and nak_of(d)[2] == ERR_REJECTED,
          "step 6′: a JOIN from another host for a live registered rank -> REJECTED",
          repr(d and dec_hdr(d)["kind"]))
    c3 = sw.counters()
    check(c3["joins_refused_taken"] - c2["joins_refused_taken"] == 1,
          "step 6′: counted in joins_refused_taken")
    # The same host, another port and nonce (a restart there) takes it; rank 1 completes
    # the job with it, and the stranger hears nothing more.
    t0b = Rank(sw.port, "taken", 0, 2)
    t1 = Rank(sw.port, "taken", 1, 2)
    closers.extend([t0b.close, t1.close])
    ok = start_job([t0b, t1])
    check(ok, "step 6′: a restart on the same host takes the rank; the job starts with it")
    check(s0.peer.quiet(0.2) == [], "step 6′: nothing more to the stranger")
    if ok:
        for x in (t0b, t1):
            x.leave()


def session_key(secret, job, session, token):
    # §4.6: K = HMAC-SHA256(S, "ina/session-key/v1" || job (2) || session (4) || token (4))
    return hmac.new(secret, b"ina/session-key/v1" + struct.pack(">HII", job, session, token),
                    hashlib.sha256).digest()


def tag_of(key, d):
    # §4.6: keyed BLAKE2b, key length 32, digest length 16, over every byte before the tag
    return hashlib.blake2b(d, key=key, digest_size=16).digest()


def tag_ok(key, d):
    return len(d) >= 48 and hmac.compare_digest(d[-16:], tag_of(key, d[:-16]))


def test_tags(bindir, tmp, closers):
    """§4.6 per-packet integrity and tags, §5.2 step 2'', §6.1 checks 4 and 11'; §4.1 the
    group's port, source and guard, with a secret's tags on multicast RESULTs."""
    secret = b"tags for the clean room"
    sw = Switch(bindir, tmp, ["--threads", "1", "--integrity"], secret=secret + b"\n")
    closers.append(sw.stop)
    # §4.6 / §5.2 step 2'': a proved JOIN without bit 12 at a switch with --integrity.
    r0 = Rank(sw.port, "tags", 0, 2)
    r1 = Rank(sw.port, "tags", 1, 2, flags=FLAG_INTEGRITY)
    closers.extend((r0.close, r1.close))
    c0 = sw.counters()
    r0.join(secret)
    d = r0.peer.expect((K_JOIN_ACK, K_JOIN_NAK, K_JOIN_WAIT), r0.nonce, 1.0, "NAK NOTSUP")
    check(d is not None and dec_hdr(d)["kind"] == K_JOIN_NAK and nak_of(d)[2] == ERR_NOTSUP,
          "integrity: a JOIN without flag bit 12 at a switch with --integrity -> JOIN_NAK "
          "NOTSUP (-1007)", repr(d and nak_of(d)))
    r0.flags = FLAG_INTEGRITY
    ok = start_job([r0, r1], secret)
    check(ok, "integrity: JOINs with bit 12 and the proof are admitted")
    if not ok:
        return
    acks = [r.ack for r in (r0, r1)]
    check(all(h["flags"] & FLAG_INTEGRITY for h, _ in acks),
          "integrity: every JOIN_ACK has flag bit 12", repr([h["flags"] for h, _ in acks]))
    K = session_key(secret, r0.job, r0.session, r0.token)
    vals = [[5, -7, 2 ** 31 - 1, 0, 9], [1, 2, 3, -4, 2 ** 31 - 1]]
    tags = [op_tag(1, 5, 0)] * 2

    def data(r, v, tag_bytes=None, seq=0):
        d = hdr(K_DATA, job=r.job, rank=r.rank, session=r.session, token=r.token,
                slot=(seq & 1) << 31, seq=seq, count=len(v), tag=op_tag(1, len(v), 0))
        d += struct.pack(">%di" % len(v), *v)
        return d + (tag_of(K, d) if tag_bytes is None else tag_bytes)

    # §6.1 check 4 (length - 16) and 11' (the tag): untagged and wrong-tagged DATA is
    # dropped without a contribution, so the round waits for rank 0.
    r0.peer.send(data(r0, vals[0], b""))                         # untagged: LENGTH
    r0.peer.send(data(r0, vals[0], bytes(16)))                   # wrong tag: MAC
    bad = bytearray(data(r0, vals[0]))
    bad[32] ^= 0x40                                              # changed after tagging
    r0.peer.send(bytes(bad))
    r1.peer.send(data(r1, vals[1]))
    got = r1.peer.expect(K_RESULT, None, 0.4, "no RESULT yet")
    check(got is None, "integrity: untagged, wrongly tagged and altered DATA add nothing "
          "(no RESULT while rank 0's real DATA is missing)", repr(got))
    r0.peer.send(data(r0, vals[0]))
    res = [r.peer.expect(K_RESULT, None, 1.0, "tagged RESULT") for r in (r0, r1)]
    want = expected_sum(vals)
    check(all(d is not None and len(d) == 32 + 4 * 5 + 16 and tag_ok(K, d) and
              list(struct.unpack_from(">5i", d, 32)) == want for d in res),
          "integrity: the RESULT is 32 + 4*count + 16 bytes, tagged BLAKE2b-128 under "
          "HMAC-SHA256(S, label || job || session || token), with the sum",
          repr([len(d) if d else None for d in res]))
    c1 = sw.counters()
    dm = c1["drops"].get("MAC", 0) - c0["drops"].get("MAC", 0)
    dl = c1["drops"]["LENGTH"] - c0["drops"]["LENGTH"]
    check(dm == 2 and dl == 1, "integrity: drop MAC counts the 2 bad tags, LENGTH the "
          "untagged DATA", "MAC +%d LENGTH +%d" % (dm, dl))
    # §4.6: an ABORT of a tagged session is 64 bytes, tagged.
    r0.leave(abort=True)
    d = r1.peer.expect(K_ABORT, None, 1.0, "tagged ABORT")
    check(d is not None and len(d) == 64 and tag_ok(K, d),
          "integrity: the ABORT is 64 bytes (body and tag) and its tag is right",
          repr(d and len(d)))
    sw.stop()

    # §4.6 / §5.2 step 2'': bit 12 at a switch without --integrity.
    sw2 = Switch(bindir, tmp, ["--threads", "1"], secret=secret)
    closers.append(sw2.stop)
    r = Rank(sw2.port, "tags-no", 0, 1, flags=FLAG_INTEGRITY)
    closers.append(r.close)
    r.join(secret)
    d = r.peer.expect((K_JOIN_ACK, K_JOIN_NAK), r.nonce, 1.0, "NAK NOTSUP (no --integrity)")
    check(d is not None and dec_hdr(d)["kind"] == K_JOIN_NAK and nak_of(d)[2] == ERR_NOTSUP,
          "integrity: a JOIN with bit 12 at a switch without --integrity -> JOIN_NAK NOTSUP",
          repr(d and nak_of(d)))
    sw2.stop()

    # §4.1: --multicast needs one listen address.
    rc = subprocess.run([os.path.join(bindir, "ina-switch"), "--listen", "0.0.0.0:0",
                         "--multicast", "--quiet"], stdout=subprocess.DEVNULL,
                        stderr=subprocess.DEVNULL, timeout=10).returncode
    check(rc == 2, "multicast: --listen 0.0.0.0 is refused at start (exit status 2)", rc)
    # §4.1 / §4.6 (a): a secret with --multicast. The group's port is the switch's + 1
    # (one thread); the RESULT comes to the group from the switch's address:port, tagged.
    sw3 = Switch(bindir, tmp, ["--threads", "1", "--multicast"], secret=secret)
    closers.append(sw3.stop)
    m = [Rank(sw3.port, "tags-mc", i, 2) for i in range(2)]
    closers.extend(x.close for x in m)
    ok = start_job(m, secret)
    check(ok, "multicast with a secret: the job is admitted")
    if not ok:
        return
    _h, b = m[0].ack
    group, gport = b[5], b[6]
    check(group == 0xEFFF4900 + m[0].job and gport == sw3.port + 1,
          "multicast: JOIN_ACK names group BASE + job and the group's port = listen port + 1",
          "group %08x port %d (switch port %d)" % (group, gport, sw3.port))
    g = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    closers.append(g.close)
    g.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    g.bind((socket.inet_ntoa(struct.pack(">I", group)), gport))
    g.setsockopt(socket.IPPROTO_IP, socket.IP_ADD_MEMBERSHIP,
                 struct.pack(">I", group) + socket.inet_aton("127.0.0.1"))
    Km = session_key(secret, m[0].job, m[0].session, m[0].token)
    for r, v in zip(m, vals):
        d = hdr(K_DATA, job=r.job, rank=r.rank, session=r.session, token=r.token, slot=0,
                seq=0, count=len(v), tag=op_tag(1, len(v), 0))
        r.peer.send(d + struct.pack(">%di" % len(v), *v))     # DATA untagged: no integrity
    g.settimeout(1.0)
    try:
        d, src = g.recvfrom(70000)
    except socket.timeout:
        d, src = None, None
    check(d is not None and src == ("127.0.0.1", sw3.port) and len(d) == 32 + 20 + 16 and
          tag_ok(Km, d) and list(struct.unpack_from(">5i", d, 32)) == want,
          "multicast with a secret: the group's RESULT comes from the switch's address:port, "
          "tagged under the session key", repr((src, d and len(d))))
    # §4.1: the switch holds its port on every address; another user cannot bind it.
    if os.geteuid() == 0:
        pid = os.fork()
        if pid == 0:
            fails = 0
            try:
                os.setgid(65534)
                os.setuid(65534)
                for addr in ("239.1.2.3", "127.0.0.2", "0.0.0.0", "127.0.0.1"):
                    for opt in (socket.SO_REUSEADDR, socket.SO_REUSEPORT):
                        t = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
                        t.setsockopt(socket.SOL_SOCKET, opt, 1)
                        try:
                            t.bind((addr, sw3.port))
                        except OSError:
                            fails += 1
                        t.close()
            finally:
                os._exit(0 if fails == 8 else 1)
        _, st = os.waitpid(pid, 0)
        check(st == 0, "multicast: another user cannot bind the switch's port on any address "
              "(multicast, other local, wildcard, its own; SO_REUSEADDR or SO_REUSEPORT)", st)
    for r in m:
        r.leave()
    sw3.stop()


def test_join_wait(sw, closers):
    """§4.5 JOIN_WAIT, §5.2 step 7 and 9, WITHDRAW and expiry."""
    name = "jw"
    world = 10
    r = {i: Rank(sw.port, name, i, world) for i in (0, 1, 9)}
    closers.extend(x.close for x in r.values())
    r[0].join()
    d = r[0].peer.expect((K_JOIN_WAIT, K_JOIN_ACK, K_JOIN_NAK), r[0].nonce, 1.0, "JOIN_WAIT 1")
    ok = d is not None and dec_hdr(d)["kind"] == K_JOIN_WAIT
    if ok:
        h, nonce, w, joined, state, resv, bm = jwait_of(d)
        ok = (len(d) == 80 and h["job"] == 0 and h["rank"] == RANK_SWITCH and h["session"] == 0
              and h["token"] == 0 and nonce == r[0].nonce and w == world and joined == 1
              and state == 0 and resv == b"\0\0\0" and bm == bitmap_of([0]))
    check(ok, "JOIN_WAIT: 80 bytes; nonce, world 10, joined 1, state 0, bitmap {0}",
          repr(d and (len(d), jwait_of(d))))

    r[9].join()
    d = r[9].peer.expect(K_JOIN_WAIT, r[9].nonce, 1.0, "JOIN_WAIT rank 9")
    ok = d is not None and jwait_of(d)[2:5] == (world, 2, 0) and \
        jwait_of(d)[6] == bitmap_of([0, 9])
    check(ok, "JOIN_WAIT: rank 9 sets bit 1 of bitmap byte 1; joined 2; answered to the source",
          repr(d and jwait_of(d)))

    # A repeated JOIN of a registered rank does not grow joined (step 7).
    r[0].join()
    d = r[0].peer.expect(K_JOIN_WAIT, r[0].nonce, 1.0, "JOIN_WAIT repeat")
    check(d is not None and jwait_of(d)[3] == 2, "JOIN_WAIT: a repeated JOIN leaves joined at 2",
          repr(d and jwait_of(d)))

    # WITHDRAW that does not match the registration: dropped (counter JOIN).
    c0 = sw.counters()
    wrong = Rank(sw.port, name, 9, world, nonce=r[9].nonce ^ 0x10)      # other nonce
    other = Rank(sw.port, name, 9, world, nonce=r[9].nonce)             # other port
    closers.extend([wrong.close, other.close])
    wrong.withdraw()
    other.withdraw()
    r[0].join()
    d = r[0].peer.expect(K_JOIN_WAIT, r[0].nonce, 1.0, "JOIN_WAIT after bad WITHDRAWs")
    check(d is not None and jwait_of(d)[3] == 2 and jwait_of(d)[6] == bitmap_of([0, 9]),
          "WITHDRAW with another nonce, or from another port, leaves the registration",
          repr(d and jwait_of(d)))
    c1 = sw.counters()
    check(c1["drops"]["JOIN"] - c0["drops"]["JOIN"] == 4 and
          c1["joins_withdrawn"] == c0["joins_withdrawn"],
          "WITHDRAWs that do not match are dropped with counter JOIN (2 x 2 copies)",
          "JOIN +%d withdrawn +%d" % (c1["drops"]["JOIN"] - c0["drops"]["JOIN"],
                                      c1["joins_withdrawn"] - c0["joins_withdrawn"]))

    # The right WITHDRAW: no answer, registration forgotten.
    r[9].withdraw()
    extra = r[9].peer.quiet(0.2)
    check(extra == [], "WITHDRAW gets no answer", repr([dec_hdr(x) for x in extra]))
    r[0].join()
    d = r[0].peer.expect(K_JOIN_WAIT, r[0].nonce, 1.0, "JOIN_WAIT after WITHDRAW")
    check(d is not None and jwait_of(d)[3] == 1 and jwait_of(d)[6] == bitmap_of([0]),
          "WITHDRAW forgets the rank: joined 1, bitmap {0}", repr(d and jwait_of(d)))
    c2 = sw.counters()
    check(c2["joins_withdrawn"] - c1["joins_withdrawn"] == 1,
          "WITHDRAW counted once in joins_withdrawn (the second copy is dropped)",
          "+%d" % (c2["joins_withdrawn"] - c1["joins_withdrawn"]))

    # Expiry at the rank's own deadline: header seq = remaining join time in ms (§3, §5.2).
    r[1].join(seq=150)
    d = r[1].peer.expect(K_JOIN_WAIT, r[1].nonce, 1.0, "JOIN_WAIT rank 1 with deadline")
    check(d is not None and jwait_of(d)[3] == 2, "JOIN with seq = 150 ms registers (joined 2)",
          repr(d and jwait_of(d)))
    time.sleep(0.5)
    r[0].join()
    d = r[0].peer.expect(K_JOIN_WAIT, r[0].nonce, 1.0, "JOIN_WAIT after expiry")
    check(d is not None and jwait_of(d)[3] == 1 and jwait_of(d)[6] == bitmap_of([0]),
          "a registration is forgotten once its deadline (seq ms) passed", repr(d and jwait_of(d)))
    c3 = sw.counters()
    check(c3["joins_expired"] - c2["joins_expired"] == 1, "expiry counted in joins_expired",
          "+%d" % (c3["joins_expired"] - c2["joins_expired"]))

    # Last registration withdrawn: the job is freed and the name is free for another world.
    r[0].withdraw()
    time.sleep(0.05)
    n = Rank(sw.port, name, 0, 2)
    closers.append(n.close)
    n.join()
    d = n.peer.expect((K_JOIN_WAIT, K_JOIN_NAK), n.nonce, 1.0, "JOIN_WAIT of a new world")
    check(d is not None and dec_hdr(d)["kind"] == K_JOIN_WAIT and jwait_of(d)[2] == 2,
          "after the last WITHDRAW the name takes a JOIN with another world size",
          repr(d and dec_hdr(d)))
    n.withdraw()


def test_bad_joins(sw, closers):
    """§5.2 steps 1-3."""
    p = Peer(sw.port)
    closers.append(p.close)
    c0 = sw.counters()

    nak_versions = []

    def nak_for(body, flags=0, rank=0, version=VERSION, what=""):
        nonce = struct.unpack_from(">Q", body, 0)[0]
        p.send(hdr(K_JOIN, rank=rank, flags=flags, version=version) + body)
        d = p.expect((K_JOIN_NAK, K_JOIN_WAIT, K_JOIN_ACK), nonce, 0.6, what)
        if d is None:
            return None
        h = dec_hdr(d)
        if h["kind"] != K_JOIN_NAK:
            return ("kind", h["kind"])
        nak_versions.append(NAK_VERSION.unpack_from(d, 32)[2])
        return h["version"], nak_of(d)[2]

    def b(world=2, elems=64, window=8, lane=0, nlanes=1, name=b"badj"):
        return JBODY.pack(new_nonce(), world, elems, window, 100, 0, 0, lane, nlanes, 0, 0, name)

    cases = [
        ("world_size 0", b(world=0), 0, 0),
        ("world_size 257", b(world=257), 0, 0),
        ("rank = world_size", b(world=2), 0, 2),
        ("empty name", b(name=b""), 0, 0),
        ("elems 0", b(elems=0), 0, 0),
        # §5.2 step 3: 1 <= elems <= INA_MAX_ELEMS = (65507-32)/4 = 16368.  (An earlier text
        # said 16360 there, against its own formula; this peer found it.)
        ("elems 16369", b(elems=16369), 0, 0),
        ("window 0", b(window=0), 0, 0),
        ("window 12 (not a power of 2)", b(window=12), 0, 0),
        ("nlanes 65", b(nlanes=65), 0, 0),
        ("lane = nlanes", b(lane=2, nlanes=2), 0, 0),
        ("flag bit 11 with lane 1", b(lane=1, nlanes=2), FLAG_LANES_AUTO, 0),
    ]
    for what, body, flags, rank in cases:
        got = nak_for(body, flags, rank, what="JOIN_NAK for " + what)
        check(got == (1, ERR_REJECTED), "step 3: JOIN with %s -> JOIN_NAK REJECTED" % what,
              repr(got))
    # step 2: no NUL in the 32 name bytes -> silent drop (counter JOIN)
    body = b(name=b"x" * 32)
    got = nak_for(body, what="silence for a name without NUL")
    check(got is None, "step 2: a name without NUL in 32 bytes is dropped silently", repr(got))
    # step 2: body shorter than 64 bytes -> silent drop
    p.send(hdr(K_JOIN) + b()[:60])
    got = p.quiet(0.2)
    check(got == [], "step 2: a JOIN of 92 bytes is dropped silently", repr(got))
    # step 1: version 2 JOIN with a body: JOIN_NAK PROTO in version 1, nonce echoed.
    got = nak_for(b(), version=2, what="JOIN_NAK PROTO")
    check(got == (1, ERR_PROTO), "step 1: a version-2 JOIN -> version-1 JOIN_NAK PROTO", repr(got))
    # §4.2: those JOIN_NAKs (REJECTED, PROTO) carry the switch's sw_version in bytes 12..15,
    # the one its JOIN_ACK carries (§4.1).
    v = Rank(sw.port, "nakver", 0, 1, window=2)
    closers.append(v.close)
    ack_version = v.ack[1][4] if start_job([v]) else None
    if v.ack:
        v.leave()
    check(ack_version and nak_versions and set(nak_versions) == {ack_version},
          "§4.2: every JOIN_NAK REJECTED or PROTO carries the switch's sw_version (its "
          "JOIN_ACK's, nonzero)", repr((ack_version, sorted(set(nak_versions)))))
    c1 = sw.counters()
    dj = c1["drops"]["JOIN"] - c0["drops"]["JOIN"]
    check(dj == len(cases) + 2, "steps 2-3: refused/dropped JOINs count as drop JOIN",
          "JOIN +%d, expected %d" % (dj, len(cases) + 2))
    check(c1["drops"]["VERSION"] - c0["drops"]["VERSION"] == 1,
          "step 1: the version-2 JOIN counts as drop VERSION")


def test_agreement(sw, closers, max_elems, max_job_slots):
    """§5.3 step 1 (k and W), §4.1 ACK body, §5.2 step 5."""
    a0 = Rank(sw.port, "agree", 0, 2, elems=200, window=128)
    a1 = Rank(sw.port, "agree", 1, 2, elems=150, window=64)
    closers.extend([a0.close, a1.close])
    ok = start_job([a0, a1])
    check(ok, "agreement: both ranks of 'agree' get JOIN_ACK")
    if not ok:
        return None
    exp_k = min(max_elems, 150)
    exp_w = min(max_job_slots, 64)
    check((a0.k, a0.W, a1.k, a1.W) == (exp_k, exp_w, exp_k, exp_w),
          "agreement: k = min(max_elems %d, proposals) = %d, W = min(P, M %d, proposals) = %d"
          % (max_elems, exp_k, max_job_slots, exp_w), repr((a0.k, a0.W, a1.k, a1.W)))
    h0, b0 = a0.ack
    h1, b1 = a1.ack
    same = (h0["job"], h0["session"], h0["token"]) == (h1["job"], h1["session"], h1["token"])
    check(same and 1 <= h0["job"] <= 64 and h0["session"] != 0 and h0["rank"] == RANK_SWITCH,
          "JOIN_ACK: same job id (1..64), nonzero session and token for every rank",
          repr((h0, h1)))
    ok = (b0[0] == a0.nonce and b1[0] == a1.nonce and b0[1] == 2 and b0[5] == 0 and b0[6] == 0
          and b0[7] == 0 and b0[9] == 0 and b0[10] == 0 and b0[11].rstrip(b"\0") == b"agree")
    check(ok, "JOIN_ACK body: own nonce, world, mcast 0, lane 0, fallback 0, wait 0, name",
          repr((b0, b1)))
    check(b0[8] == 1, "JOIN_ACK body: nlanes byte 27 = 1 for a JOIN with nlanes 1", repr(b0[8]))

    # A second job: its own id, another session.
    c0 = Rank(sw.port, "agree2", 0, 2, elems=40, window=8)
    c1 = Rank(sw.port, "agree2", 1, 2, elems=60, window=4, nlanes=0)
    closers.extend([c0.close, c1.close])
    ok = start_job([c0, c1])
    check(ok and (c0.k, c0.W, c1.k, c1.W) == (40, 4, 40, 4) and c0.job != a0.job
          and c0.session != a0.session,
          "agreement: second job gets k 40, W 4, its own job id and session",
          repr((c0.k, c0.W, c0.job, c0.session)))
    if ok:
        # §4.1 nlanes 0 is read as 1 (a worker without lanes).
        check(c1.ack[1][8] in (0, 1), "JOIN_ACK to a JOIN with nlanes 0 echoes 0 or 1",
              repr(c1.ack[1][8]))
        log("nlanes echoed for a JOIN with nlanes 0:", c1.ack[1][8])
        # DATA on the last slot of W = 4 (slots are relative, §3)
        vals = [[5, 6], [7, -8]]
        res = run_round([c0, c1], 3, 0, vals)
        check(res == [expected_sum(vals)] * 2, "agreement: slot W-1 = 3 of the small window works",
              repr(res))
        # slot index W is out of range: dropped SLOT (§6.1 check 12)
        cc0 = sw.counters()
        c0.data(4, 0, [1, 2])
        cc1 = sw.counters()
        check(cc1["drops"]["SLOT"] - cc0["drops"]["SLOT"] == 1,
              "agreement: slot index = granted W is dropped (SLOT)")
        # count > granted k: COUNT
        c0.data(0, 0, list(range(41)))
        cc2 = sw.counters()
        check(cc2["drops"]["COUNT"] - cc1["drops"]["COUNT"] == 1,
              "agreement: count > granted k (41 > 40) is dropped (COUNT)")
        c0.leave()
        c1.leave()

    # §5.2 step 5: the same nonce from the same address while ACTIVE gets the same ACK.
    a1.join()
    d = a1.peer.expect((K_JOIN_ACK, K_JOIN_NAK, K_ABORT), a1.nonce, 1.0, "repeated JOIN_ACK")
    ok = d is not None and dec_hdr(d)["kind"] == K_JOIN_ACK and \
        (dec_hdr(d)["session"], dec_hdr(d)["token"], dec_hdr(d)["job"]) == \
        (a1.session, a1.token, a1.job) and JBODY.unpack_from(d, 32)[2:4] == (a1.k, a1.W)
    check(ok, "step 5: a repeated JOIN of an ACTIVE rank gets the same JOIN_ACK again",
          repr(d and dec_hdr(d)))
    return a0, a1


def test_mismatch(sw, closers, active):
    """§5.2 steps 4 and 4', §4.2 NAK fields."""
    m0 = Rank(sw.port, "mism", 0, 2, nlanes=1)
    m1 = Rank(sw.port, "mism", 1, 3, nlanes=1)
    closers.extend([m0.close, m1.close])
    m0.join()
    m0.peer.expect(K_JOIN_WAIT, m0.nonce, 1.0, "JOIN_WAIT mism")
    m1.join()
    d = m1.peer.expect(K_JOIN_NAK, m1.nonce, 1.0, "NAK MISMATCH to the newcomer")
    got = d and nak_of(d)
    check(d is not None and got[2] == ERR_MISMATCH and got[3] == 2 and got[4] == 1,
          "step 4: newcomer with world 3 -> JOIN_NAK MISMATCH carrying world 2, nlanes 1",
          repr(got))
    d = m0.peer.expect(K_JOIN_NAK, m0.nonce, 1.0, "NAK MISMATCH to the registered rank")
    got = d and nak_of(d)
    check(d is not None and got[2] == ERR_MISMATCH and got[3] == 3 and got[4] == 1,
          "step 4: the registered rank also gets MISMATCH with the newcomer's world 3",
          repr(got))
    # step 4': remembered for 3 s: a JOIN right after fails at once.
    m2 = Rank(sw.port, "mism", 1, 2)
    closers.append(m2.close)
    m2.join()
    d = m2.peer.expect((K_JOIN_NAK, K_JOIN_WAIT), m2.nonce, 1.0, "NAK MISMATCH remembered")
    got = d and (dec_hdr(d)["kind"], nak_of(d)[2], nak_of(d)[3])
    check(got == (K_JOIN_NAK, ERR_MISMATCH, 3),
          "step 4': a JOIN just after the disagreement -> MISMATCH with the remembered world 3",
          repr(got))

    # step 4' applies to any JOIN of the name, also one agreeing with the remembered world.
    m3 = Rank(sw.port, "mism", 2, 3)
    closers.append(m3.close)
    m3.join()
    d = m3.peer.expect((K_JOIN_NAK, K_JOIN_WAIT), m3.nonce, 1.0, "NAK MISMATCH remembered 2")
    got = d and (dec_hdr(d)["kind"], nak_of(d)[2], nak_of(d)[3])
    check(got == (K_JOIN_NAK, ERR_MISMATCH, 3),
          "step 4': a JOIN declaring the remembered world 3 itself is refused MISMATCH too",
          repr(got))

    # nlanes disagreement between fixed counts.
    l0 = Rank(sw.port, "mlanes", 0, 2, nlanes=2)
    l1 = Rank(sw.port, "mlanes", 1, 2, nlanes=3)
    closers.extend([l0.close, l1.close])
    l0.join()
    l0.peer.expect(K_JOIN_WAIT, l0.nonce, 1.0, "JOIN_WAIT mlanes")
    l1.join()
    d = l1.peer.expect(K_JOIN_NAK, l1.nonce, 1.0, "NAK lanes mismatch")
    got = d and nak_of(d)
    check(d is not None and got[2] == ERR_MISMATCH and got[3] == 2 and got[4] == 2,
          "step 4: fixed nlanes 3 against a registered fixed 2 -> MISMATCH (world 2, nlanes 2)",
          repr(got))
    d = l0.peer.expect(K_JOIN_NAK, l0.nonce, 1.0, "NAK lanes mismatch to r0")
    got = d and nak_of(d)
    check(d is not None and got[2] == ERR_MISMATCH and got[4] == 3,
          "step 4: the registered rank gets MISMATCH with the newcomer's nlanes 3", repr(got))

    # Against an ACTIVE job only the newcomer is refused; the job runs on.
    if active:
        a0, a1 = active
        s = Rank(sw.port, "agree", 3, 4)
        closers.append(s.close)
        s.join()
        d = s.peer.expect(K_JOIN_NAK, s.nonce, 1.0, "NAK MISMATCH from an active job")
        got = d and nak_of(d)
        check(d is not None and got[2] == ERR_MISMATCH and got[3] == 2,
              "step 4: world-4 JOIN for an ACTIVE world-2 job -> MISMATCH carrying world 2",
              repr(got))
        vals = [[1], [2]]
        res = run_round([a0, a1], 1, 0, vals)
        kinds = [dec_hdr(x)["kind"] for x in a0.peer.backlog + a1.peer.backlog]
        check(res == [[3], [3]] and K_ABORT not in kinds,
              "step 4: the ACTIVE job is not ended by the stray JOIN", repr((res, kinds)))


def test_lanes_agree(sw, closers):
    """§5.6 lanes agreed at join, §3 flag bit 11."""
    r = [Rank(sw.port, "lauto", i, 3, nlanes=p, flags=FLAG_LANES_AUTO)
         for i, p in enumerate((4, 2, 3))]
    closers.extend(x.close for x in r)
    # rank 0 first proposes 1 and then re-joins with a new nonce proposing 4: the later JOIN
    # overwrites the record (§5.2 step 7), so its first proposal does not count.
    first = r[0].nonce
    r[0].nlanes = 1
    r[0].join()
    r[0].peer.expect(K_JOIN_WAIT, first, 1.0, "JOIN_WAIT lauto")
    r[0].nlanes = 4
    r[0].nonce = new_nonce()
    ok = start_job(r)
    got = [(x.ack[0]["flags"] & FLAG_LANES_AUTO, x.ack[1][8]) for x in r] if ok else None
    check(ok and got == [(FLAG_LANES_AUTO, 2)] * 3,
          "lanes: proposals 4 (overwriting 1), 2, 3 -> every ACK has flag bit 11 and nlanes 2",
          repr(got))
    if ok:
        for x in r:
            x.leave()

    f0 = Rank(sw.port, "lfix", 0, 2, nlanes=4, flags=FLAG_LANES_AUTO)
    f1 = Rank(sw.port, "lfix", 1, 2, nlanes=3)
    closers.extend([f0.close, f1.close])
    ok = start_job([f0, f1])
    got = [(x.ack[0]["flags"] & FLAG_LANES_AUTO, x.ack[1][8]) for x in (f0, f1)] if ok else None
    check(ok and got == [(FLAG_LANES_AUTO, 3), (0, 3)],
          "lanes: a fixed count 3 beats a proposal 4: proposer's ACK flag+3, fixer's no flag+3",
          repr(got))
    if not ok:
        return
    # Lanes 1 and 2 join fixed with nlanes = 3: jobs of their own (same name).
    lanes = []
    for lane in (1, 2):
        pair = [Rank(sw.port, "lfix", i, 2, lane=lane, nlanes=3) for i in (0, 1)]
        closers.extend(x.close for x in pair)
        lanes.append(pair)
    ok2 = all(start_job(pair) for pair in lanes)
    ids = {f0.job} | {pair[0].job for pair in lanes}
    check(ok2 and len(ids) == 3, "lanes: lanes 1 and 2 of 'lfix' start as jobs of their own",
          repr(ids))
    if ok2:
        for lane, pair in enumerate([[f0, f1]] + lanes):
            vals = [[lane + 1, 100], [lane * 10, -1]]
            res = run_round(pair, 0, 0, vals)
            check(res == [expected_sum(vals)] * 2, "lanes: lane %d of 'lfix' sums" % lane,
                  repr(res))
    # A JOIN fixing another count for the ACTIVE lane 0: MISMATCH to it only.
    s = Rank(sw.port, "lfix", 1, 2, nlanes=2)
    closers.append(s.close)
    s.join()
    d = s.peer.expect((K_JOIN_NAK, K_JOIN_ACK, K_JOIN_WAIT), s.nonce, 1.0, "lanes MISMATCH")
    got = d and (dec_hdr(d)["kind"], nak_of(d)[2], nak_of(d)[3], nak_of(d)[4])
    check(got == (K_JOIN_NAK, ERR_MISMATCH, 2, 3),
          "lanes: fixing nlanes 2 against the ACTIVE count 3 -> MISMATCH (world 2, nlanes 3)",
          repr(got))
    # A proposal never disagrees (step 4 skips it): the same rank proposing 2 with the
    # same nonce?  A new nonce would restart the job (step 5''), so only the check above.
    for pair in [[f0, f1]] + lanes:
        for x in pair:
            x.leave()


def test_threads(bindir, tmp, closers):
    """§5.6 dataplane threads and REDIRECT, §5.1 job ids, §6.1 check 6."""
    T = 3
    base = free_port_run(T)
    sw = Switch(bindir, tmp, ["--threads", str(T)], listen="127.0.0.1:%d" % base)
    closers.append(sw.stop)
    check(sw.port == base, "threads: the switch listens on the port asked for", repr(sw.port))
    name = "lanes-x"
    L = 3
    ranks = []
    redirects_ok = True
    notes = []
    for lane in range(L):
        pair = [Rank(base, name, i, 2, lane=lane, nlanes=L) for i in (0, 1)]
        closers.extend(x.close for x in pair)
        want = shard_of(name, lane, T)
        for x in pair:
            x.join()
            d = x.peer.expect((K_REDIRECT, K_JOIN_WAIT, K_JOIN_ACK, K_JOIN_NAK), x.nonce, 1.0,
                              "REDIRECT or JOIN_WAIT lane %d" % lane)
            if d is None:
                redirects_ok = False
                notes.append((lane, x.rank, None))
                continue
            h = dec_hdr(d)
            if want == 0:
                if h["kind"] == K_REDIRECT:
                    redirects_ok = False
                    notes.append((lane, "unexpected redirect"))
                continue
            nk = nak_of(d)
            good = (h["kind"] == K_REDIRECT and h["job"] == 0 and h["rank"] == RANK_SWITCH
                    and h["session"] == 0 and nk[1] == x.nonce and nk[2] == 0
                    and nk[3] == base + want)
            if not good:
                redirects_ok = False
                notes.append((lane, x.rank, h, nk))
                continue
            x.peer.reconnect(nk[3])                  # §5.6: reconnect, JOIN there at once
        ranks.append(pair)
    check(redirects_ok, "threads: lane JOINs for another thread get REDIRECT(nonce, reason 0, "
          "port = listen port + (FNV-1a(name) + lane) mod 3)", repr(notes))
    ok = True
    for lane, pair in enumerate(ranks):
        if shard_of(name, lane, T) != 0:
            for x in pair:
                x.join()
        else:
            pair[1].join()            # rank 0 of this lane already registered at thread 0
        for x in pair:
            if x.wait_ack(1.5) is None:
                ok = False
    check(ok, "threads: every lane's job starts at its own thread")
    if not ok:
        return
    idok = all(shard_of(name, lane, T) * 64 + 1 <= pair[0].job <= shard_of(name, lane, T) * 64 + 64
               for lane, pair in enumerate(ranks))
    check(idok, "threads: job id = shard*64 + entry + 1 for each lane's thread",
          repr([(shard_of(name, lane, T), pair[0].job) for lane, pair in enumerate(ranks)]))
    allok = True
    for lane, pair in enumerate(ranks):
        vals = [[lane, 1, 2], [100, lane, -2]]
        if run_round(pair, 1, 0, vals) != [expected_sum(vals)] * 2:
            allok = False
    check(allok, "threads: DATA of every lane completes at the thread that owns it")
    # DATA of lane 1's job sent to thread 0's socket: not one of its ids -> NO_JOB.
    lane_other = next(lane for lane in range(L) if shard_of(name, lane, T) != 0)
    x = ranks[lane_other][0]
    c0 = sw.counters()
    stray = Peer(base)
    closers.append(stray.close)
    stray.send(hdr(K_DATA, job=x.job, rank=0, session=x.session, token=x.token, slot=0,
                   seq=0, count=1) + struct.pack(">i", 1))
    c1 = sw.counters()
    check(c1["drops"]["NO_JOB"] - c0["drops"]["NO_JOB"] == 1,
          "threads: DATA of another thread's job id at thread 0 is dropped NO_JOB")
    check(c1["join_redirects"] == sum(2 for lane in range(L) if shard_of(name, lane, T) != 0),
          "threads: join_redirects counts each REDIRECT", repr(c1["join_redirects"]))
    # lane 0 with a proposal (flag bit 11) also goes to shard(name, 0)
    other = next(nm for nm in ("p%d" % i for i in range(100)) if shard_of(nm, 0, T) != 0)
    pr = Rank(base, other, 0, 2, nlanes=2, flags=FLAG_LANES_AUTO)
    closers.append(pr.close)
    pr.join()
    d = pr.peer.expect((K_REDIRECT, K_JOIN_WAIT), pr.nonce, 1.0, "REDIRECT of a proposal")
    check(d is not None and dec_hdr(d)["kind"] == K_REDIRECT and
          nak_of(d)[3] == base + shard_of(other, 0, T),
          "threads: a lane-0 proposal JOIN is redirected by shard(name, 0)", repr(d and nak_of(d)))
    for pair in ranks:
        for x in pair:
            x.leave()


def test_pool(bindir, tmp, closers, args=None):
    """§5.3 step 2 (first fit, halving, WAITING, NOSPACE), §5.7 fallback in the NAK,
    §5.2 step 3'' and step 6 (job table full)."""
    sw = Switch(bindir, tmp, ["--threads", "1", "--slots", "16", "--max-job-slots", "16",
                              "--min-job-slots", "8"])
    closers.append(sw.stop)
    A = Rank(sw.port, "pool-A", 0, 1, window=8)
    closers.append(A.close)
    ok = start_job([A])
    check(ok and A.W == 8, "pool: world-1 job A starts at once with W 8", repr(A.W))
    B = Rank(sw.port, "pool-B", 0, 1, window=16)
    closers.append(B.close)
    ok = start_job([B])
    check(ok and B.W == 8, "pool: job B proposing 16 is shrunk to the 8 free slots", repr(B.W))
    c = sw.counters()
    check(c["jobs_shrunk"] == 1 and c.get("jobs_started") == 2,
          "pool: jobs_shrunk counts the shrunk job", repr((c["jobs_shrunk"], c["jobs_started"])))

    # No room, no wait, rank 0 offers a fallback port: NOSPACE to every rank with it.
    C0 = Rank(sw.port, "pool-C", 0, 2, window=8, fb=4321)
    C1 = Rank(sw.port, "pool-C", 1, 2, window=8)
    closers.extend([C0.close, C1.close])
    C0.join()
    C0.peer.expect(K_JOIN_WAIT, C0.nonce, 1.0, "JOIN_WAIT pool-C")
    C1.join()
    got = []
    for x in (C0, C1):
        d = x.peer.expect(K_JOIN_NAK, x.nonce, 1.0, "NOSPACE NAK with fallback")
        got.append(d and (len(d), nak_of(d)[2], nak_of(d)[5]))
    want = (56, ERR_NOSPACE, (ip_of("127.0.0.1"), 4321))
    check(got == [want, want],
          "fallback: NOSPACE goes to every rank, 24-byte body with rank 0's 127.0.0.1:4321",
          repr(got))
    # step 3'': a rank that lost its NAK re-sends the same JOIN and gets it again.
    C1.join()
    d = C1.peer.expect((K_JOIN_NAK, K_JOIN_WAIT), C1.nonce, 1.0, "repeated NOSPACE")
    check(d is not None and dec_hdr(d)["kind"] == K_JOIN_NAK and
          (nak_of(d)[2], nak_of(d)[5]) == (ERR_NOSPACE, (ip_of("127.0.0.1"), 4321)),
          "step 3'': the same JOIN again within 5 s gets the NOSPACE NAK with fallback again",
          repr(d and nak_of(d)))
    # NOSPACE without a fallback: no address (16-byte body, or zeros).
    D = Rank(sw.port, "pool-D", 0, 1, window=8)
    closers.append(D.close)
    D.join()
    d = D.peer.expect((K_JOIN_NAK, K_JOIN_ACK), D.nonce, 1.0, "NOSPACE without fallback")
    got = d and (dec_hdr(d)["kind"], nak_of(d)[2], nak_of(d)[5])
    check(got is not None and got[:2] == (K_JOIN_NAK, ERR_NOSPACE) and
          (got[2] is None or got[2] == (0, 0)),
          "NOSPACE without an offered fallback carries no address", repr(got))
    c = sw.counters()
    check(c["jobs_refused"] == 2, "pool: jobs_refused counts both refused jobs",
          repr(c["jobs_refused"]))
    if args is not None:
        test_mixed_fallback(sw, closers, args)

    # Every rank allows a wait: WAITING, admitted when A leaves.
    E0 = Rank(sw.port, "pool-E", 0, 2, window=8, wait=30)
    E1 = Rank(sw.port, "pool-E", 1, 2, window=8, wait=30)
    closers.extend([E0.close, E1.close])
    E0.join()
    E0.peer.expect(K_JOIN_WAIT, E0.nonce, 1.0, "JOIN_WAIT pool-E")
    E1.join()
    d = E1.peer.expect((K_JOIN_WAIT, K_JOIN_ACK, K_JOIN_NAK), E1.nonce, 0.6, "pool-E WAITING")
    waited_answer = d and (dec_hdr(d)["kind"], jwait_of(d)[2:5] if dec_hdr(d)["kind"] == K_JOIN_WAIT else None)
    # §5.2 step 9 and §4.5 (state 1 = "every rank joined, the job waits for free slots")
    # say JOIN_WAIT with state 1; §5.3 says "JOINs of its ranks get no reply meanwhile"
    # (reported as a contradiction).  ina-switch answers JOIN_WAIT state 1, as §4.5 defines.
    log("answer to the JOIN that made pool-E WAITING:", waited_answer)
    check(waited_answer == (K_JOIN_WAIT, (2, 2, 1)),
          "WAITING: the completing JOIN gets JOIN_WAIT(world 2, joined 2, state 1)",
          repr(waited_answer))
    E0.join()
    d = E0.peer.expect((K_JOIN_WAIT, K_JOIN_ACK, K_JOIN_NAK), E0.nonce, 0.4, "pool-E WAITING 2")
    w2 = d and (dec_hdr(d)["kind"], jwait_of(d)[2:5] if dec_hdr(d)["kind"] == K_JOIN_WAIT else None)
    log("answer to a JOIN while WAITING:", w2)
    check(w2 == (K_JOIN_WAIT, (2, 2, 1)),
          "WAITING: a rank's repeated JOIN gets JOIN_WAIT state 1, not an ACK", repr(w2))
    c = sw.counters()
    check(c["jobs_waited"] == 1, "WAITING: counted in jobs_waited", repr(c["jobs_waited"]))
    jobs = {j["name"]: j for j in sw.jobs()}
    check(jobs.get("pool-E", {}).get("state") not in (None, "active", "joining"),
          "WAITING: the operator view shows pool-E as waiting",
          repr(jobs.get("pool-E", {}).get("state")))
    # A younger WAITING job (world 1) queues behind E.
    G = Rank(sw.port, "pool-G", 0, 1, window=8, wait=30)
    closers.append(G.close)
    G.join()
    G.peer.quiet(0.1)
    A.leave()                                       # frees 8 slots: E (oldest) goes first
    oks = [E0.wait_ack(1.5), E1.wait_ack(1.5)]
    check(all(oks) and E0.W == 8 and E1.session == E0.session,
          "WAITING: when A leaves, the oldest WAITING job E gets JOIN_ACK on every rank (W 8)",
          repr((E0.W, E1.W)))
    d = G.peer.expect(K_JOIN_ACK, G.nonce, 0.3, "G must still wait")
    check(d is None, "WAITING: the younger job G does not overtake E", "G got an ACK")
    B.leave()
    check(G.wait_ack(1.5) is not None and G.W == 8,
          "WAITING: G is admitted when B leaves", repr(G.W))
    # A wait that runs out: NOSPACE at the wait's end (wait 3 = 300 ms).
    F = Rank(sw.port, "pool-F", 0, 1, window=8, wait=3, fb=999)
    closers.append(F.close)
    t0 = time.time()
    F.join()
    d = F.peer.expect((K_JOIN_NAK, K_JOIN_ACK), F.nonce, 2.0, "NOSPACE at the end of a wait")
    dt = time.time() - t0
    got = d and (dec_hdr(d)["kind"], nak_of(d)[2], nak_of(d)[5])
    check(got == (K_JOIN_NAK, ERR_NOSPACE, (ip_of("127.0.0.1"), 999)) and 0.25 <= dt <= 1.5,
          "WAITING: a 300 ms wait ends in NOSPACE (with fallback) after about 300 ms",
          "%r after %.2f s" % (got, dt))

    # A rank whose JOIN allows no wait makes the job refuse at once.
    H0 = Rank(sw.port, "pool-H", 0, 2, window=8, wait=30)
    H1 = Rank(sw.port, "pool-H", 1, 2, window=8, wait=0)
    closers.extend([H0.close, H1.close])
    H0.join()
    H0.peer.expect(K_JOIN_WAIT, H0.nonce, 1.0, "JOIN_WAIT pool-H")
    H1.join()
    d = H0.peer.expect(K_JOIN_NAK, H0.nonce, 1.0, "NOSPACE when one rank allows no wait")
    check(d is not None and nak_of(d)[2] == ERR_NOSPACE,
          "WAITING only if every rank allows a wait: one wait 0 -> NOSPACE at once")

    # step 6: the job table has 64 entries per thread.
    used = len([j for j in sw.jobs() if j["state"] != "free"])
    p = Peer(sw.port)
    closers.append(p.close)
    nonces = []
    for i in range(70):
        nonce = new_nonce()
        nonces.append(nonce)
        p.send(hdr(K_JOIN, rank=0) + JBODY.pack(nonce, 2, 64, 8, 100, 0, 0, 0, 1, 0, 0,
                                                 ("t%02d" % i).encode()))
    waits = naks = 0
    for _ in range(70):
        d = p.expect((K_JOIN_WAIT, K_JOIN_NAK), None, 1.0, "answers to 70 new jobs")
        if d is None:
            break
        h = dec_hdr(d)
        if h["kind"] == K_JOIN_WAIT:
            waits += 1
        elif nak_of(d)[2] == ERR_NOSPACE:
            naks += 1
    check((waits, naks) == (64 - used, 70 - (64 - used)),
          "step 6: with %d entries in use, %d new jobs register and the rest get NOSPACE"
          % (used, 64 - used), repr((waits, naks)))
    # A rank 0 offering a fallback while the table is full: §4.2 puts the address only in
    # the NOSPACE "of a job whose rank 0 offered a fallback port"; a step-6 refusal has no
    # job, so the NAK is the plain 16-byte body (what ina-switch does; see the report).
    full = Rank(sw.port, "full-fb", 0, 2, fb=777)
    closers.append(full.close)
    full.join()
    d = full.peer.expect((K_JOIN_NAK, K_JOIN_WAIT), full.nonce, 1.0, "NOSPACE of a full table")
    got = d and (dec_hdr(d)["kind"], len(d), nak_of(d)[2])
    check(got == (K_JOIN_NAK, 48, ERR_NOSPACE),
          "step 6: a full job table refuses rank 0's JOIN with NOSPACE and no fallback address",
          repr(got))
    for i, nonce in enumerate(nonces):
        p.send(hdr(K_WITHDRAW, rank=0) + JBODY.pack(nonce, 2, 64, 8, 100, 0, 0, 0, 1, 0, 0,
                                                     ("t%02d" % i).encode()))
    time.sleep(0.1)
    again = Rank(sw.port, "t69", 0, 2)
    closers.append(again.close)
    again.join()
    d = again.peer.expect((K_JOIN_WAIT, K_JOIN_NAK), again.nonce, 1.0, "JOIN after withdrawals")
    check(d is not None and dec_hdr(d)["kind"] == K_JOIN_WAIT,
          "step 6: entries freed by WITHDRAW take new jobs again")
    again.withdraw()
    G.leave()
    E0.leave()
    E1.leave()
    return sw


def test_evict_abort(sw, closers):
    """§5.8 eviction (MIGRATE, EVICTED), §5.4 operator abort of a JOINING job."""
    e0 = Rank(sw.port, "evict", 0, 2, window=4, elems=8, fb=5555)
    e1 = Rank(sw.port, "evict", 1, 2, window=4, elems=8)
    closers.extend([e0.close, e1.close])
    ok = start_job([e0, e1])
    check(ok and e0.W == 4, "evict: job with W 4 starts", repr(e0.W))
    if not ok:
        return
    # Stream positions 0..4: slots 0..3 round 0, slot 0 round 1 -> bound B = 4*1 + 0 + 1 = 5.
    okr = True
    for g in range(5):
        slot, seq = g % 4, g // 4
        vals = [[g, 1], [g, 2]]
        if run_round([e0, e1], slot, seq, vals, p=g) != [expected_sum(vals)] * 2:
            okr = False
    check(okr, "evict: five rounds (positions 0..4) complete before the eviction")
    st, body = sw.post("/jobs/%d/evict" % e0.job)
    check(200 <= st < 300, "evict: POST /jobs/ID/evict accepted (2xx)", repr((st, body[:100])))
    got = []
    for x in (e0, e1):
        d = x.peer.expect(K_MIGRATE, None, 1.0, "MIGRATE after evict")
        if d is None:
            got.append(None)
            continue
        h = dec_hdr(d)
        nonce, reason, pw, nl, _ = NAK.unpack_from(d, 32)
        fa, fp, _r = NAK_FB.unpack_from(d, 48)
        bound = struct.unpack_from(">Q", d, 56)[0]
        got.append((len(d), h["job"], h["session"], h["token"], h["rank"], nonce, reason,
                    fa, fp, bound))
    want = (64, e0.job, e0.session, e0.token, RANK_SWITCH, 0, ERR_NOSPACE,
            ip_of("127.0.0.1"), 5555, 5)
    check(got == [want, want],
          "evict: MIGRATE (64 B: nonce 0, NOSPACE, rank 0's 127.0.0.1:5555, bound 5) to every rank",
          repr(got))
    # A position at or past B (slot 1 round 1 = position 5) is dropped EVICTED and answered
    # with the MIGRATE again.
    c0 = sw.counters()
    e0.data(1, 1, [9, 9], tag=op_tag(1, 2, 5))
    d = e0.peer.expect((K_MIGRATE, K_RESULT), None, 1.0, "MIGRATE again for position 5")
    check(d is not None and dec_hdr(d)["kind"] == K_MIGRATE and
          struct.unpack_from(">Q", d, 56)[0] == 5,
          "evict: DATA at position >= B is answered with MIGRATE again", repr(d and dec_hdr(d)))
    # A position below B is served as before (a duplicate of the complete round 1 of slot 0).
    e1.data(0, 1, [4, 2], tag=op_tag(1, 2, 4))
    d = e1.peer.expect((K_RESULT, K_MIGRATE), None, 1.0, "RESULT resent below B")
    check(d is not None and dec_hdr(d)["kind"] == K_RESULT and
          list(struct.unpack_from(">2i", d, 32)) == [8, 3],
          "evict: positions below B are still served (duplicate answered with its RESULT)",
          repr(d and dec_hdr(d)))
    c1 = sw.counters()
    check(c1["drops"]["EVICTED"] - c0["drops"]["EVICTED"] == 1 and c1["jobs_evicted"] == 1,
          "evict: counters EVICTED and jobs_evicted",
          repr((c1["drops"]["EVICTED"] - c0["drops"]["EVICTED"], c1["jobs_evicted"])))
    e0.leave()
    e1.leave()
    jobs = sw.jobs()
    check(all(j["name"] != "evict" for j in jobs),
          "evict: the job is freed when every rank has left", repr([j["name"] for j in jobs]))

    # Eviction of a job without a fallback and no rounds: bound 0, no address.
    n0 = Rank(sw.port, "evict2", 0, 1, window=2)
    closers.append(n0.close)
    if start_job([n0]):
        sw.post("/jobs/%d/evict" % n0.job)
        d = n0.peer.expect(K_MIGRATE, None, 1.0, "MIGRATE without fallback")
        got = d and (nak_of(d)[2], NAK_FB.unpack_from(d, 48)[:2], struct.unpack_from(">Q", d, 56)[0])
        check(got == (ERR_NOSPACE, (0, 0), 0),
              "evict: without a fallback MIGRATE has address 0, and bound 0 before any round",
              repr(got))
        n0.leave()

    # Operator abort of a JOINING job: JOIN_NAK ABORTED to each joined rank.
    j0 = Rank(sw.port, "abortme", 0, 3)
    closers.append(j0.close)
    j0.join()
    j0.peer.expect(K_JOIN_WAIT, j0.nonce, 1.0, "JOIN_WAIT abortme")
    jid = [j["id"] for j in sw.jobs() if j["name"] == "abortme"]
    if check(len(jid) == 1, "abort: the JOINING job is listed by GET /jobs", repr(jid)):
        st, _b = sw.post("/jobs/%d/abort" % jid[0])
        d = j0.peer.expect(K_JOIN_NAK, j0.nonce, 1.0, "JOIN_NAK ABORTED")
        check(d is not None and nak_of(d)[2] == ERR_ABORTED,
              "abort: operator abort of a JOINING job -> JOIN_NAK ABORTED to the joined rank",
              repr(d and nak_of(d)))


def test_hostile(sw, closers):
    """§5.2 steps 5' and 5'', §5.4 LEAVE checks, WITHDRAW of an ACTIVE rank, §5.5."""
    h0 = Rank(sw.port, "hostile", 0, 2, window=4)
    h1 = Rank(sw.port, "hostile", 1, 2, window=4)
    closers.extend([h0.close, h1.close])
    if not check(start_job([h0, h1]), "hostile: job 'hostile' starts"):
        return
    c0 = sw.counters()
    # A forged JOIN for rank 1 from another IP address (127.0.0.2), new nonce: REJECTED.
    try:
        f = Rank(sw.port, "hostile", 1, 2, window=4, ip="127.0.0.2")
    except OSError as e:
        f = None
        check(False, "hostile: bind 127.0.0.2", repr(e))
    if f:
        closers.append(f.close)
        f.join()
        d = f.peer.expect((K_JOIN_NAK, K_JOIN_WAIT, K_JOIN_ACK), f.nonce, 1.0, "REJECTED forgery")
        check(d is not None and dec_hdr(d)["kind"] == K_JOIN_NAK and nak_of(d)[2] == ERR_REJECTED,
              "hostile: JOIN for an ACTIVE rank from another IP -> JOIN_NAK REJECTED",
              repr(d and dec_hdr(d)))
        # The same nonce replayed from the other IP: also REJECTED (§4.4 replay, step 5').
        f.nonce = h1.nonce
        f.join()
        d = f.peer.expect((K_JOIN_NAK, K_JOIN_ACK), f.nonce, 1.0, "REJECTED replay")
        check(d is not None and dec_hdr(d)["kind"] == K_JOIN_NAK and nak_of(d)[2] == ERR_REJECTED,
              "hostile: the rank's own JOIN replayed from another IP -> REJECTED, no ACK",
              repr(d and dec_hdr(d)))
    # Forged LEAVEs from another port of the same host, with the right session and token.
    g = Peer(sw.port)
    closers.append(g.close)
    for flags in (FLAG_ABORT, 0):
        g.send(hdr(K_LEAVE, job=h0.job, rank=1, session=h0.session, token=h0.token, flags=flags))
    # LEAVE with a wrong token from the rank's own address.
    h1.leave(abort=True, token=h1.token ^ 0x5A5A5A5A)
    # WITHDRAW of an ACTIVE job's rank, right nonce and address: dropped (§5.2).
    h1.withdraw()
    # DATA from the wrong source: SOURCE.
    g.send(hdr(K_DATA, job=h0.job, rank=1, session=h0.session, token=h0.token, slot=0, seq=0,
               count=1, tag=op_tag(1, 1, 0)) + struct.pack(">i", 1000))
    vals = [[7], [8]]
    res = run_round([h0, h1], 0, 0, vals)
    aborted = [x for p in (h0, h1) for x in p.peer.backlog if dec_hdr(x)["kind"] == K_ABORT]
    check(res == [[15], [15]] and not aborted,
          "hostile: forged LEAVEs (other port / wrong token), WITHDRAW and forged DATA do not "
          "end or alter the job", repr((res, len(aborted))))
    c1 = sw.counters()
    dj = c1["drops"]["JOIN"] - c0["drops"]["JOIN"]
    exp_j = (2 if f else 0) + 2 + 2 + 2
    check(dj == exp_j and c1["drops"]["SOURCE"] - c0["drops"]["SOURCE"] == 1,
          "hostile: they count as drop JOIN (%d) and SOURCE (1)" % exp_j,
          "JOIN +%d SOURCE +%d" % (dj, c1["drops"]["SOURCE"] - c0["drops"]["SOURCE"]))
    # A JOIN for rank 1 from the same IP and another port, even with the rank's own nonce:
    # a restart (step 5'': "same nonce from another port of the same host"):
    # ABORT ABORTED to every rank, and the JOIN starts a new JOINING job.
    old = (h0.job, h0.session, h0.token)
    r = Rank(sw.port, "hostile", 1, 2, window=4, nonce=h1.nonce)
    closers.append(r.close)
    r.join()
    got = []
    for x in (h0, h1):
        d = x.peer.expect(K_ABORT, None, 1.0, "ABORT after a restart JOIN")
        if d is None:
            got.append(None)
            continue
        hh = dec_hdr(d)
        nonce, reason, pw, nl, _ = NAK.unpack_from(d, 32)
        # §4.2: a 28-byte body whose cause 1 (rank_taken) names the rank and the
        # address:port its JOIN came from.
        cause = ABORT_CAUSE.unpack_from(d, 48) if len(d) >= 60 else None
        got.append((hh["job"], hh["session"], hh["token"], hh["rank"], nonce, reason, len(d),
                    cause))
    taken = (1, 0, 1, socket.inet_aton(r.peer.addr[0]), r.peer.addr[1])
    want = old + (RANK_SWITCH, 0, ERR_ABORTED, 60, taken)
    check(got == [want, want],
          "step 5'': the rank's JOIN (same nonce) from another port -> ABORT ABORTED to every "
          "rank, cause 1 (rank_taken) with the rank and the JOIN's address:port (4.2)", repr(got))
    d = r.peer.expect((K_JOIN_WAIT, K_JOIN_NAK, K_JOIN_ACK), r.nonce, 1.0, "JOIN_WAIT of restart")
    check(d is not None and dec_hdr(d)["kind"] == K_JOIN_WAIT and jwait_of(d)[3] == 1,
          "step 5'': the JOIN then registers in a new JOINING job (JOIN_WAIT joined 1)",
          repr(d and dec_hdr(d)))
    # §5.5: DATA of the ended session while the entry is JOINING (or FREE): NO_JOB.
    c2 = sw.counters()
    h0.data(1, 0, [1], tag=op_tag(1, 1, 1))
    h0.leave()
    c3 = sw.counters()
    check(c3["drops"]["NO_JOB"] - c2["drops"]["NO_JOB"] == 3,
          "§5.5: DATA and LEAVE (x2) of the ended session are dropped NO_JOB",
          "+%d" % (c3["drops"]["NO_JOB"] - c2["drops"]["NO_JOB"]))
    # The new job starts (rank 0 rejoins with a new nonce); if it reuses the job id, old
    # DATA is now SESSION.
    n0 = Rank(sw.port, "hostile", 0, 2, window=4)
    closers.append(n0.close)
    n0.join()
    ok = n0.wait_ack(1.0) is not None and r.wait_ack(1.0) is not None
    check(ok and n0.session not in (old[1],) and n0.session == r.session,
          "restart: the new session has a new session id", repr((n0.session, old[1])))
    if ok and n0.job == old[0]:
        c4 = sw.counters()
        h0.data(1, 0, [1], tag=op_tag(1, 1, 1))
        h0.leave()
        c5 = sw.counters()
        check(c5["drops"]["SESSION"] - c4["drops"]["SESSION"] == 1 and
              c5["drops"]["JOIN"] - c4["drops"]["JOIN"] == 2,
              "§5.5: in the reused job id, old DATA is SESSION and old LEAVE is JOIN",
              repr((c5["drops"]["SESSION"] - c4["drops"]["SESSION"],
                    c5["drops"]["JOIN"] - c4["drops"]["JOIN"])))
    if ok:
        # The job works and ends when both ranks leave (silently).
        vals = [[1, 2], [3, 4]]
        res = run_round([n0, r], 0, 0, vals)
        check(res == [[4, 6]] * 2, "restart: the new session sums", repr(res))
        n0.leave()
        r.leave()
        extra = n0.peer.quiet(0.2) + r.peer.quiet(0.01)
        jobs = sw.jobs()
        check(not extra and all(j["name"] != "hostile" for j in jobs),
              "§5.4: all ranks LEAVE -> the job is freed silently",
              repr(([dec_hdr(x)["kind"] for x in extra], [j["name"] for j in jobs])))



MIXED_CHILD = r"""
import json, sys
import numpy as np
import ina
port = int(sys.argv[1])
ctx = ina.Context(switch="127.0.0.1:%d" % port, rank=0, world_size=2, job="mixfb",
                  elems_per_packet=64, window=8, lanes=1, timeout_ms=8000,
                  join_timeout_ms=8000)
a = np.array([1, 2, 3, -4], dtype=np.int32)
ina.allreduce(a, ctx=ctx)
print(json.dumps({"path": ctx.path, "sum": [int(x) for x in a], "k": ctx.elems_per_packet,
                  "window": ctx.window}), flush=True)
ctx.close()
"""


def child_env(args):
    env = dict(os.environ)
    pydir = args.pythondir or "/work/cleanroom/python"
    lib = os.path.join(args.libdir or "/work/cleanroom/lib", "libina.so")
    env["PYTHONPATH"] = pydir
    env["INA_LIBRARY"] = lib
    env["INA_FALLBACK"] = "host"
    env["INA_ADMISSION_WAIT_MS"] = "0"
    env["INA_SHM"] = "0"
    env["INA_QUIET"] = "1"
    pre = os.environ.get("INA_PEER_PRELOAD")
    if pre:
        env["LD_PRELOAD"] = pre
        env["ASAN_OPTIONS"] = "detect_leaks=0:abort_on_error=1"
    return env


def test_mixed_fallback(sw, closers, args):
    """§5.7 with a libina rank 0: the switch has no room, the NOSPACE NAK names rank 0's
    host aggregator, and this peer (rank 1) runs the job there with a new nonce."""
    me = Rank(sw.port, "mixfb", 1, 2, elems=64, window=8)
    closers.append(me.close)
    me.join()
    d = me.peer.expect(K_JOIN_WAIT, me.nonce, 1.0, "JOIN_WAIT mixfb")
    if not check(d is not None, "mixed fallback: peer rank 1 registered at the full switch"):
        return
    py = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable
    child = subprocess.Popen([py, "-c", MIXED_CHILD, str(sw.port)], env=child_env(args),
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def kill_child():
        if child.poll() is None:
            child.kill()
            child.wait(3)
    closers.append(kill_child)
    # The JOIN schedule of §7.1 for a rank that keeps waiting: the NAK comes once libina's
    # rank 0 has joined.
    nak = None
    t_end = time.time() + 6.0
    next_join = time.time() + 0.5
    while time.time() < t_end and nak is None:
        d = me.peer.expect((K_JOIN_NAK, K_JOIN_ACK), me.nonce, 0.1, "NOSPACE NAK for mixfb")
        if d is not None:
            nak = d
        elif time.time() >= next_join:
            me.join()
            next_join = time.time() + 0.5
    got = nak and (dec_hdr(nak)["kind"], nak_of(nak)[2], nak_of(nak)[5])
    ok = got is not None and got[0] == K_JOIN_NAK and got[1] == ERR_NOSPACE and \
        got[2] is not None and got[2][0] == ip_of("127.0.0.1") and got[2][1] != 0
    check(ok, "mixed fallback: NOSPACE to the peer carries libina rank 0's address and port",
          repr(got))
    if not ok:
        return
    # §5.7: reconnect to that address:port, JOIN there with a new nonce.
    me.peer.reconnect(got[2][1])
    me.nonce = new_nonce()
    acked = None
    t_end = time.time() + 6.0
    while time.time() < t_end and acked is None:
        me.join()
        d = me.peer.expect((K_JOIN_ACK, K_JOIN_NAK), me.nonce, 0.2, "JOIN_ACK of the fallback")
        if d is not None and dec_hdr(d)["kind"] == K_JOIN_ACK:
            acked = d
    check(acked is not None and JBODY.unpack_from(acked, 32)[2:4] == (64, 8),
          "mixed fallback: rank 0's host aggregator admits the peer (k 64, W 8)",
          repr(acked and JBODY.unpack_from(acked, 32)[:4]))
    if acked is None:
        return
    me.take_ack(acked)
    mine = [10, 20, 30, 40]
    res = None
    t_end = time.time() + 4.0
    while time.time() < t_end and res is None:
        me.data(0, 0, mine, tag=op_tag(1, 4, 0))      # §7.2: op 1, INT32 SUM, p = 0
        d = me.peer.expect(K_RESULT, None, 0.3, "RESULT from the host aggregator")
        if d is not None:
            res = list(struct.unpack_from(">%di" % dec_hdr(d)["count"], d, 32))
    check(res == [11, 22, 33, 36], "mixed fallback: the sum through rank 0's aggregator",
          repr(res))
    me.leave()
    try:
        out, err = child.communicate(timeout=6)
    except subprocess.TimeoutExpired:
        child.kill()
        out, err = child.communicate()
    info = None
    for line in out.splitlines():
        if line.startswith("{"):
            info = json.loads(line)
    check(child.returncode == 0 and info is not None and info["path"] == "host" and
          info["sum"] == [11, 22, 33, 36],
          "mixed fallback: libina rank 0 reports path 'host' and the same sum",
          repr((child.returncode, info, err[-500:])))


def test_idle_start(bindir, tmp, closers):
    """§5.4 idle timeout (part 1: start a job that stays idle)."""
    sw = Switch(bindir, tmp, ["--threads", "1", "--idle-timeout", "1"])
    closers.append(sw.stop)
    r = Rank(sw.port, "idle", 0, 1)
    closers.append(r.close)
    if not check(start_job([r]), "idle: a world-1 job starts on a switch with --idle-timeout 1"):
        return None
    r.t0 = time.time()
    # §5.2 expiry: a registration whose rank sends no JOIN for 3.5 s is forgotten.  Rank 0
    # of 'silent' registers now (no deadline in seq) and stays silent until test_idle_end.
    q = Rank(sw.port, "silent", 0, 2)
    closers.append(q.close)
    q.join()
    q.peer.expect(K_JOIN_WAIT, q.nonce, 1.0, "JOIN_WAIT silent")
    r.silent = (sw, q)
    return r


def test_idle_end(r):
    """§5.4 idle timeout (part 2): ABORT TIMEOUT after 1 s without DATA (tick ~1 s)."""
    d = r.peer.expect(K_ABORT, None, 3.5, "ABORT TIMEOUT of the idle job")
    got = d and (dec_hdr(d)["job"], dec_hdr(d)["session"], dec_hdr(d)["token"], nak_of(d)[1],
                 nak_of(d)[2])
    check(got == (r.job, r.session, r.token, 0, ERR_TIMEOUT) and time.time() - r.t0 >= 0.9,
          "idle: an ACTIVE job without DATA for --idle-timeout gets ABORT TIMEOUT (nonce 0)",
          repr(got))
    sw, q = r.silent
    left = 3.9 - (time.time() - r.t0)
    if left > 0:
        time.sleep(left)
    q1 = Rank(sw.port, "silent", 1, 2)
    q1.join()
    d = q1.peer.expect((K_JOIN_WAIT, K_JOIN_ACK), q1.nonce, 1.0, "JOIN_WAIT after silence")
    q1.withdraw()
    q1.close()
    check(d is not None and dec_hdr(d)["kind"] == K_JOIN_WAIT and jwait_of(d)[3] == 1 and
          jwait_of(d)[6] == bitmap_of([1]),
          "expiry: a rank silent for more than 3.5 s is forgotten (joined 1, bitmap {1})",
          repr(d and jwait_of(d)))
    c = sw.counters()
    check(c["joins_expired"] == 1, "expiry: the silent rank counted in joins_expired",
          repr(c["joins_expired"]))


def test_drain(sw, closers):
    """§5.4 drain (SIGTERM): JOINs refused SHUTDOWN, JOINING jobs NAKed, an ACTIVE job
    ends with ABORT SHUTDOWN only once its partly received round has completed."""
    d0 = Rank(sw.port, "drain", 0, 2, window=4)
    d1 = Rank(sw.port, "drain", 1, 2, window=4)
    j0 = Rank(sw.port, "drain-joining", 0, 2)
    closers.extend([d0.close, d1.close, j0.close])
    if not check(start_job([d0, d1]), "drain: job 'drain' starts"):
        return
    j0.join()
    j0.peer.expect(K_JOIN_WAIT, j0.nonce, 1.0, "JOIN_WAIT drain-joining")
    d0.data(0, 0, [5], tag=op_tag(1, 1, 0))          # round partly received
    time.sleep(0.05)
    sw.proc.send_signal(signal.SIGTERM)
    d = j0.peer.expect(K_JOIN_NAK, j0.nonce, 1.0, "JOIN_NAK SHUTDOWN to a JOINING rank")
    check(d is not None and nak_of(d)[2] == -1022,
          "drain: a JOINING job's rank gets JOIN_NAK SHUTDOWN", repr(d and nak_of(d)))
    n = Rank(sw.port, "drain-new", 0, 1)
    closers.append(n.close)
    n.join()
    d = n.peer.expect((K_JOIN_NAK, K_JOIN_ACK), n.nonce, 1.0, "JOIN_NAK SHUTDOWN to a new job")
    check(d is not None and dec_hdr(d)["kind"] == K_JOIN_NAK and nak_of(d)[2] == -1022,
          "drain: a new job's JOIN gets JOIN_NAK SHUTDOWN", repr(d and dec_hdr(d)))
    d1.join()
    d = d1.peer.expect((K_JOIN_ACK, K_JOIN_NAK), d1.nonce, 1.0, "JOIN_ACK again while draining")
    check(d is not None and dec_hdr(d)["kind"] == K_JOIN_ACK and dec_hdr(d)["session"] == d1.session,
          "drain: an ACTIVE member's repeated JOIN still gets its JOIN_ACK")
    early = d0.peer.expect(K_ABORT, None, 0.4, "no ABORT while a round is partly received")
    check(early is None, "drain: no ABORT while the job's round is partly received")
    d1.data(0, 0, [6], tag=op_tag(1, 1, 0))
    res = []
    for x in (d0, d1):
        d = x.peer.expect(K_RESULT, None, 1.0, "RESULT during drain")
        res.append(d and struct.unpack_from(">i", d, 32)[0])
    check(res == [11, 11], "drain: the operation in flight completes", repr(res))
    got = []
    for x in (d0, d1):
        d = x.peer.expect(K_ABORT, None, 1.5, "ABORT SHUTDOWN")
        got.append(d and (dec_hdr(d)["session"], dec_hdr(d)["token"], nak_of(d)[2]))
    want = (d0.session, d0.token, -1022)
    check(got == [want, want], "drain: then ABORT SHUTDOWN goes to every rank", repr(got))
    try:
        rc = sw.proc.wait(3)
    except subprocess.TimeoutExpired:
        rc = None
    check(rc == 0, "drain: ina-switch exits with status 0 once it holds no job", repr(rc))


def main():
    global VERBOSE
    ap = argparse.ArgumentParser()
    ap.add_argument("--bindir", required=True)
    ap.add_argument("--libdir")
    ap.add_argument("--pythondir")
    ap.add_argument("-v", action="store_true")
    a = ap.parse_args()
    VERBOSE = a.v
    random.seed()
    signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(GLOBAL_DEADLINE_S)
    tmp = tempfile.mkdtemp(prefix="peer_admission.")
    closers = []
    switches = []
    t0 = time.time()
    rc = 1
    try:
        idle = test_idle_start(a.bindir, tmp, closers)
        test_secret(a.bindir, tmp, closers)
        test_tags(a.bindir, tmp, closers)
        max_elems, max_job_slots = 100, 32
        sw = Switch(a.bindir, tmp, ["--threads", "1", "--slots", "256", "--max-elems",
                                    str(max_elems), "--max-job-slots", str(max_job_slots),
                                    "--min-job-slots", "4"])
        closers.append(sw.stop)
        switches.append(sw)
        test_join_wait(sw, closers)
        test_end_once(sw, closers)
        test_bad_joins(sw, closers)
        active = test_agreement(sw, closers, max_elems, max_job_slots)
        test_mismatch(sw, closers, active)
        test_lanes_agree(sw, closers)
        test_hostile(sw, closers)
        if active:
            for x in active:
                x.leave()
        test_drain(sw, closers)
        if idle:
            test_idle_end(idle)
        test_threads(a.bindir, tmp, closers)
        psw = test_pool(a.bindir, tmp, closers, a)
        test_evict_abort(psw, closers)
        rc = 0 if RESULTS and all(ok for ok, _ in RESULTS) else 1
    except Deadline:
        check(False, "global deadline of %d s passed while waiting for: %s"
              % (GLOBAL_DEADLINE_S, WAITING_FOR[0]))
        rc = 1
    except Exception as e:  # noqa: BLE001 - report any crash as a failure
        import traceback
        traceback.print_exc()
        check(False, "exception while waiting for %s: %r" % (WAITING_FOR[0], e))
        rc = 1
    finally:
        signal.alarm(0)
        for c in reversed(closers):
            try:
                c()
            except Exception:  # noqa: BLE001
                pass
        if VERBOSE:
            for fn in sorted(os.listdir(tmp)):
                if fn.endswith(".log"):
                    print("# ---- %s" % fn)
                    with open(os.path.join(tmp, fn)) as f:
                        lines = [ln for ln in f.read().splitlines() if "event=" in ln]
                        for line in lines[-60:]:
                            print("# " + line)
        shutil.rmtree(tmp, ignore_errors=True)
    npass = sum(1 for ok, _ in RESULTS if ok)
    print("# %d/%d checks passed in %.1f s" % (npass, len(RESULTS), time.time() - t0))
    return rc


if __name__ == "__main__":
    sys.exit(main())

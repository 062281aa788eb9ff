#!/usr/bin/env python3
"""Clean-room peer and conformance test for ina-ps (the parameter-server shard).

Written from docs/PROTOCOL.md alone (§2 transport, §3 header, §4.2/§4.3 NAK body and
reason codes, §14.1 keys/initial values/optimizers, §14.2 the PS protocol and its memory
(§14.2.8), §14.3 the hot table at the switch and --hot-memory).  It starts ina-ps (and, for §14.3, ina-switch) on 127.0.0.1 with
free ports, plays the workers of a few jobs with plain UDP sockets, and checks the answers
and the values against a model computed here in emulated binary32.

    python3 peer_ps.py --bindir DIR [--libdir DIR] [--pythondir DIR] [-v]

Standard library only.  Exit 0 only if every check passed.  --libdir and --pythondir are
accepted for a uniform command line and not used: every peer here is clean-room.
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

DEADLINE_S = 60.0
VERBOSE = False

# --------------------------------------------------------------------------------------
# Wire constants
# --------------------------------------------------------------------------------------
MAGIC = 0x494E            # §3: "IN"
VERSION = 1               # §3
MAX_DATAGRAM = 65507      # §2: INA_MAX_DATAGRAM, the IPv4 UDP limit
RANK_SERVER = 0xFFFF      # §3 / §14.2: rank of every answer (INA_RANK_SWITCH)

# §4 / §14.2 kinds
K_PS_JOIN, K_PS_JOIN_ACK, K_PS_JOIN_NAK = 32, 33, 34
K_PS_PUSH, K_PS_PUSH_ACK = 35, 36
K_PS_COMMIT, K_PS_COMMIT_ACK = 37, 38
K_PS_PULL, K_PS_PULL_RESP = 39, 40
K_PS_ASSIGN, K_PS_ASSIGN_ACK = 41, 42
K_PS_LEAVE, K_PS_ABORT = 43, 44
# §4 / §14.3 kinds at the switch
K_JOIN, K_JOIN_ACK, K_JOIN_NAK, K_LEAVE, K_JOIN_WAIT = 16, 17, 18, 19, 27
K_HOT_DATA, K_HOT_RESULT = 5, 6
K_HOT_INSTALL, K_HOT_FETCH, K_HOT_KEYS = 45, 46, 47
K_HOT_SAMPLE = 64

FLAG_ABORT = 0x0001       # §3 flags bit 0 (LEAVE, PS_LEAVE §14.2)
FLAG_PS_STATE = 0x0002    # §14.2: flag bit 1 of PS_PULL / PS_PULL_RESP
FLAG_CAP_HOT = 0x0080     # §3: JOIN_ACK flag bit 7 (§14.3)
FLAG_HOT_KEYED = 0x0001   # §14.3: HOT_DATA flags bit 0
FLAG_HOT_BITMAP = 0x0002  # §14.3: HOT_DATA flags bit 1
OP_HOT_F32 = 9            # §3 / §14.3

# §4.3 reason codes
ERR_TIMEOUT = -1001
ERR_ABORTED = -1002
ERR_REJECTED = -1003
ERR_NOSPACE = -1004
ERR_MISMATCH = -1005
ERR_NOTSUP = -1007
ERR_PROTO = -1008
ERR_PS_FULL = -1016

OPTIM_SGD, OPTIM_ADAGRAD = 0, 1      # §14.1 / §14.2.1
INIT_ZERO, INIT_UNIFORM = 0, 1

# §3: the 32-byte header, every field big-endian (§2):
# magic u16, version u8, kind u8, job u16, rank u16, session u32, token u32,
# slot u32 (bit 31 = set), seq u32, count u16, exp i16, flags u16, op u8, tag u8
HDR = struct.Struct('>HBBHHIIIIHhHBB')
assert HDR.size == 32

# §14.2.1: PS_JOIN / PS_JOIN_ACK body, 96 bytes from byte 32:
# nonce u64, world u16, shard u16, nshards u16, dim u16, optim u8, mode u8, init u8,
# max_delay u8, lr f32, eps f32, init_acc f32, init_scale f32, sw_version u32,
# init_seed u64, name 32 B, hot_keys u32, profile_steps u32, reprofile_steps u32, reserved
PSJOIN = struct.Struct('>QHHHHBBBBffffIQ32sIIII')
assert PSJOIN.size == 96

# §4.1: JOIN body (64 B) for the switch (§14.3 uses an ordinary switch job)
JOINB = struct.Struct('>QHHIIIHBBHH32s')
assert JOINB.size == 64

# §4.2: NAK body (16 B): nonce u64, reason i32, port/world u16, nlanes u8, reserved u8
NAKB = struct.Struct('>QiHBB')
# §14.2.6: PS_ABORT body (24 B): nonce u64 (0), reason i32, lowest uncommitted rank u16,
# u16 0, A u32, u32 0
ABORTB = struct.Struct('>QiHHII')
assert ABORTB.size == 24

M64 = (1 << 64) - 1


# --------------------------------------------------------------------------------------
# Harness: checks, deadline, daemons
# --------------------------------------------------------------------------------------
class State:
    procs = []
    tmpdir = None
    waiting = 'start-up'
    sent = {}       # (ip, port) -> datagrams sent there
    failures = 0
    passes = 0


def log(msg):
    if VERBOSE:
        print('# ' + msg, flush=True)


def check(cond, desc, detail=''):
    if cond:
        State.passes += 1
        print('ok - ' + desc, flush=True)
    else:
        State.failures += 1
        print('FAIL - ' + desc + ((': ' + detail) if detail else ''), flush=True)
    return cond


def waiting(what):
    State.waiting = what
    log('waiting: ' + what)


def kill_daemons():
    for p in State.procs:
        if p.poll() is None:
            try:
                p.send_signal(signal.SIGTERM)
            except OSError:
                pass
    t_end = time.time() + 2.0
    for p in State.procs:
        try:
            p.wait(timeout=max(0.05, t_end - time.time()))
        except subprocess.TimeoutExpired:
            p.kill()
            try:
                p.wait(timeout=1)
            except subprocess.TimeoutExpired:
                pass


def watchdog():
    time.sleep(DEADLINE_S)
    print('FAIL - global deadline of %.0f s passed while waiting for: %s'
          % (DEADLINE_S, State.waiting), flush=True)
    try:
        kill_daemons()
    finally:
        os._exit(1)


def start_daemon(args, portfile, tag, extra_portfiles=()):
    """Start a daemon whose bound port(s) appear in port files; return the ports."""
    errf = open(os.path.join(State.tmpdir, tag + '.err'), 'wb')
    p = subprocess.Popen(args, stdout=errf, stderr=errf, stdin=subprocess.DEVNULL)
    State.procs.append(p)
    ports = []
    for pf in (portfile,) + tuple(extra_portfiles):
        waiting('%s to write its port file %s' % (tag, pf))
        t_end = time.time() + 5.0
        while True:
            try:
                with open(pf) as f:
                    txt = f.read().strip()
                if txt:
                    ports.append(int(txt.split()[-1].split(':')[-1]))
                    break
            except (OSError, ValueError):
                pass
            if p.poll() is not None:
                raise RuntimeError('%s exited early (rc %s); log %s' % (tag, p.returncode,
                                                                        errf.name))
            if time.time() > t_end:
                raise RuntimeError('%s wrote no port file %s' % (tag, pf))
            time.sleep(0.02)
    return p, ports


# --------------------------------------------------------------------------------------
# binary32 emulation and the §14.1 model
# --------------------------------------------------------------------------------------
_F = struct.Struct('>f')


def f32(x):
    """Round a double to binary32 (round to nearest even, as a C (float) cast)."""
    return _F.unpack(_F.pack(x))[0]


# An operation on two binary32 values computed in double and rounded once to binary32 is
# the correctly rounded binary32 result for +, -, *, / and sqrt (double has >= 2*24+2
# bits), so these emulate C float arithmetic exactly.
def fadd(a, b):
    return f32(a + b)


def fsub(a, b):
    return f32(a - b)


def fmul(a, b):
    return f32(a * b)


def fdiv(a, b):
    return f32(a / b)


def fsqrt(a):
    return f32(math.sqrt(a))


def fbits(x):
    return _F.pack(x)


def mix(x):
    """§14.1: splitmix64's finalizer, 64-bit wrapping arithmetic."""
    x &= M64
    x ^= x >> 30
    x = (x * 0xBF58476D1CE4E5B9) & M64
    x ^= x >> 27
    x = (x * 0x94D049BB133111EB) & M64
    return x ^ (x >> 31)


def shard_of(key, nshards):
    """§14.1: key k lives on shard (mix(k) >> 32) mod S."""
    return (mix(key) >> 32) % nshards


class Job:
    """Parameters of a key-value job (§14.2.1) and the model of its values (§14.1)."""

    def __init__(self, name, world, dim, optim=OPTIM_SGD, init=INIT_ZERO, lr=0.5,
                 eps=1.0, init_acc=0.0, init_scale=1.0, seed=0, shard=0, nshards=1):
        self.name, self.world, self.dim = name, world, dim
        self.optim, self.init = optim, init
        self.lr, self.eps = f32(lr), f32(eps)
        self.init_acc, self.init_scale = f32(init_acc), f32(init_scale)
        self.seed, self.shard, self.nshards = seed, shard, nshards
        self.values = {}   # key -> [dim f32]
        self.states = {}   # key -> [dim f32]
        self.version = {}  # key -> steps included (§14.2.4)
        self.applied = 0   # A

    def initial(self, key):
        """§14.1 initial value of a key never updated."""
        if self.init == INIT_ZERO:
            return [0.0] * self.dim
        out = []
        for j in range(self.dim):
            x = mix((mix(key ^ self.seed) + j * 0x9E3779B97F4A7C15) & M64)
            u = (x >> 11) / float(1 << 53)
            out.append(f32((2.0 * u - 1.0) * self.init_scale))   # computed in double
        return out

    def value(self, key):
        return self.values.get(key) or self.initial(key)

    def state(self, key):
        return self.states.get(key) or [self.init_acc] * self.dim

    def apply_step(self, entries):
        """One synchronous step: `entries` in the shard's arrival order (rank by rank,
        packet by packet, entry by entry).  §14.1: summed in binary32 from +0, then the
        optimizer per float, skipping g == 0 exactly.  §14.2.4: version = A + 1."""
        acc = {}
        for key, vals in entries:
            a = acc.setdefault(key, [0.0] * self.dim)
            for i, v in enumerate(vals):
                a[i] = fadd(a[i], f32(v))
        for key, g in acc.items():
            w = list(self.value(key))
            n = list(self.state(key))
            for i in range(self.dim):
                if g[i] == 0.0:
                    continue
                if self.optim == OPTIM_SGD:
                    w[i] = fsub(w[i], fmul(self.lr, g[i]))
                else:
                    n[i] = fadd(n[i], fmul(g[i], g[i]))
                    w[i] = fsub(w[i], fdiv(fmul(self.lr, g[i]),
                                           fadd(self.eps, fsqrt(n[i]))))
            self.values[key] = w
            self.states[key] = n
            self.version[key] = self.applied + 1
        self.applied += 1


# --------------------------------------------------------------------------------------
# The peer: one UDP socket per (rank, shard) (§2, §14: "one socket per shard")
# --------------------------------------------------------------------------------------
class Msg:
    def __init__(self, raw):
        self.raw = raw
        if len(raw) >= 32:
            (self.magic, self.version, self.kind, self.job, self.rank, self.session,
             self.token, self.slot, self.seq, self.count, self.exp, self.flags, self.op,
             self.tag) = HDR.unpack_from(raw)
        else:
            self.kind = None
        self.body = raw[32:]

    def __repr__(self):
        if self.kind is None:
            return '<short %d B>' % len(self.raw)
        return ('<kind %d job %d rank %#x sess %d tok %#x slot %d seq %d count %d '
                'flags %#x len %d>' % (self.kind, self.job, self.rank, self.session,
                                       self.token, self.slot, self.seq, self.count,
                                       self.flags, len(self.raw)))


def hdr(kind, job=0, rank=0, session=0, token=0, slot=0, seq=0, count=0, exp=0, flags=0,
        op=0, tag=0, magic=MAGIC, version=VERSION):
    return HDR.pack(magic, version, kind, job, rank, session, token, slot, seq, count,
                    exp, flags, op, tag)


class Peer:
    def __init__(self, addr, rank, bind_ip='127.0.0.1'):
        self.addr = addr
        self.rank = rank
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
        self.sock.bind((bind_ip, 0))
        # §2: the socket is connect()ed, so only the server's datagrams are delivered and
        # the source address:port is the same for every datagram of the rank.
        self.sock.connect(addr)
        self.job = self.session = self.token = 0
        self.nonce = random.getrandbits(64) | 1

    def close(self):
        self.sock.close()

    def send_raw(self, data):
        self.sock.send(data)
        State.sent[self.addr] = State.sent.get(self.addr, 0) + 1

    def send(self, kind, body=b'', **kw):
        kw.setdefault('job', self.job)
        kw.setdefault('rank', self.rank)
        kw.setdefault('session', self.session)
        kw.setdefault('token', self.token)
        self.send_raw(hdr(kind, **kw) + body)

    def recv(self, what, timeout=3.0):
        waiting('%s (rank %d socket)' % (what, self.rank))
        self.sock.settimeout(timeout)
        try:
            raw = self.sock.recv(70000)
        except socket.timeout:
            return None
        m = Msg(raw)
        log('rank %d got %r' % (self.rank, m))
        return m

    def pending(self):
        """Whatever is queued on the socket now, without waiting."""
        out = []
        self.sock.setblocking(False)
        try:
            while True:
                out.append(Msg(self.sock.recv(70000)))
        except (BlockingIOError, InterruptedError):
            pass
        finally:
            self.sock.setblocking(True)
        return out

    # ---- §14.2 requests
    def push(self, step, index, entries, count=None, extra=b'', trim=0, **kw):
        """§14.2: PS_PUSH, slot = packet index, seq = step, count entries of
        (key u64, dim x f32)."""
        body = b''.join(struct.pack('>Q', k) + struct.pack('>%df' % len(v), *v)
                        for k, v in entries) + extra
        if trim:
            body = body[:-trim]
        self.send(K_PS_PUSH, body, slot=index, seq=step,
                  count=len(entries) if count is None else count, **kw)

    def commit(self, step, npackets, **kw):
        """§14.2: PS_COMMIT, slot = packets sent for this step to this shard, seq = step."""
        self.send(K_PS_COMMIT, slot=npackets, seq=step, **kw)

    def pull(self, keys, req_id, state=False, count=None, **kw):
        """§14.2: PS_PULL, slot = request id, seq 0, count keys; flag bit 1 = STATE."""
        self.send(K_PS_PULL, struct.pack('>%dQ' % len(keys), *keys), slot=req_id, seq=0,
                  count=len(keys) if count is None else count,
                  flags=FLAG_PS_STATE if state else 0, **kw)

    def assign(self, step, req_id, entries, count=None, **kw):
        """§14.2: PS_ASSIGN, seq = step T, slot = request id, entries of
        (key u64, dim f32 value, dim f32 state)."""
        body = b''.join(struct.pack('>Q', k) + struct.pack('>%df' % len(v), *v)
                        + struct.pack('>%df' % len(s), *s) for k, v, s in entries)
        self.send(K_PS_ASSIGN, body, slot=req_id, seq=step,
                  count=len(entries) if count is None else count, **kw)

    def leave(self, abort=False, reason=0, steps=0):
        """§14.2: PS_LEAVE, 8 B body reason i32, steps completed u32; flag bit 0 ABORT."""
        self.send(K_PS_LEAVE, struct.pack('>iI', reason, steps),
                  flags=FLAG_ABORT if abort else 0)


def answer_ok(m, peer, kind, length=None):
    """§14.2.6: answers carry the shard's job, session and token; rank 0xFFFF (§14.2)."""
    if m is None:
        return False, 'no answer'
    if m.kind != kind:
        return False, 'got %r, wanted kind %d' % (m, kind)
    if (m.magic, m.version) != (MAGIC, VERSION):
        return False, 'bad magic/version %r' % m
    if (m.job, m.session, m.token) != (peer.job, peer.session, peer.token):
        return False, 'job/session/token %d/%d/%#x != %d/%d/%#x' % (
            m.job, m.session, m.token, peer.job, peer.session, peer.token)
    if m.rank != RANK_SERVER:
        return False, 'rank %#x' % m.rank
    if length is not None and len(m.raw) != length:
        return False, 'length %d != %d' % (len(m.raw), length)
    return True, ''


def ps_join_body(job, nonce, **over):
    p = dict(nonce=nonce, world=job.world, shard=job.shard, nshards=job.nshards,
             dim=job.dim, optim=job.optim, mode=0, init=job.init, max_delay=0, lr=job.lr,
             eps=job.eps, init_acc=job.init_acc, init_scale=job.init_scale, sw=100,
             seed=job.seed, name=job.name.encode(), hot=0, prof=0, reprof=0, res=0)
    p.update(over)
    return PSJOIN.pack(p['nonce'], p['world'], p['shard'], p['nshards'], p['dim'],
                       p['optim'], p['mode'], p['init'], p['max_delay'], p['lr'], p['eps'],
                       p['init_acc'], p['init_scale'], p['sw'], p['seed'], p['name'],
                       p['hot'], p['prof'], p['reprof'], p['res'])


def split_body(job, nonce, first, last, split=1, cut=0, **over):
    """§14.2.1: a PS_JOIN body with split (byte 94) and, after the 96 bytes, range_first
    and range_last (bytes 96..103); `cut` bytes removed from its end."""
    b = bytearray(ps_join_body(job, nonce, **over))
    b[94] = split
    b += struct.pack('>II', first, last)
    return bytes(b[:len(b) - cut])


def split_first(weights):
    """§14.1: F(s) = floor(2^32 (w_0 + ... + w_(s-1)) / W), s = 0..S."""
    total, before, out = sum(weights), 0, []
    for w in weights + [0]:
        out.append((before << 32) // total)
        before += w
    return out


def send_ps_join(peer, job, rank=None, version=VERSION, body=None, **over):
    """§14.2 PS_JOIN: header job/session/token 0, rank = proposed rank."""
    if body is None:
        body = ps_join_body(job, peer.nonce, **over)
    peer.send_raw(hdr(K_PS_JOIN, rank=peer.rank if rank is None else rank,
                      version=version) + body)


def expect_nak(peer, reason, desc, nonce=None):
    m = peer.recv('PS_JOIN_NAK ' + desc)
    if m is None:
        return check(False, desc, 'no answer')
    ok = (m.kind == K_PS_JOIN_NAK and len(m.raw) >= 48 and m.rank == RANK_SERVER and
          m.version == VERSION and
          m.job == 0 and m.session == 0 and m.token == 0)
    det = repr(m)
    if ok:
        n, r, _, _, _ = NAKB.unpack_from(m.body)
        ok = (n == (peer.nonce if nonce is None else nonce) and r == reason)
        det = 'nonce %#x reason %d (want %d)' % (n, r, reason)
    return check(ok, desc, det)


def join_all(addr, job, peers, desc):
    """§14.2.2: every rank sends PS_JOIN; when all N are registered each gets
    PS_JOIN_ACK with the job id (1..16), a nonzero session, a token."""
    for i, p in enumerate(peers):
        send_ps_join(p, job)
        if i == 0 and len(peers) > 1:
            # A job whose ranks are not all registered answers nothing (§14.2.2 step 8).
            m = p.recv('no answer to a lone PS_JOIN', timeout=0.15)
            check(m is None, desc + ': no answer while ranks are missing', repr(m))
    acks = []
    for p in peers:
        m = p.recv('PS_JOIN_ACK for rank %d of %s' % (p.rank, job.name))
        acks.append(m)
    ok = all(m is not None and m.kind == K_PS_JOIN_ACK for m in acks)
    det = repr(acks)
    if ok:
        first = acks[0]
        for p, m in zip(peers, acks):
            b = PSJOIN.unpack_from(m.body)
            ok = ok and len(m.raw) >= 128 and m.rank == RANK_SERVER and m.version == 1
            ok = ok and 1 <= m.job <= 16 and m.session != 0
            ok = ok and (m.job, m.session, m.token) == (first.job, first.session,
                                                          first.token)
            # body: the job's parameters and the rank's own nonce
            ok = ok and b[0] == p.nonce and b[1] == job.world and b[2] == job.shard
            ok = ok and b[3] == job.nshards and b[4] == job.dim and b[5] == job.optim
            ok = ok and b[7] == job.init and b[15].rstrip(b'\0') == job.name.encode()
            ok = ok and fbits(b[9]) == fbits(job.lr) and b[14] == job.seed
            p.job, p.session, p.token = m.job, m.session, m.token
        det = 'acks %r' % acks
    check(ok, desc + ': PS_JOIN_ACK to every rank, same job/session/token, '
          'parameters and own nonce echoed', det)
    return ok


def do_pull(peer, job, keys, req_id, state=False, desc=None):
    """PULL and compare with the model, bit for bit (§14.2.5)."""
    peer.pull(keys, req_id, state=state)
    m = peer.recv('PS_PULL_RESP to request %d' % req_id)
    per = job.dim * (2 if state else 1)
    ok, det = answer_ok(m, peer, K_PS_PULL_RESP, 32 + 4 * len(keys) * per)
    if ok:
        ok = m.slot == req_id and m.seq == 0 and m.count == len(keys) and \
            (m.flags & FLAG_PS_STATE) == (FLAG_PS_STATE if state else 0)
        det = 'slot/seq/count/flags %d/%d/%d/%#x' % (m.slot, m.seq, m.count, m.flags)
    if ok:
        d = job.dim
        vals = struct.unpack('>%df' % (len(keys) * per), m.body)
        bad = []
        for i, k in enumerate(keys):
            got = vals[i * d:(i + 1) * d]
            want = job.value(k)
            if [fbits(x) for x in got] != [fbits(x) for x in want]:
                bad.append('key %#x value %r want %r' % (k, got, want))
            if state:
                off = len(keys) * d
                gs = vals[off + i * d:off + (i + 1) * d]
                ws = job.state(k)
                if [fbits(x) for x in gs] != [fbits(x) for x in ws]:
                    bad.append('key %#x state %r want %r' % (k, gs, ws))
        ok = not bad
        det = '%d mismatches, first: %s' % (len(bad), bad[:2])
    if desc:
        check(ok, desc, det)
    return ok, m


def counters(mport, addr):
    """GET /counters (docs/PS.md).  Found by experiment: the served counters lag the
    datagrams by up to ~100 ms (a periodic snapshot), so poll until rx_packets counts
    every datagram this peer sent to the shard."""
    t_end = time.time() + 3.0
    while True:
        waiting('GET /counters from ina-ps to count %d datagrams'
                % State.sent.get(addr, 0))
        with urllib.request.urlopen('http://127.0.0.1:%d/counters' % mport,
                                    timeout=3) as r:
            c = json.loads(r.read().decode())['counters']
        if c.get('rx_packets', 0) >= State.sent.get(addr, 0) or time.time() > t_end:
            return c
        time.sleep(0.03)


def drops(c, cause):
    return c.get('drops', {}).get(cause, 0)


def push_ack_ok(peer, step, index, desc):
    m = peer.recv('PS_PUSH_ACK step %d index %d' % (step, index))
    ok, det = answer_ok(m, peer, K_PS_PUSH_ACK, 32)
    if ok:
        ok = m.slot == index and m.seq == step
        det = 'slot %d seq %d' % (m.slot, m.seq)
    if desc:
        check(ok, desc, det)
    return ok


def commit_ack_ok(peer, step):
    m = peer.recv('PS_COMMIT_ACK step %d' % step)
    ok, det = answer_ok(m, peer, K_PS_COMMIT_ACK, 32)
    if ok:
        ok = m.slot == 0 and m.seq == step
        det = 'slot %d seq %d' % (m.slot, m.seq)
    return ok, det


def two_rank_step(p0, p1, job, step, e0, e1):
    """§14.2.4: one step of a two-rank job, one PUSH each (p0's first: the shard sums in
    arrival order), both COMMITs; the model applies it. @return whether every answer
    came."""
    p0.push(step, 0, e0)
    okp0 = push_ack_ok(p0, step, 0, None)
    p1.push(step, 0, e1)
    okp1 = push_ack_ok(p1, step, 0, None)
    p0.commit(step, 1)
    p1.commit(step, 1)
    okc0, _ = commit_ack_ok(p0, step)
    okc1, _ = commit_ack_ok(p1, step)
    job.apply_step(e0 + e1)
    return okp0 and okp1 and okc0 and okc1


def drop_diffs(c_before, c_after, causes):
    """The drops expected (one per entry of `causes`) by cause, and the causes whose
    counters moved otherwise ('CAUSE +got (want +n)')."""
    want = {}
    for x in causes:
        want[x] = want.get(x, 0) + 1
    diffs = ['%s %+d (want %+d)' % (c, drops(c_after, c) - drops(c_before, c), w)
             for c, w in sorted(want.items()) if drops(c_after, c) - drops(c_before, c) != w]
    return want, diffs


def rand_f32(rng, lo=-1.0, hi=1.0):
    return f32(rng.uniform(lo, hi))


# --------------------------------------------------------------------------------------
# The tests
# --------------------------------------------------------------------------------------
def test_ps(bindir):
    rng = random.Random(20261127)
    tmp = State.tmpdir
    pf, mpf = os.path.join(tmp, 'ps.port'), os.path.join(tmp, 'ps.mport')
    # docs/PS.md + `ina-ps --help`: port 0 = any, --port-file, --metrics with port 0 and
    # --metrics-port-file, GET /counters as JSON.
    _, (port, mport) = start_daemon(
        [os.path.join(bindir, 'ina-ps'), '--listen', '127.0.0.1:0', '--shard', '0/1',
         '--initial-keys', '1024', '--port-file', pf, '--metrics', '127.0.0.1:0',
         '--metrics-port-file', mpf, '--log-level', 'debug' if VERBOSE else 'warn'],
        pf, 'ina-ps', (mpf,))
    addr = ('127.0.0.1', port)
    log('ina-ps on %d, metrics on %d' % (port, mport))

    # ---------------- §14.1: the finalizer (self-check on splitmix64's known output)
    # splitmix64 seeded with 0 returns mix(0x9E3779B97F4A7C15) = 0xE220A8397B1DCDAF first.
    check(mix(0x9E3779B97F4A7C15) == 0xE220A8397B1DCDAF,
          '§14.1 mix() is splitmix64\'s finalizer (known vector)')
    check([shard_of(k, 1) for k in (0, 1, M64)] == [0, 0, 0],
          '§14.1 every key on shard 0 of 1')

    # ---------------- Job A: SGD, UNIFORM init, dim 3, two ranks
    A = Job('cr-sgd', world=2, dim=3, optim=OPTIM_SGD, init=INIT_UNIFORM, lr=0.375,
            init_scale=0.25, seed=0x0123456789ABCDEF)
    a0, a1 = Peer(addr, 0), Peer(addr, 1)
    if not join_all(addr, A, [a0, a1], 'job A (SGD, UNIFORM, dim 3, N 2)'):
        return
    # §14.2.2 step 6: the same nonce from the registered address:port -> PS_JOIN_ACK again
    send_ps_join(a0, A)
    m = a0.recv('repeated PS_JOIN_ACK')
    check(m is not None and m.kind == K_PS_JOIN_ACK and
          (m.job, m.session, m.token) == (a0.job, a0.session, a0.token) and
          PSJOIN.unpack_from(m.body)[0] == a0.nonce,
          '§14.2.2 step 6: a repeated PS_JOIN (same nonce, same port) gets the same ACK',
          repr(m))

    # ---------------- initial values of keys never pushed (§14.1, §14.2.5)
    keys0 = [0, 1, 2, 0xFFFFFFFFFFFFFFFF, 0x8000000000000000, A.seed] + \
        [rng.getrandbits(64) for _ in range(20)]
    do_pull(a0, A, keys0, 1, desc='§14.1 UNIFORM initial values of 26 never-pushed keys '
            '(bit-exact)')
    do_pull(a1, A, keys0[:5], 2, state=True,
            desc='§14.2.5 PULL with STATE on an SGD job: values then init_acc states')

    # ---------------- step 0: two ranks push overlapping key sets (§14.2.4)
    K = [rng.getrandbits(64) for _ in range(8)]
    # rank 0: K0..K4, with K0 repeated (repeats stay separate entries, summed, §14.2.4)
    e0 = [(K[0], [rand_f32(rng) for _ in range(3)]) for _ in range(1)]
    e0 += [(k, [rand_f32(rng) for _ in range(3)]) for k in K[1:5]]
    e0 += [(K[0], [rand_f32(rng) for _ in range(3)])]
    # rank 1: K2..K6; K3 cancels rank 0's exactly (g = 0 skipped); K4 cancels in float 1
    e1 = [(k, [rand_f32(rng) for _ in range(3)]) for k in K[2:7]]
    v3 = dict(e0)[K[3]]
    e1[1] = (K[3], [-x for x in v3])
    v4 = dict(e0)[K[4]]
    e1[2] = (K[4], [rand_f32(rng), -v4[1], rand_f32(rng)])
    a0.push(0, 0, e0)
    push_ack_ok(a0, 0, 0, '§14.2.4 PS_PUSH step 0 rank 0: PS_PUSH_ACK slot/seq echoed, '
                '32 bytes')
    a1.push(0, 0, e1)
    push_ack_ok(a1, 0, 0, '§14.2.4 PS_PUSH step 0 rank 1: PS_PUSH_ACK')
    # rank 0 commits; the step is not applied until rank 1 commits too.  Probe with a
    # PULL: the first answer must be the PULL_RESP (no COMMIT_ACK yet), values unchanged.
    a0.commit(0, 1)
    do_pull(a0, A, K, 3, desc='§14.2.4 after one of two COMMITs: no COMMIT_ACK, step not '
            'applied (PULL shows initial values)')
    a1.commit(0, 1)
    ok0, d0 = commit_ack_ok(a0, 0)
    ok1, d1 = commit_ack_ok(a1, 0)
    check(ok0 and ok1, '§14.2.4 all N committed: PS_COMMIT_ACK (slot 0, seq 0) to every '
          'rank', d0 + ' / ' + d1)
    A.apply_step(e0 + e1)
    do_pull(a1, A, K + keys0[:3], 4, desc='§14.1 SGD after step 0: binary32 sums in '
            'arrival order, g = 0 skipped per float, overlapping keys (bit-exact)')
    # K3 cancelled to exactly 0: still its initial value
    check(A.value(K[3]) == A.initial(K[3]), 'model: a key whose summed gradient is 0 keeps '
          'its initial value (cross-check of the case above)')

    # ---------------- step 1: several packets, duplicates, EARLY, FUTURE, INDEX
    c_before = counters(mport, addr)
    f0a = [(K[0], [rand_f32(rng) for _ in range(3)]), (K[7], [rand_f32(rng) for _ in range(3)])]
    f0b = [(K[1], [rand_f32(rng) for _ in range(3)])]
    f1 = [(K[7], [rand_f32(rng) for _ in range(3)]), (K[0], [rand_f32(rng) for _ in range(3)])]
    a0.push(1, 0, f0a)
    push_ack_ok(a0, 1, 0, None)
    a0.push(1, 0, f0a)          # the same packet again: (session, rank, step, index) seen
    push_ack_ok(a0, 1, 0, '§14.2.4 rule 5: a duplicate PUSH (same step and index) is '
                'acknowledged again')
    # COMMIT with fewer packets received than it announces: dropped EARLY, no answer
    a0.commit(1, 2)
    # PUSH of step A + 2 = 3: dropped FUTURE
    a0.push(3, 0, f0b)
    # PUSH with packet index 2^20: dropped INDEX
    a0.push(1, 1 << 20, f0b)
    ok, _ = do_pull(a0, A, K, 5)
    check(ok, '§14.2.4 EARLY COMMIT, FUTURE and INDEX PUSHes: no answer (next answer is '
          'the probe PULL), values unchanged')
    a0.push(1, 1, f0b)
    push_ack_ok(a0, 1, 1, '§14.2.4 second packet (index 1) of step 1')
    a0.commit(1, 2)
    a0.commit(1, 2)             # committed already: ignored (rule 2)
    a1.push(1, 0, f1)
    push_ack_ok(a1, 1, 0, None)
    a1.commit(1, 1)
    ok0, d0 = commit_ack_ok(a0, 1)
    ok1, d1 = commit_ack_ok(a1, 1)
    check(ok0 and ok1, '§14.2.4 step 1 applied: COMMIT_ACK seq 1 to both ranks', d0 + d1)
    extra0 = a0.pending()
    check(extra0 == [], '§14.2.4 rule 2: the repeated COMMIT got no second COMMIT_ACK',
          repr(extra0))
    A.apply_step(f0a + f0b + f1)
    do_pull(a0, A, K, 6, desc='§14.2.4 step 1 values: the duplicate PUSH was added once')
    # retransmissions of an applied step: PUSH -> ACK without adding; COMMIT -> ACK at once
    a1.push(1, 0, f1)
    push_ack_ok(a1, 1, 0, '§14.2.4 rule 2: a PUSH of an applied step is acknowledged')
    a1.commit(1, 1)
    ok1, d1 = commit_ack_ok(a1, 1)
    check(ok1, '§14.2.4 COMMIT rule 1: a COMMIT of an applied step is acknowledged at once',
          d1)
    do_pull(a1, A, K, 7, desc='§14.2.4 values unchanged by the late copies')
    c_after = counters(mport, addr)
    check(c_after['push_dups'] - c_before['push_dups'] == 2,
          'counter push_dups +2 (one duplicate in the window, one after the step)',
          '%d -> %d' % (c_before['push_dups'], c_after['push_dups']))
    for cause in ('EARLY', 'FUTURE', 'INDEX'):
        check(drops(c_after, cause) - drops(c_before, cause) == 1,
              '§14.2.3 drop counter %s +1' % cause,
              '%d -> %d' % (drops(c_before, cause), drops(c_after, cause)))
    check(c_after['steps_applied'] - c_before['steps_applied'] == 1,
          'counter steps_applied +1 for step 1')

    # ---------------- many keys in one datagram (§2, §14.2)
    d = A.dim
    # PUSH: exactly 32 + count*(8 + 4 dim) <= 65507 (one IPv4 UDP datagram, §2)
    nmax_push = (MAX_DATAGRAM - 32) // (8 + 4 * d)
    big = []
    seen = set()
    while len(big) < nmax_push:
        k = rng.getrandbits(64)
        if k not in seen:
            seen.add(k)
            big.append((k, [rand_f32(rng) for _ in range(d)]))
    a0.push(2, 0, big)
    push_ack_ok(a0, 2, 0, '§14.2 one PS_PUSH of %d entries (%d bytes, the most one '
                'datagram carries at dim %d)' % (nmax_push, 32 + nmax_push * (8 + 4 * d), d))
    a0.commit(2, 1)
    a1.push(2, 0, big[:10])      # rank 1 overlaps the first 10 keys
    push_ack_ok(a1, 2, 0, None)
    a1.commit(2, 1)
    ok0, _ = commit_ack_ok(a0, 2)
    ok1, _ = commit_ack_ok(a1, 2)
    A.apply_step(big + big[:10])
    bigkeys = [k for k, _ in big]
    # PULL: the answer is 32 + 4*count*dim and must be <= 65507
    nmax_pull = (MAX_DATAGRAM - 32) // (4 * d)
    pull_keys = (bigkeys * 2)[:nmax_pull]
    ok, _ = do_pull(a0, A, pull_keys, 8)
    check(ok0 and ok1 and ok, '§14.2.5 one PULL of %d keys (answer %d bytes, the most at '
          'dim %d) returns the step-2 values of all %d pushed keys' %
          (nmax_pull, 32 + 4 * d * nmax_pull, d, nmax_push))
    nmax_pull_st = (MAX_DATAGRAM - 32) // (8 * d)
    ok, _ = do_pull(a1, A, bigkeys[:nmax_pull_st], 9, state=True)
    check(ok, '§14.2.5 one PULL with STATE of %d keys (answer %d bytes)' %
          (nmax_pull_st, 32 + 8 * d * nmax_pull_st))
    c_before = counters(mport, addr)
    a0.pull((bigkeys * 2)[:nmax_pull + 1], 10)
    a1.pull(bigkeys[:nmax_pull_st + 1], 11, state=True)
    ok0, _ = do_pull(a0, A, K[:2], 12)
    ok1, _ = do_pull(a1, A, K[:2], 13)
    c_after = counters(mport, addr)
    check(ok0 and ok1 and drops(c_after, 'LENGTH') - drops(c_before, 'LENGTH') == 2,
          '§14.2.5 one key over the answer limit (PULL of %d keys; %d with STATE): no '
          'answer, drop LENGTH +2' % (nmax_pull + 1, nmax_pull_st + 1),
          'LENGTH %d -> %d' % (drops(c_before, 'LENGTH'), drops(c_after, 'LENGTH')))
    # A PUSH one entry over the limit is over the IPv4 UDP limit: it cannot be sent.
    try:
        a0.push(3, 0, big + [big[0]])
        sent = True
    except OSError:
        sent = False
    check(not sent, '§2 a PS_PUSH one entry over (%d bytes) cannot leave as one datagram' %
          (32 + (nmax_push + 1) * (8 + 4 * d)))

    # ---------------- hostile datagrams (§14.2.3), then the server still serves
    c_before = counters(mport, addr)
    hostile = []
    good = [(K[5], [1.0, 2.0, 3.0])]
    a0.push(3, 0, good, token=a0.token ^ 0x5A5A5A5A); hostile.append('TOKEN')
    a0.push(3, 0, good, session=a0.session + 1000); hostile.append('SESSION')
    a0.push(3, 0, good, job=17); hostile.append('NO_JOB')
    a0.push(3, 0, good, job=0); hostile.append('NO_JOB')
    a0.push(3, 0, good, rank=2); hostile.append('RANK')
    a0.push(3, 0, good, trim=1); hostile.append('LENGTH')           # truncated body
    a0.push(3, 0, good + good, count=3); hostile.append('LENGTH')   # count > entries
    a0.push(3, 0, good + good, count=1); hostile.append('LENGTH')   # count < entries
    a0.pull([K[0], K[1]], 77, count=3); hostile.append('LENGTH')    # key count mismatch
    a0.assign(3, 78, [(K[0], [0.0] * 3, [0.0] * 3)], count=2); hostile.append('LENGTH')
    a0.send_raw(b'\x49\x4e\x01\x27' + b'\0' * 20); hostile.append('SHORT')
    a0.send_raw(hdr(K_PS_PULL, job=a0.job, rank=0, session=a0.session, token=a0.token,
                    magic=0x4E49)); hostile.append('MAGIC')
    a0.push(3, 0, good, version=2); hostile.append('VERSION')
    a0.send(K_PS_PUSH_ACK); hostile.append('KIND')                   # an answer's kind
    a0.send(99); hostile.append('KIND')
    # another port on the same host with rank 0's job, session and token: SOURCE
    stranger = Peer(addr, 0)
    stranger.job, stranger.session, stranger.token = a0.job, a0.session, a0.token
    stranger.push(3, 0, good); hostile.append('SOURCE')
    stranger.pull([K[0]], 79); hostile.append('SOURCE')
    # the forged PUSH of step 2 from the right socket with rank 1's identity: RANK? no,
    # rank 1 registered another port -> SOURCE
    a0.push(3, 0, good, rank=1); hostile.append('SOURCE')
    ok, _ = do_pull(a0, A, K, 14)
    c_after = counters(mport, addr)
    st = stranger.pending()
    check(ok and st == [], '§14.2.3 %d forged/malformed datagrams: no answer to any, '
          'next answer is the probe PULL with correct values' % len(hostile),
          'stranger got %r' % st)
    want = {}
    for h in hostile:
        want[h] = want.get(h, 0) + 1
    bad = []
    for cause, n in sorted(want.items()):
        got = drops(c_after, cause) - drops(c_before, cause)
        if got != n:
            bad.append('%s %+d (want %+d)' % (cause, got, n))
    check(not bad, '§14.2.3 each counted under its drop cause: ' +
          ', '.join('%s+%d' % kv for kv in sorted(want.items())), '; '.join(bad))
    # the server still runs a full step correctly (forged PUSHes added nothing)
    g0 = [(K[5], [0.5, -0.25, 0.125])]
    g1 = [(K[5], [0.5, 0.75, 0.0]), (K[6], [1.0, 1.0, 1.0])]
    oks = two_rank_step(a0, a1, A, 3, g0, g1)
    ok, _ = do_pull(a1, A, K, 15)
    check(oks and ok, '§14.2.3 after the hostile datagrams a step is still applied exactly '
          '(forged PUSHes were not added)')
    stranger.close()

    # ---------------- PS_JOIN refusals (§14.2.2)
    jp = Peer(addr, 0)
    # step 1: another version with >= 8 body bytes -> PS_JOIN_NAK PROTO, nonce = bytes 0..7
    send_ps_join(jp, Job('cr-x', 2, 1), version=2)
    expect_nak(jp, ERR_PROTO, '§14.2.2 step 1: PS_JOIN of version 2 -> PS_JOIN_NAK PROTO '
               'with its nonce')
    # step 2: short body -> no answer (probe with a valid refusal afterwards)
    send_ps_join(jp, Job('cr-x', 2, 1), body=ps_join_body(Job('cr-x', 2, 1), jp.nonce)[:95])
    # step 3: mode 2, optim 2, init 2 -> NOTSUP
    for field, val in (('mode', 2), ('optim', 2), ('init', 2)):
        send_ps_join(jp, Job('cr-x', 2, 1), **{field: val})
        m = expect_nak(jp, ERR_NOTSUP, '§14.2.2 step 3: PS_JOIN %s = %d -> NAK NOTSUP%s' %
                       (field, val, ' (and the 95-byte body before it got no answer)'
                        if field == 'mode' else ''))
    # step 4: invalid parameters -> REJECTED
    bad_cases = [('world 0', dict(world=0)), ('dim 65', dict(dim=65)),
                 ('dim 0', dict(dim=0)), ('shard 1 of 1', dict(shard=1)),
                 ('nshards 2', dict(nshards=2)), ('lr NaN', dict(lr=float('nan'))),
                 ('init_scale inf', dict(init_scale=float('inf'))),
                 ('ADAGRAD eps 0', dict(optim=1, eps=0.0)),
                 ('ADAGRAD init_acc -1', dict(optim=1, init_acc=-1.0)),
                 ('empty name', dict(name=b''))]
    for desc, over in bad_cases:
        send_ps_join(jp, Job('cr-x', 2, 1), **over)
        expect_nak(jp, ERR_REJECTED, '§14.2.2 step 4: PS_JOIN %s -> NAK REJECTED' % desc)
    send_ps_join(jp, Job('cr-x', 2, 1), rank=2)
    expect_nak(jp, ERR_REJECTED, '§14.2.2 step 4: PS_JOIN rank 2 of world 2 -> NAK REJECTED')
    # step 5: a job of this name with other parameters -> MISMATCH
    for desc, over in (('dim 4', dict(dim=4)), ('lr 0.5', dict(lr=0.5)),
                       ('init_seed+1', dict(seed=A.seed + 1)), ('hot_keys 5', dict(hot=5))):
        send_ps_join(jp, A, **over)
        expect_nak(jp, ERR_MISMATCH, '§14.2.2 step 5: PS_JOIN for job A with %s -> NAK '
                   'MISMATCH' % desc)
    # step 6: the ACTIVE job, a new nonce from another IP address -> REJECTED
    try:
        far = Peer(addr, 1, bind_ip='127.0.0.2')
    except OSError as e:
        far = None
        print('skip - §14.2.2 step 6 from another IP address: cannot bind 127.0.0.2 (%s)'
              % e)
    if far is not None:
        send_ps_join(far, A)
        expect_nak(far, ERR_REJECTED, '§14.2.2 step 6: PS_JOIN for an ACTIVE job\'s rank '
                   'from another IP address -> NAK REJECTED')
        far.close()
    ok, _ = do_pull(a0, A, K, 16)
    check(ok, '§14.2.2 the refused JOINs left job A running with its values')

    # ---------------- a weighted split (§14.1, §14.2.1, §14.2.2): this shard is 0 of 1,
    # so its range is every hash, [0, 2^32 - 1]
    F = split_first([3, 1])
    check(F == [0, 3 << 30, 1 << 32], '§14.1 F(s) of weights 3, 1: 0, 3/4 of 2^32, 2^32',
          repr(F))
    W = Job('cr-split', 2, 1)
    send_ps_join(jp, W, body=split_body(W, jp.nonce, 0, 0xFFFFFFFF, split=2))
    expect_nak(jp, ERR_NOTSUP, '§14.2.2 step 3: PS_JOIN split 2 -> NAK NOTSUP')
    for desc, first, last in (('range_first 1 at shard 0', 1, 0xFFFFFFFF),
                              ('range_last 2^32 - 2 at the last shard', 0, 0xFFFFFFFE),
                              ('range_first > range_last', 5, 4)):
        send_ps_join(jp, W, body=split_body(W, jp.nonce, first, last))
        expect_nak(jp, ERR_REJECTED, '§14.2.2 step 4: PS_JOIN split 1 with %s -> NAK '
                   'REJECTED' % desc)
    send_ps_join(jp, W, body=split_body(W, jp.nonce, 0, 0xFFFFFFFF, cut=1))  # 103 bytes
    m = jp.recv('no answer to a split PS_JOIN without its range', timeout=0.3)
    check(m is None, '§14.2.2 step 2: PS_JOIN split 1 of 103 body bytes -> no answer',
          repr(m))
    w0, w1 = Peer(addr, 0), Peer(addr, 1)
    send_ps_join(w0, W, body=split_body(W, w0.nonce, 0, 0xFFFFFFFF))
    send_ps_join(w1, W, body=split_body(W, w1.nonce, 0, 0xFFFFFFFF, split=0))
    expect_nak(w1, ERR_MISMATCH, '§14.2.2 step 5: rank 1 with split 0 where rank 0 said 1 '
               '-> NAK MISMATCH', nonce=w1.nonce)
    send_ps_join(w1, W, body=split_body(W, w1.nonce, 0, 0xFFFFFFFF))
    acks = [p.recv('PS_JOIN_ACK of the split job') for p in (w0, w1)]
    ok = all(m is not None and m.kind == K_PS_JOIN_ACK and len(m.raw) == 136 and
             m.body[94] == 1 and struct.unpack_from('>II', m.body, 96) == (0, 0xFFFFFFFF)
             for m in acks)
    check(ok, '§14.2.1 a split job starts: PS_JOIN_ACK of 136 bytes echoing split 1 and '
          'the range', repr(acks))
    if ok:
        for p, m in zip((w0, w1), acks):
            p.job, p.session, p.token = m.job, m.session, m.token
        KW = [rng.getrandbits(64) for _ in range(4)]
        e0 = [(k, [rand_f32(rng)]) for k in KW]
        e1 = [(k, [rand_f32(rng)]) for k in KW[1:]]
        oks = two_rank_step(w0, w1, W, 0, e0, e1)
        okv, _ = do_pull(w1, W, KW, 3)
        check(oks and okv, '§14.2.4 a step of the split job is applied like any other')
    for p in (w0, w1):
        p.leave()
        p.close()
    jp.close()

    # ---------------- Job B: ADAGRAD, ZERO init, dim 2; ASSIGN (§14.2.5)
    B = Job('cr-adagrad', world=2, dim=2, optim=OPTIM_ADAGRAD, init=INIT_ZERO, lr=0.1,
            eps=0.001, init_acc=0.0625, init_scale=0.0, seed=7)
    b0, b1 = Peer(addr, 0), Peer(addr, 1)
    if join_all(addr, B, [b0, b1], 'job B (ADAGRAD, ZERO, dim 2)'):
        check(b0.job != a0.job and b0.session != a0.session,
              '§14.2.2 job B has its own job id and session', '%d/%d vs %d/%d' % (
                  b0.job, b0.session, a0.job, a0.session))
        KB = [rng.getrandbits(64) for _ in range(5)]
        do_pull(b0, B, KB, 1, state=True, desc='§14.1 ZERO initial values and init_acc '
                'states of never-pushed keys')
        for step in range(3):
            x0 = [(k, [rand_f32(rng, -3, 3), 0.0 if step == 1 else rand_f32(rng)])
                  for k in KB[:4]]
            x1 = [(k, [rand_f32(rng, -3, 3), rand_f32(rng)]) for k in KB[1:5]]
            # rank 1 first this time: arrival order matters
            oks = two_rank_step(b1, b0, B, step, x1, x0)
            ok, _ = do_pull(b1, B, KB, 10 + step, state=True)
            check(oks and ok,
                  '§14.1 ADAGRAD step %d: values and states bit-exact' % step)
        # ASSIGN: version of KB[1] is 3 (updated in step 2).  T = 2 < 3: ignored.
        c_before = counters(mport, addr)
        b0.assign(2, 50, [(KB[1], [9.0, 9.0], [1.0, 1.0])])
        m = b0.recv('PS_ASSIGN_ACK 50')
        ok, det = answer_ok(m, b0, K_PS_ASSIGN_ACK, 32)
        ok = ok and m.slot == 50 and m.seq == 2
        check(ok, '§14.2.5 PS_ASSIGN answered PS_ASSIGN_ACK (slot, seq echoed)', det or
              repr(m))
        do_pull(b0, B, KB, 20, state=True, desc='§14.2.5 ASSIGN as of T = 2 to a key of '
                'version 3 is ignored')
        # T = 3: applied to KB[1] (version 3) and to a fresh key; ASSIGN taken twice
        newk = rng.getrandbits(64)
        ent = [(KB[1], [f32(9.5), f32(-0.125)], [f32(4.0), f32(0.5)]),
               (newk, [f32(1.25), f32(2.5)], [f32(3.0), f32(0.0)])]
        for rid in (51, 52):
            b1.assign(3, rid, ent)
            m = b1.recv('PS_ASSIGN_ACK %d' % rid)
            ok, det = answer_ok(m, b1, K_PS_ASSIGN_ACK, 32)
            check(ok and m.slot == rid and m.seq == 3,
                  '§14.2.5 PS_ASSIGN T = 3 request %d acknowledged' % rid, det)
        for k, v, s in ent:
            B.values[k], B.states[k], B.version[k] = v, s, 3
        do_pull(b1, B, KB + [newk], 21, state=True,
                desc='§14.2.5 ASSIGN as of T = 3 sets value and state (twice = once)')
        c_after = counters(mport, addr)
        check(c_after['assign_stale'] - c_before['assign_stale'] == 1,
              'counter assign_stale +1', '%d -> %d' % (c_before['assign_stale'],
                                                      c_after['assign_stale']))
        # step 3 then updates the assigned values with Adagrad from the assigned state
        y0 = [(KB[1], [f32(0.5), f32(0.25)]), (newk, [f32(-1.0), 0.0])]
        b0.push(3, 0, y0)
        push_ack_ok(b0, 3, 0, None)
        b0.commit(3, 1)
        b1.commit(3, 0)            # rank 1 pushes nothing to this shard: slot 0
        okc0, _ = commit_ack_ok(b0, 3)
        okc1, _ = commit_ack_ok(b1, 3)
        B.apply_step(y0)
        ok, _ = do_pull(b0, B, KB + [newk], 22, state=True)
        check(okc0 and okc1 and ok, '§14.2.4 a rank with no entries commits with slot 0; '
              'ADAGRAD continues from the assigned state')
        # PS_LEAVE with ABORT: every rank gets PS_ABORT ABORTED (§14.2.5, §14.2.6)
        b1.push(4, 0, [(KB[0], [1.0, 1.0])])
        push_ack_ok(b1, 4, 0, None)
        b1.commit(4, 1)             # rank 1 committed step 4, rank 0 not: lowest = 0
        b1.leave(abort=True, reason=ERR_TIMEOUT, steps=4)
        m = b0.recv('PS_ABORT after PS_LEAVE with ABORT')
        ok, det = answer_ok(m, b0, K_PS_ABORT)
        if ok:
            det = 'body %r' % ((ABORTB.unpack_from(m.body) if len(m.body) >= 24
                                else m.body),)
            ok = len(m.raw) >= 56 and ABORTB.unpack_from(m.body)[:5] == (
                0, ERR_ABORTED, 0, 0, 4)
        check(ok, '§14.2.6 PS_LEAVE with ABORT: PS_ABORT (nonce 0, ABORTED, lowest '
              'uncommitted rank 0, A = 4) to the other rank', det)
        # the job is freed: its old credentials are NO_JOB
        c_before = counters(mport, addr)
        b0.pull(KB, 23)
        do_pull(a0, A, K[:1], 17)
        c_after = counters(mport, addr)
        check(drops(c_after, 'NO_JOB') - drops(c_before, 'NO_JOB') == 1 and
              b0.pending() == [], '§14.2.6 the aborted job is freed: its PULL is dropped '
              'NO_JOB')
        b0.close()
        b1.close()

    # ---------------- restart of a rank (§14.2.2 step 6) and PS_LEAVE of job A
    a0.push(4, 0, [(K[0], [1.0, 1.0, 1.0])])
    push_ack_ok(a0, 4, 0, None)
    a0.commit(4, 1)                 # rank 0 committed step 4, rank 1 not: lowest = 1
    a1n = Peer(addr, 1)             # rank 1 restarted: same IP, new port, new nonce
    send_ps_join(a1n, A)
    got = {}
    for name, p in (('rank 0', a0), ('old rank 1', a1)):
        m = p.recv('PS_ABORT of job A to %s' % name)
        ok, det = answer_ok(m, p, K_PS_ABORT)
        if ok and len(m.body) >= 24:
            got[name] = ABORTB.unpack_from(m.body)[:5]
            det = repr(got[name])
            ok = got[name] == (0, ERR_ABORTED, 1, 0, 4)
        check(ok, '§14.2.2 step 6 restarted rank: PS_ABORT (ABORTED, lowest uncommitted '
              'rank 1, A = 4) to %s' % name, det)
    # a new job was created with the restarted rank's JOIN: rank 0 joins it again
    a0n = Peer(addr, 0)
    A2 = Job(A.name, A.world, A.dim, A.optim, A.init, A.lr, A.eps, A.init_acc,
             A.init_scale, A.seed)
    send_ps_join(a0n, A2)
    okj = True
    for p in (a1n, a0n):
        m = p.recv('PS_JOIN_ACK of the new job A')
        okj = okj and m is not None and m.kind == K_PS_JOIN_ACK and m.session != 0
        if m is not None:
            p.job, p.session, p.token = m.job, m.session, m.token
    check(okj and a0n.session == a1n.session and a0n.session != a0.session,
          '§14.2.2 step 6: the restarted rank\'s JOIN made a new job (new session)',
          '%d/%d old %d' % (a0n.session, a1n.session, a0.session))
    do_pull(a0n, A2, K, 1, desc='§14.2.6 the aborted job\'s store was freed: the new job '
            'pulls initial values')
    # PS_LEAVE (no abort) by both ranks: the job is freed (jobs_ended +1), no answer
    c_before = counters(mport, addr)
    for p in (a0n, a1n):
        p.leave(steps=0)
        p.leave(steps=0)            # the worker sends it twice
    time.sleep(0.05)   # PS_LEAVE has no answer to wait for
    c_after = counters(mport, addr)
    check(c_after['jobs_ended'] - c_before['jobs_ended'] == 1 and
          a0n.pending() == [] and a1n.pending() == [],
          '§14.2.5 PS_LEAVE by all N: job freed (jobs_ended +1), no answer',
          '%d -> %d' % (c_before['jobs_ended'], c_after['jobs_ended']))
    for p in (a0, a1, a1n, a0n):
        p.close()

    # ---------------- the job table: 16 jobs per shard (§14.2.2 step 7)
    jobs = []
    kinds = []
    for i in range(17):
        p = Peer(addr, 0)
        jobs.append(p)
        send_ps_join(p, Job('cr-t%02d' % i, 1, 1))
        if i < 16:
            m = p.recv('PS_JOIN_ACK of world-1 job %d' % i)
            kinds.append(m.kind if m else None)
    check(kinds == [K_PS_JOIN_ACK] * 16,
          '§14.2.2 16 jobs at once on a shard: each world-1 job is ACKed at its only JOIN',
          repr(kinds))
    expect_nak(jobs[16], ERR_NOSPACE, '§14.2.2 step 7: a 17th job -> PS_JOIN_NAK NOSPACE')
    for p in jobs:
        p.close()

    # ---------------- --max-memory (§14.2.2 step 7, §14.2.6 PS_FULL)
    pf2 = os.path.join(tmp, 'ps2.port')
    _, (port2,) = start_daemon(
        [os.path.join(bindir, 'ina-ps'), '--listen', '127.0.0.1:0', '--max-memory', '4K',
         '--initial-keys', '16', '--port-file', pf2,
         '--log-level', 'debug' if VERBOSE else 'error'], pf2, 'ina-ps-small')
    addr2 = ('127.0.0.1', port2)
    p = Peer(addr2, 0)
    # 16 records of dim 64 (at least 16 * (28 + 12*64) bytes, docs/PS.md) exceed 4 KiB
    send_ps_join(p, Job('cr-big', 1, 64))
    expect_nak(p, ERR_PS_FULL, '§14.2.2 step 7: a store of 16 dim-64 records does not fit '
               '--max-memory 4K -> PS_JOIN_NAK PS_FULL')
    p.close()
    F = Job('cr-full', 1, 1)
    p = Peer(addr2, 0)
    send_ps_join(p, F)
    m = p.recv('PS_JOIN_ACK at the small shard')
    if check(m is not None and m.kind == K_PS_JOIN_ACK, '§14.2.2 a dim-1 job fits 4K',
             repr(m)):
        p.job, p.session, p.token = m.job, m.session, m.token
        p.push(0, 0, [(i, [1.0]) for i in range(3000)])
        m = p.recv('PS_ABORT PS_FULL')
        ok, det = answer_ok(m, p, K_PS_ABORT)
        if ok and len(m.body) >= 24:
            det = repr(ABORTB.unpack_from(m.body))
            ok = ABORTB.unpack_from(m.body)[:5] == (0, ERR_PS_FULL, 0xFFFF, 0, 0)
        check(ok, '§14.2.6 a PUSH of 3000 new keys past --max-memory: PS_ABORT PS_FULL '
              '(no step committed: rank 0xFFFF, A = 0), no PUSH_ACK', det)
    p.close()

    # §14.2.4 rule 5, §14.2.8: a packet bitmap is charged to --max-memory before it grows.
    # The cr-full job was aborted (its memory released): this dim-1 SGD job holds its
    # scratch (4 B) and a store of 16 records (16 * (28 + 12) B) with 32 index cells
    # (12 B each): 1028 B of the 4096.
    B = Job('cr-bits', 1, 1)
    p = Peer(addr2, 0)
    send_ps_join(p, B)
    m = p.recv('PS_JOIN_ACK at the small shard')
    if check(m is not None and m.kind == K_PS_JOIN_ACK, '§14.2.8 a dim-1 job fits 4K again '
             'once the aborted job released its memory', repr(m)):
        p.job, p.session, p.token = m.job, m.session, m.token
        # index 3000: the bitmap of 512 bits doubles to 4096 (512 B): 1540 B in all
        p.push(0, 3000, [(7, [1.0])])
        push_ack_ok(p, 0, 3000, '§14.2.4 rule 5: PUSH index 3000 grows the rank\'s bitmap '
                    'to 4096 bits (512 B), within --max-memory 4K -> PS_PUSH_ACK')
        # index 20000: it would double to 32768 bits (4096 B), past the limit
        p.push(0, 20000, [(7, [1.0])])
        m = p.recv('PS_ABORT PS_FULL (bitmap)')
        ok, det = answer_ok(m, p, K_PS_ABORT)
        if ok and len(m.body) >= 24:
            det = repr(ABORTB.unpack_from(m.body))
            ok = ABORTB.unpack_from(m.body)[:5] == (0, ERR_PS_FULL, 0xFFFF, 0, 0)
        time.sleep(0.05)
        rest = p.pending()
        check(ok and rest == [], '§14.2.4 rule 5, §14.2.8: PUSH index 20000 would grow the '
              'bitmap to 4096 B, past --max-memory 4K: PS_ABORT PS_FULL, no PS_PUSH_ACK',
              det + ' then %r' % rest)
    p.close()


def main():
    global VERBOSE
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--bindir', required=True)
    ap.add_argument('--libdir')
    ap.add_argument('--pythondir')
    ap.add_argument('-v', '--verbose', action='store_true')
    ap.add_argument('--no-hot', action='store_true', help='skip the §14.3 checks')
    args = ap.parse_args()
    VERBOSE = args.verbose
    threading.Thread(target=watchdog, daemon=True).start()
    State.tmpdir = tempfile.mkdtemp(prefix='peer_ps.')
    t0 = time.time()
    try:
        test_ps(args.bindir)
        if not args.no_hot:
            test_hot(args.bindir)
            test_hot_memory(args.bindir)
    except Exception as e:  # noqa: BLE001 - report any crash as a failure
        import traceback
        traceback.print_exc()
        check(False, 'test raised %s: %s (while waiting for: %s)' %
              (type(e).__name__, e, State.waiting))
    finally:
        kill_daemons()
    if State.failures:
        print('# daemon logs kept in %s' % State.tmpdir)
    else:
        shutil.rmtree(State.tmpdir, ignore_errors=True)
    print('# %d passed, %d failed, %.1f s' % (State.passes, State.failures,
                                              time.time() - t0), flush=True)
    sys.exit(1 if State.failures or not State.passes else 0)


def hot_tag(n, count, dtype, reduction, p, epoch):
    """§7.2 packet tag, with §14.3's change: the op's seed x (after its mixing) is
    replaced by x ^ (epoch * 0x9E3779B97F4A7C15).  (Only equality between ranks is
    checked by the switch, §6.2; the spec leaves open whether the epoch goes into x
    before or after the seed's mixing: taken after.)"""
    x = ((n * 0x9E3779B97F4A7C15) ^ (count * 0xC2B2AE3D27D4EB4F) ^ dtype ^
         (reduction << 8)) & M64
    x ^= x >> 31
    x = (x * 0xBF58476D1CE4E5B9) & M64
    x ^= x >> 29
    x ^= (epoch * 0x9E3779B97F4A7C15) & M64
    y = ((x + p) * 0xD6E8FEB86659FD93) & M64
    return ((y ^ (y >> 32)) >> 24) & 0xFF


def install(peer, epoch, total, offset, keys):
    """§14.3 HOT_INSTALL: epoch, total, offset, count u16, reserved u16, keys."""
    peer.send(K_HOT_INSTALL, struct.pack('>IIIHH', epoch, total, offset, len(keys), 0)
              + struct.pack('>%dQ' % len(keys), *keys), slot=0, seq=0)


def fetch(peer, epoch, offset, maxc):
    """§14.3 HOT_FETCH: epoch, offset, max count u16, reserved u16."""
    peer.send(K_HOT_FETCH, struct.pack('>IIHH', epoch, offset, maxc, 0))


def hot_keys(peer, what):
    """§14.3 HOT_KEYS: epoch, total, offset, count u16, reserved u16, status i32."""
    m = peer.recv(what)
    if m is None or m.kind != K_HOT_KEYS or len(m.raw) < 52:
        return None, repr(m)
    ep, total, off, cnt, _, status = struct.unpack_from('>IIIHHi', m.body)
    keys = list(struct.unpack_from('>%dQ' % cnt, m.body, 20)) \
        if len(m.raw) == 52 + 8 * cnt else None
    okh = ((m.job, m.session, m.token, m.rank) ==
           (peer.job, peer.session, peer.token, RANK_SERVER) and keys is not None)
    return (ep, total, off, status, keys, okh), repr(m)


def hot_cells(n):
    """§14.3: c(n), the smallest power of two >= max(16, 2n)."""
    c = 16
    while c < 2 * n:
        c *= 2
    return c


def hot_table_charge(n):
    """§14.3: A(n), an active table of n keys (0 for none)."""
    return 8 * n + 12 * hot_cells(n) if n else 0


def hot_install_charge(t):
    """§14.3: I(T), an install of T keys until it is active (0 for none)."""
    return hot_table_charge(t) + 8 * (t // 64 + 1) if t else 0


def hot_fit(left, total):
    """§14.3 step 4: the largest T < total whose I(T) fits `left` bytes (0 if none)."""
    return max([t for t in range(total) if hot_install_charge(t) <= left] or [0])


def sample_counted(left, world, nchunks, nkeys):
    """§14.3 HOT_SAMPLE steps 4 to 6 under `left` bytes of --hot-memory, one rank's sample of
    nkeys distinct keys: how many keys are counted (None: the sample cannot begin)."""
    used = 24 * world + 192
    if used > left:
        return None
    used += 8 * (nchunks // 64 + 1)
    if used > left:
        return 0
    cap, cells, n = 0, 16, 0
    for _ in range(nkeys):
        if n == cap:
            new = 16 if cap == 0 else 2 * cap
            if used + 16 * (new - cap) > left:
                continue
            used += 16 * (new - cap)
            cap = new
        if 2 * (n + 1) > cells:
            if used + 12 * cells > left:
                continue
            used += 12 * cells
            cells *= 2
        n += 1
    return n


def one_rank_jobs(addr, names):
    """§4.1 JOIN of one-rank switch jobs 'cr-hm-NAME': each starts at once (JOIN_ACK, no
    JOIN_WAIT) with the hot table offered. @return {name: Peer}, or None (a check failed)."""
    peers = {}
    for name in names:
        p = Peer(addr, 0)
        p.send_raw(hdr(K_JOIN, rank=0) +
                   JOINB.pack(p.nonce, 1, 8, 4, 100, 0, 0, 0, 1, 0, 0, b'cr-hm-' + name.encode()))
        m = p.recv('JOIN_ACK of job %s' % name)
        if not check(m is not None and m.kind == K_JOIN_ACK and m.flags & FLAG_CAP_HOT,
                     '§14.3 one-rank job %s joined, hot table offered' % name, repr(m)):
            return None
        p.job, p.session, p.token = m.job, m.session, m.token
        peers[name] = p
    return peers


def test_hot_memory(bindir):
    """§14.3 --hot-memory (the charges A and I, NOSPACE with what fits, release at a job's
    end) and HOT_FETCH of epoch 0, with one-rank switch jobs."""
    tmp = State.tmpdir
    pf, mpf = os.path.join(tmp, 'swm.port'), os.path.join(tmp, 'swm.mport')
    LIMIT = 4096
    _, (port, mport) = start_daemon(
        [os.path.join(bindir, 'ina-switch'), '--listen', '127.0.0.1:0', '--threads', '1',
         '--no-shm', '--slots', '64', '--hot-keys', '1000', '--hot-memory', '4K',
         '--port-file', pf, '--metrics', '127.0.0.1:0', '--metrics-port-file', mpf,
         '--log-level', 'debug' if VERBOSE else 'error'], pf, 'ina-switch-hotmem', (mpf,))
    addr = ('127.0.0.1', port)
    peers = one_rank_jobs(addr, ('a', 'b', 'c'))
    if peers is None:
        return
    a, b, c = peers['a'], peers['b'], peers['c']
    keys = random.Random(14033).sample(range(1, 1 << 63), 200)
    c0 = counters(mport, addr)

    # A: 100 keys, I(100) = 800 + 12 * 256 + 16 = 3888 <= 4096
    install(a, 1, 100, 0, keys[:100])
    r, det = hot_keys(a, 'HOT_KEYS for job a')
    check(r is not None and r[5] and r[:4] == (1, 100, 0, 0), '§14.3 an install whose I(T) '
          '(%d B) fits --hot-memory 4K -> status 0, active' % hot_install_charge(100), det)
    used = hot_table_charge(100)
    # HOT_FETCH of epoch 0: no table has it, dropped JOIN, no answer
    fetch(a, 0, 0, 10)
    fetch(a, 1, 99, 10)
    r, det = hot_keys(a, 'HOT_KEYS after the epoch-0 fetch')
    check(r is not None and r[:4] == (1, 100, 99, 0) and r[4] == keys[99:100],
          '§14.3 HOT_FETCH epoch 0 gets no answer (the next answer is the epoch-1 fetch\'s)',
          det)
    # B: 100 keys do not fit beside A's A(100): NOSPACE with total = the fit
    m_b = hot_fit(LIMIT - used, 100)
    install(b, 1, 100, 0, keys[100:])
    r, det = hot_keys(b, 'HOT_KEYS NOSPACE for job b')
    check(r is not None and r[5] and r[0] == 1 and r[3] == ERR_NOSPACE and r[1] == m_b,
          '§14.3 step 4: an install past --hot-memory -> NOSPACE, total = the largest T whose '
          'I(T) fits beside A(100) (%d)' % m_b, det)
    install(b, 1, m_b, 0, keys[100:100 + m_b])
    r, det = hot_keys(b, 'HOT_KEYS for job b cut')
    check(r is not None and r[:4] == (1, m_b, 0, 0),
          '§14.3 the install cut to that total fits -> status 0', det)
    fetch(b, 1, 0, 100)
    r, det = hot_keys(b, 'HOT_KEYS fetch b')
    check(r is not None and r[3] == 0 and r[4] == keys[100:100 + m_b],
          '§14.3 job b\'s table holds the first %d keys' % m_b, det)
    used += hot_table_charge(m_b)
    # A's reinstall needs I(T) beside its own A(100): cut, and epoch 1 stays
    m_a = hot_fit(LIMIT - used, 100)
    install(a, 2, 100, 0, keys[:100])
    r, det = hot_keys(a, 'HOT_KEYS NOSPACE for a reinstall')
    check(r is not None and r[0] == 2 and r[3] == ERR_NOSPACE and r[1] == m_a,
          '§14.3 a reinstall needs the new I(T) beside the active A(n): NOSPACE, total %d'
          % m_a, det)
    fetch(a, 1, 0, 200)
    r, det = hot_keys(a, 'HOT_KEYS epoch 1 of a')
    check(r is not None and r[3] == 0 and r[1] == 100 and r[4] == keys[:100],
          '§14.3 the refused reinstall left epoch 1 active', det)
    # an empty table always fits
    install(c, 1, 0, 0, [])
    r, det = hot_keys(c, 'HOT_KEYS empty table')
    check(r is not None and r[:4] == (1, 0, 0, 0), '§14.3 an install of total 0 always fits '
          '(--hot-memory full)', det)
    c1 = counters(mport, addr)
    check(c1.get('hot_refusals', 0) - c0.get('hot_refusals', 0) == 2 and
          c1.get('hot_installs', 0) - c0.get('hot_installs', 0) == 3 and
          drops(c1, 'JOIN') - drops(c0, 'JOIN') == 1,
          '§14.3 counters: hot_refusals +2, hot_installs +3, drop JOIN +1 (the epoch-0 fetch)',
          'hot_refusals %+d hot_installs %+d JOIN %+d' % (
              c1.get('hot_refusals', 0) - c0.get('hot_refusals', 0),
              c1.get('hot_installs', 0) - c0.get('hot_installs', 0),
              drops(c1, 'JOIN') - drops(c0, 'JOIN')))
    # B leaves: its job ends, its charge is released; A's reinstall then gets more
    b.send(K_LEAVE)
    used -= hot_table_charge(m_b)
    m_a2 = hot_fit(LIMIT - used, 100)
    install(a, 2, 100, 0, keys[:100])
    r, det = hot_keys(a, 'HOT_KEYS after b left')
    check(r is not None and r[3] == ERR_NOSPACE and r[1] == m_a2 and m_a2 > m_a,
          '§14.3 a job\'s charge is released when it ends: the reinstall now fits %d keys'
          % m_a2, det)
    for p in (a, b, c):
        if p is not b:
            p.send(K_LEAVE)
        p.close()

    # HOT_SAMPLE under --hot-memory 4K, every other job gone (nothing charged): job d's
    # sample of 300 keys keeps the keys that find room (steps 5, 6), and its table then
    # holds them; job e's table leaves job f's sample no room to begin (step 4).
    more = one_rank_jobs(addr, ('d', 'e', 'f'))
    if more is None:
        return
    d, e, f = more['d'], more['e'], more['f']
    time.sleep(0.2)
    c0 = counters(mport, addr)
    skeys = random.Random(14034).sample(range(1, 1 << 63), 300)
    kept = sample_counted(LIMIT, 1, 1, 300)
    d.send(K_HOT_SAMPLE, struct.pack('>IIHHHH', 1, 1000, 0, 1, 300, 0) + b''.join(
        struct.pack('>QI', x, 300 - i) for i, x in enumerate(skeys)), slot=0, seq=0)
    r, det = hot_keys(d, 'HOT_KEYS sample of d')
    fetch(d, 1, 0, 1000)
    r2, det2 = hot_keys(d, 'HOT_KEYS fetch d')
    check(r is not None and r[3] == 0 and r2 is not None and r2[3] == 0 and r2[1] == kept and
          r2[4] == skeys[:kept], '§14.3 HOT_SAMPLE steps 4-6 under --hot-memory 4K: the first '
          '%d of 300 sampled keys find room (16 B a key, a 12 B-a-cell index, both doubling), '
          'the table holds them' % kept, det + det2)
    d.send(K_LEAVE)
    t103 = keys[:103]   # A(103) = 824 + 12 * 256 = 3896: 200 B left, under 24 + 192
    install(e, 1, 103, 0, t103)
    r, det = hot_keys(e, 'HOT_KEYS install e')
    f.send(K_HOT_SAMPLE, struct.pack('>IIHHHH', 1, 10, 0, 1, 1, 0) + struct.pack('>QI', 5, 1),
           slot=0, seq=0)
    r1, det1 = hot_keys(f, 'HOT_KEYS sample f')
    fetch(f, 1, 0, 10)
    r2, det2 = hot_keys(f, 'HOT_KEYS fetch f')
    check(r is not None and r[3] == 0 and r1 is not None and r1[3] == 0 and r2 is not None and
          r2[3] == 0 and r2[1] == 0, '§14.3 HOT_SAMPLE step 4: a sample with no room to begin '
          '(24 N + 192 B) -> its epoch active at once with 0 keys', det + det1 + det2)
    c1 = counters(mport, addr)
    check(c1.get('hot_sample_drops', 0) - c0.get('hot_sample_drops', 0) == 300 - kept and
          c1.get('hot_refusals', 0) - c0.get('hot_refusals', 0) == 1,
          '§14.3 counters: hot_sample_drops +%d, hot_refusals +1' % (300 - kept),
          'hot_sample_drops %+d hot_refusals %+d' % (
              c1.get('hot_sample_drops', 0) - c0.get('hot_sample_drops', 0),
              c1.get('hot_refusals', 0) - c0.get('hot_refusals', 0)))
    for p in (d, e, f):
        if p is not d:
            p.send(K_LEAVE)
        p.close()


def test_hot(bindir):
    """§14.3: the hot table at the switch, driven by two clean-room ranks."""
    rng = random.Random(14003)
    tmp = State.tmpdir
    pf, mpf = os.path.join(tmp, 'sw.port'), os.path.join(tmp, 'sw.mport')
    HOTMAX = 16
    _, (port, mport) = start_daemon(
        [os.path.join(bindir, 'ina-switch'), '--listen', '127.0.0.1:0', '--threads', '1',
         '--no-shm', '--slots', '64', '--hot-keys', str(HOTMAX), '--port-file', pf,
         '--metrics', '127.0.0.1:0', '--metrics-port-file', mpf,
         '--log-level', 'debug' if VERBOSE else 'warn'], pf, 'ina-switch', (mpf,))
    addr = ('127.0.0.1', port)
    r0, r1 = Peer(addr, 0), Peer(addr, 1)
    name = b'cr-hot'
    # §4.1 JOIN body: nonce, world, elems (k), window (W), sw_version, mcast 0, mcast port
    # 0, lane 0, nlanes 1, fallback 0, wait 0, name.  §14.3: an ordinary job, same name.
    for p in (r0, r1):
        p.send_raw(hdr(K_JOIN, rank=p.rank) +
                   JOINB.pack(p.nonce, 2, 8, 4, 100, 0, 0, 0, 1, 0, 0, name))
        if p is r0:
            m = r0.recv('JOIN_WAIT for rank 0')
            check(m is not None and m.kind == K_JOIN_WAIT,
                  '§4.5 the first rank of the switch job gets JOIN_WAIT', repr(m))
    acks = [p.recv('JOIN_ACK from the switch') for p in (r0, r1)]
    ok = all(m is not None and m.kind == K_JOIN_ACK and len(m.raw) >= 96 for m in acks)
    if not check(ok, '§14.3 both ranks joined the switch job (JOIN_ACK)', repr(acks)):
        return
    for p, m in zip((r0, r1), acks):
        p.job, p.session, p.token = m.job, m.session, m.token
        b = JOINB.unpack_from(m.body)
        p.k, p.W = b[2], b[3]
    check(all(m.flags & FLAG_CAP_HOT for m in acks),
          '§14.3 JOIN_ACK offers the hot table (flag bit 7, 0x0080)',
          'flags %#x' % acks[0].flags)
    k, W = r0.k, r0.W
    log('switch job %d k %d W %d' % (r0.job, k, W))

    H = 12
    hot = []
    while len(hot) < H:
        x = rng.getrandbits(64)
        if x not in hot:
            hot.append(x)

    # install epoch 1 in two chunks; between them the table is pending
    install(r0, 1, H, 0, hot[:7])
    a, det = hot_keys(r0, 'HOT_KEYS for chunk 0')
    check(a is not None and a[5] and a[:4] == (1, H, 0, 0) and a[4] == [],
          '§14.3 HOT_INSTALL chunk 0 -> HOT_KEYS (epoch 1, total, offset 0, count 0, '
          'status 0)', '%r %s' % (a, det))
    fetch(r1, 1, 0, 100)
    a, det = hot_keys(r1, 'HOT_KEYS PENDING')
    check(a is not None and a[3] == 1, '§14.3 HOT_FETCH before the table is complete -> '
          'status 1 (PENDING)', '%r %s' % (a, det))
    install(r1, 1, H, 7, hot[7:])            # from rank 1: drop JOIN, no answer
    install(r0, 1, H, 7, hot[7:])
    a, det = hot_keys(r0, 'HOT_KEYS for chunk 1')
    check(a is not None and a[:4] == (1, H, 7, 0) and r1.pending() == [],
          '§14.3 HOT_INSTALL last chunk activates the table (status 0); the same from '
          'rank 1 got no answer', '%r %s' % (a, det))
    install(r0, 1, H, 0, hot[:7])
    a, det = hot_keys(r0, 'HOT_KEYS for a repeated chunk')
    check(a is not None and a[:4] == (1, H, 0, 0),
          '§14.3 HOT_INSTALL rule 3: a repeat of an installed chunk -> status 0', det)
    fetch(r1, 1, 0, 5)
    a, det = hot_keys(r1, 'HOT_KEYS offset 0')
    fetch(r1, 1, 5, 100)
    b, det2 = hot_keys(r1, 'HOT_KEYS offset 5')
    check(a is not None and b is not None and a[5] and b[5] and
          a[:4] == (1, H, 0, 0) and b[:4] == (1, H, 5, 0) and a[4] + b[4] == hot,
          '§14.3 HOT_FETCH by rank 1 (max 5, then from offset 5): the installed keys in '
          'position order', det + det2)
    fetch(r1, 1, H + 1, 10)
    a, det = hot_keys(r1, 'HOT_KEYS offset > H')
    check(a is not None and a[3] == ERR_MISMATCH, '§14.3 HOT_FETCH offset > H -> status '
          'MISMATCH', det)

    # ---- hot vector rounds.  §14.3: one packet per block of k positions, op 9,
    # stream index g from 0 (first op of the session, n = 1), slot g mod W, seq g / W.
    nblocks = (H + k - 1) // k
    g = 0

    def hot_data(peer, g, n, b, vals=None, pairs=None, present=None, epoch=1, bits=None,
                 flags=None, **kw):
        base = b * k
        cnt = min(k, H - base)
        seq = g // W
        slot = (g % W) | ((seq & 1) << 31)
        tag = hot_tag(n, H, 1, 0, b, epoch)
        if present is not None:
            # §14.3 bitmap: bit i (from the least significant of byte i // 8) = position
            # base + i present; then the present positions' values in position order
            bm = bytearray((cnt + 7) // 8)
            for i, _ in present:
                bm[i // 8] |= 1 << (i % 8)
            if bits is not None:
                bm = bytearray(bits)
            body = struct.pack('>II', epoch, base) + bytes(bm) + b''.join(
                struct.pack('>f', v) for _, v in sorted(present))
            fl = FLAG_HOT_BITMAP
        elif pairs is not None:
            body = struct.pack('>II', epoch, base) + b''.join(
                struct.pack('>Qf', key, v) for key, v in pairs)
            fl = FLAG_HOT_KEYED
        else:
            body = struct.pack('>II', epoch, base) + struct.pack('>%df' % len(vals), *vals)
            fl = 0
        kw.setdefault('op', OP_HOT_F32)
        kw.setdefault('count', cnt)
        peer.send(K_HOT_DATA, body, slot=slot, seq=seq, flags=fl if flags is None else flags,
                  tag=kw.pop('tag', tag), **kw)
        return slot, seq, cnt, base, tag

    def hot_result(peer, slot, seq, cnt, base, tag, want, what, epoch=1):
        m = peer.recv(what)
        okr, det = answer_ok(m, peer, K_HOT_RESULT, 40 + 4 * cnt)
        if okr:
            ep, bs = struct.unpack_from('>II', m.body)
            got = struct.unpack_from('>%df' % cnt, m.body, 8)
            okr = (m.slot, m.seq, m.count, m.op, m.tag, ep, bs) == (
                slot, seq, cnt, OP_HOT_F32, tag, epoch, base)
            det = 'hdr/prefix %r' % ((m.slot, m.seq, m.count, m.op, m.tag, ep, bs),)
            if okr:
                okr = [fbits(x) for x in got] == [fbits(x) for x in want]
                det = 'sums %r want %r' % (got, want)
        return okr, det

    c_before = counters(mport, addr)
    for step in range(3):
        n = step + 1
        allok, dets = True, []
        for b in range(nblocks):
            base = b * k
            cnt = min(k, H - base)
            dense = [rand_f32(rng) for _ in range(cnt)]
            nz = sorted(rng.sample(range(cnt), 2))
            pairs = [(hot[base + i], rand_f32(rng)) for i in nz]
            want = list(dense)
            for i, (_, v) in zip(nz, pairs):
                want[i] = fadd(want[i], v)
            if step == 1:   # keyed first this time: zeros plus the pairs, then dense
                info = hot_data(r1, g, n, b, pairs=pairs)
                hot_data(r0, g, n, b, vals=dense)
                want = [fadd(x, 0.0) for x in dense]
                for i, (_, v) in zip(nz, pairs):
                    want[i] = fadd(v, dense[i])
            else:
                info = hot_data(r0, g, n, b, vals=dense)
                hot_data(r1, g, n, b, pairs=pairs)
            for p in (r0, r1):
                okr, det = hot_result(p, *info, want, 'HOT_RESULT step %d block %d' %
                                      (step, b))
                allok = allok and okr
                dets.append(det)
            if step == 0 and b == 0:
                # a duplicate of a finished round: HOT_RESULT to that rank only
                hot_data(r0, g, n, b, vals=dense)
                okd, detd = hot_result(r0, *info, want, 'resent HOT_RESULT')
                check(okd and r1.pending() == [], '§14.3 a duplicate HOT_DATA of a finished '
                      'round -> HOT_RESULT to that rank only', detd)
            g += 1
        check(allok, '§14.3 hot step %d: dense + keyed HOT_DATA of 2 ranks -> HOT_RESULT '
              'binary32 sums, epoch/base prefix, slot/seq/op 9/tag (%d blocks, seq %d)' %
              (step, nblocks, (g - 1) // W), '; '.join(d for d in dets if d)[:300])

    # ---- hostile HOT_DATA for the next round (none of them may open or join it)
    n = 4
    b = 0
    bad = []
    dense = [rand_f32(rng) for _ in range(min(k, H))]
    hot_data(r0, g, n, b, vals=dense, op=4); bad.append('OP')
    hot_data(r0, g, n, b, vals=dense + [1.0]); bad.append('LENGTH')   # 4 bytes too long
    hot_data(r0, g, n, b, vals=dense, epoch=2); bad.append('HOT')
    hot_data(r0, g, n, b, pairs=[(hot[0], 1.0), (12345, 2.0)]); bad.append('HOT')
    hot_data(r0, g, n, b, pairs=[(hot[H - 1], 1.0)]); bad.append('HOT')  # other block
    hot_data(r0, g, n, b, vals=dense, token=r0.token ^ 1); bad.append('TOKEN')
    hot_data(r0, g, n, b, vals=dense, session=r0.session ^ 0x100); bad.append('SESSION')
    if H > k:
        hot_data(r0, g, n, 1, vals=[0.0] * min(k, H - k), count=k,); bad.append('LENGTH')
    info = hot_data(r1, g, n, b, vals=dense)        # the honest round, rank 1 first
    other = [rand_f32(rng) for _ in range(min(k, H))]
    hot_data(r0, g, n, b, vals=other)
    want = [fadd(x, y) for x, y in zip(dense, other)]
    ok0, d0 = hot_result(r0, *info, want, 'HOT_RESULT after hostile packets')
    ok1, d1 = hot_result(r1, *info, want, 'HOT_RESULT after hostile packets')
    c_after = counters(mport, addr)
    want_d, diffs = drop_diffs(c_before, c_after, bad)
    check(ok0 and ok1 and not diffs and c_after['jobs_aborted'] == c_before['jobs_aborted'],
          '§14.3 %d hostile HOT_DATA (op 4, bad length, epoch 2, key not in table, key of '
          'another block, bad token/session) dropped as %s; the round then sums only the '
          'honest packets' % (len(bad), ', '.join('%s+%d' % kv for kv in sorted(want_d.items()))),
          '; '.join(diffs) + ' ' + d0 + d1)
    check(c_after['hot_keyed'] - c_before['hot_keyed'] == 2 * 3 * nblocks,
          '§14.3 counter hot_keyed counts the keyed entries added (%d), not the dropped '
          'ones' % (2 * 3 * nblocks),
          '%d' % (c_after['hot_keyed'] - c_before['hot_keyed']))
    g += 1

    # ---- a key repeated in one keyed packet: each pair is added (§14.3 "zeros plus each
    # pair"; the repeats of a push are summed, docs/PS.md)
    cnt = min(k, H)
    dense = [rand_f32(rng) for _ in range(cnt)]
    pairs = [(hot[1], f32(0.75)), (hot[1], f32(0.5)), (hot[2], f32(-2.0))]
    info = hot_data(r0, g, 5, 0, pairs=pairs)
    hot_data(r1, g, 5, 0, vals=dense)
    want = [fadd(0.0, x) for x in dense]
    want[1] = fadd(fadd(f32(0.75), f32(0.5)), dense[1])
    want[2] = fadd(f32(-2.0), dense[2])
    ok0, d0 = hot_result(r0, *info, want, 'HOT_RESULT repeated keyed key')
    ok1, d1 = hot_result(r1, *info, want, 'HOT_RESULT repeated keyed key')
    check(ok0 and ok1, '§14.3 a key repeated in one keyed HOT_DATA: both pairs are added',
          d0 + d1)
    g += 1

    # ---- bitmap blocks (§14.3): a round of a bitmap, a dense and (block 0) a keyed packet
    # of three ranks' worth... two ranks: bitmap first (zeros plus the values), then dense
    c_before = counters(mport, addr)
    allok, dets, nbm = True, [], 0
    for b in range(nblocks):
        base = b * k
        cnt = min(k, H - base)
        dense = [rand_f32(rng) for _ in range(cnt)]
        pres = [(i, rand_f32(rng)) for i in sorted(rng.sample(range(cnt), min(3, cnt)))]
        info = hot_data(r0, g, 6, b, present=pres)
        hot_data(r1, g, 6, b, vals=dense)
        bmv = [0.0] * cnt
        for i, v in pres:
            bmv[i] = fadd(0.0, v)
        want = [fadd(bmv[i], dense[i]) for i in range(cnt)]
        nbm += len(pres)
        for p in (r0, r1):
            okr, det = hot_result(p, *info, want, 'HOT_RESULT bitmap block %d' % b)
            allok = allok and okr
            dets.append(det)
        g += 1
    check(allok, '§14.3 bitmap HOT_DATA (flags bit 1): zeros plus each present value at '
          'its position, then a dense packet added -> HOT_RESULT binary32 sums',
          '; '.join(d for d in dets if d)[:300])
    # hostile bitmaps for the next round: none may open or join it
    n, b = 7, nblocks - 1
    base = b * k
    cnt = min(k, H - base)
    pres = [(0, 1.0)]
    bad = []
    if cnt % 8:
        hot_data(r0, g, n, b, present=pres, bits=[1 | (1 << cnt % 8)]); bad.append('LENGTH')
    hot_data(r0, g, n, b, present=pres + [(1, 2.0)], bits=[1]); bad.append('LENGTH')
    hot_data(r0, g, n, b, present=pres, flags=FLAG_HOT_BITMAP | FLAG_HOT_KEYED); bad.append('LENGTH')
    hot_data(r0, g, n, b, present=pres, epoch=2); bad.append('HOT')
    info = hot_data(r1, g, n, b, present=[(cnt - 1, 4.0)])
    hot_data(r0, g, n, b, present=pres)
    want = [0.0] * cnt
    want[cnt - 1] = fadd(0.0, f32(4.0))
    want[0] = fadd(want[0], f32(1.0))
    ok0, d0 = hot_result(r0, *info, want, 'HOT_RESULT after hostile bitmaps')
    ok1, d1 = hot_result(r1, *info, want, 'HOT_RESULT after hostile bitmaps')
    c_after = counters(mport, addr)
    want_d, diffs = drop_diffs(c_before, c_after, bad)
    check(ok0 and ok1 and not diffs, '§14.3 rule 14\' bitmaps: a bit past count, a value '
          'missing, both flags -> LENGTH; another epoch -> HOT; the round sums only the '
          'honest two', '; '.join(diffs) + ' ' + d0 + d1)
    check(c_after.get('hot_bitmap', 0) - c_before.get('hot_bitmap', 0) == nbm + 2,
          '§14.3 counter hot_bitmap counts the bitmap values added (%d)' % (nbm + 2),
          '%d' % (c_after.get('hot_bitmap', 0) - c_before.get('hot_bitmap', 0)))
    g += 1

    # ---- HOT_INSTALL refusals
    install(r0, 2, H, 0, hot[:H - 1] + [hot[0]])      # a key present twice
    a, det = hot_keys(r0, 'HOT_KEYS duplicate key')
    check(a is not None and a[3] == ERR_MISMATCH, '§14.3 HOT_INSTALL rule 4: a key present '
          'twice -> status MISMATCH', det)
    install(r0, 2, HOTMAX + 4, 0, hot)
    a, det = hot_keys(r0, 'HOT_KEYS over the limit')
    check(a is not None and a[3] == ERR_NOSPACE and a[1] == HOTMAX,
          '§14.3 HOT_INSTALL total > --hot-keys -> status NOSPACE, total = the limit', det)
    fetch(r1, 1, 0, 100)
    a, det = hot_keys(r1, 'HOT_KEYS epoch 1 still active')
    check(a is not None and a[3] == 0 and a[4] == hot, '§14.3 the refused installs left '
          'epoch 1 active', det)

    # ---- HOT_SAMPLE (§14.3): every rank's sampled counts, summed; the hottest `want`
    def sample(peer, epoch, want, chunk, nchunks, pairs, count=None, trim=0):
        body = struct.pack('>IIHHHH', epoch, want, chunk, nchunks,
                           len(pairs) if count is None else count, 0) + b''.join(
            struct.pack('>QI', key, c) for key, c in pairs)
        peer.send(K_HOT_SAMPLE, body[:len(body) - trim], slot=0, seq=0)

    ks = sorted(rng.getrandbits(64) for _ in range(5))   # ks[2] < ks[3]: a tie by key
    c_before = counters(mport, addr)
    sample(r0, 2, 0, 0, 1, [])                       # want 0
    sample(r0, 2, 5, 1, 1, [])                       # chunk >= nchunks
    sample(r0, 2, 5, 0, 0, [])                       # nchunks 0
    sample(r0, 0, 5, 0, 1, [])                       # epoch 0
    sample(r0, 2, 5, 0, 1, [(ks[0], 1)], count=2)    # length != 48 + 12 count
    sample(r0, 2, 5, 0, 2, [(ks[0], 5), (ks[1], 1)])
    a, det = hot_keys(r0, 'HOT_KEYS for sample chunk 0 of rank 0')
    check(a is not None and a[5] and a[:4] == (2, 2, 0, 0),
          '§14.3 HOT_SAMPLE rules 1, 8: five malformed chunks got no answer; chunk 0 of 2 -> '
          'HOT_KEYS (epoch 2, total = nchunks 2, offset = chunk 0, status 0)', '%r %s' % (a, det))
    sample(r0, 2, 5, 0, 2, [(ks[0], 5), (ks[1], 1)])   # a repeat: nothing added
    a, det = hot_keys(r0, 'HOT_KEYS for the repeated chunk')
    check(a is not None and a[:4] == (2, 2, 0, 0), '§14.3 HOT_SAMPLE rule 6: a chunk already '
          'received -> status 0', det)
    sample(r0, 2, 5, 0, 3, [(ks[0], 5)])              # another nchunks: dropped
    fetch(r1, 2, 0, 100)
    a, det = hot_keys(r1, 'HOT_KEYS epoch 2 pending')
    check(a is not None and a[3] == 1 and r0.pending() == [], '§14.3 HOT_FETCH while the '
          'samples are not all in -> PENDING; a chunk with another nchunks got no answer', det)
    sample(r1, 2, 6, 0, 1, [(ks[1], 3)])
    a, det = hot_keys(r1, 'HOT_KEYS for another want')
    check(a is not None and a[3] == ERR_MISMATCH, '§14.3 HOT_SAMPLE rule 3: another want -> '
          'MISMATCH', det)
    sample(r1, 2, 5, 0, 1, [(ks[1], 3), (ks[3], 2), (ks[2], 2)])
    a, det = hot_keys(r1, 'HOT_KEYS rank 1')
    ok1 = a is not None and a[:4] == (2, 1, 0, 0)
    sample(r0, 2, 5, 1, 2, [(ks[4], 1)])
    a, det2 = hot_keys(r0, 'HOT_KEYS rank 0 chunk 1')
    check(ok1 and a is not None and a[:4] == (2, 2, 1, 0), '§14.3 the last chunks -> status 0',
          det + det2)
    fetch(r0, 2, 0, 100)
    a, det = hot_keys(r0, 'HOT_KEYS of the sampled table')
    want = [ks[0], ks[1], ks[2], ks[3], ks[4]]     # sums 5, 4, 2, 2 (smaller key first), 1
    check(a is not None and a[3] == 0 and a[4] == want, '§14.3 HOT_SAMPLE rule 7: the table '
          'of epoch 2 is the sampled keys by summed count, larger first, ties by the smaller '
          'key (fetched by rank 0 too)', '%r %s' % (a, det))
    sample(r1, 2, 5, 0, 1, [(ks[1], 3)])
    a, det = hot_keys(r1, 'HOT_KEYS for a late repeat')
    check(a is not None and a[3] == 0, '§14.3 HOT_SAMPLE rule 2: epoch <= the active one -> '
          'status 0', det)
    c_after = counters(mport, addr)
    check(drops(c_after, 'JOIN') - drops(c_before, 'JOIN') == 6 and
          c_after.get('hot_samples', 0) - c_before.get('hot_samples', 0) == 6,
          '§14.3 counters: drop JOIN +6 (the malformed and the other-nchunks chunks), '
          'hot_samples +6 (the pairs counted once each)', 'JOIN %+d hot_samples %+d' % (
              drops(c_after, 'JOIN') - drops(c_before, 'JOIN'),
              c_after.get('hot_samples', 0) - c_before.get('hot_samples', 0)))
    # want past --hot-keys: the table keeps HOTMAX
    many = [rng.getrandbits(64) for _ in range(HOTMAX + 4)]
    sample(r0, 3, HOTMAX + 4, 0, 1, [(x, 1) for x in many])
    hot_keys(r0, 'HOT_KEYS epoch 3 rank 0')
    sample(r1, 3, HOTMAX + 4, 0, 1, [])
    hot_keys(r1, 'HOT_KEYS epoch 3 rank 1')
    fetch(r1, 3, 0, 100)
    a, det = hot_keys(r1, 'HOT_KEYS of epoch 3')
    check(a is not None and a[3] == 0 and a[1] == HOTMAX and a[4] == sorted(many)[:HOTMAX],
          '§14.3 HOT_SAMPLE rule 7: want > --hot-keys -> a table of --hot-keys keys',
          '%r %s' % (a, det))
    for p in (r0, r1):
        p.send(K_LEAVE)
        p.close()


if __name__ == '__main__':
    main()

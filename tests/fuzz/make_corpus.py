#!/usr/bin/python3
"""make_corpus.py: write the seed corpora of the fuzz targets (deterministic).

    /usr/bin/python3 tests/fuzz/make_corpus.py [OUTDIR]   (default: tests/fuzz/corpus)

Writes OUTDIR/switch/* for fuzz_switch, OUTDIR/reply/* for fuzz_reply, some
of OUTDIR/ps/* for fuzz_ps (the others were kept from fuzzing runs: the memory
paths, and the membership_* seeds of PROTOCOL.md §15.9) and the membership_* seeds of
OUTDIR/sched/ (fuzz_sched.c: PS_SYNC, PS_STATE, PS_REPLAY, leases and recovery), in the
record formats described at the top of fuzz_switch.c, fuzz_reply.c, fuzz_ps.c and
fuzz_sched.c, and OUTDIR/../regressions/switch/ the crash inputs made from the same
helpers.
Existing files of the same names are overwritten; nothing else is touched.
The seeds are valid and near-valid inputs that reach the deep paths at once
(complete rounds, joins, leaves, timeouts); the fuzzer mutates from there.
"""
import os
import struct
import sys

MAGIC, VERSION = 0x494E, 1
K_DATA, K_RESULT, K_JOIN, K_JOIN_ACK, K_JOIN_NAK, K_LEAVE, K_ABORT = 1, 2, 16, 17, 18, 19, 20
K_SHM_ATTACH, K_DOORBELL = 23, 25
K_REDIRECT, K_MIGRATE, K_WITHDRAW, K_TREE_JOIN = 21, 22, 26, 28
K_HOT_DATA, K_HOT_INSTALL, K_HOT_FETCH, K_HOT_SAMPLE = 5, 45, 46, 64
OP_HOT_F32, FLAG_HOT_KEYED, FLAG_HOT_BITMAP = 9, 0x0001, 0x0002
SET_BIT = 0x80000000
EXP_ZERO, EXP_NONFINITE = -32768, 32767
ERR_MISMATCH, ERR_ABORTED, ERR_NOSPACE = -1005, -1002, -1004


def hdr(kind, job=0, rank=0, session=0, token=0, slot=0, seq=0, count=0, exp=0, flags=0, op=0,
        magic=MAGIC, version=VERSION):
    """The 32-byte header (wire.h), big-endian."""
    return struct.pack(">HBBHHIIIIHhHBB", magic, version, kind, job, rank, session, token, slot,
                       seq, count, exp, flags, op, 0)


def ints(values):
    return b"".join(struct.pack(">I", v & 0xFFFFFFFF) for v in values)


def slot_field(slot, seq):
    return slot | (SET_BIT if seq & 1 else 0)


def join_body(world, elems, window, name, nonce, sw_version=100):
    name = name.encode() if isinstance(name, str) else name
    return (struct.pack(">QHHII", nonce, world, elems, window, sw_version) + bytes(12) +
            name[:32].ljust(32, b"\0"))


def nak_body(reason, nonce=0):
    return struct.pack(">QiI", nonce, reason, 0)


def record(a, b, datagram):
    return bytes([a, b]) + struct.pack(">H", len(datagram)) + datagram


# ---- fuzz_switch ----------------------------------------------------------------

# flags (fuzz_switch.c)
S_JOB, S_TOKEN, S_MAGIC, S_COUNT, S_RANK, S_SETBIT, S_TICK = \
    0x01, 0x02, 0x04, 0x08, 0x10, 0x20, 0x40
S_CREDS = S_JOB | S_TOKEN
S_CHILD = 0x80  # first record only: the switch is a child whose parent is address PARENT
PARENT = 6
# sel: address index | job table index << 3 | tick step << 5. Addresses 0..2 are ranks 0..2 of
# job 1 ("honest": world 3, elems 8, window 4); job 2 is the oracle; 5 and 6 are free strangers.
HONEST, ORACLE, THIRD = 0, 1, 2
HONEST_WORLD, HONEST_ELEMS, HONEST_WINDOW = 3, 8, 4


def sel(addr, job=HONEST, step=0):
    return addr | job << 3 | step << 5


def sw_record(addr, job, flags, step, datagram):
    """step: None, or the tick_step index of a clock advance + ina__switch_tick after it."""
    if step is not None:
        flags |= S_TICK
    return record(sel(addr, job, step or 0), flags, datagram)


def sw_data(addr, slot, seq, values, job=HONEST, rank=None, exp=0, flags=S_CREDS | S_RANK,
            step=None, **kw):
    """A DATA record from address addr; credentials and rank patched in by the harness."""
    h = hdr(K_DATA, rank=addr if rank is None else rank, slot=slot_field(slot, seq), seq=seq,
            count=len(values), exp=exp, **kw)
    return sw_record(addr, job, flags, step, h + ints(values))


SPARSE_END = 0xFFFFFFFF


def sparse_payload(block, places):
    """The words of a sparse payload (sparse_wire.h): places are (pos, next, has, first, exp,
    block values); the blocks follow the descriptors."""
    words = [block << 16 | len(places) << 8]
    for pos, nxt, has, first, exp, _ in places:
        words += [pos, nxt, (0x80000000 if has else 0) | (0x40000000 if first else 0) |
                  (exp & 0xFFFF)]
    for _, _, has, _, _, vals in places:
        if has:
            words += list(vals)
    return words


def sw_round(slot, seq, base=0, count=HONEST_ELEMS):
    return b"".join(sw_data(r, slot, seq, [base + r * 10 + i for i in range(count)])
                    for r in range(HONEST_WORLD))


def sw_join(addr, rank, world, elems, window, name, nonce, job=HONEST, flags=0, version=VERSION,
            body=None, step=None):
    h = hdr(K_JOIN, rank=rank, version=version)
    return sw_record(addr, job, flags, step,
                     h + (join_body(world, elems, window, name, nonce) if body is None else body))


def sw_leave(addr, job=HONEST, abort=False, flags=S_CREDS | S_RANK):
    return record(sel(addr, job), flags, hdr(K_LEAVE, rank=addr, flags=1 if abort else 0))


def switch_seeds():
    s = {}
    s["round_complete"] = sw_round(0, 0) + sw_data(0, 0, 0, list(range(8)))  # + duplicate
    s["rounds_all_slots"] = b"".join(sw_round(slot, seq, base=slot * 1000 + seq)
                                     for seq in range(4) for slot in range(HONEST_WINDOW))
    s["round_wrapping_exp"] = b"".join(
        sw_data(r, 1, 1, [[0x7FFFFFFF, -1, -0x80000000], [1, -1, -1], [5, 0, -3]][r],
                exp=[3, -7, EXP_ZERO][r])
        for r in range(HONEST_WORLD)) + sw_data(1, 1, 1, [1, 2, 3], exp=EXP_NONFINITE)
    s["count_mismatch"] = sw_data(0, 2, 0, [1] * 8) + sw_data(1, 2, 0, [1] * 4)
    # Block-sparse rounds (ops 7, 8): blocks of 4, one place per packet (elems 8).
    sp = b""
    for seq in range(3):  # a first round, blocks from some ranks, the column's end
        for r in range(HONEST_WORLD):
            has = seq > 0 and r != 1
            sp += sw_data(r, 0, seq, sparse_payload(4, [(10 + seq, 11 + seq + r if seq < 2 else
                                                         SPARSE_END, has, seq == 0, seq - r,
                                                         [r, -r, 1 << 30, seq])]), op=7)
    sp += sw_data(1, 0, 1, sparse_payload(4, [(11, 12, False, False, 0, [])]), op=7)  # dup
    for r in range(HONEST_WORLD):  # binary32 blocks
        sp += sw_data(r, 1, 0, sparse_payload(4, [(3, SPARSE_END, r > 0, False, 0,
                                                   [0x3F800000, 0x7F800000, 0x80000000, r])]),
                      op=8)
    sp += sw_data(0, 2, 0, [4 << 16 | 1 << 8, 5, 5, 0x80000000 | 1 << 30], op=7)  # malformed
    sp += sw_data(0, 3, 0, sparse_payload(4, []), op=7) + sw_data(1, 3, 0, [4 << 16], op=7)
    sp += sw_data(2, 3, 0, sparse_payload(4, [(1, 2, False, True, 0, [])]), op=7)  # mismatch
    s["sparse_rounds"] = sp
    s["seq_rules"] = (sw_data(0, 0, 0, [1] * 8) + sw_data(0, 0, 0, [1] * 8) +  # dup pending
                      sw_data(0, 0, 2, [1] * 8) +  # next round before this one completed
                      sw_data(0, 0, 4, [1] * 8) +  # too far ahead
                      sw_data(0, 0, 0xFFFFFFFE, [1] * 8) +  # stale
                      sw_data(1, 0, 0, [2] * 8) + sw_data(2, 0, 0, [3] * 8) +  # completes
                      sw_data(0, 0, 2, [1] * 8) + sw_data(0, 0, 0, [1] * 8))  # next; stale dup
    bad = b""
    bad += sw_data(0, 4, 0, [1] * 8)  # slot outside the window
    bad += sw_data(0, 0, 0, [1] * 9)  # count > elems
    bad += sw_data(0, 0, 0, [1] * 8, op=1)  # op
    bad += record(sel(0), S_CREDS | S_RANK, hdr(K_DATA, slot=SET_BIT, seq=0, count=1) + ints([1]))
    bad += sw_data(0, 0, 0, [1], rank=3, flags=S_CREDS)  # rank outside the job
    bad += sw_data(3, 0, 0, [1], rank=0, flags=S_CREDS)  # rank 0's IP, other port
    bad += sw_data(4, 0, 0, [1], rank=0, flags=S_CREDS)  # rank 0's port, other IP
    bad += sw_data(0, 0, 0, [1], flags=S_RANK)  # no credentials
    bad += sw_data(0, 0, 0, [1], flags=S_JOB | S_RANK)  # right session, wrong token
    bad += record(sel(0), S_TOKEN | S_RANK,  # job 1's token, a stale session
                  hdr(K_DATA, job=1, session=0x5E55, count=1) + ints([1]))
    bad += record(sel(0), S_CREDS | S_RANK | S_SETBIT,  # set bit repaired by the harness
                  hdr(K_DATA, slot=SET_BIT, count=1) + ints([1]))
    bad += sw_data(0, 0, 0, [1], job=ORACLE)  # the oracle's credentials from a non-member
    bad += record(sel(0), S_RANK, hdr(K_DATA, job=65, count=0))
    bad += record(sel(0), S_CREDS | S_COUNT, hdr(K_DATA, count=7) + ints([1, 2]))
    s["dataplane_drops"] = bad
    s["short_magic_kind"] = (record(0, 0, b"") + record(1, 0, b"IN\x01") +
                             record(2, 0, hdr(K_DATA, magic=0x4E49)) +
                             record(0, 0, hdr(K_DATA, version=2, count=1) + ints([1])) +
                             record(0, S_CREDS, hdr(99)) + record(0, S_CREDS, hdr(K_RESULT)) +
                             record(0, S_CREDS, hdr(K_JOIN_ACK) + bytes(64)) +
                             record(0, S_CREDS, hdr(K_DATA, count=2) + ints([1])))
    s["third_job"] = (sw_join(5, 0, 2, 4, 2, "third", 0x51) +
                      sw_join(6, 1, 2, 4, 2, "third", 0x52) +
                      sw_data(5, 0, 0, [1, 2, 3, 4], job=THIRD) +
                      sw_data(6, 0, 0, [10, 20, 30, 40], job=THIRD) +
                      sw_data(5, 1, 1, [7], job=THIRD) + sw_data(6, 1, 1, [8], job=THIRD) +
                      sw_leave(5, job=THIRD) + sw_leave(6, job=THIRD))
    js = b""
    js += sw_join(5, 0, 0, 4, 2, "bad", 1)  # world 0
    js += sw_join(5, 0, 2, 4, 3, "bad", 2)  # window not a power of 2
    js += sw_join(5, 0, 2, 0, 2, "bad", 3)  # elems 0
    js += sw_join(5, 0, 2, 17, 2, "bad", 4)  # elems > the switch's max_elems
    js += sw_join(5, 2, 2, 4, 2, "bad", 5)  # rank >= world
    js += sw_join(5, 0, 2, 4, 2, "", 6)  # no name
    js += sw_join(5, 0, 2, 4, 2, "x" * 32, 7)  # name not terminated
    js += sw_join(5, 0, 2, 4, 2, "short", 8, body=join_body(2, 4, 2, "short", 8)[:40])
    js += sw_join(5, 0, 2, 4, 2, "v2", 9, version=2)  # other version, nonce present
    js += sw_join(5, 0, 2, 4, 2, "v2", 9, version=2, body=b"\x01\x02")  # no nonce
    js += sw_join(5, 0, 4, 4, 2, "honest", 10)  # world disagrees with the running job
    js += sw_join(5, 0, 1, 4, 16, "big", 11)  # window larger than the free pool
    s["join_errors"] = js
    # Shared-memory rings: this switch offers none, so SHM_ATTACH (right credentials or
    # not, short body or not) gets SHM_ACK NOTSUP or a drop; a DOORBELL is ignored.
    shm_body = bytes(8) + (64).to_bytes(4, "big") + (8256).to_bytes(4, "big") + \
        b"/ina.0.0123456789abcdef".ljust(64, b"\0")
    s["shm_attach_doorbell"] = (record(sel(0), S_CREDS | S_RANK, hdr(K_SHM_ATTACH) + shm_body) +
                                record(sel(0), S_CREDS | S_RANK, hdr(K_SHM_ATTACH) + bytes(10)) +
                                record(sel(5), S_CREDS | S_RANK, hdr(K_SHM_ATTACH) + shm_body) +
                                record(sel(0), S_CREDS | S_RANK, hdr(K_DOORBELL)) +
                                sw_round(0, 0))
    s["join_again"] = (sw_join(0, 0, 3, 8, 4, "honest", 0x1000) +  # lost ACK: same nonce
                       sw_join(0, 0, 3, 8, 4, "honest", 0x9999) +  # new incarnation: abort
                       sw_join(1, 1, 3, 8, 4, "honest", 0x1001) +
                       sw_join(2, 2, 3, 8, 4, "honest", 0x1002) + sw_round(0, 0))
    s["leave_all"] = (sw_leave(0) + sw_leave(0) + sw_leave(1) + sw_leave(2) + sw_leave(2) +
                      sw_data(0, 0, 0, [1] * 8))
    s["leave_abort"] = sw_data(0, 3, 0, [1] * 8) + sw_leave(1, abort=True) + sw_round(3, 0)
    # Registrations: a JOIN stating a deadline (header seq, ms), WITHDRAW with the right
    # nonce, a wrong nonce and a short body, a silent rank forgotten at a tick, and a
    # world-size disagreement that NAKs every registered rank.
    wd = hdr(K_WITHDRAW, rank=0)
    s["join_withdraw_expire"] = (
        sw_record(5, HONEST, 0, None, hdr(K_JOIN, rank=0, seq=1500) +
                  join_body(2, 4, 2, "wd", 0x51)) +
        sw_record(5, HONEST, 0, None, wd + join_body(2, 4, 2, "wd", 0x52)) +
        sw_record(5, HONEST, 0, None, wd + join_body(2, 4, 2, "wd", 0x51)) +
        sw_record(5, HONEST, 0, None, wd + bytes(20)) +
        sw_join(6, 0, 2, 4, 2, "quiet", 0x53) +
        sw_join(7, 1, 2, 4, 2, "quiet", 0x54, step=5) +
        sw_join(5, 0, 2, 4, 2, "mm", 0x55) + sw_join(6, 1, 3, 4, 2, "mm", 0x56) +
        sw_join(7, 2, 3, 4, 2, "mm", 0x57))
    # Lanes proposed at join (header flag bit 11, byte 27 = nlanes): proposals 3 and 2 agree
    # on 2; a fixed count that differs from a fixed one NAKs; a proposal on lane 1 is refused.
    def lanes_join(addr, rank, world, lane, nlanes, name, nonce, auto):
        body = bytearray(join_body(world, 4, 2, name, nonce))
        body[26], body[27] = lane, nlanes
        return sw_record(addr, HONEST, 0, None,
                         hdr(K_JOIN, rank=rank, flags=0x0800 if auto else 0) + bytes(body))
    s["join_lanes_auto"] = (lanes_join(5, 0, 2, 0, 3, "la", 0x61, True) +
                            lanes_join(6, 1, 2, 0, 2, "la", 0x62, True) +
                            lanes_join(5, 0, 3, 0, 2, "lf", 0x63, False) +
                            lanes_join(6, 1, 3, 0, 4, "lf", 0x64, True) +
                            lanes_join(7, 2, 3, 0, 3, "lf", 0x65, False) +
                            lanes_join(5, 0, 2, 1, 2, "l1", 0x66, True))
    s["leave_bad"] = (sw_leave(0, flags=S_RANK) + sw_leave(3, flags=S_CREDS) +
                      record(sel(0), S_CREDS, hdr(K_LEAVE, rank=7)) +
                      record(sel(0), 0, hdr(K_LEAVE, job=0)) +
                      record(sel(0), 0, hdr(K_LEAVE, job=64)))
    s["tick_idle"] = (sw_data(0, 0, 0, [1] * 8, step=5) + sw_data(1, 0, 0, [1] * 8, step=6) +
                      sw_data(2, 0, 0, [1] * 8, step=7))
    s["tick_join"] = (sw_join(5, 0, 2, 4, 1, "late", 0x77, step=4) +  # join deadline passes
                      sw_join(6, 1, 2, 4, 1, "late", 0x78, step=3) +
                      sw_join(5, 0, 2, 4, 1, "late", 0x77, step=1))
    s["job_table_full"] = b"".join(sw_join(5 + (i & 1), 0, 2, 1, 1, "j%d" % i, 0x100 + i)
                                   for i in range(64))
    s["pool_full"] = b"".join(sw_join(5, 0, 1, 2, 2, "p%d" % i, 0x200 + i) for i in range(6))
    # A tree of switches (PROTOCOL.md §12). As a parent: two children stand for ranks {0, 1}
    # and {2, 3} of a job; a round, a duplicate, an abort with a reason; malformed sets.
    tj = sw_tree_join(5, 1, 4, [1], "tree", 0x61) + sw_tree_join(5, 0, 4, [0, 1], "tree", 0x61)
    tj += sw_tree_join(6, 2, 4, [2, 3], "tree", 0x62)
    tj += sw_data(5, 0, 0, [1, 2], job=THIRD) + sw_data(6, 0, 0, [3, 4], job=THIRD, rank=2)
    tj += sw_data(5, 0, 0, [1, 2], job=THIRD)  # a duplicate: answered with the sum
    tj += sw_data(5, 1, 1, [1], job=THIRD, rank=1, flags=S_CREDS)  # a rank a child stands for
    tj += record(sel(5, THIRD), S_CREDS | S_RANK,
                 hdr(K_LEAVE, rank=0, flags=1) + nak_body(ERR_MISMATCH))
    s["tree_parent"] = tj
    bad = sw_tree_join(5, 0, 4, [], "t2", 0x71)  # empty set
    bad += sw_tree_join(5, 0, 4, [1, 2], "t2", 0x72)  # lowest is 1, header says 0
    bad += sw_tree_join(5, 0, 2, [0, 2], "t2", 0x73)  # a rank outside the world
    bad += sw_tree_join(5, 0, 2, [0], "t3", 0x74, window=0) + \
        sw_tree_join(6, 1, 2, [1], "t3", 0x75)  # a child without room: NOSPACE for all
    bad += sw_tree_join(5, 0, 2, [0], "t4", 0x76)[:4 + 32 + 64]  # no set
    bad += sw_tree_join(5, 0, 2, [0, 1], "honest", 0x77)  # a running job's name
    s["tree_parent_bad"] = bad
    # As a child (S_CHILD): the honest job runs, its rounds go up; the parent (address
    # PARENT) answers a round, repeats itself, sends stale and foreign answers, aborts.
    ch = b"".join(sw_data(r, 0, 0, [r + 1] * 8, flags=S_CREDS | S_RANK | (S_CHILD if r == 0 else 0))
                  for r in range(HONEST_WORLD))
    ch += sw_data(1, 0, 0, [2] * 8)  # a worker's retransmission: the partial sum goes up again
    res = hdr(K_RESULT, rank=0xFFFF, slot=slot_field(0, 0), seq=0, count=8) + ints([6] * 8)
    ch += record(sel(PARENT), S_CREDS, res) + record(sel(PARENT), S_CREDS, res)  # + duplicate
    ch += record(sel(5), S_CREDS, res)  # not from the parent
    ch += record(sel(PARENT), S_CREDS, hdr(K_RESULT, rank=0xFFFF, slot=slot_field(1, 1), seq=1,
                                             count=8) + ints([6] * 8))  # nothing awaits it
    ch += sw_round(1, 0) + record(sel(PARENT), S_CREDS, hdr(K_MIGRATE) + bytes(32))
    ch += record(sel(PARENT), S_CREDS, hdr(K_ABORT) + nak_body(ERR_MISMATCH))
    s["tree_child"] = ch
    # A new job "c" at the child (job table entry 2): the parent answers its registration
    # (S_RANK patches in the registration's nonce): a wrong nonce, a redirect, then a refusal.
    cj = record(sel(5, THIRD), S_CHILD, hdr(K_JOIN, rank=0) + join_body(2, 4, 2, "c", 0x81))
    cj += record(sel(PARENT, THIRD), 0, hdr(K_JOIN_ACK) + join_body(2, 4, 2, "c", 0x81))
    cj += record(sel(PARENT, THIRD), S_RANK, hdr(K_REDIRECT) + struct.pack(">QiHH", 0, 0, 7006, 0))
    cj += record(sel(PARENT, THIRD), S_RANK, hdr(K_JOIN_NAK) + nak_body(ERR_NOSPACE))
    # Job "d": started by the parent (it grants window 1), one round through it.
    cj += record(sel(5, THIRD), 0, hdr(K_JOIN, rank=0) + join_body(1, 4, 2, "d", 0x83))
    cj += record(sel(PARENT, THIRD), S_RANK, hdr(K_JOIN_ACK, job=9, session=0x99, token=0x77) +
                 join_body(1, 4, 1, "d", 0))
    cj += sw_data(5, 0, 0, [5, 6, 7, 8], job=THIRD)
    cj += sw_tree_join(6, 0, 2, [0, 1], "c2", 0x82, step=4)  # a grandchild; ticks retransmit
    s["tree_child_join"] = cj
    s.update(hot_seeds())
    return s


def hot_install(addr, job, epoch, total, offset, keys):
    """HOT_INSTALL (PROTOCOL.md §14.3) from addr, with job's credentials and rank."""
    body = struct.pack(">IIIHH", epoch, total, offset, len(keys), 0) + \
        b"".join(struct.pack(">Q", k) for k in keys)
    return record(sel(addr, job), S_CREDS | S_RANK, hdr(K_HOT_INSTALL) + body)


def hot_fetch(addr, job, epoch, offset, maxc):
    return record(sel(addr, job), S_CREDS | S_RANK,
                  hdr(K_HOT_FETCH) + struct.pack(">IIHH", epoch, offset, maxc, 0))


def hot_sample(addr, job, epoch, want, chunk, nchunks, pairs):
    """HOT_SAMPLE (PROTOCOL.md §14.3): a rank's sampled (key, count) pairs, one chunk."""
    body = struct.pack(">IIHHHH", epoch, want, chunk, nchunks, len(pairs), 0) + \
        b"".join(struct.pack(">QI", k, c) for k, c in pairs)
    return record(sel(addr, job), S_CREDS | S_RANK, hdr(K_HOT_SAMPLE) + body)


def hot_data(addr, slot, seq, epoch, base, values=None, pairs=None, present=None):
    """HOT_DATA of the honest job: dense values, keyed (key, value) pairs, or a bitmap of
    the present (position, value)s of a block of 8."""
    if present is not None:
        bits = 0
        for pos, _ in present:
            bits |= 1 << pos
        body = bytes([bits]) + b"".join(struct.pack(">f", v) for _, v in sorted(present))
        count, flags = 8, FLAG_HOT_BITMAP
    elif pairs is not None:
        body = b"".join(struct.pack(">Qf", k, v) for k, v in pairs)
        count, flags = 8, FLAG_HOT_KEYED  # the block's positions, like the dense ones
    else:
        body = b"".join(struct.pack(">f", v) for v in values)
        count, flags = len(values), 0
    h = hdr(K_HOT_DATA, rank=addr, slot=slot_field(slot, seq), seq=seq, count=count,
            flags=flags, op=OP_HOT_F32)
    return record(sel(addr), S_CREDS | S_RANK, h + struct.pack(">II", epoch, base) + body)


HOT_KEYS24 = [0x1000 + 7 * i for i in range(24)]  # fuzz_switch's --hot-keys is 24


def hot_seeds():
    """The hot table (§14.3): installs, fetches, rounds, and --hot-memory (2 KiB in
    fuzz_switch: two full tables, then NOSPACE)."""
    s = {}
    k = HOT_KEYS24
    h = hot_install(0, HONEST, 1, 12, 0, k[:6]) + hot_fetch(1, HONEST, 1, 0, 20)
    h += hot_install(0, HONEST, 1, 12, 6, k[6:12]) + hot_fetch(1, HONEST, 1, 0, 20)
    h += hot_fetch(2, HONEST, 1, 12, 20) + hot_fetch(2, HONEST, 1, 13, 20)  # at and past H
    h += hot_fetch(2, HONEST, 2, 0, 20) + hot_fetch(2, HONEST, 0, 0, 20)    # later; epoch 0
    h += (hot_data(0, 0, 0, 1, 0, values=[1.0] * 8) + hot_data(1, 0, 0, 1, 0, values=[2.0] * 8) +
          hot_data(2, 0, 0, 1, 0, pairs=[(k[1], 0.5), (k[3], -1.0)]))
    h += hot_data(0, 1, 0, 1, 8, values=[1.0] * 4)
    h += hot_install(0, HONEST, 2, 24, 0, k) + hot_install(0, HONEST, 2, 0, 0, [])
    s["hot_install_fetch"] = h
    m = hot_install(0, HONEST, 1, 24, 0, k)
    m += sw_join(5, 0, 1, 4, 1, "hot2", 0x61) + hot_install(5, THIRD, 1, 24, 0, k)
    m += sw_join(6, 0, 1, 4, 1, "hot3", 0x62) + record(sel(6, 3), S_CREDS | S_RANK,
                                                      hdr(K_HOT_INSTALL) + struct.pack(
                                                          ">IIIHH", 1, 24, 0, 0, 0))
    m += hot_install(0, HONEST, 2, 24, 0, k)  # a reinstall beside epoch 1: NOSPACE
    m += sw_leave(5, job=THIRD) + hot_install(0, HONEST, 2, 24, 0, k)  # room again
    s["hot_memory_full"] = m
    # Every rank's sample of epoch 1 (two chunks from rank 0, one of them twice, one empty
    # sample), the table the switch picks from their sums, then rounds in all three
    # encodings, and a sample of epoch 2 that asks for more than --hot-keys.
    sm = hot_sample(0, HONEST, 1, 12, 0, 2, [(k[i], 5 - i % 5) for i in range(10)])
    sm += hot_sample(1, HONEST, 1, 12, 0, 1, [(k[i], 3) for i in range(4, 16)])
    sm += hot_sample(0, HONEST, 1, 12, 0, 2, [(k[i], 5 - i % 5) for i in range(10)])
    sm += hot_sample(1, HONEST, 1, 13, 0, 1, [])  # another want: MISMATCH
    sm += hot_fetch(2, HONEST, 1, 0, 20)           # pending
    sm += hot_sample(2, HONEST, 1, 12, 0, 1, [])
    sm += hot_sample(0, HONEST, 1, 12, 1, 2, [(k[20], 9)]) + hot_fetch(2, HONEST, 1, 0, 20)
    sm += (hot_data(0, 0, 0, 1, 0, present=[(1, 0.5), (6, 2.0)]) +
           hot_data(1, 0, 0, 1, 0, values=[1.0] * 8) +
           hot_data(2, 0, 0, 1, 0, present=[(0, -1.0)]))
    sm += hot_data(0, 1, 0, 1, 8, present=[(0, 1.0)])
    sm += hot_sample(0, HONEST, 2, 40, 0, 1, [(x, 1) for x in k])
    s["hot_sample"] = sm
    return s


def switch_regressions():
    """Inputs that once crashed fuzz_switch (tests/fuzz/regressions/switch/)."""
    s = {}
    # Issue 30, item 8: a one-rank job, HOT_INSTALL epoch 1 total 5 with one key, then
    # HOT_FETCH epoch 0 offset 0: an offset applied to the NULL key list (UBSan, hot.c).
    s["hot_fetch_epoch0"] = (sw_join(5, 0, 1, 4, 1, "hot-ub", 0x71) +
                             hot_install(5, THIRD, 1, 5, 0, [42]) +
                             hot_fetch(5, THIRD, 0, 0, 10))
    return s


def sw_tree_join(addr, rank, world, ranks, name, nonce, job=HONEST, window=2, step=None):
    """A TREE_JOIN (PROTOCOL.md §12): the JOIN body, then the bitmap of the ranks it stands for."""
    bits = bytearray(32)
    for r in ranks:
        bits[r >> 3] |= 1 << (r & 7)
    h = hdr(K_TREE_JOIN, rank=rank)
    return sw_record(addr, job, 0, step, h + join_body(world, 4, window, name, nonce) + bytes(bits))


# ---- fuzz_reply -----------------------------------------------------------------

# flags (fuzz_reply.c)
R_CLOCK, R_HDR, R_CREDS, R_SLOT, R_COUNT, R_MODEL, R_DUP, R_PROGRESS = \
    0x01, 0x02, 0x04, 0x08, 0x10, 0x20, 0x40, 0x80
R_FORGE = R_HDR | R_CREDS | R_SLOT | R_COUNT | R_PROGRESS  # accepted, with our payload


def config(window_log2, world, elems, a_count, a_float=False, b_count=None, b_float=False,
           nonfinite=False, float_wire=False, sparse=False):
    """float_wire: the switch adds floats (op 4); b_count is then at most 127. sparse: the
    requests are block-sparse (ops 7 and 8, blocks of 2 elements). world: 1..32."""
    assert 1 <= world <= 32
    b0 = (window_log2 & 3) | (world - 1) << 2 | sparse << 7
    b1 = ((elems - 1) & 15) | (a_float << 4) | ((b_count is not None) << 5) | (b_float << 6) | \
        (nonfinite << 7)
    return bytes([b0, b1, a_count, (b_count or 0) | (float_wire << 7)])


def rsel(ws, step, rx=False, refused=False):
    """rx: deliver through recvmmsg; refused: recvmmsg reports ECONNREFUSED when empty."""
    return ws | (step or 0) << 3 | rx << 6 | refused << 7


def model(ws, step=None, flags=R_MODEL | R_PROGRESS, rx=False, refused=False):
    """The model switch's honest RESULT for the packet in flight in window slot ws."""
    return record(flags | (R_CLOCK if step is not None else 0), rsel(ws, step, rx, refused), b"")


def result(ws, values=(), exp=0, flags=R_FORGE, step=None, **kw):
    """A forged RESULT record for window slot ws (R_SLOT patches the header's slot, seq and tag
    from the DATA last sent there; without R_SLOT the kw slot= and seq= are sent as given)."""
    return record(flags | (R_CLOCK if step is not None else 0), rsel(ws, step),
                  hdr(K_RESULT, exp=exp, count=len(values), **kw) + ints(values))


def stream(window, reqs, elems, step=None, float_wire=False):
    """Model results for every packet of the requests, in stream order (packet g uses slot
    g % window). reqs: (count, is_float). float_wire: floats take one round (op 4)."""
    out, g = b"", 0
    for count, is_float in reqs:
        nblocks = (count + elems - 1) // elems
        npackets = nblocks + (min(nblocks, window) if is_float and not float_wire else 0)
        for _ in range(npackets):
            out += model(g % window, step)
            g += 1
    return out


def reply_seeds():
    s = {}
    s["int_complete"] = config(2, 2, 4, 13) + stream(4, [(13, False)], 4)
    s["float_complete"] = config(1, 2, 4, 10, a_float=True) + stream(2, [(10, True)], 4)
    s["two_ops_rtt"] = (config(3, 3, 4, 9, b_count=20, b_float=True) +
                        stream(8, [(9, False), (20, True)], 4, step=2))
    s["float_big_world"] = (config(0, 32, 16, 255, a_float=True, nonfinite=True) +
                            stream(1, [(255, True)], 16))
    s["float_zero_nonfinite"] = (config(2, 4, 8, 40, a_float=True, b_count=33, b_float=True,
                                        nonfinite=True) + stream(4, [(40, True), (33, True)], 8))
    s["float_wire_complete"] = (config(2, 3, 4, 30, a_float=True, b_count=9, float_wire=True) +
                                stream(4, [(30, True), (9, False)], 4, float_wire=True))
    s["float_wire_nonfinite"] = (config(1, 5, 8, 40, a_float=True, b_count=20, b_float=True,
                                        nonfinite=True, float_wire=True) +
                                 stream(2, [(40, True), (20, True)], 8, float_wire=True))
    # Block-sparse: the schedule depends on the results, so the model answers slot after
    # slot, round after round, more often than the ops need (extra records are stale).
    s["sparse_int_float"] = (config(2, 3, 16, 200, b_count=90, b_float=True, sparse=True) +
                             b"".join(model(g % 4) for g in range(120)))
    s["sparse_float_wire"] = (config(1, 2, 12, 150, a_float=True, b_count=40, nonfinite=True,
                                     float_wire=True, sparse=True) +
                              b"".join(model(g % 2) for g in range(100)))
    s["sparse_forged"] = (config(2, 2, 16, 120, a_float=True, sparse=True) + model(0) +
                          result(1, [2 << 16 | 2 << 8, 0, 1, 1 << 30, 6, 6, 0]) +
                          result(2, [2 << 16 | 1 << 8, 2, 0xFFFFFFFF, 0x80000000, 5, 7]) +
                          b"".join(model(g % 4) for g in range(60)))
    s["count_zero_then_op"] = config(1, 2, 2, 0, b_count=5) + stream(2, [(5, False)], 2)
    s["forged"] = (config(2, 2, 4, 13) + model(0) + result(1, [1, 2, 3, 4]) +
                   result(2, [5, 6, 7, 8], flags=R_FORGE | R_DUP) + model(3) +
                   result(0, [9], flags=R_FORGE & ~R_COUNT))
    s["forged_float_exp"] = (config(1, 2, 4, 16, a_float=True) +
                             result(0, [], exp=EXP_NONFINITE) + result(1, [], exp=-32000) +
                             model(0) + model(1) + model(0) + model(1))
    abort = hdr(K_ABORT) + nak_body(ERR_MISMATCH)
    s["abort"] = (config(2, 2, 4, 13) + model(0) + record(R_CREDS, 0, abort) + model(1))
    s["abort_short_body"] = (config(2, 2, 4, 13) + record(R_CREDS, 0, hdr(K_ABORT) + b"\0\0") +
                             record(R_CREDS, 0, hdr(K_ABORT) + nak_body(ERR_ABORTED)))
    s["count_mismatch"] = (config(2, 2, 4, 13) + model(0) +
                           result(1, [1], flags=R_HDR | R_CREDS | R_SLOT))
    s["stale_dup"] = (config(1, 2, 4, 16) + model(0, flags=R_MODEL | R_DUP | R_PROGRESS) +
                      model(0) +  # nothing new in flight there yet: stale
                      result(1, [1, 2, 3, 4], flags=R_HDR | R_CREDS | R_COUNT, seq=7,
                             slot=SET_BIT | 1) +
                      result(1, [1, 2, 3, 4], flags=R_HDR | R_SLOT | R_COUNT) +  # no credentials
                      result(1, [1, 2, 3, 4], flags=R_HDR | R_CREDS | R_COUNT, seq=1, slot=9) +
                      result(1, [1, 2, 3, 4], flags=R_HDR | R_CREDS | R_COUNT, seq=1,
                             slot=SET_BIT | 1) +  # right slot and seq, tag 0
                      stream(2, [(16, False)], 4))
    s["timers"] = (config(2, 2, 4, 40, a_float=True) +
                   model(0, step=4, flags=R_PROGRESS) +  # retransmit everything
                   model(0, step=2) + model(2) + model(3) +  # gap: fast retransmit of slot 1
                   model(1, step=5, flags=R_PROGRESS) +
                   model(1, step=7, flags=R_PROGRESS))  # deadline
    s["via_recvmmsg"] = (config(2, 3, 4, 30, a_float=True) +
                         record(R_HDR | R_CREDS | R_SLOT, rsel(0, None, rx=True),
                                hdr(K_RESULT) + bytes(200)) +  # truncated by recvmmsg
                         b"".join(model(g % 4, rx=True, flags=R_MODEL | (R_DUP if g == 2 else 0))
                                  for g in range(12)))
    s["refused"] = (config(1, 2, 4, 13) + model(0, refused=True) +
                    model(1, step=3, flags=R_PROGRESS, refused=True) +  # refused since now
                    model(1, step=5, flags=R_PROGRESS, refused=True) +  # > 1 s: switch gone
                    model(1))
    s["junk"] = (config(2, 2, 4, 13) + record(0, 0, b"") + record(0, 0, b"IN\x01\x02") +
                 record(R_CREDS, 0, hdr(K_RESULT, magic=0x1234)) +
                 record(R_CREDS, 0, hdr(K_RESULT, version=9)) +
                 record(R_CREDS, 0, hdr(K_RESULT, count=3) + ints([1])) +
                 record(R_CREDS, 0, hdr(K_JOIN_ACK) + bytes(64)) +
                 record(R_CREDS, 0, hdr(K_DATA, count=1) + ints([1])) + stream(4, [(13, False)], 4))
    return s


# ---- fuzz_ps: the memory paths (PROTOCOL.md §14.2.8) ------------------------------

# flags (fuzz_ps.c); sel bits 0-2: the source (0..2: ranks 0..2 of "honest" and "stale")
K_PS_JOIN, K_PS_PUSH, K_PS_UPDATE = 32, 35, 48
PS_DIM = 2  # the dim of fuzz_ps's jobs


def ps_join_split(rank, world, name, nonce, first, last, split=1):
    """A PS_JOIN (PROTOCOL.md §14.2.1) of a job with a weighted split: the 96 bytes with
    split at byte 94, then range_first and range_last."""
    body = struct.pack(">QHHHHBBBBffffIQ32sIIIHBx", nonce, world, 0, 1, 1, 0, 0, 0, 0, 0.5,
                       1.0, 0.0, 0.0, 600, 3, name.encode(), 0, 0, 0, 0, split)
    body += struct.pack(">II", first, last)
    return record(rank, P_MAGIC, hdr(K_PS_JOIN, rank=rank) + body)


def ps_push(rank, step, index, keys):
    body = b"".join(struct.pack(">Qff", k, 1.0, -1.0) for k in keys)
    return record(rank, P_MAGIC | P_CREDS | P_RANK,
                  hdr(K_PS_PUSH, rank=rank, slot=index, seq=step, count=len(keys)) + body)


def ps_update(rank, uid, stamp, nkeys):
    """An UPDATE of the stale job (base 0, one rank's), nkeys entries of one key."""
    body = struct.pack(">II", stamp, 0) + struct.pack(">Qff", 9, 0.5, 0.25) * nkeys
    return record(rank, P_MAGIC | P_CREDS | P_RANK,
                  hdr(K_PS_UPDATE, rank=rank, slot=uid, seq=0, count=nkeys) + body)


def ps_memory_seeds():
    """Seeds for the memory paths of ina-ps (PROTOCOL.md §14.2.8) at fuzz_ps's 256 KiB
    --max-memory: packet bitmaps of the largest index, and held UPDATE copies."""
    s = {}
    f = ps_push(0, 0, 100, [1])
    for step in (0, 1):
        for rank in range(3):
            f += ps_push(rank, step, (1 << 20) - 1, [2 + rank])  # 128 KiB bitmaps
    f += ps_push(1, 0, 1 << 20, [5])                             # drop INDEX
    s["push_index_flood"] = f
    # ranks 1 and 2 send stamps 1 and 2 before stamp 0: two copies held (charged), then
    # taken in stamp order (run-fuzz.sh's -max_len of 8192 bounds a seed)
    s["update_held"] = (ps_update(1, 1, 1, 120) + ps_update(2, 1, 2, 120) +
                        ps_update(0, 1, 0, 10))
    # A weighted split (§14.1): a 2-rank job whose ranks agree on the range of this shard
    # (0 of 1: all of it), a third JOIN that names another range, and refused ranges.
    s["join_split"] = (ps_join_split(3, 2, "w", 0x51, 0, 0xFFFFFFFF) +
                       ps_join_split(4, 2, "w", 0x52, 0, 0xFFFFFFFF) +
                       ps_join_split(5, 2, "w", 0x53, 0, 0xFFFFFFFE) +
                       ps_join_split(5, 2, "w2", 0x54, 1, 0xFFFFFFFF) +
                       ps_join_split(5, 2, "w3", 0x55, 0, 0xFFFFFFFF, split=2))
    return s


# ---- fuzz_ps and fuzz_sched: MLfabric's membership and failures (PROTOCOL.md §15.9) ------

K_UPDATE, K_REQ, K_DONE, K_SYNC, K_STATE, K_REPLAY = 48, 50, 52, 53, 54, 57
STAMP_NONE = 0xFFFFFFFF
# fuzz_ps.c flags; the kind comes from sel bits 6-7 and flag bits 7 (+4) and 6 (+8)
P_MAGIC, P_CREDS, P_RANK, P_COUNT, P_KIND, P_TICK = 0x01, 0x02, 0x04, 0x08, 0x10, 0x20
P_UPDATE = (2, 0x80)   # kinds[6]
P_SYNC = (3, 0x80)     # kinds[7]
P_REPLAY = (1, 0xC0)   # kinds[13]
P_SCHED = 4            # src_table[4]: the --sched address


def ps_record(src, kind, datagram, extra=0):
    """One fuzz_ps record from src_table[src] of kind (a (sel bits, flag bits) pair)."""
    sel_hi, fl = kind
    flags = P_MAGIC | P_CREDS | P_RANK | P_COUNT | P_KIND | fl | extra
    return record((sel_hi << 6) | src, flags, datagram)


def stale_update(rank, uid, base, stamp, value):
    """An UPDATE of the stale job (dim 2): the harness patches credentials, rank, count."""
    return (hdr(K_UPDATE, rank=rank, slot=uid, seq=base, count=1) + ints([stamp, 0]) +
            struct.pack(">Qff", 7, value, -value))


def ps_sync(action, arg, n=1):
    return hdr(K_SYNC, rank=0xFFFF, slot=1) + b"stale".ljust(32, b"\0") + ints([action, arg, n])


def ps_seeds():
    s = {}
    # stamp 0 applied, stamp 2 held, stamp 1 voided (2 taken), stamp 1's late update VOIDED,
    # stamp 2 replayed and its PS_REPLAY taken back as a copy, a departure, fates, orphans
    seq = (ps_record(0, P_UPDATE, stale_update(0, 1, 0, 0, 1.0)) +
           ps_record(2, P_UPDATE, stale_update(2, 1, 0, 2, 2.0)) +
           ps_record(P_SCHED, P_SYNC, ps_sync(0, 2)) +
           ps_record(P_SCHED, P_SYNC, ps_sync(1, 1, 1)) +
           ps_record(1, P_UPDATE, stale_update(1, 1, 0, 1, 3.0)) +
           ps_record(1, P_UPDATE, stale_update(1, 1, 0, 1, 3.0)) +
           ps_record(P_SCHED, P_SYNC, ps_sync(2, 2)) +
           ps_record(P_SCHED, P_REPLAY, hdr(K_REPLAY, rank=2, slot=1, seq=0, count=1) +
                     b"stale".ljust(32, b"\0") + ints([2, 0]) + struct.pack(">Qff", 7, 2.0, -2.0)) +
           ps_record(P_SCHED, P_SYNC, ps_sync(3, 1)) +
           ps_record(P_SCHED, P_SYNC, ps_sync(0, 1)) +
           ps_record(0, P_UPDATE, stale_update(0, 2, 2, 5, 1.5)) +
           ps_record(P_SCHED, P_SYNC, ps_sync(1, 3, 64)) +
           ps_record(2, P_UPDATE, stale_update(2, 2, 3, 67, 0.5)))
    s["membership_voids"] = seq
    # forged: from a rank's address, short, a bad action, a count of 0 and 65
    s["membership_forged"] = (ps_record(0, P_SYNC, ps_sync(1, 0, 1)) +
                              record((P_SYNC[0] << 6) | P_SCHED, P_MAGIC | P_KIND | 0x80,
                                     ps_sync(1, 0)[:60]) +
                              record((P_SYNC[0] << 6) | P_SCHED, P_MAGIC | P_CREDS | P_KIND | 0x80,
                                     ps_sync(7, 0, 1)) +
                              record((P_SYNC[0] << 6) | P_SCHED, P_MAGIC | P_CREDS | P_KIND | 0x80,
                                     ps_sync(1, 0, 65)))
    return s


# fuzz_sched.c flags
Q_MAGIC, Q_REQ, Q_DONE, Q_NAME, Q_RANK, Q_TICK, Q_FETCH, Q_SERVER = \
    0x01, 0x02, 0x04, 0x08, 0x10, 0x20, 0x40, 0x80
STEP_1MS, STEP_100MS, STEP_5S = 2, 3, 6  # tick_step indexes (sel bits 3-5)


def sched_req(rank, q, flags=0):
    return hdr(K_REQ, rank=rank, slot=q, seq=0xFFFFFFFF) + ints([1000, flags]) + \
        b"fuzz".ljust(32, b"\0")


def sched_state(action, arg, result, run, version, stamp, joined=0x0F, left=0, pick=200, near=200):
    """A PS_STATE; the header's tag (pick) and op (near) bytes below 128 / 64 let the harness
    put a stamp being voided or repaired in arg, and a next stamp near the scheduler's."""
    body = (b"fuzz".ljust(32, b"\0") + ints([action, arg, result, run, version, stamp, 0, 0]) +
            struct.pack(">HHQ", 4, 4, 0) + bytes([joined]) + bytes(31) + bytes([left]) + bytes(31))
    h = bytearray(hdr(K_STATE, rank=0xFFFF, seq=version))
    h[30], h[31] = near, pick
    return bytes(h) + body


def sched_seeds():
    s = {}
    st = Q_MAGIC | Q_SERVER | Q_REQ | Q_NAME
    seq = record(STEP_1MS << 3, st, sched_state(0, 0, 5, 0, 0, 0))  # NO_JOB: a new job
    seq += record(STEP_1MS << 3, Q_TICK, b"")
    for r in range(4):
        seq += record((STEP_1MS << 3) | r, Q_MAGIC | Q_REQ | Q_NAME | Q_RANK | Q_FETCH,
                      sched_req(r, 1))
    seq += record(STEP_5S << 3, Q_TICK, b"")                        # the leases run out
    seq += record(STEP_1MS << 3, st, sched_state(1, 0, 2, 0, 0, 0, pick=0))   # held
    seq += record(STEP_1MS << 3, st, sched_state(1, 0, 1, 1, 1, 2, pick=1))   # voided
    seq += record(STEP_100MS << 3, Q_TICK, b"")
    seq += record(STEP_1MS << 3, st | Q_FETCH, sched_state(1, 0, 1, 1, 1, 2, pick=1))
    seq += record(STEP_100MS << 3, Q_TICK, b"")
    seq += record(STEP_1MS << 3, st | Q_FETCH, sched_state(0, 0, 0, 0, 1, 1))  # replica lags
    seq += record(STEP_100MS << 3, Q_TICK, b"")
    seq += record(STEP_100MS << 3, Q_TICK, b"")
    seq += record(STEP_1MS << 3, st, sched_state(0, 0, 0, 0, 1, 2, pick=64))  # its fate: taken
    seq += record(STEP_100MS << 3, Q_TICK, b"")
    seq += record(STEP_100MS << 3, Q_TICK, b"")
    seq += record(STEP_100MS << 3, Q_TICK, b"")
    seq += record(STEP_1MS << 3, st, sched_state(0, 0, 0, 0, 1, 2, pick=64))
    seq += record(STEP_1MS << 3, Q_MAGIC | Q_SERVER | Q_DONE | Q_NAME,
                  hdr(K_REPLAY, rank=1, slot=1, count=1)[:31] + bytes([64]) +
                  b"fuzz".ljust(32, b"\0") + ints([1, 0]) + bytes(12))
    seq += record((STEP_1MS << 3) | 1, Q_MAGIC | Q_REQ | Q_NAME | Q_RANK,
                  sched_req(1, 2, flags=2))                         # rank 1 leaves
    s["membership_leases"] = seq
    # a scheduler starting on a running job: every rank asks, or the lease voids the orphans
    seq = b""
    for r in range(3):
        seq += record((STEP_1MS << 3) | r, Q_MAGIC | Q_REQ | Q_NAME | Q_RANK | Q_FETCH,
                      sched_req(r, 9))
    seq += record(STEP_1MS << 3, st, sched_state(0, 0, 0, 0, 10, 12))
    seq += record(STEP_1MS << 3, Q_TICK, b"")
    seq += record((STEP_1MS << 3) | 3, Q_MAGIC | Q_REQ | Q_NAME | Q_RANK | Q_FETCH, sched_req(3, 4))
    seq += record(STEP_1MS << 3, Q_TICK, b"")
    s["membership_recovery"] = seq
    seq = b""
    for r in range(3):
        seq += record((STEP_1MS << 3) | r, Q_MAGIC | Q_REQ | Q_NAME | Q_RANK | Q_FETCH,
                      sched_req(r, 9))
    seq += record(STEP_1MS << 3, st, sched_state(0, 0, 0, 0, 10, 12))
    seq += record(STEP_5S << 3, Q_TICK, b"")
    seq += record(STEP_1MS << 3, Q_TICK, b"")
    seq += record(STEP_1MS << 3, st, sched_state(1, 12, 1, 64, 10, 76, pick=200))
    seq += record(STEP_1MS << 3, Q_TICK, b"")
    s["membership_orphans"] = seq
    return s


def write(outdir, name, seeds):
    d = os.path.join(outdir, name)
    os.makedirs(d, exist_ok=True)
    for k in sorted(seeds):
        with open(os.path.join(d, k), "wb") as f:
            f.write(seeds[k])


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    outdir = sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, "corpus")
    write(outdir, "switch", switch_seeds())
    write(outdir, "reply", reply_seeds())
    write(outdir, "ps", {**ps_memory_seeds(), **ps_seeds()})
    write(os.path.join(outdir, os.pardir, "regressions"), "switch", switch_regressions())
    write(outdir, "sched", sched_seeds())


if __name__ == "__main__":
    main()

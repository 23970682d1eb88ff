#!/usr/bin/env python3
"""Model of the synchronisation protocol of the persistent-grid warp-specialised Hopper backward
kernel (csrc/cuda/bwd_kernel_sm90_ws.cuh after bench/patches/bwd-persistent.patch).

One thread block: the producer thread (tid 0), the dQ writer thread (tid 32) and the consumer warps
(2 warpgroups x WPG warps; the kernel has WPG = 4).  Each role's program is precomputed from the
block's tile sequence (every branch of the kernel depends only on the tile sizes, which the roles
read out of the tile slots; the model checks that every slot read returns the expected tile).
Line numbers ("L123") refer to bwd_kernel_sm90_ws.cuh with bwd-persistent.patch applied (thirty-eighth
session; they move with later edits). Usage: python3 bench/patches/bwd-persistent-model.py --runs N --seed S
(random), --exhaustive (1 warp per warpgroup), --mutate NAME (a deliberate bug the checks must catch).

Modes
  random      random interleavings + random async completion order, vector-clock happens-before
              race check, value check (every read sees the data it is meant to see), barrier-phase
              check, named-barrier matching, deadlock detection.
  exhaustive  all interleavings (state hashing) of small configurations (deadlock, phase check,
              named-barrier matching).  No race check there: once every wait is shown to observe
              its intended phase, the happens-before relation is the same in every execution, so
              the race check of one random run is already complete for that configuration.

Async agents
  tma   : a fill (Q, dO, lse2, dsum of one stage) or the K/V load: writes its regions from issue
          until completion, then completes its transaction on the barrier (expect_tx).
  bulk  : the dQ writer's bulk reduce-add: reads its source from issue to completion; the writer's
          bulk_wait_group<0, true> waits for it.
  wg    : one wgmma commit group of a warpgroup (warpgroup-collective: starts reading when the first
          warp issues, can complete only after all WPG warps issued it, completes as one unit);
          wgmma_wait<N> in each warp waits for all but its N most recent groups.
"""
import argparse
import itertools
import random
import sys
import time

END = "END"
MUT = set()  # deliberate protocol bugs (--mutate), to show that the checks catch them


# --------------------------------------------------------------------------------------------
# configuration
# --------------------------------------------------------------------------------------------
class Cfg:
    def __init__(self, split, W, S, walk="plain", staged=False, dynamic=True, totals=(1,), wpg=4):
        assert split in ("key", "row")
        self.split, self.W, self.S, self.walk = split, W, S, walk
        self.staged = staged and split == "key"  # the row split has no staged epilogue
        self.dynamic = dynamic
        self.totals = list(totals) if dynamic else list(totals[:1])
        self.wpg = wpg
        self.nw = 2 * wpg
        self.row = split == "row"
        self.turn = split == "key" and W == 64  # kTurnDq
        if self.row:
            assert S == 2 and walk == "plain"

    def __repr__(self):
        return (f"{self.split}/W{self.W}/S{self.S}/{self.walk}{'/staged' if self.staged else ''}"
                f"/{'dyn' if self.dynamic else 'ctas0'}/wpg{self.wpg}/tiles{self.totals}")


def rows_of(wq, wpg):
    """16-row (key split: 16-key) groups of warp wq within its warpgroup (4 groups per warpgroup)."""
    return [r for r in range(4) if r * wpg // 4 == wq]


# --------------------------------------------------------------------------------------------
# regions (cells of shared memory)
# --------------------------------------------------------------------------------------------
def K_all():
    return [("K", r) for r in range(8)] + [("V", r) for r in range(8)]


def Q_cells(st, tens, hs=(0, 1), rs=range(4)):
    return [(tens, st, h, r) for h in hs for r in rs]


def stage_all(st):
    return Q_cells(st, "Q") + Q_cells(st, "dO")


# --------------------------------------------------------------------------------------------
# programs: lists of ops
#   ('wait', bar, parity, intended_phase, line)
#   ('arrive', bar, line)
#   ('arrive_tx', bar, writes[(region, value)], line)      -> spawns a tma agent
#   ('read', [(region, expected)], line)                     generic (instant)
#   ('write', [(region, value)], line)                       generic (instant)
#   ('nbar', label, line)                                    named barrier 1, all consumer warps
#   ('wg', [(region, expected)], line)                       issue + commit one wgmma group
#   ('wgwait', N, line)
#   ('bulk', [(region, expected)], line)                     writer: bulk read (async)
#   ('bulkwait', line)
# --------------------------------------------------------------------------------------------
def prog_producer(c):
    ops = []
    S, n = c.S, len(c.totals)
    gi = 0

    def fill(g):
        st = g % S
        if g >= S:
            ops.append(("wait", ("qe", st), ((g // S) - 1) & 1, g // S - 1, "L118 fill waits Q/dO empty"))
        val = ("q", g)
        w = [(x, val) for x in stage_all(st)] + [(("L", st), val), (("D", st), val)]
        ops.append(("arrive_tx", ("qf", st), w, f"L121 fill {g} -> stage {st}"))

    for k in itertools.count():
        done = (k >= n) or (k > 0 and not c.dynamic)
        if c.dynamic:
            sl = k & 1
            if k >= 2:
                ops.append(("wait", ("te", sl), ((k >> 1) - 1) & 1, (k >> 1) - 1, "L306 publish waits tile slot empty"))
            ops.append(("write", [(("T", sl), END if done else k)], f"L307 publish tile {k if not done else -1}"))
            ops.append(("arrive", ("tf", sl), "L308"))
        if done:
            break
        total = c.totals[k]
        kve_wait = 1 + ((k - 1) & 1) if k > 0 else 0
        end, g = gi + total, gi
        if kve_wait != 0:
            kahead = S - 1 if c.row else S
            if "ahead+1" in MUT:
                kahead += 1
            while g < min(end, gi + kahead):
                fill(g)
                g += 1
            par = kve_wait - 1 if "kve-parity" not in MUT else k & 1
            if "no-kve-wait" not in MUT:
                ops.append(("wait", "kve", par, k - 1, "L143 K/V load waits K/V empty"))
        ops.append(("arrive_tx", "kv", [(x, ("kv", k)) for x in K_all()], f"L145 K/V load tile {k}"))
        while g < end:
            fill(g)
            g += 1
        gi += total
    return ops


def take_ops(c, k, reader):
    ops = []
    n = len(c.totals)
    if not c.dynamic:
        return ops, (k if k == 0 else END)
    sl = k & 1
    exp = k if k < n else END
    ops.append(("wait", ("tf", sl), (k >> 1) & 1, k >> 1, "L269 take waits tile slot full"))
    ops.append(("read", [(("T", sl), exp)], "L270 take reads slot"))
    ops.append(("arrive", ("te", sl), "L272 take hands slot back"))
    return ops, exp


def prog_writer(c):
    ops = []
    gi = 0
    for k in itertools.count():
        t, v = take_ops(c, k, "writer")
        ops += t
        if v == END:
            break
        total = c.totals[k]
        for it in range(total):
            g = gi + it
            d = g & 1
            ops.append(("wait", ("dqf", d), (g >> 1) & 1, g >> 1, f"L171 writer waits dQ full (block {g})"))
            if c.row:
                st = g & 1
                ops.append(("bulk", [(x, ("dq", g)) for x in stage_all(st)], f"L344 writer reads stage {st} (block {g})"))
            else:
                ops.append(("bulk", [(("Dq", d, j), ("dq", g)) for j in range(8)], f"L352 writer reads dQ buffer {d} (block {g})"))
            ops.append(("bulkwait", "L190 bulk_wait_group<0,true>"))
            if c.row:
                ops.append(("arrive", ("qe", g & 1), "L347 writer releases stage"))
            else:
                ops.append(("arrive", ("dqe", d), "L353 writer releases dQ buffer"))
        gi += total
    return ops


def prog_consumer_key(c, cw, wq):
    ops = []
    S = c.S
    my_keys = [cw * 4 + r for r in rows_of(wq, c.wpg)]
    gi = 0

    def finish(g, k, st, db):
        ops.append(("nbar", ("blk", g), "L550 named barrier 1 (block)"))
        ds_all = [(("dS", db, j), ("ds", g)) for j in range(8)]
        kv = [(x, ("kv", k)) for x in K_all()]
        d = g & 1
        if c.turn:
            if cw == ((g - gi) & 1 if "turn-local" in MUT else g & 1):
                ops.append(("wg", ds_all + kv, f"L560 dQ product (block {g}, buffer {db})"))
                ops.append(("wgwait", 2 if "early-release" in MUT else 1, "L561"))
                ops.append(("arrive", ("qe", st), "L562 release stage"))
                ops.append(("wgwait", 0, "L563"))
                if g >= 2:
                    ops.append(("wait", ("dqe", d), ((g >> 1) - 1) & 1, (g >> 1) - 1, "L568 waits dQ buffer empty"))
                cells = [j for r in rows_of(wq, c.wpg) for j in (2 * r, 2 * r + 1)]
                ops.append(("write", [(("Dq", d, j), ("dq", g)) for j in cells], f"L572 dQ image (block {g})"))
                ops.append(("arrive", ("dqf", d), "L574"))
            else:
                ops.append(("wgwait", 0, "L576"))
                ops.append(("arrive", ("qe", st), "L577 release stage"))
            return
        ops.append(("wg", ds_all + kv, f"L582 dQ product (block {g}, buffer {db})"))
        ops.append(("wgwait", 0, "L583"))
        ops.append(("arrive", ("qe", st), "L585 release stage"))
        if g >= 2 and "no-dqe-wait" not in MUT:
            ops.append(("wait", ("dqe", d), ((g >> 1) - 1) & 1, (g >> 1) - 1, "L496 store_dq waits dQ buffer empty"))
        cells = [2 * r + cw for r in rows_of(wq, c.wpg)]
        ops.append(("write", [(("Dq", d, j), ("dq", g)) for j in cells], f"L497 dQ share (block {g})"))
        ops.append(("arrive", ("dqf", d), "L499"))

    for k, total, kv in consumer_tiles(c, ops, "L662"):
        for it in range(total):
            g = gi + it
            st, db = g % S, g & 1
            if "ds-local" in MUT:
                db = it & 1
            if "key-one-ds" in MUT:
                db = 0
            q = [(x, ("q", g)) for x in stage_all(st)]
            ops.append(("wait", ("qf", st), (g // S) & 1, g // S, f"L597/629 waits Q/dO full (block {g})"))
            myds = [(("dS", db, j), ("ds", g)) for j in my_keys]
            if c.walk == "plain":
                ops.append(("wg", kv + q, f"L599 S^T, dP^T (block {g})"))
                ops.append(("wgwait", 0, "L600"))
                ops.append(("read", [(("L", st), ("q", g)), (("D", st), ("q", g))], "L603 pds reads lse2/dsum"))
                ops.append(("write", myds, f"L609 dS^T store (block {g}, buffer {db})"))
                ops.append(("wg", q, f"L612-613 dV, dK (block {g})"))
            else:
                ops.append(("wg", kv + [x for x in q if x[0][0] == "Q"], f"L632 S^T (block {g})"))
                ops.append(("wg", kv + [x for x in q if x[0][0] == "dO"], f"L632 dP^T (block {g})"))
                ops.append(("wgwait", 1, "L633"))
                ops.append(("read", [(("L", st), ("q", g))], "L635 P reads lse2"))
                ops.append(("wg", [x for x in q if x[0][0] == "dO"], f"L638 dV (block {g})"))
                ops.append(("wgwait", 1, "L640"))
                ops.append(("read", [(("D", st), ("q", g))], "L642 dS reads dsum"))
                ops.append(("write", myds, f"L644 dS^T store (block {g}, buffer {db})"))
                ops.append(("wg", [x for x in q if x[0][0] == "Q"], f"L647 dK (block {g})"))
            finish(g, k, st, db)
        gi += total
        if c.staged:
            mine = [("K", r) for r in my_keys] + [("V", r) for r in my_keys]
            if "kve-before-staging" in MUT and c.dynamic:
                ops.append(("arrive", "kve", "L683' K/V empty (moved up)"))
            ops.append(("wgwait", 0, "L675"))
            if "no-epi-bar" not in MUT:
                ops.append(("nbar", ("epi", k), "L676 named barrier 1 (staged epilogue)"))
            ops.append(("write", [(x, ("img", k)) for x in mine], f"L679 staged dK/dV image into K/V (tile {k})"))
            ops.append(("read", [(x, ("img", k)) for x in mine], "L679 staged image read back"))
            if c.dynamic and "kve-before-staging" not in MUT:
                ops.append(("arrive", "kve", "L683 K/V empty"))
        else:
            if c.dynamic:
                ops.append(("arrive", "kve", "L685 K/V empty"))
    return ops


def consumer_tiles(c, ops, line):
    """A consumer warp's tiles: per tile k its take and K / V full wait (into ops), then (k, blocks,
    the K / V cells as tile k's); ends at the -1 tile."""
    for k in itertools.count():
        t, v = take_ops(c, k, "warp")
        ops += t
        if v == END:
            return
        ops.append(("wait", "kv", k & 1, k, f"{line} waits K/V full"))
        yield k, c.totals[k], [(x, ("kv", k)) for x in K_all()]


def prog_consumer_row(c, cw, wq):
    ops = []
    mine = rows_of(wq, c.wpg)
    gi = 0
    for k, total, kv in consumer_tiles(c, ops, "L413"):
        for it in range(total):
            g = gi + it
            st = g & 1
            db = st
            if "row-one-ds" in MUT:
                db = 0
            qv = ("q", g)
            ops.append(("wait", ("qf", st), (g >> 1) & 1, g >> 1, f"L418 waits Q/dO full (block {g})"))
            rows_cw = (2 * cw, 2 * cw + 1)
            sdp = kv + [(x, qv) for x in Q_cells(st, "Q", rs=rows_cw) + Q_cells(st, "dO", rs=rows_cw)]
            ops.append(("wg", sdp, f"L423-426 S^T, dP^T (block {g})"))
            ops.append(("wgwait", 0, "L428"))
            ops.append(("read", [(("L", st), qv), (("D", st), qv)], "L431 pds reads lse2/dsum"))
            myp = [(("P", db, cw * 4 + r), ("ds", g)) for r in mine] + [(("dS", db, cw * 4 + r), ("ds", g)) for r in mine]
            ops.append(("write", myp, f"L431 P^T, dS^T store (block {g}, buffer {db})"))
            ops.append(("nbar", ("blk", g), "L434 named barrier 1 (block)"))
            pds_all = [(("P", db, j), ("ds", g)) for j in range(8)] + [(("dS", db, j), ("ds", g)) for j in range(8)]
            dvdk = pds_all + [(x, qv) for x in Q_cells(st, "Q", hs=(cw,)) + Q_cells(st, "dO", hs=(cw,))]
            ops.append(("wg", dvdk, f"L438-441 dV, dK (block {g})"))
            for ch in range(2):
                ops.append(("wg", [(("dS", db, j), ("ds", g)) for j in range(8)] + kv, f"L452 dQ chunk {ch} (block {g})"))
                ops.append(("wgwait", 0, "L456"))
                tens = "dO" if ch else "Q"
                ops.append(("write", [((tens, st, cw, r), ("dq", g)) for r in mine], f"L459 dQ chunk {ch} into stage {st} (block {g})"))
            ops.append(("arrive", ("dqf", st), "L466 dQ full"))
        gi += total
        if c.dynamic:
            ops.append(("arrive", "kve", "L468 K/V empty"))
    return ops


def build(c):
    progs = {"P": prog_producer(c), "Wr": prog_writer(c)}
    for cw in range(2):
        for wq in range(c.wpg):
            f = prog_consumer_row if c.row else prog_consumer_key
            progs[f"C{cw}{wq}"] = f(c, cw, wq)
    return progs


def bar_counts(c):
    b = {"kv": 1, "kve": c.nw}
    for s in range(c.S):
        b[("qf", s)] = 1
        b[("qe", s)] = 1 if c.row else c.nw
    for d in range(2):
        b[("dqf", d)] = c.wpg if c.turn else c.nw
        b[("dqe", d)] = 1
        b[("tf", d)] = 1
        b[("te", d)] = c.nw + (0 if "te-count-8" in MUT else 1)
    return b


# --------------------------------------------------------------------------------------------
# vector clocks
# --------------------------------------------------------------------------------------------
def vjoin(a, b):
    if not b:
        return a
    r = dict(a)
    for k, v in b.items():
        if r.get(k, 0) < v:
            r[k] = v
    return r


def vmeet(vs):
    keys = set(vs[0])
    for v in vs[1:]:
        keys &= set(v)
    return {k: min(v[k] for v in vs) for k in keys}


class Violation(Exception):
    pass


# --------------------------------------------------------------------------------------------
# engine
# --------------------------------------------------------------------------------------------
class Engine:
    def __init__(self, c, hb=True, progs=None):
        self.c = c
        self.hb = hb
        self.progs = progs or build(c)
        self.roles = list(self.progs)
        self.pc = {r: 0 for r in self.roles}
        self.counts = bar_counts(c)
        self.bars = {b: [n, 0, 0] for b, n in self.counts.items()}  # pending arrivals, pending tx, completed phases
        self.nb_gen = 0
        self.nb_arr = []  # (role, label) arrivals of the current generation
        self.in_nb = {}  # role -> generation it waits to leave
        self.pending = {}  # agent id -> agent (not completed)
        self.agent_info = {}  # agent id -> static info
        self.wg_commits = {}  # (cw, n) -> number of warps that committed
        self.wg_ncommit = {r: 0 for r in self.roles}
        self.trace = []
        self.steps = 0
        if hb:
            self.vc = {r: {r: 0} for r in self.roles}
            self.bar_cur = {b: {} for b in self.bars}
            self.bar_done = {b: {} for b in self.bars}
            self.nb_vcs = []
            self.nb_release_vc = {}
            self.agent_vc = {}
            self.wg_commit_vcs = {}
            self.val = {}
            self.openacc = {}  # region -> list of (tid, kind, label)
            self.hist = {}  # region -> [last write record, [reads since]]
            self.bulk_out = []

    # ---- helpers -----------------------------------------------------------------------------
    def role_cw(self, r):
        return int(r[1])

    def violation(self, kind, msg):
        tail = "\n".join(f"    {t}" for t in self.trace[-40:])
        raise Violation(f"{kind}: {msg}\n  config {self.c}\n  last events:\n{tail}")

    def tick(self, tid):
        if self.hb:
            self.vc[tid][tid] = self.vc[tid].get(tid, 0) + 1

    # ---- memory accesses ---------------------------------------------------------------------
    def acc_start(self, tid, kind, items, label):
        """Opens accesses (tid is a role or an agent); returns records."""
        recs = []
        for reg, v in items:
            for (otid, okind, olabel) in self.openacc.get(reg, []):
                if otid != tid and (okind == "W" or kind == "W"):
                    self.violation("RACE (overlap)", f"{label} [{tid}] {kind} {reg} while {olabel} [{otid}] {okind} is in flight")
            if kind == "R":
                got = self.val.get(reg)
                if got != v:
                    self.violation("STALE/WRONG DATA", f"{label} [{tid}] reads {reg} = {got}, expected {v}")
            self.openacc.setdefault(reg, []).append((tid, kind, label))
        return recs

    def acc_end(self, tid, kind, items, label, start_vc, end_own):
        for reg, v in items:
            lst = self.openacc[reg]
            for i, e in enumerate(lst):
                if e[0] == tid and e[1] == kind and e[2] == label:
                    del lst[i]
                    break
            if kind == "R":
                got = self.val.get(reg)
                if got != v:
                    self.violation("STALE/WRONG DATA", f"{label} [{tid}] read of {reg} ended seeing {got}, expected {v}")
            else:
                self.val[reg] = v
            rec = (tid, kind, label, start_vc, end_own)
            h = self.hist.setdefault(reg, [None, []])
            others = ([h[0]] if h[0] else []) + (h[1] if kind == "W" else [])
            for o in others:
                otid, okind, olabel, ostart, oend = o
                if otid == tid:
                    continue
                if start_vc.get(otid, 0) >= oend or ostart.get(tid, 0) >= end_own:
                    continue
                self.violation("RACE (unordered)", f"{label} [{tid}] {kind} {reg} is not ordered with {olabel} [{otid}] {okind}")
            if kind == "W":
                self.hist[reg] = [rec, []]
            else:
                h[1].append(rec)

    def generic(self, role, kind, items, label):
        if not self.hb:
            return
        self.acc_start(role, kind, items, label)
        vc = self.vc[role]
        self.acc_end(role, kind, items, label, dict(vc), vc[role])

    # ---- barriers ----------------------------------------------------------------------------
    def bar_complete_check(self, b):
        st = self.bars[b]
        if st[0] == 0 and st[1] == 0:
            st[2] += 1
            st[0] = self.counts[b]
            if self.hb:
                self.bar_done[b] = vjoin(self.bar_done[b], self.bar_cur[b])
                self.bar_cur[b] = {}
            self.trace.append(f"{'':6} barrier {b} completes phase {st[2] - 1}")

    def arrive(self, b, vc, tx=0):
        st = self.bars[b]
        st[1] += tx
        st[0] -= 1
        assert st[0] >= 0
        if self.hb:
            self.bar_cur[b] = vjoin(self.bar_cur[b], vc)
        self.bar_complete_check(b)

    # ---- enabling ----------------------------------------------------------------------------
    def wg_done(self, aid):
        return aid in self.agent_info and aid not in self.pending

    def role_enabled(self, r):
        pc = self.pc[r]
        ops = self.progs[r]
        if pc >= len(ops):
            return False
        op = ops[pc]
        t = op[0]
        if t == "wait":
            b, par, intended = op[1], op[2], op[3]
            ph = self.bars[b][2]
            if ph >= intended + 2:
                self.violation("PHASE OVERRUN", f"[{r}] {op[4]}: waits phase {intended} of {b} (parity {par}) but the barrier has completed {ph} phases (two ahead)")
            return (ph & 1) != par
        if t == "nbar":
            if r in self.in_nb:
                return self.nb_gen > self.in_nb[r]
            return True
        if t == "wgwait":
            n = self.wg_ncommit[r] - op[1]
            cw = self.role_cw(r)
            return all(self.wg_done((cw, m)) for m in range(n))
        if t == "bulkwait":
            return not any(a[0] == "bulk" for a in self.pending.values())
        return True

    def agent_enabled(self, aid):
        a = self.pending[aid]
        if a[0] == "wg":
            return self.wg_commits[aid] == self.c.wpg
        return True

    def enabled_events(self):
        ev = [("role", r) for r in self.roles if self.role_enabled(r)]
        ev += [("agent", a) for a in self.pending if self.agent_enabled(a)]
        return ev

    def finished(self):
        return all(self.pc[r] >= len(self.progs[r]) for r in self.roles) and not self.pending

    # ---- execution ---------------------------------------------------------------------------
    def exec_role(self, r):
        op = self.progs[r][self.pc[r]]
        t = op[0]
        hb = self.hb
        self.tick(r)
        self.steps += 1
        if t == "wait":
            b, par, intended, line = op[1:]
            ph = self.bars[b][2]
            if ph - 1 != intended:
                self.violation("WRONG PHASE", f"[{r}] {line}: wait(parity {par}) on {b} returned with {ph} phases complete; it was meant for phase {intended}")
            if hb:
                self.vc[r] = vjoin(self.vc[r], self.bar_done[b])
            self.trace.append(f"{r:6} {line}: wait {b} par {par} ok (phase {intended})")
        elif t == "arrive":
            self.trace.append(f"{r:6} {op[2]}: arrive {op[1]}")
            self.arrive(op[1], self.vc[r] if hb else None)
        elif t == "arrive_tx":
            b, writes, line = op[1:]
            aid = ("tma", r, self.pc[r])
            self.agent_info[aid] = ("tma", b, writes, line)
            self.pending[aid] = self.agent_info[aid]
            self.trace.append(f"{r:6} {line}: arrive.expect_tx {b}, copy issued")
            if hb:
                avc = dict(self.vc[r])
                avc[aid] = 1
                self.agent_vc[aid] = avc
                self.acc_start(aid, "W", writes, line)
            self.arrive(b, self.vc[r] if hb else None, tx=1)
        elif t == "read" or t == "write":
            self.trace.append(f"{r:6} {op[2]}: {t}")
            self.generic(r, "R" if t == "read" else "W", op[1], op[2])
        elif t == "nbar":
            label, line = op[1], op[2]
            if r in self.in_nb:
                del self.in_nb[r]
                if hb:
                    self.vc[r] = vjoin(self.vc[r], self.nb_release_vc[self.nb_gen - 1])
                self.trace.append(f"{r:6} {line}: leaves named barrier {label}")
            else:
                self.nb_arr.append((r, label))
                self.in_nb[r] = self.nb_gen
                if hb:
                    self.nb_vcs.append(dict(self.vc[r]))
                self.trace.append(f"{r:6} {line}: arrives at named barrier {label}")
                if len(self.nb_arr) == self.c.nw:
                    labels = {l for _, l in self.nb_arr}
                    if len(labels) != 1:
                        self.violation("NAMED BARRIER MISMATCH", f"generation {self.nb_gen} joins {self.nb_arr}")
                    if hb:
                        j = {}
                        for v in self.nb_vcs:
                            j = vjoin(j, v)
                        self.nb_release_vc[self.nb_gen] = j
                        self.nb_vcs = []
                    self.nb_arr = []
                    self.nb_gen += 1
                return  # pc stays; the role leaves in a later step
        elif t == "wg":
            reads, line = op[1], op[2]
            cw = self.role_cw(r)
            n = self.wg_ncommit[r]
            self.wg_ncommit[r] += 1
            aid = (cw, n)
            if aid not in self.agent_info:
                self.agent_info[aid] = ("wg", reads, line)
                self.pending[aid] = self.agent_info[aid]
                self.wg_commits[aid] = 0
                if hb:
                    self.wg_commit_vcs[aid] = []
                    self.acc_start(aid, "R", reads, line)
            elif self.agent_info[aid][1] != reads:
                self.violation("WGMMA MISMATCH", f"[{r}] group {aid}: {line} vs {self.agent_info[aid][2]}")
            self.wg_commits[aid] += 1
            if hb:
                self.wg_commit_vcs[aid].append(dict(self.vc[r]))
            self.trace.append(f"{r:6} {line}: wgmma group {n} issued")
        elif t == "wgwait":
            if hb:
                cw = self.role_cw(r)
                for m in range(self.wg_ncommit[r] - op[1]):
                    self.vc[r] = vjoin(self.vc[r], self.agent_vc[(cw, m)])
            self.trace.append(f"{r:6} {op[2]}: wgmma_wait<{op[1]}> ok")
        elif t == "bulk":
            reads, line = op[1], op[2]
            aid = ("bulk", r, self.pc[r])
            self.agent_info[aid] = ("bulk", reads, line)
            self.pending[aid] = self.agent_info[aid]
            if hb:
                avc = dict(self.vc[r])
                avc[aid] = 1
                self.agent_vc[aid] = avc
                self.acc_start(aid, "R", reads, line)
                self.bulk_out.append(aid)
            self.trace.append(f"{r:6} {line}: bulk read issued")
        elif t == "bulkwait":
            if hb:
                for aid in self.bulk_out:
                    self.vc[r] = vjoin(self.vc[r], self.agent_vc[aid])
                self.bulk_out = []
            self.trace.append(f"{r:6} {op[1]}: ok")
        else:
            raise AssertionError(op)
        self.pc[r] += 1

    def exec_agent(self, aid):
        a = self.pending.pop(aid)
        self.steps += 1
        hb = self.hb
        if a[0] == "tma":
            _, b, writes, line = a
            self.trace.append(f"{'async':6} {line}: copy lands")
            if hb:
                avc = self.agent_vc[aid]
                avc[aid] = 2
                self.acc_end(aid, "W", writes, line, {**avc, aid: 1}, 2)
            # complete_tx
            st = self.bars[b]
            st[1] -= 1
            if hb:
                self.bar_cur[b] = vjoin(self.bar_cur[b], self.agent_vc[aid])
            self.bar_complete_check(b)
        elif a[0] == "bulk":
            _, reads, line = a
            self.trace.append(f"{'async':6} {line}: bulk read done")
            if hb:
                avc = self.agent_vc[aid]
                avc[aid] = 2
                self.acc_end(aid, "R", reads, line, {**avc, aid: 1}, 2)
        else:
            _, reads, line = a
            self.trace.append(f"{'async':6} {line}: wgmma group {aid} complete")
            if hb:
                vs = self.wg_commit_vcs[aid]
                start = vmeet(vs)
                start[aid] = 1
                end = {}
                for v in vs:
                    end = vjoin(end, v)
                end[aid] = 2
                self.agent_vc[aid] = end
                self.acc_end(aid, "R", reads, line, start, 2)

    def exec_event(self, ev):
        if ev[0] == "role":
            r = ev[1]
            self.exec_role(r)
            if not self.hb:
                # exhaustive mode: generic reads / writes change no synchronisation state, so the
                # role's following ones run at once (no interleaving of them is lost)
                ops = self.progs[r]
                while self.pc[r] < len(ops) and ops[self.pc[r]][0] in ("read", "write"):
                    self.pc[r] += 1
        else:
            self.exec_agent(ev[1])

    def deadlock_report(self):
        lines = []
        for r in self.roles:
            pc = self.pc[r]
            ops = self.progs[r]
            lines.append(f"    {r:6} pc {pc}/{len(ops)}: {ops[pc][0:1] + ops[pc][1:2] + (ops[pc][-1],) if pc < len(ops) else 'done'}")
        lines.append("    barriers (pending arrivals, pending tx, phases): " + ", ".join(f"{b}={v}" for b, v in self.bars.items()))
        lines.append(f"    pending async: {list(self.pending)}")
        return "\n".join(lines)

    # ---- state (exhaustive mode) ----------------------------------------------------------------
    def key(self):
        return (tuple(self.pc[r] for r in self.roles),
                tuple(tuple(v) for v in self.bars.values()),
                self.nb_gen, tuple(sorted(self.nb_arr)), tuple(sorted(self.in_nb.items())),
                frozenset(self.pending),
                tuple(sorted(self.wg_commits.items())))

    def snapshot(self):
        return (dict(self.pc), {b: list(v) for b, v in self.bars.items()}, self.nb_gen, list(self.nb_arr),
                dict(self.in_nb), dict(self.pending), dict(self.agent_info), dict(self.wg_commits),
                dict(self.wg_ncommit), len(self.trace))

    def restore(self, s):
        (pc, bars, self.nb_gen, nb_arr, in_nb, pending, info, wgc, wgn, tl) = s
        self.pc = dict(pc)
        self.bars = {b: list(v) for b, v in bars.items()}
        self.nb_arr = list(nb_arr)
        self.in_nb = dict(in_nb)
        self.pending = dict(pending)
        self.agent_info = dict(info)
        self.wg_commits = dict(wgc)
        self.wg_ncommit = dict(wgn)
        del self.trace[tl:]


# --------------------------------------------------------------------------------------------
# drivers
# --------------------------------------------------------------------------------------------
def run_random(c, rng, progs=None):
    e = Engine(c, hb=True, progs=progs)
    # per-run speeds, redrawn now and then: some roles (the producer, the writer, one warp, a
    # whole warpgroup) much slower than the rest; async completions early or late
    def draw():
        w = {r: 10 ** rng.uniform(-2.5, 0) for r in e.roles}
        x = rng.random()
        slow = []
        if x < 0.15:
            slow = ["P"]
        elif x < 0.35:
            slow = ["Wr"]
        elif x < 0.5:
            slow = [rng.choice(e.roles[2:])]
        elif x < 0.65:
            cw = rng.randrange(2)
            slow = [r for r in e.roles if r[0] == "C" and int(r[1]) == cw]
        for r in slow:
            w[r] = 10 ** rng.uniform(-5, -3)
        return w, 10 ** rng.uniform(-4, 1)
    w, w_async = draw()
    redraw = rng.random() < 0.5
    lifo = rng.random() < 0.3  # complete the newest async op first
    while True:
        if redraw and rng.random() < 0.005:
            w, w_async = draw()
        ev = e.enabled_events()
        if not ev:
            if e.finished():
                return e.steps
            e.violation("DEADLOCK", "no role can progress\n" + e.deadlock_report())
        if lifo and rng.random() < 0.5:
            ag = [x for x in ev if x[0] == "agent"]
            if ag and rng.random() < w_async / (1 + w_async):
                e.exec_event(ag[-1])
                continue
        weights = [w[x[1]] if x[0] == "role" else w_async for x in ev]
        e.exec_event(rng.choices(ev, weights)[0])


def run_exhaustive(c, limit=3_000_000):
    e = Engine(c, hb=False)
    seen = set()
    n_states = 0
    finals = 0
    # DFS over events; each stack entry: the state and the event to apply (None: expand)
    seen.add(e.key())
    todo = [e.snapshot()]
    while todo:
        s = todo.pop()
        e.restore(s)
        ev = e.enabled_events()
        n_states += 1
        if n_states > limit:
            return n_states, finals, False
        if not ev:
            if e.finished():
                finals += 1
                continue
            e.violation("DEADLOCK", "no role can progress\n" + e.deadlock_report())
        for x in ev:
            e.restore(s)
            e.exec_event(x)
            k = e.key()
            if k not in seen:
                seen.add(k)
                todo.append(e.snapshot())
    return n_states, finals, True


def configs_matrix():
    """(split, W, S, walk) in the kernel (plus the S the kernel does not use, for the key split)."""
    out = []
    for S in (2, 3):
        out.append(("key", 64, S, "plain"))   # kTurnDq (real: S 3)
        out.append(("key", 128, S, "plain"))  # real: S 2
        out.append(("key", 128, S, "overlap"))
    out.append(("row", 256, 2, "plain"))
    return out


def rand_totals(rng):
    n = rng.randint(1, 6)
    pool = [0, 0, 1, 1, 2, 2, 3, 4, 5, 7, 9, 12]
    return [rng.choice(pool) for _ in range(n)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--exhaustive", action="store_true")
    ap.add_argument("--wpg", type=int, default=None, help="warps per warpgroup (kernel: 4; default 4 random, 1 exhaustive)")
    ap.add_argument("--limit", type=int, default=3_000_000)
    ap.add_argument("--mutate", default="")
    args = ap.parse_args()
    rng = random.Random(args.seed)
    MUT.update(x for x in args.mutate.split(",") if x)
    if args.wpg is None:
        args.wpg = 1 if args.exhaustive else 4
    t0 = time.time()
    if args.exhaustive:
        seqs = [[0], [1], [3], [0, 1], [1, 0], [1, 1], [2, 1], [1, 2], [0, 0, 1], [1, 0, 2], [1, 1, 1], [3, 1],
                [0, 2, 0], [2, 2]]
        total_states = 0
        for split, W, S, walk in configs_matrix():
            for staged in ((False, True) if split == "key" else (False,)):
                for dyn in (True, False):
                    for tot in (seqs if dyn else [[0], [1], [2], [5]]):
                        c = Cfg(split, W, S, walk, staged, dyn, tot, wpg=args.wpg)
                        try:
                            n, f, complete = run_exhaustive(c, args.limit)
                        except Violation as v:
                            print("VIOLATION\n" + str(v))
                            sys.exit(1)
                        total_states += n
                        print(f"exhaustive {c}: {n} states, {f} final, {'complete' if complete else 'TRUNCATED'}", flush=True)
        print(f"exhaustive: {total_states} states in all, {time.time() - t0:.0f}s, no violation")
        return
    counts = {}
    steps = 0
    for i in range(args.runs):
        split, W, S, walk = rng.choice(configs_matrix())
        staged = split == "key" and rng.random() < 0.5
        dyn = rng.random() < 0.85
        c = Cfg(split, W, S, walk, staged, dyn, rand_totals(rng), wpg=args.wpg)
        try:
            steps += run_random(c, rng)
        except Violation as v:
            print(f"VIOLATION in run {i} (seed {args.seed})\n" + str(v))
            sys.exit(1)
        key = f"{split}/W{W}/S{S}/{walk}{'/staged' if staged else ''}/{'dyn' if dyn else 'ctas0'}"
        counts[key] = counts.get(key, 0) + 1
    print(f"random: {args.runs} schedules (wpg {args.wpg}), {steps} events, {time.time() - t0:.0f}s, no violation")
    for k in sorted(counts):
        print(f"  {k}: {counts[k]}")


if __name__ == "__main__":
    main()

"""The backward kernel's block algorithm, run in NumPy on the emitted index math: each output
tile (KV head, KV block) walks the K tiles its C expressions give (query head ``qhead(u)``,
query block ``qblock(u)``, ``KT``), reads Q, dO, LSE, delta, K and V as its tensor maps do
(every head's rows back to back, zeros past the end: a tail block reads the next head's rows),
masks only where ``masked(u)`` says, adds each consumer's dQ partial into the padded
accumulator and stores dK, dV rows below Sk; against the dense backward.  What the GPU alone
can check (the wgmma layouts, the swizzle, the sync) is the check script's
(benchmarks/attention_bwd_main_check.py); this holds the trip rule's C, the masks' reach, the
GQA loop and the scale folding to the math without one."""
from __future__ import annotations

import pytest

np = pytest.importorskip("numpy")

from pipeline_core_schedules_attention.bwd_call import DQ_ROWS  # noqa: E402
from pipeline_core_schedules_attention.bwd_tiles import BackwardTrips  # noqa: E402
from pipeline_core_schedules_attention.emit_attention_bwd import tile_exprs  # noqa: E402

BM, BN, KEYS = 64, 128, 64


def _expr(lines, name):
    line = next(x for x in lines if f"const int {name} = " in x)
    return line.split("__shfl_sync(0xffffffffu, ", 1)[1].rsplit(", 0);", 1)[0].replace("/", "//")


def dense(q, k, v, do, scale, causal, align):
    """The backward of softmax(q k^T scale) v (rows with no key: 0), LSE (+inf there), delta."""
    b, hq, sq, d = q.shape
    g = hq // k.shape[1]
    ke, ve = np.repeat(k, g, axis=1), np.repeat(v, g, axis=1)
    s = q @ ke.transpose(0, 1, 3, 2) * scale
    if causal:
        off = k.shape[2] - sq if align == "bottom_right" else 0
        keep = np.arange(k.shape[2])[None, :] <= np.arange(sq)[:, None] + off
        s = np.where(keep, s, -np.inf)
    mx = s.max(-1, keepdims=True)
    safe = np.where(np.isfinite(mx), mx, 0.0)
    e = np.exp(s - safe)
    tot = e.sum(-1, keepdims=True)
    p = np.where(tot > 0, e / np.where(tot > 0, tot, 1), 0.0)
    lse = np.where(tot[..., 0] > 0, np.log(np.where(tot[..., 0] > 0, tot[..., 0], 1)) + safe[..., 0],
                   np.inf)
    o = p @ ve
    dv = p.transpose(0, 1, 3, 2) @ do
    dp = do @ ve.transpose(0, 1, 3, 2)
    delta = (do * o).sum(-1)
    ds = p * (dp - delta[..., None])
    dq = ds @ ke * scale
    dk = ds.transpose(0, 1, 3, 2) @ q * scale
    fold = lambda x: x.reshape(b, k.shape[1], g, *x.shape[2:]).sum(2)  # noqa: E731
    return lse, delta, dq, fold(dk), fold(dv)


def blocks(q, k, v, do, lse, delta, scale, rule):
    """The kernel's algorithm on flattened rows, from the emitted C of the tile lines."""
    b, hq, sq, d = q.shape
    hkv, sk = k.shape[1], k.shape[2]
    group = hq // hkv
    pad = np.zeros((BN, d))
    qf, dof = (np.concatenate([x.reshape(-1, d), pad]) for x in (q, do))
    kf, vf = (np.concatenate([x.reshape(-1, d), pad]) for x in (k, v))
    lf, df = (np.concatenate([x.reshape(-1), np.zeros(BN)]) for x in (lse, delta))
    sqp = -(-sq // DQ_ROWS) * DQ_ROWS
    dq = np.zeros((b * hq, sqp, d))
    dk, dv = np.zeros((b * hkv, sk, d)), np.zeros((b * hkv, sk, d))
    lines = tile_exprs(rule)
    first_c, nmask_c = _expr(lines, "first"), _expr(lines, "nmask")
    mb, nbs = -(-sq // BM), -(-sk // BN)
    off = sk - sq if rule.align == "bottom_right" else 0
    for bhk in range(b * hkv):
        for nb in range(nbs):
            env = {"nb": nb, "Sq": sq, "Sk": sk, "MB": mb, "min": min, "max": max}
            first = eval(first_c, env)  # noqa: S307 - the emitter's own C expression
            env["first"] = first
            nmask = eval(nmask_c, env)  # noqa: S307
            mper = mb - first
            acc_k, acc_v = np.zeros((BN, d)), np.zeros((BN, d))
            kb, vb = kf[bhk * sk + nb * BN:][:BN], vf[bhk * sk + nb * BN:][:BN]
            for u in range(group * mper):
                head, m = bhk * group + u // mper, first + u % mper
                masked = (m < first + nmask or (sq % BM != 0 and m == mb - 1)
                          or (sk % BN != 0 and nb == nbs - 1))
                r0 = head * sq + m * BM
                qb, dob = qf[r0:r0 + BM], dof[r0:r0 + BM]
                st = kb @ qb.T  # S^T: keys x queries
                if masked:
                    rows = m * BM + np.arange(BM)[None, :]
                    keys = nb * BN + np.arange(BN)[:, None]
                    keep = (rows < sq) & (keys < sk) & (~rule.causal | (keys <= rows + off))
                    st = np.where(keep, st, -np.inf)
                p = np.exp(st * scale - lf[r0:r0 + BM][None, :])
                dpt = vb @ dob.T
                ds = p * (dpt - df[r0:r0 + BM][None, :]) * scale
                acc_v += p @ dob
                acc_k += ds @ qb
                for c in range(BN // KEYS):  # each consumer's partial, reduced on its own
                    part = ds[c * KEYS:(c + 1) * KEYS].T @ kb[c * KEYS:(c + 1) * KEYS]
                    dq[head, m * BM:(m + 1) * BM] += part
            n = min(BN, sk - nb * BN)
            dk[bhk, nb * BN:nb * BN + n], dv[bhk, nb * BN:nb * BN + n] = acc_k[:n], acc_v[:n]
    return dq[:, :sq].reshape(b, hq, sq, d), dk.reshape(k.shape), dv.reshape(v.shape)


@pytest.mark.parametrize("b,hq,hkv,sq,sk", [(1, 2, 1, 100, 77), (1, 1, 1, 1, 1),
                                           (2, 2, 2, 17, 300), (1, 4, 2, 200, 130),
                                           (1, 2, 2, 130, 17)])
@pytest.mark.parametrize("causal,align", [(False, "top_left"), (True, "top_left"),
                                          (True, "bottom_right")])
def test_the_kernels_block_algorithm_is_the_backward(b, hq, hkv, sq, sk, causal, align):
    rng = np.random.default_rng(36)
    d, scale = 64, 0.125
    q, do = (rng.standard_normal((b, hq, sq, d)) for _ in range(2))
    k, v = (rng.standard_normal((b, hkv, sk, d)) for _ in range(2))
    lse, delta, dq, dk, dv = dense(q, k, v, do, scale, causal, align)
    rule = BackwardTrips(causal=causal, block_m=BM, block_n=BN, align=align)
    got = blocks(q, k, v, do, lse, delta, scale, rule)
    for g, want in zip(got, (dq, dk, dv)):
        assert np.allclose(g, want, atol=1e-9), float(np.abs(g - want).max())

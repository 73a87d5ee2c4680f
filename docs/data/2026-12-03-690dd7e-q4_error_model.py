#!/usr/bin/env python3
"""Squared error of 4-bit group quantizers on Gaussian groups of 32 (the synthetic models' weights),
relative to moerun's q4 (fp16 scale and minimum per 32, 5 bits; the least-squares grid search of
base/quant_format.cpp). docs/NOTES.md, issue 25: Q4_K-like 6-bit sub-scales at 4.5 bits +4%,
two Lloyd rounds on every candidate -2.4%, an IQ4_NL-style table at 4.5 bits +15%.
    python3 docs/data/2026-12-03-690dd7e-q4_error_model.py      (numpy; seconds)"""
import numpy as np

X = np.random.default_rng(0).standard_normal((20000, 32))
f16 = lambda a: a.astype(np.float16).astype(np.float64)


def err(x, d, m):
    d, m = f16(d), f16(m)
    q = np.clip(np.rint((x - m[:, None]) / np.where(d > 0, d, 1)[:, None]), 0, 15)
    return ((x - (d[:, None] * q + m[:, None])) ** 2).sum(1), q


def lsfit(x, l):
    n, sl, sl2, sx, sxl = 32, l.sum(1), (l * l).sum(1), x.sum(1), (x * l).sum(1)
    det = n * sl2 - sl * sl
    safe = np.where(det > 0, det, 1)
    return (n * sxl - sx * sl) / safe, (sl2 * sx - sl * sxl) / safe, det > 0


def moerun_q4(x, lloyd=0, clamp_min=False):
    """Min/max grid, then 21 grids refitted by least squares; `lloyd` reassign-and-refit rounds each."""
    mn, mx = x.min(1), x.max(1)
    if clamp_min:
        mn = np.minimum(mn, 0)
    best, _ = err(x, (mx - mn) / 15, mn.copy())
    D, M = (mx - mn) / 15, mn.copy()
    for s in range(21):
        l = np.clip(np.rint(((14 + 0.1 * s) / (mx - mn))[:, None] * (x - mn[:, None])), 0, 15)
        d, m, ok = lsfit(x, l)
        ok &= d > 0
        for _ in range(lloyd):
            _, q = err(x, np.where(ok, d, 1), np.where(ok, m, 0))
            d2, m2, ok2 = lsfit(x, q)
            sel = ok & ok2 & (d2 > 0)
            d, m = np.where(sel, d2, d), np.where(sel, m2, m)
        if clamp_min:
            m = np.minimum(m, 0)
        e, _ = err(x, np.where(ok, d, 1), np.where(ok, m, 0))
        upd = ok & (e < best)
        best, D, M = np.where(upd, e, best), np.where(upd, d, D), np.where(upd, m, M)
    return best.mean() / 32, D, M


def q4_k_like(x):
    """Q4_K's layout: per 32 a scale and a minimum (<= 0), stored as 6-bit fractions of the 8-group
    super-block's largest (4.5 bits a weight)."""
    _, D, M = moerun_q4(x, clamp_min=True)
    D8, M8 = D.reshape(-1, 8), (-M).reshape(-1, 8)
    sd, sm = D8.max(1, keepdims=True) / 63, M8.max(1, keepdims=True) / 63
    Dq, Mq = (np.rint(D8 / sd) * sd).ravel(), -(np.rint(M8 / sm) * sm).ravel()
    q = np.clip(np.rint((x - Mq[:, None]) / Dq[:, None]), 0, 15)
    return ((x - (Dq[:, None] * q + Mq[:, None])) ** 2).sum(1).mean() / 32


def iq4_nl_like(x):
    """IQ4_NL's non-uniform table with an fp16 scale per 32 (4.5 bits), llama.cpp's 15 trial scales."""
    T = np.array([-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113], float)
    mx = x[np.arange(len(x)), np.argmax(np.abs(x), 1)]
    best = np.full(len(x), np.inf)
    for t in range(-7, 8):
        idx = np.abs(x[:, :, None] * ((t + T[0]) / mx)[:, None, None] - T).argmin(2)
        q = T[idx]
        d = f16((x * q).sum(1) / np.maximum((q * q).sum(1), 1e-30))
        idx = np.abs(x[:, :, None] / d[:, None, None] - T).argmin(2)
        best = np.minimum(best, ((x - d[:, None] * T[idx]) ** 2).sum(1))
    return best.mean() / 32


base = moerun_q4(X)[0]
print(f"moerun q4 (5 bits): mean squared error {base:.6f}")
print(f"  + two Lloyd rounds per candidate: {moerun_q4(X, lloyd=2)[0] / base:.3f}x")
print(f"Q4_K-like (4.5 bits): {q4_k_like(X) / base:.3f}x")
print(f"IQ4_NL-like (4.5 bits): {iq4_nl_like(X) / base:.3f}x")

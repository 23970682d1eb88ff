# Emulates the Hopper forward's softmax numerics (fp16 / bf16 P, fp32 sums and O, 128-key blocks from the highest down)
# with the exact online step and with the lazy step (reference max kept until a block's max passes it by > 2^8),
# against a float64 reference and the naive fp16 implementation (S rounded to fp16, softmax in fp32, P rounded).
# Usage: python3 bench/lazy_softmax_numerics.py (numpy only; bench/NOTES-fwd.md, sixty-eighth session). A model of the
# kernel's rounding, not the kernel: the A/B and the GPU tests decide.
import numpy as np, sys
f32 = np.float32
def rd(x, dt):
    if dt == 'fp16': return x.astype(np.float16).astype(f32)
    b = np.asarray(x, f32).view(np.uint32).astype(np.uint64)
    b = ((b + 0x7FFF + ((b >> 16) & 1)) >> 16) << 16
    return b.astype(np.uint32).view(f32)
def run(N, M, D, scale, dt, lazy, seed, thr=8.0):
    rng = np.random.default_rng(seed)
    q = rd(rng.standard_normal((M, D)).astype(f32), dt); k = rd(rng.standard_normal((N, D)).astype(f32), dt)
    v = rd(rng.standard_normal((N, D)).astype(f32), dt)
    S = (q.astype(np.float64) @ k.astype(np.float64).T).astype(f32)  # fp32 accumulation, ~exact
    sl2 = f32(abs(scale) * 1.4426950408889634)
    ref_s = (q.astype(np.float64) @ k.astype(np.float64).T) * scale
    ref_p = np.exp(ref_s - ref_s.max(1, keepdims=True)); ref = (ref_p @ v.astype(np.float64)) / ref_p.sum(1, keepdims=True)
    ref_lse = np.log(ref_p.sum(1)) + ref_s.max(1)
    m = np.full(M, -np.inf, f32); l = np.zeros(M, f32); O = np.zeros((M, D), f32)
    blocks = list(range((N + 127) // 128))[::-1]
    nres = 0
    for i, b in enumerate(blocks):
        s = S[:, b * 128:(b + 1) * 128]; vb = v[b * 128:(b + 1) * 128]
        x = s.max(1)
        def exact():
            mn = np.maximum(m, x); msc = (mn * sl2).astype(f32)
            a = np.where(m == -np.inf, f32(0), np.exp2((m * sl2).astype(f32) - msc)).astype(f32)
            p = np.exp2((s * sl2 - msc[:, None]).astype(f32)).astype(f32)
            return mn, a, p
        if i == 0 or not lazy:
            mn, a, p = exact(); resc = True
        else:
            mr = np.where(m == -np.inf, f32(0), (m * sl2).astype(f32))
            need = np.where(m == -np.inf, x != -np.inf, (x * sl2).astype(f32) - mr > thr)
            # warp-uniform: rows in groups of 16 (a warp's rows g, g + 8 of 16)
            need = need.reshape(-1, 16).any(1).repeat(16) if M % 16 == 0 else need
            mn_e, a_e, p_e = exact()
            p_l = np.exp2((s * sl2 - mr[:, None]).astype(f32)).astype(f32)
            mn = np.where(need, mn_e, m); a = np.where(need, a_e, f32(1)); p = np.where(need[:, None], p_e, p_l)
            nres += need.sum()
        rs = np.zeros(M, f32)
        for j in range(p.shape[1]): rs = (rs + p[:, j]).astype(f32)
        l = (l * a + rs).astype(f32); m = mn
        O = (O * a[:, None] + rd(p, dt).astype(np.float64) @ vb.astype(np.float64)).astype(f32)
    out = rd(O / l[:, None], dt); lse = (m * sl2).astype(f32) + np.log2(l).astype(f32); lse = lse * f32(0.6931471805599453)
    # naive: S rounded to dt, softmax in fp32, P rounded, P V accumulated in fp32, out rounded
    Sn = rd((S * f32(scale)).astype(f32), dt); pn = np.exp(Sn - Sn.max(1, keepdims=True)); pn = rd(pn / pn.sum(1, keepdims=True), dt)
    naive = rd((pn.astype(np.float64) @ v.astype(np.float64)).astype(f32), dt)
    e = lambda y: np.abs(y - ref).max()
    return e(out), e(naive), np.abs(lse - ref_lse).max(), nres / (M * max(1, len(blocks) - 1)), p.max()
for dt in ['fp16', 'bf16']:
    for (N, D, scale) in [(2048, 128, 128 ** -0.5), (2048, 128, 0.25), (1500, 128, 1.0), (1000, 96, 3.0), (4096, 64, 0.125)]:
        for seed in [1, 2]:
            ee, en, le, _, _ = run(N, 256, D, scale, dt, False, seed)
            el, _, ll, frac, pm = run(N, 256, D, scale, dt, True, seed)
            print(f'{dt} N{N} D{D} scale {scale:.3f} seed {seed}: err exact {ee:.2e} lazy {el:.2e} naive {en:.2e} '
                  f'(lazy/naive {el/en:.2f}); lse err exact {le:.1e} lazy {ll:.1e}; rows rescaled after block 0: {frac:.3f}')

#!/usr/bin/env python3
"""Writes the timing-only variants of gemm_large_m_wgra.cu that the session-9 diagnostic runs
compared (wgra_diag.cu #includes one of them through -DWGRA_SRC). Their results are wrong by
design; they only say which part of the kernel the time goes to.

  python3 make_variants.py SRC PREFIX     # SRC: gemm_large_m_wgra.cu of 9864470 (run 1) or 2c15060
                                          # writes PREFIX_nodec.cu, PREFIX_noact.cu, PREFIX_nomma.cu, ...

  nodec  the consumers use the raw code words as fragments (no e2m1 decode, no scale multiply)
  noact  the producer copies no activation tile (the MMAs read stale shared memory)
  nomma  the consumers fold the fragments into the accumulators instead of issuing wgmma
"""
import sys

src, prefix = open(sys.argv[1]).read(), sys.argv[2]

def rep(s, old, new):
    if s.count(old) != 1:
        raise SystemExit("pattern not found once in %s: %r" % (sys.argv[1], old[:60]))
    return s.replace(old, new)

dec_start = src.index('  uint32_t r[4];\n  rd_decode_word2<F16>(wgra_gather(lo0.x')
dec_end_pat = '  a[2][1] = r[0], a[2][3] = r[1], a[3][1] = r[2], a[3][3] = r[3];\n'
dec_end = src.index(dec_end_pat, dec_start) + len(dec_end_pat)
nodec = (src[dec_start:dec_end], '''  (void)sel;
  a[0][0] = lo0.x ^ slo.x, a[0][1] = hi0.x ^ shi.x, a[0][2] = lo0.y ^ slo.y, a[0][3] = hi0.y ^ shi.y;
  a[1][0] = lo0.z ^ slo.z, a[1][1] = hi0.z ^ shi.z, a[1][2] = lo0.w ^ slo.w, a[1][3] = hi0.w ^ shi.w;
  a[2][0] = lo1.x, a[2][1] = hi1.x, a[2][2] = lo1.y, a[2][3] = hi1.y;
  a[3][0] = lo1.z, a[3][1] = hi1.z, a[3][2] = lo1.w, a[3][3] = hi1.w;
''')
act_old = [l + '\n' for l in src.split('\n') if 'copy_16bit_rows<BT, kWgraWg>(sl,' in l and 'else' not in l][:1]
fast_act = '      for (int j = 0; j < BT / 16; j++, src += a_step) cp_async16(sl + a_dst + j * 16 * 128, src, true);\n'
noact = (fast_act, '      (void)src;\n') if fast_act in src else (act_old[0], '')
nomma = ('  for (int s = 0; s < 4; s++) wgmma_rs_k16<BT, G::F16>(acc, cur[s], db + 2 * s);\n',
         '  for (int s = 0; s < 4; s++) acc[s] += __uint_as_float(cur[s][0] ^ cur[s][1] ^ cur[s][2] ^ cur[s][3] ^ (uint32_t)db);\n')
variants = {'nodec': [nodec], 'noact': [noact], 'nomma': [nomma], 'noact_nodec': [noact, nodec], 'noact_nomma': [noact, nomma]}
for name, edits in variants.items():
    s = src
    for old, new in edits:
        s = rep(s, old, new)
    open('%s_%s.cu' % (prefix, name), 'w').write(s)

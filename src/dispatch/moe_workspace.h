/*
 * The common layout of the fp4_moe_forward workspace: the intermediates every MoE implementation
 * needs (routing permutation, gate_up output, SiLU*up activations, their FP4 copies for W4A4, the
 * down outputs before the weighted combine). The reference uses exactly this layout; a backend may
 * use it or declare a larger need through fp4_backend.moe_workspace_size.
 */
#ifndef FP4_DISPATCH_MOE_WORKSPACE_H
#define FP4_DISPATCH_MOE_WORKSPACE_H

#include <stddef.h>

#include "fp4kit.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Every section starts at a multiple of this many bytes from the workspace start (vector loads, TMA,
 * cp.async), which is itself FP4_MOE_WORKSPACE_ALIGNMENT-aligned (fp4kit.h; fp4_moe_forward checks it):
 * so every section is at least that aligned in memory. */
#define FP4_MOE_WS_ALIGN 256

/* Byte offsets of the sections from the workspace start; an absent section has size 0. P = T*k
 * routed rows; R = max(P, T when there is a shared expert) rows of the reused sections; Imax the
 * larger intermediate size of the routed and shared experts. */
typedef struct fp4_moe_ws_layout {
  int64_t pairs;          /* P                                                                    */
  int64_t rows;           /* R                                                                    */
  int64_t inter;          /* Imax                                                                 */
  size_t sorted;          /* int32 [P]: permuted row p -> pair t*k + j, grouped by expert, stable  */
  size_t inverse;         /* int32 [P]: pair t*k + j -> permuted row p                            */
  size_t offsets;         /* int64 [E+1]: rows of expert e are offsets[e] .. offsets[e+1]-1        */
  size_t hidden_q;        /* W4A4: hidden quantized [T, H], codes then scales (128x4)            */
  size_t hidden_q_scales;
  size_t gate_up_out;     /* f32 [R, 2*Imax] (row stride 2*I of the experts being run)            */
  size_t act;             /* f32 [R, Imax]   SiLU(gate) * up (row stride I)                       */
  size_t act_q;           /* W4A4: act quantized [R, Imax], codes then scales (128x4)            */
  size_t act_q_scales;
  size_t down_out;        /* f32 [P, H] routed expert outputs, in permuted row order               */
  size_t shared_out;      /* f32 [T, H] shared expert output (only with a shared expert)          */
  size_t total;           /* bytes                                                                */
} fp4_moe_ws_layout;

/* Computes the layout for a layer whose shapes were validated; FP4_ERR_INVALID_ARGUMENT when a
 * size overflows. */
fp4_status fp4_moe_ws_layout_make(const char *fn, const fp4_moe_layer *layer, int64_t tokens, int64_t top_k,
                                  fp4_moe_ws_layout *ws);

#ifdef __cplusplus
}
#endif

#endif

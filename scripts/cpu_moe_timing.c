/*
 * Timing driver for the cpu backend's MoE layer (fp4kit bench --moe times the cuda backend only):
 * fp4_moe_forward on Qwen3.5-397B's per-expert shapes (H = 4096, I = 1024: w13 2048 x 4096, w2
 * 4096 x 1024, NVFP4, top-10) over E experts (fewer than the real 512 so the weights fit a small
 * host), uniform random distinct routing, bf16 hidden states. Weights are random codes with a
 * constant block scale (the time does not depend on the values). Prints the best of 7 calls, the
 * active experts and their touched bytes (codes + E4M3 scales) and the effective bandwidth.
 * Build (from the repository root, after building build-nocuda):
 *   cc -O2 -Iinclude scripts/cpu_moe_timing.c -Lbuild-nocuda -lfp4kit -Wl,-rpath,$PWD/build-nocuda -lm -lpthread -o /tmp/moe_timing
 * Run: /tmp/moe_timing E B W4A4   e.g. /tmp/moe_timing 64 8 0
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "fp4kit.h"
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
static fp4_grouped_qmatrix mk(int64_t E,int64_t N,int64_t K){
  size_t sb=0; fp4_scales_size(FP4_FORMAT_NVFP4,FP4_LAYOUT_128X4,N,K,&sb);
  fp4_grouped_qmatrix g={malloc((size_t)(E*N*K/2)),malloc(sb*E),NULL,E,N,K,FP4_FORMAT_NVFP4,FP4_LAYOUT_128X4,FP4_MEMORY_HOST};
  unsigned char*d=g.data; for(size_t i=0;i<(size_t)(E*N*K/2);i++) d[i]=(unsigned char)(rand()&0x77);
  memset(g.scales,0x38,sb*E); return g;}
int main(int argc,char**argv){
  int64_t E=atoi(argv[1]),B=atoi(argv[2]),k=10,H=4096,I=1024; int w4a4=atoi(argv[3]);
  fp4_grouped_qmatrix w1=mk(E,2*I,H),w2=mk(E,H,I);
  fp4_moe_layer L={w4a4?FP4_MOE_W4A4:FP4_MOE_W4A16,{w1,w2,1.0f,1.0f},NULL};
  int32_t*ids=malloc(B*k*4); float*tw=malloc(B*k*4); uint16_t*h=malloc(B*H*2),*o=malloc(B*H*2);
  for(int64_t t=0;t<B;t++){int used[4096]={0};for(int j=0;j<k;j++){int e;do e=rand()%E;while(used[e]);used[e]=1;ids[t*k+j]=e;tw[t*k+j]=0.1f;}}
  for(int64_t i=0;i<B*H;i++) h[i]=0x3f80;
  fp4_moe_routing rt={ids,B,k,{tw,B,k,0,FP4_DTYPE_F32,FP4_MEMORY_HOST},NULL};
  fp4_matrix x={h,B,H,0,FP4_DTYPE_BF16,FP4_MEMORY_HOST},om={o,B,H,0,FP4_DTYPE_BF16,FP4_MEMORY_HOST};
  fp4_options opt={.backend="cpu"}; size_t bytes; fp4_moe_workspace_size(&L,B,k,&opt,&bytes); void*ws=malloc(bytes);
  int act[4096]={0}; int na=0; for(int64_t i=0;i<B*k;i++) if(!act[ids[i]]++) na++;
  double touched=(double)na*(2*I*H/2+H*I/2)*(1+1.0/16);
  double best=1e9; for(int r=0;r<7;r++){double t0=now(); fp4_status st=fp4_moe_forward(NULL,&L,&x,&rt,ws,bytes,&om,&opt); double t=now()-t0; if(st){printf("err %s\n",fp4_last_error());return 1;} if(t<best)best=t;}
  printf("E=%lld B=%lld %s active=%d touched=%.1f MB best=%.2f ms eff=%.2f GB/s\n",(long long)E,(long long)B,w4a4?"w4a4":"w4a16",na,touched/1e6,best*1e3,touched/best/1e9);
  return 0;}

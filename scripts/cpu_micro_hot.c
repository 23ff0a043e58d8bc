/* Rate of the avx512 panel micro-kernel alone (internal header): M rows of A against one decoded
 * panel, K blocks of FP4_CPU_KC, as panel_unit calls it. Usage (built from scripts/cpu_micro_hot.c): micro_hot M K reps. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include "backends/cpu/cpu_kernels.h"
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
int main(int argc,char**argv){
  int64_t M=atoll(argv[1]), K=atoll(argv[2]); int reps=atoi(argv[3]);
  const fp4_cpu_kernels*k=fp4_cpu_kernels_avx512();
  float*a=aligned_alloc(64,4*M*K),*panel=aligned_alloc(64,4*6*K),*acc=aligned_alloc(64,4*64*6*16*8);
  for(int64_t i=0;i<M*K;i++)a[i]=1e-3f*(float)(i%97); for(int64_t i=0;i<6*K;i++)panel[i]=1e-3f*(float)(i%89);
  fp4_cpu_gemm g={0}; g.a=a; g.lda=K; g.m=M; g.n=6; g.k=K;
  double best=1e9;
  for(int r=0;r<5;r++){double t0=now();
   for(int it=0;it<reps;it++)
    for(int64_t k0=0;k0<K;k0+=512)
     for(int64_t m=0;m<M;m+=4) k->micro_f32(&g,panel,m,4,0,6,k0,k0+512,acc+(m)*6*16,k0==0,0);
   double t=(now()-t0)/reps; if(t<best)best=t;}
  printf("M=%lld K=%lld: %.1f GFLOP/s\n",(long long)M,(long long)K,2.0*M*6*K/best/1e9);
}

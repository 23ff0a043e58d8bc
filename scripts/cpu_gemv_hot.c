/* In-cache rate of the cpu backend: the same weights every call (they stay in L2/L3), best of 5
 * batches of reps calls. Usage (built from scripts/cpu_gemv_hot.c): gemv_hot N K M reps (bf16 activations, NVFP4 128x4, f32 out). */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "fp4kit.h"
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
int main(int argc,char**argv){
  int64_t n=argc>1?atoll(argv[1]):512,k=argc>2?atoll(argv[2]):4096,m=argc>3?atoll(argv[3]):1; int reps=argc>4?atoi(argv[4]):2000;
  size_t sb=0; fp4_scales_size(FP4_FORMAT_NVFP4,FP4_LAYOUT_128X4,n,k,&sb);
  float*w=malloc(4*n*k),*a=malloc(4*m*k),*o=malloc(4*m*n); uint16_t*ab=malloc(2*m*k);
  for(int64_t i=0;i<n*k;i++)w[i]=(float)((i*2654435761u)%1000)/100.f-5.f;
  for(int64_t i=0;i<m*k;i++)a[i]=(float)((i*40503u)%1000)/500.f-1.f;
  fp4_convert(a,FP4_DTYPE_F32,ab,FP4_DTYPE_BF16,(size_t)(m*k));
  uint8_t*c=malloc(n*k/2),*s=malloc(sb);
  fp4_matrix wm={w,n,k,0,FP4_DTYPE_F32,FP4_MEMORY_HOST},am={ab,m,k,0,FP4_DTYPE_BF16,FP4_MEMORY_HOST},om={o,m,n,0,FP4_DTYPE_F32,FP4_MEMORY_HOST};
  fp4_qmatrix q={c,s,n,k,FP4_FORMAT_NVFP4,FP4_LAYOUT_128X4,1.0f,FP4_MEMORY_HOST};
  fp4_options opt={.backend="cpu"};
  if(fp4_quantize(NULL,&wm,1.0f,&q,&opt)){printf("q %s\n",fp4_last_error());return 1;}
  double best=1e9;
  for(int r=0;r<5;r++){double t0=now();for(int i=0;i<reps;i++)fp4_mm_w4a16(NULL,&am,&q,1.0f,&om,&opt);double t=(now()-t0)/reps;if(t<best)best=t;}
  double bytes=n*k/2.0+sb; printf("n=%lld k=%lld m=%lld: %.1f us, %.2f GB/s weight, %.1f GFLOP/s\n",(long long)n,(long long)k,(long long)m,best*1e6,bytes/best/1e9,2.0*m*n*k/best/1e9);
  return 0;}

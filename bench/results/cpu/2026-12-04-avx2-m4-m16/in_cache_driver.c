#define _POSIX_C_SOURCE 200809L
/*
 * In-cache timing of one W4A16 GEMM shape through the public API (in_cache.csv): best of `reps`
 * calls of fp4_mm_w4a16 on the cpu backend (level and threads from FP4KIT_CPU_LEVEL and
 * FP4KIT_NUM_THREADS), weights quantized with the ref backend; optionally writes the f32 outputs
 * to a file, which is how before and after were compared bit for bit. Build against a build tree:
 *   cc -O2 -I<repo>/include in_cache_driver.c -o drv -L<build> -lfp4kit -lm -Wl,-rpath,<build>
 * Run: drv M N K reps format(0 NVFP4, 1 MXFP4) layout(0 linear, 1 128x4, 2 8x4) act(0 f32, 1 bf16)
 *          [outfile] [data: 0 random, 1 random with NaN/inf activations and a NaN scale]
 */
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>
#include <time.h>
#include <math.h>
#include "fp4kit.h"
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+1e-9*t.tv_nsec;}
static uint64_t s=88172645463325252ull;
static double rnd(void){s^=s<<13;s^=s>>7;s^=s<<17;return (double)(s>>11)/9007199254740992.0;}
int main(int argc,char**argv){
  int64_t M=atoll(argv[1]),N=atoll(argv[2]),K=atoll(argv[3]);int reps=atoi(argv[4]);
  int fmt=atoi(argv[5]),lay=atoi(argv[6]),act=atoi(argv[7]);const char*of=argc>8?argv[8]:NULL;int data=argc>9?atoi(argv[9]):0;
  fp4_format f=fmt?FP4_FORMAT_MXFP4:FP4_FORMAT_NVFP4;
  fp4_scale_layout L=lay==0?FP4_LAYOUT_LINEAR:lay==1?FP4_LAYOUT_128X4:FP4_LAYOUT_8X4;
  size_t sb=0;fp4_scales_size(f,L,N,K,&sb);
  float*a=malloc(4*M*K),*w=malloc(4*N*K),*o=malloc(4*M*N);uint16_t*ab=malloc(2*M*K);
  uint8_t*codes=malloc(N*K/2),*sc=malloc(sb);
  for(int64_t i=0;i<M*K;i++){a[i]=(float)((rnd()*2-1)*(rnd()<0.1?100:1));}
  if(data==1){ a[0]=NAN; if(M*K>200){a[150]=INFINITY;a[M*K-1]=-INFINITY;} }
  for(int64_t i=0;i<N*K;i++)w[i]=(float)((rnd()*2-1)*(1+(i/16)%7));
  fp4_convert(a,FP4_DTYPE_F32,ab,FP4_DTYPE_BF16,M*K);
  fp4_matrix am={act?(void*)ab:(void*)a,M,K,0,act?FP4_DTYPE_BF16:FP4_DTYPE_F32,FP4_MEMORY_HOST};
  fp4_matrix wm={w,N,K,0,FP4_DTYPE_F32,FP4_MEMORY_HOST};
  fp4_qmatrix qb={codes,sc,N,K,f,L,1.0f,FP4_MEMORY_HOST};
  fp4_options ro={.backend="ref"};
  if(fp4_quantize(NULL,&wm,20.0f,&qb,&ro)){printf("q fail %s\n",fp4_last_error());return 1;}
  if(data==1 && sb>3){ sc[1]=fmt?0xFF:0x7F; }
  fp4_matrix om={o,M,N,0,FP4_DTYPE_F32,FP4_MEMORY_HOST};
  fp4_options co={.backend="cpu"};
  double best=1e9;
  for(int r=0;r<reps;r++){double t=now();if(fp4_mm_w4a16(NULL,&am,&qb,1.5f,&om,&co)){printf("fail %s\n",fp4_last_error());return 1;}t=now()-t;if(t<best)best=t;}
  printf("M=%lld N=%lld K=%lld best %.3f ms  %.2f Gprod/s\n",(long long)M,(long long)N,(long long)K,best*1e3,M*N*K/best*1e-9);
  if(of){FILE*fp=fopen(of,"wb");fwrite(o,4,M*N,fp);fclose(fp);}
  return 0;}

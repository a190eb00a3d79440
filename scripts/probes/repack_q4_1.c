// A probe for a design not built yet: Q4_1 weights repacked at load for the
// AVX-512 VNNI 16-row kernels. Times, in cache on one thread, the 8-token
// tile and the one-token kernel as `ats-cpu` runs them on GGUF's row layout
// (each 16-row block loaded row by row and transposed in registers: see
// `legacy_rows16.rs` and `legacy512.rs`) against the same arithmetic on a
// repacked layout (per 16 rows and block: four 64-byte registers holding
// dword j of every row's nibbles, then the 16 rows' d and m), which needs
// no transposition. Checks that the 8-token results are the same bits.
//
//   gcc -O3 -march=native -o /tmp/repack scripts/probes/repack_q4_1.c && /tmp/repack 2000
//
// Shapes: SmolLM2's MLP up/gate product (1536 rows x 576 columns).
#include <immintrin.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#define NB 18
#define BB 20
#define ROWS 1536
static double now(){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
static inline __m512i by_dw(__m512i q0,__m512i q1,__m512i q2,__m512i q3,int j){
  __m512i ab_lo=_mm512_unpacklo_epi32(q0,q1), ab_hi=_mm512_unpackhi_epi32(q0,q1);
  __m512i cd_lo=_mm512_unpacklo_epi32(q2,q3), cd_hi=_mm512_unpackhi_epi32(q2,q3);
  switch(j){case 0: return _mm512_unpacklo_epi64(ab_lo,cd_lo); case 1: return _mm512_unpackhi_epi64(ab_lo,cd_lo);
  case 2: return _mm512_unpacklo_epi64(ab_hi,cd_hi); default: return _mm512_unpackhi_epi64(ab_hi,cd_hi);}
}
// The block at p of 4 rows stride bytes apart, as ats-cpu's `halves4` and
// `quad_levels_headed` load it: row k's nibble bytes in 128-bit lane k, and
// (*first) each row's first 16 bytes, its head in dword 0.
static inline __m512i quad(const uint8_t*p,int stride,__m512i*first){
  __m256i a=_mm256_loadu_si256((const __m256i*)p), bb=_mm256_loadu_si256((const __m256i*)(p+stride)),
          c=_mm256_loadu_si256((const __m256i*)(p+2*stride)), e=_mm256_loadu_si256((const __m256i*)(p+3*stride));
  __m512i ab=_mm512_inserti64x4(_mm512_castsi256_si512(a),bb,1), ce=_mm512_inserti64x4(_mm512_castsi256_si512(c),e,1);
  *first=_mm512_shuffle_i64x2(ab,ce,0x88);
  return _mm512_alignr_epi8(_mm512_shuffle_i64x2(ab,ce,0xdd),*first,4);
}
__attribute__((noinline)) void tile_stored(const uint8_t*first,int stride,const int32_t*xq,const float*xd,const float*xs,float out[8][16]){
  __m512 acc[8]; for(int t=0;t<8;t++) acc[t]=_mm512_setzero_ps();
  __m512i m4=_mm512_set1_epi8(0x0f);
  for(int b=0;b<NB;b++){
    __m512i lo[4],hi[4],hd[4];
    for(int g=0;g<4;g++){
      __m512i f, q=quad(first+4*g*stride+b*BB,stride,&f);
      lo[g]=_mm512_and_si512(q,m4); hi[g]=_mm512_and_si512(_mm512_srli_epi16(q,4),m4); hd[g]=f;
    }
    __m512i w[8]; for(int j=0;j<4;j++){w[j]=by_dw(lo[0],lo[1],lo[2],lo[3],j); w[4+j]=by_dw(hi[0],hi[1],hi[2],hi[3],j);}
    __m512i p0=_mm512_unpacklo_epi32(hd[0],hd[1]), p1=_mm512_unpacklo_epi32(hd[2],hd[3]);
    __m512i heads=_mm512_unpacklo_epi64(p0,p1);
    __m512 d=_mm512_cvtph_ps(_mm512_cvtepi32_epi16(heads)), m=_mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(heads,16)));
    __m512i is[8]; for(int t=0;t<8;t++) is[t]=_mm512_setzero_si512();
    for(int k=0;k<8;k++) for(int t=0;t<8;t++) is[t]=_mm512_dpbusd_epi32(is[t],w[k],_mm512_set1_epi32(xq[t*NB*8+8*b+k]));
    for(int t=0;t<8;t++){acc[t]=_mm512_fmadd_ps(_mm512_cvtepi32_ps(is[t]),_mm512_mul_ps(d,_mm512_set1_ps(xd[b*8+t])),acc[t]); acc[t]=_mm512_fmadd_ps(m,_mm512_set1_ps(xs[b*8+t]),acc[t]);}
  }
  for(int t=0;t<8;t++) _mm512_storeu_ps(out[t],acc[t]);
}
// repacked: per 16-row group, per block: 4 x 64 bytes of nibble dwords (dword j of the 16 rows), then 64 bytes of (d,m) pairs
__attribute__((noinline)) void tile_packed(const uint8_t*grp,const int32_t*xq,const float*xd,const float*xs,float out[8][16]){
  __m512 acc[8]; for(int t=0;t<8;t++) acc[t]=_mm512_setzero_ps();
  __m512i m4=_mm512_set1_epi8(0x0f);
  for(int b=0;b<NB;b++){
    const uint8_t*p=grp+b*320;
    __m512i w[8];
    for(int j=0;j<4;j++){__m512i q=_mm512_loadu_si512(p+64*j); w[j]=_mm512_and_si512(q,m4); w[4+j]=_mm512_and_si512(_mm512_srli_epi16(q,4),m4);}
    __m512i heads=_mm512_loadu_si512(p+256);
    __m512 d=_mm512_cvtph_ps(_mm512_cvtepi32_epi16(heads)), m=_mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(heads,16)));
    __m512i is[8]; for(int t=0;t<8;t++) is[t]=_mm512_setzero_si512();
    for(int k=0;k<8;k++) for(int t=0;t<8;t++) is[t]=_mm512_dpbusd_epi32(is[t],w[k],_mm512_set1_epi32(xq[t*NB*8+8*b+k]));
    for(int t=0;t<8;t++){acc[t]=_mm512_fmadd_ps(_mm512_cvtepi32_ps(is[t]),_mm512_mul_ps(d,_mm512_set1_ps(xd[b*8+t])),acc[t]); acc[t]=_mm512_fmadd_ps(m,_mm512_set1_ps(xs[b*8+t]),acc[t]);}
  }
  for(int t=0;t<8;t++) _mm512_storeu_ps(out[t],acc[t]);
}
__attribute__((noinline)) void one_stored(const uint8_t*first,int stride,const int32_t*xq,const float*xd,const float*xs,float out[16]){
  __m512 acc=_mm512_setzero_ps(); __m512i m4=_mm512_set1_epi8(0x0f);
  for(int b=0;b<NB;b++){
    __m512i x0=_mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i*)(xq+8*b))), x1=_mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i*)(xq+8*b+4)));
    __m512i qd[4],hd[4];
    for(int g=0;g<4;g++){
      __m512i f, q=quad(first+4*g*stride+b*BB,stride,&f);
      __m512i lo=_mm512_and_si512(q,m4), hi=_mm512_and_si512(_mm512_srli_epi16(q,4),m4); hd[g]=f;
      qd[g]=_mm512_dpbusd_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(),lo,x0),hi,x1);
    }
    __m512i pp=_mm512_add_epi32(_mm512_unpacklo_epi32(qd[0],qd[1]),_mm512_unpackhi_epi32(qd[0],qd[1]));
    __m512i qq=_mm512_add_epi32(_mm512_unpacklo_epi32(qd[2],qd[3]),_mm512_unpackhi_epi32(qd[2],qd[3]));
    __m512i is=_mm512_add_epi32(_mm512_unpacklo_epi64(pp,qq),_mm512_unpackhi_epi64(pp,qq));
    __m512i p0=_mm512_unpacklo_epi32(hd[0],hd[1]), p1=_mm512_unpacklo_epi32(hd[2],hd[3]);
    __m512i heads=_mm512_unpacklo_epi64(p0,p1);
    __m512 d=_mm512_cvtph_ps(_mm512_cvtepi32_epi16(heads)), m=_mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(heads,16)));
    acc=_mm512_fmadd_ps(_mm512_cvtepi32_ps(is),_mm512_mul_ps(d,_mm512_set1_ps(xd[b])),acc); acc=_mm512_fmadd_ps(m,_mm512_set1_ps(xs[b]),acc);
  }
  _mm512_storeu_ps(out,acc);
}
__attribute__((noinline)) void one_packed(const uint8_t*grp,const int32_t*xq,const float*xd,const float*xs,float out[16]){
  __m512 acc=_mm512_setzero_ps(); __m512i m4=_mm512_set1_epi8(0x0f);
  for(int b=0;b<NB;b++){
    const uint8_t*p=grp+b*320; __m512i is=_mm512_setzero_si512(), is2=_mm512_setzero_si512();
    for(int j=0;j<4;j++){__m512i q=_mm512_loadu_si512(p+64*j);
      is=_mm512_dpbusd_epi32(is,_mm512_and_si512(q,m4),_mm512_set1_epi32(xq[8*b+j]));
      is2=_mm512_dpbusd_epi32(is2,_mm512_and_si512(_mm512_srli_epi16(q,4),m4),_mm512_set1_epi32(xq[8*b+4+j]));}
    is=_mm512_add_epi32(is,is2);
    __m512i heads=_mm512_loadu_si512(p+256);
    __m512 d=_mm512_cvtph_ps(_mm512_cvtepi32_epi16(heads)), m=_mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(heads,16)));
    acc=_mm512_fmadd_ps(_mm512_cvtepi32_ps(is),_mm512_mul_ps(d,_mm512_set1_ps(xd[b])),acc); acc=_mm512_fmadd_ps(m,_mm512_set1_ps(xs[b]),acc);
  }
  _mm512_storeu_ps(out,acc);
}
static const int LANE_ROW[16]={0,4,8,12,1,5,9,13,2,6,10,14,3,7,11,15};
int main(int argc,char**argv){
  int stride=NB*BB; uint8_t*W=aligned_alloc(64,ROWS*stride+64); for(int i=0;i<ROWS*stride;i++) W[i]=rand();
  // keep f16 heads sane: small values
  for(int r=0;r<ROWS;r++) for(int b=0;b<NB;b++){uint16_t h=0x2c00+(rand()&0xff); memcpy(W+r*stride+b*BB,&h,2); h=0xac00+(rand()&0xff); memcpy(W+r*stride+b*BB+2,&h,2);}
  uint8_t*P=aligned_alloc(64,(ROWS/16)*NB*320);
  for(int g=0;g<ROWS/16;g++) for(int b=0;b<NB;b++){uint8_t*p=P+(g*NB+b)*320;
    for(int l=0;l<16;l++){const uint8_t*blk=W+(16*g+LANE_ROW[l])*stride+b*BB;
      for(int j=0;j<4;j++) memcpy(p+64*j+4*l,blk+4+4*j,4);
      memcpy(p+256+4*l,blk,4);
    }
  }
  int32_t*xq=aligned_alloc(64,8*NB*8*4); for(int i=0;i<8*NB*8;i++) xq[i]=rand();
  float xd[NB*8],xs[NB*8]; for(int i=0;i<NB*8;i++){xd[i]=1e-3f*(i%7+1); xs[i]=0.5f*(i%5);}
  static float o1[96][8][16],o2[96][8][16];
  int reps=argc>1?atoi(argv[1]):2000;
  for(int round=0;round<5;round++){
    double t0=now();
    for(int r=0;r<reps;r++) for(int g=0;g<ROWS/16;g++) tile_stored(W+16*g*stride,stride,xq,xd,xs,o1[g]);
    double t1=now();
    for(int r=0;r<reps;r++) for(int g=0;g<ROWS/16;g++) tile_packed(P+g*NB*320,xq,xd,xs,o2[g]);
    double t2=now();
    int same=memcmp(o1,o2,sizeof o1)==0;
    double t3=now();
    for(int r=0;r<reps;r++) for(int g=0;g<ROWS/16;g++) one_stored(W+16*g*stride,stride,xq,xd,xs,o1[g][0]);
    double t4=now();
    for(int r=0;r<reps;r++) for(int g=0;g<ROWS/16;g++) one_packed(P+g*NB*320,xq,xd,xs,o2[g][0]);
    double t5=now();
    int same1=1; for(int g=0;g<ROWS/16;g++) same1&=memcmp(o1[g][0],o2[g][0],sizeof o1[g][0])==0;
    printf("one token: stored %.2f us  packed %.2f us  (same bits: %d)\n",(t4-t3)/reps*1e6,(t5-t4)/reps*1e6,same1);
    printf("stored %.2f us  packed %.2f us  per 1536x576 product  (same bits: %d)\n",(t1-t0)/reps*1e6,(t2-t1)/reps*1e6,same);
  }
}

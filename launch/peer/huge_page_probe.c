// What 2 MiB pages change on this machine, apart from moerun (docs/NOTES.md, --huge-pages):
//   read MB HUGE       two-or-more OpenMP threads read an MB buffer 40 times: best and mean GB/s
//   populate MB HUGE T MADV_POPULATE_WRITE of an MB buffer by T threads: seconds (the cost of
//                      faulting weights in at load; run it a few seconds after anything freed memory)
// HUGE 1: the buffer advised MADV_HUGEPAGE, 0: MADV_NOHUGEPAGE.
//   cc -O2 -fopenmp launch/peer/huge_page_probe.c -o /tmp/huge_page_probe
//   OMP_NUM_THREADS=2 /tmp/huge_page_probe read 96 0; OMP_NUM_THREADS=2 /tmp/huge_page_probe read 96 1
//   sleep 5; /tmp/huge_page_probe populate 384 1 1; sleep 5; /tmp/huge_page_probe populate 384 0 1
#define _GNU_SOURCE
#include <immintrin.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

__attribute__((target("avx512f"))) static long read_all(const char* p, size_t n) {
  long s = 0;
#pragma omp parallel reduction(+ : s)
  {
    const size_t per = n / omp_get_num_threads() / 128 * 128;
    const char* q = p + omp_get_thread_num() * per;
    __m512i a = _mm512_setzero_si512(), b = a;
    for (size_t i = 0; i < per; i += 128) {
      a = _mm512_xor_si512(a, _mm512_load_si512(q + i));
      b = _mm512_xor_si512(b, _mm512_load_si512(q + i + 64));
    }
    s += _mm512_reduce_add_epi32(_mm512_xor_si512(a, b));
  }
  return s;
}

int main(int argc, char** argv) {
  if (argc < 4 || (strcmp(argv[1], "read") && strcmp(argv[1], "populate"))) {
    fprintf(stderr, "usage: %s read MB HUGE | populate MB HUGE THREADS\n", argv[0]);
    return 2;
  }
  const size_t n = (size_t)atoi(argv[2]) << 20, huge_page = (size_t)2 << 20;
  const int huge = atoi(argv[3]);
  char* p = mmap(0, n + huge_page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return perror("mmap"), 1;
  p = (char*)(((size_t)p + huge_page - 1) & ~(huge_page - 1));
  madvise(p, n, huge ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
  if (!strcmp(argv[1], "populate")) {
    const int threads = argc > 4 ? atoi(argv[4]) : 1;
    const double t0 = now();
#pragma omp parallel num_threads(threads)
    {
      const size_t per = n / threads;
      if (madvise(p + omp_get_thread_num() * per, per, MADV_POPULATE_WRITE)) perror("madvise");
    }
    printf("populate huge=%d threads=%d %zu MB: %.3f s\n", huge, threads, n >> 20, now() - t0);
    return 0;
  }
  memset(p, 1, n);
  double best = 1e9, total = 0;
  long sink = 0;
  for (int i = 0; i < 40; ++i) {
    const double t0 = now();
    sink += read_all(p, n);
    const double d = now() - t0;
    best = d < best ? d : best;
    total += d;
  }
  printf("read huge=%d %zu MB: best %.1f GB/s, mean %.1f GB/s (%ld)\n", huge, n >> 20, n / best / 1e9, n * 40 / total / 1e9, sink);
  return 0;
}

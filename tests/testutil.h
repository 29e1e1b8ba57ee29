/* Small helpers shared by the test suites. */
#ifndef ST_TESTUTIL_H
#define ST_TESTUTIL_H

#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* splitmix64: fresh, reproducible random inputs per test (seed from the test). */
static inline uint64_t tu_next(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}
static inline double tu_uniform(uint64_t *s) /* [0,1) */
{
	return (double)(tu_next(s) >> 11) * (1.0 / 9007199254740992.0);
}
static inline double tu_normal(uint64_t *s)
{
	double u1 = tu_uniform(s), u2 = tu_uniform(s);
	if (u1 < 1e-300)
		u1 = 1e-300;
	return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}
static inline void tu_fill_normal(float *x, size_t n, double stddev, uint64_t *s)
{
	for (size_t i = 0; i < n; i++)
		x[i] = (float)(stddev * tu_normal(s));
}
/* Optimizer-test gradients: a different scale in every block of `block`
 * elements (so block absmax values vary over 7 decades), block 2 all zero,
 * and a spike of 1e3 at n/3. */
static inline void tu_block_grads(float *g, size_t n, int block, uint64_t *seed)
{
	for (size_t i = 0; i < n; i++) {
		size_t b = i / (size_t)block;
		g[i] = (float)(tu_normal(seed) * pow(10.0, (double)(b % 7) - 4.0));
		if (b == 2)
			g[i] = 0.0f;
	}
	g[n / 3] = 1e3f;
}
/* Two blocks of g replaced by gradients so small that 8-bit AdamW's moments
 * there (beta1 0.9, beta2 0.999, grad_scale 0.7, up to 5 steps from zero)
 * keep an absmax of at most 2^-128, whose reciprocal overflows fp32
 * (ops_q8_scale's cap): block 1's v = 1e-3 g^2 (g ~ 1e-19) and block 3's
 * m (g ~ 1e-39, subnormal; its v underflows to 0). */
static inline void tu_tiny_blocks(float *g, size_t n, int block, uint64_t *seed)
{
	for (size_t i = (size_t)block; i < n && i < 4 * (size_t)block; i++) {
		const size_t b = i / (size_t)block;
		if (b == 1 || b == 3)
			g[i] = (float)(tu_normal(seed) * (b == 1 ? 1e-19 : 1e-39));
	}
}
/* Max over i of |a-b| / (|b| + floor): relative error with an absolute floor
 * for entries near zero. */
static inline double tu_max_relerr(const float *a, const double *b, size_t n, double floor_)
{
	double worst = 0;
	for (size_t i = 0; i < n; i++) {
		double e = fabs((double)a[i] - b[i]) / (fabs(b[i]) + floor_);
		if (!(e <= worst)) /* catches NaN */
			worst = isnan(e) ? INFINITY : e;
	}
	return worst;
}

/* kB of a /proc/self/status field (VmRSS, VmHWM). */
static inline long tu_status_kb(const char *field)
{
	FILE *f = fopen("/proc/self/status", "r");
	cr_assert(f);
	char line[256];
	long kb = -1;
	while (kb < 0 && fgets(line, sizeof line, f))
		if (!strncmp(line, field, strlen(field)) && line[strlen(field)] == ':')
			kb = strtol(line + strlen(field) + 1, NULL, 10);
	fclose(f);
	cr_assert_geq(kb, 0, "no %s", field);
	return kb;
}

/* The peak resident set from now on: VmHWM reset to VmRSS (clear_refs 5). */
static inline long tu_peak_from_now(void)
{
	FILE *f = fopen("/proc/self/clear_refs", "w");
	cr_assert(f);
	fputs("5", f);
	fclose(f);
	return tu_status_kb("VmRSS");
}

#endif

/* splitmix64 streams; see rng.h. */
#include <math.h>

#include "util/rng.h"

static uint64_t mix(uint64_t z)
{
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

uint64_t rng_hash3(uint64_t a, uint64_t b, uint64_t c)
{
	return mix((mix(mix(a + 0x9e3779b97f4a7c15ULL) ^ b) + 0x632be59bd9b4e019ULL) ^ c);
}

void rng_seed(struct st_rng *r, uint64_t seed, uint64_t stream)
{
	r->state = rng_hash3(seed, stream, 0x5eed5eed5eedULL);
}

uint64_t rng_next(struct st_rng *r)
{
	return mix(r->state += 0x9e3779b97f4a7c15ULL);
}

double rng_uniform(struct st_rng *r)
{
	return (double)(rng_next(r) >> 11) * (1.0 / 9007199254740992.0);
}

double rng_normal(struct st_rng *r)
{
	double u1 = rng_uniform(r), u2 = rng_uniform(r);
	if (u1 < 1e-300)
		u1 = 1e-300;
	return sqrt(-2.0 * log(u1)) * cos(6.283185307179586476925 * u2);
}

/* Counter-based, reproducible random numbers (splitmix64 streams).
 *
 * A stream is named by (seed, stream id), so a draw never depends on what
 * other code drew before it: data order, init and sampling are reproducible
 * across resumes and thread counts. */
#ifndef ST_RNG_H
#define ST_RNG_H

#include <stdint.h>

struct st_rng {
	uint64_t state;
};

void rng_seed(struct st_rng *r, uint64_t seed, uint64_t stream);
uint64_t rng_next(struct st_rng *r);
double rng_uniform(struct st_rng *r); /* [0,1) with 53 random bits */
double rng_normal(struct st_rng *r);  /* standard normal (Box-Muller) */
/* A well-mixed hash of several 64-bit words (for stateless choices). */
uint64_t rng_hash3(uint64_t a, uint64_t b, uint64_t c);

#endif

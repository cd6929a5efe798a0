/* Small deterministic generators for the data code (internal). */
#ifndef STRATA_PAR_DATA_RNG_H
#define STRATA_PAR_DATA_RNG_H

#include <stdint.h>

/* splitmix64 (Steele, Lea, Flood 2014): a 64-bit state stepped by a Weyl
 * constant and a bijective finaliser. Enough for corpus generation. */
static inline uint64_t rng_mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

static inline uint64_t rng_next(uint64_t *state) {
  *state += 0x9e3779b97f4a7c15ULL;
  return rng_mix(*state);
}

/* Uniform in (0, 1): 53 random bits, never 0 (so -log(u) is finite). */
static inline double rng_uniform(uint64_t *state) {
  return ((double)(rng_next(state) >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}

#endif

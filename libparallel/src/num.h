/* Numbers in messages (internal): the shortest decimal that reads back as
 * the same double, so that "x = 1 must be below 1" cannot happen when x is
 * 0.99999999999 or 1.0000000000000002 (%g would print both as 1). */
#ifndef STRATA_PAR_NUM_H
#define STRATA_PAR_NUM_H

#include <stdio.h>
#include <stdlib.h>

typedef struct {
  char s[32];
} par_num_t;

static inline par_num_t par_num(double x) {
  par_num_t r;
  for (int p = 1; p <= 17; p++) {
    snprintf(r.s, sizeof r.s, "%.*g", p, x);
    if (strtod(r.s, NULL) == x) break;
  }
  return r;
}

#endif

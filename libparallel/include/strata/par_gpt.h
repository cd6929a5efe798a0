/* strata/par_gpt.h: the GPT model (filled in by libparallel/src/gpt*.c). Included from strata/parallel.h. */
#ifndef STRATA_PAR_GPT_H
#define STRATA_PAR_GPT_H
#endif

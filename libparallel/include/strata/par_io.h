/* strata/par_io.h: data, metrics and checkpoints (HDF5). Included from strata/parallel.h. */
#ifndef STRATA_PAR_IO_H
#define STRATA_PAR_IO_H
#endif

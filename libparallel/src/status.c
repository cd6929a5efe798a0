#include <strata/parallel.h>

const char *par_strerror(int code) { return strata_status_string(code); }

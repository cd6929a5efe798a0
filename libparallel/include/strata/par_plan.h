/* strata/par_plan.h: the planner (cost model). Included from strata/parallel.h. */
#ifndef STRATA_PAR_PLAN_H
#define STRATA_PAR_PLAN_H
#endif

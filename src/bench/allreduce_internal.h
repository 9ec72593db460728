/* allreduce_internal.h — what the all-reduce command's run and sweep (allreduce_launch.c) share with
 * its report (allreduce_report.c). */
#ifndef TLM_BENCH_ALLREDUCE_INTERNAL_H
#define TLM_BENCH_ALLREDUCE_INTERNAL_H

#include "tlm/allreduce_bench.h"
#include "tlm/report.h"

/* the report's row columns (allreduce_bench.h: tlm_allreduce_report_begin) */
extern const tlm_column tlm_allreduce_columns[];
extern const int tlm_allreduce_num_columns;

/* "fp32" or "bf16" */
const char *tlm_allreduce_dtype_text(tlm_dtype dt);

#endif

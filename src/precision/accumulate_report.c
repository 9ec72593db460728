/* lab_report.c — the tables of the accumulation experiment (precision_lab.h): a row per way with the
 * addend and the sum as stored and exactly, the error and its parts, and why each sum came out so. */
#include <stdio.h>

#include "tlm/precision_lab.h"

static const tlm_column accumulate_columns[] = {
    {"way", TLM_FIELD_STR, "way", "", -19, 0, 0, TLM_COL_KEY},
    TLM_COL_HIDDEN("sum_dtype", TLM_FIELD_STR),
    TLM_COL_HIDDEN("addend_dtype", TLM_FIELD_STR),
    TLM_COL_HIDDEN("addend", TLM_FIELD_NUM),
    {"addend_exact", TLM_FIELD_STR, "addend as stored", "", -34, 0, 0, 0},
    {"sum", TLM_FIELD_NUM, "sum", "", 11, 6, 0, 0},
    {"sum_exact", TLM_FIELD_STR, "sum, exactly", "", -26, 0, 0, 0},
    {"error", TLM_FIELD_NUM, "error", "", 12, 4, 0, TLM_COL_SCI},
    TLM_COL_HIDDEN("representation_error", TLM_FIELD_NUM),
    TLM_COL_HIDDEN("rounding_error", TLM_FIELD_NUM),
    TLM_COL_HIDDEN("inexact_adds", TLM_FIELD_INT),
    TLM_COL_HIDDEN("spacing_at_sum", TLM_FIELD_NUM),
    TLM_COL_HIDDEN("last_increment", TLM_FIELD_NUM),
    TLM_COL_HIDDEN("last_change", TLM_FIELD_INT),
};

void tlm_accumulate_report_ways(tlm_report *rep, const tlm_accumulation *acc) {
    tlm_report_table(rep, "ways", accumulate_columns, (int)(sizeof accumulate_columns / sizeof accumulate_columns[0]));
    tlm_accumulate_analysis an[TLM_ACC_NUM_WAYS];
    char why[640], line[700], addend[64], sum[64];
    for (int w = 0; w < TLM_ACC_NUM_WAYS; w++) {
        const tlm_accumulate_way_info *info = tlm_accumulate_way_get((tlm_accumulate_way)w);
        tlm_accumulate_analyze(acc, (tlm_accumulate_way)w, TLM_ACCUMULATE_VALUE, &an[w]);
        tlm_exact_decimal(an[w].addend, addend, sizeof addend);
        tlm_exact_decimal(an[w].sum, sum, sizeof sum);
        tlm_report_row_begin(rep);
        tlm_report_str(rep, "way", info->name);
        tlm_report_str(rep, "sum_dtype", tlm_act_dtype_name(info->sum_dtype));
        tlm_report_str(rep, "addend_dtype", tlm_act_dtype_name(info->addend_dtype));
        tlm_report_num(rep, "addend", an[w].addend);
        tlm_report_str(rep, "addend_exact", addend);
        tlm_report_num(rep, "sum", an[w].sum);
        tlm_report_str(rep, "sum_exact", sum);
        tlm_report_num(rep, "error", an[w].error);
        tlm_report_num(rep, "representation_error", an[w].representation);
        tlm_report_num(rep, "rounding_error", an[w].rounding);
        tlm_report_int(rep, "inexact_adds", an[w].inexact_adds);
        tlm_report_num(rep, "spacing_at_sum", an[w].spacing);
        tlm_report_num(rep, "last_increment", an[w].last_increment);
        tlm_report_int(rep, "last_change", an[w].last_change);
        tlm_report_row_end(rep);
    }
    for (int w = 0; w < TLM_ACC_NUM_WAYS; w++) {
        tlm_accumulate_why((tlm_accumulate_way)w, &an[w], why, sizeof why);
        snprintf(line, sizeof line, "%-19s %s", tlm_accumulate_way_get((tlm_accumulate_way)w)->name, why);
        tlm_report_list(rep, "why", line);
    }
}

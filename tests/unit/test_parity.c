#include <math.h>

#include "engine/parity.h"
#include "test.h"

static void test_identical_rows(void)
{
    float a[4] = {0.5f, -1.0f, 2.0f, 0.0f};
    parity_row r;
    parity_compare_row(a, a, 4, &r);
    CHECK(r.max_abs == 0 && r.max_rel == 0);
    CHECK(fabs(r.cosine - 1.0) < 1e-12);
    CHECK(r.argmax_ours == 2 && r.argmax_ref == 2);
    CHECK(fabs(r.ref_margin - 1.5) < 1e-12);
}

static void test_differences(void)
{
    float ours[4] = {0.5f, -1.0f, 2.0f, 0.001f};
    float ref[4] = {0.5f, -1.5f, 1.0f, 0.0f};
    parity_row r;
    parity_compare_row(ours, ref, 4, &r);
    CHECK(fabs(r.max_abs - 1.0) < 1e-9);
    /* relative: |2-1|/1 = 1 beats |-1+1.5|/1.5; the 0.001 vs 0 entry is below the floor */
    CHECK(fabs(r.max_rel - 1.0) < 1e-9);
    CHECK(r.argmax_ours == 2 && r.argmax_ref == 2);
    float nanrow[2] = {NAN, 0};
    float zero[2] = {0, 0};
    parity_compare_row(nanrow, zero, 2, &r);
    CHECK(isinf(r.max_abs));
}

static void test_summary_separates_near_ties(void)
{
    parity_row rows[3] = {
        {.max_abs = 1e-6, .argmax_ours = 1, .argmax_ref = 1, .ref_margin = 0.5, .cosine = 1},
        /* a near tie: margin below twice the error */
        {.max_abs = 1e-5, .argmax_ours = 2, .argmax_ref = 3, .ref_margin = 1e-5, .cosine = 1},
        /* a real disagreement */
        {.max_abs = 1e-3, .argmax_ours = 4, .argmax_ref = 5, .ref_margin = 0.2, .cosine = 0.9},
    };
    parity_summary s;
    parity_summarize(rows, 3, &s);
    CHECK(s.n_rows == 3 && s.argmax_agree == 1);
    CHECK(s.argmax_real_disagreements == 1);
    CHECK(s.worst_row == 2 && fabs(s.max_abs - 1e-3) < 1e-12);
    CHECK(fabs(s.min_cosine - 0.9) < 1e-12);
}

TEST_MAIN(TEST_CASE(test_identical_rows), TEST_CASE(test_differences),
          TEST_CASE(test_summary_separates_near_ties))

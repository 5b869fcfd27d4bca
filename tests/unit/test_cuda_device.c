/* The CUDA device probe. Without a device (CI) the probe must fail cleanly
 * with a message; with one (the GPU machine) it must describe the card and
 * measure a plausible copy bandwidth. */
#include "test.h"

#if MEMRA_CUDA
#include "backend/cuda/cuda_device.h"

static void test_device_probe(void)
{
    memra_err e;
    cuda_device_info info;
    int n = cuda_device_count();
    if (n == 0) {
        CHECK(cuda_device_query(0, &info, &e) == -1);
        CHECK(strstr(e.msg, "CUDA device 0: not present") != NULL);
        double gbs;
        CHECK(cuda_measure_copy_bandwidth(0, 1 << 20, 1, &gbs, &e) == -1);
        return;
    }
    CHECK(cuda_device_query(0, &info, &e) == 0);
    CHECK(info.name[0] != '\0' && info.sm_count > 0 && info.total_mem > 0);
    CHECK(cuda_device_query(n, &info, &e) == -1);
    CHECK(cuda_device_query(0, &info, &e) == 0);
    double gbs = 0;
    CHECK_MSG(cuda_measure_copy_bandwidth(0, (size_t)1 << 30, 10, &gbs, &e) == 0, "%s", e.msg);
    printf("# device 0: %s, sm_%d%d, %d SMs, %.1f GiB, class %s, copy %.0f GB/s\n", info.name,
           info.cc_major, info.cc_minor, info.sm_count, info.total_mem / 1073741824.0,
           device_class_name(info.klass), gbs);
    CHECK(gbs > 100.0);
}

/* The defaults keyed on the device: the tensor-core paths from sm_80,
 * PDL from sm_90, Hopper's prefill chunk; the decode GEMM left to the
 * engine's plan (-1) where it can run, forced by MEMRA_CUDA_DGEMM, off
 * with MEMRA_CUDA_GEMM=0 unless forced, never on an older card; a bad
 * value named. */
static void test_tuning(void)
{
    memra_err e;
    cuda_device_info hopper = {.cc_major = 9, .cc_minor = 0, .sm_count = 132,
                               .klass = DEVICE_CLASS_HOPPER};
    cuda_device_info ampere = {.cc_major = 8, .cc_minor = 6, .sm_count = 84};
    cuda_device_info old = {.cc_major = 7, .cc_minor = 5, .sm_count = 40};
    cuda_tuning t;
    unsetenv("MEMRA_CUDA_DGEMM");
    unsetenv("MEMRA_CUDA_GRAPHS");
    CHECK(cuda_tuning_for(&hopper, &t, &e) == 0 && t.dgemm == -1 && t.dgemm_blocks_per_sm == 2);
    CHECK(t.gemm && t.flash && t.pdl && t.graphs && t.prefill_chunk == 512);
    CHECK(cuda_tuning_for(&ampere, &t, &e) == 0 && t.gemm && t.flash && !t.pdl &&
          t.dgemm == -1 && t.prefill_chunk == 64);
    CHECK(cuda_tuning_for(&old, &t, &e) == 0 && t.dgemm == 0 && !t.gemm && !t.flash && !t.pdl);
    setenv("MEMRA_CUDA_DGEMM", "1", 1);
    CHECK(cuda_tuning_for(&hopper, &t, &e) == 0 && t.dgemm == 1);
    CHECK(cuda_tuning_for(&old, &t, &e) == 0 && t.dgemm == 0);
    setenv("MEMRA_CUDA_DGEMM", "0", 1);
    CHECK(cuda_tuning_for(&hopper, &t, &e) == 0 && t.dgemm == 0);
    setenv("MEMRA_CUDA_DGEMM", "2", 1);
    CHECK(cuda_tuning_for(&hopper, &t, &e) == -1 && strstr(e.msg, "MEMRA_CUDA_DGEMM=2"));
    unsetenv("MEMRA_CUDA_DGEMM");
    setenv("MEMRA_CUDA_GEMM", "0", 1);
    CHECK(cuda_tuning_for(&hopper, &t, &e) == 0 && t.gemm == 0 && t.dgemm == 0);
    setenv("MEMRA_CUDA_DGEMM", "1", 1);
    CHECK(cuda_tuning_for(&hopper, &t, &e) == 0 && t.dgemm == 1);
    unsetenv("MEMRA_CUDA_DGEMM");
    unsetenv("MEMRA_CUDA_GEMM");
    setenv("MEMRA_CUDA_GRAPHS", "0", 1);
    CHECK(cuda_tuning_for(&hopper, &t, &e) == 0 && t.graphs == 0);
    unsetenv("MEMRA_CUDA_GRAPHS");
}

TEST_MAIN(TEST_CASE(test_device_probe), TEST_CASE(test_tuning))
#else
static void test_cuda_disabled(void) { CHECK(!MEMRA_CUDA); }
TEST_MAIN(TEST_CASE(test_cuda_disabled))
#endif

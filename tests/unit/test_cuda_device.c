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

TEST_MAIN(TEST_CASE(test_device_probe))
#else
static void test_cuda_disabled(void) { CHECK(!MEMRA_CUDA); }
TEST_MAIN(TEST_CASE(test_cuda_disabled))
#endif

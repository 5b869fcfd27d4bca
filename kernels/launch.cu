#include "kernels/launch.cuh"

#include <atomic>

// -1 until a backend decides; a device that cannot (or a setting that
// does not) take PDL turns it off for the process.
static std::atomic<int> pdl_state{-1};

extern "C" void launch_set_pdl(int on)
{
    int cur = pdl_state.load();
    while (cur != 0 && !pdl_state.compare_exchange_weak(cur, on ? 1 : 0)) {
    }
}

extern "C" int launch_pdl_on(void) { return pdl_state.load() == 1; }

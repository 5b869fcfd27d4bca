#include "backend/moe_route.h"

#include <math.h>

void moe_route_token(float *p, int n_experts, int n_used, int norm_topk, int *ids, float *w)
{
    float mx = -INFINITY, sum = 0;
    for (int e = 0; e < n_experts; e++)
        if (p[e] > mx)
            mx = p[e];
    for (int e = 0; e < n_experts; e++) {
        p[e] = expf(p[e] - mx);
        sum += p[e];
    }
    for (int e = 0; e < n_experts; e++)
        p[e] /= sum;
    /* Selection by repeated scans: n_used is small (8 of 128 at most in the
     * families we load), and the scan order fixes the tie rule. */
    for (int k = 0; k < n_used; k++) {
        int best = -1;
        for (int e = 0; e < n_experts; e++) {
            int taken = 0;
            for (int u = 0; u < k; u++)
                taken |= ids[u] == e;
            if (!taken && (best < 0 || p[e] > p[best]))
                best = e;
        }
        ids[k] = best;
        if (w)
            w[k] = p[best];
    }
    if (w && norm_topk) {
        float s = 0;
        for (int k = 0; k < n_used; k++)
            s += w[k];
        for (int k = 0; k < n_used; k++)
            w[k] /= s;
    }
}

/* libFuzzer target for the safetensors reader: any input either opens, and
 * then every tensor's bytes lie inside the input and every name is found
 * again by st_find, or fails with a one-line message. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "format/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    st_set s;
    memra_err err;
    if (st_open_buffer(data, size, "fuzz", &s, &err) != 0) {
        if (!err.msg[0] || strchr(err.msg, '\n'))
            abort();
        st_close(&s);
        return 0;
    }
    volatile uint8_t sink = 0;
    for (int i = 0; i < s.n_tensors; i++) {
        const st_tensor *t = &s.tensors[i];
        if (t->data < data || t->nbytes > size || t->data + t->nbytes > data + size)
            abort();
        for (uint64_t j = 0; j < t->nbytes; j++)
            sink ^= t->data[j];
        if (st_find(&s, t->name) != t)
            abort();
    }
    (void)sink;
    st_close(&s);
    return 0;
}

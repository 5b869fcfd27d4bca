/* libFuzzer target for the GGUF reader: any input must either open (and
 * then every tensor view must lie inside the input) or fail with a message
 * that names the input; it must never crash, leak or read out of bounds. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "format/gguf.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    gguf_file f;
    memra_err err;
    err.msg[0] = '\0';
    if (gguf_open_buffer(data, size, "fuzz.gguf", &f, &err) == 0) {
        for (uint64_t i = 0; i < f.n_tensors; i++) {
            const gguf_tensor *t = &f.tensors[i];
            if (t->data < data || t->nbytes > size || (size_t)(t->data - data) > size - t->nbytes)
                abort();
            if (gguf_find_tensor(&f, t->name) == NULL)
                abort();
        }
        for (uint64_t i = 0; i < f.n_kv; i++)
            if (gguf_find_kv(&f, f.kv[i].key) == NULL)
                abort();
    } else if (strncmp(err.msg, "fuzz.gguf: ", 11) != 0) {
        abort();
    }
    gguf_close(&f);
    return 0;
}

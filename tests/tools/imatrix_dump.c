/* imatrix_dump FILE: read an importance matrix with imatrix_read (either
 * format) and print what it holds as one JSON object, for the integration
 * tests: chunks, dataset, and per entry its name, value count, call count
 * and the smallest, largest and mean value. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>

#include "quant/imatrix.h"

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: imatrix_dump FILE\n");
        return 2;
    }
    imatrix m;
    memra_err err;
    if (imatrix_read(argv[1], &m, &err) != 0) {
        fprintf(stderr, "imatrix_dump: %s\n", err.msg);
        return 1;
    }
    json_t *j = json_object();
    json_object_set_new(j, "chunks", json_integer(m.n_chunks));
    json_object_set_new(j, "dataset", m.dataset ? json_string(m.dataset) : json_null());
    json_t *es = json_array();
    for (int i = 0; i < m.n_entries; i++) {
        const imatrix_entry *e = &m.entries[i];
        double mn = e->values[0], mx = e->values[0], sum = 0;
        for (int64_t k = 0; k < e->n_values; k++) {
            mn = e->values[k] < mn ? e->values[k] : mn;
            mx = e->values[k] > mx ? e->values[k] : mx;
            sum += e->values[k];
        }
        json_t *o = json_object();
        json_object_set_new(o, "name", json_string(e->name));
        json_object_set_new(o, "n_values", json_integer(e->n_values));
        json_object_set_new(o, "n_calls", json_integer(e->n_calls));
        json_object_set_new(o, "min", json_real(mn));
        json_object_set_new(o, "max", json_real(mx));
        json_object_set_new(o, "mean", json_real(sum / (double)e->n_values));
        json_array_append_new(es, o);
    }
    json_object_set_new(j, "entries", es);
    char *txt = json_dumps(j, JSON_COMPACT | JSON_PRESERVE_ORDER);
    puts(txt);
    free(txt);
    json_decref(j);
    imatrix_free(&m);
    return 0;
}

/* The tiny real model the engine tests share: stories260K (llama, 260K
 * parameters, models/ of the test data), its path and its checkpoint
 * opened the one way every test opens it. Include after test.h. */
#ifndef MEMRA_TEST_MODEL_H
#define MEMRA_TEST_MODEL_H

#include <stdio.h>

#include "core/err.h"
#include "model/checkpoint.h"

static inline void stories_path(char *buf, size_t n)
{
    snprintf(buf, n, "%s/models/stories260K.gguf", test_data_dir());
}

/* 0, or -1 with the failure recorded against the current test. */
static inline int open_stories(checkpoint *ck)
{
    char path[1024];
    memra_err err = {{0}};
    stories_path(path, sizeof path);
    if (!test_need_file(path))
        return -1;
    if (checkpoint_open(path, ck, &err) != 0) {
        CHECK_MSG(0, "%s", err.msg);
        return -1;
    }
    return 0;
}

#endif

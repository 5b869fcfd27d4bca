/* A secret drawn once per process (getrandom), for hashes whose values
 * outsiders must not be able to compute: content-addressed caches that
 * requests of different clients share (the KV prefix index, the grammar
 * mask cache), where a crafted collision would hand one client's request
 * data another computed. Never 0. */
#ifndef MEMRA_CORE_SALT_H
#define MEMRA_CORE_SALT_H

#include <stdint.h>

uint64_t memra_process_salt(void);

#endif

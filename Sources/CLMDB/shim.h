#ifndef ENTITYSTORE_CLMDB_SHIM_H
#define ENTITYSTORE_CLMDB_SHIM_H

#include <lmdb.h>
#include <stdint.h>
#include <string.h>

/// The order LMDB's default comparison gives (`mdb_cmp_memn`: bytes compared as unsigned, then the shorter key
/// first), computed eight bytes at a time. A store's files are the same with it or without it: every key and value
/// sorts exactly where LMDB's own comparison puts it, so the command-line tools and older builds read and write the
/// same trees. It only replaces the two calls per comparison (LMDB's and libc's `memcmp`) that dominate a lookup of an
/// 8-byte primary key. LMDB only reads the sign of the result.
static inline int entitystore_compare_bytes(const MDB_val *a, const MDB_val *b) {
    size_t length = a->mv_size < b->mv_size ? a->mv_size : b->mv_size;
    const unsigned char *p = (const unsigned char *)a->mv_data;
    const unsigned char *q = (const unsigned char *)b->mv_data;
    while (length >= 8) {
        uint64_t x, y;
        memcpy(&x, p, 8);
        memcpy(&y, q, 8);
        if (x != y) {
            x = __builtin_bswap64(x);
            y = __builtin_bswap64(y);
            return x < y ? -1 : 1;
        }
        p += 8;
        q += 8;
        length -= 8;
    }
    while (length > 0) {
        if (*p != *q) return *p < *q ? -1 : 1;
        p++;
        q++;
        length--;
    }
    return a->mv_size < b->mv_size ? -1 : (a->mv_size > b->mv_size ? 1 : 0);
}

#endif

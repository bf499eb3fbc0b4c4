#ifndef ENTITYSTORE_CLMDB_SHIM_H
#define ENTITYSTORE_CLMDB_SHIM_H

#include <lmdb.h>

#endif

#ifndef ENTITYSTORE_CLIBPQ_SHIM_H
#define ENTITYSTORE_CLIBPQ_SHIM_H

#include <libpq-fe.h>

#endif

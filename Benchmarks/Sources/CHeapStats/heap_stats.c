#include <malloc.h>
#include "heap_stats.h"

size_t entitystore_heap_in_use(void) {
    struct mallinfo2 info = mallinfo2();
    return info.uordblks;
}

#include <malloc.h>
#include "heap_stats.h"

size_t entitystore_heap_in_use(void) {
    struct mallinfo2 info = mallinfo2();
    /* Blocks in the arenas and blocks mapped on their own: large arrays and tables (a context's object table, an
       undo history) are mapped, and counting the arenas alone left them out. */
    return info.uordblks + info.hblkhd;
}

void entitystore_heap_trim(void) { malloc_trim(0); }

#if __has_include(<valgrind/callgrind.h>)
#include <valgrind/callgrind.h>
void entitystore_profile_toggle(void) { CALLGRIND_TOGGLE_COLLECT; }
#else
void entitystore_profile_toggle(void) {}
#endif

#include <stddef.h>

/// Bytes the C heap has handed out and not taken back (glibc's mallinfo2().uordblks).
size_t entitystore_heap_in_use(void);

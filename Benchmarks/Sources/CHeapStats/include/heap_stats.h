#include <stddef.h>

/// Bytes the C heap has handed out and not taken back (glibc's mallinfo2().uordblks).
size_t entitystore_heap_in_use(void);

/* Returns the heap's free memory to the system (`malloc_trim(0)`), so that the resident size counts what is held. */
void entitystore_heap_trim(void);

/// Switches callgrind's collection on or off (`valgrind --tool=callgrind --collect-atstart=no` then profiles only
/// the measured sections); does nothing outside valgrind or where valgrind's headers are missing.
void entitystore_profile_toggle(void);

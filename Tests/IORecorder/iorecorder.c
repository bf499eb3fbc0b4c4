// iorecorder: an LD_PRELOAD shim for the crash-consistency tests. It records every write, sync and truncation a
// process makes on the files of one directory (IOREC_DIR), with the data written, into a log (IOREC_LOG), and the
// acknowledgements the workload prints ("ack N" on standard output), in the order they happened.
//
// It covers the calls LMDB and the library make on a store's files: open/openat (with O_CREAT, O_DSYNC, O_SYNC),
// write, pwrite, pwritev, writev (at the file's offset), fsync, fdatasync, ftruncate, close. An fd opened with
// O_DSYNC or O_SYNC makes each of its writes a barrier (LMDB writes its meta page through such an fd). The lock file
// (lock.mdb) is left out: LMDB rebuilds it at open. msync is not recorded: LMDB without
// MDB_WRITEMAP does not msync. link, rename and unlink (absolute paths) of the directory's files are recorded as
// name operations (a rename as a link and an unlink): `store-inspect backup` names its finished copy so.
//
// Faults: with IOREC_FAIL_AT=N, the N-th call that writes, syncs or truncates a watched file (counted from 1 in the
// process) fails once, as IOREC_FAIL_MODE says: "eio" (-1, errno EIO, nothing written), "enospc" (-1, errno
// ENOSPC, nothing written), or "short" (a write writes its first half and returns that count; a sync or truncation
// fails with EIO). The shim says so on standard error ("iorecorder: fault ..."), so a run without that line has
// fewer calls than N. IOREC_LOG may be left unset to inject faults without recording.
//
// Log records: kind (1 byte), file (4 bytes), offset (8 bytes), length (8 bytes), then `length` bytes of data
// for a write or a file's path for an open. Kinds: 1 write, 2 sync, 3 ack (offset: N), 4 truncate (offset: size),
// 5 open (data: path), 6 link (data: old path, a zero byte, new path), 7 unlink (data: path).
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>

enum { KIND_WRITE = 1, KIND_SYNC = 2, KIND_ACK = 3, KIND_TRUNCATE = 4, KIND_OPEN = 5, KIND_LINK = 6, KIND_UNLINK = 7 };
enum { MAX_FDS = 4096, MAX_FILES = 64 };

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static int log_fd = -1;
static const char *watched_dir;
static size_t watched_length;
// Per fd: the file's index + 1 (0: not watched), and whether its writes are synchronous.
static int fd_file[MAX_FDS];
static int fd_sync[MAX_FDS];
static char *files[MAX_FILES];
static int file_count;

enum { FAULT_NONE = 0, FAULT_EIO = 1, FAULT_ENOSPC = 2, FAULT_SHORT = 3 };
static long fail_at;
static int fail_mode;
static long calls;

static ssize_t (*real_write)(int, const void *, size_t);
static ssize_t (*real_pwrite)(int, const void *, size_t, off_t);
static ssize_t (*real_pwrite64)(int, const void *, size_t, off_t);
static ssize_t (*real_writev)(int, const struct iovec *, int);
static ssize_t (*real_pwritev)(int, const struct iovec *, int, off_t);
static ssize_t (*real_pwritev64)(int, const struct iovec *, int, off_t);
static int (*real_fsync)(int);
static int (*real_fdatasync)(int);
static int (*real_ftruncate)(int, off_t);
static int (*real_ftruncate64)(int, off_t);
static int (*real_close)(int);
static int (*real_open)(const char *, int, ...);
static int (*real_open64)(const char *, int, ...);
static int (*real_openat)(int, const char *, int, ...);
static int (*real_openat64)(int, const char *, int, ...);
static int (*real_link)(const char *, const char *);
static int (*real_rename)(const char *, const char *);
static int (*real_unlink)(const char *);

__attribute__((constructor)) static void setup(void) {
    real_write = dlsym(RTLD_NEXT, "write");
    real_pwrite = dlsym(RTLD_NEXT, "pwrite");
    real_pwrite64 = dlsym(RTLD_NEXT, "pwrite64");
    real_writev = dlsym(RTLD_NEXT, "writev");
    real_pwritev = dlsym(RTLD_NEXT, "pwritev");
    real_pwritev64 = dlsym(RTLD_NEXT, "pwritev64");
    real_fsync = dlsym(RTLD_NEXT, "fsync");
    real_fdatasync = dlsym(RTLD_NEXT, "fdatasync");
    real_ftruncate = dlsym(RTLD_NEXT, "ftruncate");
    real_ftruncate64 = dlsym(RTLD_NEXT, "ftruncate64");
    real_close = dlsym(RTLD_NEXT, "close");
    real_open = dlsym(RTLD_NEXT, "open");
    real_open64 = dlsym(RTLD_NEXT, "open64");
    real_openat = dlsym(RTLD_NEXT, "openat");
    real_openat64 = dlsym(RTLD_NEXT, "openat64");
    real_link = dlsym(RTLD_NEXT, "link");
    real_rename = dlsym(RTLD_NEXT, "rename");
    real_unlink = dlsym(RTLD_NEXT, "unlink");
    watched_dir = getenv("IOREC_DIR");
    watched_length = watched_dir ? strlen(watched_dir) : 0;
    const char *at = getenv("IOREC_FAIL_AT");
    const char *mode = getenv("IOREC_FAIL_MODE");
    fail_at = at ? atol(at) : 0;
    fail_mode = !mode || strcmp(mode, "eio") == 0 ? FAULT_EIO
        : strcmp(mode, "enospc") == 0          ? FAULT_ENOSPC
        : strcmp(mode, "short") == 0           ? FAULT_SHORT
                                               : FAULT_NONE;
    const char *path = getenv("IOREC_LOG");
    if (path && real_open) log_fd = real_open(path, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND, 0600);
}

static void put(const void *bytes, size_t length) {
    const char *p = bytes;
    while (length > 0) {
        ssize_t n = real_write(log_fd, p, length);
        if (n <= 0) abort();  // a lost record would make every state built from the log wrong
        p += n;
        length -= (size_t)n;
    }
}

// Called with the lock held.
static void record(uint8_t kind, uint32_t file, uint64_t offset, uint64_t length, const struct iovec *iov, int count) {
    if (log_fd < 0) return;
    put(&kind, 1);
    put(&file, 4);
    put(&offset, 8);
    put(&length, 8);
    for (int i = 0; i < count; i++) put(iov[i].iov_base, iov[i].iov_len);
}

static void opened(int fd, const char *path, int flags) {
    if (fd < 0 || fd >= MAX_FDS || !watched_dir || !path) return;
    pthread_mutex_lock(&lock);
    fd_file[fd] = 0;
    if (strncmp(path, watched_dir, watched_length) == 0 && !strstr(path, "lock.mdb")) {
        int index = -1;
        for (int i = 0; i < file_count; i++) {
            if (strcmp(files[i], path) == 0) index = i;
        }
        if (index < 0 && file_count < MAX_FILES) {
            index = file_count++;
            files[index] = strdup(path);
            struct iovec name = {(void *)path, strlen(path)};
            record(KIND_OPEN, (uint32_t)index, 0, name.iov_len, &name, 1);
        }
        if (index >= 0) {
            fd_file[fd] = index + 1;
            fd_sync[fd] = (flags & (O_DSYNC | O_SYNC)) != 0;
        }
    }
    pthread_mutex_unlock(&lock);
}

static int watched(int fd) { return fd >= 0 && fd < MAX_FDS && fd_file[fd] != 0; }

// Counts a call on a watched fd; returns the fault it must suffer (FAULT_NONE for all but the IOREC_FAIL_AT-th).
static int fault(int fd, const char *call) {
    if (fail_at <= 0 || !watched(fd)) return FAULT_NONE;
    pthread_mutex_lock(&lock);
    long n = ++calls;
    pthread_mutex_unlock(&lock);
    if (n != fail_at) return FAULT_NONE;
    static const char *names[] = {"", "eio", "enospc", "short"};
    char line[160];
    int length = snprintf(line, sizeof line, "iorecorder: fault %s at call %ld (%s)\n", names[fail_mode], n, call);
    if (length > 0) real_write(2, line, (size_t)length);
    return fail_mode;
}

// The result of a failed call: -1 with errno set.
static int failed(int fault) {
    errno = fault == FAULT_ENOSPC ? ENOSPC : EIO;
    return -1;
}

// The length a write with `fault` writes (half of it when short).
static size_t faulted_length(int fault, size_t length) { return fault == FAULT_SHORT && length > 1 ? length / 2 : length; }

static void written(int fd, off_t offset, const struct iovec *iov, int count, ssize_t done) {
    if (done <= 0) return;
    pthread_mutex_lock(&lock);
    // Only what the call wrote: a short write records its first `done` bytes.
    struct iovec parts[64];
    int used = 0;
    size_t left = (size_t)done;
    for (int i = 0; i < count && left > 0 && used < 64; i++) {
        size_t take = iov[i].iov_len < left ? iov[i].iov_len : left;
        parts[used].iov_base = iov[i].iov_base;
        parts[used].iov_len = take;
        used++;
        left -= take;
    }
    uint32_t file = (uint32_t)(fd_file[fd] - 1);
    record(KIND_WRITE, file, (uint64_t)offset, (uint64_t)done - left, parts, used);
    if (fd_sync[fd]) record(KIND_SYNC, file, 0, 0, NULL, 0);
    pthread_mutex_unlock(&lock);
}

static void synced(int fd) {
    pthread_mutex_lock(&lock);
    record(KIND_SYNC, (uint32_t)(fd_file[fd] - 1), 0, 0, NULL, 0);
    pthread_mutex_unlock(&lock);
}

static int mode_of(int flags, va_list args) {
    return (flags & O_CREAT) || (flags & O_TMPFILE) == O_TMPFILE ? va_arg(args, int) : 0;
}

int open(const char *path, int flags, ...) {
    va_list args;
    va_start(args, flags);
    int mode = mode_of(flags, args);
    va_end(args);
    int fd = real_open(path, flags, mode);
    opened(fd, path, flags);
    return fd;
}

int open64(const char *path, int flags, ...) {
    va_list args;
    va_start(args, flags);
    int mode = mode_of(flags, args);
    va_end(args);
    int fd = real_open64(path, flags, mode);
    opened(fd, path, flags);
    return fd;
}

int openat(int dir, const char *path, int flags, ...) {
    va_list args;
    va_start(args, flags);
    int mode = mode_of(flags, args);
    va_end(args);
    int fd = real_openat(dir, path, flags, mode);
    if (path[0] == '/') opened(fd, path, flags);
    return fd;
}

int openat64(int dir, const char *path, int flags, ...) {
    va_list args;
    va_start(args, flags);
    int mode = mode_of(flags, args);
    va_end(args);
    int fd = real_openat64(dir, path, flags, mode);
    if (path[0] == '/') opened(fd, path, flags);
    return fd;
}

static int in_watched_dir(const char *path) {
    return watched_dir && path && path[0] == '/' && strncmp(path, watched_dir, watched_length) == 0;
}

// A name operation (link, or rename as a link and an unlink) on watched paths, recorded once it succeeded.
static void named(uint8_t kind, const char *from, const char *to) {
    pthread_mutex_lock(&lock);
    struct iovec parts[3] = {{(void *)from, strlen(from)}, {"\0", 1}, {(void *)to, to ? strlen(to) : 0}};
    uint64_t length = to ? parts[0].iov_len + 1 + parts[2].iov_len : parts[0].iov_len;
    record(kind, 0, 0, length, parts, to ? 3 : 1);
    pthread_mutex_unlock(&lock);
}

int link(const char *from, const char *to) {
    int result = real_link(from, to);
    if (result == 0 && in_watched_dir(from) && in_watched_dir(to)) named(KIND_LINK, from, to);
    return result;
}

int rename(const char *from, const char *to) {
    int result = real_rename(from, to);
    if (result == 0 && in_watched_dir(from) && in_watched_dir(to)) {
        named(KIND_LINK, from, to);
        named(KIND_UNLINK, from, NULL);
    }
    return result;
}

int unlink(const char *path) {
    int result = real_unlink(path);
    if (result == 0 && in_watched_dir(path)) named(KIND_UNLINK, path, NULL);
    return result;
}

int close(int fd) {
    if (fd >= 0 && fd < MAX_FDS) fd_file[fd] = 0;
    return real_close(fd);
}

ssize_t write(int fd, const void *buffer, size_t length) {
    if (fd == 1 && length > 4 && memcmp(buffer, "ack ", 4) == 0) {
        // The workload's acknowledgement, logged before it reaches the test: everything it acknowledges is
        // recorded above it.
        uint64_t number = strtoull((const char *)buffer + 4, NULL, 10);
        pthread_mutex_lock(&lock);
        record(KIND_ACK, 0, number, 0, NULL, 0);
        pthread_mutex_unlock(&lock);
    }
    if (!watched(fd)) return real_write(fd, buffer, length);
    int f = fault(fd, "write");
    if (f == FAULT_EIO || f == FAULT_ENOSPC) return failed(f);
    length = faulted_length(f, length);
    off_t offset = lseek(fd, 0, SEEK_CUR);
    ssize_t done = real_write(fd, buffer, length);
    struct iovec part = {(void *)buffer, length};
    written(fd, offset, &part, 1, done);
    return done;
}

// A write's result, recorded (the part of it written, at `offset`) when the fd is watched.
static ssize_t recorded(int fd, const struct iovec *iov, int count, off_t offset, ssize_t done) {
    if (watched(fd)) written(fd, offset, iov, count, done);
    return done;
}

ssize_t pwrite(int fd, const void *buffer, size_t length, off_t offset) {
    int f = fault(fd, "pwrite");
    if (f == FAULT_EIO || f == FAULT_ENOSPC) return failed(f);
    length = faulted_length(f, length);
    struct iovec part = {(void *)buffer, length};
    return recorded(fd, &part, 1, offset, real_pwrite(fd, buffer, length, offset));
}

ssize_t pwrite64(int fd, const void *buffer, size_t length, off_t offset) {
    int f = fault(fd, "pwrite64");
    if (f == FAULT_EIO || f == FAULT_ENOSPC) return failed(f);
    length = faulted_length(f, length);
    struct iovec part = {(void *)buffer, length};
    return recorded(fd, &part, 1, offset, real_pwrite64(fd, buffer, length, offset));
}

// A vectored write under a short fault: its first half, as a plain pwrite of the bytes it would have written first.
static ssize_t short_vectored(int fd, const struct iovec *iov, int count, off_t offset) {
    size_t total = 0;
    for (int i = 0; i < count; i++) total += iov[i].iov_len;
    size_t half = faulted_length(FAULT_SHORT, total);
    struct iovec parts[64];
    int used = 0;
    for (int i = 0; i < count && half > 0 && used < 64; i++) {
        size_t take = iov[i].iov_len < half ? iov[i].iov_len : half;
        parts[used].iov_base = iov[i].iov_base;
        parts[used].iov_len = take;
        used++;
        half -= take;
    }
    return recorded(fd, parts, used, offset, real_pwritev(fd, parts, used, offset));
}

ssize_t writev(int fd, const struct iovec *iov, int count) {
    if (!watched(fd)) return real_writev(fd, iov, count);
    int f = fault(fd, "writev");
    if (f == FAULT_EIO || f == FAULT_ENOSPC) return failed(f);
    off_t offset = lseek(fd, 0, SEEK_CUR);
    if (f == FAULT_SHORT) {
        ssize_t done = short_vectored(fd, iov, count, offset);
        if (done > 0) lseek(fd, offset + done, SEEK_SET);
        return done;
    }
    return recorded(fd, iov, count, offset, real_writev(fd, iov, count));
}

ssize_t pwritev(int fd, const struct iovec *iov, int count, off_t offset) {
    int f = fault(fd, "pwritev");
    if (f == FAULT_EIO || f == FAULT_ENOSPC) return failed(f);
    if (f == FAULT_SHORT) return short_vectored(fd, iov, count, offset);
    return recorded(fd, iov, count, offset, real_pwritev(fd, iov, count, offset));
}

ssize_t pwritev64(int fd, const struct iovec *iov, int count, off_t offset) {
    int f = fault(fd, "pwritev64");
    if (f == FAULT_EIO || f == FAULT_ENOSPC) return failed(f);
    if (f == FAULT_SHORT) return short_vectored(fd, iov, count, offset);
    return recorded(fd, iov, count, offset, real_pwritev64(fd, iov, count, offset));
}

// A sync (fsync or fdatasync): failed under a fault (a short one as EIO), else made and recorded.
static int sync_call(int fd, const char *name, int (*real)(int)) {
    int f = fault(fd, name);
    if (f != FAULT_NONE) return failed(f == FAULT_SHORT ? FAULT_EIO : f);
    int result = real(fd);
    if (result == 0 && watched(fd)) synced(fd);
    return result;
}

int fsync(int fd) { return sync_call(fd, "fsync", real_fsync); }

int fdatasync(int fd) { return sync_call(fd, "fdatasync", real_fdatasync); }

static void truncated(int fd, off_t size) {
    pthread_mutex_lock(&lock);
    record(KIND_TRUNCATE, (uint32_t)(fd_file[fd] - 1), (uint64_t)size, 0, NULL, 0);
    pthread_mutex_unlock(&lock);
}

// A truncation: failed under a fault (a short one as EIO), else made and recorded.
static int truncate_call(int fd, off_t size, const char *name, int (*real)(int, off_t)) {
    int f = fault(fd, name);
    if (f != FAULT_NONE) return failed(f == FAULT_SHORT ? FAULT_EIO : f);
    int result = real(fd, size);
    if (result == 0 && watched(fd)) truncated(fd, size);
    return result;
}

int ftruncate(int fd, off_t size) { return truncate_call(fd, size, "ftruncate", real_ftruncate); }

int ftruncate64(int fd, off_t size) { return truncate_call(fd, size, "ftruncate64", real_ftruncate64); }

/* common/copy.h: the copy that writes a value into segment memory (issue 17).
 *
 * A put's bytes land in a segment (ours, or a same-host peer's mapping, or from the
 * receive ring of a TCP WRITE) and are not read again by the writing CPU: the next
 * reader is a get, often from another process, usually much later. memcpy's ordinary
 * stores first read every destination cache line (read-for-ownership) and leave the
 * copy in the writer's caches; glibc switches to non-temporal stores only above a
 * threshold derived from the shared cache (on the project's box, with 300 MiB of L3,
 * never for a KV block). Non-temporal (streaming) stores skip the read and the cache:
 * measured on the project's 2-CPU box, copying from a hot source into a 2 GiB shared
 * mapping at random 64 KiB-aligned offsets, memcpy 6.1-8.8 GB/s against 13.3-13.6 GB/s
 * (64 KiB), 3.7-5.8 against 7.8-8.0 (4 KiB), 5.1-6.7 against 11.7-13.4 (1 MiB)
 * (docs/performance.md "Session 8: streaming stores into the segment").
 *
 * Reads (a get into the caller's buffer) keep memcpy: the caller reads what it asked
 * for, so the copy should stay in its caches.
 */
#ifndef MOONCAKE_COMMON_COPY_H
#define MOONCAKE_COMMON_COPY_H

#include <stddef.h>

/* Copies below this many bytes use memcpy (the line-alignment head and the tail cost
 * more than they save, and small values are often read back soon). */
#define MC_COPY_STREAM_MIN 4096

/* mc_copy_to_segment: copies n bytes from src to dst (must not overlap), like memcpy.
 * From MC_COPY_STREAM_MIN bytes on x86-64 the 64-byte-aligned body of dst is written
 * with SSE2 non-temporal stores followed by a store fence, so the bytes are visible to
 * other CPUs (and processes mapping the same memory) in program order with the
 * caller's later stores and system calls, as after memcpy; elsewhere it is memcpy.
 * Any alignment of dst, src and n is fine. */
void mc_copy_to_segment(void *dst, const void *src, size_t n);

#endif

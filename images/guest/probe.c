/*
 * gleaner-probe: the guest's workloads, built static so the initramfs needs no libc.
 *
 *   gleaner-probe hog                         spin forever, print loops/s every second
 *   gleaner-probe probe [burst_us] [sleep_ms] [batch]
 *       bursts of fixed CPU work (calibrated once to burst_us) separated by sleeps;
 *       every `batch` bursts print every burst wall time of the batch in the order measured
 *       (GLEANER-PROBE-RAW us=a,b,...), then p50/p99/max of the batch (GLEANER-PROBE n=...).
 *   gleaner-probe diskprobe DEVICE [sleep_ms] [batch]
 *       a synchronous 4 KiB write then read at a random offset (O_DIRECT), then a sleep;
 *       every `batch` pairs print every pair time of the batch in the order measured
 *       (GLEANER-DISKPROBE-RAW us=a,b,...), then p50/p99/max (GLEANER-DISKPROBE n=...).
 *   gleaner-probe diskhog DEVICE
 *       write 1 MiB blocks (O_DIRECT) over the device as fast as it goes; print MiB/s.
 *   gleaner-probe wakeup [sleep_us] [batch]
 *       cyclictest-style: sleep until an absolute CLOCK_MONOTONIC deadline sleep_us ahead
 *       (clock_nanosleep, TIMER_ABSTIME) and time how late it wakes past the deadline; every
 *       `batch` wake-ups print every lateness of the batch in the order measured
 *       (GLEANER-WAKEUP-RAW us=a,b,...), then p50/p99/max (GLEANER-WAKEUP n=...).
 *
 * Times are in whole microseconds (truncated). Only the burst (or the write+read pair) is
 * timed; the sleeps and the printing are not. After printing, the probe waits for the console
 * to drain (tcdrain), so the serial output of a long line does not spill into the next
 * timed sample.
 *
 * The probe measures what a latency-sensitive foreground tenant feels: a burst that takes
 * longer than when alone was delayed by someone else on the same CPU. The wake-up probe
 * measures the other half, what a request to an idle foreground VM feels: how long after its
 * timer is due the guest runs again (the host must wake QEMU, which must inject the timer
 * interrupt, and the guest kernel must schedule the sleeper).
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#define DISK_SPAN (128ull << 20) /* both disk workloads stay within the first 128 MiB */

static volatile uint64_t sink;

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void spin(uint64_t loops)
{
    uint64_t acc = sink;
    for (uint64_t i = 0; i < loops; i++)
        acc = acc * 6364136223846793005ull + 1442695040888963407ull;
    sink = acc;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

/* Print the batch's samples in µs, in the order measured (before report sorts them), as one line. */
static void report_raw(const char *tag, const uint64_t *samples, int batch)
{
    size_t size = strlen(tag) + 16 + (size_t)batch * 21, len = 0;
    char *line = malloc(size);
    if (!line)
        return;
    len += (size_t)snprintf(line, size, "%s-RAW us=", tag);
    for (int i = 0; i < batch; i++)
        len += (size_t)snprintf(line + len, size - len, "%s%llu", i ? "," : "",
                                (unsigned long long)(samples[i] / 1000));
    line[len++] = '\n';
    fwrite(line, 1, len, stdout);
    fflush(stdout);
    free(line);
}

/* Sort the batch and print p50/p99/max in µs; wait until the console has sent it all. */
static void report(const char *tag, uint64_t *samples, int batch)
{
    qsort(samples, (size_t)batch, sizeof *samples, cmp_u64);
    printf("%s n=%d p50_us=%llu p99_us=%llu max_us=%llu\n", tag, batch,
           (unsigned long long)(samples[batch / 2] / 1000),
           (unsigned long long)(samples[(batch * 99) / 100] / 1000),
           (unsigned long long)(samples[batch - 1] / 1000));
    fflush(stdout);
    tcdrain(STDOUT_FILENO); /* not a tty (tests): fails harmlessly */
}

static void __attribute__((noreturn)) hog(void)
{
    uint64_t loops = 0, last = now_ns();
    for (;;) {
        spin(100000);
        loops += 100000;
        uint64_t t = now_ns();
        if (t - last >= 1000000000ull) {
            printf("GLEANER-HOG loops_per_s=%llu\n",
                   (unsigned long long)(loops * 1000000000ull / (t - last)));
            fflush(stdout);
            loops = 0;
            last = t;
        }
    }
}

/* Find a loop count whose run takes about burst_us, taking the fastest of several tries. */
static uint64_t calibrate(uint64_t burst_us)
{
    uint64_t loops = 10000, best = UINT64_MAX;
    for (int i = 0; i < 5; i++) {
        uint64_t t0 = now_ns();
        spin(loops);
        uint64_t dt = now_ns() - t0;
        if (dt < best)
            best = dt;
    }
    if (best == 0)
        best = 1;
    return loops * burst_us * 1000ull / best;
}

static int probe(uint64_t burst_us, uint64_t sleep_ms, int batch)
{
    uint64_t loops = calibrate(burst_us);
    uint64_t *samples = calloc((size_t)batch, sizeof *samples);
    struct timespec pause = { (time_t)(sleep_ms / 1000), (long)(sleep_ms % 1000) * 1000000L };
    if (!samples)
        return 1;
    printf("GLEANER-PROBE start burst_us=%llu sleep_ms=%llu batch=%d loops=%llu\n",
           (unsigned long long)burst_us, (unsigned long long)sleep_ms, batch,
           (unsigned long long)loops);
    fflush(stdout);
    for (;;) {
        for (int i = 0; i < batch; i++) {
            uint64_t t0 = now_ns();
            spin(loops);
            samples[i] = now_ns() - t0;
            nanosleep(&pause, NULL);
        }
        report_raw("GLEANER-PROBE", samples, batch);
        report("GLEANER-PROBE", samples, batch);
    }
}

static int wakeup(uint64_t sleep_us, int batch)
{
    uint64_t *samples = calloc((size_t)batch, sizeof *samples);
    if (!samples)
        return 1;
    printf("GLEANER-WAKEUP start sleep_us=%llu batch=%d\n", (unsigned long long)sleep_us, batch);
    fflush(stdout);
    for (;;) {
        for (int i = 0; i < batch; i++) {
            uint64_t due = now_ns() + sleep_us * 1000ull;
            struct timespec at = { (time_t)(due / 1000000000ull), (long)(due % 1000000000ull) };
            while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &at, NULL) != 0)
                ; /* EINTR: sleep on to the same deadline */
            uint64_t woke = now_ns();
            samples[i] = woke > due ? woke - due : 0;
        }
        report_raw("GLEANER-WAKEUP", samples, batch);
        report("GLEANER-WAKEUP", samples, batch);
    }
}

static int diskprobe(const char *device, uint64_t sleep_ms, int batch)
{
    int fd = open(device, O_RDWR | O_DIRECT | O_SYNC);
    void *buf;
    uint64_t *samples = calloc((size_t)batch, sizeof *samples);
    struct timespec pause = { (time_t)(sleep_ms / 1000), (long)(sleep_ms % 1000) * 1000000L };
    uint64_t seed = now_ns();
    if (fd < 0 || !samples || posix_memalign(&buf, 4096, 4096) != 0) {
        perror("gleaner-probe diskprobe");
        return 1;
    }
    memset(buf, 0x5a, 4096);
    printf("GLEANER-DISKPROBE start device=%s sleep_ms=%llu batch=%d\n", device,
           (unsigned long long)sleep_ms, batch);
    fflush(stdout);
    for (;;) {
        for (int i = 0; i < batch; i++) {
            seed = seed * 6364136223846793005ull + 1442695040888963407ull;
            off_t offset = (off_t)(((seed >> 16) % (DISK_SPAN / 4096)) * 4096);
            uint64_t t0 = now_ns();
            if (pwrite(fd, buf, 4096, offset) != 4096 || pread(fd, buf, 4096, offset) != 4096) {
                perror("gleaner-probe diskprobe I/O");
                return 1;
            }
            samples[i] = now_ns() - t0;
            nanosleep(&pause, NULL);
        }
        report_raw("GLEANER-DISKPROBE", samples, batch);
        report("GLEANER-DISKPROBE", samples, batch);
    }
}

static int diskhog(const char *device)
{
    const size_t block = 1 << 20;
    int fd = open(device, O_WRONLY | O_DIRECT);
    void *buf;
    uint64_t written = 0, last = now_ns();
    off_t offset = 0;
    if (fd < 0 || posix_memalign(&buf, 4096, block) != 0) {
        perror("gleaner-probe diskhog");
        return 1;
    }
    memset(buf, 0xa5, block);
    for (;;) {
        if (pwrite(fd, buf, block, offset) != (ssize_t)block) {
            perror("gleaner-probe diskhog I/O");
            return 1;
        }
        written += block;
        offset = (off_t)(((uint64_t)offset + block) % DISK_SPAN);
        uint64_t t = now_ns();
        if (t - last >= 1000000000ull) {
            printf("GLEANER-DISKHOG mib_per_s=%llu\n", (unsigned long long)(written * 1000000000ull / (t - last) >> 20));
            fflush(stdout);
            written = 0;
            last = t;
        }
    }
}

int main(int argc, char **argv)
{
    if (argc >= 2 && strcmp(argv[1], "hog") == 0)
        hog();
    if (argc >= 2 && strcmp(argv[1], "probe") == 0) {
        uint64_t burst_us = argc > 2 ? strtoull(argv[2], NULL, 10) : 2000;
        uint64_t sleep_ms = argc > 3 ? strtoull(argv[3], NULL, 10) : 10;
        int batch = argc > 4 ? atoi(argv[4]) : 200;
        if (burst_us == 0 || batch < 2) {
            fprintf(stderr, "gleaner-probe: burst_us must be > 0 and batch >= 2\n");
            return 2;
        }
        return probe(burst_us, sleep_ms, batch);
    }
    if (argc >= 3 && strcmp(argv[1], "diskprobe") == 0) {
        uint64_t sleep_ms = argc > 3 ? strtoull(argv[3], NULL, 10) : 5;
        int batch = argc > 4 ? atoi(argv[4]) : 200;
        return batch < 2 ? 2 : diskprobe(argv[2], sleep_ms, batch);
    }
    if (argc >= 3 && strcmp(argv[1], "diskhog") == 0)
        return diskhog(argv[2]);
    if (argc >= 2 && strcmp(argv[1], "wakeup") == 0) {
        uint64_t sleep_us = argc > 2 ? strtoull(argv[2], NULL, 10) : 1000;
        int batch = argc > 3 ? atoi(argv[3]) : 200;
        if (sleep_us == 0 || batch < 2) {
            fprintf(stderr, "gleaner-probe: sleep_us must be > 0 and batch >= 2\n");
            return 2;
        }
        return wakeup(sleep_us, batch);
    }
    fprintf(stderr, "usage: gleaner-probe hog | probe [burst_us] [sleep_ms] [batch] | "
                    "diskprobe DEVICE [sleep_ms] [batch] | diskhog DEVICE | wakeup [sleep_us] [batch]\n");
    return 2;
}

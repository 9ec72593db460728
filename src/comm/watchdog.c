/* watchdog.c — the communication layer's fault detector: one thread per process that watches every
 * blocking wait against the timeout and, on its own MPI communicator, answers the other ranks'
 * questions and hears their goodbyes (comm.h, "Faults").
 *
 * The main thread counts the collectives it issues (tlm_watchdog_begin) and arms a deadline around
 * every wait. When a wait has lasted the timeout less a grace period (a fifth of the timeout, at
 * most 2 s), the thread asks every other rank for its count and whether it waits, gives them the
 * grace period to answer, and, if the wait is still the same, prints one line naming the ranks that
 * did not arrive and ends the job with MPI_Abort: so the job stops about the timeout after the wait
 * began. A rank leaving without tlm_comm_finalize sends a goodbye with its last error; the others
 * print it and end the job at once.
 *
 * The thread's MPI calls run beside the main thread's: this needs MPI_THREAD_MULTIPLE. Without it
 * the thread only keeps time: on a timeout it prints what it knows and exits the process (_exit),
 * which the launcher turns into the end of the job. The thread cannot return an error: a failed
 * MPI call of its own counts as a message not sent or a rank that did not answer. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "comm/comm_internal.h"

enum { MSG_QUERY = 1, MSG_STATE, MSG_BYE, MSG_BYE_ACK };
enum { TAG_WATCHDOG = 7301 };

typedef struct {
    int type;
    int from;
    long issued;   /* MSG_STATE: collectives the sender has issued */
    int waiting;   /* MSG_STATE: the sender is in a wait now */
    char text[244]; /* MSG_BYE: why the sender leaves; MSG_STATE: what it waits in */
} wd_msg;

typedef struct {
    wd_msg msg;
    MPI_Request req;
} outbox;

static struct {
    bool started, stopped, thread_multiple;
    int rank, size;
    char host[64];
    double timeout_s;
    MPI_Comm ctl;           /* the watchdog's own communicator (MPI_COMM_NULL without THREAD_MULTIPLE) */
    pthread_t thread;
    atomic_bool stop;
    /* set by the main thread */
    atomic_long issued;
    atomic_int armed;
    atomic_llong deadline_ns; /* when the survey starts */
    _Atomic(const char *) what;
    atomic_size_t bytes;
    /* the thread's (and leave's, after the thread stopped) */
    wd_msg in;
    MPI_Request in_req;
    outbox *out;            /* two per peer: its questions and goodbye, and its answers (box_of) */
    wd_msg *answers;        /* one per peer, valid where answered[p] */
    char *answered;
    int bye_acks;
} wd = {.ctl = MPI_COMM_NULL};

static int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void sleep_ms(int ms) {
    struct timespec ts = {0, (long)ms * 1000000L};
    nanosleep(&ts, NULL);
}

static double grace_s(void) {
    double g = wd.timeout_s / 5;
    return g > 2.0 ? 2.0 : g;
}

double tlm_watchdog_timeout(void) { return wd.timeout_s; }

/* ---- messages ---------------------------------------------------------------------------------------------- */

/* The outbox of messages of m's type to peer p: questions and answers apart, so that an answer
 * does not wait behind a question of this rank's own survey that the peer has not yet taken (two
 * ranks that time out together ask each other at once). */
static outbox *box_of(int p, int type) { return &wd.out[2 * p + (type == MSG_STATE || type == MSG_BYE_ACK)]; }

/* Sends m to peer p unless the previous message of its kind to p is still in flight (then it is
 * dropped: the peer has not taken the last one either). */
static void send_to(int p, const wd_msg *m) {
    outbox *o = box_of(p, m->type);
    if (o->req != MPI_REQUEST_NULL) {
        int done = 0;
        MPI_Test(&o->req, &done, MPI_STATUS_IGNORE);
        if (!done) return;
    }
    o->msg = *m;
    o->msg.from = wd.rank;
    if (MPI_Isend(&o->msg, (int)sizeof o->msg, MPI_BYTE, p, TAG_WATCHDOG, wd.ctl, &o->req) != MPI_SUCCESS)
        o->req = MPI_REQUEST_NULL;
}

static void post_receive(void) {
    if (MPI_Irecv(&wd.in, (int)sizeof wd.in, MPI_BYTE, MPI_ANY_SOURCE, TAG_WATCHDOG, wd.ctl, &wd.in_req) != MPI_SUCCESS)
        wd.in_req = MPI_REQUEST_NULL;
}

/* A peer said goodbye: say what it said, then end the job. */
__attribute__((noreturn)) static void peer_left(const wd_msg *m) {
    wd_msg ack = {.type = MSG_BYE_ACK};
    send_to(m->from, &ack);
    const char *what = atomic_load(&wd.what);
    char where[160] = "";
    if (atomic_load(&wd.armed) && what)
        snprintf(where, sizeof where, " while this rank waited in %s (its collective #%ld)", what,
                 atomic_load(&wd.issued));
    fprintf(stderr, "tlm: rank %d (%s): rank %d left the run before its end (%s)%s; stopping the job\n", wd.rank,
            wd.host, m->from, m->text[0] ? m->text : "it exited", where);
    fflush(stderr);
    for (int i = 0; i < 100; i++) { /* let the acknowledgement go */
        int done = 1;
        outbox *o = box_of(m->from, MSG_BYE_ACK);
        if (o->req != MPI_REQUEST_NULL) MPI_Test(&o->req, &done, MPI_STATUS_IGNORE);
        if (done) break;
        sleep_ms(5);
    }
    MPI_Abort(MPI_COMM_WORLD, 1);
    _exit(1);
}

/* Takes every message that has arrived. */
static void poll_messages(void) {
    for (;;) {
        if (wd.in_req == MPI_REQUEST_NULL) return;
        int got = 0;
        if (MPI_Test(&wd.in_req, &got, MPI_STATUS_IGNORE) != MPI_SUCCESS || !got) return;
        const wd_msg m = wd.in;
        post_receive();
        if (m.from < 0 || m.from >= wd.size) continue;
        switch (m.type) {
        case MSG_QUERY: {
            wd_msg r = {.type = MSG_STATE, .issued = atomic_load(&wd.issued), .waiting = atomic_load(&wd.armed)};
            const char *what = atomic_load(&wd.what);
            snprintf(r.text, sizeof r.text, "%s", what ? what : "");
            send_to(m.from, &r);
            break;
        }
        case MSG_STATE:
            wd.answers[m.from] = m;
            wd.answered[m.from] = 1;
            break;
        case MSG_BYE: peer_left(&m);
        case MSG_BYE_ACK: wd.bye_acks++; break;
        default: break;
        }
    }
}

/* ---- the timeout ------------------------------------------------------------------------------------------- */

/* The wait armed at `issued` has lasted timeout - grace: ask the others, and end the job unless the
 * wait ends meanwhile. */
static void survey(long issued) {
    const char *what = atomic_load(&wd.what);
    const size_t bytes = atomic_load(&wd.bytes);
    char blame[1536] = "";
    size_t used = 0;
    int named = 0;
#define BLAME(...) \
    (used += (size_t)snprintf(blame + used, used < sizeof blame ? sizeof blame - used : 0, __VA_ARGS__), named++)
    if (wd.ctl != MPI_COMM_NULL) {
        memset(wd.answered, 0, (size_t)wd.size);
        const wd_msg q = {.type = MSG_QUERY};
        for (int p = 0; p < wd.size; p++)
            if (p != wd.rank) send_to(p, &q);
        const int64_t until = now_ns() + (int64_t)(grace_s() * 1e9);
        for (;;) {
            poll_messages();
            int n = 0;
            for (int p = 0; p < wd.size; p++) n += wd.answered[p];
            if (n == wd.size - 1 || now_ns() >= until) break;
            if (!atomic_load(&wd.armed) || atomic_load(&wd.issued) != issued) return; /* it ended after all */
            sleep_ms(5);
        }
        while (now_ns() < until && atomic_load(&wd.armed) && atomic_load(&wd.issued) == issued) {
            poll_messages(); /* the full timeout: the wait may still end */
            sleep_ms(5);
        }
        if (!atomic_load(&wd.armed) || atomic_load(&wd.issued) != issued) return;
        for (int p = 0; p < wd.size; p++) {
            if (p == wd.rank || used >= sizeof blame) continue;
            const wd_msg *a = &wd.answers[p];
            const char *sep = named ? "; " : "";
            if (!wd.answered[p])
                BLAME("%srank %d did not answer: it exited, was killed or is stopped", sep, p);
            else if (a->issued < issued)
                BLAME("%srank %d has not reached it: it has issued %ld of the %ld collectives%s%s", sep, p, a->issued,
                      issued, a->waiting ? " and waits in " : "", a->waiting ? a->text : "");
            else if (!a->waiting)
                BLAME("%srank %d issued it but is not waiting for it (busy elsewhere)", sep, p);
        }
        if (!named)
            snprintf(blame, sizeof blame, "%s", wd.size == 1 ? "a world of one rank: the collective itself hangs"
                                                             : "every rank answered and waits in it too (a slow or "
                                                               "broken link?)");
    } else {
        while (now_ns() < atomic_load(&wd.deadline_ns) + (int64_t)(grace_s() * 1e9))
            if (!atomic_load(&wd.armed) || atomic_load(&wd.issued) != issued) return;
            else sleep_ms(10);
        snprintf(blame, sizeof blame, "the ranks that did not arrive cannot be asked (MPI gave no "
                                      "MPI_THREAD_MULTIPLE)");
    }
#undef BLAME
    char b[64];
    snprintf(b, sizeof b, "%zu bytes per rank", bytes);
    fprintf(stderr, "tlm: rank %d (%s): %s (its collective #%ld, %s) did not complete within %g s: %s; stopping the "
            "job\n", wd.rank, wd.host, what ? what : "a collective", issued, b, wd.timeout_s, blame);
    fflush(stderr);
    if (wd.ctl != MPI_COMM_NULL) MPI_Abort(MPI_COMM_WORLD, 1);
    _exit(1);
}

/* The side channel is polled every POLL_MS (at most a quarter of the grace period): often enough to
 * answer a survey and hear a goodbye in time, rarely enough not to slow the collectives. Every
 * MPI_Test from this thread enters MPI's progress engine, which the main thread's collective needs
 * too: polled every 10 ms it made a 100 MB all-reduce on a loaded 2-core machine 1.5x slower. */
#define POLL_MS 200

static void *watchdog_main(void *arg) {
    (void)arg;
    if (wd.ctl != MPI_COMM_NULL) post_receive();
    int poll_ms = (int)(grace_s() * 1000 / 4);
    poll_ms = poll_ms > POLL_MS ? POLL_MS : poll_ms < 10 ? 10 : poll_ms;
    int64_t next_poll = 0;
    while (!atomic_load(&wd.stop)) {
        if (wd.ctl != MPI_COMM_NULL && now_ns() >= next_poll) {
            poll_messages();
            next_poll = now_ns() + (int64_t)poll_ms * 1000000;
        }
        if (atomic_load(&wd.armed) && now_ns() >= atomic_load(&wd.deadline_ns)) survey(atomic_load(&wd.issued));
        sleep_ms(10);
    }
    return NULL;
}

/* ---- the main thread's side ------------------------------------------------------------------------------ */

tlm_status tlm_watchdog_start(double timeout_s, bool thread_multiple, int rank, int world_size, const char *host) {
    if (wd.started) return TLM_OK;
    wd.timeout_s = timeout_s;
    wd.thread_multiple = thread_multiple;
    wd.rank = rank;
    wd.size = world_size;
    snprintf(wd.host, sizeof wd.host, "%s", host);
    wd.out = calloc(2 * (size_t)world_size, sizeof *wd.out);
    wd.answers = calloc((size_t)world_size, sizeof *wd.answers);
    wd.answered = calloc((size_t)world_size, 1);
    if (!wd.out || !wd.answers || !wd.answered) return tlm_fail(TLM_ERR_OUT_OF_MEMORY, "out of host memory (watchdog)");
    for (int p = 0; p < 2 * world_size; p++) wd.out[p].req = MPI_REQUEST_NULL;
    wd.in_req = MPI_REQUEST_NULL;
    if (thread_multiple) TLM_MPI_TRY(MPI_Comm_dup(MPI_COMM_WORLD, &wd.ctl));
    atomic_store(&wd.stop, false);
    const int e = pthread_create(&wd.thread, NULL, watchdog_main, NULL);
    if (e != 0) return tlm_fail(TLM_ERR_BACKEND, "starting the communication watchdog thread: %s", strerror(e));
    wd.started = true;
    return TLM_OK;
}

void tlm_watchdog_begin(const char *what, size_t bytes) {
    if (!wd.started) return;
    atomic_store(&wd.what, what);
    atomic_store(&wd.bytes, bytes);
    atomic_fetch_add(&wd.issued, 1);
    atomic_store(&wd.deadline_ns, now_ns() + (int64_t)((wd.timeout_s - grace_s()) * 1e9));
    atomic_store(&wd.armed, 1);
}

void tlm_watchdog_wait(const char *what) {
    if (!wd.started) return;
    atomic_store(&wd.what, what);
    atomic_store(&wd.deadline_ns, now_ns() + (int64_t)((wd.timeout_s - grace_s()) * 1e9));
    atomic_store(&wd.armed, 1);
}

void tlm_watchdog_end(void) { atomic_store(&wd.armed, 0); }

/* Joins the thread, cancels its receive and settles the sends (peers that are gone: freed). */
static void stop_thread(void) {
    if (!wd.started || wd.stopped) return;
    atomic_store(&wd.stop, true);
    pthread_join(wd.thread, NULL);
    wd.stopped = true;
    if (wd.in_req != MPI_REQUEST_NULL) {
        MPI_Cancel(&wd.in_req);
        MPI_Wait(&wd.in_req, MPI_STATUS_IGNORE);
    }
}

static void settle_sends(void) {
    for (int p = 0; p < 2 * wd.size; p++) {
        outbox *o = &wd.out[p];
        for (int i = 0; i < 100 && o->req != MPI_REQUEST_NULL; i++) {
            int done = 0;
            MPI_Test(&o->req, &done, MPI_STATUS_IGNORE);
            if (!done) sleep_ms(2);
        }
        if (o->req != MPI_REQUEST_NULL) MPI_Request_free(&o->req);
    }
}

void tlm_watchdog_leave(const char *why) {
    if (!wd.started || wd.stopped) return;
    stop_thread();
    if (wd.ctl == MPI_COMM_NULL) return;
    wd_msg bye = {.type = MSG_BYE};
    snprintf(bye.text, sizeof bye.text, "%s", why);
    wd.bye_acks = 0;
    post_receive();
    for (int p = 0; p < wd.size; p++)
        if (p != wd.rank) send_to(p, &bye);
    const int64_t until = now_ns() + 2000000000LL;
    while (wd.bye_acks < wd.size - 1 && now_ns() < until) {
        int got = 0;
        if (wd.in_req == MPI_REQUEST_NULL || MPI_Test(&wd.in_req, &got, MPI_STATUS_IGNORE) != MPI_SUCCESS) break;
        if (got) {
            if (wd.in.type == MSG_BYE_ACK) wd.bye_acks++;
            post_receive();
        } else {
            sleep_ms(2);
        }
    }
    /* the process exits next, without MPI_Finalize: the launcher ends the job */
}

void tlm_watchdog_stop(void) {
    if (!wd.started) return;
    stop_thread();
    settle_sends();
    if (wd.ctl != MPI_COMM_NULL) MPI_Comm_free(&wd.ctl);
    free(wd.out);
    free(wd.answers);
    free(wd.answered);
    wd.out = NULL;
    wd.answers = NULL;
    wd.answered = NULL;
    wd.started = false;
    wd.stopped = false;
}

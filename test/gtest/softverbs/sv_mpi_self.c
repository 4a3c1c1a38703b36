/*
 * The pattern of mpi4py 3.1.4's testManyISendAndRecv on MPI_COMM_SELF,
 * reduced to C (docs/softverbs.md, "UCX's rc_verbs on softverbs"): each
 * round sends six messages to the process itself with MPI_Isend, tests
 * them with MPI_Testall before any receive is posted, and receives them in
 * two groups of three. mpi4py asserts that when MPI_Testall finds a send
 * not complete, MPI_Testany and MPI_Testsome find none of the others
 * completed either (as if a send that did not complete at once waited for
 * its receive). MPI does not promise that: a send may also wait for the
 * transport's resources and complete in a later progress call, which is
 * what UCX's rc_verbs does once its send queue is full.
 *
 * The program counts the rounds in which that happened and checks every
 * byte received and that nothing is left unreceived. Every rank works on
 * MPI_COMM_SELF alone.
 *
 *   sv_mpi_self [-n ROUNDS] [-s SIZE] [-e early|none]
 *     -n ROUNDS  rounds (default 100: 600 sends, more than the 256 send
 *                queue entries rc_verbs has by default)
 *     -s SIZE    bytes per message (default 227, the size of the last
 *                object mpi4py sends there, a pickled dict)
 *     -e early   fail unless some round had sends complete without their
 *                receive (what rc_verbs does on softverbs by default)
 *     -e none    fail if any round did (mpi4py's assumption)
 *
 * Exit status: 0 passed, 1 wrong or missing data or the -e check failed,
 * 2 bad arguments.
 */
#include <mpi.h>

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SVMS_NSEND 6
#define SVMS_TAG   0

enum svms_expect { SVMS_EXPECT_ANY, SVMS_EXPECT_EARLY, SVMS_EXPECT_NONE };

struct svms_opts {
    long             rounds;
    long             size;
    enum svms_expect expect;
};

struct svms_counts {
    long incomplete; /* rounds where MPI_Testall found a send not done */
    long early;      /* of those: others completed with no receive posted */
    long bad;        /* messages with wrong bytes or length */
};

static int svms_usage(const char *why)
{
    fprintf(stderr, "sv_mpi_self: %s\n"
            "usage: sv_mpi_self [-n ROUNDS] [-s SIZE] [-e early|none]\n",
            why);
    return 2;
}

static int svms_number(const char *s, long min, long max, long *out)
{
    char *end;
    long v;

    errno = 0;
    v = strtol(s, &end, 10);
    if (errno != 0 || end == s || *end != '\0' || v < min || v > max) {
        return -1;
    }
    *out = v;
    return 0;
}

static int svms_parse(int argc, char **argv, struct svms_opts *o)
{
    char msg[160];
    int i;

    o->rounds = 100;
    o->size   = 227;
    o->expect = SVMS_EXPECT_ANY;
    for (i = 1; i < argc; i += 2) {
        const char *v = (i + 1 < argc) ? argv[i + 1] : NULL;

        if (v == NULL) {
            snprintf(msg, sizeof(msg), "%s needs a value", argv[i]);
            return svms_usage(msg);
        }
        if (strcmp(argv[i], "-n") == 0) {
            if (svms_number(v, 1, 1000000, &o->rounds) != 0) {
                snprintf(msg, sizeof(msg), "-n \"%s\": give the rounds, "
                         "1 to 1000000", v);
                return svms_usage(msg);
            }
        } else if (strcmp(argv[i], "-s") == 0) {
            if (svms_number(v, 1, 1 << 20, &o->size) != 0) {
                snprintf(msg, sizeof(msg), "-s \"%s\": give the message "
                         "size in bytes, 1 to 1048576", v);
                return svms_usage(msg);
            }
        } else if (strcmp(argv[i], "-e") == 0) {
            if (strcmp(v, "early") == 0) {
                o->expect = SVMS_EXPECT_EARLY;
            } else if (strcmp(v, "none") == 0) {
                o->expect = SVMS_EXPECT_NONE;
            } else {
                snprintf(msg, sizeof(msg), "-e \"%s\": give early or none",
                         v);
                return svms_usage(msg);
            }
        } else {
            snprintf(msg, sizeof(msg), "unknown option \"%s\"", argv[i]);
            return svms_usage(msg);
        }
    }
    return 0;
}

static unsigned char svms_byte(long round, int msg, long off)
{
    return (unsigned char)(round * 31 + msg * 7 + off);
}

/* Receives message msg of this round into buf and checks it. */
static void svms_recv(unsigned char *buf, long size, long round, int msg,
                      struct svms_counts *c)
{
    MPI_Status st;
    int n = -1;
    long i;

    memset(buf, 0, (size_t)size);
    MPI_Recv(buf, (int)size, MPI_BYTE, 0, SVMS_TAG, MPI_COMM_SELF, &st);
    MPI_Get_count(&st, MPI_BYTE, &n);
    for (i = 0; i < size && n == size; ++i) {
        if (buf[i] != svms_byte(round, msg, i)) {
            break;
        }
    }
    if (n != size || i != size) {
        if (c->bad < 5) {
            fprintf(stderr, "sv_mpi_self: round %ld message %d: %d bytes, "
                    "first wrong byte at %ld\n", round, msg, n, i);
        }
        c->bad++;
    }
}

static void svms_round(unsigned char *sbuf, unsigned char *rbuf, long size,
                       long round, struct svms_counts *c)
{
    MPI_Request req[SVMS_NSEND];
    int indices[SVMS_NSEND];
    int flag, index, count, j;
    long i;

    for (j = 0; j < SVMS_NSEND; ++j) {
        unsigned char *p = sbuf + (size_t)j * (size_t)size;

        for (i = 0; i < size; ++i) {
            p[i] = svms_byte(round, j, i);
        }
        MPI_Isend(p, (int)size, MPI_BYTE, 0, SVMS_TAG, MPI_COMM_SELF,
                  &req[j]);
    }
    MPI_Testall(SVMS_NSEND, req, &flag, MPI_STATUSES_IGNORE);
    if (!flag) {
        /* mpi4py: Testany, then Testsome must find nothing more */
        c->incomplete++;
        MPI_Testany(SVMS_NSEND, req, &index, &flag, MPI_STATUS_IGNORE);
        MPI_Testsome(SVMS_NSEND, req, &count, indices, MPI_STATUSES_IGNORE);
        if (count != 0 && count != MPI_UNDEFINED) {
            c->early++;
        }
    }
    for (j = 0; j < SVMS_NSEND; ++j) {
        svms_recv(rbuf, size, round, j, c);
    }
    MPI_Waitall(SVMS_NSEND, req, MPI_STATUSES_IGNORE);
}

int main(int argc, char **argv)
{
    struct svms_counts c = { 0, 0, 0 };
    struct svms_opts o;
    unsigned char *sbuf, *rbuf;
    MPI_Request warm;
    int rank, left, ok, all_ok, rc;
    MPI_Status st;
    long r;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    rc = svms_parse(argc, argv, &o);
    if (rc != 0) {
        MPI_Finalize();
        return rc;
    }
    sbuf = malloc((size_t)o.size * SVMS_NSEND);
    rbuf = malloc((size_t)o.size);
    if (sbuf == NULL || rbuf == NULL) {
        fprintf(stderr, "sv_mpi_self: out of memory for %ld-byte "
                "messages\n", o.size);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    /* UCP connects the endpoint to the process itself on its first use,
     * and sends wait for that in a progress call; mpi4py's test runs after
     * other tests have used it */
    MPI_Isend(sbuf, 1, MPI_BYTE, 0, SVMS_TAG + 1, MPI_COMM_SELF, &warm);
    MPI_Recv(rbuf, 1, MPI_BYTE, 0, SVMS_TAG + 1, MPI_COMM_SELF,
             MPI_STATUS_IGNORE);
    MPI_Wait(&warm, MPI_STATUS_IGNORE);
    for (r = 0; r < o.rounds; ++r) {
        svms_round(sbuf, rbuf, o.size, r, &c);
    }
    /* everything sent was received: nothing waits unmatched */
    MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_SELF, &left, &st);

    ok = (c.bad == 0 && !left);
    if (o.expect == SVMS_EXPECT_EARLY && c.early == 0) {
        fprintf(stderr, "sv_mpi_self: rank %d: -e early: no send completed "
                "without its receive\n", rank);
        ok = 0;
    } else if (o.expect == SVMS_EXPECT_NONE && c.early != 0) {
        fprintf(stderr, "sv_mpi_self: rank %d: -e none: sends completed "
                "without their receive in %ld rounds\n", rank, c.early);
        ok = 0;
    }
    printf("rank %d: %ld rounds of %d sends of %ld bytes to itself; "
           "sends not complete at MPI_Testall in %ld rounds, completed "
           "without their receive in %ld; wrong messages %ld; left "
           "unreceived: %s\n", rank, o.rounds, SVMS_NSEND, o.size,
           c.incomplete, c.early, c.bad, left ? "yes" : "no");
    fflush(stdout);
    MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_LAND, MPI_COMM_WORLD);
    if (rank == 0) {
        printf("sv_mpi_self: %s\n", all_ok ? "passed" : "FAILED");
    }
    free(sbuf);
    free(rbuf);
    MPI_Finalize();
    return all_ok ? 0 : 1;
}

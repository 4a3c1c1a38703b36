/*
 * A rank dies in the middle of an exchange; with MPI_ERRORS_RETURN on
 * the communicator, what the survivors had in flight with it (a receive
 * from it, a receive from anyone, a rendezvous-size send and a
 * synchronous send to it, none matched) completes with an error within
 * PML_FAILURE_BOUND seconds (default 30), and so do new sends to it and
 * receives from it -- calls return an error class, nothing aborts. The
 * error goes through the communicator's handler: a handler of the
 * test's own sees the new send's and receive's. The survivors then still
 * talk to each other, on the same communicator and on one without the
 * dead.
 *
 * The last rank is the victim: it takes every survivor's "go" message of
 * the fatal round and kills itself (SIGKILL, nothing is flushed or
 * closed) before it posts anything for the rest. Run it with at least 3
 * ranks and with the launcher told not to end the job when a process
 * dies (Open MPI 4.1: --mca orte_enable_recovery 1).
 */
#include "pml_test.h"

#include <signal.h>

#define ROUNDS     4            /* the victim dies in the last */
#define BIG_LEN    (1u << 20)   /* rendezvous size */

static double bound_sec;
static int    handler_calls, handler_code;

static void count_errors(MPI_Comm *comm, int *code, ...)
{
    ++handler_calls;
    handler_code = *code;
}

/* Wait for req until the bound: its MPI error (never MPI_SUCCESS wanted
 * here); fails the test if it does not complete in time. */
static int wait_failed(MPI_Request *req, double t0, const char *what)
{
    MPI_Status st;
    int        flag = 0, rc;

    do {
        rc = MPI_Test(req, &flag, &st);
        if (rc != MPI_SUCCESS) {
            /* the request is freed by the error; its status names it */
            return rc;
        }
        CHECK(MPI_Wtime() - t0 < bound_sec, "%s with the dead rank still "
              "pending after %.0f s", what, bound_sec);
    } while (!flag);
    return st.MPI_ERROR;
}

static void expect_error(int rc, const char *what)
{
    char msg[MPI_MAX_ERROR_STRING];
    int  cls, len;

    CHECK(rc != MPI_SUCCESS, "%s with the dead rank succeeded", what);
    MPI_Error_class(rc, &cls);
    MPI_Error_string(rc, msg, &len);
    CHECK((cls != MPI_SUCCESS) && (cls != MPI_ERR_TRUNCATE),
          "%s: error class %d", what, cls);
    if (pml_rank == 0) {
        printf("rank 0: %s with the dead rank: error class %d (%s)\n", what,
               cls, msg);
        fflush(stdout);
    }
}

static void survivor(int victim, MPI_Comm live)
{
    unsigned char  *big = malloc(BIG_LEN);
    int            go, reply, any, small = 7, round, rc, i;
    MPI_Request    rreq, areq, breq, sreq;
    MPI_Errhandler counter;
    double         t0, took = 0;

    CHECK(big != NULL, "out of memory");
    pml_fill(big, BIG_LEN, 1);
    for (round = 0; round < ROUNDS; ++round) {
        go = round;
        if (round < ROUNDS - 1) {
            CHECK_MPI(MPI_Send(&go, 1, MPI_INT, victim, 1, MPI_COMM_WORLD));
            CHECK_MPI(MPI_Recv(&reply, 1, MPI_INT, victim, 2,
                               MPI_COMM_WORLD, MPI_STATUS_IGNORE));
            CHECK(reply == round + 100 * pml_rank, "reply %d", reply);
            continue;
        }
        /* the fatal round: everything in flight before the victim dies */
        CHECK_MPI(MPI_Irecv(&reply, 1, MPI_INT, victim, 2, MPI_COMM_WORLD,
                            &rreq));
        /* nobody else sends tag 9: only the dead could have matched it */
        CHECK_MPI(MPI_Irecv(&any, 1, MPI_INT, MPI_ANY_SOURCE, 9,
                            MPI_COMM_WORLD, &areq));
        CHECK_MPI(MPI_Isend(big, BIG_LEN, MPI_BYTE, victim, 3,
                            MPI_COMM_WORLD, &breq));
        CHECK_MPI(MPI_Issend(&small, 1, MPI_INT, victim, 4, MPI_COMM_WORLD,
                             &sreq));
        t0 = MPI_Wtime();
        CHECK_MPI(MPI_Send(&go, 1, MPI_INT, victim, 1, MPI_COMM_WORLD));
        expect_error(wait_failed(&rreq, t0, "a posted receive"),
                     "a posted receive");
        expect_error(wait_failed(&areq, t0, "a receive from anyone"),
                     "a receive from anyone");
        expect_error(wait_failed(&breq, t0, "a rendezvous send"),
                     "a rendezvous send");
        expect_error(wait_failed(&sreq, t0, "a synchronous send"),
                     "a synchronous send");
        took = MPI_Wtime() - t0;
    }
    /* new operations with the dead rank fail too, through the
     * communicator's error handler (one that counts, then returns) */
    CHECK_MPI(MPI_Comm_create_errhandler(count_errors, &counter));
    CHECK_MPI(MPI_Comm_set_errhandler(MPI_COMM_WORLD, counter));
    t0 = MPI_Wtime();
    rc = MPI_Send(&small, 1, MPI_INT, victim, 5, MPI_COMM_WORLD);
    expect_error(rc, "a new send");
    CHECK((handler_calls == 1) && (handler_code == rc),
          "the handler saw %d calls (code %d) for the send's error %d",
          handler_calls, handler_code, rc);
    rc = MPI_Recv(&reply, 1, MPI_INT, victim, 6, MPI_COMM_WORLD,
                  MPI_STATUS_IGNORE);
    expect_error(rc, "a new receive");
    CHECK((handler_calls == 2) && (handler_code == rc),
          "the handler saw %d calls (code %d) for the receive's error %d",
          handler_calls, handler_code, rc);
    CHECK(MPI_Wtime() - t0 < bound_sec, "new operations took %.1f s",
          MPI_Wtime() - t0);
    CHECK_MPI(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
    MPI_Errhandler_free(&counter);

    /* the survivors still talk: on the world communicator by name, and
     * on a communicator without the dead (collectives on it too) */
    for (i = 0; i < victim; ++i) {
        int peer = i, v = -1;

        if (peer == pml_rank) {
            continue;
        }
        CHECK_MPI(MPI_Sendrecv(&pml_rank, 1, MPI_INT, peer, 7, &v, 1,
                               MPI_INT, peer, 7, MPI_COMM_WORLD,
                               MPI_STATUS_IGNORE));
        CHECK(v == peer, "survivor %d sent %d", peer, v);
    }
    {
        int sum = 0, one = 1;

        CHECK_MPI(MPI_Allreduce(&one, &sum, 1, MPI_INT, MPI_SUM, live));
        CHECK(sum == victim, "%d survivors answered, not %d", sum, victim);
    }
    if (pml_rank == 0) {
        printf("rank 0: the failure was reported within %.1f s (bound "
               "%.0f s)\n", took, bound_sec);
    }
    free(big);
}

static void victim_run(int nsurv)
{
    int go, reply, round, s;

    for (round = 0; round < ROUNDS; ++round) {
        for (s = 0; s < nsurv; ++s) {
            CHECK_MPI(MPI_Recv(&go, 1, MPI_INT, s, 1, MPI_COMM_WORLD,
                               MPI_STATUS_IGNORE));
            CHECK(go == round, "go %d in round %d", go, round);
        }
        if (round == ROUNDS - 1) {
            raise(SIGKILL);
        }
        for (s = 0; s < nsurv; ++s) {
            reply = round + 100 * s;
            CHECK_MPI(MPI_Send(&reply, 1, MPI_INT, s, 2, MPI_COMM_WORLD));
        }
    }
}

int main(int argc, char **argv)
{
    const char *b = getenv("PML_FAILURE_BOUND");
    MPI_Comm   live;
    int        victim;

    bound_sec = (b != NULL) ? atof(b) : 30.0;
    pml_test_init(&argc, &argv, 3);
    victim = pml_size - 1;
    CHECK_MPI(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
    CHECK_MPI(MPI_Comm_split(MPI_COMM_WORLD, pml_rank == victim, pml_rank,
                             &live));
    CHECK_MPI(MPI_Comm_set_errhandler(live, MPI_ERRORS_RETURN));
    if (pml_rank == victim) {
        victim_run(victim);
        return 1;   /* not reached */
    }
    survivor(victim, live);
    CHECK_MPI(MPI_Barrier(live));
    if (pml_rank == 0) {
        printf("pml_failure: OK (%d ranks)\n", pml_size);
        fflush(stdout);
    }
    MPI_Comm_free(&live);
    MPI_Finalize();
    return 0;
}

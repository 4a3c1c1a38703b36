/*
 * Intercommunicators through the PML: MPI_COMM_WORLD split in two groups
 * (one rank against the rest, and at 4 ranks also two against two), each
 * group's ranks in reverse world order, joined by MPI_Intercomm_create.
 * On the intercommunicator, ranks are the remote group's: named sends
 * and receives both ways, MPI_ANY_SOURCE/MPI_ANY_TAG, probe, a
 * synchronous send that cannot complete before its receive is posted, a
 * rendezvous-size message, and Open MPI's intercommunicator collectives
 * (which use the PML with its own tags); then MPI_Intercomm_merge and a
 * ring on the merged communicator.
 */
#include "pml_test.h"

#define BIG (4u << 20)

static int lo_n;           /* world ranks 0 .. lo_n-1 form group 0 */
static int color;          /* my group */
static int lrank, lsize, rsize;

/* the world rank of rank r of group g (ranks reversed in each group) */
static int world_of(int g, int r)
{
    return (g == 0) ? lo_n - 1 - r : pml_size - 1 - r;
}

static void named_both_ways(MPI_Comm inter)
{
    MPI_Request reqs[16];
    int         out[3], in[8][3];
    MPI_Status  st[16];
    int         r, n = 0;

    out[0] = pml_rank;
    out[1] = lrank;
    for (r = 0; r < rsize; ++r) {
        CHECK_MPI(MPI_Irecv(in[r], 3, MPI_INT, r, 10 + r, inter, &reqs[n++]));
    }
    for (r = 0; r < rsize; ++r) {
        out[2] = r;
        /* blocking: out changes; every receive is posted before any
         * send, at both groups */
        CHECK_MPI(MPI_Send(out, 3, MPI_INT, r, 10 + lrank, inter));
    }
    CHECK_MPI(MPI_Waitall(n, reqs, st));
    for (r = 0; r < rsize; ++r) {
        CHECK(st[r].MPI_SOURCE == r && st[r].MPI_TAG == 10 + r,
              "from remote %d: source %d tag %d", r, st[r].MPI_SOURCE,
              st[r].MPI_TAG);
        CHECK(in[r][0] == world_of(!color, r) && in[r][1] == r &&
              in[r][2] == lrank, "from remote %d: world %d rank %d to %d",
              r, in[r][0], in[r][1], in[r][2]);
    }
}

static void wildcards(MPI_Comm inter)
{
    int        seen[8] = { 0 }, v, r;
    MPI_Status st;

    for (r = 0; r < rsize; ++r) {
        v = 1000 + lrank;
        CHECK_MPI(MPI_Send(&v, 1, MPI_INT, r, 100 + lrank, inter));
    }
    for (r = 0; r < rsize; ++r) {
        CHECK_MPI(MPI_Recv(&v, 1, MPI_INT, MPI_ANY_SOURCE, MPI_ANY_TAG,
                           inter, &st));
        CHECK(st.MPI_SOURCE >= 0 && st.MPI_SOURCE < rsize &&
              v == 1000 + st.MPI_SOURCE && st.MPI_TAG == 100 + st.MPI_SOURCE,
              "wildcard got %d from %d tag %d", v, st.MPI_SOURCE,
              st.MPI_TAG);
        CHECK(!seen[st.MPI_SOURCE], "remote %d twice", st.MPI_SOURCE);
        seen[st.MPI_SOURCE] = 1;
    }
    /* no message of the next test may meet MPI_ANY_TAG here */
    CHECK_MPI(MPI_Barrier(MPI_COMM_WORLD));
}

/* every remote rank r sends r+1 ints: probe says who and how many */
static void probe(MPI_Comm inter)
{
    int        out[8], in[8], seen[8] = { 0 }, r, i, count;
    MPI_Status st;

    for (i = 0; i <= lrank; ++i) {
        out[i] = 7 * lrank + i;
    }
    for (r = 0; r < rsize; ++r) {
        CHECK_MPI(MPI_Send(out, lrank + 1, MPI_INT, r, 55, inter));
    }
    for (r = 0; r < rsize; ++r) {
        CHECK_MPI(MPI_Probe(MPI_ANY_SOURCE, 55, inter, &st));
        CHECK_MPI(MPI_Get_count(&st, MPI_INT, &count));
        CHECK(st.MPI_SOURCE >= 0 && st.MPI_SOURCE < rsize &&
              !seen[st.MPI_SOURCE] && count == st.MPI_SOURCE + 1,
              "probe: source %d count %d", st.MPI_SOURCE, count);
        seen[st.MPI_SOURCE] = 1;
        CHECK_MPI(MPI_Recv(in, count, MPI_INT, st.MPI_SOURCE, 55, inter,
                           &st));
        for (i = 0; i < count; ++i) {
            CHECK(in[i] == 7 * st.MPI_SOURCE + i, "probe: element %d is %d",
                  i, in[i]);
        }
    }
}

/* local rank 0 of group g issends to the remote group's last rank, which
 * posts the receive only after a second message: the issend cannot have
 * completed before that */
static void issend(MPI_Comm inter, int g)
{
    MPI_Request req;
    MPI_Status  st;
    int         v = 31 + g, go = 1, flag = 1, got = 0;

    if ((color == g) && (lrank == 0)) {
        CHECK_MPI(MPI_Issend(&v, 1, MPI_INT, rsize - 1, 60, inter, &req));
        for (int i = 0; i < 100; ++i) {
            CHECK_MPI(MPI_Test(&req, &flag, &st));
            CHECK(!flag, "issend completed before its receive was posted");
        }
        CHECK_MPI(MPI_Send(&go, 1, MPI_INT, rsize - 1, 61, inter));
        CHECK_MPI(MPI_Wait(&req, &st));
    } else if ((color != g) && (lrank == lsize - 1)) {
        CHECK_MPI(MPI_Recv(&go, 1, MPI_INT, 0, 61, inter, &st));
        CHECK_MPI(MPI_Recv(&got, 1, MPI_INT, 0, 60, inter, &st));
        CHECK(got == 31 + g && st.MPI_SOURCE == 0, "issend got %d from %d",
              got, st.MPI_SOURCE);
    }
}

/* local rank 0 of each group to the other's rank 0 and back */
static void rendezvous(MPI_Comm inter, unsigned char *buf)
{
    MPI_Status st;
    int        count;
    long       bad;

    if (lrank != 0) {
        return;
    }
    if (color == 0) {
        pml_fill(buf, BIG, 11);
        CHECK_MPI(MPI_Send(buf, BIG, MPI_BYTE, 0, 70, inter));
        memset(buf, 0, BIG);
        CHECK_MPI(MPI_Recv(buf, BIG, MPI_BYTE, 0, 71, inter, &st));
        bad = pml_verify(buf, BIG, 12);
    } else {
        memset(buf, 0, BIG);
        CHECK_MPI(MPI_Recv(buf, BIG, MPI_BYTE, MPI_ANY_SOURCE, 70, inter,
                           &st));
        bad = pml_verify(buf, BIG, 11);
        pml_fill(buf, BIG, 12);
        CHECK_MPI(MPI_Send(buf, BIG, MPI_BYTE, 0, 71, inter));
    }
    CHECK_MPI(MPI_Get_count(&st, MPI_BYTE, &count));
    CHECK(bad < 0 && count == (int)BIG && st.MPI_SOURCE == 0,
          "rendezvous: byte %ld wrong, %d bytes from %d", bad, count,
          st.MPI_SOURCE);
}

/* Open MPI's intercommunicator collectives: an allreduce gives the
 * remote group's sum, a bcast from the other group's root */
static void collectives(MPI_Comm inter)
{
    int v = pml_rank, sum = -1, want = 0, r, b = -1;

    for (r = 0; r < rsize; ++r) {
        want += world_of(!color, r);
    }
    CHECK_MPI(MPI_Allreduce(&v, &sum, 1, MPI_INT, MPI_SUM, inter));
    CHECK(sum == want, "intercomm allreduce %d, want %d", sum, want);
    /* group 0's local rank 0 broadcasts to group 1 */
    if (color == 0) {
        b = 4711;
        CHECK_MPI(MPI_Bcast(&b, 1, MPI_INT,
                            (lrank == 0) ? MPI_ROOT : MPI_PROC_NULL, inter));
    } else {
        CHECK_MPI(MPI_Bcast(&b, 1, MPI_INT, 0, inter));
        CHECK(b == 4711, "intercomm bcast %d", b);
    }
    CHECK_MPI(MPI_Barrier(inter));
}

/* group 0 first in the merged communicator, each group in its order */
static void merged_ring(MPI_Comm inter)
{
    MPI_Comm   merged;
    MPI_Status st;
    int        mrank, msize, want, to, from, got = -1;

    CHECK_MPI(MPI_Intercomm_merge(inter, color, &merged));
    MPI_Comm_rank(merged, &mrank);
    MPI_Comm_size(merged, &msize);
    want = (color == 0) ? lrank : lo_n + lrank;
    CHECK(msize == pml_size && mrank == want, "merged rank %d of %d, want "
          "%d", mrank, msize, want);
    to   = (mrank + 1) % msize;
    from = (mrank + msize - 1) % msize;
    CHECK_MPI(MPI_Sendrecv(&pml_rank, 1, MPI_INT, to, 90, &got, 1, MPI_INT,
                           MPI_ANY_SOURCE, MPI_ANY_TAG, merged, &st));
    CHECK(st.MPI_SOURCE == from && st.MPI_TAG == 90 &&
          got == ((from < lo_n) ? world_of(0, from) :
                  world_of(1, from - lo_n)),
          "merged ring got %d from %d", got, st.MPI_SOURCE);
    CHECK_MPI(MPI_Comm_free(&merged));
}

static void one_split(int lo, unsigned char *buf)
{
    MPI_Comm local, inter;
    int      is_inter = 0, remote_leader;

    lo_n  = lo;
    color = (pml_rank < lo_n) ? 0 : 1;
    CHECK_MPI(MPI_Comm_split(MPI_COMM_WORLD, color, pml_size - pml_rank,
                             &local));
    MPI_Comm_rank(local, &lrank);
    MPI_Comm_size(local, &lsize);
    remote_leader = world_of(!color, 0);
    CHECK_MPI(MPI_Intercomm_create(local, 0, MPI_COMM_WORLD, remote_leader,
                                   77, &inter));
    CHECK_MPI(MPI_Comm_test_inter(inter, &is_inter));
    MPI_Comm_remote_size(inter, &rsize);
    CHECK(is_inter && rsize == ((color == 0) ? pml_size - lo_n : lo_n) &&
          lsize == ((color == 0) ? lo_n : pml_size - lo_n) &&
          pml_rank == world_of(color, lrank),
          "intercomm: inter %d, %d local (rank %d), %d remote", is_inter,
          lsize, lrank, rsize);

    named_both_ways(inter);
    wildcards(inter);
    probe(inter);
    issend(inter, 0);
    issend(inter, 1);
    rendezvous(inter, buf);
    collectives(inter);
    merged_ring(inter);

    CHECK_MPI(MPI_Comm_free(&inter));
    CHECK_MPI(MPI_Comm_free(&local));
}

int main(int argc, char **argv)
{
    unsigned char *buf;

    pml_test_init(&argc, &argv, 2);
    CHECK(pml_size <= 8, "at most 8 ranks, not %d", pml_size);
    buf = malloc(BIG);
    CHECK(buf != NULL, "no memory");
    /* one against the rest (uneven from 3 ranks on), then halves */
    one_split(1, buf);
    if (pml_size / 2 != 1) {
        one_split(pml_size / 2, buf);
    }
    free(buf);
    pml_test_done("pml_intercomm");
}

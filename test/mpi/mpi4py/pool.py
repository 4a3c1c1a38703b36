"""A map over mpi4py.futures' pool: the tasks and their results travel as
pickled objects, through the point-to-point layer under test.

Run as `mpirun -np N python3 -m mpi4py.futures pool.py` (the static pool:
rank 0 runs this file and a manager thread that hands tasks to the other
ranks, which probe for them). Every result carries its bytes and their
CRC (random bytes of their own, so that a piece out of place shows); each
is checked. The results are 0 bytes to 1 MiB (every fifth one large:
rendezvous-size), in chunks of three tasks. Prints
"pool: OK <bytes>" when every result arrived whole and in order.
"""
import random
import zlib

from mpi4py.futures import MPIPoolExecutor

TASKS = 400


def work(i):
    n = (i * 7919) % (1 << 20) if i % 5 == 0 else i % 200
    # bytes of their own for every task: a piece of a result that arrives
    # in the wrong place, twice, or from another result changes the CRC
    data = random.Random(i).randbytes(n)
    return i, n, zlib.crc32(data), data


def main():
    total = 0
    with MPIPoolExecutor() as ex:
        for want, (i, n, crc, data) in enumerate(
                ex.map(work, range(TASKS), chunksize=3)):
            if i != want or len(data) != n or zlib.crc32(data) != crc:
                raise SystemExit("pool: result %d is wrong (task %d, %d of "
                                 "%d bytes)" % (want, i, len(data), n))
            total += n
    print("pool: OK", total, flush=True)


if __name__ == "__main__":
    main()

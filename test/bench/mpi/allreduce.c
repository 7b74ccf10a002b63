/* The coll scenario's peer: MPI_Allreduce of float32 sums, timed as
 * hecctl coll bench times its rails (a barrier, then the call; the
 * slowest rank's mean), with the host CPU per call and the wrong elements.
 * usage: mpirun -np N allreduce ITERS WARMUP SIZE...
 * prints, on rank 0, one line per size: size seconds cpu_seconds wrong */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>

static double cpu_now(void) {
	struct rusage u;
	getrusage(RUSAGE_SELF, &u);
	return u.ru_utime.tv_sec + u.ru_utime.tv_usec / 1e6 + u.ru_stime.tv_sec + u.ru_stime.tv_usec / 1e6;
}

int main(int argc, char **argv) {
	MPI_Init(&argc, &argv);
	int rank, n;
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &n);
	int iters = argc > 1 ? atoi(argv[1]) : 0;
	int warmup = argc > 2 ? atoi(argv[2]) : -1;
	if (iters < 1 || warmup < 0 || warmup > 1000) {
		if (rank == 0)
			fprintf(stderr, "usage: allreduce ITERS WARMUP SIZE... (ITERS >= 1, 0 <= WARMUP <= 1000)\n");
		MPI_Finalize();
		return 2;
	}
	for (int a = 3; a < argc; a++) {
		long size = atol(argv[a]);
		if (size < 4 || size % 4 != 0) {
			if (rank == 0)
				fprintf(stderr, "allreduce: size %s: want a positive multiple of 4 bytes\n", argv[a]);
			MPI_Finalize();
			return 2;
		}
		long count = size / 4;
		float *s = malloc(count * sizeof *s), *r = malloc(count * sizeof *r);
		for (long i = 0; i < count; i++)
			s[i] = (float)((rank + i) % 5 + 1);
		for (int w = 0; w < warmup; w++)
			MPI_Allreduce(s, r, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
		double t = 0, cpu = 0;
		long wrong = 0;
		for (int it = 0; it < iters; it++) {
			MPI_Barrier(MPI_COMM_WORLD);
			double c0 = cpu_now(), t0 = MPI_Wtime();
			MPI_Allreduce(s, r, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
			t += MPI_Wtime() - t0;
			cpu += cpu_now() - c0;
			for (long i = 0; i < count; i++) {
				float want = 0;
				for (int k = 0; k < n; k++)
					want += (float)((k + i) % 5 + 1);
				wrong += r[i] != want;
			}
		}
		double tmax, cpusum;
		long wsum;
		t /= iters;
		cpu /= iters;
		MPI_Reduce(&t, &tmax, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
		MPI_Reduce(&cpu, &cpusum, 1, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
		MPI_Reduce(&wrong, &wsum, 1, MPI_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
		if (rank == 0)
			printf("%ld %.9f %.9f %ld\n", size, tmax, cpusum / n, wsum);
		fflush(stdout);
		free(s);
		free(r);
	}
	MPI_Finalize();
	return 0;
}

// An address-space limit (RLIMIT_AS, `ulimit -v`) met before anything reserves memory. MPI, UCX,
// glibc's per-thread malloc arenas (64 MiB reservations each), OpenMP thread stacks and oneDNN all
// reserve address space, and each fails its own way when a reservation is refused: a multi-line
// PMIx abort, "libgomp: Thread creation failed" (exit 1, the output lock left behind), a crash
// inside oneDNN's primitive creation. So a limit too small to start is refused here with one line,
// and under any limit the arenas are capped and the OpenMP threads started at once.
#pragma once

namespace moerun::launch {

// Under a limit: Usage error (exit 2) when it is below what moerun needs to start (libraries, MPI,
// one stack per OpenMP thread); else glibc keeps one malloc arena and the OpenMP threads are
// created now, before any output file is opened. Without a limit: nothing.
void fit_address_space_limit();

}  // namespace moerun::launch

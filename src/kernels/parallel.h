// How the model's loops run across the compute threads: when a loop is worth a parallel
// region (worth_parallel), and parallel_for, a fork/join whose join waits for work, not for
// threads.
//
// Every loop the forward pass splits computes each index the same way whatever thread
// runs it (batch invariance): the split changes the time, never the bits.
#pragma once

#include <cstdint>
#include <type_traits>
#include <utility>

namespace pdserve::kernels {

/// Multiply-adds (or element operations) below which a loop runs on the calling thread:
/// a parallel region's fork/join costs microseconds, and far more when the machine is
/// oversubscribed (a descheduled worker stalls the barrier for a whole time slice).
constexpr int64_t kMinParallelWork = int64_t{1} << 15;

inline bool worth_parallel(int64_t work) { return work >= kMinParallelWork; }

/// Sets the number of compute threads (>= 1; the calling thread counts as one) that
/// parallel_for uses when called from this thread. Each thread that calls parallel_for has
/// its own pool of n − 1 workers (as each OpenMP initial thread has its own team), made or
/// resized on its next parallel_for and joined when the thread exits. Default: the CPUs
/// this process may run on (sched_getaffinity).
void set_compute_threads(int n);

/// The compute threads parallel_for uses from this thread (see set_compute_threads).
int compute_threads();

/// The CPUs this process may run on (sched_getaffinity: taskset, a container's cpuset),
/// the default compute thread count. More threads than this take turns on a core.
int available_cpus();

/// The range body of parallel_for: fn(ctx, begin, end).
using RangeFn = void (*)(void* ctx, int64_t begin, int64_t end);

/// parallel_for's engine, for a plain function pointer (see parallel_for).
int parallel_for_fn(int64_t n, int64_t grain, RangeFn fn, void* ctx, bool parallel) noexcept;

/// Runs body(begin, end) over disjoint ranges that cover [0, n), and returns when every
/// range has run. In parallel each range is at most `grain` long (0 = about 8 ranges per
/// compute thread); serially body gets [0, n) in one call.
///
/// The calling thread takes part. Each thread runs the ranges of its own contiguous share
/// of [0, n) in order (so a kernel's prefetch of what follows its range is for the range
/// it runs next), then claims ranges one at a time from the back of the others' shares, so
/// a worker that is slow or descheduled leaves its ranges to the others. The
/// join waits only for ranges already claimed, never for a thread that has not claimed one
/// (an OpenMP barrier waits for every thread of the team: a whole time slice on a busy
/// machine), and sleeps, leaving the CPU to the worker, when a claimed range runs long.
///
/// Runs serially on the calling thread when `parallel` is false, when n <= grain, with one
/// compute thread, or when called from inside another parallel_for's body (no nesting, as
/// OpenMP's default). body must not throw (a throw terminates, as from an OpenMP region).
/// Returns the threads that could take part: 1 when it ran serially, else
/// compute_threads() (for per-thread averages of the time spent in body).
template <class Body>
int parallel_for(int64_t n, Body&& body, bool parallel = true, int64_t grain = 0) {
  using B = std::remove_reference_t<Body>;
  return parallel_for_fn(
      n, grain, [](void* ctx, int64_t b, int64_t e) { (*static_cast<B*>(ctx))(b, e); },
      const_cast<void*>(static_cast<const void*>(&body)), parallel);
}

}  // namespace pdserve::kernels

// parallel_for's pool: workers that claim ranges from per-thread segments, and a join on
// the segments' counts of finished ranges.
//
// A job's ranges are split into one contiguous segment per thread (the caller's is
// segment 0, worker i's segment i). A thread claims its own segment's ranges front to back,
// so the ranges it runs are neighbours and a kernel's prefetch of the next row tile
// (kernels/tile_prefetch.h) is for the tile it runs next; once its segment is empty it
// steals from the back of the others', so a slow or descheduled thread's ranges go to the
// rest. (With one shared counter, two threads took every other range, and each range's
// first tile was a cold miss: a one-token GEMV of 2,048 rows in 16 ranges read one eighth
// of its weights without prefetch.)
//
// Each segment is one 64-bit word: generation (20 bits) | end (22) | next (22). A claim is
// a compare-exchange that keeps the generation, so a worker that wakes late, after its job
// is done and the next one posted, fails its claim and never touches a finished job's
// (dead) arguments; it reads them only after a claim succeeded, while the job is still
// running. The caller writes the segments, then posts the job's generation in the state
// word that idle workers watch, claims ranges like any worker, then waits until the
// segments' finished counts add up to the range count. A range is counted in the segment
// it came from, so a thread that runs its own share writes only its own cache line (one
// shared count bounced between the cores at every range: 1.7 -> 0.95 us for a job of 16
// empty ranges on 2 threads, BM_ParallelForEmpty).
#include "kernels/parallel.h"

#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
#include <thread>
#include <vector>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define PDS_CPU_RELAX() _mm_pause()
#else
#define PDS_CPU_RELAX() ((void)0)
#endif

namespace pdserve::kernels {

namespace {

constexpr int kClaimsPerThread = 8;  // default grain: about this many ranges per thread
constexpr int kRangeBits = 22;       // ranges per job < 2^22
constexpr int64_t kMaxRanges = (int64_t{1} << kRangeBits) - 1;
constexpr uint64_t kRangeMask = (uint64_t{1} << kRangeBits) - 1;
constexpr int kGenBits = 64 - 2 * kRangeBits;
constexpr uint64_t kGenMask = (uint64_t{1} << kGenBits) - 1;
// How long an idle worker spins for the next job before it sleeps: the gaps between a
// forward pass's parallel loops (a norm, RoPE, sampling) are shorter; the gaps between
// engine steps usually longer.
constexpr auto kSpinBeforeSleep = std::chrono::microseconds(300);

constexpr uint64_t pack(uint64_t gen, uint64_t end, uint64_t next) {
  return (gen & kGenMask) << (2 * kRangeBits) | end << kRangeBits | next;
}
constexpr uint64_t gen_of(uint64_t s) { return s >> (2 * kRangeBits); }
constexpr uint64_t end_of(uint64_t s) { return (s >> kRangeBits) & kRangeMask; }
constexpr uint64_t next_of(uint64_t s) { return s & kRangeMask; }

thread_local bool t_in_body = false;  // inside a parallel_for body: nested calls run serially

int affinity_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1u, std::thread::hardware_concurrency());
}

/// One caller thread's workers (threads − 1 of them) and the job they share.
class ComputePool {
 public:
  explicit ComputePool(int threads) : threads_(threads), segments_(threads) {
    workers_.reserve(threads - 1);
    for (int i = 1; i < threads; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
  }

  ~ComputePool() {
    stop_.store(true, std::memory_order_seq_cst);
    wake_.fetch_add(1, std::memory_order_seq_cst);
    wake_.notify_all();
    for (std::thread& t : workers_) t.join();
  }

  int threads() const { return threads_; }

  void run(int64_t n, int64_t grain, RangeFn fn, void* ctx) {
    const auto ranges = static_cast<int32_t>((n + grain - 1) / grain);
    job_ = Job{fn, ctx, n, grain};
    gen_ = (gen_ + 1) & kGenMask;
    const auto r = static_cast<uint64_t>(ranges);
    for (int t = 0; t < threads_; ++t) {  // thread t's share; release: a claim of generation gen_ sees job_
      segments_[t].finished.store(0, std::memory_order_relaxed);
      segments_[t].word.store(pack(gen_, r * (t + 1) / threads_, r * t / threads_), std::memory_order_release);
    }
    // seq_cst with the sleepers_ load below and a worker's sleepers_ increment then state
    // load: either the worker sees this job or this thread sees it asleep and wakes it.
    state_.store(pack(gen_, 0, 0), std::memory_order_seq_cst);
    if (sleepers_.load(std::memory_order_seq_cst) > 0) {
      wake_.fetch_add(1, std::memory_order_seq_cst);
      wake_.notify_all();
    }
    work(0, gen_);
    // Ranges still running on workers: spin briefly, then sleep until the last one ends (a
    // worker preempted inside its range gets the CPU back sooner than if this thread spun).
    for (int spins = 0;; ++spins) {
      if (finished(std::memory_order_acquire) == ranges) break;
      if (spins < 4096) {
        PDS_CPU_RELAX();
        continue;
      }
      // seq_cst with a worker's finished increment then caller_asleep_ load (Dekker): either
      // it sees this thread asleep and bumps wake_caller_, or this re-read sees its increment.
      const uint32_t w = wake_caller_.load(std::memory_order_seq_cst);
      caller_asleep_.store(true, std::memory_order_seq_cst);
      if (finished(std::memory_order_seq_cst) != ranges) wake_caller_.wait(w, std::memory_order_seq_cst);
      caller_asleep_.store(false, std::memory_order_relaxed);
    }
  }

 private:
  struct Job {
    RangeFn fn = nullptr;
    void* ctx = nullptr;
    int64_t n = 0, grain = 1;
  };

  // The current job's finished ranges (the caller's join).
  int32_t finished(std::memory_order order) const {
    int32_t sum = 0;
    for (const Segment& seg : segments_) sum += seg.finished.load(order);
    return sum;
  }

  // Claims a range of generation g for thread `self`: the front of its own segment, else
  // the back of another's (the next thread's first). Returns the range and sets *from to
  // its segment, or returns -1 when every segment is empty or no longer g's.
  int64_t claim(int self, uint64_t g, int* from) {
    for (int k = 0; k < threads_; ++k) {
      const int t = (self + k) % threads_;
      std::atomic<uint64_t>& seg = segments_[t].word;
      uint64_t s = seg.load(std::memory_order_acquire);
      while (gen_of(s) == g && next_of(s) < end_of(s)) {
        const uint64_t claimed = k == 0 ? s + 1 : s - (uint64_t{1} << kRangeBits);  // next + 1 | end − 1
        if (seg.compare_exchange_weak(s, claimed, std::memory_order_acq_rel, std::memory_order_acquire)) {
          *from = t;
          return static_cast<int64_t>(k == 0 ? next_of(s) : end_of(s) - 1);
        }
      }
    }
    return -1;
  }

  // Runs ranges of generation g on thread `self` until none is left (or g is no longer
  // current).
  void work(int self, uint64_t g) {
    int from = 0;
    for (int64_t r; (r = claim(self, g, &from)) >= 0;) {
      // The claim succeeded, so job g is not finished: the caller is still in run() and
      // job_ is g's (published before the segment word that carried g).
      const Job& j = job_;
      const int64_t b = r * j.grain;
      t_in_body = true;
      j.fn(j.ctx, b, std::min(j.n, b + j.grain));
      t_in_body = false;
      // Counted in the range's own segment: a line this thread holds unless it stole the
      // range (one counter for all would bounce between the cores at every range).
      segments_[from].finished.fetch_add(1, std::memory_order_seq_cst);
      if (caller_asleep_.load(std::memory_order_seq_cst)) {
        wake_caller_.fetch_add(1, std::memory_order_seq_cst);
        wake_caller_.notify_one();
      }
    }
  }

  void worker_loop(int self) {
    pthread_setname_np(pthread_self(), "pds-compute");
    uint64_t seen = 0;  // the generation of the state word at construction: a job posted before this thread ran is still new to it
    for (;;) {
      uint64_t s = state_.load(std::memory_order_acquire);
      const auto spin_until = std::chrono::steady_clock::now() + kSpinBeforeSleep;
      for (int i = 0; gen_of(s) == seen && !stop_.load(std::memory_order_relaxed); ++i) {
        PDS_CPU_RELAX();
        if ((i & 255) == 255 && std::chrono::steady_clock::now() > spin_until) {
          const uint32_t w = wake_.load(std::memory_order_seq_cst);
          sleepers_.fetch_add(1, std::memory_order_seq_cst);
          if (gen_of(state_.load(std::memory_order_seq_cst)) == seen && !stop_.load(std::memory_order_seq_cst))
            wake_.wait(w, std::memory_order_seq_cst);
          sleepers_.fetch_sub(1, std::memory_order_seq_cst);
        }
        s = state_.load(std::memory_order_acquire);
      }
      if (stop_.load(std::memory_order_acquire)) return;
      seen = gen_of(s);
      work(self, seen);
    }
  }

  const int threads_;
  std::vector<std::thread> workers_;
  uint64_t gen_ = 0;  // the caller's current generation (only the caller touches it)
  // One thread's contiguous part of the current job's ranges, on its own cache line.
  struct alignas(64) Segment {
    std::atomic<uint64_t> word{0};       // generation | end | next
    std::atomic<int32_t> finished{0};    // its ranges of the current job that have run
  };
  std::vector<Segment> segments_;
  // What idle workers watch, and the job the segments' generation names, on one line.
  alignas(64) std::atomic<uint64_t> state_{0};  // the current job's generation
  Job job_;  // written by the caller before it publishes the generation in the segments
  // The caller's sleep in the join, on another line (read after every range, written only
  // when the caller sleeps).
  alignas(64) std::atomic<uint32_t> wake_caller_{0};  // bumped (and notified) to wake the caller
  std::atomic<bool> caller_asleep_{false};
  // Idle workers' sleep and shutdown, on a third.
  alignas(64) std::atomic<uint32_t> wake_{0};  // bumped (and notified) to wake sleeping workers
  std::atomic<int> sleepers_{0};
  std::atomic<bool> stop_{false};
};

struct CallerState {
  int threads = affinity_cpus();
  std::unique_ptr<ComputePool> pool;
};

CallerState& caller() {
  thread_local CallerState c;
  return c;
}

// In a forked child only the forking thread exists: its pool's workers are gone, so the
// pool is dropped without joining them (a new one is made on the next parallel_for).
void forget_pool_in_child() { (void)caller().pool.release(); }
[[maybe_unused]] const int g_atfork = pthread_atfork(nullptr, nullptr, forget_pool_in_child);

}  // namespace

void set_compute_threads(int n) { caller().threads = std::max(1, n); }

int compute_threads() { return caller().threads; }

int available_cpus() { return affinity_cpus(); }

int parallel_for_fn(int64_t n, int64_t grain, RangeFn fn, void* ctx, bool parallel) noexcept {
  if (n <= 0) return 1;
  CallerState& c = caller();
  if (grain <= 0) grain = std::max<int64_t>(1, n / (int64_t{c.threads} * kClaimsPerThread));
  grain = std::max(grain, (n + kMaxRanges - 1) / kMaxRanges);  // the range count fits its bits
  if (c.threads <= 1 && c.pool) c.pool.reset();
  if (!parallel || c.threads <= 1 || n <= grain || t_in_body) {
    fn(ctx, 0, n);
    return 1;
  }
  if (!c.pool || c.pool->threads() != c.threads) {
    c.pool.reset();
    c.pool = std::make_unique<ComputePool>(c.threads);
  }
  c.pool->run(n, grain, fn, ctx);
  return c.threads;
}

}  // namespace pdserve::kernels

// kernels::parallel_for (kernels/parallel.h): every index runs once, in ranges no longer
// than the grain; back-to-back jobs never see a finished job's arguments; an idle, sleeping
// worker is woken; nested calls run on the caller; callers on different threads have their
// own pools; and a worker that cannot run (held in a signal handler, as a descheduled
// thread) does not hold the join: the caller does the whole job alone.
#include <gtest/gtest.h>

#include <pthread.h>
#include <semaphore.h>
#include <signal.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <future>
#include <memory>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "kernels/parallel.h"
#include "support/wait.h"

namespace pdserve {
namespace {

/// Restores the calling thread's compute thread count on scope exit.
struct ThreadsScope {
  int saved = kernels::compute_threads();
  explicit ThreadsScope(int n) { kernels::set_compute_threads(n); }
  ~ThreadsScope() { kernels::set_compute_threads(saved); }
};

TEST(KernelsParallel, EveryIndexRunsExactlyOnceInRangesNoLongerThanTheGrain) {
  for (int threads : {1, 2, 3, 8}) {
    ThreadsScope scope(threads);
    for (int64_t n : {1, 7, 64, 1000, 100003}) {
      for (int64_t grain : {0, 1, 7, 5000}) {
        std::vector<std::atomic<int>> runs(n);
        std::atomic<int64_t> longest{0};
        std::atomic<bool> bad_range{false};
        kernels::parallel_for(
            n,
            [&](int64_t b, int64_t e) {
              if (b < 0 || e > n || b >= e) bad_range = true;
              int64_t len = e - b, seen = longest.load();
              while (len > seen && !longest.compare_exchange_weak(seen, len)) {
              }
              for (int64_t i = b; i < e; ++i) runs[i].fetch_add(1);
            },
            true, grain);
        EXPECT_FALSE(bad_range) << threads << " threads, n " << n << ", grain " << grain;
        if (threads > 1 && grain > 0 && n > grain) {
          EXPECT_LE(longest.load(), grain) << threads << " threads, n " << n;
        }
        int64_t wrong = 0;
        for (auto& r : runs) wrong += r.load() != 1;
        EXPECT_EQ(wrong, 0) << threads << " threads, n " << n << ", grain " << grain;
      }
    }
  }
}

TEST(KernelsParallel, AFalseConditionRunsTheWholeRangeOnTheCaller) {
  ThreadsScope scope(4);
  const std::thread::id me = std::this_thread::get_id();
  int calls = 0;
  bool elsewhere = false;
  kernels::parallel_for(
      1000,
      [&](int64_t b, int64_t e) {
        ++calls;
        elsewhere |= std::this_thread::get_id() != me;
        EXPECT_EQ(b, 0);
        EXPECT_EQ(e, 1000);
      },
      false, 1);
  EXPECT_EQ(calls, 1);
  EXPECT_FALSE(elsewhere);
}

// Jobs one after the other, each with its arguments on the heap, freed when it returns: a
// worker that woke late and ran a finished job would read freed memory (ASan) or add to
// the wrong sum.
TEST(KernelsParallel, ManyShortJobsBackToBackEachGetTheirOwnArguments) {
  ThreadsScope scope(3);
  for (int job = 0; job < 20000; ++job) {
    auto sum = std::make_unique<std::atomic<int64_t>>(0);
    const int64_t n = 1 + job % 13, base = int64_t{job} * 1000;
    std::atomic<int64_t>* s = sum.get();
    kernels::parallel_for(
        n, [s, base](int64_t b, int64_t e) {
          for (int64_t i = b; i < e; ++i) s->fetch_add(base + i);
        },
        true, 1);
    ASSERT_EQ(sum->load(), n * base + n * (n - 1) / 2) << "job " << job;
  }
}

/// True when this process has compute workers ("pds-compute" threads) and every one is
/// sleeping (state S in /proc/self/task/TID/stat), i.e. past its spin and blocked.
bool compute_workers_all_asleep() {
  int workers = 0;
  for (const auto& task : std::filesystem::directory_iterator("/proc/self/task")) {
    std::ifstream comm(task.path() / "comm");
    std::string name;
    std::getline(comm, name);
    if (name != "pds-compute") continue;
    ++workers;
    std::ifstream stat(task.path() / "stat");
    std::string line;
    std::getline(stat, line);
    const size_t close = line.rfind(')');  // "tid (comm) S ..."
    if (close == std::string::npos || close + 2 >= line.size() || line[close + 2] != 'S') return false;
  }
  return workers > 0;
}

// A worker that has gone to sleep (idle longer than its spin) is woken by the next job.
TEST(KernelsParallel, AnIdleWorkerIsWokenForTheNextJob) {
  ThreadsScope scope(2);
  kernels::parallel_for(2, [](int64_t, int64_t) {}, true, 1);  // the pool exists
  for (int round = 0; round < 3; ++round) {
    // Wait until the worker has stopped spinning and sleeps (state S in /proc), not a time.
    ASSERT_TRUE(testing::wait_until(compute_workers_all_asleep, std::chrono::seconds(10))) << "round " << round;
    const std::thread::id me = std::this_thread::get_id();
    std::atomic<bool> worker_ran{false};
    kernels::parallel_for(
        2,
        [&](int64_t, int64_t) {
          if (std::this_thread::get_id() != me) worker_ran = true;
          // The caller's range waits for the worker's (bounded: a failure, not a hang).
          for (auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
               !worker_ran && std::chrono::steady_clock::now() < until;)
            std::this_thread::yield();
        },
        true, 1);
    EXPECT_TRUE(worker_ran) << "round " << round;
  }
}

TEST(KernelsParallel, ANestedCallRunsOnTheThreadOfItsBody) {
  ThreadsScope scope(2);
  std::atomic<int> nested_elsewhere{0}, inner_total{0};
  kernels::parallel_for(
      8,
      [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) {
          const std::thread::id outer = std::this_thread::get_id();
          kernels::parallel_for(
              100,
              [&](int64_t ib, int64_t ie) {
                if (std::this_thread::get_id() != outer) nested_elsewhere.fetch_add(1);
                inner_total.fetch_add(static_cast<int>(ie - ib));
              },
              true, 1);
        }
      },
      true, 1);
  EXPECT_EQ(nested_elsewhere.load(), 0);
  EXPECT_EQ(inner_total.load(), 800);
}

TEST(KernelsParallel, CallersOnTwoThreadsEachGetTheirOwnPool) {
  auto caller = [](int threads, int64_t salt) {
    kernels::set_compute_threads(threads);
    int64_t bad = 0;
    for (int job = 0; job < 2000; ++job) {
      std::vector<int64_t> out(257, -1);
      kernels::parallel_for(
          257, [&](int64_t b, int64_t e) {
            for (int64_t i = b; i < e; ++i) out[i] = salt + job + i;
          },
          true, 3);
      for (int64_t i = 0; i < 257; ++i) bad += out[i] != salt + job + i;
    }
    return bad;
  };
  auto a = std::async(std::launch::async, caller, 2, 0);
  auto b = std::async(std::launch::async, caller, 3, 1000000);
  EXPECT_EQ(a.get(), 0);
  EXPECT_EQ(b.get(), 0);
}

// The worker held in a signal handler stands for a worker the OS does not run (a busy
// machine): an OpenMP join would wait for it; parallel_for's caller claims every range:
// its own share in order (neighbouring ranges, so a kernel's prefetch of the next row tile
// is for the tile it runs next), then the worker's share from the back.
sem_t g_release;
std::atomic<bool> g_held{false};
void hold_thread(int) {
  g_held.store(true);
  while (sem_wait(&g_release) != 0) {
  }
}

TEST(KernelsParallel, AWorkerThatCannotRunDoesNotHoldTheJoin) {
  ASSERT_EQ(sem_init(&g_release, 0, 0), 0);
  struct sigaction sa {}, old {};
  sa.sa_handler = hold_thread;
  sigemptyset(&sa.sa_mask);
  ASSERT_EQ(sigaction(SIGUSR2, &sa, &old), 0);
  g_held = false;

  // Everything runs on one caller thread (its own pool); this thread watches the time.
  std::vector<int64_t> caller_order;  // the ranges the caller ran alone, in order
  std::promise<void> worker_found;
  std::promise<int64_t> alone_done;
  std::thread caller([&] {
    kernels::set_compute_threads(2);
    // A job that waits until the worker has entered it, to learn the worker's handle.
    const pthread_t self = pthread_self();
    std::atomic<bool> have{false};
    pthread_t worker{};
    std::mutex mu;
    kernels::parallel_for(
        2,
        [&](int64_t, int64_t) {
          if (!pthread_equal(pthread_self(), self)) {
            std::lock_guard<std::mutex> lk(mu);
            worker = pthread_self();
            have = true;
          }
          for (auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
               !have && std::chrono::steady_clock::now() < until;)
            std::this_thread::yield();
        },
        true, 1);
    if (!have) {
      alone_done.set_value(-1);
      worker_found.set_value();
      return;
    }
    worker_found.set_value();
    {
      std::lock_guard<std::mutex> lk(mu);
      pthread_kill(worker, SIGUSR2);
    }
    for (auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
         !g_held && std::chrono::steady_clock::now() < until;)
      std::this_thread::yield();
    if (!g_held) {
      alone_done.set_value(-2);
      return;
    }
    // The worker now cannot run: this job must finish on the caller alone, its own share
    // (the first half) front to back, then the worker's from the back.
    std::atomic<int64_t> on_caller{0};
    kernels::parallel_for(
        1000, [&](int64_t b, int64_t e) {
          if (pthread_equal(pthread_self(), self)) {
            on_caller.fetch_add(e - b);
            caller_order.push_back(b);
          }
        },
        true, 1);
    alone_done.set_value(on_caller.load());
  });
  worker_found.get_future().wait();
  auto done = alone_done.get_future();
  const bool finished = done.wait_for(std::chrono::seconds(20)) == std::future_status::ready;
  sem_post(&g_release);  // let the worker go whatever happened
  caller.join();
  sigaction(SIGUSR2, &old, nullptr);
  ASSERT_TRUE(finished) << "the join waited for a worker that could not run";
  const int64_t alone = done.get();
  ASSERT_NE(alone, -1) << "the worker never took part in the first job";
  ASSERT_NE(alone, -2) << "the worker never entered the signal handler";
  EXPECT_EQ(alone, 1000);
  std::vector<int64_t> expected;
  for (int64_t i = 0; i < 500; ++i) expected.push_back(i);
  for (int64_t i = 999; i >= 500; --i) expected.push_back(i);
  size_t first_diff = 0;
  while (first_diff < std::min(caller_order.size(), expected.size()) && caller_order[first_diff] == expected[first_diff]) ++first_diff;
  EXPECT_EQ(caller_order, expected) << "the caller runs its own half in order, then takes the worker's from the back; first difference at " << first_diff << " of " << caller_order.size();
  sem_destroy(&g_release);
}

}  // namespace
}  // namespace pdserve

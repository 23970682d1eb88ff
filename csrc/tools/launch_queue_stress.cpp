// launch_queue_stress: the launcher thread's queue (csrc/binding/launch_queue.h) driven hard on a
// CPU, meant to be built with -fsanitize=thread (test/cpu/launch-queue.test.ts does). One producer
// pushes numbered closures, issues one itself whenever nothing is queued (as DeviceContext::Submit
// does when the GPU is idle), flushes, pauses long enough for the queue's thread to fall asleep,
// and injects failures and exceptions; every closure appends its number to one log. Checks: the log
// is exactly 0, 1, 2, ... (the order of submission, whoever issued each), everything pushed before
// a flush is issued when it returns, each failure is reported once and the first one of a stretch
// wins, an exception becomes an error. Prints "ok <figures>" and exits 0, else exits 1.
//
//   launch_queue_stress [operations] [seed]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "binding/launch_queue.h"

namespace {

int failures = 0;
void check(bool ok, const char* what, long at) {
  if (!ok && failures++ < 10) std::fprintf(stderr, "launch_queue_stress: %s (operation %ld)\n", what, at);
}

}  // namespace

int main(int argc, char** argv) {
  const long ops = argc > 1 ? std::atol(argv[1]) : 200000;
  uint64_t rng = argc > 2 ? std::strtoull(argv[2], nullptr, 10) : 12345;
  auto next = [&rng]() {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return rng;
  };
  std::vector<long> log;  // written only by whoever issues a closure (the run lock, or nothing pending)
  log.reserve(static_cast<size_t>(ops) + 16);
  long submitted = 0, here = 0, flushes = 0, sleeps = 0, errors_seen = 0, errors_made = 0;
  std::string expected_error;  // the first failure since the last TakeError
  for (int spin : {0, 20, 200}) {
    fab::LaunchQueue q(spin, [] {}, true);
    for (long i = 0; i < ops / 3; ++i) {
      const uint64_t r = next() % 1000;
      const long n = submitted++;
      // One closure in 50 fails, one in 400 throws.
      const int kind = r < 20 ? 1 : r < 22 ? 2 : 0;
      std::string msg = kind == 1 ? "failure " + std::to_string(n) : kind == 2 ? "internal: exception while issuing a launch: thrown " + std::to_string(n) : "";
      if (kind != 0) {
        ++errors_made;
        if (expected_error.empty()) expected_error = msg;
      }
      fab::Launch f = [&log, n, kind](int* code) -> std::string {
        log.push_back(n);
        if (kind == 1) {
          *code = 7;
          return "failure " + std::to_string(n);
        }
        if (kind == 2) throw std::runtime_error("thrown " + std::to_string(n));
        return "";
      };
      if (r < 300 && !q.Pending()) {  // issued by the producer itself, as Submit does on an idle GPU
        ++here;
        int code = 0;
        const std::string e = fab::LaunchQueue::Issue(f, &code);
        check(e == msg, "an error of a closure issued in place", n);
        if (kind != 0) {  // reported at once there, not through the queue
          --errors_made;
          if (expected_error == msg) expected_error.clear();
        }
        if (q.Sleeping()) q.Wake(true);
      } else {
        q.Push(std::move(f));
      }
      if (r >= 900 && r < 960) {
        q.Flush();
        ++flushes;
        check(log.size() == static_cast<size_t>(submitted), "a flush returned with closures left", n);
      }
      if (r >= 960 && r < 965) {
        int code = 0;
        q.Flush();
        const std::string e = q.TakeError(&code);
        check(e == expected_error, "TakeError did not give the first failure since the last call", n);
        check(e.empty() || e.rfind("failure", 0) != 0 || code == 7, "a failure lost its code", n);
        if (!e.empty()) ++errors_seen;
        expected_error.clear();
      }
      if (r == 999 && sleeps < 40) {  // long enough for the queue's thread to fall asleep
        ++sleeps;
        std::this_thread::sleep_for(std::chrono::microseconds(spin + 300));
      }
    }
    q.Stop();
    check(log.size() == static_cast<size_t>(submitted), "Stop left closures unissued", submitted);
    int code = 0;
    const std::string e = q.TakeError(&code);
    check(e == expected_error, "the last failure was not reported", submitted);
    if (!e.empty()) ++errors_seen;
    expected_error.clear();
    for (size_t i = 0; i < log.size(); ++i) {
      if (log[i] != static_cast<long>(i)) {
        check(false, "closures issued out of order", static_cast<long>(i));
        break;
      }
    }
  }
  if (failures > 0) {
    std::fprintf(stderr, "launch_queue_stress: %d failed checks\n", failures);
    return 1;
  }
  std::printf("ok %ld closures (%ld issued in place), %ld flushes, %ld pauses, %ld failures reported as %ld errors\n",
              submitted, here, flushes, sleeps, errors_made, errors_seen);
  return 0;
}

// A progress line on stderr for one long call that reports nothing while it runs (`simulate`:
// the SimGrid engine runs in a forked child): from `delay_seconds` on, the time elapsed against
// the time the resource guard expected, redrawn in place on a terminal (every 0.5 s) or a line
// every 5 s when asked for with --progress off a terminal. The fraction is time-based (elapsed /
// expected, shown at most 99% until done) and says so.
//
// The line is formatted into a stack buffer and written with write(2): no stdio lock or heap
// allocation is held across the engine's fork().
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <string>
#include <thread>

#include <unistd.h>

namespace fsdpsim::tools {

class ElapsedProgress {
 public:
  ElapsedProgress(bool enabled, bool tty, double expected_seconds, double delay_seconds = 2.0)
      : tty_(tty), expected_(expected_seconds), delay_(delay_seconds) {
    if (enabled) thread_ = std::thread([this] { loop(); });
  }
  ~ElapsedProgress() { finish(); }
  ElapsedProgress(const ElapsedProgress&) = delete;
  ElapsedProgress& operator=(const ElapsedProgress&) = delete;

  // Stops the line (and ends it on a terminal). Safe to call twice.
  void finish() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      done_ = true;
    }
    wake_.notify_all();
    if (thread_.joinable()) thread_.join();
  }

 private:
  void loop() {
    const auto start = std::chrono::steady_clock::now();
    const double period = tty_ ? 0.5 : 5.0;
    double next = delay_;
    bool drawn = false;
    std::unique_lock<std::mutex> lock(mutex_);
    while (!wake_.wait_until(lock, start + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                                 std::chrono::duration<double>(next)),
                             [this] { return done_; })) {
      const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      draw(elapsed);
      drawn = true;
      next = elapsed + period;
    }
    if (drawn && tty_) write_text("\n");
  }

  void draw(double elapsed) const {
    char line[160];
    if (expected_ > 0) {
      const double fraction = std::min(0.99, elapsed / expected_);
      constexpr int kWidth = 30;
      char bar[kWidth + 1];
      const int filled = static_cast<int>(fraction * kWidth);
      for (int i = 0; i < kWidth; ++i) bar[i] = i < filled ? '#' : '.';
      bar[kWidth] = '\0';
      std::snprintf(line, sizeof line, "%ssimulate: [%s] %.1f s of the ~%.0f s expected (time-based)  %s",
                    tty_ ? "\r" : "", bar, elapsed, expected_, tty_ ? "" : "\n");
    } else {
      std::snprintf(line, sizeof line, "%ssimulate: %.1f s elapsed  %s", tty_ ? "\r" : "", elapsed, tty_ ? "" : "\n");
    }
    write_text(line);
  }

  static void write_text(const char* text) {
    for (std::size_t n = std::char_traits<char>::length(text); n > 0;) {
      const ssize_t w = ::write(2, text, n);
      if (w <= 0) return;
      text += w;
      n -= static_cast<std::size_t>(w);
    }
  }

  const bool tty_;
  const double expected_, delay_;
  bool done_ = false;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::thread thread_;
};

}  // namespace fsdpsim::tools

// Integration-test helper: a streamed generation request held open on its own thread —
// it reads events until the test lets go, then hangs up (the server aborts the request).
// For tests that need a request running on a server for as long as they look (e.g. one
// that holds a --max-cache-salts slot): give it a long generation (ignore_eos, thousands
// of tokens, on a server whose steps are paced with --fault-step-delay-ms), wait for
// `started`, check, check that it has not `finished`, and destroy it.
//
//   pdserve::testing::HeldStream held(srv.port(), body_with_stream_true);
//   ASSERT_TRUE(pdserve::testing::wait_until([&] { return held.started.load(); }));
//   ASSERT_EQ(held.status, 200);
#pragma once

#include <atomic>
#include <string>
#include <thread>

#include <httplib.h>

namespace pdserve::testing {

struct HeldStream {
  /// `started`: the first response bytes arrived (or the request failed: a waiter never
  /// waits for ever); `finished`: the response ended (or failed) before the test let go, so
  /// what the test checked while "holding" may have run without it; `stop`: set by the
  /// destructor.
  std::atomic<bool> started{false}, finished{false}, stop{false};
  /// The HTTP status (0: no response). Read it once `started` is true (written before).
  int status = 0;

  /// POSTs `body` (JSON text with "stream": true) to http://127.0.0.1:`port``path`.
  HeldStream(int port, std::string body, std::string path = "/v1/completions") {
    t_ = std::thread([this, port, body = std::move(body), path = std::move(path)] {
      httplib::Request req;
      req.method = "POST";
      req.path = path;
      req.body = body;
      req.set_header("Content-Type", "application/json");
      req.response_handler = [this](const httplib::Response& r) {
        status = r.status;
        return true;
      };
      req.content_receiver = [this](const char*, size_t, uint64_t, uint64_t) {
        started = true;
        return !stop.load();
      };
      httplib::Client c("127.0.0.1", port);
      c.set_connection_timeout(5, 0);
      c.set_read_timeout(120, 0);
      httplib::Response res;
      httplib::Error err;
      c.send(req, res, err);
      if (!stop.load()) finished = true;
      started = true;
    });
  }
  /// Hangs up (at the next event) and joins the thread.
  ~HeldStream() {
    stop = true;
    t_.join();
  }
  HeldStream(const HeldStream&) = delete;
  HeldStream& operator=(const HeldStream&) = delete;

 private:
  std::thread t_;
};

}  // namespace pdserve::testing

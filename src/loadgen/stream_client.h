// The asynchronous HTTP client of `pdserve bench`: sends streaming OpenAI requests at their
// arrival times from one thread (libcurl's multi interface) and timestamps every chunk.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace pdserve::loadgen {

/// One request to send: when, and the JSON body (with "stream": true).
struct RequestSpec {
  double arrival_s = 0;  // seconds after the start of the run
  std::string body;
};

/// What happened to one request. Times are seconds after the start of the run; -1 = never.
struct RequestRecord {
  double arrival_s = 0;            // scheduled
  double send_s = -1;              // handed to libcurl
  double first_token_s = -1;       // first chunk carrying generated text
  double end_s = -1;               // response complete (or failed)
  std::vector<double> chunk_s;     // arrival of every chunk carrying generated text
  int64_t usage_prompt_tokens = -1;      // server-reported usage, -1 when absent
  int64_t usage_completion_tokens = -1;
  int http_status = 0;
  bool done_marker = false;        // saw "data: [DONE]"
  bool ok = false;                 // HTTP 200, no error event, at least one token
  std::string error;               // why not ok
  bool sent() const { return send_s >= 0; }
};

/// A snapshot for progress displays.
struct ClientProgress {
  size_t total = 0, sent = 0, finished = 0, failed = 0, in_flight = 0;
  int64_t chunks = 0;  // text chunks received so far
  double elapsed_s = 0;
};

struct ClientOptions {
  std::string url;                 // full endpoint, e.g. http://127.0.0.1:8080/v1/completions
  std::string api_key;             // sent as "Authorization: Bearer KEY" when not empty
  int max_concurrency = 0;         // requests in flight at most (0 = no limit)
  double duration_s = 0;           // send nothing after this many seconds (0 = no limit)
  double request_timeout_s = 600;  // per request, from send to the end of the response
  double progress_interval_s = 0.2;
};

/// Sends every spec at max(arrival, a free concurrency slot) and waits for all responses.
/// Records come back in the order of `specs`; `on_progress` (optional) is called from the
/// same thread about every progress_interval_s and once at the end.
std::vector<RequestRecord> run_requests(const std::vector<RequestSpec>& specs, const ClientOptions& opts,
                                        const std::function<void(const ClientProgress&)>& on_progress = {});

/// Applies one SSE event's data (an OpenAI completion or chat chunk, an error object or
/// "[DONE]") received at time `t` to `rec`.
void apply_sse_event(const std::string& data, double t, RequestRecord& rec);

}  // namespace pdserve::loadgen

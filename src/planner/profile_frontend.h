// `pdserve profile`'s frontend measurement: what a streamed request costs outside the
// engine — HTTP parsing, validation and tokenisation on the way in, SSE rendering and the
// socket on the way out, and the client reading it — measured through the real HTTP
// server (server::HttpServer on a loopback port) with `pdserve bench`'s own client
// (loadgen::run_requests), so that `pdserve simulate` reports the TTFT that `pdserve bench`
// sees rather than the engine's alone.
#pragma once

#include "engine/engine.h"

namespace pdserve::planner {

/// Sends `requests` streamed /v1/completions requests of `prompt_tokens` tokens (distinct
/// prompts, no prefix-cache hit; 2 tokens each, ignore_eos) one after another to an
/// in-process HTTP server over `e`, and returns the median over the requests of the client
/// TTFT (send to the first token chunk, as `pdserve bench` measures it) minus the engine's
/// TTFT of the same request (arrival at the engine to the first token, from e.metrics()),
/// in seconds, clamped at 0. Throws std::runtime_error when the server cannot start or a request fails.
double measure_frontend_seconds(engine::Engine& e, int prompt_tokens, int requests);

}  // namespace pdserve::planner

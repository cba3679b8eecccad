// `pdserve profile`'s measurements: the engine itself (engine::Engine, its real step loop
// and model forward) timed on prompts of chosen lengths, and the KV wire path timed on
// real block payloads.
//   prefill  for each (cached prefix p, chunk c): a prompt of p + 1 random tokens is run
//            once (its p tokens, whole blocks, enter the prefix cache), then p + c tokens
//            sharing those p: the time from submit to the first token (one step of c
//            tokens after a cache hit of p, plus the engine's admission and sampling).
//   decode   for each (batch b, context n): b prompts of n tokens (sharing their leading
//            whole blocks through the prefix cache, so that setting up costs one prefill),
//            each generating steps + 2 tokens together; the step time is the mean gap
//            between tokens of one stream while all b sequences decode (each attends to its
//            n + i keys as with distinct prompts); context = n + steps / 2.
//   transfer for each size: the KV blocks of that many bytes encoded as the prefill
//            worker sends them (disagg::encode_blocks, codec "none", CRC32C), serialised
//            as protobuf, written through a loopback TCP socket, parsed and decoded
//            (checksum verified) on the other side — the gRPC stream's work without gRPC.
//   frontend what a streamed request costs outside the engine, through the real HTTP
//            server and bench client (planner/profile_frontend.h).
// Each point is the median of `repeats` runs; with idle_gap_seconds > 0 each sample
// starts after the engine sat that long idle (what a server at a low rate does).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "planner/profile.h"

namespace pdserve::planner {

struct ProfileOptions {
  engine::EngineConfig engine;           // model_path, threads, kv_dtype, block_size, ...
  std::vector<int> chunks{16, 64, 128, 256, 512, 1024, 2048};
  std::vector<int> cached{0, 256, 1024};  // multiples of the block size (rounded down)
  std::vector<int> batches{1, 2, 4, 8, 16, 32, 64};
  std::vector<int> contexts{16, 256, 1024};
  int decode_steps = 16;
  std::vector<size_t> transfer_bytes{16 << 10, 256 << 10, 4 << 20, 32 << 20};
  int repeats = 3;
  /// Frontend measurement: requests (0 = not measured, frontend_seconds 0) of this many
  /// prompt tokens.
  int frontend_requests = 8;
  int frontend_prompt_tokens = 64;
  /// Seconds the engine is left idle before each measured prefill and decode sample (after
  /// its prefix-cache warm-up run). 0 measures steps back to back, as a busy instance runs
  /// them; a server at a low arrival rate (about a request per second) instead starts each
  /// request's steps after an idle gap (whether that is slower here: bench/RESULTS.md #15).
  double idle_gap_seconds = 0;
  /// Called with a one-line note per measured point (progress).
  std::function<void(const std::string&)> progress;
};

/// The model description a profile of `engine_cfg` records (read from the GGUF file):
/// layout, weight type (the type of most weight bytes), KV dtype, block size and the
/// context length the engine uses. Throws std::runtime_error naming the file.
ProfileModel describe_model(const engine::EngineConfig& engine_cfg);

/// Measures a profile (points that do not fit the context or the KV pool are skipped).
/// Throws std::runtime_error when the engine cannot start or a measurement fails.
Profile measure_profile(const ProfileOptions& o);

}  // namespace pdserve::planner

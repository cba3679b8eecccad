// Sequence: the engine's state for one running choice of a request; RequestGroup: what
// the choices of one request (n >= 1) share.
#pragma once

#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "engine/kv_transfer.h"
#include "engine/request_stream.h"
#include "engine/sampling_params.h"
#include "engine/stop_checker.h"
#include "kv/kv_cache_manager.h"
#include "tokenizer/tokenizer.h"

namespace pdserve::engine {

/// Per-request bookkeeping shared by its n choices: timing for the metrics and the
/// streams of choices not yet forked from the first one.
struct RequestGroup {
  int n = 1;
  int unfinished = 1;
  double arrival_time = 0;
  double first_scheduled_time = -1;
  double first_token_time = -1;
  int prompt_len = 0;
  int64_t generated = 0;                  // over all choices
  FinishReason first_choice_finish = FinishReason::None;
  int first_choice_tokens = 0;
  double first_choice_end = 0;
  /// Choices 1..n-1, created when choice 0 samples its first token (they share its
  /// prompt blocks); each entry is (stream, rng seed).
  std::vector<std::pair<std::shared_ptr<RequestStream>, uint64_t>> pending_forks;
};

/// One choice inside the engine. `tokens` = prompt followed by generated tokens; the
/// first `num_computed` of them have their K/V in the blocks of `kv.block_table`.
struct Sequence {
  Sequence(int64_t id_, std::vector<int32_t> prompt, const SamplingParams& p,
           std::shared_ptr<RequestStream> s, const tokenizer::Tokenizer& tok, uint64_t seed)
      : id(id_), params(p), stream(std::move(s)), tokens(std::move(prompt)),
        prompt_len(static_cast<int>(tokens.size())), rng(seed), decoder(tok), stop(p.stop) {}

  int64_t id;
  SamplingParams params;
  std::shared_ptr<RequestStream> stream;
  std::shared_ptr<RequestGroup> group;
  int choice_index = 0;
  std::vector<int32_t> tokens;
  int prompt_len;
  int max_len = 0;            // generation ends (length) when tokens.size() reaches it
  int num_computed = 0;       // tokens whose K/V is cached
  kv::KvSeq kv;               // blocks and prefix-cache state (changed by the KvCacheManager)
  double arrival_time = 0;
  double deadline = 0;        // abort after this time (0 = none)
  int priority = 0;           // lower runs first under the priority policy
  std::mt19937_64 rng;
  tokenizer::StreamDecoder decoder;
  StopChecker stop;
  int num_preemptions = 0;

  // Prefix cache state.
  std::string cache_salt;                    // the prefix-cache namespace; passed on to a prefill worker
  int cached_tokens = -1;                    // prompt tokens hit at first admission (-1: not yet)

  // Numerics and disaggregation.
  int role_prompt_len = 0;                   // positions below it are computed as prompt tokens
  std::shared_ptr<KvSink> kv_sink;           // prefill worker: streams blocks out
  std::vector<int> sink_sent;                // per layer: blocks handed to kv_sink
  bool remote_tried = false;                 // decode worker: remote prefill attempted
  bool cancel_sent = false;                  // decode worker: transfer cancel requested

  int num_generated() const { return static_cast<int>(tokens.size()) - prompt_len; }
  /// Tokens still to run through the model before the next token can be sampled.
  int num_uncomputed() const { return static_cast<int>(tokens.size()) - num_computed; }
};

}  // namespace pdserve::engine

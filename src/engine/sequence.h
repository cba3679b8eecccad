// Sequence: the engine's state for one running request.
#pragma once

#include <cstdint>
#include <memory>
#include <random>
#include <vector>

#include "engine/request_stream.h"
#include "engine/sampling_params.h"
#include "engine/stop_checker.h"
#include "kv/block_pool.h"
#include "tokenizer/tokenizer.h"

namespace pdserve::engine {

/// One request inside the engine. `tokens` = prompt followed by generated tokens; the
/// first `num_computed` of them have their K/V in the blocks of `block_table`.
struct Sequence {
  Sequence(int64_t id_, std::vector<int32_t> prompt, const SamplingParams& p,
           std::shared_ptr<RequestStream> s, const tokenizer::Tokenizer& tok, uint64_t seed)
      : id(id_), params(p), stream(std::move(s)), tokens(std::move(prompt)),
        prompt_len(static_cast<int>(tokens.size())), rng(seed), decoder(tok), stop(p.stop) {}

  int64_t id;
  SamplingParams params;
  std::shared_ptr<RequestStream> stream;
  std::vector<int32_t> tokens;
  int prompt_len;
  int max_len = 0;            // generation ends (length) when tokens.size() reaches it
  int num_computed = 0;       // tokens whose K/V is cached
  kv::BlockTable block_table;
  double arrival_time = 0;
  std::mt19937_64 rng;
  tokenizer::StreamDecoder decoder;
  StopChecker stop;
  int num_preemptions = 0;

  int num_generated() const { return static_cast<int>(tokens.size()) - prompt_len; }
  /// Tokens still to run through the model before the next token can be sampled.
  int num_uncomputed() const { return static_cast<int>(tokens.size()) - num_computed; }
};

}  // namespace pdserve::engine

// Sequence: the engine's state for one running choice of a request; RequestGroup: what
// the choices of one request (n >= 1) share.
#pragma once

#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "engine/cache_salt_gate.h"
#include "engine/kv_transfer.h"
#include "grammar/matcher.h"
#include "engine/output_processor.h"
#include "engine/request_stream.h"
#include "engine/sampling_params.h"
#include "engine/spec_adaptive.h"
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
  int slo_class = -1;                     // RequestOptions::slo_class (per-class queue-time metric)
  int64_t generated = 0;                  // over all choices
  FinishReason first_choice_finish = FinishReason::None;
  int first_choice_tokens = 0;
  double first_choice_end = 0;
  /// Choices 1..n-1, created when choice 0 samples its first token (they share its
  /// prompt blocks); each entry is (stream, rng seed).
  std::vector<std::pair<std::shared_ptr<RequestStream>, uint64_t>> pending_forks;
  /// The request's hold on its cache_salt (--max-cache-salts); dropped with the group,
  /// i.e. after every choice has freed its KV.
  std::shared_ptr<CacheSaltGate::Hold> salt_hold;
};

/// One choice inside the engine. `tokens` = prompt followed by generated tokens; the
/// first `num_computed` of them have their K/V in the blocks of `kv.block_table`.
struct Sequence {
  /// `max_len_`: the token count (prompt included) at which generation ends with Length;
  /// above the prompt's length.
  Sequence(int64_t id_, std::vector<int32_t> prompt, const SamplingParams& p,
           std::shared_ptr<RequestStream> s, const tokenizer::Tokenizer& tok, uint64_t seed, int max_len_)
      : id(id_), params(p), stream(std::move(s)), tokens(std::move(prompt)),
        prompt_len(static_cast<int>(tokens.size())), max_len(max_len_), rng(seed),
        output(tok, p, max_len_ - prompt_len) {}

  /// Choice `choice_index` of the same request: this one's prompt, parameters, group,
  /// limits, timing, priority, prefix-cache namespace, cached-token count and prompt role,
  /// with nothing generated, no KV (no blocks, nothing computed or inserted); its output
  /// goes to `stream` and `seed` seeds its sampler.
  std::unique_ptr<Sequence> fork(std::shared_ptr<RequestStream> stream_, uint64_t seed, int choice_index_) const {
    auto c = std::make_unique<Sequence>(id, std::vector<int32_t>(tokens.begin(), tokens.begin() + prompt_len), params,
                                        std::move(stream_), output.tokenizer(), seed, max_len);
    c->group = group;
    c->choice_index = choice_index_;
    c->arrival_time = arrival_time;
    c->deadline = deadline;
    c->priority = priority;
    c->cache_salt = cache_salt;
    c->cached_tokens = cached_tokens;
    c->role_prompt_len = role_prompt_len;
    c->matcher = matcher;
    c->grammar_state = matcher ? matcher->initial_state() : 0;
    c->kv_budget = kv_budget;
    c->slo_class = slo_class;
    c->slo_deadline = slo_deadline;
    c->tpot_target = tpot_target;
    c->queue_deadline = queue_deadline;
    return c;
  }

  int64_t id;
  SamplingParams params;
  std::shared_ptr<RequestStream> stream;
  std::shared_ptr<RequestGroup> group;
  int choice_index = 0;
  std::vector<int32_t> tokens;
  int prompt_len;
  const int max_len;          // generation ends (length) when tokens.size() reaches it
  int num_computed = 0;       // tokens whose K/V is cached
  kv::KvSeq kv;               // blocks and prefix-cache state (changed by the KvCacheManager)
  double arrival_time = 0;
  double deadline = 0;        // abort after this time (0 = none)
  int priority = 0;           // lower runs first under the priority policy
  std::mt19937_64 rng;
  OutputProcessor output;     // generated tokens ▸ stream deltas
  int num_preemptions = 0;
  int kv_budget = 0;          // KV entries kept (token eviction, kv/token_eviction.h); 0 = all
  // SLO class (RequestOptions::slo_class; -1 none), its first-token deadline (EDF key,
  // seconds on now_seconds()'s clock; 0 none), TPOT target (s; 0 none) and the time by
  // which it must first be scheduled (0 none).
  int slo_class = -1;
  double slo_deadline = 0, tpot_target = 0, queue_deadline = 0;

  // Structured output: the request's grammar (shared) and this choice's state in it,
  // advanced by every token appended (null: unconstrained).
  std::shared_ptr<grammar::GrammarMatcher> matcher;
  int32_t grammar_state = 0;

  // Prefix cache state.
  std::string cache_salt;                    // the prefix-cache namespace; passed on to a prefill worker
  int cached_tokens = -1;                    // prompt tokens hit at first admission (-1: not yet)

  // Numerics and disaggregation.
  int role_prompt_len = 0;                   // positions below it are computed as prompt tokens
  std::shared_ptr<KvSink> kv_sink;           // prefill worker: streams blocks out
  std::vector<int> sink_sent;                // per layer: blocks handed to kv_sink
  bool remote_tried = false;                 // decode worker: remote prefill attempted
  bool prefill_counted = false;              // decode worker: counted as a remote or local prefill
  bool cancel_sent = false;                  // decode worker: transfer cancel requested

  // Speculative decoding (engine/spec_proposer.h), engine thread only.
  SpecState spec;                            // adaptive k
  int spec_want = 0;                         // draft slots asked of the scheduler this step (it may lower it)
  std::vector<int32_t> spec_draft;           // this step's proposal, verified as extra rows
  // KV store tiers: 0 = not looked up, 1 = fetching, 2 = fetched (store_blocks holds
  // blocks store_first.. of the prompt until admission imports them), 3 = done.
  int store_state = 0;
  int store_first = 0;
  std::vector<std::string> store_blocks;

  int num_generated() const { return static_cast<int>(tokens.size()) - prompt_len; }
  /// Tokens still to run through the model before the next token can be sampled.
  int num_uncomputed() const { return static_cast<int>(tokens.size()) - num_computed; }
};

}  // namespace pdserve::engine

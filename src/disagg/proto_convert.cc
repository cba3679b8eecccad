#include "disagg/proto_convert.h"

#include "tokenizer/tokenizer.h"

namespace pdserve::disagg {

int sampling_level(const engine::SamplingParams& p) {
  if (p.repetition_penalty != 1.0f || p.min_p != 0.0f || !p.stop_token_ids.empty() || p.min_tokens != 0 ||
      p.include_stop_str_in_output)
    return 2;
  if (p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f || !p.logit_bias.empty()) return 1;
  return 0;
}

int sampling_level(const HealthResponse& health) {
  if (health.sampling_level() > 0) return health.sampling_level();
  return health.vocab_fingerprint().empty() ? 0 : 1;
}

void to_proto(const engine::SamplingParams& in, SamplingParams* out) {
  out->set_temperature(in.temperature);
  out->set_top_p(in.top_p);
  out->set_top_k(in.top_k);
  out->set_has_seed(in.seed.has_value());
  out->set_seed(in.seed.value_or(0));
  out->set_max_tokens(in.max_tokens);
  out->clear_stop();
  for (const auto& s : in.stop) out->add_stop(s);
  out->set_top_logprobs(in.top_logprobs);
  out->set_ignore_eos(in.ignore_eos);
  out->set_grammar(in.grammar);
  out->set_presence_penalty(in.presence_penalty);
  out->set_frequency_penalty(in.frequency_penalty);
  out->clear_logit_bias();
  for (const auto& [token, bias] : in.logit_bias) {
    LogitBias* b = out->add_logit_bias();
    b->set_token(token);
    b->set_bias(bias);
  }
  out->set_repetition_penalty(in.repetition_penalty);
  out->set_repetition_last_n(in.repetition_last_n);
  out->set_min_p(in.min_p);
  out->clear_stop_token_ids();
  for (int32_t id : in.stop_token_ids) out->add_stop_token_ids(id);
  out->set_min_tokens(in.min_tokens);
  out->set_include_stop_str_in_output(in.include_stop_str_in_output);
}

engine::SamplingParams from_proto(const SamplingParams& in) {
  engine::SamplingParams p;
  p.temperature = in.temperature();
  p.top_p = in.top_p();
  p.top_k = in.top_k();
  if (in.has_seed()) p.seed = in.seed();
  p.max_tokens = in.max_tokens();
  p.stop.assign(in.stop().begin(), in.stop().end());
  p.top_logprobs = in.top_logprobs();
  p.ignore_eos = in.ignore_eos();
  p.grammar = in.grammar();
  p.presence_penalty = in.presence_penalty();
  p.frequency_penalty = in.frequency_penalty();
  for (const auto& b : in.logit_bias()) p.logit_bias.emplace_back(b.token(), b.bias());
  if (in.repetition_penalty() != 0.0f) p.repetition_penalty = in.repetition_penalty();  // proto3's unset 0 ⇒ off
  p.repetition_last_n = in.repetition_last_n();
  p.min_p = in.min_p();
  p.stop_token_ids.assign(in.stop_token_ids().begin(), in.stop_token_ids().end());
  p.min_tokens = in.min_tokens();
  p.include_stop_str_in_output = in.include_stop_str_in_output();
  return p;
}

void to_proto(const engine::TokenLogprob& in, TokenLogprob* out) {
  out->set_token(in.token);
  out->set_logprob(in.logprob);
  out->clear_top();
  for (const auto& [tok, lp] : in.top) {
    TopLogprob* t = out->add_top();
    t->set_token(tok);
    t->set_logprob(lp);
  }
}

engine::TokenLogprob from_proto(const TokenLogprob& in) {
  engine::TokenLogprob lp;
  lp.token = in.token();
  lp.logprob = in.logprob();
  lp.top.reserve(static_cast<size_t>(in.top_size()));
  for (const auto& t : in.top()) lp.top.emplace_back(t.token(), t.logprob());
  return lp;
}

void to_proto(const engine::StreamDelta& in, GenerateResponse* out) {
  out->mutable_tokens()->Assign(in.tokens.begin(), in.tokens.end());
  out->clear_logprobs();
  for (const auto& lp : in.logprobs) to_proto(lp, out->add_logprobs());
  out->set_text(in.text);
  out->set_finish_reason(engine::finish_reason_name(in.finish));
  out->set_error(in.error);
  out->set_prompt_tokens(in.prompt_tokens);
  out->set_completion_tokens(in.completion_tokens);
  out->set_cached_tokens(in.cached_tokens);
}

engine::StreamDelta from_proto(const GenerateResponse& in) {
  engine::StreamDelta d;
  d.tokens.assign(in.tokens().begin(), in.tokens().end());
  d.logprobs.reserve(static_cast<size_t>(in.logprobs_size()));
  for (const auto& lp : in.logprobs()) d.logprobs.push_back(from_proto(lp));
  d.text = in.text();
  d.finish = finish_reason_from_name(in.finish_reason());
  d.error = in.error();
  d.prompt_tokens = in.prompt_tokens();
  d.completion_tokens = in.completion_tokens();
  d.cached_tokens = in.cached_tokens();
  return d;
}

engine::FinishReason finish_reason_from_name(std::string_view name) {
  if (name.empty()) return engine::FinishReason::None;
  if (name == "stop") return engine::FinishReason::Stop;
  if (name == "length") return engine::FinishReason::Length;
  if (name == "abort") return engine::FinishReason::Abort;
  return engine::FinishReason::Error;
}

void fill_health(const engine::Engine& engine, const char* role, HealthResponse* out) {
  out->set_ok(true);
  out->set_role(role);
  out->set_model_name(engine.model_name());
  out->set_context_length(engine.context_length());
  out->set_vocab_fingerprint(engine.tokenizer().fingerprint());
  out->set_weights_fingerprint(engine.weights_fingerprint());
  out->set_sampling_level(kSamplingLevel);
}

void fill_load(const engine::Engine& engine, LoadResponse* out) {
  const engine::EngineStats s = engine.stats();
  out->set_requests_running(s.requests_running);
  out->set_requests_waiting(s.requests_waiting);
  out->set_requests_awaiting_kv(s.requests_awaiting_kv);
  out->set_kv_blocks_total(s.kv_blocks_total);
  out->set_kv_blocks_used(s.kv_blocks_used);
  out->set_kv_blocks_cached(s.kv_blocks_cached);
  out->set_kv_blocks_free(s.kv_blocks_free);
  const engine::MetricsSnapshot m = engine.metrics();
  out->set_prefix_cache_queries(m.prefix_cache_queries);
  out->set_prefix_cache_hits(m.prefix_cache_hits);
  out->set_preemptions(m.preemptions);
}

}  // namespace pdserve::disagg

// Conversions between the engine's request/output types and the worker protocol's
// messages (proto/pdserve.proto): SamplingParams, TokenLogprob, StreamDelta ↔
// GenerateResponse, and finish-reason names.
#pragma once

#include <string_view>

#include "disagg/proto/pdserve.pb.h"
#include "engine/engine.h"
#include "engine/request_stream.h"
#include "engine/sampling_params.h"

namespace pdserve::disagg {

/// The generation of SamplingParams fields this build applies, reported in
/// HealthResponse.sampling_level: 1 added the presence / frequency penalties and logit_bias
/// (fields 11–13), 2 the repetition penalty, min_p, stop_token_ids, min_tokens and
/// include_stop_str_in_output (14–19); 0 is a worker older than both. Protobuf drops fields a
/// worker does not know, so a router or decode worker sends a request only to workers whose
/// level is at least sampling_level(its params).
constexpr int kSamplingLevel = 2;
/// The lowest level whose fields express `p` (0 when it uses only the first ten).
int sampling_level(const engine::SamplingParams& p);
/// A worker's level from its Health: sampling_level, or 1 for a worker that reports none but
/// a vocabulary fingerprint (the builds that added those fingerprints and fields 11–13
/// together, before sampling_level), else 0.
int sampling_level(const HealthResponse& health);

/// Copies every field (seed → has_seed/seed).
void to_proto(const engine::SamplingParams& in, SamplingParams* out);
/// The inverse of to_proto; fields are taken as they are (the sender sets all of them).
engine::SamplingParams from_proto(const SamplingParams& in);

void to_proto(const engine::TokenLogprob& in, TokenLogprob* out);
engine::TokenLogprob from_proto(const TokenLogprob& in);

/// finish_reason is the OpenAI name ("" while unfinished); text goes out as bytes.
void to_proto(const engine::StreamDelta& in, GenerateResponse* out);
/// The delta of a response (reject_status is not part of a delta: check it first).
engine::StreamDelta from_proto(const GenerateResponse& in);

/// "stop" | "length" | "abort" | "error" → the reason; "" → None; anything else → Error.
engine::FinishReason finish_reason_from_name(std::string_view name);

/// Health and Load answers of a worker role ("prefill" | "decode") over its engine.
void fill_health(const engine::Engine& engine, const char* role, HealthResponse* out);
void fill_load(const engine::Engine& engine, LoadResponse* out);

}  // namespace pdserve::disagg

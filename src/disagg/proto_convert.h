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

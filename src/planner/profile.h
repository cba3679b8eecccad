// A measured cost model of one engine instance ("pdserve-profile-v1" JSON, written by
// `pdserve profile`, read by `pdserve simulate` and the planner): prefill time by chunk
// size and cached prefix, decode step time by batch size and context, KV transfer time
// by bytes. Lookups interpolate piecewise-linearly between the measured grid points and
// extrapolate linearly past its ends (clamped at 0).
//
// File format (all times in seconds, sizes in tokens or bytes):
//   {"format":"pdserve-profile-v1",
//    "model":{"file":basename,"architecture":"llama","n_layer":..,"n_embd":..,"n_head":..,
//             "n_head_kv":..,"head_dim":..,"n_vocab":..,"weight_type":"f32","kv_dtype":"f16",
//             "block_size":16, "n_ctx":512 (optional)},
//    "machine":{"threads":N,"cpu":"..."},
//    "prefill":[{"chunk_tokens":c,"cached_tokens":p,"seconds":s},...],
//    "decode":[{"batch":b,"context":n,"step_seconds":s},...],
//    "transfer":[{"bytes":x,"seconds":s},...],
//    "kv_bytes_per_token":k,
//    "frontend":{"request_seconds":f} (optional: 0 when absent),
//    "calibration":{"decode_scale":x,"prefill_scale":y,"decode_steps":n,"prefill_steps":m}
//      (optional: present once `pdserve calibrate` scaled the points, planner/calibrate.h)}
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace pdserve::planner {

/// What a profile was measured on: the model's layout and the KV cache's format. Two
/// descriptions match when everything but `file` is equal (the same weights may be
/// renamed; a different layout, weight type or KV dtype changes every time).
struct ProfileModel {
  std::string file;          // basename of the GGUF file
  std::string architecture;  // general.architecture ("llama", "qwen2")
  int n_layer = 0, n_embd = 0, n_head = 0, n_head_kv = 0, head_dim = 0, n_vocab = 0;
  std::string weight_type;   // ggml type name of the token embedding / most weights ("f32", "q8_0", ...)
  std::string kv_dtype;      // KV cache dtype ("f16", "f32", ...)
  int block_size = 0;        // tokens per KV block
  int n_ctx = 0;             // context length the instance served with (optional in the file: 0 = unknown)
};

struct ProfileMachine {
  int threads = 0;
  std::string cpu;  // /proc/cpuinfo "model name"
  /// Seconds the engine sat idle before each measured prefill / decode sample (0: samples
  /// run back to back). Optional in the file ("idle_gap_seconds"), 0 when absent.
  double idle_gap_seconds = 0;
};

/// One forward pass of a prefill chunk of `chunk_tokens` tokens after `cached_tokens`
/// tokens already in the KV cache (prefix-cache hit or earlier chunks).
struct PrefillPoint {
  int chunk_tokens = 0, cached_tokens = 0;
  double seconds = 0;
};

/// One decode step of `batch` sequences, each with `context` tokens of KV.
struct DecodePoint {
  int batch = 0, context = 0;
  double step_seconds = 0;
};

/// Moving `bytes` of KV from a prefill to a decode instance.
struct TransferPoint {
  std::size_t bytes = 0;
  double seconds = 0;
};

/// What calibration against a running engine did to the points (planner/calibrate.h):
/// cumulative scales (1: never calibrated) and the live steps they came from.
struct ProfileCalibration {
  double decode_scale = 1, prefill_scale = 1;
  int64_t decode_steps = 0, prefill_steps = 0;
  bool calibrated() const { return decode_steps + prefill_steps > 0; }
};

struct Profile {
  ProfileModel model;
  ProfileMachine machine;
  std::vector<PrefillPoint> prefill;
  std::vector<DecodePoint> decode;
  std::vector<TransferPoint> transfer;
  double kv_bytes_per_token = 0;  // K+V of one token, all layers
  /// What a streamed request spends outside the engine (HTTP, tokenisation, SSE, the
  /// client), added to the engine's TTFT by the simulator (planner/profile_frontend.h).
  double frontend_seconds = 0;
  ProfileCalibration calibration;

  /// Forward time of one prefill chunk (bilinear over the (chunk_tokens, cached_tokens)
  /// grid; the grid need not be complete: each cached_tokens row is interpolated by
  /// chunk size, then rows by cached_tokens). 0 for chunk_tokens <= 0.
  double prefill_seconds(int chunk_tokens, int cached_tokens) const;
  /// Time of one decode step of `batch` sequences at `context` tokens each (bilinear over
  /// the (batch, context) grid as above). 0 for batch <= 0.
  double decode_step_seconds(int batch, int context) const;
  /// Time to transfer `bytes` of KV (linear in bytes between measured points).
  double transfer_seconds(std::size_t bytes) const;

  /// The lookup tables, built from the point lists on first use (so lookups allocate
  /// nothing). Change the point lists only before the first lookup, or call reset_tables().
  /// The first lookup is not thread-safe; later ones are.
  struct Tables;
  void reset_tables() { tables_.reset(); }

 private:
  const Tables& tables() const;
  mutable std::shared_ptr<const Tables> tables_;
};

/// y at x by piecewise-linear interpolation over points sorted by x (duplicates averaged
/// by the caller), linear extrapolation past the ends from the two outermost points; a
/// single point gives a line through the origin (y * x / x0, or y0 when x0 == 0).
/// Results below 0 are clamped to 0. Empty ⇒ 0.
double interpolate(const std::vector<std::pair<double, double>>& points, double x);

/// Reads a profile. Throws std::runtime_error naming the file and the problem: the file
/// cannot be read, bad JSON, a "format" other than "pdserve-profile-v1", a missing or
/// mistyped field (by its JSON path, e.g. "prefill[3].seconds"), an empty table.
Profile load_profile(const std::string& path);
/// The same from JSON text (`what` names the source in errors).
Profile parse_profile(const std::string& json_text, const std::string& what = "profile");
/// Writes `p` as "pdserve-profile-v1" JSON (pretty-printed).
std::string profile_to_json(const Profile& p);

/// Throws std::runtime_error "profile is for model X (n_layer .., ...), this is Y (...)"
/// when `p` was measured on another model layout, weight type, KV dtype or block size.
void check_profile_matches(const Profile& p, const ProfileModel& actual);

/// One-line description of a model ("stories260K.gguf: llama n_layer 5, n_embd 64, ...").
std::string describe(const ProfileModel& m);

}  // namespace pdserve::planner

// GGUF v2/v3 reader (mmap) and writer.
// Format: https://github.com/ggml-org/ggml/blob/master/docs/gguf.md
//   header: magic "GGUF", u32 version, u64 tensor_count, u64 kv_count
//   kv:     string key, u32 value type, value (arrays: u32 elem type, u64 count, elems)
//   tensor: string name, u32 n_dims, u64 dims[n_dims] (ne0 = innermost), u32 type, u64 offset
//   data:   starts at the next multiple of general.alignment (default 32) after the infos.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "base/huge_pages.h"
#include "base/status.h"
#include "gguf/ggml_types.h"

namespace pdserve::gguf {

/// Metadata value types (GGUF spec `gguf_metadata_value_type`).
enum class ValueType : uint32_t {
  UINT8 = 0, INT8 = 1, UINT16 = 2, INT16 = 3, UINT32 = 4, INT32 = 5, FLOAT32 = 6,
  BOOL = 7, STRING = 8, ARRAY = 9, UINT64 = 10, INT64 = 11, FLOAT64 = 12,
};

struct Value;
/// A homogeneous array value: element type plus the elements.
struct Array {
  ValueType elem_type = ValueType::UINT8;
  std::vector<Value> items;
};

/// One metadata value. Integers keep their signedness in the variant; `type` keeps
/// the exact on-disk type so files round-trip through the writer unchanged.
struct Value {
  ValueType type = ValueType::UINT8;
  std::variant<uint64_t, int64_t, double, bool, std::string, Array> v;

  bool is_int() const;
  /// Integer value of any integer type (or bool); nullopt for other types.
  std::optional<int64_t> as_int() const;
  /// Floating value of any numeric type; nullopt for strings/arrays.
  std::optional<double> as_float() const;
  const std::string* as_string() const { return std::get_if<std::string>(&v); }
  const Array* as_array() const { return std::get_if<Array>(&v); }

  static Value u32(uint32_t x) { return {ValueType::UINT32, uint64_t{x}}; }
  static Value i32(int32_t x) { return {ValueType::INT32, int64_t{x}}; }
  static Value u64(uint64_t x) { return {ValueType::UINT64, x}; }
  static Value f32(float x) { return {ValueType::FLOAT32, double{x}}; }
  static Value boolean(bool x) { return {ValueType::BOOL, x}; }
  static Value str(std::string s) { return {ValueType::STRING, std::move(s)}; }
  static Value array(ValueType elem, std::vector<Value> items) {
    return {ValueType::ARRAY, Array{elem, std::move(items)}};
  }
};

/// A tensor's description and (for a reader) a pointer into the mapped file.
/// `dims[0]` is the innermost (contiguous) dimension, as in ggml's `ne`.
struct TensorInfo {
  std::string name;
  std::vector<int64_t> dims;
  GgmlType type = GgmlType::F32;
  uint64_t offset = 0;       // relative to the data section
  uint64_t nbytes = 0;       // size of the data
  const uint8_t* data = nullptr;

  int64_t n_elements() const;
  int64_t rows() const { return dims.empty() ? 1 : n_elements() / dims[0]; }
};

/// Where a GgufFile's bytes (tensor data included) live while it is open.
///   kMmap: the file memory-mapped read-only: shared with every process that maps the
///     file, nothing copied, 4 KiB pages.
///   kHugePages: a private copy in anonymous memory on transparent huge pages
///     (base/huge_pages.h), made after the file validates. For weights a decode step
///     streams through every token: with 4 KiB pages the TLB misses and the prefetchers'
///     stops at page boundaries cost up to a third of the decode rate (bench/RESULTS.md,
///     "Weights and KV on huge pages"). Costs the file's size in private memory; a file
///     of more than half the available memory (or whose copy cannot be allocated) stays
///     mapped, with a warning.
enum class FileMemory { kMmap, kHugePages };

/// A GGUF file, mapped read-only or copied (FileMemory). Tensor data pointers stay valid
/// while it lives.
class GgufFile {
 public:
  /// Opens and validates `path`. Errors name the problem, e.g. "not a GGUF file
  /// (magic ...)", "unsupported GGUF version 1", "truncated file while reading key 'x'",
  /// "tensor 'x' data [a, b) is outside the file (size n)", "tensor 'x' has unknown type 99".
  static Result<std::unique_ptr<GgufFile>> open(const std::string& path, FileMemory memory = FileMemory::kMmap);
  ~GgufFile();
  GgufFile(const GgufFile&) = delete;
  GgufFile& operator=(const GgufFile&) = delete;

  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  const std::string& path() const { return path_; }
  uint64_t file_size() const { return size_; }
  /// Where the bytes are: kHugePages only when open() made the copy (a file of more than
  /// half the available memory, or one whose copy cannot be allocated, stays mapped).
  FileMemory memory() const { return copy_.get() ? FileMemory::kHugePages : FileMemory::kMmap; }

  /// Metadata in file order.
  const std::vector<std::pair<std::string, Value>>& metadata() const { return kv_; }
  const Value* find(const std::string& key) const;
  std::optional<int64_t> get_int(const std::string& key) const;
  std::optional<double> get_float(const std::string& key) const;
  std::optional<std::string> get_string(const std::string& key) const;
  std::optional<bool> get_bool(const std::string& key) const;
  const Array* get_array(const std::string& key) const;

  /// Required-key variants: an error that names the key when absent or of the wrong type.
  Result<int64_t> require_int(const std::string& key) const;
  Result<std::string> require_string(const std::string& key) const;

  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  const TensorInfo* find_tensor(const std::string& name) const;

 private:
  GgufFile() = default;
  Status parse();

  std::string path_;
  int fd_ = -1;
  const uint8_t* base_ = nullptr;  // the mapping, or copy_'s bytes
  HugePageBuffer copy_;             // FileMemory::kHugePages
  uint64_t size_ = 0;
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  std::vector<std::pair<std::string, Value>> kv_;
  std::map<std::string, size_t> kv_index_;
  std::vector<TensorInfo> tensors_;
  std::map<std::string, size_t> tensor_index_;
};

/// Builds a GGUF v3 file in memory and writes it. Tensor data is copied in.
class GgufWriter {
 public:
  void set(const std::string& key, Value v);
  /// Adds a tensor; `data` must hold row_bytes(type, dims[0]) * rows bytes.
  void add_tensor(const std::string& name, std::vector<int64_t> dims, GgmlType type,
                  const void* data, size_t nbytes);
  /// Serialises header, metadata, infos and aligned data.
  std::vector<uint8_t> serialize() const;
  Status write(const std::string& path) const;

 private:
  std::vector<std::pair<std::string, Value>> kv_;
  struct Tensor {
    std::string name;
    std::vector<int64_t> dims;
    GgmlType type;
    std::vector<uint8_t> data;
  };
  std::vector<Tensor> tensors_;
};

/// A short fingerprint of a file's weights (16 hex digits): SHA-256 over every tensor's name,
/// type and shape and 16 samples of 64 bytes spread over its data (first and last included),
/// tensors in name order, so that two files of the same architecture and shape but other
/// weights (another quant type, a fine-tune) differ and the same tensors in another order
/// agree. Reads ~1 KiB a tensor (no read-ahead). Call it before the data is re-laid out.
std::string weights_fingerprint(const GgufFile& f);

}  // namespace pdserve::gguf

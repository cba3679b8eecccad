#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "base/sha256.h"
#include "gguf/gguf.h"

#include "base/log.h"

namespace pdserve::gguf {

namespace {

constexpr uint32_t kMagic = 0x46554747;  // "GGUF" little-endian
constexpr uint64_t kMaxStringLen = 1ull << 30;
// Metadata array elements, in one array and in the whole file: each becomes a Value of
// ~50 bytes, so a 40 MB file of one-byte elements took 2 GB. Real vocabularies hold a few
// hundred thousand tokens (and as many merges, scores and types).
constexpr uint64_t kMaxArrayLen = 4ull << 20;
constexpr uint64_t kMaxArrayItemsPerFile = 16ull << 20;
constexpr uint32_t kMaxDims = 4;

/// Bounds-checked little-endian cursor over the mapped file.
class Cursor {
 public:
  Cursor(const uint8_t* p, uint64_t n) : p_(p), n_(n) {}
  uint64_t pos() const { return pos_; }
  uint64_t remaining() const { return n_ - pos_; }
  uint64_t array_items = 0;  // metadata array elements read so far
  bool read(void* dst, uint64_t n) {
    if (n > n_ - pos_) return false;
    std::memcpy(dst, p_ + pos_, n);
    pos_ += n;
    return true;
  }
  template <typename T>
  bool get(T& v) { return read(&v, sizeof(T)); }
  bool get_string(std::string& s) {
    uint64_t len;
    if (!get(len) || len > kMaxStringLen || len > n_ - pos_) return false;
    s.assign(reinterpret_cast<const char*>(p_ + pos_), len);
    pos_ += len;
    return true;
  }

 private:
  const uint8_t* p_;
  uint64_t n_;
  uint64_t pos_ = 0;
};

bool read_scalar(Cursor& c, ValueType t, Value& out) {
  out.type = t;
  switch (t) {
    case ValueType::UINT8: { uint8_t x; if (!c.get(x)) return false; out.v = uint64_t{x}; return true; }
    case ValueType::INT8: { int8_t x; if (!c.get(x)) return false; out.v = int64_t{x}; return true; }
    case ValueType::UINT16: { uint16_t x; if (!c.get(x)) return false; out.v = uint64_t{x}; return true; }
    case ValueType::INT16: { int16_t x; if (!c.get(x)) return false; out.v = int64_t{x}; return true; }
    case ValueType::UINT32: { uint32_t x; if (!c.get(x)) return false; out.v = uint64_t{x}; return true; }
    case ValueType::INT32: { int32_t x; if (!c.get(x)) return false; out.v = int64_t{x}; return true; }
    case ValueType::UINT64: { uint64_t x; if (!c.get(x)) return false; out.v = x; return true; }
    case ValueType::INT64: { int64_t x; if (!c.get(x)) return false; out.v = x; return true; }
    case ValueType::FLOAT32: { float x; if (!c.get(x)) return false; out.v = double{x}; return true; }
    case ValueType::FLOAT64: { double x; if (!c.get(x)) return false; out.v = x; return true; }
    case ValueType::BOOL: { uint8_t x; if (!c.get(x)) return false; out.v = x != 0; return true; }
    case ValueType::STRING: { std::string s; if (!c.get_string(s)) return false; out.v = std::move(s); return true; }
    default: return false;
  }
}

bool valid_value_type(uint32_t t) { return t <= static_cast<uint32_t>(ValueType::FLOAT64); }

/// Reads a value of type `t`; sets `err` for structural problems (bad type, huge array).
bool read_value(Cursor& c, ValueType t, Value& out, std::string& err) {
  if (t != ValueType::ARRAY) return read_scalar(c, t, out);
  uint32_t et;
  uint64_t n;
  if (!c.get(et) || !c.get(n)) return false;
  if (!valid_value_type(et) || et == static_cast<uint32_t>(ValueType::ARRAY)) {
    err = "has array element type " + std::to_string(et) + " (not supported)";
    return false;
  }
  if (n > kMaxArrayLen) {
    err = "has an array of " + std::to_string(n) + " elements (more than the " + std::to_string(kMaxArrayLen) +
          " pdserve reads)";
    return false;
  }
  if ((c.array_items += n) > kMaxArrayItemsPerFile) {
    err = "brings the file's metadata arrays past " + std::to_string(kMaxArrayItemsPerFile) +
          " elements (more than pdserve reads)";
    return false;
  }
  Array arr;
  arr.elem_type = static_cast<ValueType>(et);
  // Every element takes at least one byte: a count beyond the file's rest is not trusted
  // with an allocation (the loop below then reports the truncation).
  arr.items.reserve(std::min<uint64_t>(n, c.remaining()));
  for (uint64_t i = 0; i < n; ++i) {
    Value v;
    if (!read_scalar(c, arr.elem_type, v)) return false;
    arr.items.push_back(std::move(v));
  }
  out.type = ValueType::ARRAY;
  out.v = std::move(arr);
  return true;
}

}  // namespace

bool Value::is_int() const {
  return std::holds_alternative<uint64_t>(v) || std::holds_alternative<int64_t>(v);
}

std::optional<int64_t> Value::as_int() const {
  if (auto* u = std::get_if<uint64_t>(&v)) return static_cast<int64_t>(*u);
  if (auto* i = std::get_if<int64_t>(&v)) return *i;
  if (auto* b = std::get_if<bool>(&v)) return *b ? 1 : 0;
  return std::nullopt;
}

std::optional<double> Value::as_float() const {
  if (auto* d = std::get_if<double>(&v)) return *d;
  if (auto i = as_int()) return static_cast<double>(*i);
  return std::nullopt;
}

int64_t TensorInfo::n_elements() const {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n;
}

Result<std::unique_ptr<GgufFile>> GgufFile::open(const std::string& path, FileMemory memory) {
  std::unique_ptr<GgufFile> f(new GgufFile());
  f->path_ = path;
  f->fd_ = ::open(path.c_str(), O_RDONLY | O_NONBLOCK);  // a FIFO must not block the open
  if (f->fd_ < 0) return Status::NotFound(path + ": cannot open: " + std::strerror(errno));
  struct stat st;
  if (fstat(f->fd_, &st) != 0) return Status::Internal(path + ": cannot stat: " + std::strerror(errno));
  if (S_ISDIR(st.st_mode)) return Status::InvalidArgument(path + ": is a directory, not a GGUF file");
  if (!S_ISREG(st.st_mode))
    return Status::InvalidArgument(path + ": is not a regular file (a device, pipe or socket), not a GGUF file");
  f->size_ = static_cast<uint64_t>(st.st_size);
  if (f->size_ < 4) return Status::InvalidArgument(path + ": not a GGUF file (only " + std::to_string(f->size_) + " bytes)");
  void* m = mmap(nullptr, f->size_, PROT_READ, MAP_SHARED, f->fd_, 0);
  if (m == MAP_FAILED) return Status::Internal(path + ": mmap failed: " + std::strerror(errno));
  f->base_ = static_cast<const uint8_t*>(m);
  Status s = f->parse();
  if (!s.ok()) return s.annotate(path);
  if (memory == FileMemory::kHugePages) {  // validated: copy, rebase the tensors, unmap
    // A file that would take more than half the available memory stays mapped: the copy
    // could push the machine into swap or the OOM killer, and a mapping pages in on demand.
    const uint64_t avail = HugePageBuffer::available_memory();
    if (avail > 0 && f->size_ > avail / 2) {
      PDS_LOG_WARN("{}: {} MiB is more than half the available memory ({} MiB): the weights stay memory-mapped "
                   "(as --mmap), not copied to huge pages",
                   path, f->size_ >> 20, avail >> 20);
      return f;
    }
    f->copy_ = HugePageBuffer::try_allocate(f->size_);
    if (!f->copy_.get()) {
      PDS_LOG_WARN("{}: cannot allocate {} MiB for a copy on huge pages ({}): the weights stay memory-mapped", path,
                   f->size_ >> 20, std::strerror(errno));
      return f;
    }
    std::memcpy(f->copy_.get(), f->base_, f->size_);
    for (TensorInfo& t : f->tensors_) t.data = f->copy_.get() + (t.data - f->base_);
    munmap(const_cast<uint8_t*>(f->base_), f->size_);
    f->base_ = f->copy_.get();
  }
  return f;
}

GgufFile::~GgufFile() {
  if (base_ && !copy_.get()) munmap(const_cast<uint8_t*>(base_), size_);
  if (fd_ >= 0) ::close(fd_);
}

Status GgufFile::parse() {
  Cursor c(base_, size_);
  uint32_t magic = 0;
  c.get(magic);
  if (magic != kMagic) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "not a GGUF file (magic 0x%08x, expected 0x%08x \"GGUF\")", magic, kMagic);
    return Status::InvalidArgument(buf);
  }
  if (!c.get(version_)) return Status::InvalidArgument("truncated file: header ends before the version");
  if (version_ == 1) return Status::InvalidArgument("unsupported GGUF version 1 (only v2 and v3 are read; re-convert the model)");
  if (version_ != 2 && version_ != 3)
    return Status::InvalidArgument("unsupported GGUF version " + std::to_string(version_) + " (only v2 and v3 are read)");
  uint64_t n_tensors, n_kv;
  if (!c.get(n_tensors) || !c.get(n_kv)) return Status::InvalidArgument("truncated file: header ends before the counts");
  if (n_tensors > (1u << 24) || n_kv > (1u << 24))
    return Status::InvalidArgument("corrupt header: " + std::to_string(n_tensors) + " tensors, " + std::to_string(n_kv) + " metadata keys");

  for (uint64_t i = 0; i < n_kv; ++i) {
    std::string key;
    if (!c.get_string(key)) return Status::InvalidArgument("truncated file while reading metadata key #" + std::to_string(i));
    uint32_t t;
    if (!c.get(t)) return Status::InvalidArgument("truncated file while reading the type of key '" + key + "'");
    if (!valid_value_type(t)) return Status::InvalidArgument("metadata key '" + key + "' has unknown value type " + std::to_string(t));
    Value v;
    std::string err;
    if (!read_value(c, static_cast<ValueType>(t), v, err)) {
      if (!err.empty()) return Status::InvalidArgument("metadata key '" + key + "' " + err);
      return Status::InvalidArgument("truncated file while reading the value of key '" + key + "'");
    }
    if (kv_index_.count(key)) return Status::InvalidArgument("duplicate metadata key '" + key + "'");
    kv_index_[key] = kv_.size();
    kv_.emplace_back(std::move(key), std::move(v));
  }

  if (const Value* a = find("general.alignment")) {
    auto al = a->as_int();
    if (!al || *al <= 0 || (*al & (*al - 1)) != 0)
      return Status::InvalidArgument("metadata key 'general.alignment' must be a power of two");
    alignment_ = static_cast<uint64_t>(*al);
  }

  for (uint64_t i = 0; i < n_tensors; ++i) {
    TensorInfo ti;
    if (!c.get_string(ti.name)) return Status::InvalidArgument("truncated file while reading tensor info #" + std::to_string(i));
    uint32_t nd;
    if (!c.get(nd)) return Status::InvalidArgument("truncated file while reading tensor '" + ti.name + "'");
    if (nd == 0 || nd > kMaxDims)
      return Status::InvalidArgument("tensor '" + ti.name + "' has " + std::to_string(nd) + " dimensions (1 to 4 allowed)");
    for (uint32_t d = 0; d < nd; ++d) {
      uint64_t x;
      if (!c.get(x)) return Status::InvalidArgument("truncated file while reading tensor '" + ti.name + "'");
      if (x == 0 || x > (1ull << 40)) return Status::InvalidArgument("tensor '" + ti.name + "' has invalid dimension " + std::to_string(x));
      ti.dims.push_back(static_cast<int64_t>(x));
    }
    // n_elements() must not overflow: at most 2^50 elements (a file's size bounds them anyway).
    uint64_t n_elems = 1;
    for (int64_t d : ti.dims) {
      if (n_elems > (1ull << 50) / static_cast<uint64_t>(d))
        return Status::InvalidArgument("tensor '" + ti.name + "' has more than 2^50 elements");
      n_elems *= static_cast<uint64_t>(d);
    }
    uint32_t type;
    if (!c.get(type) || !c.get(ti.offset)) return Status::InvalidArgument("truncated file while reading tensor '" + ti.name + "'");
    const TypeTraits* tr = type_traits(type);
    if (!tr) return Status::InvalidArgument("tensor '" + ti.name + "' has unknown type " + std::to_string(type));
    ti.type = static_cast<GgmlType>(type);
    if (ti.dims[0] % tr->block_elems != 0)
      return Status::InvalidArgument("tensor '" + ti.name + "' row of " + std::to_string(ti.dims[0]) + " elements is not a multiple of the " + tr->name + " block size " + std::to_string(tr->block_elems));
    ti.nbytes = static_cast<uint64_t>(ti.n_elements() / tr->block_elems * tr->block_bytes);
    if (tensor_index_.count(ti.name)) return Status::InvalidArgument("duplicate tensor '" + ti.name + "'");
    tensor_index_[ti.name] = tensors_.size();
    tensors_.push_back(std::move(ti));
  }

  uint64_t data_start = (c.pos() + alignment_ - 1) / alignment_ * alignment_;
  for (auto& ti : tensors_) {
    if (ti.offset % alignment_ != 0)
      return Status::InvalidArgument("tensor '" + ti.name + "' offset " + std::to_string(ti.offset) + " is not aligned to " + std::to_string(alignment_));
    uint64_t begin = data_start + ti.offset, end = begin + ti.nbytes;
    if (begin < data_start || end < begin || end > size_)
      return Status::InvalidArgument("tensor '" + ti.name + "' data [" + std::to_string(begin) + ", " + std::to_string(end) +
                           ") is outside the file (size " + std::to_string(size_) + "; truncated file?)");
    ti.data = base_ + begin;
  }
  // Tensors may not share bytes (ggml's reader even wants them consecutive): the model's
  // private copy rewrites some matrices in place (kernels/weight_layout.h), which would
  // change another tensor's bytes under it.
  std::vector<const TensorInfo*> by_offset;
  for (const auto& ti : tensors_)
    if (ti.nbytes > 0) by_offset.push_back(&ti);
  std::sort(by_offset.begin(), by_offset.end(), [](const TensorInfo* a, const TensorInfo* b) { return a->offset < b->offset; });
  for (size_t i = 1; i < by_offset.size(); ++i) {
    const TensorInfo &a = *by_offset[i - 1], &b = *by_offset[i];
    if (b.offset < a.offset + a.nbytes)
      return Status::InvalidArgument("tensor '" + b.name + "' data (offset " + std::to_string(b.offset) + ") overlaps tensor '" +
                                     a.name + "' (offset " + std::to_string(a.offset) + ", " + std::to_string(a.nbytes) + " bytes)");
  }
  return Status::Ok();
}

const Value* GgufFile::find(const std::string& key) const {
  auto it = kv_index_.find(key);
  return it == kv_index_.end() ? nullptr : &kv_[it->second].second;
}

std::optional<int64_t> GgufFile::get_int(const std::string& key) const {
  const Value* v = find(key);
  return v ? v->as_int() : std::nullopt;
}
std::optional<double> GgufFile::get_float(const std::string& key) const {
  const Value* v = find(key);
  return v ? v->as_float() : std::nullopt;
}
std::optional<std::string> GgufFile::get_string(const std::string& key) const {
  const Value* v = find(key);
  if (!v || !v->as_string()) return std::nullopt;
  return *v->as_string();
}
std::optional<bool> GgufFile::get_bool(const std::string& key) const {
  const Value* v = find(key);
  if (!v) return std::nullopt;
  if (auto* b = std::get_if<bool>(&v->v)) return *b;
  if (auto i = v->as_int()) return *i != 0;
  return std::nullopt;
}
const Array* GgufFile::get_array(const std::string& key) const {
  const Value* v = find(key);
  return v ? v->as_array() : nullptr;
}

Result<int64_t> GgufFile::require_int(const std::string& key) const {
  const Value* v = find(key);
  if (!v) return Status::NotFound("missing required metadata key '" + key + "'");
  auto i = v->as_int();
  if (!i) return Status::InvalidArgument("metadata key '" + key + "' must be an integer");
  return *i;
}

Result<std::string> GgufFile::require_string(const std::string& key) const {
  const Value* v = find(key);
  if (!v) return Status::NotFound("missing required metadata key '" + key + "'");
  if (!v->as_string()) return Status::InvalidArgument("metadata key '" + key + "' must be a string");
  return *v->as_string();
}

const TensorInfo* GgufFile::find_tensor(const std::string& name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

std::string weights_fingerprint(const GgufFile& f) {
  // By name, so files that hold the same tensors in another order agree.
  std::vector<const TensorInfo*> by_name;
  for (const TensorInfo& t : f.tensors()) by_name.push_back(&t);
  std::sort(by_name.begin(), by_name.end(), [](const TensorInfo* a, const TensorInfo* b) { return a->name < b->name; });
  // Only ~1 KiB a tensor is read: tell the kernel not to read ahead around each sample
  // (a router, which needs no weights, would otherwise read the whole file from disk).
  uintptr_t lo = UINTPTR_MAX, hi = 0;
  for (const TensorInfo* t : by_name) {
    lo = std::min(lo, reinterpret_cast<uintptr_t>(t->data));
    hi = std::max(hi, reinterpret_cast<uintptr_t>(t->data) + t->nbytes);
  }
  const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  void* region = reinterpret_cast<void*>(lo & ~(page - 1));
  const size_t region_bytes = hi > lo ? hi - (lo & ~(page - 1)) : 0;
  if (region_bytes > 0) madvise(region, region_bytes, MADV_RANDOM);
  Sha256 h;
  for (const TensorInfo* tp : by_name) {
    const TensorInfo& t = *tp;
    h.update(t.name);
    const int64_t head[2] = {static_cast<int64_t>(t.type), static_cast<int64_t>(t.dims.size())};
    h.update(head, sizeof head);
    h.update(t.dims.data(), t.dims.size() * sizeof(int64_t));
    constexpr uint64_t kSamples = 16, kSample = 64;
    if (t.nbytes <= kSamples * kSample) {
      h.update(t.data, t.nbytes);
      continue;
    }
    for (uint64_t k = 0; k < kSamples; ++k) h.update(t.data + (t.nbytes - kSample) * k / (kSamples - 1), kSample);
  }
  if (region_bytes > 0) madvise(region, region_bytes, MADV_NORMAL);
  return to_hex(h.digest()).substr(0, 16);
}

}  // namespace pdserve::gguf

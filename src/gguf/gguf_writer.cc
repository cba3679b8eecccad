#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "gguf/gguf.h"

namespace pdserve::gguf {

namespace {

class Sink {
 public:
  std::vector<uint8_t> buf;
  void raw(const void* p, size_t n) {
    const auto* b = static_cast<const uint8_t*>(p);
    buf.insert(buf.end(), b, b + n);
  }
  template <typename T>
  void put(T v) { raw(&v, sizeof v); }
  void str(const std::string& s) {
    put<uint64_t>(s.size());
    raw(s.data(), s.size());
  }
  void pad_to(uint64_t align) {
    while (buf.size() % align) buf.push_back(0);
  }
};

void put_scalar(Sink& s, const Value& v) {
  auto u = [&] { return std::get<uint64_t>(v.v); };
  auto i = [&] { return std::get<int64_t>(v.v); };
  switch (v.type) {
    case ValueType::UINT8: s.put<uint8_t>(u()); break;
    case ValueType::INT8: s.put<int8_t>(i()); break;
    case ValueType::UINT16: s.put<uint16_t>(u()); break;
    case ValueType::INT16: s.put<int16_t>(i()); break;
    case ValueType::UINT32: s.put<uint32_t>(u()); break;
    case ValueType::INT32: s.put<int32_t>(i()); break;
    case ValueType::UINT64: s.put<uint64_t>(u()); break;
    case ValueType::INT64: s.put<int64_t>(i()); break;
    case ValueType::FLOAT32: s.put<float>(static_cast<float>(std::get<double>(v.v))); break;
    case ValueType::FLOAT64: s.put<double>(std::get<double>(v.v)); break;
    case ValueType::BOOL: s.put<uint8_t>(std::get<bool>(v.v) ? 1 : 0); break;
    case ValueType::STRING: s.str(std::get<std::string>(v.v)); break;
    case ValueType::ARRAY: break;
  }
}

}  // namespace

void GgufWriter::set(const std::string& key, Value v) {
  for (auto& kv : kv_)
    if (kv.first == key) { kv.second = std::move(v); return; }
  kv_.emplace_back(key, std::move(v));
}

void GgufWriter::add_tensor(const std::string& name, std::vector<int64_t> dims, GgmlType type,
                            const void* data, size_t nbytes) {
  Tensor t{name, std::move(dims), type, {}};
  t.data.assign(static_cast<const uint8_t*>(data), static_cast<const uint8_t*>(data) + nbytes);
  tensors_.push_back(std::move(t));
}

std::vector<uint8_t> GgufWriter::serialize() const {
  uint64_t align = 32;
  for (auto& kv : kv_)
    if (kv.first == "general.alignment") align = static_cast<uint64_t>(*kv.second.as_int());
  Sink s;
  s.put<uint32_t>(0x46554747);
  s.put<uint32_t>(3);
  s.put<uint64_t>(tensors_.size());
  s.put<uint64_t>(kv_.size());
  for (auto& [key, v] : kv_) {
    s.str(key);
    s.put<uint32_t>(static_cast<uint32_t>(v.type));
    if (v.type == ValueType::ARRAY) {
      const Array& a = std::get<Array>(v.v);
      s.put<uint32_t>(static_cast<uint32_t>(a.elem_type));
      s.put<uint64_t>(a.items.size());
      for (auto& item : a.items) put_scalar(s, item);
    } else {
      put_scalar(s, v);
    }
  }
  uint64_t offset = 0;
  for (auto& t : tensors_) {
    s.str(t.name);
    s.put<uint32_t>(t.dims.size());
    for (int64_t d : t.dims) s.put<uint64_t>(d);
    s.put<uint32_t>(static_cast<uint32_t>(t.type));
    s.put<uint64_t>(offset);
    offset += (t.data.size() + align - 1) / align * align;
  }
  s.pad_to(align);
  for (auto& t : tensors_) {
    s.raw(t.data.data(), t.data.size());
    s.pad_to(align);
  }
  return std::move(s.buf);
}

Status GgufWriter::write(const std::string& path) const {
  std::vector<uint8_t> bytes = serialize();
  // A regular file is written next to `path` and renamed over it: a failed write leaves no
  // partial file, and `path` may be the very file being read (its mapping stays whole). Anything
  // else (a device, a pipe) is written in place.
  struct stat st {};
  const bool in_place = ::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode);
  // A symlink's target is what gets replaced, not the link.
  std::string target = path;
  if (!in_place) {
    if (char* real = ::realpath(path.c_str(), nullptr)) {
      target = real;
      std::free(real);
    }
  }
  const std::string to = in_place ? path : target + ".tmp." + std::to_string(::getpid());
  FILE* f = std::fopen(to.c_str(), "wb");
  if (!f) return Status::Internal(path + ": cannot create: " + std::strerror(errno));
  const bool written = std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size();
  const int write_errno = errno;
  const bool closed = std::fclose(f) == 0;
  if (!written || !closed) {
    const std::string why = std::strerror(written ? errno : write_errno);
    if (!in_place) std::remove(to.c_str());
    return Status::Internal(path + ": write failed: " + why);
  }
  if (!in_place && std::rename(to.c_str(), target.c_str()) != 0) {
    const std::string why = std::strerror(errno);
    std::remove(to.c_str());
    return Status::Internal(path + ": cannot replace: " + why);
  }
  return Status::Ok();
}

}  // namespace pdserve::gguf

// Helpers shared by the libFuzzer targets of tests/fuzz (README "Fuzzing and sanitizers").
#pragma once

#include <sys/mman.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "gguf/gguf.h"
#include "tokenizer/tokenizer.h"

namespace pdserve::fuzz {

/// ../shared next to the repository (models, vocabularies, templates): PDS_SHARED_DIR
/// from the environment, else found from this binary's path (REPO/BUILD/fuzz/fuzz_NAME ->
/// REPO/../shared; no build-tree path is compiled in, so a compiler cache can serve the
/// object to another checkout).
inline std::string shared_path(const std::string& rel) {
  if (const char* env = std::getenv("PDS_SHARED_DIR"); env != nullptr && *env != '\0') return std::string(env) + "/" + rel;
  char buf[4096];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  std::string dir = n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string("./build-fuzz/fuzz/x");
  for (int up = 0; up < 3; ++up) dir = dir.substr(0, dir.rfind('/'));  // fuzz_NAME, fuzz/, BUILD/
  return dir + "/../shared/" + rel;
}

/// A fuzz target's invariant: prints `what` and aborts (libFuzzer saves the input).
#define PDS_FUZZ_CHECK(cond, what)                                       \
  do {                                                                   \
    if (!(cond)) {                                                       \
      std::fprintf(stderr, "fuzz invariant failed: %s (%s)\n", what, #cond); \
      std::abort();                                                      \
    }                                                                    \
  } while (0)

/// An in-memory file (memfd) holding `size` bytes, for readers that take a path.
class MemFile {
 public:
  MemFile(const uint8_t* data, size_t size) {
    fd_ = memfd_create("pds_fuzz", 0);
    if (fd_ < 0) std::abort();
    for (size_t done = 0; done < size;) {
      ssize_t n = write(fd_, data + done, size - done);
      if (n <= 0) std::abort();
      done += static_cast<size_t>(n);
    }
  }
  ~MemFile() { close(fd_); }
  MemFile(const MemFile&) = delete;
  MemFile& operator=(const MemFile&) = delete;
  std::string path() const { return "/proc/self/fd/" + std::to_string(fd_); }

 private:
  int fd_ = -1;
};

/// The GGUF file at shared_path(rel) and its tokenizer; aborts when either fails to load.
struct LoadedVocab {
  std::unique_ptr<gguf::GgufFile> file;
  std::unique_ptr<tokenizer::Tokenizer> tok;
};
inline LoadedVocab load_vocab(const std::string& rel) {
  LoadedVocab v;
  auto f = gguf::GgufFile::open(shared_path(rel));
  if (!f.ok()) {
    std::fprintf(stderr, "fuzz: cannot open %s: %s\n", rel.c_str(), f.error().c_str());
    std::abort();
  }
  v.file = std::move(f).value();
  auto t = tokenizer::Tokenizer::from_gguf(*v.file);
  if (!t.ok()) {
    std::fprintf(stderr, "fuzz: no tokenizer in %s: %s\n", rel.c_str(), t.error().c_str());
    std::abort();
  }
  v.tok = std::move(t).value();
  return v;
}

}  // namespace pdserve::fuzz

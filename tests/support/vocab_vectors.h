// llama.cpp's tokenizer test vectors (../shared/tokenizer/ggml-vocab-NAME.gguf{,.inp,.out})
// and a tokenizer loader, shared by the SPM and BPE tests.
#pragma once

#include <gtest/gtest.h>

#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "gguf/gguf.h"
#include "tokenizer/tokenizer.h"

namespace pdserve::testing {

inline std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

/// The tokenizer of a GGUF file (test failure and nullptr on error).
/// Lower-case hex of `bytes` (the reference files' token_bytes_hex / text_bytes_hex).
inline std::string hex(const std::string& bytes) {
  static const char* d = "0123456789abcdef";
  std::string out;
  for (unsigned char c : bytes) out += {d[c >> 4], d[c & 15]};
  return out;
}

inline std::unique_ptr<tokenizer::Tokenizer> load_tokenizer(const std::string& path) {
  auto f = gguf::GgufFile::open(path);
  EXPECT_TRUE(f.ok()) << f.error();
  if (!f.ok()) return nullptr;
  auto t = tokenizer::Tokenizer::from_gguf(**f);
  EXPECT_TRUE(t.ok()) << t.error();
  return t.ok() ? std::move(t).value() : nullptr;
}

/// Inputs of X.gguf.inp: each is followed by "\n__ggml_vocab_test__\n" (test-tokenizer-0).
inline std::vector<std::string> read_vector_inputs(const std::string& path) {
  const std::string s = read_file(path);
  const std::string sep = "\n__ggml_vocab_test__\n";
  std::vector<std::string> out;
  size_t pos = 0;
  for (size_t m; (m = s.find(sep, pos)) != std::string::npos; pos = m + sep.size()) out.push_back(s.substr(pos, m - pos));
  return out;
}

/// Line i of X.gguf.out: the expected ids of input i, space separated.
inline std::vector<std::vector<int32_t>> read_vector_outputs(const std::string& path) {
  std::istringstream in(read_file(path));
  std::vector<std::vector<int32_t>> out;
  for (std::string line; std::getline(in, line);) {
    std::istringstream ls(line);
    std::vector<int32_t> ids;
    for (int32_t id; ls >> id;) ids.push_back(id);
    out.push_back(ids);
  }
  return out;
}

/// Every vector of ggml-vocab-NAME encodes (no BOS) to its expected ids; with
/// `check_decode`, decoding the ids gives the input back (lossless byte-level BPE).
inline void check_vocab_vectors(const std::string& name, bool check_decode) {
  const std::string base = "../shared/tokenizer/ggml-vocab-" + name + ".gguf";
  auto tok = load_tokenizer(base);
  ASSERT_TRUE(tok);
  auto inputs = read_vector_inputs(base + ".inp");
  auto expected = read_vector_outputs(base + ".out");
  ASSERT_EQ(inputs.size(), 46u);
  ASSERT_EQ(inputs.size(), expected.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    EXPECT_EQ(tok->encode(inputs[i], /*add_bos=*/false), expected[i]) << name << " input #" << i << ": '" << inputs[i] << "'";
    if (check_decode) {
      EXPECT_EQ(tok->decode(expected[i]), inputs[i]) << name << " input #" << i;
    }
  }
}

}  // namespace pdserve::testing

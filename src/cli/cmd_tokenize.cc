// `pdserve tokenize` and `pdserve info`: look inside a GGUF file.
#include <cstdio>

#include "cli/commands.h"
#include "gguf/gguf.h"
#include "model/model_config.h"
#include "tokenizer/tokenizer.h"

namespace pdserve::cli {

void add_tokenize_command(CLI::App& app, TokenizeArgs& a) {
  CLI::App* cmd = app.add_subcommand("tokenize", "print the token ids of a text");
  cmd->add_option("-m,--model", a.model, "GGUF model or vocab file")->required();
  cmd->add_option("--text", a.text, "text to tokenize")->required();
  cmd->add_flag("--add-bos", a.add_bos, "prepend BOS (when the vocab has one)");
  cmd->add_flag("--parse-special", a.parse_special, "turn special-token text (e.g. <s>) into special tokens");
}

int run_tokenize(const TokenizeArgs& a) {
  auto f = gguf::GgufFile::open(a.model);
  if (!f.ok()) {
    std::fprintf(stderr, "error: %s\n", f.error().c_str());
    return 1;
  }
  auto tok = tokenizer::Tokenizer::from_gguf(*f.value());
  if (!tok.ok()) {
    std::fprintf(stderr, "error: %s: %s\n", a.model.c_str(), tok.error().c_str());
    return 1;
  }
  std::vector<int32_t> ids = tok.value()->encode(a.text, a.add_bos, a.parse_special);
  for (size_t i = 0; i < ids.size(); ++i) std::printf("%s%d", i ? " " : "", ids[i]);
  std::printf("\n");
  return 0;
}

namespace {

std::string value_str(const gguf::Value& v) {
  if (auto* s = v.as_string()) return "\"" + (s->size() > 80 ? s->substr(0, 77) + "..." : *s) + "\"";
  if (auto* a = v.as_array()) {
    std::string out = "[" + std::to_string(a->items.size()) + " items:";
    for (size_t i = 0; i < a->items.size() && i < 4; ++i) out += " " + value_str(a->items[i]);
    return out + (a->items.size() > 4 ? " ...]" : "]");
  }
  if (auto* b = std::get_if<bool>(&v.v)) return *b ? "true" : "false";
  if (auto* d = std::get_if<double>(&v.v)) return std::to_string(*d);
  if (auto i = v.as_int()) return std::to_string(*i);
  return "?";
}

}  // namespace

void add_info_command(CLI::App& app, InfoArgs& a) {
  CLI::App* cmd = app.add_subcommand("info", "print a GGUF file's metadata and tensors");
  cmd->add_option("-m,--model", a.model, "GGUF file")->required();
}

int run_info(const InfoArgs& a) {
  auto f = gguf::GgufFile::open(a.model);
  if (!f.ok()) {
    std::fprintf(stderr, "error: %s\n", f.error().c_str());
    return 1;
  }
  const gguf::GgufFile& g = *f.value();
  std::printf("file: %s\nGGUF version: %u, alignment: %llu, size: %llu bytes\n", a.model.c_str(), g.version(),
              static_cast<unsigned long long>(g.alignment()), static_cast<unsigned long long>(g.file_size()));
  std::printf("\nmetadata (%zu keys):\n", g.metadata().size());
  for (const auto& [k, v] : g.metadata()) std::printf("  %-45s %s\n", k.c_str(), value_str(v).c_str());
  std::printf("\ntensors (%zu):\n", g.tensors().size());
  for (const auto& t : g.tensors()) {
    std::string dims;
    for (size_t i = 0; i < t.dims.size(); ++i) dims += (i ? ", " : "") + std::to_string(t.dims[i]);
    std::printf("  %-32s %-6s [%s] %llu bytes\n", t.name.c_str(), gguf::type_name(t.type).c_str(), dims.c_str(),
                static_cast<unsigned long long>(t.nbytes));
  }
  auto cfg = model::ModelConfig::from_gguf(g);
  if (cfg.ok()) {
    const auto& c = cfg.value();
    std::printf("\nmodel: %s, %d layers, n_embd %d, %d heads / %d KV heads, head_dim %d, n_ff %d, context %d, rope base %g%s\n",
                c.arch.c_str(), c.n_layer, c.n_embd, c.n_head, c.n_head_kv, c.head_dim, c.n_ff, c.n_ctx, c.rope_base,
                c.rope_neox ? " (neox)" : "");
    if (c.n_expert > 0)
      std::printf("experts: %d, %d per token, %d rows each\n", c.n_expert, c.n_expert_used, c.n_ff_exp);
  } else {
    std::printf("\nmodel: %s\n", cfg.error().c_str());
  }
  return 0;
}

}  // namespace pdserve::cli

// `pdserve quantize IN OUT TYPE`: re-quantise a GGUF model (model::quantize_file).
#include <cstdio>
#include <filesystem>
#include <system_error>

#include "cli/commands.h"
#include "model/quantize.h"

namespace pdserve::cli {

void add_quantize_command(CLI::App& app, QuantizeArgs& a) {
  CLI::App* cmd = app.add_subcommand(
      "quantize", "Quantise a GGUF model (any supported type in) to F32, BF16, F16, Q8_0, Q4_0, Q2_K, Q3_K_S, Q3_K_M, Q4_K, Q5_K, Q6_K, "
      "Q4_K_M, Q5_K_M, IQ4_NL or IQ4_XS");
  cmd->add_option("input", a.input, "input GGUF file")->required();
  cmd->add_option("output", a.output, "output GGUF file")->required();
  cmd->add_option("type", a.type, "output type")
      ->required()
      ->check(CLI::Validator(
          [](std::string& name) -> std::string {
            auto plan = model::parse_quantize_type(name);
            return plan.ok() ? std::string() : plan.error();
          },
          "TYPE"));
}

int run_quantize(const QuantizeArgs& a) {
  Status s = model::quantize_file(a.input, a.output, a.type);
  if (!s.ok()) {
    std::fprintf(stderr, "error: %s\n", s.message().c_str());
    return 1;
  }
  std::error_code ec;
  const auto in_bytes = std::filesystem::file_size(a.input, ec), out_bytes = std::filesystem::file_size(a.output, ec);
  std::printf("%s (%.1f MiB) -> %s (%s, %.1f MiB)\n", a.input.c_str(), in_bytes / 1048576.0, a.output.c_str(), a.type.c_str(),
              ec ? 0.0 : out_bytes / 1048576.0);
  return 0;
}

}  // namespace pdserve::cli

// Every case of ../shared/templates/*.expected.json (real HF chat templates with what
// llama.cpp's server renders from them, see its README) renders byte-identically through
// JinjaChatTemplate at the case's render_date_utc, with and without tools; the probed
// template capabilities equal the ones the reference engine reported.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "tokenizer/chat_jinja.h"
#include "tokenizer/jinja/value.h"

namespace pdserve::tokenizer {
namespace {

namespace fs = std::filesystem;
using nlohmann::ordered_json;

const char* kDir = "../shared/templates";

std::string slurp(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::vector<std::string> template_names() {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(kDir)) {
    std::string n = e.path().filename().string();
    const std::string suffix = ".expected.json";
    if (n.size() > suffix.size() && n.compare(n.size() - suffix.size(), suffix.size(), suffix) == 0)
      names.push_back(n.substr(0, n.size() - suffix.size()));
  }
  std::sort(names.begin(), names.end());
  return names;
}

class TemplatesTest : public ::testing::TestWithParam<std::string> {};

TEST_P(TemplatesTest, RendersAsReference) {
  const std::string name = GetParam();
  ordered_json exp = ordered_json::parse(slurp(fs::path(kDir) / (name + ".expected.json")));
  std::string src = slurp(fs::path(kDir) / exp["template"].get<std::string>());
  JinjaChatTemplate t(src, exp["bos_token"], exp["eos_token"]);
  const auto& caps = exp["engine_caps"];
  EXPECT_EQ(t.caps().supports_system_role, caps["supports_system_role"].get<bool>());
  EXPECT_EQ(t.caps().supports_tools, caps["supports_tools"].get<bool>());
  EXPECT_EQ(t.caps().supports_tool_calls, caps["supports_tool_calls"].get<bool>());
  EXPECT_EQ(t.caps().supports_object_arguments, caps["supports_object_arguments"].get<bool>());
  std::time_t now;
  ASSERT_TRUE(parse_utc_date(exp["render_date_utc"], &now));
  ASSERT_FALSE(exp["cases"].empty());
  for (const auto& c : exp["cases"]) {
    SCOPED_TRACE("case " + c["name"].get<std::string>());
    ASSERT_TRUE(c.contains("prompt")) << "reference recorded an error";
    ordered_json tools = c.contains("tools") ? c["tools"] : ordered_json();
    bool stripped = false;
    std::string out;
    try {
      out = t.apply(c["messages"], tools, c["add_generation_prompt"], now, /*strip_bos=*/true, &stripped);
    } catch (const std::exception& e) {
      FAIL() << e.what();
    }
    EXPECT_EQ(out, c["prompt"].get<std::string>());
    EXPECT_EQ(stripped, c["leading_bos_stripped"].get<bool>());
  }
}

INSTANTIATE_TEST_SUITE_P(Shared, TemplatesTest, ::testing::ValuesIn(template_names()),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (auto& ch : n)
                             if (!isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           return n;
                         });

TEST(TemplatesTest, CoversEverySharedTemplate) { EXPECT_GE(template_names().size(), 19u); }

}  // namespace
}  // namespace pdserve::tokenizer

// BPE pre-tokenizer: regex lists per pre-type and their PCRE2 evaluation. See the header
// for the model (llama.cpp src/unicode.cpp unicode_regex_split, src/llama-vocab.cpp).
#define PCRE2_CODE_UNIT_WIDTH 8
#include "tokenizer/bpe_pretokenizer.h"

#include <pcre2.h>

#include <algorithm>
#include <initializer_list>
#include <utility>

namespace pdserve::tokenizer {

namespace {

// ---------------------------------------------------------------------------------------
// Regex lists (llama.cpp llm_tokenizer_bpe, spelled as there; literal non-ASCII characters
// are written as \x{...} escapes so that no editor or tool can normalise them).

constexpr const char* kGpt2 =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)";
constexpr const char* kLlama3 =
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|"
    "\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
constexpr const char* kQwen2 =
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|"
    "\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
// DeepSeek LLM: cased letters (Lu/Ll/Lt as of the tokenizer's Unicode version), ASCII and
// full-width punctuation, trailing whitespace, CJK/Hangul blocks, digits.
constexpr const char* kDeepseekLetters =
    "\\s?[\\x{41}-\\x{5A}\\x{61}-\\x{7A}\\x{B5}\\x{C0}-\\x{D6}\\x{D8}-\\x{F6}\\x{F8}-\\x{1BA}"
    "\\x{1BC}-\\x{1BF}\\x{1C4}-\\x{293}\\x{295}-\\x{2AF}\\x{370}-\\x{373}\\x{376}\\x{377}"
    "\\x{37B}-\\x{37D}\\x{37F}\\x{386}\\x{388}-\\x{38A}\\x{38C}\\x{38E}-\\x{3A1}\\x{3A3}-\\x{3F5}"
    "\\x{3F7}-\\x{481}\\x{48A}-\\x{52F}\\x{531}-\\x{556}\\x{10A0}-\\x{10C5}\\x{13A0}-\\x{13F5}"
    "\\x{13F8}-\\x{13FD}\\x{1C90}-\\x{1CBA}\\x{1CBD}-\\x{1CBF}\\x{1D00}-\\x{1D2B}\\x{1D6B}-\\x{1D77}"
    "\\x{1D79}-\\x{1D9A}\\x{1E00}-\\x{1F15}\\x{1F18}-\\x{1F1D}\\x{1F20}-\\x{1F45}\\x{1F48}-\\x{1F4D}"
    "\\x{1F50}-\\x{1F57}\\x{1F59}\\x{1F5B}\\x{1F5D}\\x{1F5F}-\\x{1F7D}\\x{1F80}-\\x{1FB4}"
    "\\x{1FB6}-\\x{1FBC}\\x{1FBE}\\x{1FC2}-\\x{1FC4}\\x{1FC6}-\\x{1FCC}\\x{1FD0}-\\x{1FD3}"
    "\\x{1FD6}-\\x{1FDB}\\x{1FE0}-\\x{1FEC}\\x{1FF2}-\\x{1FF4}\\x{1FF6}-\\x{1FFC}\\x{2102}\\x{2107}"
    "\\x{210A}-\\x{2113}\\x{2115}\\x{2119}-\\x{211D}\\x{2124}\\x{2126}\\x{2128}\\x{212A}-\\x{212D}"
    "\\x{212F}-\\x{2134}\\x{2139}\\x{213C}-\\x{213F}\\x{2145}-\\x{2149}\\x{214E}\\x{2183}\\x{2184}"
    "\\x{2C00}-\\x{2C7B}\\x{2C7E}-\\x{2CE4}\\x{2CEB}-\\x{2CEE}\\x{2CF2}\\x{2CF3}\\x{A640}-\\x{A66D}"
    "\\x{A680}-\\x{A69B}\\x{A722}-\\x{A76F}\\x{A771}-\\x{A787}\\x{A78B}-\\x{A78E}\\x{AB70}-\\x{ABBF}"
    "\\x{FB00}-\\x{FB06}\\x{FB13}-\\x{FB17}\\x{FF21}-\\x{FF3A}\\x{FF41}-\\x{FF5A}\\x{10400}-\\x{1044F}"
    "\\x{104B0}-\\x{104D3}\\x{104D8}-\\x{104FB}\\x{10C80}-\\x{10CB2}\\x{10CC0}-\\x{10CF2}"
    "\\x{118A0}-\\x{118DF}\\x{1E900}-\\x{1E943}]+";
constexpr const char* kDeepseekPunct =
    "\\s?[!-/:-~\\x{FF01}-\\x{FF0F}\\x{FF1A}-\\x{FF5E}\\x{2018}-\\x{201F}\\x{3000}-\\x{3002}]+";
constexpr const char* kDeepseekCjk = "[\\x{4E00}-\\x{9FA5}\\x{800}-\\x{4E00}\\x{AC00}-\\x{D7FF}]+";

BpePreConfig make(std::vector<std::string> regexes) {
  BpePreConfig c;
  c.regexes = std::move(regexes);
  return c;
}

bool is_one_of(std::string_view s, std::initializer_list<std::string_view> names) {
  return std::find(names.begin(), names.end(), s) != names.end();
}

// ---------------------------------------------------------------------------------------
// Code points, as llama.cpp decodes them.

/// llama.cpp unicode_cpt_from_utf8 + the U+FFFD fallback of unicode_cpts_from_utf8: the
/// lead byte fixes the length; continuation bytes must be 10xxxxxx and present. Overlong
/// forms and surrogates are accepted as decoded. An undecodable byte yields U+FFFD.
uint32_t decode_cpt(std::string_view s, size_t& off) {
  const auto b = [&](size_t i) { return static_cast<uint8_t>(s[i]); };
  const auto cont = [&](size_t i) { return i < s.size() && (b(i) & 0xC0) == 0x80; };
  const uint8_t c = b(off);
  if (!(c & 0x80)) {
    off += 1;
    return c;
  }
  if ((c & 0x40) && !(c & 0x20) && cont(off + 1)) {
    uint32_t r = ((c & 0x1Fu) << 6) | (b(off + 1) & 0x3Fu);
    off += 2;
    return r;
  }
  if ((c & 0x60) == 0x60 && !(c & 0x10) && cont(off + 1) && cont(off + 2)) {
    uint32_t r = ((c & 0x0Fu) << 12) | ((b(off + 1) & 0x3Fu) << 6) | (b(off + 2) & 0x3Fu);
    off += 3;
    return r;
  }
  if ((c & 0x70) == 0x70 && !(c & 0x08) && cont(off + 1) && cont(off + 2) && cont(off + 3)) {
    uint32_t r = ((c & 0x07u) << 18) | ((b(off + 1) & 0x3Fu) << 12) | ((b(off + 2) & 0x3Fu) << 6) |
                 (b(off + 3) & 0x3Fu);
    off += 4;
    return r;
  }
  off += 1;
  return 0xFFFD;
}

void append_utf8(uint32_t cpt, std::string& out) {
  if (cpt <= 0x7F) {
    out += static_cast<char>(cpt);
  } else if (cpt <= 0x7FF) {
    out += static_cast<char>(0xC0 | (cpt >> 6));
    out += static_cast<char>(0x80 | (cpt & 0x3F));
  } else if (cpt <= 0xFFFF) {
    out += static_cast<char>(0xE0 | (cpt >> 12));
    out += static_cast<char>(0x80 | ((cpt >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cpt & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cpt >> 18));
    out += static_cast<char>(0x80 | ((cpt >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cpt >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cpt & 0x3F));
  }
}

// Non-ASCII whitespace. llama.cpp matches its regexes on a copy of the text in which
// every non-ASCII whitespace character (Unicode White_Space, its `\s`) is replaced by
// U+000B, so such characters match `\s` and nothing else (not a literal range such as
// DeepSeek's [\x{800}-\x{4E00}], which contains U+3000). We do the same with placeholders
// of equal UTF-8 length, keeping byte offsets aligned with the real text:
//   U+0085, U+00A0 (2 bytes) are left alone: no pattern names them except through \s;
//   3-byte whitespace → kWsMark; a real kWsMark → kOther; surrogates (which PCRE2 rejects
//   as invalid UTF-8; llama.cpp decodes and keeps them) → kOther, also category "other".
constexpr uint32_t kOther = 0xE000;   // private use: neither \s, \p{L}, \p{N}, \p{P}, \p{S}
constexpr uint32_t kWsMark = 0xE001;  // stands for a 3-byte whitespace character

bool is_wide_space(uint32_t c) {
  return c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
         c == 0x205F || c == 0x3000;
}

// `\s` / `\S` as llama.cpp means them (Python regex `\s` on its data; ASCII \t-\r and
// space, NEL, NBSP and the wide spaces above, here their placeholder).
constexpr const char* kSpaceSet = "\\t-\\r \\x{85}\\x{A0}\\x{E001}";

/// Rewrites llama.cpp's `\s`, `\S` and `\d` (ECMAScript/ASCII meaning in its std::regex
/// fallback) into explicit classes, so PCRE2's UCP notion of them plays no part.
Result<std::string> translate(const std::string& re) {
  std::string out;
  bool in_class = false;
  for (size_t i = 0; i < re.size(); ++i) {
    const char c = re[i];
    if (c == '\\' && i + 1 < re.size()) {
      const char e = re[++i];
      if (e == 's') {
        out += in_class ? std::string(kSpaceSet) : "[" + std::string(kSpaceSet) + "]";
      } else if (e == 'S') {
        if (in_class) return Status::InvalidArgument("\\S inside a character class is not supported");
        out += "[^" + std::string(kSpaceSet) + "]";
      } else if (e == 'd') {
        out += in_class ? "0-9" : "[0-9]";
      } else {
        out += c;
        out += e;
      }
      continue;
    }
    if (c == '[' && !in_class) {
      in_class = true;
      out += c;
      if (i + 1 < re.size() && re[i + 1] == '^') out += re[++i];
      if (i + 1 < re.size() && re[i + 1] == ']') out += re[++i];  // literal ']' first
      continue;
    }
    if (c == ']' && in_class) in_class = false;
    out += c;
  }
  return out;
}

}  // namespace

// ---------------------------------------------------------------------------------------

std::optional<BpePreConfig> bpe_pre_config(std::string_view pre) {
  // llama.cpp llama_vocab::impl::load (pre name → pre-type and flags) and
  // llm_tokenizer_bpe (pre-type → regex_exprs).
  if (pre.empty() || pre == "default") {
    return make({"[\\p{P}\\$\\+<=>\\^~\\|]+", kGpt2, "\\p{N}+", "[0-9][0-9][0-9]"});
  }
  if (is_one_of(pre, {"llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0",
                      "lfm2", "jina-v5-nano"})) {
    BpePreConfig c = make({kLlama3});
    c.ignore_merges = true;
    c.add_bos = true;
    return c;
  }
  if (is_one_of(pre, {"dbrx", "smaug-bpe"})) return make({kLlama3});
  if (is_one_of(pre, {"glm4", "chatglm-bpe"})) {
    BpePreConfig c = make({kLlama3});
    c.no_bos = true;
    return c;
  }
  if (pre == "deepseek-llm") {
    return make({"[\r\n]", kDeepseekLetters, kDeepseekPunct, "\\s+$", kDeepseekCjk, "\\p{N}+"});
  }
  if (pre == "deepseek-coder") {
    return make({"[\r\n]", "\\s?\\p{L}+", "\\s?\\p{P}+", kDeepseekCjk, "\\p{N}"});
  }
  if (pre == "falcon") return make({"[\\p{P}\\$\\+<=>\\^~\\|`]+", kGpt2, "[0-9][0-9][0-9]"});
  if (is_one_of(pre, {"starcoder", "refact", "command-r", "smollm", "codeshell", "exaone", "minerva-7b",
                      "mellum2"})) {
    return make({"\\p{N}", kGpt2});
  }
  if (is_one_of(pre, {"gpt-2", "phi-2", "jina-es", "jina-de", "gigachat", "jina-v2-es", "jina-v2-de",
                      "a.x-4.0", "mellum", "modern-bert", "exaone4", "mpt", "olmo", "jais", "trillion",
                      "granite-docling"})) {
    return make({kGpt2});
  }
  if (is_one_of(pre, {"qwen2", "deepseek-r1-qwen", "kormo", "f2llmv2", "megrez", "stablelm2", "hunyuan",
                      "solar-open"})) {
    return make({kQwen2});
  }
  return std::nullopt;
}

struct BpePreTokenizer::Compiled {
  pcre2_code* code = nullptr;
  ~Compiled() { pcre2_code_free(code); }
};

Result<BpePreTokenizer> BpePreTokenizer::create(const std::vector<std::string>& regexes) {
  BpePreTokenizer p;
  for (const std::string& re : regexes) {
    auto pattern = translate(re);
    if (!pattern.ok()) return pattern.status().annotate("pre-tokenizer regex '" + re + "'");
    int err = 0;
    PCRE2_SIZE err_off = 0;
    auto c = std::make_shared<Compiled>();
    // ECMAScript semantics where PCRE2's defaults differ: `$` only at the very end.
    c->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern->data()), pattern->size(),
                            PCRE2_UTF | PCRE2_UCP | PCRE2_DOLLAR_ENDONLY, &err, &err_off, nullptr);
    if (!c->code) {
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(err, msg, sizeof(msg));
      return Status::InvalidArgument("pre-tokenizer regex '" + re + "' does not compile: " +
                           reinterpret_cast<const char*>(msg) + " at offset " + std::to_string(err_off));
    }
    pcre2_jit_compile(c->code, PCRE2_JIT_COMPLETE);  // optional: the interpreter is the fallback
    p.regexes_.push_back(std::move(c));
  }
  return p;
}

namespace {

/// [begin, end) byte ranges of the current pieces.
using Pieces = std::vector<std::pair<uint32_t, uint32_t>>;

size_t utf8_len(char c) {
  static constexpr size_t kLookup[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
  return kLookup[static_cast<uint8_t>(c) >> 4];
}

/// One regex over one piece, as llama.cpp's unicode_regex_split_stl (std::regex_iterator
/// over exactly the piece): matches and the gaps between them become pieces; empty
/// matches contribute nothing (the iterator then retries non-empty at the same place).
void split_piece(const pcre2_code* code, pcre2_match_data* md, const std::string& subject_all,
                 uint32_t begin, uint32_t end, Pieces& out) {
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(subject_all.data() + begin);
  const size_t n = end - begin;
  size_t last = 0, start = 0;
  uint32_t opts = 0;
  const auto emit = [&](size_t a, size_t b) {
    if (b > a) out.emplace_back(begin + static_cast<uint32_t>(a), begin + static_cast<uint32_t>(b));
  };
  while (start <= n) {
    int rc = pcre2_match(code, subject, n, start, opts | PCRE2_NO_UTF_CHECK, md, nullptr);
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT) {
      rc = pcre2_match(code, subject, n, start, opts | PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, md, nullptr);
    }
    if (rc < 0) {
      if (rc == PCRE2_ERROR_NOMATCH && opts != 0 && start < n) {
        // No non-empty match where the empty one was: move on by one character.
        start += std::min(utf8_len(subject_all[begin + start]), n - start);
        opts = 0;
        continue;
      }
      break;  // no further match (or a resource limit: the rest stays one piece)
    }
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
    const size_t ms = ov[0], me = ov[1];
    emit(last, ms);
    emit(ms, me);
    last = std::max(last, me);
    start = me;
    opts = ms == me ? (PCRE2_NOTEMPTY_ATSTART | PCRE2_ANCHORED) : 0;
  }
  emit(last, n);
}

}  // namespace

std::vector<std::string> BpePreTokenizer::split(std::string_view text) const {
  // Canonical UTF-8 of llama.cpp's code points (`bytes`, what the words are made of) and
  // the same with placeholders (`match`, what the regexes see), of equal byte length.
  std::string bytes, match;
  bytes.reserve(text.size() + 8);
  match.reserve(text.size() + 8);
  for (size_t off = 0; off < text.size();) {
    uint32_t cpt = decode_cpt(text, off);
    // Above U+10FFFF llama.cpp cannot re-encode (it throws); we take U+FFFD.
    if (cpt > 0x10FFFF) cpt = 0xFFFD;
    append_utf8(cpt, bytes);
    uint32_t m = cpt;
    if ((cpt >= 0xD800 && cpt <= 0xDFFF) || cpt == kWsMark) {
      m = kOther;
    } else if (is_wide_space(cpt)) {
      m = kWsMark;
    }
    append_utf8(m, match);
  }

  std::vector<std::string> words;
  if (bytes.empty()) return words;
  Pieces pieces{{0u, static_cast<uint32_t>(bytes.size())}}, next;
  pcre2_match_data* md = pcre2_match_data_create(1, nullptr);
  for (const auto& re : regexes_) {
    next.clear();
    for (auto [b, e] : pieces) split_piece(re->code, md, match, b, e, next);
    pieces.swap(next);
  }
  pcre2_match_data_free(md);

  words.reserve(pieces.size());
  for (auto [b, e] : pieces) words.emplace_back(bytes, b, e - b);
  return words;
}

// ---------------------------------------------------------------------------------------
// GPT-2 bytes_to_unicode: printable Latin-1 bytes stand for themselves; the others (0-32,
// 127-160, 173) take the code points 256, 257, ... in byte order.

namespace {

struct ByteMap {
  std::array<std::string, 256> to_unicode;
  std::array<int16_t, 324> to_byte;  // code points 0..323
  ByteMap() {
    to_byte.fill(-1);
    int n = 0;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      const uint32_t cpt = printable ? b : 256 + n++;
      append_utf8(cpt, to_unicode[b]);
      to_byte[cpt] = static_cast<int16_t>(b);
    }
  }
};

const ByteMap& byte_map() {
  static const ByteMap m;
  return m;
}

}  // namespace

const std::string& byte_to_unicode(uint8_t b) { return byte_map().to_unicode[b]; }

int unicode_to_byte(uint32_t cpt) { return cpt < 324 ? byte_map().to_byte[cpt] : -1; }

void byte_encode(std::string_view word, std::string& out) {
  const ByteMap& m = byte_map();
  for (char c : word) out += m.to_unicode[static_cast<uint8_t>(c)];
}

std::string byte_decode(std::string_view text) {
  static const char* hex = "0123456789abcdef";
  std::string out;
  out.reserve(text.size());
  for (size_t off = 0; off < text.size();) {
    uint32_t cpt = decode_cpt(text, off);
    const int b = unicode_to_byte(cpt);
    if (b >= 0) {
      out += static_cast<char>(b);
      continue;
    }
    std::string utf8;
    append_utf8(cpt > 0x10FFFF ? 0xFFFD : cpt, utf8);
    out += "[UNK_BYTE_0x";
    for (unsigned char c : utf8) out += {hex[c >> 4], hex[c & 15]};
    out += text;
    out += ']';
  }
  return out;
}

}  // namespace pdserve::tokenizer

#pragma once
// The pdserve binary that tests start. Found at run time, not compiled in, so a test's
// object file does not depend on where the build tree is (a compiler cache then serves
// it to another checkout): $PDSERVE_BIN when set, else `pdserve` in the build tree this
// test binary belongs to (BUILD/tests/NAME -> BUILD/pdserve).
#include <unistd.h>

#include <climits>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace pdserve::testing {

/// Absolute path of the pdserve binary ($PDSERVE_BIN, else BUILD/pdserve); never empty.
inline const std::string& pdserve_bin() {
  static const std::string path = [] {
    if (const char* env = std::getenv("PDSERVE_BIN"); env != nullptr && *env != '\0') return std::string(env);
    char buf[PATH_MAX];
    const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
    if (n <= 0) return std::string("build/pdserve");
    std::string dir(buf, static_cast<size_t>(n));
    for (int up = 0; up < 2; ++up) dir = dir.substr(0, dir.rfind('/'));  // drop NAME, then tests/
    return dir + "/pdserve";
  }();
  static const bool checked = [] {
    if (::access(path.c_str(), X_OK) != 0)
      std::fprintf(stderr, "pdserve_bin: %s is not an executable: build the pdserve target, or set PDSERVE_BIN\n",
                   path.c_str());
    return true;
  }();
  (void)checked;
  return path;
}

}  // namespace pdserve::testing

#include "cli/parse_command_line.h"

#include <cstdio>
#include <string>
#include <vector>

namespace pdserve::cli {

int parse_command_line(CLI::App& app, int argc, char** argv) {
  try {
    app.parse(argc, argv);
    return -1;
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help, --help-all, --version
    std::string help = "pdserve --help";
    for (const CLI::App* sub : app.get_subcommands()) help = "pdserve " + sub->get_name() + " --help";
    std::string what = e.what();
    // CLI11 checks required options before unknown arguments, so `simulate --bogus`
    // would say "--profile is required": name the argument it did not expect instead.
    if (dynamic_cast<const CLI::RequiredError*>(&e)) {
      const std::vector<std::string> extra = app.remaining(true);
      if (!extra.empty()) what = CLI::ExtrasError(extra).what();
    }
    if (app.get_subcommands().empty() && argc > 1 && argv[1][0] != '-')
      what = std::string("unknown command '") + argv[1] + "'";
    if (!what.empty() && what.back() == '\n') what.pop_back();
    std::fprintf(stderr, "error: %s (see '%s')\n", what.c_str(), help.c_str());
    return 2;
  }
}

}  // namespace pdserve::cli

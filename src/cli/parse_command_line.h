// One place that turns CLI11's parse outcome into pdserve's exit contract.
#pragma once

#include <CLI/CLI.hpp>

namespace pdserve::cli {

/// Parses argv into `app`. Returns -1 when the command line is valid (the caller runs the
/// subcommand); otherwise the process exit code: 0 after --help / --version output, 2 for a
/// usage error, which is printed as ONE line on stderr in the same form as every other
/// start-up error: `error: <what> (see 'pdserve <subcommand> --help')`.
int parse_command_line(CLI::App& app, int argc, char** argv);

}  // namespace pdserve::cli

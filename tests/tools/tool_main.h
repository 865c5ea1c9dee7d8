// The main() of a test tool: parse, run, and report a failure on stderr with exit code 1.
#pragma once

#include <cstdio>
#include <string>
#include <string_view>

#include "core/base/status.h"

namespace pulse {

template <typename Args>
int RunTool(const char* name, std::string_view usage, const absl::StatusOr<Args>& args,
            absl::Status (*run)(const Args&)) {
  if (!args.ok()) {
    std::fprintf(stderr, "%s: %s\n%s\n", name, args.status().ToString().c_str(),
                 std::string(usage).c_str());
    return 1;
  }
  const absl::Status status = run(*args);
  if (!status.ok()) {
    std::fprintf(stderr, "%s: %s\n", name, status.ToString().c_str());
    return 1;
  }
  return 0;
}

}  // namespace pulse

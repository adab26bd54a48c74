// The figures of the gray bench: per-run values of every stack in every setup, the
// headline ratios, and their medians over runs as `KEY VALUE` lines and `#` tables
// (bench/README.md "gray").
#pragma once

#include "run.hpp"

#include <map>
#include <string>
#include <vector>

namespace gray {

/// Per-run values under "<setup>/<stack>/<loop>/<stat>" and the derived keys.
using Values = std::map<std::string, std::vector<double>>;

/// Records one stack's measurements of one setup into one run's values.
void record(std::map<std::string, double>& cur, const Setup& setup, const std::string& stack, const StackRun& r);

/// Adds one run's headline ratios (slow_member_p99_ratio.<stack>, ...) from its values.
void derive(std::map<std::string, double>& cur, const std::vector<std::string>& stacks);

/// Prints the medians: keys without a suffix are `headline`'s, then the `#` tables.
void print_results(const Values& values, const std::vector<std::string>& stacks, const std::string& headline,
                   const std::vector<Setup>& setups);

/// /proc/loadavg as it reads.
std::string loadavg_line();

}  // namespace gray

// Environment knobs (benchmarks and tests), shared by the CUDA launchers and the CPU code.
#pragma once

#include <c10/util/Exception.h>

#include <cctype>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <string>

namespace xpress {

// An environment knob (benchmarks and tests): the index of its value in `choices`, `fallback`
// when it is unset or empty; any other value is an error that names the knob and its choices.
inline int env_choice(const char* name, std::initializer_list<const char*> choices, int fallback) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return fallback;
  std::string allowed;
  int i = 0;
  for (const char* c : choices) {
    if (std::strcmp(v, c) == 0) return i;
    allowed += i == 0 ? "" : (i + 1 == static_cast<int>(choices.size()) ? " or " : ", ");
    allowed += c;
    ++i;
  }
  TORCH_CHECK_VALUE(false, name, " must be ", allowed, ", got '", v, "'");
  return fallback;  // not reached
}

// A power-of-two knob (benchmarks): 1, 2, 4 or 8, `fallback` when unset or empty (env_choice's
// error otherwise).
inline int env_pow2(const char* name, int fallback) {
  const int choice = env_choice(name, {"1", "2", "4", "8"}, -1);
  return choice < 0 ? fallback : 1 << choice;
}

// An integer knob (benchmarks): `fallback` when unset or empty, else a whole decimal number in
// [lo, hi]; anything else is an error that names the knob and the range.
inline int64_t env_int(const char* name, int64_t lo, int64_t hi, int64_t fallback) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return fallback;
  char* end = nullptr;
  const long long n = std::strtoll(v, &end, 10);
  // Digits only (an optional '-' first): strtoll alone would also take leading blanks and a '+'.
  const bool digits = std::isdigit(static_cast<unsigned char>(v[v[0] == '-' ? 1 : 0])) != 0;
  TORCH_CHECK_VALUE(digits && *end == '\0' && n >= lo && n <= hi, name, " must be an integer from ", lo, " to ", hi,
                    ", got '", v, "'");
  return n;
}

}  // namespace xpress

// Integer arithmetic on counts and byte sizes that refuses to wrap.
//
// A count or a byte size that comes from input (nodes x GPUs per node, a parameter's
// elements, an allocation's bytes, the bytes live at once in a replayed step) is multiplied
// and summed in 64-bit integers; a product past 2^63 - 1 would wrap silently (to 0, giving
// SIGFPE in a later division, or to a negative size that vanishes from a peak). Every such
// product and sum goes through these helpers, which throw ArithmeticOverflow naming what
// overflowed instead. Where the operands come from a file, the reader catches it and
// rethrows an InputError naming the file and the JSON path (models/json_input.h).
//
// The checks are compiler builtins (one flag test each): cheap enough for the memory replay,
// which a sweep runs thousands of times.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>

namespace fsdpsim {

class ArithmeticOverflow : public std::overflow_error {
 public:
  using std::overflow_error::overflow_error;
};

namespace detail {
[[noreturn]] void throw_overflow(const char* what, const std::string& a, const char* op, const std::string& b);
}  // namespace detail

// a x b; `what` names the quantity ("nodes x gpus_per_node").
inline std::int64_t checked_mul(std::int64_t a, std::int64_t b, const char* what) {
  std::int64_t r;
  if (__builtin_mul_overflow(a, b, &r)) detail::throw_overflow(what, std::to_string(a), " x ", std::to_string(b));
  return r;
}

inline std::int64_t checked_add(std::int64_t a, std::int64_t b, const char* what) {
  std::int64_t r;
  if (__builtin_add_overflow(a, b, &r)) detail::throw_overflow(what, std::to_string(a), " + ", std::to_string(b));
  return r;
}

inline std::int64_t checked_sub(std::int64_t a, std::int64_t b, const char* what) {
  std::int64_t r;
  if (__builtin_sub_overflow(a, b, &r)) detail::throw_overflow(what, std::to_string(a), " - ", std::to_string(b));
  return r;
}

// `value` rounded up to a multiple of `multiple` (> 0): the caching allocator's block and
// segment rounding, FSDP's shard padding.
inline std::int64_t checked_round_up(std::int64_t value, std::int64_t multiple, const char* what) {
  return checked_mul(checked_add(value, multiple - 1, what) / multiple, multiple, what);
}

// A size computed in floating point (a polynomial in batch and sequence length) as an
// integer: refuses NaN, infinities and values that do not fit in an int64.
std::int64_t checked_to_int64(double value, const char* what);

}  // namespace fsdpsim

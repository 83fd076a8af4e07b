// For the planner's input tests: the InputError a reader throws, or a test failure when it
// throws none.
#pragma once

#include <gtest/gtest.h>

#include "models/json_input.h"

namespace fsdpsim::testing {

template <typename F>
InputError input_error_of(F read) {
  try {
    read();
  } catch (const InputError& e) {
    return e;
  }
  ADD_FAILURE() << "no InputError";
  return InputError("", "", "");
}

}  // namespace fsdpsim::testing

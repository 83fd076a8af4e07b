// What the libFuzzer harnesses (tests/fuzz/*.cpp) share.
//
// Each harness feeds one reader the way the command line does: the fuzzer's bytes are written
// to a file and the reader is given its path, so file reading, JSON parsing (comments
// allowed), reference resolution and validation all run. A reader must either accept the input
// or throw InputError (std::invalid_argument where the CLI takes that too); a crash, a
// sanitizer report, a hang or a run out of memory is a finding.
//
// The input's references resolve beside it (a private directory, also the working directory),
// then under the catalog root: the shipped models and clusters are reachable, as in the seeds.
#pragma once

#include <cstddef>
#include <cstdint>
#include <exception>
#include <stdexcept>
#include <string>

#include "models/json_input.h"

namespace fsdpsim::fuzz {

// Creates this process's private directory and makes it the working directory. Call once
// (LLVMFuzzerInitialize).
void init();

// Writes the input to `name` in the private directory; returns its path.
std::string write_input(const std::uint8_t* data, std::size_t size, const char* name);

// Whether the input may run. Inputs that could make a reader open a file outside the catalog
// are skipped: a string that is an absolute path or holds "..", "=/" or ":/" (an override
// or an "hf:" reference to an absolute path). Otherwise the fuzzer soon finds "/dev/zero" or
// "/proc/self/fd/0", which a reader reads forever: a harness cannot tell that from a hang.
bool stays_in_catalog(const std::uint8_t* data, std::size_t size);

// An exception other than the readers' contract (InputError; std::invalid_argument): the
// command line would still print it as one `error:` line, so by default the run goes on and
// the first 20 distinct messages are printed (docs/reliability.md lists them); with
// FSDPSIM_FUZZ_STRICT=1 in the environment it aborts, a finding like a crash.
void note_exception(const char* reader, const std::exception& e);

// Runs `read` (a reader and what the commands compute from its result first) under the
// harnesses' verdict. Returns 0, what LLVMFuzzerTestOneInput returns for an input that ran.
template <class Read>
int run_reader(const char* reader, Read&& read) {
  try {
    read();
  } catch (const InputError&) {
  } catch (const std::invalid_argument&) {
  } catch (const std::exception& e) {
    note_exception(reader, e);
  }
  return 0;
}

}  // namespace fsdpsim::fuzz

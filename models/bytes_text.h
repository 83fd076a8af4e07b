// Byte counts as text for people: the four forms the commands print, in one place so that
// every command writes a size the same way (the models library is the one every other folder
// depends on).
#pragma once

#include <cstdint>
#include <string>

namespace fsdpsim {

// "12.34 GiB": always GiB with two decimals, so that memory tables line up.
std::string gib(double bytes);

// "42.29 GiB (45413464064 B)": GiB to read, the exact count to check against a measurement.
std::string gib_and_bytes(std::int64_t bytes);

// "16.74 GiB", "256.00 MiB", "512 B": GiB or MiB with two decimals, whole bytes below 1 MiB
// (allocations in out-of-memory messages).
std::string gib_or_mib(double bytes);

// "1 KiB", "1.5 KiB", "256 MiB", "6.37 TiB": the largest binary unit (B to TiB) reached, a
// whole number when the size is one, else three significant digits (buffer sizes).
std::string bytes_text(double bytes);

}  // namespace fsdpsim

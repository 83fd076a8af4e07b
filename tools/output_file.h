// The files the commands write beside their output (--trace, --plot, --export-platform, -o,
// --output): one way to write them, so that none reports "wrote" for a file that did not get
// its text.
#pragma once

#include <string>

namespace fsdpsim::tools {

// Writes `text` to `path`, replacing the file. Throws InputError naming the path when the file
// cannot be opened, or when the text does not all reach it: a full disk shows only once the
// buffered text is flushed, so the stream is checked after flush and close (the session-30
// audit: `--trace /dev/full` printed "wrote /dev/full" and exited 0). `what` names the file in
// the message ("the trace file").
void write_output_file(const std::string& path, const std::string& text, const std::string& what);

// Throws InputError naming the path when `path` cannot be written, before a long run that would
// write it at the end. Leaves no trace: a file that was not there is not left behind empty (a
// failed calibrate left a 0-byte file, the session-30 audit), one that was is not changed.
void check_writable(const std::string& path, const std::string& what);

}  // namespace fsdpsim::tools

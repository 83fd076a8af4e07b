// A timed step as one standalone SVG: the memory timeline (allocated GiB by category,
// stacked, against seconds; the peak marked; the usable GPU memory as a line) above a
// Gantt chart of the CPU issue thread and every stream (ops coloured by kind, a tooltip per
// op), on one time axis in seconds, with legends. Readable in any browser or image viewer.
#pragma once

#include <string>

#include "planner/schedule.h"
#include "sim/analytic.h"

namespace fsdpsim::sim {

struct Estimate;

struct SvgOptions {
  double width = 1200;  // pixels
  std::string title;    // default: the schedule's name and the step time
  // Usable GPU memory (GPU memory minus what lives outside the caching allocator), drawn
  // as a line when it is within reach of the plot; 0: not drawn.
  double capacity_bytes = 0;
};

std::string timeline_svg(const planner::Schedule& schedule, const StepTiming& timing, const SvgOptions& options = {});
// With the estimate's capacity (GPU memory minus the device overhead) unless options say.
std::string timeline_svg(const Estimate& estimate, SvgOptions options = {});

}  // namespace fsdpsim::sim

// The estimate's sections on the job outside the step (planner/job_memory.h): host memory per
// node under each offload option, the init and checkpoint-save peaks, and the verdict over every
// phase. Text for people, one JSON object ("job") for tools; docs/schema.md lists the keys.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "planner/scenario.h"
#include "sim/estimate.h"

namespace fsdpsim::tools {

// `headroom_bytes` (estimate --headroom-gib) is kept free on the GPU in every phase, as the
// step's verdict keeps it (memory.fits): the job's verdict is judged against GPU memory less it.
std::string job_memory_text(const sim::Estimate& estimate, const planner::Scenario& scenario, double headroom_bytes = 0);
nlohmann::json job_memory_json(const sim::Estimate& estimate, const planner::Scenario& scenario, double headroom_bytes = 0);

}  // namespace fsdpsim::tools

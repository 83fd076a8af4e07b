// Paths the model tests read: the repository's catalog and Hugging Face configs.
#pragma once

#include <string>

namespace fsdpsim::models::testing_paths {

inline std::string source_root() { return FSDPSIM_SOURCE_ROOT; }
inline std::string repo_path(const std::string& relative) { return source_root() + "/" + relative; }
inline std::string hf_config_path(const std::string& name) { return repo_path("models/hf/" + name + ".json"); }
inline std::string catalog_path(const std::string& name) { return repo_path("models/" + name + ".json"); }

}  // namespace fsdpsim::models::testing_paths

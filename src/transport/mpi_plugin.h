// The MPI backend as a plugin: src/transport/mpi/ is built into its own
// shared library (libhora_mpi.so, next to libhora_core.so) that uses MPI's
// symbols without naming the library that defines them, so that neither
// hora's core nor the plugin needs an MPI library to be installed. The
// registry loads the MPI library and then the plugin the first time a job
// runs on MPI or a caller asks whether MPI is available.
#pragma once

#include <string>
#include <vector>

#include "transport/registry.h"

namespace hora {

// What the plugin offers, through the one function it exports.
struct MpiPlugin {
  // kMpiPluginInterface of the build that made the plugin; the loader
  // refuses a plugin from another build.
  int interface = 0;
  // Collective over the job's world; see open_job_transport.
  JobTransport (*open_job)(RuntimeConfig config) = nullptr;
  bool (*threads_supported)() = nullptr;
  void (*abort_job)(int exit_code) = nullptr;
};

constexpr int kMpiPluginInterface = 1;
// extern "C" const MpiPlugin* hora_mpi_plugin(): the plugin's entry point.
constexpr char kMpiPluginEntryPoint[] = "hora_mpi_plugin";

// Loads the first of `mpi_libraries` (file names the dynamic linker
// searches for, or paths) that loads, then the plugin `file_name` from the
// folder of the library that holds hora's core (libhora_core.so: the
// installed package's folder, or the C++ build folder). Both with
// RTLD_GLOBAL: the plugin finds MPI's symbols there, and Open MPI loads
// components of its own that need them. Loading what is loaded only returns
// it, so any thread may call this any number of times. Returns the plugin,
// or throws InvalidArgument naming what is missing (the plugin, or the MPI
// library, by the first name in `mpi_libraries`) and what to install.
const MpiPlugin& load_mpi_plugin(const std::string& file_name, const std::vector<std::string>& mpi_libraries);

// The plugin if this process has loaded it, else nullptr; never loads it.
const MpiPlugin* loaded_mpi_plugin(const std::string& file_name);

}  // namespace hora

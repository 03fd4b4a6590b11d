// Loading the MPI plugin: what a caller is told when it, or the MPI library
// it needs, is absent, or when it is not hora's (a build with MPI loads the
// real one in tests/cpp/mpi/).

#include <cstdlib>
#include <string>

#include <gtest/gtest.h>

#include "hora/errors.h"
#include "hora/runtime_config.h"
#include "transport/mpi_plugin.h"
#include "transport/registry.h"

namespace hora {
namespace {

std::string load_error(const std::string& file_name, const std::string& mpi_library = "libc.so.6") {
  try {
    load_mpi_plugin(file_name, {mpi_library});
  } catch (const InvalidArgument& error) {
    return error.what();
  }
  ADD_FAILURE() << file_name << " loaded";
  return "";
}

TEST(MpiPlugin, AMissingPluginMeansNoMpiBackendAndSaysHowToGetOne) {
  const std::string message = load_error("libhora_no_such_plugin.so");
  EXPECT_NE(message.find("this build of hora has no MPI backend"), std::string::npos) << message;
  EXPECT_NE(message.find("/libhora_no_such_plugin.so"), std::string::npos) << message;
  EXPECT_NE(message.find("libopenmpi-dev"), std::string::npos) << message;
  EXPECT_EQ(loaded_mpi_plugin("libhora_no_such_plugin.so"), nullptr);
}

TEST(MpiPlugin, AMissingMpiLibraryIsNamedWithWhatToInstall) {
  // The core stands in for the plugin: the MPI library is loaded first.
  const std::string message = load_error("libhora_core.so", "libmpi-missing.so.40");
  EXPECT_NE(message.find("the MPI backend needs libmpi-missing.so.40"), std::string::npos) << message;
  EXPECT_NE(message.find("libmpi-missing.so.40: cannot open shared object file"), std::string::npos) << message;
  EXPECT_NE(message.find("apt-get install libopenmpi3"), std::string::npos) << message;
  EXPECT_NE(message.find("HORA_MPI_LIBRARY"), std::string::npos) << message;
}

TEST(MpiPlugin, ALibraryWithoutTheEntryPointIsRefused) {
  // The core itself lies in the folder the plugin is looked for in; libc
  // stands in for the MPI library.
  const std::string message = load_error("libhora_core.so");
  EXPECT_NE(message.find("libhora_core.so is not the MPI plugin of this build of hora"), std::string::npos)
      << message;
}

TEST(MpiPlugin, HoraMpiLibraryNamesTheLibraryTheRegistryLoads) {
  const bool built = mpi_built();  // with the MPI library of the build, if any
  ::setenv("HORA_MPI_LIBRARY", "libmpi-missing.so.40", 1);
  RuntimeConfig config;
  config.backend = "mpi";
  std::string message;
  try {
    open_job_transport(config);
  } catch (const InvalidArgument& error) {
    message = error.what();
  }
  const bool built_without_it = mpi_built();
  ::unsetenv("HORA_MPI_LIBRARY");
  EXPECT_FALSE(built_without_it);
  EXPECT_NE(message.find(built ? "the MPI backend needs libmpi-missing.so.40" : "no MPI backend"), std::string::npos)
      << message;
  EXPECT_NE(message.find("horarun without --mpi"), std::string::npos) << message;
}

}  // namespace
}  // namespace hora

#include "transport/mpi_plugin.h"

#include <dlfcn.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "hora/errors.h"

namespace hora {
namespace {

// The folder of the shared library that holds this code (libhora_core.so),
// where the plugin is installed too.
std::string core_folder() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<const void*>(&load_mpi_plugin), &info) == 0 || !info.dli_fname) {
    throw Internal("cannot find the file hora's core was loaded from (dladdr failed)");
  }
  const std::string path = info.dli_fname;
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? "." : path.substr(0, slash);
}

const MpiPlugin& entry_point(void* handle, const std::string& path) {
  using EntryPoint = const MpiPlugin* (*)();
  auto entry = reinterpret_cast<EntryPoint>(dlsym(handle, kMpiPluginEntryPoint));
  const MpiPlugin* plugin = entry ? entry() : nullptr;
  if (!plugin || plugin->interface != kMpiPluginInterface) {
    throw InvalidArgument(path + " is not the MPI plugin of this build of hora; reinstall hora");
  }
  return *plugin;
}

}  // namespace

const MpiPlugin& load_mpi_plugin(const std::string& file_name, const std::vector<std::string>& mpi_libraries) {
  const std::string path = core_folder() + "/" + file_name;
  if (access(path.c_str(), F_OK) != 0) {
    throw InvalidArgument("this build of hora has no MPI backend (no " + path +
                          "): build hora from source on a machine with an MPI library (Debian: apt-get install "
                          "libopenmpi-dev)");
  }
  // Neither is ever closed: MPI cannot be unloaded, and it finalises at exit.
  std::string failures;
  bool mpi_loaded = false;
  for (const std::string& library : mpi_libraries) {
    if (library.empty()) continue;  // dlopen("") would return the program itself
    if (dlopen(library.c_str(), RTLD_NOW | RTLD_GLOBAL)) {
      mpi_loaded = true;
      break;
    }
    const char* why = dlerror();
    failures += (failures.empty() ? "" : "; ") + std::string(why ? why : library + ": unknown dlopen error");
  }
  if (!mpi_loaded) {
    const std::string wanted = mpi_libraries.empty() ? "an MPI library" : mpi_libraries.front();
    throw InvalidArgument("the MPI backend needs " + wanted + " (the MPI library hora was built with), " +
                          "which cannot be loaded here (" + failures +
                          "): install it (Open MPI on Debian/Ubuntu: apt-get install libopenmpi3 openmpi-bin), "
                          "put its folder on LD_LIBRARY_PATH, or set HORA_MPI_LIBRARY to its path");
  }
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_GLOBAL);
  if (!handle) {
    const char* why = dlerror();
    throw InvalidArgument("the MPI backend " + path + " does not load with this machine's MPI library (" +
                          (why ? why : "unknown dlopen error") +
                          "): it needs the MPI hora was built with (" + mpi_libraries.front() + ")");
  }
  return entry_point(handle, path);
}

const MpiPlugin* loaded_mpi_plugin(const std::string& file_name) {
  const std::string path = core_folder() + "/" + file_name;
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_NOLOAD);
  if (!handle) return nullptr;
  const MpiPlugin* plugin = &entry_point(handle, path);
  dlclose(handle);  // the handle that loaded it keeps it loaded
  return plugin;
}

}  // namespace hora

// A job under MPI: the world communicator, the store that rank 0 serves
// (there is no horarun to serve one), and the backend factory; and the
// entry point of the MPI plugin, which this folder is built into.
#include <unistd.h>

#include <mutex>
#include <random>

#include "hora/errors.h"
#include "store/tcp_store_server.h"
#include "transport/mpi/mpi_backend.h"
#include "transport/mpi/mpi_world.h"
#include "transport/mpi_plugin.h"
#include "transport/registry.h"

namespace hora::mpi_transport {
namespace {

// Rank 0's store servers live until the process exits: another rank may
// still create a set after rank 0 has shut hora down, and MPI_Finalize, at
// exit, is where the ranks of a job meet for the last time.
void keep_until_exit(std::unique_ptr<TcpStoreServer> server) {
  static std::mutex mutex;
  static auto* servers = new std::vector<std::unique_ptr<TcpStoreServer>>();  // never destroyed
  std::lock_guard<std::mutex> lock(mutex);
  servers->push_back(std::move(server));
}

std::string random_secret() {
  std::random_device device;
  std::string secret;
  const char* hex = "0123456789abcdef";
  for (int i = 0; i < 32; ++i) secret += hex[device() % 16];
  return secret;
}

// Where this rank's listeners (control channels, Gloo, rank 0's store) bind:
// HORA_HOSTNAME if given, loopback when the job is on one node, else the
// node's host name.
std::string listen_address(const RuntimeConfig& config, const MpiWorld& world) {
  if (config.hostname != RuntimeConfig{}.hostname) return config.hostname;
  if (world.local_size() == world.size()) return config.hostname;
  char name[256] = {};
  if (gethostname(name, sizeof name - 1) != 0 || !name[0]) {
    throw InvalidArgument("cannot read this node's host name; set HORA_HOSTNAME to an address other nodes reach");
  }
  return name;
}

// Broadcasts `text` from world rank 0 to every rank.
std::string broadcast_text(const MpiWorld& world, std::string text) {
  int length = static_cast<int>(text.size());
  check(MPI_Bcast(&length, 1, MPI_INT, 0, world.comm()), "MPI_Bcast");
  text.resize(static_cast<size_t>(length));
  check(MPI_Bcast(text.data(), length, MPI_CHAR, 0, world.comm()), "MPI_Bcast");
  return text;
}

// Rank 0 serves the job's store; every rank gets its address over MPI.
std::shared_ptr<Store> bootstrap_store(const MpiWorld& world, const std::string& hostname) {
  std::string address;
  if (world.rank() == 0) {
    const std::string secret = random_secret();
    auto server = std::make_unique<TcpStoreServer>(hostname, secret);
    address = hostname + "\n" + std::to_string(server->port()) + "\n" + secret;
    keep_until_exit(std::move(server));
  }
  address = broadcast_text(world, address);
  const size_t first = address.find('\n'), second = address.rfind('\n');
  if (first == std::string::npos || first == second) throw Internal("malformed store address from rank 0");
  return make_tcp_store(address.substr(0, first), std::stoi(address.substr(first + 1, second - first - 1)),
                        address.substr(second + 1));
}

void check_world_size(const RuntimeConfig& config, const MpiWorld& world) {
  if (config.mpi_communicator || !config.mpi_world_ranks.empty() || config.size == world.size()) return;
  throw InvalidArgument("MPI sees " + std::to_string(world.size()) + " process(es) in MPI_COMM_WORLD but the " +
                        "launcher started " + std::to_string(config.size) +
                        ": the MPI backend needs an MPI launcher (horarun --mpi, mpirun, or srun with PMI/PMIx "
                        "support), or choose HORA_BACKEND=tcp under horarun");
}

JobTransport open_job(RuntimeConfig config) {
  if (config.epoch > 0) {
    // The sets of the first job leave communicators and requests behind
    // that MPI cannot cancel, and ranks would disagree about them.
    throw InvalidArgument(
        "init() after shutdown() is not supported in an MPI job: MPI itself cannot be started twice; keep hora "
        "initialised for the whole program, or start the job with horarun (Gloo), where init() may follow "
        "shutdown()");
  }
  const int provided = initialize_mpi();
  if (config.backend == "mpi" && provided != MPI_THREAD_MULTIPLE) {
    throw InvalidArgument(
        "the MPI backend needs MPI_THREAD_MULTIPLE, but MPI was initialised with thread level " +
        std::to_string(provided) +
        " (with mpi4py, leave mpi4py.rc.thread_level at 'multiple'), or choose HORA_BACKEND=tcp");
  }
  auto world = MpiWorld::join(config);
  check_world_size(config, *world);
  config.rank = world->rank();
  config.size = world->size();
  config.local_rank = world->local_rank();
  config.local_size = world->local_size();
  config.cross_rank = world->cross_rank();
  config.cross_size = world->cross_size();
  config.hostname = listen_address(config, *world);

  JobTransport job;
  job.store = bootstrap_store(*world, config.hostname);
  if (config.backend == "mpi") {
    job.factory = make_mpi_backend_factory(world, job.store);
  } else {
    job.factory = make_socket_backend_factory(config);
  }
  job.config = std::move(config);
  return job;
}

bool threads_supported() {
  if (!mpi_usable()) return false;
  int provided = MPI_THREAD_SINGLE;
  MPI_Query_thread(&provided);
  return provided == MPI_THREAD_MULTIPLE;
}

void abort_job(int exit_code) {
  if (mpi_usable()) MPI_Abort(MPI_COMM_WORLD, exit_code);
}

}  // namespace
}  // namespace hora::mpi_transport

// The plugin's one entry point (transport/mpi_plugin.h).
extern "C" const hora::MpiPlugin* hora_mpi_plugin() {
  static const hora::MpiPlugin plugin{hora::kMpiPluginInterface, &hora::mpi_transport::open_job,
                                      &hora::mpi_transport::threads_supported, &hora::mpi_transport::abort_job};
  return &plugin;
}

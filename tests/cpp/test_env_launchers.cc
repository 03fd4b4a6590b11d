// runtime_config_from_env under each launcher: horarun's variables, Open
// MPI's mpirun, MPICH's hydra and Slurm's srun; and the backend choice.

#include <cstdlib>
#include <string>
#include <tuple>
#include <vector>

#include <gtest/gtest.h>

#include "hora/errors.h"
#include "hora/runtime_config.h"
#include "transport/registry.h"

namespace hora {
namespace {

// Sets variables for one test and restores the environment afterwards;
// every variable that any launcher sets starts out unset.
class Environment {
 public:
  Environment() {
    for (const char* name : kLauncherVariables) unset(name);
  }
  ~Environment() {
    for (auto& [name, value, was_set] : saved_) {
      if (was_set) {
        ::setenv(name.c_str(), value.c_str(), 1);
      } else {
        ::unsetenv(name.c_str());
      }
    }
  }
  void set(const std::string& name, const std::string& value) {
    save(name);
    ::setenv(name.c_str(), value.c_str(), 1);
  }
  void unset(const std::string& name) {
    save(name);
    ::unsetenv(name.c_str());
  }

 private:
  static constexpr const char* kLauncherVariables[] = {
      "HORA_RANK", "HORA_SIZE", "HORA_LOCAL_RANK", "HORA_LOCAL_SIZE", "HORA_CROSS_RANK", "HORA_CROSS_SIZE",
      "HOROVOD_RANK", "HOROVOD_SIZE", "HOROVOD_LOCAL_RANK", "HOROVOD_LOCAL_SIZE", "HOROVOD_CROSS_RANK",
      "HOROVOD_CROSS_SIZE", "HORA_RENDEZVOUS_ADDR", "HORA_RENDEZVOUS_PORT", "HOROVOD_GLOO_RENDEZVOUS_ADDR",
      "HOROVOD_GLOO_RENDEZVOUS_PORT", "HORA_SECRET", "HORA_BACKEND", "HOROVOD_CONTROLLER",
      "HOROVOD_CPU_OPERATIONS", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
      "OMPI_COMM_WORLD_LOCAL_SIZE", "PMI_RANK", "PMI_SIZE", "PMIX_RANK", "MPI_LOCALRANKID", "MPI_LOCALNRANKS",
      "SLURM_STEP_ID", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_STEP_NUM_TASKS", "SLURM_LOCALID",
      "SLURM_NTASKS_PER_NODE", "SLURM_NODEID", "SLURM_NNODES", "SLURM_STEP_NUM_NODES",
      "HORA_NETWORK_INTERFACES", "HOROVOD_GLOO_IFACE", "HORA_AGREEMENT", "HORA_BIND"};

  void save(const std::string& name) {
    for (const auto& entry : saved_)
      if (std::get<0>(entry) == name) return;
    const char* value = std::getenv(name.c_str());
    saved_.emplace_back(name, value ? value : "", value != nullptr);
  }
  std::vector<std::tuple<std::string, std::string, bool>> saved_;
};

TEST(EnvLaunchers, APlainProcessIsASingleRankOnGlooByDefault) {
  Environment env;
  const RuntimeConfig c = runtime_config_from_env();
  EXPECT_EQ(c.size, 1);
  EXPECT_FALSE(c.mpi_launched);
  EXPECT_EQ(c.backend, "");
}

TEST(EnvLaunchers, OpenMpiRanksAndLocalRanks) {
  Environment env;
  env.set("OMPI_COMM_WORLD_RANK", "5");
  env.set("OMPI_COMM_WORLD_SIZE", "8");
  env.set("OMPI_COMM_WORLD_LOCAL_RANK", "1");
  env.set("OMPI_COMM_WORLD_LOCAL_SIZE", "4");
  const RuntimeConfig c = runtime_config_from_env();
  EXPECT_TRUE(c.mpi_launched);
  EXPECT_EQ(c.rank, 5);
  EXPECT_EQ(c.size, 8);
  EXPECT_EQ(c.local_rank, 1);
  EXPECT_EQ(c.local_size, 4);
}

TEST(EnvLaunchers, MpichHydraRanks) {
  Environment env;
  env.set("PMI_RANK", "2");
  env.set("PMI_SIZE", "3");
  env.set("MPI_LOCALRANKID", "0");
  env.set("MPI_LOCALNRANKS", "1");
  const RuntimeConfig c = runtime_config_from_env();
  EXPECT_TRUE(c.mpi_launched);
  EXPECT_EQ(c.rank, 2);
  EXPECT_EQ(c.size, 3);
  EXPECT_EQ(c.local_rank, 0);
  EXPECT_EQ(c.local_size, 1);
}

TEST(EnvLaunchers, SlurmStepRanksLocalRanksAndNodes) {
  Environment env;
  env.set("SLURM_STEP_ID", "0");
  env.set("SLURM_PROCID", "6");
  env.set("SLURM_NTASKS", "8");
  env.set("SLURM_LOCALID", "2");
  env.set("SLURM_NTASKS_PER_NODE", "4");
  env.set("SLURM_NODEID", "1");
  env.set("SLURM_NNODES", "2");
  const RuntimeConfig c = runtime_config_from_env();
  EXPECT_TRUE(c.mpi_launched);
  EXPECT_EQ(c.rank, 6);
  EXPECT_EQ(c.size, 8);
  EXPECT_EQ(c.local_rank, 2);
  EXPECT_EQ(c.local_size, 4);
  EXPECT_EQ(c.cross_rank, 1);
  EXPECT_EQ(c.cross_size, 2);
}

TEST(EnvLaunchers, ASlurmBatchScriptAloneIsNotAJobStep) {
  Environment env;
  env.set("SLURM_PROCID", "0");
  env.set("SLURM_NTASKS", "8");
  const RuntimeConfig c = runtime_config_from_env();
  EXPECT_FALSE(c.mpi_launched);
  EXPECT_EQ(c.size, 1);
}

TEST(EnvLaunchers, HorarunsVariablesWinOverTheLaunchers) {
  Environment env;
  env.set("HORA_RANK", "1");
  env.set("HORA_SIZE", "2");
  env.set("HORA_RENDEZVOUS_ADDR", "127.0.0.1");
  env.set("HORA_RENDEZVOUS_PORT", "1234");
  env.set("OMPI_COMM_WORLD_RANK", "0");
  env.set("OMPI_COMM_WORLD_SIZE", "1");
  const RuntimeConfig c = runtime_config_from_env();
  EXPECT_FALSE(c.mpi_launched);
  EXPECT_EQ(c.rank, 1);
  EXPECT_EQ(c.size, 2);
}

TEST(EnvLaunchers, BackendFromHoraOrHorovodNames) {
  Environment env;
  env.set("HOROVOD_CONTROLLER", "MPI");
  EXPECT_EQ(runtime_config_from_env().backend, "mpi");
  // The data plane's name comes first; Horovod's Gloo mode is hora's TCP.
  env.set("HOROVOD_CPU_OPERATIONS", "gloo");
  EXPECT_EQ(runtime_config_from_env().backend, "tcp");
  env.set("HORA_BACKEND", "mpi");
  EXPECT_EQ(runtime_config_from_env().backend, "mpi");
  env.set("HORA_BACKEND", "Gloo");
  EXPECT_EQ(runtime_config_from_env().backend, "gloo");
  env.set("HORA_BACKEND", "tcp");
  EXPECT_EQ(runtime_config_from_env().backend, "tcp");
  env.unset("HORA_BACKEND");
  env.set("HOROVOD_CPU_OPERATIONS", "tcp");
  try {
    runtime_config_from_env();
    FAIL() << "Horovod's variable took a value Horovod does not know";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("HOROVOD_CPU_OPERATIONS='tcp' must be gloo or mpi"), std::string::npos)
        << e.what();
  }
  env.set("HORA_BACKEND", "nccl");
  try {
    runtime_config_from_env();
    FAIL() << "an unknown backend was accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("HORA_BACKEND='nccl' must be tcp, gloo or mpi"), std::string::npos) << e.what();
  }
}

TEST(EnvLaunchers, RanksArePlacedByDefaultNeverOnRequestElseRefused) {
  Environment env;
  EXPECT_TRUE(runtime_config_from_env().place_ranks);
  env.set("HORA_BIND", "none");
  EXPECT_FALSE(runtime_config_from_env().place_ranks);
  env.set("HORA_BIND", "auto");
  EXPECT_TRUE(runtime_config_from_env().place_ranks);
  env.set("HORA_BIND", "core");
  try {
    runtime_config_from_env();
    FAIL() << "an unknown placement was accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("HORA_BIND=core is neither 'auto' nor 'none'"), std::string::npos) << e.what();
  }
}

TEST(EnvLaunchers, AgreementThroughTheLeadersByDefaultStreamOrNegotiatedOnRequestElseRefused) {
  Environment env;
  EXPECT_TRUE(runtime_config_from_env().stream_agreement);
  EXPECT_TRUE(runtime_config_from_env().host_agreement);
  env.set("HORA_AGREEMENT", "negotiated");
  EXPECT_FALSE(runtime_config_from_env().stream_agreement);
  EXPECT_FALSE(runtime_config_from_env().host_agreement);
  env.set("HORA_AGREEMENT", "stream");
  EXPECT_TRUE(runtime_config_from_env().stream_agreement);
  EXPECT_FALSE(runtime_config_from_env().host_agreement);
  env.set("HORA_AGREEMENT", "leaders");
  EXPECT_TRUE(runtime_config_from_env().stream_agreement);
  EXPECT_TRUE(runtime_config_from_env().host_agreement);
  env.set("HORA_AGREEMENT", "gossip");
  try {
    runtime_config_from_env();
    FAIL() << "an unknown agreement was accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("HORA_AGREEMENT=gossip is none of 'leaders', 'stream' and 'negotiated'"),
              std::string::npos)
        << e.what();
  }
}

TEST(EnvLaunchers, SeveralRanksWithoutAnyLauncherIsAClearError) {
  Environment env;
  env.set("HORA_SIZE", "4");
  try {
    runtime_config_from_env();
    FAIL() << "four ranks without a rendezvous or an MPI launcher were accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("horarun"), std::string::npos) << e.what();
  }
}

TEST(TransportRegistry, AnUnknownBackendIsRefused) {
  RuntimeConfig config;
  config.backend = "nccl";
  EXPECT_THROW(open_job_transport(config), InvalidArgument);
}

TEST(TransportRegistry, ASingleProcessNeedsNoLauncher) {
  RuntimeConfig config;
  JobTransport job = open_job_transport(config);
  EXPECT_EQ(job.config.backend, "tcp");
  ASSERT_NE(job.factory, nullptr);
  EXPECT_EQ(job.factory->name(), "local");
}

TEST(TransportRegistry, MpiWithoutTheBuildSaysHowToGetIt) {
  if (mpi_built()) GTEST_SKIP() << "this build has MPI";
  RuntimeConfig config;
  config.backend = "mpi";
  try {
    open_job_transport(config);
    FAIL() << "the MPI backend was opened without MPI";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("no MPI backend"), std::string::npos) << e.what();
  }
}

TEST(EnvLaunchers, NetworkInterfacesChooseTheAddressRanksListenOn) {
  Environment env;
  env.set("HORA_NETWORK_INTERFACES", "no-such-interface0,lo");
  EXPECT_EQ(runtime_config_from_env().hostname, "127.0.0.1");
  env.unset("HORA_NETWORK_INTERFACES");
  env.set("HOROVOD_GLOO_IFACE", "lo");
  EXPECT_EQ(runtime_config_from_env().hostname, "127.0.0.1");
  env.set("HORA_NETWORK_INTERFACES", "no-such-interface0,,no-such-interface1");
  try {
    runtime_config_from_env();
    FAIL() << "an interface this host lacks was accepted";
  } catch (const InvalidArgument& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("HORA_NETWORK_INTERFACES='no-such-interface0,,no-such-interface1'"), std::string::npos)
        << message;
    EXPECT_NE(message.find("none of the network interfaces no-such-interface0, no-such-interface1 has an address"),
              std::string::npos)
        << message;
    EXPECT_NE(message.find("; it has "), std::string::npos) << message;
    EXPECT_NE(message.find(" lo"), std::string::npos) << message;
  }
}

}  // namespace
}  // namespace hora

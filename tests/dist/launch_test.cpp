// `mpirun -np N okapi ...` of a build without MPI is refused (each process would otherwise run
// the whole job alone), a lone process needs no MPI, and the launcher's size is read from its
// environment.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <string>

#include "core/error.hpp"
#include "dist/communicator.hpp"
#include "support/cli.hpp"
#include "support/paths.hpp"

namespace okapi::dist {
namespace {

TEST(DistLaunch, SeveralProcessesWithoutMpiAreRefused) {
  try {
    check_launch_supported(2, false);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("built without MPI"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("2 processes"), std::string::npos) << e.what();
  }
  EXPECT_NO_THROW(check_launch_supported(1, false));
  EXPECT_NO_THROW(check_launch_supported(4, true));
}

TEST(DistLaunch, WorldSizeComesFromTheLaunchersEnvironment) {
  if (std::getenv("OMPI_COMM_WORLD_SIZE") || std::getenv("PMIX_SIZE") || std::getenv("PMI_SIZE"))
    GTEST_SKIP() << "running under a launcher";
  EXPECT_EQ(launched_world_size(), 1);
  ::setenv("PMI_SIZE", "3", 1);
  EXPECT_EQ(launched_world_size(), 3);
  ::setenv("PMI_SIZE", "x", 1);
  EXPECT_EQ(launched_world_size(), 1);
  ::unsetenv("PMI_SIZE");
}

// The verb end to end, where this build has no MPI (with MPI, train_mpi_test runs real ranks).
TEST(DistLaunch, TrainUnderALauncherWithoutMpiSaysSo) {
  if (built_with_mpi()) GTEST_SKIP() << "built with MPI: train_train_mpi_test runs mpirun";
  const auto r = test::run_command("OMPI_COMM_WORLD_SIZE=2 " + test::shell_quote(test::cli_path().string()) +
                                   " train --data x --tokenizer y --out z");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("built without MPI"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace okapi::dist

// ISA tiers: names, detection, and the environment variables that force a lower tier
// (OKAPI_ISA, and OKAPI_FORCE_SCALAR as its older alias). The tier is chosen once per process,
// so each environment is checked in a child process running one test of this binary.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "core/cpu.hpp"
#include "core/error.hpp"
#include "kernels/format_table.hpp"
#include "support/cli.hpp"

namespace okapi {
namespace {

TEST(Isa, NamesRoundTrip) {
  for (Isa tier : {Isa::scalar, Isa::avx2, Isa::avx512}) EXPECT_EQ(parse_isa(isa_name(tier)), tier);
  EXPECT_THROW(parse_isa("avx512f"), Error);
  EXPECT_THROW(parse_isa(""), Error);
  EXPECT_THROW(parse_isa("AVX2"), Error);
}

TEST(Isa, TiersNeedAllTheirFeatures) {
  CpuFeatures f;
  EXPECT_EQ(f.best_isa(), Isa::scalar);
  f.avx2 = f.fma = true;
  EXPECT_EQ(f.best_isa(), Isa::scalar);  // no F16C
  f.f16c = true;
  EXPECT_EQ(f.best_isa(), Isa::avx2);
  f.avx512f = f.avx512bw = f.avx512dq = f.avx512vl = true;
  EXPECT_EQ(f.best_isa(), Isa::avx2);  // no VNNI
  f.avx512vnni = true;
  EXPECT_EQ(f.best_isa(), Isa::avx512);
  EXPECT_TRUE(f.use_avx2());
  EXPECT_TRUE(f.use_avx512());
  f.fma = false;
  EXPECT_EQ(f.best_isa(), Isa::scalar);  // a tier includes the ones below it
}

TEST(Isa, AvailableTiersEndWithTheOneInUse) {
  const std::vector<Isa> tiers = available_isas();
  ASSERT_FALSE(tiers.empty());
  EXPECT_EQ(tiers.front(), Isa::scalar);
  EXPECT_EQ(tiers.back(), isa());
  EXPECT_LE(isa(), detected_cpu_features().best_isa());
  // A table above the tier in use is refused.
  if (isa() < Isa::avx512) {
    EXPECT_THROW(quant::format(DType::Q8_0, Isa::avx512), Error);
  }
}

std::string self_path() { return std::filesystem::read_symlink("/proc/self/exe").string(); }

// Runs Isa.ChildReport in a child with `env` and returns what it printed.
test::CommandResult child(const std::string& env) {
  return test::run_command(env + " '" + self_path() + "' --gtest_filter=Isa.ChildReport");
}

// In a child (OKAPI_ISA_CHILD=1): prints the tier in use, or the error choosing it raised.
TEST(Isa, ChildReport) {
  if (std::getenv("OKAPI_ISA_CHILD") == nullptr) GTEST_SKIP() << "runs only as a child of the other tests";
  try {
    std::printf("tier-in-use=%s\n", std::string(isa_name(isa())).c_str());
    std::printf("table-q8_0-dot=%s\n",
                quant::format(DType::Q8_0).vec_dot == quant::format(DType::Q8_0).vec_dot_ref ? "ref" : "fast");
  } catch (const Error& e) {
    std::printf("error=%s\n", e.what());
  }
}

TEST(Isa, EnvironmentForcesEveryAvailableTier) {
  for (Isa tier : available_isas()) {
    const auto r = child("OKAPI_ISA_CHILD=1 OKAPI_ISA=" + std::string(isa_name(tier)));
    EXPECT_NE(r.output.find("tier-in-use=" + std::string(isa_name(tier)) + "\n"), std::string::npos) << r.output;
  }
  const auto scalar = child("OKAPI_ISA_CHILD=1 OKAPI_ISA=scalar");
  EXPECT_NE(scalar.output.find("table-q8_0-dot=ref"), std::string::npos) << scalar.output;
}

TEST(Isa, ForceScalarIsAnAliasAndTheLowerRequestWins) {
  const std::string best(isa_name(detected_cpu_features().best_isa()));
  for (const std::string& env : std::vector<std::string>{"OKAPI_FORCE_SCALAR=1", "OKAPI_FORCE_SCALAR=1 OKAPI_ISA=" + best}) {
    const auto r = child("OKAPI_ISA_CHILD=1 " + env);
    EXPECT_NE(r.output.find("tier-in-use=scalar\n"), std::string::npos) << env << "\n" << r.output;
  }
  const auto off = child("OKAPI_ISA_CHILD=1 OKAPI_FORCE_SCALAR=0 OKAPI_ISA=");
  EXPECT_NE(off.output.find("tier-in-use=" + best + "\n"), std::string::npos) << off.output;
}

TEST(Isa, UnknownOrUnavailableTierIsAnError) {
  const auto unknown = child("OKAPI_ISA_CHILD=1 OKAPI_ISA=sse9");
  EXPECT_NE(unknown.output.find("error=OKAPI_ISA: unknown ISA tier 'sse9' (expected scalar, avx2 or avx512)"),
            std::string::npos)
      << unknown.output;
  if (detected_cpu_features().best_isa() < Isa::avx512) {
    const auto above = child("OKAPI_ISA_CHILD=1 OKAPI_ISA=avx512");
    EXPECT_NE(above.output.find("error=OKAPI_ISA=avx512 asks for a tier this CPU does not have"), std::string::npos)
        << above.output;
  }
}

// The CLI turns the error into a message and exit code 1 before doing any work.
TEST(Isa, CliReportsABadTier) {
  const auto r = test::run_command("OKAPI_ISA=bogus '" OKAPI_CLI_PATH "' run -m '" OKAPI_REPO_DIR "/models/stories260K.gguf' -p Once -n 2");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("unknown ISA tier 'bogus'"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace okapi

// Models from Hugging Face (src/hub): the repo spec, the choice of a GGUF, the cache, and the
// downloads against a local stand-in for the hub (tests/hub/fake_hub.py: its API, redirects, Range,
// LFS sha256s, a dropped connection, a token) — no network needed.
#include "hub/hub.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "core/sha256.hpp"
#include "hub/http.hpp"
#include "support/cli.hpp"
#include "support/paths.hpp"

extern char** environ;

namespace okapi::hub {
namespace {

namespace fs = std::filesystem;
using test::make_temp_dir;

std::vector<RepoFile> named(std::initializer_list<const char*> paths) {
  std::vector<RepoFile> files;
  for (const char* p : paths) files.push_back({p, 10, ""});
  return files;
}

std::vector<std::string> paths_of(const std::vector<RepoFile>& files) {
  std::vector<std::string> out;
  for (const RepoFile& f : files) out.push_back(f.path);
  return out;
}

// The message of the okapi::Error `action` throws ("" if none).
template <typename Action>
std::string error_of(Action action) {
  try {
    action();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(HubSpec, ParsesRepoAndQuant) {
  EXPECT_EQ(parse_repo_spec("ggml-org/models").repo, "ggml-org/models");
  EXPECT_EQ(parse_repo_spec("ggml-org/models").quant, "");
  const RepoSpec spec = parse_repo_spec("unsloth/Qwen3-0.6B-GGUF:q4_k_m");
  EXPECT_EQ(spec.repo, "unsloth/Qwen3-0.6B-GGUF");
  EXPECT_EQ(spec.quant, "q4_k_m");
  for (const char* bad : {"", "model", "a/b/c", "../x", "a/..", "a/.b", "a//b", "/a/b", "a/b:", "a/b:Q4 K", "a b/c",
                          "a/b\n", "a/b:Q4/../x"})
    EXPECT_NE(error_of([&] { parse_repo_spec(bad); }), "") << bad;
}

TEST(HubSpec, RepoPathsThatCannotEscapeTheCache) {
  for (const char* good : {"model.gguf", "tinyllamas/stories260K.gguf", "Q4_K_M/a-00001-of-00002.gguf", "a..b.gguf"})
    EXPECT_TRUE(is_safe_repo_path(good)) << good;
  for (const char* bad : {"", "/etc/passwd", "../x.gguf", "a/../../x.gguf", "a/./b.gguf", "a//b.gguf", "a\\..\\b.gguf",
                          "a/", "x\n.gguf"})
    EXPECT_FALSE(is_safe_repo_path(bad)) << bad;
  EXPECT_FALSE(is_safe_repo_path(std::string(1025, 'a')));
}

TEST(HubSpec, QuantOfAFileName) {
  EXPECT_EQ(quant_of("Llama-3.2-1B-Instruct-Q4_K_M.gguf"), "Q4_K_M");
  EXPECT_EQ(quant_of("sub/Model-q8_0-00001-of-00003.gguf"), "Q8_0");
  EXPECT_EQ(quant_of("model.IQ4_XS.gguf"), "IQ4_XS");
  EXPECT_EQ(quant_of("model-f16.gguf"), "F16");
  EXPECT_EQ(quant_of("model-BF16.gguf"), "BF16");
  EXPECT_EQ(quant_of("stories260K.gguf"), "");
  EXPECT_EQ(quant_of("Qwen2.5-0.5B.gguf"), "");
}

TEST(HubChoice, DefaultIsQ4KMThenQ8ThenTheFirst) {
  const auto files = named({"README.md", "m-Q2_K.gguf", "m-Q4_K_M.gguf", "m-Q8_0.gguf", "mmproj-m-f16.gguf"});
  EXPECT_EQ(paths_of(choose_model_files("o/r", files, "", "")), std::vector<std::string>{"m-Q4_K_M.gguf"});
  const auto no_q4 = named({"mmproj-m-Q8_0.gguf", "m-Q2_K.gguf", "m-Q8_0.gguf"});
  EXPECT_EQ(paths_of(choose_model_files("o/r", no_q4, "", "")), std::vector<std::string>{"m-Q8_0.gguf"});
  const auto neither = named({"mmproj-x.gguf", "imatrix.gguf", "m-Q2_K.gguf", "m-Q3_K.gguf"});
  EXPECT_EQ(paths_of(choose_model_files("o/r", neither, "", "")), std::vector<std::string>{"m-Q2_K.gguf"});
}

TEST(HubChoice, QuantIsCaseInsensitiveAndWholeName) {
  const auto files = named({"m-IQ4_XS.gguf", "m-Q4_XS.gguf", "m-Q4_0.gguf"});
  EXPECT_EQ(paths_of(choose_model_files("o/r", files, "q4_xs", "")), std::vector<std::string>{"m-Q4_XS.gguf"});
  EXPECT_EQ(paths_of(choose_model_files("o/r", files, "IQ4_XS", "")), std::vector<std::string>{"m-IQ4_XS.gguf"});
}

TEST(HubChoice, MissingQuantListsTheRepo) {
  const auto files = named({"m-Q4_0.gguf", "m-Q8_0.gguf"});
  const std::string message = error_of([&] { choose_model_files("o/r", files, "Q5_K_M", ""); });
  EXPECT_NE(message.find("no GGUF for quant Q5_K_M"), std::string::npos) << message;
  EXPECT_NE(message.find("m-Q4_0.gguf, m-Q8_0.gguf"), std::string::npos) << message;
}

TEST(HubChoice, AmbiguousQuantIsAnError) {
  const auto files = named({"a/m-Q4_K_M.gguf", "b/m-Q4_K_M.gguf"});
  const std::string message = error_of([&] { choose_model_files("o/r", files, "Q4_K_M", ""); });
  EXPECT_NE(message.find("names 2 models (a/m-Q4_K_M.gguf, b/m-Q4_K_M.gguf); choose one with --hf-file"),
            std::string::npos)
      << message;
  EXPECT_EQ(paths_of(choose_model_files("o/r", files, "", "b/m-Q4_K_M.gguf")), std::vector<std::string>{"b/m-Q4_K_M.gguf"});
}

TEST(HubChoice, RepoWithoutGguf) {
  const std::string message = error_of([] { choose_model_files("o/r", named({"README.md", "model.safetensors"}), "", ""); });
  EXPECT_NE(message.find("o/r has no GGUF model file; it has no GGUF file"), std::string::npos) << message;
  EXPECT_NE(error_of([] { choose_model_files("o/r", named({"mmproj-f16.gguf"}), "", ""); }), "");
}

TEST(HubChoice, SplitGgufGivesEveryPart) {
  const auto files = named({"Q4_K_M/m-Q4_K_M-00002-of-00003.gguf", "Q4_K_M/m-Q4_K_M-00001-of-00003.gguf",
                            "Q4_K_M/m-Q4_K_M-00003-of-00003.gguf", "m-Q8_0.gguf"});
  const std::vector<std::string> parts{"Q4_K_M/m-Q4_K_M-00001-of-00003.gguf", "Q4_K_M/m-Q4_K_M-00002-of-00003.gguf",
                                       "Q4_K_M/m-Q4_K_M-00003-of-00003.gguf"};
  EXPECT_EQ(paths_of(choose_model_files("o/r", files, "", "")), parts);
  EXPECT_EQ(paths_of(choose_model_files("o/r", files, "", "Q4_K_M/m-Q4_K_M-00002-of-00003.gguf")), parts);
  const auto missing = named({"m-Q4_K_M-00001-of-00002.gguf"});
  EXPECT_NE(error_of([&] { choose_model_files("o/r", missing, "", ""); }).find("part 2 of the 2 parts"), std::string::npos);
}

TEST(HubChoice, HfFileMustBeThere) {
  const std::string message = error_of([] { choose_model_files("o/r", named({"a.gguf"}), "", "b.gguf"); });
  EXPECT_NE(message.find("o/r has no file b.gguf; it has a.gguf"), std::string::npos) << message;
  EXPECT_NE(error_of([] { choose_model_files("o/r", named({"a.bin"}), "", "a.bin"); }).find("not a GGUF"), std::string::npos);
}

void write_bytes(const fs::path& path, const std::string& bytes) {
  fs::create_directories(path.parent_path());
  std::ofstream(path, std::ios::binary) << bytes;
}

TEST(HubCache, ListsCompleteGgufsOnly) {
  const fs::path cache = make_temp_dir("hub-list");
  write_bytes(cache / "hf/ggml-org/models/tinyllamas/stories260K.gguf", "abc");
  write_bytes(cache / "hf/o/r/m-Q4_K_M-00001-of-00002.gguf", "12");
  write_bytes(cache / "hf/o/r/m-Q4_K_M-00002-of-00002.gguf", "345");
  write_bytes(cache / "hf/o/r/m-Q8_0.gguf.part", "partial");
  write_bytes(cache / "hf/o/r/m-Q8_0.gguf.sha256", "x");
  write_bytes(cache / "hf/o/r/README.md", "readme");
  write_bytes(cache / "hf/bad..name/r/x.gguf", "not a repo id");
  write_bytes(cache / "url/example.com/0123456789abcdef-m.gguf", "url");
  const auto models = list_cached_models(cache);
  ASSERT_EQ(models.size(), 3u);
  EXPECT_EQ(models[0].repo, "ggml-org/models");
  EXPECT_EQ(models[0].file, "tinyllamas/stories260K.gguf");
  EXPECT_EQ(models[0].path, cache / "hf/ggml-org/models/tinyllamas/stories260K.gguf");
  EXPECT_EQ(models[0].size, 3u);
  EXPECT_EQ(models[1].repo, "o/r");
  EXPECT_EQ(models[1].file, "m-Q4_K_M-00001-of-00002.gguf");
  EXPECT_EQ(models[1].quant, "Q4_K_M");
  EXPECT_EQ(models[1].size, 5u);
  EXPECT_EQ(models[2].repo, "url/example.com");
  EXPECT_TRUE(list_cached_models(cache / "absent").empty());
  fs::remove_all(cache);
}

// ---- against tests/hub/fake_hub.py ----

std::string random_bytes(size_t size, uint32_t seed) {
  std::mt19937 rng(seed);
  std::string out(size, '\0');
  for (char& c : out) c = static_cast<char>(rng() & 0xff);
  return out;
}

class FakeHub : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (std::system("command -v python3 > /dev/null 2>&1") != 0) return;
    root_ = make_temp_dir("hub-root");
    // Repos: a model in three quants; a dropped connection; a wrong hash; no GGUF; ambiguous
    // quants; a private one; a paged listing; the real stories260K for the CLI.
    write_bytes(root_ / "test/quants/m-Q2_K.gguf", random_bytes(1000, 1));
    write_bytes(root_ / "test/quants/m-Q4_K_M.gguf", random_bytes(300000, 2));
    write_bytes(root_ / "test/quants/m-Q8_0.gguf", random_bytes(2000, 3));
    write_bytes(root_ / "test/quants/README.md", "# quants");
    write_bytes(root_ / "test/dropped/m-Q4_K_M.gguf", random_bytes(400000, 4));
    write_bytes(root_ / "test/badhash/m-Q4_K_M.gguf", random_bytes(5000, 5));
    write_bytes(root_ / "test/nogguf/model.safetensors", "weights");
    write_bytes(root_ / "test/nogguf/README.md", "# none");
    write_bytes(root_ / "test/ambiguous/a/m-Q4_K_M.gguf", "a");
    write_bytes(root_ / "test/ambiguous/b/m-Q4_K_M.gguf", "b");
    write_bytes(root_ / "test/private/m-Q8_0.gguf", random_bytes(3000, 6));
    for (int i = 0; i < 5; ++i) write_bytes(root_ / fmt::format("test/paged/f{}.txt", i), "x");
    write_bytes(root_ / "test/paged/z-Q4_K_M.gguf", "paged");
    write_bytes(root_ / "test/stories/tinyllamas/stories260K.gguf", test::read_file(test::repo_dir() / "models/stories260K.gguf"));
    write_bytes(root_ / "test/resume/m-Q4_K_M.gguf", random_bytes(100000, 7));
    write_bytes(root_ / "_config.json", R"({"test/dropped": {"drop_after": 150000}, "test/badhash": {"wrong_sha": true},
      "test/private": {"token": "hf_secret"}, "test/paged": {"tree_pages": 2}})");

    int out[2];
    if (pipe(out) != 0) return;
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, out[1], 1);
    posix_spawn_file_actions_addclose(&actions, out[0]);
    const std::string script = (test::repo_dir() / "tests/hub/fake_hub.py").string();
    const std::string root = root_.string();
    std::vector<char*> argv{const_cast<char*>("python3"), const_cast<char*>(script.c_str()), const_cast<char*>(root.c_str()),
                            nullptr};
    const int spawned = posix_spawnp(&pid_, "python3", &actions, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    close(out[1]);
    if (spawned != 0) {
      pid_ = 0;
      close(out[0]);
      return;
    }
    std::FILE* from = fdopen(out[0], "r");
    char line[64] = {};
    int port = 0;
    if (std::fgets(line, sizeof line, from) != nullptr) std::sscanf(line, "PORT %d", &port);
    std::fclose(from);
    if (port > 0) endpoint_ = fmt::format("http://127.0.0.1:{}", port);
  }
  static void TearDownTestSuite() {
    if (pid_ > 0) {
      kill(pid_, SIGTERM);
      waitpid(pid_, nullptr, 0);
    }
    if (!root_.empty()) fs::remove_all(root_);
  }
  void SetUp() override {
    if (endpoint_.empty()) GTEST_SKIP() << "python3 could not start tests/hub/fake_hub.py";
    cache_ = make_temp_dir("hub-cache");
    options_.endpoint = endpoint_;
    options_.cache_dir = cache_;
    options_.report = false;
  }
  void TearDown() override {
    if (!cache_.empty()) fs::remove_all(cache_);
  }

  static nlohmann::json requests() {
    return nlohmann::json::parse(detail::http_get(endpoint_ + "/_requests", "", 1 << 24).body);
  }
  // The requests since `before` whose path starts with `prefix`.
  static std::vector<nlohmann::json> requests_since(size_t before, const std::string& prefix) {
    std::vector<nlohmann::json> out;
    const auto all = requests();
    for (size_t i = before; i < all.size(); ++i)
      if (all[i]["path"].get<std::string>().rfind(prefix, 0) == 0) out.push_back(all[i]);
    return out;
  }
  static std::string sha_of_file(const fs::path& path) { return detail::file_sha256(path); }

  static inline pid_t pid_ = 0;
  static inline fs::path root_;
  static inline std::string endpoint_;
  fs::path cache_;
  HubOptions options_;
};

TEST_F(FakeHub, DownloadsTheDefaultQuantIntoTheCacheOnce) {
  const fs::path path = resolve_hf_model("test/quants", "", options_);
  EXPECT_EQ(path, cache_ / "hf/test/quants/m-Q4_K_M.gguf");
  EXPECT_EQ(test::read_file(path), random_bytes(300000, 2));
  EXPECT_EQ(test::read_file(path.string() + ".sha256"), sha_of_file(path) + "\n");
  EXPECT_FALSE(fs::exists(path.string() + ".part"));
  // Asked again: the API is asked, the file is not downloaded again.
  const size_t before = requests().size();
  EXPECT_EQ(resolve_hf_model("test/quants:q4_k_m", "", options_), path);
  EXPECT_TRUE(requests_since(before, "/_cdn/").empty());
  EXPECT_FALSE(requests_since(before, "/api/models/test/quants/tree/").empty());
  // Another quant; the listing holds the cached files.
  EXPECT_EQ(resolve_hf_model("test/quants:Q8_0", "", options_), cache_ / "hf/test/quants/m-Q8_0.gguf");
  const auto cached = list_cached_models(cache_);
  ASSERT_EQ(cached.size(), 2u);
  EXPECT_EQ(cached[0].quant, "Q4_K_M");
  EXPECT_EQ(cached[1].quant, "Q8_0");
}

TEST_F(FakeHub, ChangedFileOnTheHubIsDownloadedAgain) {
  const fs::path path = resolve_hf_model("test/quants:Q2_K", "", options_);
  write_bytes(path.string() + ".sha256", std::string(64, 'a') + "\n");  // as if the hub's file had changed
  const size_t before = requests().size();
  resolve_hf_model("test/quants:Q2_K", "", options_);
  EXPECT_EQ(requests_since(before, "/_cdn/").size(), 1u);
  EXPECT_EQ(test::read_file(path), random_bytes(1000, 1));
}

TEST_F(FakeHub, DroppedConnectionResumesWithRange) {
  const size_t before = requests().size();
  const fs::path path = resolve_hf_model("test/dropped", "", options_);
  EXPECT_EQ(test::read_file(path), random_bytes(400000, 4));
  const auto cdn = requests_since(before, "/_cdn/");
  ASSERT_EQ(cdn.size(), 2u);
  EXPECT_TRUE(cdn[0]["range"].is_null());
  EXPECT_EQ(cdn[1]["range"], "bytes=150000-");
}

TEST_F(FakeHub, PartialFileOfAnEarlierRunIsResumed) {
  const std::string bytes = random_bytes(100000, 7);
  write_bytes(cache_ / "hf/test/resume/m-Q4_K_M.gguf.part", bytes.substr(0, 60000));
  const size_t before = requests().size();
  const fs::path path = resolve_hf_model("test/resume", "", options_);
  EXPECT_EQ(test::read_file(path), bytes);
  const auto cdn = requests_since(before, "/_cdn/");
  ASSERT_EQ(cdn.size(), 1u);
  EXPECT_EQ(cdn[0]["range"], "bytes=60000-");
}

TEST_F(FakeHub, WrongHashIsRefusedAndNotKept) {
  const std::string message = error_of([&] { resolve_hf_model("test/badhash", "", options_); });
  EXPECT_NE(message.find("does not match the hub's"), std::string::npos) << message;
  EXPECT_NE(message.find("the file was not kept"), std::string::npos) << message;
  EXPECT_FALSE(fs::exists(cache_ / "hf/test/badhash/m-Q4_K_M.gguf"));
  EXPECT_FALSE(fs::exists(cache_ / "hf/test/badhash/m-Q4_K_M.gguf.part"));
}

TEST_F(FakeHub, RepoErrorsSayWhatTheRepoHas) {
  EXPECT_NE(error_of([&] { resolve_hf_model("test/nogguf", "", options_); }).find("test/nogguf has no GGUF model file"),
            std::string::npos);
  EXPECT_NE(error_of([&] { resolve_hf_model("test/ambiguous", "", options_); }).find("choose one with --hf-file"),
            std::string::npos);
  EXPECT_EQ(resolve_hf_model("test/ambiguous", "b/m-Q4_K_M.gguf", options_), cache_ / "hf/test/ambiguous/b/m-Q4_K_M.gguf");
  EXPECT_NE(error_of([&] { resolve_hf_model("test/quants:Q5_K_S", "", options_); })
                .find("test/quants has no GGUF for quant Q5_K_S; it has m-Q2_K.gguf, m-Q4_K_M.gguf, m-Q8_0.gguf"),
            std::string::npos);
  EXPECT_NE(error_of([&] { resolve_hf_model("test/absent", "", options_); }).find("test/absent: no such repo on"),
            std::string::npos);
}

TEST_F(FakeHub, PagedListingIsFollowed) {
  EXPECT_EQ(resolve_hf_model("test/paged", "", options_), cache_ / "hf/test/paged/z-Q4_K_M.gguf");
}

TEST_F(FakeHub, OfflineUsesTheCacheOnly) {
  HubOptions offline = options_;
  offline.offline = true;
  const size_t before = requests().size();
  const std::string message = error_of([&] { resolve_hf_model("test/quants", "", offline); });
  EXPECT_NE(message.find("--offline: test/quants is not in the cache"), std::string::npos) << message;
  EXPECT_EQ(requests().size(), before + 1);  // only this /_requests call
  const fs::path path = resolve_hf_model("test/quants:Q8_0", "", options_);
  const size_t after_download = requests().size();
  EXPECT_EQ(resolve_hf_model("test/quants", "", offline), path);  // the one cached quant: the first GGUF
  EXPECT_EQ(resolve_hf_model("test/quants:q8_0", "", offline), path);
  EXPECT_NE(error_of([&] { resolve_hf_model("test/quants:Q4_K_M", "", offline); }).find("no GGUF for quant Q4_K_M"),
            std::string::npos);
  EXPECT_EQ(requests().size(), after_download + 1);  // only the previous /_requests call
}

TEST_F(FakeHub, TokenIsSentAsBearerAndNotToAnotherHost) {
  const std::string message = error_of([&] { resolve_hf_model("test/private", "", options_); });
  EXPECT_NE(message.find("HTTP 401"), std::string::npos) << message;
  EXPECT_NE(message.find("--hf-token"), std::string::npos) << message;
  HubOptions with_token = options_;
  with_token.token = "hf_secret";
  const size_t before = requests().size();
  const fs::path path = resolve_hf_model("test/private", "", with_token);
  EXPECT_EQ(test::read_file(path), random_bytes(3000, 6));
  for (const auto& r : requests_since(before, "/api/models/test/private/")) EXPECT_EQ(r["authorization"], "Bearer hf_secret");
  const auto resolve = requests_since(before, "/test/private/resolve/");
  ASSERT_EQ(resolve.size(), 1u);
  EXPECT_EQ(resolve[0]["authorization"], "Bearer hf_secret");
  const auto cdn = requests_since(before, "/_cdn/test/private/");
  ASSERT_EQ(cdn.size(), 1u);
  EXPECT_TRUE(cdn[0]["authorization"].is_null()) << cdn[0].dump();  // redirected to "localhost": another host
  HubOptions bad_token = options_;
  bad_token.token = "hf_x\r\nX-Injected: 1";
  EXPECT_NE(error_of([&] { resolve_hf_model("test/private", "", bad_token); }).find("line break"), std::string::npos);
}

TEST_F(FakeHub, ModelUrlIsDownloadedOnce) {
  const std::string url = endpoint_ + "/_cdn/test/quants/m-Q8_0.gguf?download=true";
  const fs::path path = resolve_model_url(url, options_);
  EXPECT_EQ(path.parent_path().parent_path(), cache_ / "url");
  EXPECT_TRUE(path.parent_path().filename().string().starts_with("127.0.0.1_")) << path;  // HOST:PORT
  EXPECT_TRUE(path.filename().string().ends_with("-m-Q8_0.gguf")) << path;
  EXPECT_EQ(test::read_file(path), random_bytes(2000, 3));
  HubOptions offline = options_;
  offline.offline = true;
  EXPECT_EQ(resolve_model_url(url, offline), path);
  EXPECT_NE(error_of([&] { resolve_model_url(url + "&other", offline); }).find("--offline"), std::string::npos);
  EXPECT_NE(error_of([&] { resolve_model_url("file:///etc/passwd", options_); }).find("not an http or https URL"),
            std::string::npos);
}

TEST_F(FakeHub, UnreachableHubFallsBackToTheCache) {
  const fs::path path = resolve_hf_model("test/quants:Q2_K", "", options_);
  HubOptions unreachable = options_;
  unreachable.endpoint = "http://127.0.0.1:1";  // nothing listens there
  EXPECT_EQ(resolve_hf_model("test/quants", "", unreachable), path);
  const std::string message = error_of([&] { resolve_hf_model("test/dropped", "", unreachable); });
  EXPECT_NE(message.find("GET http://127.0.0.1:1/api/models/test/dropped/refs failed"), std::string::npos) << message;
}

// The CLI: -hf on run (llama.cpp's spelling), HF_ENDPOINT and OKAPI_CACHE from the environment.
TEST_F(FakeHub, RunDownloadsWithHfFlag) {
  const std::string env = "HF_ENDPOINT=" + endpoint_ + " OKAPI_CACHE=" + test::shell_quote(cache_.string()) + " ";
  const std::string okapi = test::cli_path().string();
  const auto run = test::run_command(env + okapi + " run -hf test/stories -hff tinyllamas/stories260K.gguf -n 4 -p Once -s 1");
  EXPECT_EQ(run.exit_code, 0) << run.output;
  EXPECT_NE(run.output.find("okapi: downloading test/stories/tinyllamas/stories260K.gguf"), std::string::npos) << run.output;
  EXPECT_TRUE(fs::exists(cache_ / "hf/test/stories/tinyllamas/stories260K.gguf"));
  const auto offline = test::run_command(env + okapi + " run --hf-repo test/stories --offline -n 4 -p Once -s 1");
  EXPECT_EQ(offline.exit_code, 0) << offline.output;
  EXPECT_EQ(offline.output.find("downloading"), std::string::npos) << offline.output;
  const auto missing = test::run_command(env + okapi + " run --hf-repo test/quants --offline -n 1");
  EXPECT_EQ(missing.exit_code, 1) << missing.output;
  EXPECT_NE(missing.output.find("okapi: error: --offline: test/quants is not in the cache"), std::string::npos)
      << missing.output;
  const auto both = test::run_command(okapi + " run -m x.gguf -hf test/stories -n 1");
  EXPECT_EQ(both.exit_code, 2) << both.output;
  const auto none = test::run_command(okapi + " bench -p 1 -n 0");
  EXPECT_EQ(none.exit_code, 2) << none.output;
  EXPECT_NE(none.output.find("no model: pass -m FILE, --hf-repo"), std::string::npos) << none.output;
}

}  // namespace
}  // namespace okapi::hub

// Models from Hugging Face, taken as llama.cpp's tools take them: -hf user/repo[:QUANT], --hf-file,
// --hf-token / HF_TOKEN, HF_ENDPOINT (a mirror), --offline and -mu URL. A repo's files come from the
// hub's API (GET /api/models/REPO/refs for main's commit, then /api/models/REPO/tree/COMMIT?recursive=true,
// as llama.cpp's common/hf-cache.cpp asks); a file is downloaded from /REPO/resolve/COMMIT/FILE
// (redirects followed) into FILE.part, resumed with Range requests, checked against the hub's LFS
// sha256 and renamed into the cache when complete.
//
// The cache (OKAPI_CACHE, else $XDG_CACHE_HOME/okapi, else ~/.cache/okapi) keeps the hub's names:
//   hf/OWNER/NAME/PATH/IN/REPO.gguf      a model file, as the repo names it
//   hf/OWNER/NAME/PATH/IN/REPO.gguf.sha256   its checked sha256 (so a later run need not rehash it)
//   url/HOST/HASH-NAME.gguf              a -mu download (HASH: of the URL, so two URLs never collide)
// Repo ids and file paths are validated before they become paths (no "..", no absolute path, no
// control bytes): a hostile repo or API answer cannot write outside the cache.
#pragma once
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace okapi::hub {

// "user/repo[:QUANT]" split; an id that is not OWNER/NAME of [A-Za-z0-9_.-] is an okapi::Error.
struct RepoSpec {
  std::string repo;   // "ggml-org/models"
  std::string quant;  // "Q4_K_M", or empty: the default choice
};
RepoSpec parse_repo_spec(std::string_view spec);

// The hub's rules for a repo id: OWNER/NAME, [A-Za-z0-9_] with '.', '-' and the one '/' only between them.
bool is_valid_repo_id(std::string_view repo);
// A file path inside a repo that can be stored under the cache: relative, '/'-separated, no empty,
// "." or ".." component, no backslash or control byte, at most 1024 bytes.
bool is_safe_repo_path(std::string_view path);

struct HubOptions {
  std::string endpoint;             // empty: default_endpoint()
  std::string token;                // sent as "Authorization: Bearer TOKEN"; empty: none
  bool offline = false;             // the cache only: no request is made
  std::filesystem::path cache_dir;  // empty: default_cache_dir()
  bool report = true;               // progress and notes on stderr
};

// MODEL_ENDPOINT, else HF_ENDPOINT (llama.cpp reads both), else https://huggingface.co; no trailing '/'.
std::string default_endpoint();
// OKAPI_CACHE, else $XDG_CACHE_HOME/okapi, else $HOME/.cache/okapi.
std::filesystem::path default_cache_dir();
// HF_TOKEN, or empty.
std::string default_token();

// One file of a repo as the API lists it.
struct RepoFile {
  std::string path;    // "tinyllamas/stories260K.gguf"
  uint64_t size = 0;   // 0: unknown
  std::string sha256;  // the LFS oid (lowercase hex), empty when the file is not in LFS
};

// The quantization a GGUF's name carries ("Q4_K_M" of "Model-Q4_K_M.gguf" or of
// "Model-Q4_K_M-00001-of-00002.gguf"; "F16", "BF16", "IQ4_XS"), upper case; empty when none.
std::string quant_of(std::string_view file_path);

// The model files that --hf-file FILE or QUANT picks among `files` (llama.cpp's choice): FILE
// exactly; else the model GGUF (not mmproj/imatrix/draft heads) whose name has QUANT followed by
// '.', '-' or '/', case-insensitive; with no QUANT, Q4_K_M, else Q8_0, else the first model GGUF.
// A split GGUF (NAME-00001-of-0000N.gguf) gives every part, in order. A missing file or quant, a
// quant that names two different models, a split with missing parts, or a repo with no GGUF is an
// okapi::Error that lists the repo's GGUFs.
std::vector<RepoFile> choose_model_files(const std::string& repo, const std::vector<RepoFile>& files,
                                         const std::string& quant, const std::string& hf_file);

// A GGUF in the cache: what `okapi serve`'s model list shows. Split GGUFs appear once (their
// first part), with the total size of the parts present.
struct CachedModel {
  std::string repo;   // "ggml-org/models"; for a -mu download, "url/HOST"
  std::string file;   // the path in the repo ("tinyllamas/stories260K.gguf")
  std::string quant;  // quant_of(file)
  std::filesystem::path path;
  uint64_t size = 0;
};
// Every complete GGUF under `cache_dir` (empty: default_cache_dir()), sorted by repo then file;
// downloads in progress (.part) are left out. A missing cache is an empty list.
std::vector<CachedModel> list_cached_models(const std::filesystem::path& cache_dir = {});

// The repo's files from the API (main's commit, else the first branch's). HTTP errors become
// okapi::Errors that say what to do (401/403: a token; 404: the repo's name).
std::vector<RepoFile> list_repo_files(const std::string& repo, const HubOptions& options);

// -hf SPEC [--hf-file FILE]: the local path of the chosen model (its first part when split),
// downloaded into the cache unless it is there with the sha256 the hub lists. Offline, the cache
// alone answers, and a model not in it is an okapi::Error naming the cache folder.
std::filesystem::path resolve_hf_model(const std::string& spec, const std::string& hf_file, const HubOptions& options);

// -mu URL (http or https): the local path of the file, downloaded into the cache once; offline,
// the cached copy or an okapi::Error.
std::filesystem::path resolve_model_url(const std::string& url, const HubOptions& options);

}  // namespace okapi::hub

// Repo specs, the choice of a repo's GGUF, the cache's layout and the hub's API (src/hub/hub.hpp).
#include "hub/hub.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <fstream>
#include <map>
#include <optional>
#include <regex>
#include <system_error>

#include "core/error.hpp"
#include "core/sha256.hpp"
#include "hub/http.hpp"

namespace okapi::hub {
namespace {

namespace fs = std::filesystem;

constexpr size_t kMaxApiAnswer = size_t{64} << 20;  // a tree listing of a very large repo fits
constexpr int kMaxTreePages = 1000;

std::string upper(std::string text) {
  std::transform(text.begin(), text.end(), text.begin(), [](unsigned char c) { return std::toupper(c); });
  return text;
}

bool is_hex(std::string_view text, size_t length) {
  return text.size() == length &&
         std::all_of(text.begin(), text.end(), [](unsigned char c) { return std::isxdigit(c) != 0; });
}

bool ends_with(std::string_view text, std::string_view suffix) {
  return text.size() >= suffix.size() && text.substr(text.size() - suffix.size()) == suffix;
}

std::string_view base_name(std::string_view path) {
  const size_t slash = path.rfind('/');
  return slash == std::string_view::npos ? path : path.substr(slash + 1);
}

// A GGUF that is a model, not a projector, an importance matrix or a drafting head (llama.cpp's list).
bool is_model_gguf(std::string_view path) {
  if (!ends_with(path, ".gguf")) return false;
  const std::string_view name = base_name(path);
  for (const std::string_view other : {"mmproj", "imatrix", "mtp-", "eagle3-", "dflash-", "dspark-"})
    if (name.find(other) != std::string_view::npos) return false;
  return true;
}

struct SplitInfo {
  std::string prefix;  // the path before -0000i-of-0000N.gguf (or before .gguf)
  int index = 1;
  int count = 1;
};

SplitInfo split_info(const std::string& path) {
  static const std::regex split(R"(^(.+)-([0-9]{5})-of-([0-9]{5})\.gguf$)", std::regex::icase);
  std::smatch m;
  if (std::regex_match(path, m, split)) return {m[1].str(), std::stoi(m[2].str()), std::stoi(m[3].str())};
  return {ends_with(path, ".gguf") ? path.substr(0, path.size() - 5) : path, 1, 1};
}

// `quant` in `path`, case-insensitive, not preceded by a letter or digit and followed by '.', '-' or '/'.
bool names_quant(const std::string& path, const std::string& quant) {
  const std::string haystack = upper(path);
  const std::string needle = upper(quant);
  for (size_t at = haystack.find(needle); at != std::string::npos; at = haystack.find(needle, at + 1)) {
    const size_t end = at + needle.size();
    const bool before_ok = at == 0 || !std::isalnum(static_cast<unsigned char>(haystack[at - 1]));
    const bool after_ok = end < haystack.size() && (haystack[end] == '.' || haystack[end] == '-' || haystack[end] == '/');
    if (before_ok && after_ok) return true;
  }
  return false;
}

std::string list_ggufs(const std::vector<RepoFile>& files) {
  std::string text;
  int shown = 0;
  int left = 0;
  for (const RepoFile& f : files) {
    if (!ends_with(f.path, ".gguf")) continue;
    if (shown == 40) {
      ++left;
      continue;
    }
    text += text.empty() ? "" : ", ";
    text += f.path;
    ++shown;
  }
  if (left > 0) text += fmt::format(" and {} more", left);
  return text.empty() ? "no GGUF file" : text;
}

// Every part of the split GGUF `first` belongs to (just `first` when it is not split), in order.
std::vector<RepoFile> with_parts(const std::string& repo, const std::vector<RepoFile>& files, const RepoFile& first) {
  const SplitInfo info = split_info(first.path);
  if (info.count <= 1) return {first};
  std::vector<std::optional<RepoFile>> parts(static_cast<size_t>(info.count));
  for (const RepoFile& f : files) {
    const SplitInfo other = split_info(f.path);
    if (other.count == info.count && other.prefix == info.prefix && other.index >= 1 && other.index <= info.count)
      parts[static_cast<size_t>(other.index - 1)] = f;
  }
  std::vector<RepoFile> out;
  for (size_t i = 0; i < parts.size(); ++i) {
    if (!parts[i])
      throw_error("{}: part {} of the {} parts of {} is missing", repo, i + 1, info.count, first.path);
    out.push_back(*parts[i]);
  }
  return out;
}

fs::path resolved_cache(const HubOptions& options) {
  return options.cache_dir.empty() ? default_cache_dir() : options.cache_dir;
}

std::string resolved_endpoint(const HubOptions& options) {
  std::string endpoint = options.endpoint.empty() ? default_endpoint() : options.endpoint;
  while (!endpoint.empty() && endpoint.back() == '/') endpoint.pop_back();
  if (endpoint.rfind("http://", 0) != 0 && endpoint.rfind("https://", 0) != 0)
    throw_error("the hub endpoint '{}' is not an http or https URL (HF_ENDPOINT)", endpoint);
  return endpoint;
}

fs::path repo_folder(const fs::path& cache, const std::string& repo) {
  // is_valid_repo_id holds: OWNER and NAME are plain names, never "." or "..".
  const size_t slash = repo.find('/');
  return cache / "hf" / repo.substr(0, slash) / repo.substr(slash + 1);
}

std::string read_sidecar(const fs::path& path) {
  std::ifstream in(path);
  std::string text;
  if (!(in >> text) || !is_hex(text, 64)) return {};
  return text;
}

void write_sidecar(const fs::path& path, const std::string& sha256) {
  const fs::path temp = path.string() + ".tmp";
  {
    std::ofstream out(temp, std::ios::trunc);
    out << sha256 << '\n';
    if (!out) return;  // a missing sidecar only costs a rehash next time
  }
  std::error_code ec;
  fs::rename(temp, path, ec);
  if (ec) fs::remove(temp, ec);
}

// The GGUFs under a cache folder (recursively), as repo-relative paths with sizes and any sidecar hash.
std::vector<RepoFile> cached_files(const fs::path& folder) {
  std::vector<RepoFile> files;
  std::error_code ec;
  if (!fs::is_directory(folder, ec)) return files;
  for (auto it = fs::recursive_directory_iterator(folder, fs::directory_options::skip_permission_denied, ec);
       !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (!it->is_regular_file(ec)) continue;
    const std::string rel = fs::relative(it->path(), folder, ec).generic_string();
    if (ec || !ends_with(rel, ".gguf") || !is_safe_repo_path(rel)) continue;
    files.push_back({rel, static_cast<uint64_t>(it->file_size(ec)), read_sidecar(it->path().string() + ".sha256")});
  }
  std::sort(files.begin(), files.end(), [](const RepoFile& a, const RepoFile& b) { return a.path < b.path; });
  return files;
}

// The file is in the cache as the hub lists it: the recorded sha256 matches, or (none recorded)
// the file hashes to it; without a hub hash, its size matches.
bool cached_and_current(const fs::path& local, const RepoFile& file) {
  std::error_code ec;
  if (!fs::is_regular_file(local, ec)) return false;
  if (file.size != 0 && fs::file_size(local, ec) != file.size) return false;
  if (file.sha256.empty()) return true;
  const fs::path sidecar = local.string() + ".sha256";
  const std::string recorded = read_sidecar(sidecar);
  if (!recorded.empty()) return recorded == file.sha256;
  if (detail::file_sha256(local) != file.sha256) return false;
  write_sidecar(sidecar, file.sha256);
  return true;
}

struct RepoListing {
  std::string commit;
  std::vector<RepoFile> files;
};

std::string api_failure(const std::string& repo, const std::string& endpoint, const detail::HttpAnswer& answer) {
  std::string detail;
  try {
    const auto json = nlohmann::json::parse(answer.body);
    if (json.is_object() && json.contains("error") && json["error"].is_string()) detail = ": " + json["error"].get<std::string>();
  } catch (const nlohmann::json::exception&) {
  }
  if (detail.size() > 300) detail = detail.substr(0, 300) + "...";
  if (answer.status == 401 || answer.status == 403)
    return fmt::format("{}: HTTP {} from {}{}: the repo does not exist, or it is private or gated (pass --hf-token "
                       "TOKEN or set HF_TOKEN, and accept its terms on the hub)",
                       repo, answer.status, endpoint, detail);
  if (answer.status == 404) return fmt::format("{}: no such repo on {}{}", repo, endpoint, detail);
  return fmt::format("{}: HTTP {} from {}{}", repo, answer.status, endpoint, detail);
}

RepoListing fetch_listing(const std::string& repo, const HubOptions& options) {
  const std::string endpoint = resolved_endpoint(options);
  const std::string token = options.token;
  const auto refs = detail::http_get(endpoint + "/api/models/" + repo + "/refs", token, kMaxApiAnswer);
  if (refs.status != 200) throw Error(api_failure(repo, endpoint, refs));
  RepoListing listing;
  try {
    const auto json = nlohmann::json::parse(refs.body);
    if (json.is_object() && json.contains("branches") && json["branches"].is_array()) {
      for (const auto& branch : json["branches"]) {
        if (!branch.is_object() || !branch.contains("name") || !branch["name"].is_string() ||
            !branch.contains("targetCommit") || !branch["targetCommit"].is_string())
          continue;
        const std::string commit = branch["targetCommit"].get<std::string>();
        if (!is_hex(commit, 40)) continue;
        if (branch["name"] == "main") {
          listing.commit = commit;
          break;
        }
        if (listing.commit.empty()) listing.commit = commit;
      }
    }
  } catch (const nlohmann::json::exception& e) {
    throw_error("{}: the hub's refs answer is not JSON ({})", repo, e.what());
  }
  if (listing.commit.empty()) throw_error("{}: the hub lists no branch with a commit", repo);

  std::string url = endpoint + "/api/models/" + repo + "/tree/" + listing.commit + "?recursive=true";
  for (int page = 0; !url.empty(); ++page) {
    if (page == kMaxTreePages) throw_error("{}: the file listing runs past {} pages", repo, kMaxTreePages);
    const auto tree = detail::http_get(url, token, kMaxApiAnswer);
    if (tree.status != 200) throw Error(api_failure(repo, endpoint, tree));
    try {
      const auto json = nlohmann::json::parse(tree.body);
      if (!json.is_array()) throw_error("{}: the hub's file listing is not a JSON array", repo);
      for (const auto& item : json) {
        if (!item.is_object() || item.value("type", "") != "file" || !item.contains("path") || !item["path"].is_string())
          continue;
        RepoFile file;
        file.path = item["path"].get<std::string>();
        if (!is_safe_repo_path(file.path)) continue;  // never becomes a path
        if (item.contains("size") && item["size"].is_number_unsigned()) file.size = item["size"].get<uint64_t>();
        if (item.contains("lfs") && item["lfs"].is_object()) {
          const auto& lfs = item["lfs"];
          if (lfs.contains("oid") && lfs["oid"].is_string() && is_hex(lfs["oid"].get<std::string>(), 64))
            file.sha256 = lfs["oid"].get<std::string>();
          if (lfs.contains("size") && lfs["size"].is_number_unsigned()) file.size = lfs["size"].get<uint64_t>();
        }
        std::transform(file.sha256.begin(), file.sha256.end(), file.sha256.begin(),
                       [](unsigned char c) { return std::tolower(c); });
        listing.files.push_back(std::move(file));
      }
    } catch (const nlohmann::json::exception& e) {
      throw_error("{}: the hub's file listing is not valid JSON ({})", repo, e.what());
    }
    // A long listing comes in pages: Link: <URL>; rel="next" (followed only on the same endpoint).
    url.clear();
    const auto link = tree.headers.find("link");
    if (link != tree.headers.end() && link->second.find("rel=\"next\"") != std::string::npos) {
      const size_t open = link->second.find('<');
      const size_t close = link->second.find('>', open);
      if (open != std::string::npos && close != std::string::npos) {
        std::string next = link->second.substr(open + 1, close - open - 1);
        if (next.rfind(endpoint + "/", 0) == 0) url = std::move(next);
      }
    }
  }
  return listing;
}

std::string env(const char* name) {
  const char* value = std::getenv(name);
  return value != nullptr ? value : "";
}

}  // namespace

bool is_valid_repo_id(std::string_view repo) {
  if (repo.empty() || repo.size() > 256) return false;
  int slashes = 0;
  bool after_special = true;  // at the start, as after a separator: a name may not begin with one
  for (const char c : repo) {
    if (std::isalnum(static_cast<unsigned char>(c)) || c == '_') {
      after_special = false;
    } else if (c == '/' || c == '.' || c == '-') {
      if (after_special) return false;
      slashes += c == '/';
      after_special = true;
    } else {
      return false;
    }
  }
  return !after_special && slashes == 1;
}

bool is_safe_repo_path(std::string_view path) {
  if (path.empty() || path.size() > 1024 || path.front() == '/') return false;
  size_t start = 0;
  while (start <= path.size()) {
    const size_t slash = std::min(path.find('/', start), path.size());
    const std::string_view part = path.substr(start, slash - start);
    if (part.empty() || part == "." || part == "..") return false;
    start = slash + 1;
  }
  return std::none_of(path.begin(), path.end(),
                      [](char c) { return static_cast<unsigned char>(c) < 0x20 || c == 0x7f || c == '\\'; });
}

RepoSpec parse_repo_spec(std::string_view spec) {
  RepoSpec out;
  const size_t colon = spec.find(':');
  out.repo = std::string(spec.substr(0, colon));
  if (colon != std::string_view::npos) out.quant = std::string(spec.substr(colon + 1));
  if (!is_valid_repo_id(out.repo))
    throw_error("'{}' is not a Hugging Face repo: expected OWNER/NAME[:QUANT] (letters, digits, '_', '.', '-')", spec);
  if (colon != std::string_view::npos &&
      (out.quant.empty() || out.quant.size() > 64 || !std::all_of(out.quant.begin(), out.quant.end(), [](unsigned char c) {
         return std::isalnum(c) || c == '_' || c == '-' || c == '.';
       })))
    throw_error("'{}': the quant after ':' must be a name such as Q4_K_M", spec);
  return out;
}

std::string default_endpoint() {
  std::string endpoint = env("MODEL_ENDPOINT");
  if (endpoint.empty()) endpoint = env("HF_ENDPOINT");
  if (endpoint.empty()) endpoint = "https://huggingface.co";
  while (!endpoint.empty() && endpoint.back() == '/') endpoint.pop_back();
  return endpoint;
}

fs::path default_cache_dir() {
  if (const std::string dir = env("OKAPI_CACHE"); !dir.empty()) return dir;
  if (const std::string xdg = env("XDG_CACHE_HOME"); !xdg.empty()) return fs::path(xdg) / "okapi";
  if (const std::string home = env("HOME"); !home.empty()) return fs::path(home) / ".cache" / "okapi";
  throw_error("no cache folder: set OKAPI_CACHE (or XDG_CACHE_HOME or HOME)");
}

std::string default_token() { return env("HF_TOKEN"); }

std::string quant_of(std::string_view file_path) {
  const std::string prefix = split_info(std::string(base_name(file_path))).prefix;
  static const std::regex quant(R"((?:^|[-._])((?:I?Q|TQ|BF|F|MXFP|NVFP)[0-9][A-Za-z0-9_]*)$)", std::regex::icase);
  std::smatch m;
  if (!std::regex_search(prefix, m, quant)) return {};
  return upper(m[1].str());
}

std::vector<RepoFile> choose_model_files(const std::string& repo, const std::vector<RepoFile>& files,
                                         const std::string& quant, const std::string& hf_file) {
  if (!hf_file.empty()) {
    if (!ends_with(hf_file, ".gguf")) throw_error("--hf-file {}: not a GGUF file (okapi loads .gguf files)", hf_file);
    for (const RepoFile& f : files)
      if (f.path == hf_file) return with_parts(repo, files, f);
    throw_error("{} has no file {}; it has {}", repo, hf_file, list_ggufs(files));
  }
  const auto firsts = [&](const std::string& tag) {
    std::vector<RepoFile> found;
    for (const RepoFile& f : files) {
      if (!is_model_gguf(f.path) || split_info(f.path).index != 1) continue;
      if (tag.empty() || names_quant(f.path, tag)) found.push_back(f);
    }
    return found;
  };
  const auto pick = [&](const std::vector<RepoFile>& found, const std::string& tag) {
    if (found.size() > 1) {
      std::string names;
      for (const RepoFile& f : found) names += (names.empty() ? "" : ", ") + f.path;
      throw_error("{}:{} names {} models ({}); choose one with --hf-file", repo, tag, found.size(), names);
    }
    return with_parts(repo, files, found.front());
  };
  if (!quant.empty()) {
    const auto found = firsts(quant);
    if (found.empty()) throw_error("{} has no GGUF for quant {}; it has {}", repo, quant, list_ggufs(files));
    return pick(found, quant);
  }
  for (const std::string tag : {"Q4_K_M", "Q8_0"})
    if (const auto found = firsts(tag); !found.empty()) return pick(found, tag);
  const auto any = firsts("");
  if (any.empty()) throw_error("{} has no GGUF model file; it has {}", repo, list_ggufs(files));
  return with_parts(repo, files, any.front());
}

std::vector<CachedModel> list_cached_models(const fs::path& cache_dir) {
  const fs::path cache = cache_dir.empty() ? default_cache_dir() : cache_dir;
  std::vector<CachedModel> models;
  std::error_code ec;
  const auto folders = [&](const fs::path& dir) {
    std::vector<fs::path> out;
    std::error_code dir_ec;
    if (!fs::is_directory(dir, dir_ec)) return out;
    for (const auto& entry : fs::directory_iterator(dir, fs::directory_options::skip_permission_denied, dir_ec))
      if (entry.is_directory(dir_ec)) out.push_back(entry.path());
    return out;
  };
  const auto add = [&](const std::string& repo, const fs::path& folder) {
    const std::vector<RepoFile> files = cached_files(folder);
    for (const RepoFile& f : files) {
      const SplitInfo info = split_info(f.path);
      if (info.index != 1) continue;
      uint64_t size = f.size;
      for (const RepoFile& other : files) {
        const SplitInfo o = split_info(other.path);
        if (info.count > 1 && o.prefix == info.prefix && o.count == info.count && o.index != 1) size += other.size;
      }
      models.push_back({repo, f.path, quant_of(f.path), folder / f.path, size});
    }
  };
  for (const fs::path& owner : folders(cache / "hf"))
    for (const fs::path& name : folders(owner)) {
      const std::string repo = owner.filename().string() + "/" + name.filename().string();
      if (is_valid_repo_id(repo)) add(repo, name);
    }
  for (const fs::path& host : folders(cache / "url")) add("url/" + host.filename().string(), host);
  std::sort(models.begin(), models.end(),
            [](const CachedModel& a, const CachedModel& b) { return std::tie(a.repo, a.file) < std::tie(b.repo, b.file); });
  return models;
}

std::vector<RepoFile> list_repo_files(const std::string& repo, const HubOptions& options) {
  if (!is_valid_repo_id(repo)) throw_error("'{}' is not a Hugging Face repo id (OWNER/NAME)", repo);
  return fetch_listing(repo, options).files;
}

fs::path resolve_hf_model(const std::string& spec, const std::string& hf_file, const HubOptions& options) {
  const RepoSpec parsed = parse_repo_spec(spec);
  const fs::path cache = resolved_cache(options);
  const fs::path folder = repo_folder(cache, parsed.repo);
  if (options.offline) {
    const std::vector<RepoFile> files = cached_files(folder);
    if (files.empty())
      throw_error("--offline: {} is not in the cache ({}); run once without --offline to download it", parsed.repo,
                  folder.string());
    std::vector<RepoFile> chosen;
    try {
      chosen = choose_model_files(parsed.repo, files, parsed.quant, hf_file);
    } catch (const Error& e) {
      throw_error("--offline: {} (in the cache, {})", e.what(), folder.string());
    }
    return folder / chosen.front().path;
  }
  RepoListing listing;
  try {
    listing = fetch_listing(parsed.repo, options);
  } catch (const detail::Unreachable& e) {
    // As llama.cpp: with the hub out of reach, a model already in the cache still runs.
    const std::vector<RepoFile> files = cached_files(folder);
    if (files.empty()) throw;
    const fs::path path = folder / choose_model_files(parsed.repo, files, parsed.quant, hf_file).front().path;
    warn(fmt::format("{}; using the cached {}", e.what(), path.string()));
    return path;
  }
  const std::vector<RepoFile> chosen = choose_model_files(parsed.repo, listing.files, parsed.quant, hf_file);
  const std::string endpoint = resolved_endpoint(options);
  for (const RepoFile& file : chosen) {
    const fs::path local = folder / file.path;
    if (cached_and_current(local, file)) continue;
    std::error_code ec;
    fs::remove(local.string() + ".sha256", ec);
    const std::string url = endpoint + "/" + parsed.repo + "/resolve/" + listing.commit + "/" + detail::url_escape(file.path, true);
    const std::string sha256 = detail::download(url, local, {file.size, file.sha256}, options.token,
                                                parsed.repo + "/" + file.path, options.report);
    write_sidecar(local.string() + ".sha256", sha256);
  }
  return folder / chosen.front().path;
}

fs::path resolve_model_url(const std::string& url, const HubOptions& options) {
  const size_t scheme_end = url.find("://");
  const std::string scheme = scheme_end == std::string::npos ? "" : url.substr(0, scheme_end);
  if (scheme != "http" && scheme != "https") throw_error("--model-url '{}': not an http or https URL", url);
  if (url.size() > 8192 || std::any_of(url.begin(), url.end(), [](unsigned char c) { return c <= 0x20 || c == 0x7f; }))
    throw_error("--model-url: the URL holds spaces or control bytes");
  const size_t host_start = scheme_end + 3;
  const size_t path_start = std::min(url.find_first_of("/?#", host_start), url.size());
  std::string host = url.substr(host_start, path_start - host_start);
  if (const size_t at = host.rfind('@'); at != std::string::npos) host = host.substr(at + 1);  // no credentials in a path
  for (char& c : host)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '-') c = '_';
  if (host.empty() || host.find_first_not_of('.') == std::string::npos) throw_error("--model-url '{}': no host", url);
  std::string path = url.substr(path_start);
  path = path.substr(0, path.find_first_of("?#"));
  std::string name(base_name(path));
  for (char& c : name)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '-' && c != '_') c = '_';
  if (name.empty() || name.front() == '.') name = "model" + name;
  if (!ends_with(name, ".gguf")) name += ".gguf";
  const fs::path local = resolved_cache(options) / "url" / host / (sha256_hex(url.data(), url.size()).substr(0, 16) + "-" + name);
  std::error_code ec;
  if (fs::is_regular_file(local, ec)) return local;
  if (options.offline)
    throw_error("--offline: {} is not in the cache ({}); run once without --offline to download it", url, local.string());
  const std::string sha256 = detail::download(url, local, {}, /*token: only for the hub*/ "", std::string(base_name(path)), options.report);
  write_sidecar(local.string() + ".sha256", sha256);
  return local;
}

}  // namespace okapi::hub

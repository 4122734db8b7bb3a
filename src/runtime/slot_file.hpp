// Slot files: a scheduler slot's tokens and KV cells on disk, so that a conversation's cache
// survives a restart (llama-server's POST /slots/{id}?action=save|restore). The layout starts as
// llama-server's state file does, so its tests (and tools) read the token list:
//   u32 magic "OKSL", u32 version, u32 payload words, then the payload: u32 words, either
//   llama-server's packed form (0xFFFFFFFF, state version 1, u32 n, n tokens, u32 0 media) or a
//   plain token list (older llama-server files);
// then okapi's KV section: "okapi-kv", u32 version, the model's identity (fingerprint, layers,
// kv heads, head widths, vocabulary), the cache type's name, u64 positions, u64 cell bytes, the
// cells (KvStore::save_cells) and their FNV-1a checksum. Everything is checked against the slot
// that restores it before its cache is touched: another model's file, another cache type, a
// truncated or corrupt file are refused with okapi::Error.
#pragma once
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "kv/kv_store.hpp"
#include "runtime/engine.hpp"
#include "tokenizer/vocab.hpp"

namespace okapi::runtime {

// What identifies a model's KV cells: its architecture, sizes, parameter count and file size.
uint64_t model_fingerprint(const Engine& engine);

struct SlotFileStats {
  int64_t tokens = 0;  // tokens whose K/V the file holds
  uint64_t bytes = 0;  // the file's size
};

// Writes `tokens` (positions [0, tokens.size()) of `kv`) to `path` (a temporary file renamed over
// it, so a reader never sees half a file). Throws okapi::Error when the store cannot save its
// cells or the file cannot be written.
SlotFileStats write_slot_file(const std::filesystem::path& path, const std::vector<tokenizer::TokenId>& tokens,
                              const kv::KvStore& kv, uint64_t fingerprint, int64_t n_vocab);

struct SlotFileContents {
  std::vector<tokenizer::TokenId> tokens;
  std::string cells;  // for KvStore::load_cells(tokens.size(), cells)
  uint64_t bytes = 0;
};
// Reads a slot file for a slot of `kv`'s type and shape (at most kv.n_ctx() tokens) on the model
// with `fingerprint`. Throws okapi::Error saying what does not match or where the file is broken.
SlotFileContents read_slot_file(const std::filesystem::path& path, const kv::KvStore& kv, uint64_t fingerprint,
                                int64_t n_vocab);

}  // namespace okapi::runtime

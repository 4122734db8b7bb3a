// The individual sampling stages, each acting on a candidate list the way the llama_sampler of
// the same name does in llama.cpp (src/llama-sampling.cpp, c392e509). Kept separate from the
// chain (sampler.hpp) so each can be tested on hand-made distributions.
#pragma once
#include <cstddef>
#include <cstdint>
#include <deque>
#include <random>
#include <span>
#include <unordered_map>
#include <vector>

namespace okapi::sample {

using TokenId = int32_t;

struct Candidate {
  TokenId id = 0;
  float logit = 0.0f;
  float p = 0.0f;  // valid after softmax()
};

// llama_token_data_array: the candidates plus whether they are sorted by descending logit.
struct Candidates {
  std::vector<Candidate> items;
  bool sorted = false;

  static Candidates from_logits(std::span<const float> logits);
  size_t size() const { return items.size(); }
};

// Sorts by descending logit (ties: lower id first, so results never depend on the sort
// algorithm) and sets p = softmax(logit), computed in float as llama.cpp does.
void softmax(Candidates& c);
// Keeps the k most likely (k <= 0: no-op). Leaves the list sorted.
void top_k(Candidates& c, int32_t k);
// Locally typical sampling (p >= 1: no-op).
void typical(Candidates& c, float p, size_t min_keep);
// Keeps the smallest prefix whose cumulative probability reaches p (p >= 1: no-op).
void top_p(Candidates& c, float p, size_t min_keep);
// Keeps tokens whose probability is at least p times the largest one, i.e. whose logit is at
// least max_logit + log(p) (p <= 0: no-op).
void min_p(Candidates& c, float p, size_t min_keep);
// Divides the logits by temp; temp <= 0 keeps only the largest logit (the rest become -inf).
void temperature(Candidates& c, float temp);
// Index (into c.items) of the largest logit; first one on ties.
size_t argmax_index(const Candidates& c);
// Softmax, then one draw of std::discrete_distribution over the probabilities in sorted order
// (llama_sampler_dist). Returns an index into c.items.
size_t draw(Candidates& c, std::mt19937& rng);

// Repetition / frequency / presence penalties over the last `last_n` accepted tokens
// (llama_sampler_penalties). last_n == 0 disables, last_n < 0 means an unbounded window.
class Penalties {
 public:
  Penalties(int32_t last_n, float repeat, float frequency, float presence);
  bool active() const;
  void apply(Candidates& c) const;
  void accept(TokenId token);
  void reset();
  int count(TokenId token) const;  // occurrences inside the window

 private:
  int32_t last_n_;
  float repeat_, frequency_, presence_;
  std::deque<TokenId> window_;
  std::unordered_map<TokenId, int> counts_;
};

}  // namespace okapi::sample

#include "core/tokenizer/bpe_merge.h"

#include <queue>

namespace pulse {
namespace {

struct Candidate {
  int64_t rank;
  int32_t left;  // index of the left symbol; the right one is next[left] when still valid
  int32_t right;
  int32_t merged_id;
};

struct LaterCandidate {
  bool operator()(const Candidate& a, const Candidate& b) const {
    return a.rank != b.rank ? a.rank > b.rank : a.left > b.left;
  }
};

}  // namespace

void ApplyMerges(const MergeTable& merges, std::vector<int32_t>& symbols) {
  const int32_t n = static_cast<int32_t>(symbols.size());
  if (n < 2) return;
  std::vector<int32_t> next(n);
  std::vector<int32_t> prev(n);
  for (int32_t i = 0; i < n; ++i) {
    next[i] = i + 1;  // n: none
    prev[i] = i - 1;
  }
  std::priority_queue<Candidate, std::vector<Candidate>, LaterCandidate> queue;
  const auto consider = [&](int32_t left, int32_t right) {
    if (left < 0 || right >= n) return;
    const auto it = merges.find(MergeKey(symbols[left], symbols[right]));
    if (it != merges.end()) queue.push({it->second.rank, left, right, it->second.id});
  };
  for (int32_t i = 0; i + 1 < n; ++i) consider(i, i + 1);

  std::vector<bool> alive(n, true);
  while (!queue.empty()) {
    const Candidate top = queue.top();
    queue.pop();
    // Stale when either side has been merged away or changed since the candidate was pushed.
    if (!alive[top.left] || !alive[top.right] || next[top.left] != top.right) continue;
    const auto it = merges.find(MergeKey(symbols[top.left], symbols[top.right]));
    if (it == merges.end() || it->second.id != top.merged_id || it->second.rank != top.rank) {
      continue;
    }
    symbols[top.left] = top.merged_id;
    alive[top.right] = false;
    next[top.left] = next[top.right];
    if (next[top.left] < n) prev[next[top.left]] = top.left;
    consider(prev[top.left], top.left);
    consider(top.left, next[top.left]);
  }
  int32_t out = 0;
  for (int32_t i = 0; i < n; ++i) {
    if (alive[i]) symbols[out++] = symbols[i];
  }
  symbols.resize(out);
}

}  // namespace pulse

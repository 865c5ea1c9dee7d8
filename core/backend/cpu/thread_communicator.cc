#include "core/backend/cpu/thread_communicator.h"

#include <cstring>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"

namespace pulse {
namespace {

// What the ranks of a group share: where each rank's input is, and the barrier.
class ThreadGroup {
 public:
  explicit ThreadGroup(int32_t size) : size_(size), inputs_(static_cast<size_t>(size)) {}

  int32_t size() const { return size_; }

  // Publishes rank's input and waits for every rank's; false when the group was aborted.
  bool Publish(int32_t rank, const void* input) {
    inputs_[static_cast<size_t>(rank)] = input;
    return Meet();
  }
  const void* input(int32_t rank) const { return inputs_[static_cast<size_t>(rank)]; }
  // Waits until every rank has read the inputs; false when the group was aborted.
  bool Done() { return Meet(); }

  void Abort() {
    absl::MutexLock lock(&mu_);
    aborted_ = true;
  }
  void Reset() {
    absl::MutexLock lock(&mu_);
    aborted_ = false;
    arrived_ = 0;
  }

 private:
  bool Meet() {
    absl::MutexLock lock(&mu_);
    if (aborted_) return false;
    const uint64_t generation = generation_;
    if (++arrived_ == size_) {
      arrived_ = 0;
      ++generation_;
      return true;
    }
    Waiter waiter{.group = this, .generation = generation};
    mu_.Await(absl::Condition(&Waiter::Released, &waiter));
    return generation_ != generation;
  }

  // A rank waiting at the barrier of `generation`.
  struct Waiter {
    ThreadGroup* group;
    uint64_t generation;
    // Called by the mutex with it held.
    static bool Released(Waiter* waiter) ABSL_NO_THREAD_SAFETY_ANALYSIS {
      return waiter->group->aborted_ || waiter->group->generation_ != waiter->generation;
    }
  };

  const int32_t size_;
  // Written by its rank before the barrier, read by the others between the two barriers.
  std::vector<const void*> inputs_;
  absl::Mutex mu_;
  int32_t arrived_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t generation_ ABSL_GUARDED_BY(mu_) = 0;
  bool aborted_ ABSL_GUARDED_BY(mu_) = false;
};

class ThreadCommunicator final : public Communicator {
 public:
  ThreadCommunicator(std::shared_ptr<ThreadGroup> group, int32_t rank)
      : group_(std::move(group)), rank_(rank) {}

  int32_t rank() const override { return rank_; }
  int32_t size() const override { return group_->size(); }

  void AllGather(const void* in, int64_t rows, size_t row_bytes, void* out) override {
    if (!Publish(in)) return;
    auto* dst = static_cast<char*>(out);
    const size_t out_row = row_bytes * static_cast<size_t>(size());
    for (int32_t r = 0; r < size(); ++r) {
      const auto* src = static_cast<const char*>(group_->input(r));
      for (int64_t i = 0; i < rows; ++i) {
        std::memcpy(dst + static_cast<size_t>(i) * out_row + static_cast<size_t>(r) * row_bytes,
                    src + static_cast<size_t>(i) * row_bytes, row_bytes);
      }
    }
    Done();
  }

  void AllReduceSum(const float* in, int64_t count, float* out) override {
    if (!Publish(in)) return;
    const auto* first = static_cast<const float*>(group_->input(0));
    std::memcpy(out, first, static_cast<size_t>(count) * sizeof(float));
    for (int32_t r = 1; r < size(); ++r) {
      const auto* src = static_cast<const float*>(group_->input(r));
      for (int64_t i = 0; i < count; ++i) out[i] += src[i];
    }
    Done();
  }

  void Abort() override { group_->Abort(); }
  void Reset() override { group_->Reset(); }
  absl::Status TakeStatus() override { return std::exchange(failure_, absl::OkStatus()); }

 private:
  bool Publish(const void* in) {
    if (group_->Publish(rank_, in)) return true;
    Fail();
    return false;
  }
  void Done() {
    if (!group_->Done()) Fail();
  }
  void Fail() {
    if (failure_.ok()) {
      failure_ = absl::AbortedError(
          absl::StrFormat("rank %d: a collective was aborted (another rank left the step)", rank_));
    }
  }

  std::shared_ptr<ThreadGroup> group_;
  const int32_t rank_;
  absl::Status failure_;
};

}  // namespace

absl::StatusOr<std::vector<std::unique_ptr<Communicator>>> CreateThreadCommunicators(int32_t size) {
  if (size < 1) {
    return absl::InvalidArgumentError(absl::StrFormat("%d ranks: at least one", size));
  }
  auto group = std::make_shared<ThreadGroup>(size);
  std::vector<std::unique_ptr<Communicator>> ranks;
  ranks.reserve(static_cast<size_t>(size));
  for (int32_t r = 0; r < size; ++r) {
    ranks.push_back(std::make_unique<ThreadCommunicator>(group, r));
  }
  return ranks;
}

}  // namespace pulse

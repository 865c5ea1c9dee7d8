#include "core/model/parallel_runner.h"

#include <algorithm>
#include <thread>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"

namespace pulse {

// One thread a rank past the first, each running the job of the current round for its rank.
class RankThreads {
 public:
  explicit RankThreads(int32_t ranks) {
    for (int32_t rank = 1; rank < ranks; ++rank) {
      threads_.emplace_back([this, rank] { Serve(rank); });
    }
  }
  RankThreads(const RankThreads&) = delete;
  RankThreads& operator=(const RankThreads&) = delete;
  ~RankThreads() {
    {
      absl::MutexLock lock(&mu_);
      stopping_ = true;
    }
    for (std::thread& thread : threads_) thread.join();
  }

  // Runs job(rank) for every rank at once, rank 0 on the calling thread, and returns when all
  // have returned.
  void Run(absl::FunctionRef<void(int32_t)> job) {
    {
      absl::MutexLock lock(&mu_);
      job_ = &job;
      pending_ = static_cast<int32_t>(threads_.size());
      ++round_;
    }
    job(0);
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(
        +[](int32_t* pending) { return *pending == 0; }, &pending_));
    job_ = nullptr;
  }

 private:
  void Serve(int32_t rank) {
    Waiter waiter{.threads = this};
    while (true) {
      const absl::FunctionRef<void(int32_t)>* job = nullptr;
      {
        absl::MutexLock lock(&mu_);
        mu_.Await(absl::Condition(&Waiter::HasWork, &waiter));
        if (stopping_) return;
        waiter.served = round_;
        job = job_;
      }
      (*job)(rank);
      absl::MutexLock lock(&mu_);
      --pending_;
    }
  }
  // A thread waiting for the round after the one it served last.
  struct Waiter {
    RankThreads* threads;
    uint64_t served = 0;
    // Called by the mutex with it held.
    static bool HasWork(Waiter* waiter) ABSL_NO_THREAD_SAFETY_ANALYSIS {
      return waiter->threads->stopping_ || waiter->threads->round_ != waiter->served;
    }
  };

  absl::Mutex mu_;
  const absl::FunctionRef<void(int32_t)>* job_ ABSL_GUARDED_BY(mu_) = nullptr;
  uint64_t round_ ABSL_GUARDED_BY(mu_) = 0;
  int32_t pending_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

absl::StatusOr<ParallelRunner> ParallelRunner::Create(std::vector<ModelRunner> ranks) {
  if (ranks.empty()) return absl::InvalidArgumentError("parallel runner: no rank");
  const auto size = static_cast<int32_t>(ranks.size());
  const ModelRunner& first = ranks.front();
  for (int32_t r = 0; r < size; ++r) {
    const ModelRunner& rank = ranks[static_cast<size_t>(r)];
    const TensorShard& shard = rank.model().shard();
    const ModelRunnerOptions& options = rank.options();
    if (shard.rank != r || shard.size != size ||
        rank.model().config().num_layers != first.model().config().num_layers ||
        rank.cache().num_blocks() != first.cache().num_blocks() ||
        options.max_step_tokens != first.options().max_step_tokens ||
        options.max_seqs != first.options().max_seqs ||
        options.max_blocks_per_seq != first.options().max_blocks_per_seq ||
        options.max_logit_rows != first.options().max_logit_rows ||
        options.max_micro_batches != first.options().max_micro_batches ||
        options.offload.has_value() != first.options().offload.has_value()) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "parallel runner: runner %d of %d is over shard %d of %d, or its options or cache "
          "differ from rank 0's",
          r, size, shard.rank, shard.size));
    }
  }
  std::unique_ptr<RankThreads> threads;
  if (size > 1) threads = std::make_unique<RankThreads>(size);
  return ParallelRunner(std::move(ranks), std::move(threads));
}

ParallelRunner::ParallelRunner(std::vector<ModelRunner> ranks, std::unique_ptr<RankThreads> threads)
    : ranks_(std::move(ranks)), threads_(std::move(threads)), statuses_(ranks_.size()) {}

ParallelRunner::ParallelRunner(ParallelRunner&&) noexcept = default;
ParallelRunner& ParallelRunner::operator=(ParallelRunner&&) noexcept = default;
ParallelRunner::~ParallelRunner() = default;

absl::Status ParallelRunner::OnEveryRank(
    absl::FunctionRef<absl::Status(ModelRunner&, int32_t)> step) {
  if (threads_ == nullptr) return step(ranks_.front(), 0);
  // Every rank is between steps: a collective aborted in the last step works again.
  ranks_.front().ranks()->Reset();
  threads_->Run([&](int32_t r) {
    ModelRunner& rank = ranks_[static_cast<size_t>(r)];
    absl::Status& status = statuses_[static_cast<size_t>(r)];
    status = step(rank, r);
    // Its peers must not wait for collectives it will not join.
    if (!status.ok()) rank.ranks()->Abort();
  });
  const auto cause = std::find_if(statuses_.begin(), statuses_.end(), [](const absl::Status& s) {
    return !s.ok() && !absl::IsAborted(s);
  });
  if (cause != statuses_.end()) return *cause;
  for (const absl::Status& status : statuses_) PULSE_RETURN_IF_ERROR(status);
  return absl::OkStatus();
}

absl::Status ParallelRunner::Forward(const StepBatch& batch, std::span<float> logits,
                                     int32_t micro_batches) {
  return OnEveryRank([&](ModelRunner& rank, int32_t r) {
    if (r == 0) return rank.Forward(batch, logits, micro_batches);
    return rank.ForwardAsPeer(batch, micro_batches);
  });
}

absl::Status ParallelRunner::ForwardAndSample(const StepBatch& batch,
                                              std::span<const TokenSampling> sampling,
                                              std::span<const int32_t> penalised_ids,
                                              std::span<int32_t> tokens, int32_t micro_batches) {
  return OnEveryRank([&](ModelRunner& rank, int32_t r) {
    if (r == 0) return rank.ForwardAndSample(batch, sampling, penalised_ids, tokens, micro_batches);
    return rank.ForwardAsPeer(batch, micro_batches);
  });
}

absl::Status ParallelRunner::EachRank(absl::FunctionRef<absl::Status(ModelRunner&)> call) {
  for (ModelRunner& rank : ranks_) PULSE_RETURN_IF_ERROR(call(rank));
  return absl::OkStatus();
}

absl::Status ParallelRunner::ForgetSparse(uint64_t key) {
  return EachRank([key](ModelRunner& rank) { return rank.ForgetSparse(key); });
}

absl::Status ParallelRunner::MoveToHost(std::span<const int32_t> device_blocks,
                                        std::span<const int32_t> host_blocks) {
  return EachRank([&](ModelRunner& rank) { return rank.MoveToHost(device_blocks, host_blocks); });
}

absl::Status ParallelRunner::MoveToDevice(std::span<const int32_t> host_blocks,
                                          std::span<const int32_t> device_blocks) {
  return EachRank([&](ModelRunner& rank) { return rank.MoveToDevice(host_blocks, device_blocks); });
}

absl::Status ParallelRunner::FreeSlots(std::span<const int32_t> host_blocks) {
  return EachRank([&](ModelRunner& rank) { return rank.FreeSlots(host_blocks); });
}

absl::Status ParallelRunner::ReserveHostBlocks(int32_t blocks) {
  return EachRank([blocks](ModelRunner& rank) {
    HostTier* tier = rank.host_tier();
    return tier == nullptr ? absl::OkStatus() : tier->Reserve(blocks);
  });
}

absl::StatusOr<double> ParallelRunner::CalibrateLink(int64_t bytes) {
  double slowest = 0;
  for (size_t r = 0; r < ranks_.size(); ++r) {
    PULSE_ASSIGN_OR_RETURN(const double rate, ranks_[r].CalibrateLink(bytes));
    slowest = r == 0 ? rate : std::min(slowest, rate);
  }
  return slowest;
}

int64_t ParallelRunner::step_host_waits() const {
  int64_t most = 0;
  for (const ModelRunner& rank : ranks_) most = std::max(most, rank.step_host_waits());
  return most;
}

}  // namespace pulse

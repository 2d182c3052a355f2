// serve_learner and RemoteCollectors (tensordict/collectors.h): a learner
// and actor processes over c10d, in Python tensordict's wire protocol (the
// dist/ layer's send, recv, init_remote and from_remote_init).
#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <c10/util/Exception.h>

#include <utility>
#include <vector>

#include "tensordict/collectors.h"
#include "tensordict/functional.h"

namespace tensordict {

namespace {

// The command dict: "stop", then the weights (when there are any).
TensorDict command(const at::Tensor& stop, const TensorDict& weights) {
  TensorDict out;
  out.set("stop", stop);
  if (!weights.empty()) out.set("weights", weights);
  return out;
}

}  // namespace

void serve_learner(Collector& collector, const Group& pg, int learner) {
  const at::Tensor stop = at::zeros({1}, at::kBool);
  // Received in place into the policy's own tensors.
  const TensorDict received = command(stop, collector.policy_weights());
  TensorDict wire;  // the batch, consolidated, after the first
  for (;;) {
    {
      const at::NoGradGuard no_grad;  // a write into parameters
      recv(received, learner, pg);
    }
    if (stop.item<bool>()) return;
    const TensorDict batch = collector.next();
    if (wire.empty()) {
      wire = batch.consolidate();
      init_remote(wire, learner, pg);
    } else {
      (void)wire.update_(batch);
      send(wire, learner, pg, 0, /*consolidated=*/true);
    }
  }
}

struct RemoteCollectors::Impl {
  Impl(const Group& g, std::vector<int> a, TensorDict w, int64_t total)
      : pg(g),
        actors(std::move(a)),
        weights(std::move(w)),
        total_frames(total) {}
  Group pg;
  std::vector<int> actors;
  TensorDict weights;
  int64_t total_frames;
  at::Tensor stop = at::zeros({1}, at::kBool);
  std::vector<TensorDict> batches;  // one per actor, as received
  TensorDict stacked;
  int64_t frames = 0;
  bool stopped = false;
};

RemoteCollectors::RemoteCollectors(const Group& pg, std::vector<int> actors,
                                   TensorDict weights, int64_t total_frames)
    : impl_(std::make_unique<Impl>(pg, std::move(actors), std::move(weights),
                                   total_frames)) {
  TORCH_CHECK_VALUE(!impl_->actors.empty(),
                    "RemoteCollectors: expected at least one actor rank");
  TORCH_CHECK_VALUE(total_frames >= -1 && total_frames != 0,
                    "RemoteCollectors: total_frames must be positive or -1 "
                    "(endless), got ",
                    total_frames);
  for (int rank : impl_->actors) {
    TORCH_CHECK_VALUE(rank >= 0 && rank < pg.size() && rank != pg.rank(),
                      "RemoteCollectors: actor rank ", rank,
                      " is not another rank of the group of size ", pg.size());
  }
  impl_->batches.resize(impl_->actors.size());
}

RemoteCollectors::~RemoteCollectors() {
  try {
    shutdown();
  } catch (...) {  // an actor already gone: nothing to tell it
  }
}

TensorDict RemoteCollectors::next() {
  Impl& s = *impl_;
  TORCH_CHECK(!s.stopped, "RemoteCollectors: the collectors were shut down");
  TORCH_CHECK(!finished(), "RemoteCollectors: total_frames (", s.total_frames,
              ") were received");
  const TensorDict cmd = command(s.stop, s.weights);
  for (int rank : s.actors) send(cmd, rank, s.pg);
  for (size_t i = 0; i < s.actors.size(); ++i) {
    if (s.batches[i].empty()) {
      s.batches[i] = from_remote_init(s.actors[i], s.pg);
    } else {
      recv(s.batches[i], s.actors[i], s.pg, 0, /*consolidated=*/true);
    }
    s.frames += s.batches[i].numel();
  }
  if (s.stacked.empty()) {
    s.stacked = stack(s.batches, 0);
  } else {
    (void)stack_out(s.stacked, s.batches, 0);
  }
  return s.stacked;
}

bool RemoteCollectors::finished() const {
  return impl_->stopped ||
         (impl_->total_frames >= 0 && impl_->frames >= impl_->total_frames);
}

void RemoteCollectors::shutdown() {
  Impl& s = *impl_;
  if (s.stopped) return;
  s.stopped = true;
  s.stop.fill_(true);
  const TensorDict cmd = command(s.stop, s.weights);
  for (int rank : s.actors) send(cmd, rank, s.pg);
}

int64_t RemoteCollectors::frames() const { return impl_->frames; }

}  // namespace tensordict

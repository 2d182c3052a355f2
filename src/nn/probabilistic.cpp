// ProbabilisticTensorDictModule / ProbabilisticTensorDictSequential and the
// interaction type (see tensordict/probabilistic.h).
//
// The module is a TensorDictModule whose computation builds the
// distribution from the in-keys' tensors and takes a value from it (plus
// its log-probability), so that reading, checking and the all-or-nothing
// write are TensorDictModule's. Its settings live in one immutable `State`
// that the computation and the module share.
#include "tensordict/probabilistic.h"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <cctype>
#include <iterator>
#include <utility>

#include "core/internal.h"

namespace tensordict {

namespace D = distributions;

namespace {

thread_local c10::optional<InteractionType> g_interaction_type;

constexpr InteractionType kAllTypes[] = {
    InteractionType::MODE, InteractionType::MEDIAN, InteractionType::MEAN,
    InteractionType::RANDOM, InteractionType::DETERMINISTIC};

}  // namespace

std::string to_string(InteractionType type) {
  switch (type) {
    case InteractionType::MODE:
      return "mode";
    case InteractionType::MEDIAN:
      return "median";
    case InteractionType::MEAN:
      return "mean";
    case InteractionType::RANDOM:
      return "random";
    case InteractionType::DETERMINISTIC:
      return "deterministic";
  }
  return "unknown";
}

InteractionType interaction_type_from_string(const std::string& name) {
  std::string lower = name;
  std::transform(lower.begin(), lower.end(), lower.begin(), [](char c) {
    return static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  });
  for (const InteractionType t : kAllTypes) {
    if (to_string(t) == lower) return t;
  }
  TORCH_CHECK_VALUE(false, "interaction type '", name,
                    "' is not one of mode, median, mean, random, "
                    "deterministic");
}

c10::optional<InteractionType> interaction_type() { return g_interaction_type; }

namespace {

// Throws a c10::ValueError, prefixed by `what`, when `type` is none of
// InteractionType's values (an integer cast to it).
void check_known(InteractionType type, const char* what) {
  const bool known = std::find(std::begin(kAllTypes), std::end(kAllTypes),
                               type) != std::end(kAllTypes);
  TORCH_CHECK_VALUE(known, what, static_cast<int>(type),
                    " is not an InteractionType (MODE, MEDIAN, MEAN, RANDOM, "
                    "DETERMINISTIC)");
}

}  // namespace

InteractionTypeGuard::InteractionTypeGuard(c10::optional<InteractionType> type)
    : previous_(g_interaction_type) {
  if (type) check_known(*type, "InteractionTypeGuard: ");
  g_interaction_type = type;
}

InteractionTypeGuard::~InteractionTypeGuard() {
  g_interaction_type = previous_;
}

// ---- ProbabilisticTensorDictModule ------------------------------------------

struct ProbabilisticTensorDictModule::State {
  State(std::vector<NestedKey> in, NestedKey sample, NestedKey log_prob,
        D::DistributionFactory f, ProbabilisticOptions o)
      : in_keys(std::move(in)),
        sample_key(std::move(sample)),
        log_prob_key(std::move(log_prob)),
        factory(std::move(f)),
        options(std::move(o)) {}

  std::vector<NestedKey> in_keys;
  NestedKey sample_key;
  NestedKey log_prob_key;
  D::DistributionFactory factory;
  ProbabilisticOptions options;  // dist_keys_ filled in

  // The distribution of the in-keys' tensors, in in-key order.
  [[nodiscard]] std::shared_ptr<D::Distribution> build(
      const std::vector<at::Tensor>& params) const {
    D::DistributionParams p;
    for (size_t i = 0; i < params.size(); ++i) {
      p.add(options.dist_keys()[i], params[i]);
    }
    std::shared_ptr<D::Distribution> dist = factory(p);
    TORCH_CHECK(dist != nullptr,
                "ProbabilisticTensorDictModule: the distribution factory "
                "returned no distribution");
    return dist;
  }

  [[nodiscard]] InteractionType current() const {
    return g_interaction_type.value_or(options.default_interaction_type());
  }

  // Python's _dist_sample.
  [[nodiscard]] at::Tensor draw(const D::Distribution& d) const {
    const InteractionType type = current();
    TORCH_CHECK_NOT_IMPLEMENTED(type != InteractionType::MEDIAN,
                                "ProbabilisticTensorDictModule: "
                                "InteractionType::MEDIAN is not implemented "
                                "for ",
                                d.name());
    switch (type) {
      case InteractionType::DETERMINISTIC:
        return d.deterministic_sample();
      case InteractionType::MODE:
        return d.mode();
      case InteractionType::MEDIAN:
        break;  // rejected above
      case InteractionType::MEAN:
        try {
          return d.mean();
        } catch (const c10::NotImplementedError&) {
          // No closed form: the mean of draws, as Python.
        }
        return (d.has_rsample() ? d.rsample({options.n_empirical_estimate()},
                                            options.generator())
                                : d.sample({options.n_empirical_estimate()},
                                           options.generator()))
            .mean(0);
      case InteractionType::RANDOM:
        return d.has_rsample() ? d.rsample({}, options.generator())
                               : d.sample({}, options.generator());
    }
    // The guard and the constructor let no other value through.
    TORCH_INTERNAL_ASSERT(false, "unknown interaction type ", to_string(type));
  }
};

namespace {

using State = ProbabilisticTensorDictModule::State;

std::shared_ptr<const State> make_state(std::vector<NestedKey> in_keys,
                                        std::vector<NestedKey> out_keys,
                                        D::DistributionFactory factory,
                                        ProbabilisticOptions options) {
  TORCH_CHECK_VALUE(out_keys.size() == 1,
                    "ProbabilisticTensorDictModule: expected one out_key (the "
                    "value's key), got ",
                    detail::key_vec_str(out_keys));
  TORCH_CHECK_VALUE(factory != nullptr,
                    "ProbabilisticTensorDictModule: the distribution factory "
                    "is empty");
  check_known(options.default_interaction_type(),
              "ProbabilisticTensorDictModule: default_interaction_type ");
  TORCH_CHECK_VALUE(options.n_empirical_estimate() >= 1,
                    "ProbabilisticTensorDictModule: n_empirical_estimate must "
                    "be positive, got ",
                    options.n_empirical_estimate());
  if (options.dist_keys().empty()) {
    for (const NestedKey& k : in_keys) options.dist_keys().push_back(k.back());
  }
  TORCH_CHECK_VALUE(options.dist_keys().size() == in_keys.size(),
                    "ProbabilisticTensorDictModule: dist_keys has ",
                    options.dist_keys().size(), " names for ", in_keys.size(),
                    " in_keys ", detail::key_vec_str(in_keys));
  // Python's _add_suffix(out_key, "_log_prob").
  std::vector<std::string> parts = out_keys[0].parts();
  parts.back() += "_log_prob";
  NestedKey log_prob_key = options.log_prob_key().value_or(NestedKey(parts));
  TORCH_CHECK_VALUE(log_prob_key != out_keys[0],
                    "ProbabilisticTensorDictModule: log_prob_key ",
                    log_prob_key.str(), " is also the out_key");
  return std::make_shared<const State>(
      std::move(in_keys), std::move(out_keys[0]), std::move(log_prob_key),
      std::move(factory), std::move(options));
}

TensorDictModule::Function sampler(const std::shared_ptr<const State>& s) {
  return [s](const std::vector<at::Tensor>& in) -> std::vector<at::Tensor> {
    const std::shared_ptr<D::Distribution> dist = s->build(in);
    at::Tensor value = s->draw(*dist);
    if (!s->options.return_log_prob()) return {std::move(value)};
    at::Tensor log_prob = dist->log_prob(value);
    return {std::move(value), std::move(log_prob)};
  };
}

std::vector<NestedKey> written_keys(const State& s) {
  std::vector<NestedKey> out{s.sample_key};
  if (s.options.return_log_prob()) out.push_back(s.log_prob_key);
  return out;
}

}  // namespace

ProbabilisticTensorDictModule::ProbabilisticTensorDictModule(
    std::vector<NestedKey> in_keys, std::vector<NestedKey> out_keys,
    D::DistributionFactory factory, ProbabilisticOptions options)
    : ProbabilisticTensorDictModule(
          make_state(std::move(in_keys), std::move(out_keys),
                     std::move(factory), std::move(options))) {}

ProbabilisticTensorDictModule::ProbabilisticTensorDictModule(
    std::shared_ptr<const State> state)
    : TensorDictModule(sampler(state), state->in_keys, written_keys(*state)),
      state_(std::move(state)) {}

std::shared_ptr<D::Distribution> ProbabilisticTensorDictModule::get_dist(
    const TensorDict& td) const {
  std::vector<at::Tensor> params;
  params.reserve(state_->in_keys.size());
  for (const NestedKey& k : state_->in_keys) {
    TORCH_CHECK_INDEX(td.contains(k), "ProbabilisticTensorDictModule: in_key ",
                      k.str(), " is not in the dict (keys: ",
                      detail::key_list_str(detail::TensorDictImpl::of(td)),
                      ")");
    params.push_back(td.get(k));
  }
  return state_->build(params);
}

at::Tensor ProbabilisticTensorDictModule::log_prob(const TensorDict& td) const {
  const std::shared_ptr<D::Distribution> dist = get_dist(td);
  const NestedKey& key = state_->sample_key;
  TORCH_CHECK_INDEX(td.contains(key),
                    "ProbabilisticTensorDictModule::log_prob: the value's key ",
                    key.str(), " is not in the dict (keys: ",
                    detail::key_list_str(detail::TensorDictImpl::of(td)), ")");
  return dist->log_prob(td.get(key));
}

const NestedKey& ProbabilisticTensorDictModule::sample_key() const {
  return state_->sample_key;
}
const NestedKey& ProbabilisticTensorDictModule::log_prob_key() const {
  return state_->log_prob_key;
}
const std::vector<std::string>& ProbabilisticTensorDictModule::dist_keys()
    const {
  return state_->options.dist_keys();
}
const ProbabilisticOptions& ProbabilisticTensorDictModule::options() const {
  return state_->options;
}
InteractionType ProbabilisticTensorDictModule::current_interaction_type()
    const {
  return state_->current();
}

// ---- ProbabilisticTensorDictSequential --------------------------------------

namespace {

std::vector<TensorDictModule> then(const std::vector<TensorDictModule>& first,
                                   const TensorDictModule& last) {
  std::vector<TensorDictModule> all = first;
  all.push_back(last);
  return all;
}

}  // namespace

ProbabilisticTensorDictSequential::ProbabilisticTensorDictSequential(
    std::vector<TensorDictModule> modules, ProbabilisticTensorDictModule last)
    : TensorDictSequential(then(modules, last)), last_(std::move(last)) {
  if (!modules.empty()) deterministic_.emplace(std::move(modules));
}

std::shared_ptr<D::Distribution> ProbabilisticTensorDictSequential::get_dist(
    const TensorDict& td) const {
  if (deterministic_.has_value()) {
    // Python's get_dist_params: the modules run under the current
    // interaction type, else the probabilistic module's default.
    const InteractionTypeGuard guard(last_.current_interaction_type());
    (*deterministic_)(td);
  }
  return last_.get_dist(td);
}

at::Tensor ProbabilisticTensorDictSequential::log_prob(
    const TensorDict& td) const {
  const std::shared_ptr<D::Distribution> dist = get_dist(td);
  const NestedKey& key = last_.sample_key();
  TORCH_CHECK_INDEX(
      td.contains(key),
      "ProbabilisticTensorDictSequential::log_prob: the value's key ",
      key.str(), " is not in the dict (keys: ",
      detail::key_list_str(detail::TensorDictImpl::of(td)), ")");
  return dist->log_prob(td.get(key));
}

}  // namespace tensordict
